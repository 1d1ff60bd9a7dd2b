"""The operations an extension may perform on a running cluster (docs/simpy_and_extensions.md).

An `Operations` is what an extension function receives beside the SimPy environment. Every call
acts at the environment's current time, as an event of the run: call it from a SimPy process (or
from the extension function itself, at time 0). Instances are named by their index (`instances()`),
nodes by theirs (`instance(i)["node"]`). What each operation does to the requests and the KV is
sim.cluster.faults's module doc.

Reading: `now_s`, `rng(name)`, `pools()`, `instances(pool=None)`, `instance(i)`, `counters()`.
Acting: `fail_instance`, `restore_instance`, `fail_node`, `restore_node`, `drain_pool`,
`undrain_pool`, `add_instance`, `remove_instance`, `set_router_weights`.
"""

from __future__ import annotations

import math
from typing import Any

from sim import units
from sim.cluster.faults import Faults
from sim.errors import InputError
from sim.rng import RngStreams


class Operations:
    def __init__(self, sim, seed: int, *, slo_ttft_s: float, slo_tpot_s: float) -> None:
        loop = sim.env
        if not hasattr(loop, "sync"):
            raise TypeError("extensions need the SimPy loop (sim.cluster.simpy_loop.SimPyLoop)")
        self._loop = loop
        self.env: Any = loop.env  # the simpy.Environment
        self._sim = sim
        self._faults = Faults(sim.cluster, sim.store, sim.instances)
        self._rng = RngStreams(seed)
        self.slo_ttft_s = slo_ttft_s
        self.slo_tpot_s = slo_tpot_s
        self._pools = {p.name: p for p in sim.pools}
        self._inst_usd_per_hour = {
            inst.index: self._pools[inst.pool].usd_per_hour / self._pools[inst.pool].instances
            for inst in sim.instances
        }
        # instances removed from their pool (not billed) and those still warming up
        self._removed: set[int] = set()
        self._warming: set[int] = set()
        # per instance, the [start, end] periods it was held (billed); an open one ends at None
        self._held: dict[int, list[list[float | None]]] = {
            inst.index: [[0.0, None]] for inst in sim.instances
        }
        self._failures: list[dict] = []  # the time axis of outages: {kind, id, start_s, end_s}
        # SLO of the requests that lived while some instance was down
        self._down_since: dict[int, float] = {}
        self._last_up_s = -math.inf
        self._degraded = {"requests": 0, "slo_met": 0}
        sim.cluster.on_end = self._on_end

    # --- reading ---

    @property
    def now_s(self) -> float:
        return float(self.env.now)

    def rng(self, name: str):
        """A numpy Generator of its own, from the run's seed and `name` (sim.rng): draws in one
        extension never shift another's, nor the workload's."""
        return self._rng.get(f"extension:{name}")

    def pools(self) -> dict[str, dict]:
        """Each pool's role, hardware, instances and GPUs per instance (as built)."""
        return {
            p.name: {
                "role": p.role,
                "hw_id": p.hw_id,
                "instances": p.instances,
                "gpus_per_instance": p.gpus_per_instance,
            }
            for p in self._sim.pools
        }

    def weights_load_s(self, pool: str) -> float:
        """Seconds to load one instance's weights of `pool` from its node's local NVMe drives, at the
        hardware profile's read rate times its achievable fraction (`ssd_bw_frac`): what a new
        instance waits before it serves. Engine start-up beyond the read (CUDA graph capture, warm-up
        batches) is not counted [D]."""
        from sim.hardware import load_hw

        self.instances(pool)  # a known pool, or one clear error
        p = self._pools[pool]
        hw = load_hw(p.hw_id)
        return p.weights_bytes_per_instance / (hw.ssd_read_bytes_per_s * hw.achievable.ssd_bw_frac.value)

    def instances(self, pool: str | None = None) -> list[int]:
        if pool is not None and pool not in self._pools:
            raise InputError("no such pool", where="pool", value=pool, allowed=list(self._pools))
        return [i.index for i in self._sim.instances if pool is None or i.pool == pool]

    def instance(self, index: int) -> dict:
        """Live state of instance `index`: where it is, whether it serves, what it holds."""
        inst = self._inst(index)
        f = self._faults
        return {
            "pool": inst.pool,
            "role": inst.role,
            "node": inst.node,
            "gpus": inst.gpus,
            "state": "failed" if index in f.down else "removed" if index in self._removed
            else "warming" if index in self._warming else "drained" if index in f.drained else "serving",
            "decode_batch": inst.decode_batch_size(),
            "queued": inst.queued(),
            "hbm_used_frac": inst.hbm.used_bytes / inst.hbm.capacity_bytes,
        }  # fmt: skip

    def counters(self) -> dict[str, int]:
        """Requests arrived, completed, rejected and in the system so far (the cluster's counters)."""
        c = self._sim.cluster
        return {
            "arrived": c.arrived,
            "completed": c.completed,
            "rejected": c.rejected,
            "in_flight": c.in_flight,
        }

    def fault_stats(self):
        """What drains and failures did so far (sim.cluster.faults.FaultStats): counts, the ids of
        the requests that started over, the KV lost."""
        return self._faults.stats

    # --- acting ---

    def fail_instance(self, index: int) -> None:
        """Instance `index` fails now: its HBM KV is lost, its requests go back to the router."""
        self._loop.sync()
        inst = self._inst(index)
        if index in self._faults.down:
            return
        self._went_down(index, "instance")
        self._faults.fail(inst)

    def restore_instance(self, index: int) -> None:
        """Instance `index` serves again (with an empty HBM)."""
        self._loop.sync()
        if index in self._faults.down:
            self._faults.restore(self._inst(index))
            self._came_up(index)

    def fail_node(self, node: int) -> None:
        """Node `node` fails: its instances (as `fail_instance`) and its host-memory KV tiers."""
        self._loop.sync()
        for inst in self._sim.instances:
            if inst.node == node and inst.index not in self._faults.down:
                self._went_down(inst.index, "node")
        self._faults.fail_node(node)

    def restore_node(self, node: int) -> None:
        self._loop.sync()
        for inst in self._sim.instances:
            if inst.node == node and inst.index in self._faults.down:
                self._faults.restore(inst)
                self._came_up(inst.index)

    def drain_pool(self, pool: str) -> None:
        """No new request goes to `pool`'s instances; what they hold runs to the end."""
        self._loop.sync()
        for i in self.instances(pool):
            self._faults.drain(self._inst(i))

    def undrain_pool(self, pool: str) -> None:
        self._loop.sync()
        for i in self.instances(pool):
            if i not in self._removed and i not in self._warming:
                self._faults.undrain(self._inst(i))

    def remove_instance(self, pool: str) -> int | None:
        """Take one serving instance of `pool` out (the highest index): it is drained (what it holds
        runs to the end) and no longer billed. Returns its index, None if none serves."""
        self._loop.sync()
        f = self._faults
        serving = [i for i in self.instances(pool) if i not in self._removed and i not in self._warming
                   and i not in f.down and i not in f.drained]  # fmt: skip
        if len(serving) <= 1:
            return None  # a pool keeps one instance
        index = serving[-1]
        f.drain(self._inst(index))
        self._removed.add(index)
        self._stop_billing(index)
        return index

    def add_instance(self, pool: str, warmup_s: float) -> int | None:
        """Bring one removed instance of `pool` back (the lowest index): billed from now, serving
        after `warmup_s` (its weights load). Returns its index, None if the pool has none removed."""
        self._loop.sync()
        removed = [i for i in self.instances(pool) if i in self._removed]
        if not removed:
            return None
        index = removed[0]
        self._removed.discard(index)
        self._warming.add(index)
        self._held[index].append([self.now_s, None])
        self.env.process(self._warm_up(index, warmup_s))
        return index

    def _warm_up(self, index: int, warmup_s: float):
        yield self.env.timeout(warmup_s)
        self._loop.sync()
        self._warming.discard(index)
        if index not in self._removed:
            self._faults.undrain(self._inst(index))

    def set_router_weights(self, *, prefix_hit: float, queue_depth: float, kv_usage: float) -> None:
        """The cache-aware router's scorer weights from now on (sim.sched.router)."""
        router = self._sim.cluster.router
        router.w_hit, router.w_queue, router.w_kv = float(prefix_hit), float(queue_depth), float(kv_usage)

    # --- bookkeeping ---

    def _inst(self, index: int):
        if not 0 <= index < len(self._sim.instances):
            raise InputError(
                "no such instance",
                where="instance",
                value=index,
                allowed=f"0..{len(self._sim.instances) - 1}",
            )
        return self._sim.instances[index]

    def _stop_billing(self, index: int) -> None:
        period = self._held[index][-1]
        if period[1] is None:
            period[1] = self.now_s

    def held(self, start_s: float, end_s: float) -> tuple[float, float]:
        """(instance-hours, $) held between `start_s` and `end_s`: each instance's periods from
        the start (or its `add_instance`) to its `remove_instance` (or the end), at its pool's price."""
        hours = usd = 0.0
        for index, periods in self._held.items():
            for a, b in periods:
                b = end_s if b is None else b
                h = max(0.0, min(b, end_s) - max(a, start_s)) / units.HOUR_S
                hours += h
                usd += h * self._inst_usd_per_hour[index]
        return hours, usd

    def _went_down(self, index: int, kind: str) -> None:
        self._down_since[index] = self.now_s
        node = self._sim.instances[index].node
        self._failures.append(
            {"kind": kind, "instance": index, "node": node, "start_s": self.now_s, "end_s": None}
        )

    def _came_up(self, index: int) -> None:
        self._down_since.pop(index, None)
        self._last_up_s = self.now_s
        for f in reversed(self._failures):
            if f["instance"] == index and f["end_s"] is None:
                f["end_s"] = self.now_s
                break

    def _on_end(self, req) -> None:
        """A request ended: count it for the degraded periods' SLO if it lived during one."""
        if not req.measured or not (self._down_since or self._last_up_s > req.arrival_s):
            return
        d = self._degraded
        d["requests"] += 1
        ttft = req.first_token_s - req.arrival_s
        out = req.output_tokens
        tpot = (req.finish_s - req.first_token_s) / max(out - 1, 1)
        if req.status == "completed" and ttft <= self.slo_ttft_s and (out <= 1 or tpot <= self.slo_tpot_s):
            d["slo_met"] += 1

    def summary(self, model_summary: dict) -> dict:
        """What the operations did, for summary.json (`extensions.operations`); what was held is
        counted over the model's measured window (after the warm-up), as its cost per task is."""
        st = self._faults.stats
        start_s = model_summary["warmup_s"]
        hours, usd = self.held(start_s, start_s + model_summary["window_s"])
        tasks = model_summary["tasks_completed"]
        d = self._degraded
        return {
            "instance_failures": st.instance_failures,
            "node_failures": st.node_failures,
            "requests_rerouted": st.rerouted,
            "requests_recomputed": st.recomputed,
            "kv_lost_hbm_bytes": st.kv_lost_hbm_bytes,
            "kv_lost_host_bytes": st.kv_lost_host_bytes,
            "degraded_requests": d["requests"],
            "degraded_slo_attainment": d["slo_met"] / d["requests"] if d["requests"] else None,
            "instance_hours_held": hours,
            "usd_held": usd,
            "cost_per_task_usd_held": usd / tasks if tasks else None,
            "outages": self._failures,
        }
