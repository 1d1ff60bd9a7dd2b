"""Periodic samples of every pool and of the cluster (one generator process, one event per interval).

Each tick also applies the cache tiers' TTLs (lazy expiry elsewhere), checks that no tier holds
more than its capacity, and reports progress. Rates are means over the interval (bytes moved /
interval); utilisation is busy time / interval; batch size is time-averaged.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq

from sim.metrics.recorder import PARQUET_OPTIONS
from sim.metrics.schema import CLUSTER_SCHEMA, POOL_SCHEMA, stamped


@dataclass
class PoolView:
    """What the sampler reads of one pool."""

    name: str
    role: str
    instances: list
    nodes: list[int]
    h2d: list  # SharedLink per instance
    d2h: list  # FifoLink per instance
    ssd_read: list  # SharedLink per node
    ssd_write: list  # FifoLink per node
    net_out: list  # SharedLink per node (RDMA sends)
    net_in: list  # per node: a counter of bytes received (sim.cluster.cluster.NetCounter)
    _last: dict = field(default_factory=dict)


class Sampler:
    def __init__(
        self,
        env,
        *,
        pools: list[PoolView],
        cluster,
        store,
        tier_names: list[str],
        interval_s: float,
        progress=None,
    ) -> None:
        self.env = env
        self.pools = pools
        self.cluster = cluster
        self.store = store
        self.interval_s = interval_s
        self.progress = progress
        self.pool_rows: dict[str, dict[str, list]] = {
            p.name: {n: [] for n in POOL_SCHEMA.names} for p in pools
        }
        # the cluster table: its fixed columns, plus the occupancy of each tier of the run that has none
        # there (the RDMA pool, a tier added as data): `<name>_kv_bytes`
        self.cluster_schema = CLUSTER_SCHEMA
        self._extra_tiers = [t.name for t in store.tiers if f"{t.name}_kv_bytes" not in CLUSTER_SCHEMA.names]
        for name in self._extra_tiers:
            self.cluster_schema = self.cluster_schema.append(
                pa.field(f"{name}_kv_bytes", pa.float64(), nullable=False)
            )
        self.cluster_rows: dict[str, list] = {n: [] for n in self.cluster_schema.names}
        self._t_last = env.now_s
        # time integrals of tier occupancy (for means) and sampled peaks of the cluster-wide sums
        # (the configured chain, enabled or not, and V4.1's SWA pool)
        self.tier_area = {name: 0.0 for name in (*tier_names, "swa_pool")}
        self.tier_peak = {name: 0.0 for name in (*tier_names, "swa_pool")}
        # the per-pool columns show the host-DRAM tier (units by node) and the cluster's the SSD tier, by name
        dram = next((t for t in store.tiers if t.name == "dram"), None)
        self._dram = dram.units if dram is not None and dram.scope == "node" else []  # by node
        self._ssd = store.units_of("ssd")
        self.sampled_s = 0.0
        for p in pools:
            p._last = self._counters(p, env.now_s)

    def start(self) -> None:
        self.env.process(self._run())

    def _run(self):
        env = self.env
        while True:
            yield env.timeout(self.interval_s)
            self.sample()

    @staticmethod
    def _counters(p: PoolView, now: float) -> dict:
        busy = batch = 0.0
        for inst in p.instances:
            b, s = inst.busy_until(now)
            busy += b
            batch += s
        return {
            "busy": busy,
            "batch": batch,
            "h2d": sum(link.bytes_done for link in p.h2d),
            "d2h": sum(link.bytes_done for link in p.d2h),
            "ssd_read": sum(link.bytes_done for link in p.ssd_read),
            "ssd_write": sum(link.bytes_done for link in p.ssd_write),
            "net_out": sum(link.bytes_done for link in p.net_out),
            "net_in": sum(c.bytes_done for c in p.net_in),
        }

    def sample(self) -> None:
        env, store = self.env, self.store
        now = env.now_s
        dt = now - self._t_last
        if dt <= 0.0:
            return
        self._t_last = now
        store.sweep(now)
        store.check_capacities()
        for p in self.pools:
            cur = self._counters(p, now)
            last = p._last
            p._last = cur
            n = len(p.instances)
            r = self.pool_rows[p.name]
            r["t_s"].append(now)
            r["instances"].append(n)
            r["utilization"].append((cur["busy"] - last["busy"]) / (dt * n))
            r["decode_batch_mean"].append((cur["batch"] - last["batch"]) / (dt * n))
            r["running_seqs"].append(sum(i.decode_batch_size() for i in p.instances))
            r["queue_len"].append(sum(i.queued() for i in p.instances))
            r["prefill_tokens_queued"].append(
                int(sum(max(0.0, i.queued_prompt_tokens) for i in p.instances if i.role != "decode"))
            )
            r["hbm_kv_capacity_bytes"].append(sum(i.hbm.capacity_bytes for i in p.instances))
            r["hbm_reserved_bytes"].append(sum(i.hbm.reserved_bytes for i in p.instances))
            r["hbm_cached_bytes"].append(sum(i.hbm.cached_bytes for i in p.instances))
            dram = self._dram
            r["dram_kv_bytes"].append(sum(dram[n_].used_bytes for n_ in p.nodes) if dram else 0.0)
            r["dram_kv_capacity_bytes"].append(
                sum(dram[n_].capacity_bytes for n_ in p.nodes) if dram else 0.0
            )
            r["swa_pool_bytes"].append(sum(store.swa[n_].used_bytes for n_ in p.nodes))
            for key, col in (
                ("h2d", "pcie_h2d"),
                ("d2h", "pcie_d2h"),
                ("ssd_read", "ssd_read"),
                ("ssd_write", "ssd_write"),
                ("net_in", "net_in"),
                ("net_out", "net_out"),
            ):
                r[f"{col}_bytes_per_s"].append((cur[key] - last[key]) / dt)
        tiers = store.tier_bytes()
        c, cl = self.cluster_rows, self.cluster
        c["t_s"].append(now)
        c["arrived"].append(cl.arrived)
        c["completed"].append(cl.completed)
        c["rejected"].append(cl.rejected)
        c["in_flight"].append(cl.in_flight)
        c["ssd_kv_bytes"].append(tiers.get("ssd", 0.0))
        c["ssd_kv_capacity_bytes"].append(sum(u.capacity_bytes for u in self._ssd))
        c["hbm_kv_bytes"].append(tiers["hbm"])
        c["dram_kv_bytes"].append(tiers.get("dram", 0.0))
        c["swa_pool_bytes"].append(tiers["swa_pool"])
        for name in self._extra_tiers:
            c[f"{name}_kv_bytes"].append(tiers[name])
        for k in self.tier_area:
            used = tiers.get(k, 0.0)  # a tier not in the run holds nothing
            self.tier_area[k] += used * dt
            if used > self.tier_peak[k]:
                self.tier_peak[k] = used
        self.sampled_s += dt
        if self.progress is not None:
            self.progress(now, cl.completed + cl.rejected)

    def write(self, folder: Path, run_id: str) -> list[Path]:
        """One Parquet file per pool plus cluster.parquet under `folder` (temp name, then rename),
        each stamped with `run_id`."""
        folder.mkdir(parents=True, exist_ok=True)
        out = []
        items = [(p.name, self.pool_rows[p.name], POOL_SCHEMA) for p in self.pools]
        items.append(("_cluster", self.cluster_rows, self.cluster_schema))  # "_" cannot start a pool name
        for name, rows, schema in items:
            path = folder / f"{name}.parquet"
            tmp = path.with_name(path.name + ".tmp")
            pq.write_table(pa.table(rows, schema=stamped(schema, run_id)), tmp, **PARQUET_OPTIONS)
            tmp.replace(path)
            out.append(path)
        return out
