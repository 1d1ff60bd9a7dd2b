"""The cluster wiring: where a request goes between the engines.

arrival -> admission (static reasons) -> router (front instances: prefill or colocated) ->
instance (HBM admission, prefix loads, prefill) -> [disaggregated: router (decode instances)
-> KV transfer over the prefill node's NICs -> decode] -> completion or rejection, each
reported once to the recorder and to the arrivals (closed-loop turns wait on it).
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable
from typing import TYPE_CHECKING

from sim.cluster.events import EventLoop
from sim.cluster.link import SharedLink
from sim.core.request import Request
from sim.kvcache.store import KVStore
from sim.metrics.invariants import check_ended

if TYPE_CHECKING:
    from sim.cluster.instance import Instance
    from sim.metrics.recorder import Recorder
    from sim.sched.router import Router


class Cluster:
    def __init__(
        self,
        env: EventLoop,
        *,
        instances: Callable[[Cluster], list[Instance]],
        net_out: list[SharedLink],
        store: KVStore,
        router: Router,
        recorder: Recorder,
        max_context_tokens: int,
        max_queue_per_instance: int | None,
    ) -> None:
        self.env = env
        self.net_out = net_out  # per node, RDMA sends (P -> D KV transfers)
        # per node, bytes received over RDMA: a transfer is charged to its sender's link only
        # (sim.cluster.link: one link per job), the receiver counts it for the time series
        self.net_in = [NetCounter() for _ in net_out]
        self.store = store
        self.router = router
        self.recorder = recorder
        self.max_context_tokens = max_context_tokens
        self.max_queue_per_instance = max_queue_per_instance
        # A cycle no order of construction breaks: the cluster routes among its instances, and each
        # instance hands its requests back to it (to decode, done, rejected). So the cluster makes its
        # instances through `instances`, which gives each one the cluster (an instance being made only
        # stores the reference, calling nothing on it), and both are whole when this returns.
        self.instances = instances(self)  # all, by index
        self.front = [inst for inst in self.instances if inst.role != "decode"]  # prefill or colocated
        self.back = [inst for inst in self.instances if inst.role == "decode"]  # decode (none if colocated)
        # the instances the router may pick: all, unless an operation (sim.extensions.ops) drained
        # or failed some; requests find none serving wait here until one is back (`resume_held`)
        self.front_serving = list(self.front)
        self.back_serving = list(self.back)
        self.held_front: deque[Request] = deque()
        self.held_back: deque[Request] = deque()
        # the arrival driver's callback for a request's end (closed-loop follow-ups wait on it): passed in,
        # since the driver sits above the engine (style.md §7)
        self.on_terminal: Callable[[Request], None] | None = None
        self.on_end: Callable[[Request], None] | None = None  # an observer of every end (sim.extensions.ops)
        # the longest sequence (tokens) any instance of each side can ever hold
        self._front_fit = max(_fit_tokens(i) for i in self.front)
        self._back_fit = max(_fit_tokens(i) for i in self.back) if self.back else None
        self.arrived = 0
        self.completed = 0
        self.rejected = 0
        self.in_flight = 0
        self.live: dict[int, Request] = {}  # requests in the system, by id (ended at a drain limit)
        self._area = 0.0  # integral of requests in the system over time (Little's law)
        self._t_area = env.now_s

    def requests_in_system_area(self) -> float:
        """Integral over time of the number of requests in the system, up to now."""
        return self._area + self.in_flight * (self.env.now_s - self._t_area)

    def dispatch(self, req: Request) -> None:
        """A request arrives."""
        self.arrived += 1
        now = self.env.now_s
        self._area += self.in_flight * (now - self._t_area)
        self._t_area = now
        self.in_flight += 1
        self.live[req.request_id] = req
        total = req.input_tokens + req.output_tokens
        if total > self.max_context_tokens:
            self.reject(req, "context_too_long")
            return
        if (total if self._back_fit is None else req.input_tokens) > self._front_fit or (
            self._back_fit is not None and total > self._back_fit
        ):
            self.reject(req, "kv_exceeds_hbm")
            return
        if not self.front_serving:
            self.held_front.append(req)
            return
        inst = self.router.route(req, self.front_serving, "front")
        if self.max_queue_per_instance is not None and inst.queued() >= self.max_queue_per_instance:
            self.reject(req, "queue_full")
            return
        self._submit(req, inst)

    def reroute(self, req: Request) -> None:
        """A request already in the system starts over at the router (its instance failed:
        sim.cluster.faults); it was admitted once, so no queue limit turns it away now."""
        if not self.front_serving:
            self.held_front.append(req)
            return
        self._submit(req, self.router.route(req, self.front_serving, "front"))

    def _submit(self, req: Request, inst: Instance) -> None:
        est = req.input_tokens
        key = req.parent_lineage
        if key is not None:
            held = self.store.hbm_tokens(key, inst.index)
            est -= held if held < req.prefix_tokens else req.prefix_tokens
        req.est_new_tokens = est
        inst.submit(req)

    def to_decode(self, req: Request) -> None:
        """Prefill finished on a prefill instance: pick a decode instance and hand over."""
        if not self.back_serving:
            self.held_back.append(req)
            return
        inst = self.router.route(req, self.back_serving, "decode")
        inst.receive(req)

    def resume_held(self) -> None:
        """Route the requests that found no serving instance, now that some may be back."""
        while self.front_serving and self.held_front:
            self.reroute(self.held_front.popleft())
        while self.back_serving and self.held_back:
            self.to_decode(self.held_back.popleft())

    def reject(self, req: Request, reason: str) -> None:
        req.status = "rejected"
        req.reject_reason = reason
        if req.finish_s != req.finish_s:  # NaN: not set yet
            req.finish_s = self.env.now_s
        self.rejected += 1
        self._finish(req)

    def request_done(self, req: Request) -> None:
        req.status = "completed"
        self.completed += 1
        self._finish(req)

    def _finish(self, req: Request) -> None:
        now = self.env.now_s
        self._area += self.in_flight * (now - self._t_area)
        self._t_area = now
        self.in_flight -= 1
        del self.live[req.request_id]
        check_ended(req)
        self.recorder.record(req)
        if self.on_end is not None:
            self.on_end(req)
        if self.on_terminal is not None:
            self.on_terminal(req)


def _fit_tokens(inst: Instance) -> int:
    """The longest sequence (tokens) instance `inst` could hold with nothing else in its HBM."""
    room = inst.hbm.capacity_bytes - inst.need_bytes(0)
    per_token = inst.need_bytes(1) - inst.need_bytes(0)
    return int(room // per_token) if room > 0 else -1


class NetCounter:
    """Bytes a node received over RDMA (the sending side's link carries the transfer)."""

    __slots__ = ("bytes_done",)

    def __init__(self) -> None:
        self.bytes_done = 0.0
