"""How much of the cluster a run used, per pool, and what that says about capacity at the SLO.

Definitions (each a stated choice; the summary's `capacity` block carries them):
- busy: the engines' busy-time fraction over the measured window (time-mean of the sampled
  `utilization` column, sim.metrics.timeseries). It is the load of a prefill pool. A decode engine
  is "busy" whenever one sequence decodes, so busy says little about a decode pool.
- SLO batch: per decode-capable instance, the largest decode batch whose step, at the run's mean
  request context (input + half the output), still emits tokens at least as fast as the TPOT SLO
  (step_s / accepted tokens per step <= slo.tpot_s), capped by `max_decode_batch` and by the
  sequences of that context the instance's HBM KV budget holds. Asked of the pool's timing model,
  so it follows whatever step-time model runs.
- load: prefill pool: busy; decode pool: mean decode batch / SLO batch; colocated: the larger of
  the two (prefill busy share and decode batch share compete for the same engine).
- headroom = 1 - load: the share of the pool the same SLO leaves unused (negative: past it).
- sessions per serving node at the SLO: sessions in progress in the window (time-mean) per node of
  the decode or colocated pools, divided by the most-loaded pool's load: a linear extrapolation
  to the load at which the first pool saturates, so an upper bound (queueing makes latency pass
  the SLO before any pool is 100% busy). When the run already misses its p99 SLO (TTFT p99 or
  TPOT p99 over `slo`), the latency limit binds first: the figure is None and the sessions now
  are more than the cluster sustains. The capacity search of `sim run` (sim.capacity) measures the
  limit by running the loads.
- limits: per pool, the share used of each resource that can bind first (`LIMITS`): prefill busy
  (the prefill pool's busy share, or a colocated pool's prefill share of it), decode batch at the
  TPOT SLO (decode load), KV room in HBM (running sequences' reserved KV / the instances' KV budget,
  time-mean), and the bandwidth of the host-to-GPU link (DRAM tier loads) and of the SSDs (SSD tier
  loads): bytes moved / what the links carry, time-mean. `binding_limit` names the largest.
- steady cost per task (`steady_cost_per_task_usd`): cluster $/h x max(1, load) / tasks per hour, the
  one formula `sim plan` (sim.plan.steady) and the capacity search of `sim run` (sim.capacity) use.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

LOW_DECODE_LOAD = 0.30  # below this mean decode load, cost per task mostly measures idle capacity
SERVING_ROLES = ("decode", "colocated")
# the resources a pool can run out of (module doc), as named in `binding_limit`
LIMITS = {
    "prefill_busy": "prefill busy",
    "decode_batch": "decode batch at the TPOT SLO",
    "kv_room": "KV room in HBM",
    "dram_tier_bandwidth": "DRAM tier bandwidth (host-to-GPU link)",
    "ssd_tier_bandwidth": "SSD tier bandwidth",
}


def steady_cost_per_task_usd(usd_per_hour: float, tasks_per_hour: float, load: float | None) -> float | None:
    """What a task costs when tasks arrive at `tasks_per_hour` on a cluster of `usd_per_hour` whose
    busiest pool carries `load` there: a pool past 1 completes only 1/load of them (sim.plan.steady)."""
    if not tasks_per_hour > 0:
        return None
    return usd_per_hour * max(1.0, load or 0.0) / tasks_per_hour


@dataclass(frozen=True)
class PoolLoad:
    name: str
    role: str
    busy: float | None
    decode_batch_mean: float | None
    slo_batch: int | None
    load: float | None

    @property
    def headroom(self) -> float | None:
        return None if self.load is None else 1.0 - self.load


def window_mean(rows: dict[str, list], column: str, start_s: float, end_s: float) -> float | None:
    """Time-mean of a sampled pool column over samples ending inside (start_s, end_s]."""
    t = np.asarray(rows["t_s"], dtype=np.float64)
    v = np.asarray(rows[column], dtype=np.float64)
    keep = (t > start_s) & (t <= end_s + 1e-9)
    return float(v[keep].mean()) if keep.any() else None


def slo_batch(inst, context_tokens: float, tpot_slo_s: float) -> int:
    """Largest decode batch (>= 0) of sequences at `context_tokens` that instance `inst` decodes at
    or under `tpot_slo_s` per token (binary search: step time grows with the batch)."""
    timing = inst.timing
    seq_terms = timing.decode_seq_terms(context_tokens, 1)
    per_token = max(timing.accepted_tokens_per_step, 1.0)
    seq_bytes = inst.need_bytes(int(context_tokens))
    kv_cap = int(inst.hbm.capacity_bytes // seq_bytes) if seq_bytes > 0 else inst.max_decode_batch
    hi = max(0, min(inst.max_decode_batch, kv_cap))

    def fits(b: int) -> bool:
        return timing.step_s(b, seq_terms.scaled(b), ()) / per_token <= tpot_slo_s

    lo = 0
    while lo < hi:
        mid = (lo + hi + 1) // 2
        if fits(mid):
            lo = mid
        else:
            hi = mid - 1
    return lo


def pool_loads(
    sim, *, start_s: float, end_s: float, context_tokens: float, tpot_slo_s: float
) -> list[PoolLoad]:
    rows = sim.sampler.pool_rows
    out = []
    for pool in sim.pools:
        r = rows[pool.name]
        busy = window_mean(r, "utilization", start_s, end_s)
        batch = sb = None
        load = busy
        if pool.role in SERVING_ROLES:
            inst = next(i for i in sim.instances if i.pool == pool.name)
            batch = window_mean(r, "decode_batch_mean", start_s, end_s)
            sb = slo_batch(inst, context_tokens, tpot_slo_s) if context_tokens > 0 else None
            decode_load = (batch / sb if sb else None) if batch is not None else None
            if pool.role == "decode":
                load = decode_load
            else:
                members = [i for i in sim.instances if i.pool == pool.name]
                busy_s = sum(i.busy_s for i in members)
                prefill_busy = (busy or 0.0) * (
                    sum(i.prefill_busy_s for i in members) / busy_s if busy_s else 0.0
                )
                load = (
                    max(x for x in (decode_load, prefill_busy) if x is not None)
                    if decode_load is not None
                    else busy
                )
        out.append(PoolLoad(pool.name, pool.role, busy, batch, sb, load))
    return out


def capacity_block(
    sim,
    *,
    start_s: float,
    end_s: float,
    context_tokens: float,
    tpot_slo_s: float,
    sessions_in_progress: float | None,
    slo_p99_met: bool,
) -> dict:
    """The summary's `capacity` block (module doc)."""
    loads = pool_loads(
        sim, start_s=start_s, end_s=end_s, context_tokens=context_tokens, tpot_slo_s=tpot_slo_s
    )
    serving = [p for p in sim.pools if p.role in SERVING_ROLES]
    serving_nodes = sum(p.nodes for p in serving)
    known = [p.load for p in loads if p.load is not None]
    bottleneck = max(known) if known else None
    decode_loads = [p.load for p in loads if p.role in SERVING_ROLES and p.load is not None]
    decode_mean = float(np.mean(decode_loads)) if decode_loads else None
    per_node_now = (
        sessions_in_progress / serving_nodes if sessions_in_progress is not None and serving_nodes else None
    )
    at_slo = per_node_now / bottleneck if per_node_now is not None and bottleneck and slo_p99_met else None
    limits = pool_limits(sim, loads, start_s=start_s, end_s=end_s)
    return {
        "context_tokens_mean": context_tokens,
        "tpot_slo_s": tpot_slo_s,
        "pools": [
            {
                "name": p.name,
                "role": p.role,
                "busy": p.busy,
                "decode_batch_mean": p.decode_batch_mean,
                "slo_batch": p.slo_batch,
                "load": p.load,
                "headroom": p.headroom,
                "limits": limits[p.name],
            }
            for p in loads
        ],
        "bottleneck_load": bottleneck,
        "decode_load_mean": decode_mean,
        "low_decode_load": decode_mean is not None and decode_mean < LOW_DECODE_LOAD,
        "slo_p99_met": slo_p99_met,
        "sessions_in_progress_per_serving_node": per_node_now,
        "sessions_per_serving_node_at_slo": at_slo,
    }


def pool_limits(sim, loads: list[PoolLoad], *, start_s: float, end_s: float) -> dict[str, dict[str, float]]:
    """Per pool, the share used of each of its `LIMITS` over the window (module doc)."""
    rows = sim.sampler.pool_rows
    views = {v.name: v for v in sim.sampler.pools}
    out: dict[str, dict[str, float]] = {}
    for p in loads:
        r, view = rows[p.name], views[p.name]
        used: dict[str, float] = {}
        if p.role != "decode":
            members = [i for i in sim.instances if i.pool == p.name]
            busy_s = sum(i.busy_s for i in members)
            share = sum(i.prefill_busy_s for i in members) / busy_s if busy_s else 0.0
            used["prefill_busy"] = (p.busy or 0.0) * (share if p.role == "colocated" else 1.0)
        if p.role in SERVING_ROLES and p.decode_batch_mean is not None and p.slo_batch:
            used["decode_batch"] = p.decode_batch_mean / p.slo_batch
        reserved = window_mean(r, "hbm_reserved_bytes", start_s, end_s)
        budget = window_mean(r, "hbm_kv_capacity_bytes", start_s, end_s)
        if reserved is not None and budget:
            used["kv_room"] = reserved / budget
        for key, column, links in (
            ("dram_tier_bandwidth", "pcie_h2d_bytes_per_s", view.h2d),
            ("ssd_tier_bandwidth", "ssd_read_bytes_per_s", view.ssd_read),
        ):
            rate = window_mean(r, column, start_s, end_s)
            bw = sum(link.bw_bytes_per_s for link in links)
            if rate is not None and bw > 0:
                used[key] = rate / bw
        out[p.name] = used
    return out


def binding_limit(capacity: dict) -> tuple[str, str, float] | None:
    """(pool, limit key of LIMITS, share used) of the most-used limit of a `capacity` block's pools."""
    used = [
        (share, pool["name"], key)
        for pool in capacity.get("pools") or []
        for key, share in (pool.get("limits") or {}).items()
        if share is not None
    ]
    if not used:
        return None
    share, pool, key = max(used, key=lambda u: (u[0], u[1], u[2]))
    return pool, key, share


def low_load_line(capacity: dict) -> str | None:
    """The one-line warning when mean decode load is under LOW_DECODE_LOAD (None otherwise)."""
    mean = capacity.get("decode_load_mean") if capacity else None
    if mean is None or mean >= LOW_DECODE_LOAD:
        return None
    return (
        f"mean decode load {mean:.0%} < {LOW_DECODE_LOAD:.0%}: cost per task here mostly measures idle capacity; "
        "the capacity search of `sim run` measures the load the cluster sustains and its cost per task there, "
        "`sim plan` the cheapest cluster"
    )

# what a load point reports of its run's summary (a sweep point, a capacity-search point)
POINT_KEYS = (
    "output_tokens_per_s_per_gpu",
    "tokens_per_s_per_user",
    "output_tokens_per_s",
    "ttft_p50_s",
    "ttft_p90_s",
    "tpot_p50_s",
    "tpot_p90_s",
    "tpot_p99_s",
    "requests_completed",
    "requests_rejected",
    "prefix_hit_rate",
    "gpus",
)
