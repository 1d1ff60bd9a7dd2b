"""One point of the capacity search: the scenario at one load, and what the search keeps of its run.

The load is the generator's sessions per hour (the trace is generated again at that rate from the run's
seed: the same sessions, started faster or slower) or the benchmark client's concurrency; the window is
the search's (sim.config.capacity). The SLO holds at a point when every measured request completed,
TTFT p99 <= slo.ttft_p99_s (default slo.ttft_s) and TPOT p99 <= slo.tpot_p99_s (default slo.tpot_s):
the run-level reading of the scenario's SLO that `sim run`'s capacity table already uses.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from sim import units
from sim.config.objectives import Slo
from sim.config.scenario import Scenario
from sim.metrics.capacity import LIMITS, POINT_KEYS, binding_limit, steady_cost_per_task_usd

# what a point keeps of its run's summary (sim.metrics.summarize): what a sweep point keeps, and what the
# SLO verdict and the cost per task read
KEPT = (
    *POINT_KEYS,
    "requests_arrived",
    "ttft_p99_s",
    "slo_attainment",
    "tasks_per_hour",
    "cluster_usd_per_hour",
)


def load_kind(scn: Scenario) -> str | None:
    """`sessions_per_hour` (a generator), `concurrency` (a closed-loop benchmark client), or None: a
    recorded trace, or an open-loop client, whose rate the search does not raise."""
    w = scn.workload
    if w.generator is not None:
        return "sessions_per_hour"
    if w.benchmark is not None and w.benchmark.concurrency is not None:
        return "concurrency"
    return None


def start_load(scn: Scenario, trace: Path | None) -> int:
    """The scenario's own load: the generator spec's session rate (or, for a spec in concurrent
    sessions, the rate its generated trace has) or the client's concurrency."""
    w = scn.workload
    if w.benchmark is not None:
        return int(w.benchmark.concurrency or 1)
    from sim.workload.spec import load_spec

    spec, _ = load_spec(w.generator)
    if spec.arrivals.sessions_per_hour is not None:
        return max(1, round(spec.arrivals.sessions_per_hour))
    from sim.workload.io import trace_info

    days = w.days if w.days is not None else spec.days
    return max(1, round(int(trace_info(trace)["sessions"]) / (days * 24.0)))


def same_as_run(scn: Scenario, load: int) -> bool:
    """Whether the point at `load` is the run itself (its window and its load): the search then reuses
    the run's summary instead of simulating it again."""
    w, c = scn.workload, scn.capacity
    if c.warmup_s not in (None, w.warmup_s) or c.horizon_s not in (None, w.horizon_s):
        return False
    if w.benchmark is not None:
        return w.benchmark.concurrency == load
    from sim.workload.spec import load_spec

    return load_spec(w.generator)[0].arrivals.sessions_per_hour == load


def point_scenario(scn: Scenario, load: int) -> Scenario:
    """`scn` over the search window, its benchmark client at concurrency `load` (a generator's rate is
    set where its trace is generated: `point_trace`); the search switched off inside it."""
    w, c = scn.workload, scn.capacity
    update: dict[str, Any] = {}
    if c.warmup_s is not None:
        update["warmup_s"] = c.warmup_s
    if c.horizon_s is not None:
        update["horizon_s"] = c.horizon_s
    if w.benchmark is not None:
        update["benchmark"] = w.benchmark.model_copy(update={"concurrency": load})
    workload = w.model_copy(update=update)
    return scn.model_copy(update={"workload": workload, "capacity": c.model_copy(update={"enabled": False})})


def point_trace(scn: Scenario, load: int, seed: int, out: Path) -> Path | None:
    """The generator's trace at `load` sessions per hour: as long as the run's (`workload.days`), or
    as the search's own horizon needs."""
    w = scn.workload
    if w.generator is None:
        return None
    from sim.workload.generator import generate_trace

    horizon_s = scn.capacity.horizon_s
    days = horizon_s / units.DAY_S if horizon_s is not None else w.days  # the run's own trace, else
    generate_trace(w.generator, out, seed=seed, days=days, sessions_per_hour=float(load))
    return out


def violations(summary: dict[str, Any], slo: Slo) -> list[str]:
    """Why the SLO does not hold at a point (module doc); empty when it holds."""
    out = []
    if not summary.get("requests_arrived"):
        return ["no request measured"]
    if summary.get("requests_rejected"):
        out.append(f"{summary['requests_rejected']:,} requests rejected")
    for key, name, bound, scale, unit in (
        ("ttft_p99_s", "TTFT p99", slo.ttft_p99_s or slo.ttft_s, 1.0, "s"),
        ("tpot_p99_s", "TPOT p99", slo.tpot_p99_s or slo.tpot_s, 1e3, "ms"),
    ):
        v = summary.get(key)
        if v is None or v > bound:
            shown = "-" if v is None else f"{v * scale:.3g}"
            out.append(f"{name} {shown} {unit} > {bound * scale:g} {unit}")
    return out


def point_record(load: int, summary: dict[str, Any], slo: Slo) -> dict[str, Any]:
    """What the search reports of one point: the load, KEPT, the SLO verdict and the busiest limit
    (no wall time: the summary is the same bytes for the same inputs)."""
    record: dict[str, Any] = {"load": load, **{k: summary.get(k) for k in KEPT}}
    record["violations"] = violations(summary, slo)
    record["slo_holds"] = not record["violations"]
    busiest = binding_limit(summary.get("capacity") or {})
    record["busiest"] = (
        None if busiest is None else {"pool": busiest[0], "limit": busiest[1], "share": busiest[2]}
    )
    return record


def cost_per_task_usd(record: dict[str, Any], sessions_per_hour: float) -> float | None:
    """The steady cost per task at the point's rate (sim.metrics.capacity.steady_cost_per_task_usd)."""
    busiest = record.get("busiest")
    return steady_cost_per_task_usd(
        record["cluster_usd_per_hour"], sessions_per_hour, busiest["share"] if busiest else None
    )


def limit_name(key: str) -> str:
    return LIMITS.get(key, key)
