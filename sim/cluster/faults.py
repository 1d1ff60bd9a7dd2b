"""Instances and nodes going out of service and back: drains, failures, repairs (issue 31).

Called by the operations of sim.extensions.ops, at the loop's current time, between the model's
events. The model's mechanism, each a stated choice:
- a drained instance takes no new request; what it holds runs to the end (a maintenance drain);
- a failed instance loses its HBM: the KV of its running and queued requests and every copy
  cached there (vLLM and SGLang keep KV in GPU memory only; a restarted engine starts empty).
  Each of its requests goes back to the router and starts over: its prompt is looked up again
  in the tiers that survive (host DRAM, SSD: a hit there is loaded, the rest recomputed). Its
  timestamps restart too, but not its arrival: TTFT and E2E count the time lost to the failure.
  A request whose prefill finished on a healthy prefill instance and that waits on, or moves its
  KV to, a failed decode instance keeps that KV and is only routed to another decode instance;
- a transfer from or to a failed instance stops (its link's other transfers speed up);
- a failed node takes its instances and its host memory (the host-DRAM tier's unit of that node,
  V4.1's SWA pool there);
- a restored instance starts empty (its weights reload within its repair time: the repair time
  is the whole outage).
No request is lost: each one in the system ends once, completed or rejected with a reason
(sim.metrics.invariants checks it at the end of every run).
"""

from __future__ import annotations

from dataclasses import dataclass, field

from sim.cluster.cluster import Cluster
from sim.cluster.instance import Instance
from sim.core.request import Request
from sim.kvcache.store import KVStore

# the fields a request's attempt sets, with their values before it is routed (sim.core.request)
_ATTEMPT_FIELDS = (
    "est_new_tokens", "hit_tokens", "hbm_hit_tokens", "prefix_source", "shared_prefix_hit", "pinned",
    "shared_held", "load_bytes", "swa_load_bytes", "replay_tokens", "swa_junction_tokens", "prefill_chunk_tokens",
    "ctx_before", "computed_tokens", "loads_pending", "reserved_p_bytes", "reserved_d_bytes", "d_pinned",
    "kv_transfer_bytes", "pinst", "dinst", "prefill_pool", "prefill_instance", "decode_pool", "decode_instance",
    "dp_rank", "admitted_s",
    "load_start_s", "load_end_s", "prefill_start_s", "first_token_s", "kv_transfer_start_s",
    "kv_transfer_end_s", "decode_start_s", "terms", "join_step",
)  # fmt: skip
_HANDOFF_FIELDS = ("reserved_d_bytes", "d_pinned", "kv_transfer_bytes", "dinst", "decode_pool",
                   "decode_instance", "kv_transfer_start_s", "kv_transfer_end_s")  # fmt: skip


@dataclass
class FaultStats:
    """What failures did to the requests and the KV (summary.json `extensions.operations`)."""

    instance_failures: int = 0
    node_failures: int = 0
    rerouted: int = 0  # requests sent to another decode instance with their KV (nothing recomputed)
    recomputed: int = 0  # requests that started over (their KV was lost)
    recomputed_ids: list[int] = field(default_factory=list)
    kv_lost_hbm_bytes: float = 0.0  # cached copies and running requests' KV in failed HBM
    kv_lost_host_bytes: float = 0.0  # host-memory tiers of failed nodes


def _nan(x: float) -> bool:
    return x != x


def _blank_request() -> Request:
    """A request as made, before routing: the values `_reset` restores (read from an instance: the
    compiled class keeps no class-level defaults)."""
    return Request(0, 0, 0, 0, 0, None, None, 0.0, 0, 0, 0, 0, 0, 0)


def _reset(req: Request, names: tuple[str, ...], blank: Request) -> None:
    for name in names:
        setattr(req, name, getattr(blank, name))


class Faults:
    """Drains and failures on one simulation's cluster (sim.cluster.build.Simulation)."""

    def __init__(self, cluster: Cluster, store: KVStore, instances: list[Instance]) -> None:
        self.cluster = cluster
        self.store = store
        self.instances = instances
        self.down: set[int] = set()  # failed instances
        self.drained: set[int] = set()
        self.stats = FaultStats()
        self._blank = _blank_request()

    # --- in and out of the router's choice ---

    def serving(self, inst: Instance) -> bool:
        return inst.index not in self.down and inst.index not in self.drained

    def _sync_serving(self) -> None:
        c = self.cluster
        c.front_serving[:] = [i for i in c.front if self.serving(i)]
        c.back_serving[:] = [i for i in c.back if self.serving(i)]
        c.resume_held()

    def drain(self, inst: Instance) -> None:
        self.drained.add(inst.index)
        self._sync_serving()

    def undrain(self, inst: Instance) -> None:
        self.drained.discard(inst.index)
        self._sync_serving()

    # --- failures ---

    def fail(self, inst: Instance) -> None:
        """Instance `inst` fails now (the module doc)."""
        if inst.index in self.down:
            return
        self.down.add(inst.index)
        self.stats.instance_failures += 1
        self._sync_serving()
        now = inst.env.now_s
        hbm = inst.hbm
        self.stats.kv_lost_hbm_bytes += hbm.reserved_bytes + hbm.cached_bytes  # all the KV it held
        restart: list[Request] = []
        to_decode: list[Request] = []
        for req in list(self.cluster.live.values()):
            if req.dinst is inst:
                if _nan(req.kv_transfer_end_s):
                    self._leave_decode(req, now)  # its KV is still on its prefill instance
                    to_decode.append(req)
                else:
                    self._leave_decode(req, now)
                    restart.append(req)
            elif req.pinst is inst and (req.dinst is None or _nan(req.kv_transfer_end_s)):
                if req.dinst is not None:
                    self._leave_decode(req, now)  # its KV's source is gone
                elif req in self.cluster.held_back:
                    self.cluster.held_back.remove(req)  # prefilled, waiting for a decode instance
                self._leave_front(req, now)
                restart.append(req)
        self.store.lose_hbm(inst.index)
        _stop(inst)
        for req in to_decode:
            _reset(req, _HANDOFF_FIELDS, self._blank)
            self.stats.rerouted += 1
            self.cluster.to_decode(req)
        for req in restart:
            _reset(req, _ATTEMPT_FIELDS, self._blank)
            req.new_tokens = req.input_tokens
            req.image_pending = req.image_tokens
            self.stats.recomputed += 1
            self.stats.recomputed_ids.append(req.request_id)
            self.cluster.reroute(req)

    def restore(self, inst: Instance) -> None:
        """Instance `inst` serves again, with an empty HBM."""
        if inst.index in self.down:
            self.down.discard(inst.index)
            self._sync_serving()

    def fail_node(self, node: int) -> None:
        """Node `node` fails: its instances, then its host memory."""
        self.stats.node_failures += 1
        for inst in self.instances:
            if inst.node == node:
                self.fail(inst)
        self.stats.kv_lost_host_bytes += self.store.lose_node(node)

    def restore_node(self, node: int) -> None:
        for inst in self.instances:
            if inst.node == node:
                self.restore(inst)

    # --- taking a request off an instance ---

    def _cancel_transfers(self, req: Request, inst: Instance) -> None:
        for link in inst.read_links:
            if link is not None:
                link.cancel(req)
        for link in self.cluster.net_out:
            link.cancel(req)

    def _leave_front(self, req: Request, now: float) -> None:
        """`req` leaves its prefill (or colocated) instance, which is failing, whatever stage it
        reached there (the instance's own counters are reset by `_stop`)."""
        inst = req.pinst
        assert inst is not None
        if _nan(req.admitted_s):
            inst.waiting.remove(req)
            return
        if req.loads_pending:
            inst.loading -= 1
            self._cancel_transfers(req, inst)
        _remove(inst.ready, req)
        self._abandon(inst, req, now, reserved_bytes=req.reserved_p_bytes, pinned=req.pinned, shared=True)

    def _leave_decode(self, req: Request, now: float) -> None:
        """`req` leaves its decode instance, whatever stage it reached there."""
        inst = req.dinst
        assert inst is not None
        inst.held_sequences -= 1
        if req in inst.waiting:
            inst.waiting.remove(req)
            return
        if _nan(req.kv_transfer_end_s):
            self._cancel_transfers(req, inst)
        self._abandon(inst, req, now, reserved_bytes=req.reserved_d_bytes, pinned=req.d_pinned, shared=False)

    def _abandon(
        self, inst: Instance, req: Request, now: float, *, reserved_bytes: float, pinned: bool, shared: bool
    ) -> None:
        """`req` off `inst`'s decode queues, and its HBM given back (`shared`: with its hold of a shared
        prompt, which only the prefill side takes)."""
        _remove(inst.joins, req)
        inst.drop_running(req)
        self.store.abandon(
            inst.index,
            reserved_bytes=reserved_bytes,
            unpin_key=req.parent_lineage if pinned else None,
            shared_key=req.shared_key if shared else None,
            shared_held=req.shared_held if shared else False,
            now_s=now,
        )


def _remove(queue, req: Request) -> None:
    if req in queue:
        queue.remove(req)


def _stop(inst: Instance) -> None:
    """A failed instance, once every request is off it: an empty, idle engine."""
    assert not inst.waiting and not inst.ready and not inst.joins and not inst.decode_batch_size()
    inst.stop()
