"""The capacity search of one model inside its `sim run` worker: each point a simulation run by the
caller's `simulate` (sim.api: the same code as the fixed-rate run, in the same process), the block the
summary carries under `capacity` (`search_block`), and what the worker reports while it searches
(`SearchStep`)."""

from __future__ import annotations

import tempfile
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from sim.capacity.point import (
    cost_per_task_usd,
    limit_name,
    load_kind,
    point_record,
    point_scenario,
    point_trace,
    same_as_run,
    start_load,
)
from sim.capacity.search import Measured, search
from sim.config.scenario import Scenario

BUSY_ENOUGH = 0.60  # at the sustained load the busiest resource is at least this used, or the SLO binds


@dataclass(frozen=True)
class SearchStep:
    """A worker's progress message while it searches (picklable): point `point` of the `max_points` the
    search now expects (sim.capacity.search.points_expected), at `load`, `ended` of `expected` requests
    simulated so far."""

    model: str
    index: int
    models: int
    point: int
    max_points: int
    load: int
    unit: str
    ended: int
    expected: int


# simulate(scenario, trace or None, progress(ended, expected)) -> the model's run summary
Simulate = Callable[[Scenario, Path | None, Callable[[int, int], None]], dict[str, Any]]


def search_block(
    scn: Scenario, model: str, index: int, seed: int, trace: Path | None, simulate: Simulate,
    send: Callable[[SearchStep], None] | None, run_summary: dict[str, Any],
) -> dict[str, Any]:  # fmt: skip
    """The search for `model` (sim.capacity.search) and the summary's capacity keys of its answer; the
    run's own summary (`run_summary`) is the point at the run's load when the windows agree."""
    kind = load_kind(scn)
    if not scn.capacity.enabled:
        return {"search": None, "search_note": "capacity: off in the scenario"}
    if kind is None:
        return {"search": None, "search_note": "the workload is a recorded trace or an open-loop client: "
                "no rate to raise (set capacity: off to say so)"}  # fmt: skip
    c = scn.capacity
    unit = "sessions/h" if kind == "sessions_per_hour" else "concurrency"
    done = 0
    planned = c.max_points

    def plan(points: int) -> None:
        nonlocal planned
        planned = points

    def measure(load: int) -> Measured:
        nonlocal done

        def hook(ended: int, expected: int) -> None:
            if send is not None:
                send(SearchStep(model, index, len(scn.models), done, planned, load, unit, ended, expected))

        hook(0, 1)
        if same_as_run(scn, load):
            summary = run_summary
        else:
            with tempfile.TemporaryDirectory(prefix="sim-capacity-") as tmp:
                at = point_scenario(scn, load)
                summary = simulate(at, point_trace(scn, load, seed, Path(tmp) / "trace.parquet"), hook)
        record = point_record(load, summary, scn.slo)
        if kind == "sessions_per_hour":
            record["cost_per_task_usd"] = cost_per_task_usd(record, load)
        done += 1
        busiest = record["busiest"]
        return Measured(load, record["slo_holds"], busiest["share"] if busiest else None, record)

    result = search(measure, start_load(scn, trace), tolerance_frac=c.tolerance_frac, max_points=c.max_points,
                    on_plan=plan)  # fmt: skip
    points = sorted((p.record for p in result.points), key=lambda r: r["load"])
    block: dict[str, Any] = {
        "search": {
            "load": kind,
            "window": {
                "warmup_s": c.warmup_s if c.warmup_s is not None else scn.workload.warmup_s,
                "horizon_s": c.horizon_s if c.horizon_s is not None else scn.workload.horizon_s,
            },
            "tolerance_frac": c.tolerance_frac,
            "points_run": len(result.points),
            "converged": result.converged,
            "points": points,
        },
        "search_note": None,
    }
    block.update(_answer(result.sustained.record if result.sustained else None, result.above, kind))
    return block


def _answer(at: dict[str, Any] | None, above: Measured | None, kind: str) -> dict[str, Any]:
    """The sustained point's figures and what binds there (module doc of sim.metrics.capacity)."""
    keys = ("sessions_per_hour", "sessions_per_hour_per_gpu", "concurrency", "cost_per_task_usd",
            "output_tokens_per_s_per_gpu", "ttft_p50_s", "ttft_p99_s", "tpot_p50_s", "tpot_p99_s",
            "slo_attainment", "binding_limit", "binding_share", "slo_fails_above")  # fmt: skip
    out: dict[str, Any] = dict.fromkeys(keys)
    if above is not None:
        out["slo_fails_above"] = {"load": above.load, "violations": above.record["violations"]}
    if at is None:
        out["binding_limit"] = "the SLO fails at the lowest load run"
        return out
    gpus = at.get("gpus") or 0
    if kind == "sessions_per_hour":
        out["sessions_per_hour"] = at["load"]
        out["sessions_per_hour_per_gpu"] = at["load"] / gpus if gpus else None
        out["cost_per_task_usd"] = at.get("cost_per_task_usd")
    else:
        out["concurrency"] = at["load"]
    for key in ("output_tokens_per_s_per_gpu", "ttft_p50_s", "ttft_p99_s", "tpot_p50_s", "tpot_p99_s",
                "slo_attainment"):  # fmt: skip
        out[key] = at.get(key)
    busiest = at.get("busiest")
    share = busiest["share"] if busiest else None
    out["binding_share"] = share
    failed = "; ".join(above.record["violations"]) if above is not None else None
    if busiest is not None and share >= BUSY_ENOUGH:
        out["binding_limit"] = f"{limit_name(busiest['limit'])} ({busiest['pool']} pool {share:.0%})"
    elif failed:
        shown = "" if busiest is None else f"; busiest: {limit_name(busiest['limit'])} {share:.0%}"
        out["binding_limit"] = f"the SLO itself ({failed} one step up{shown})"
    else:
        out["binding_limit"] = "none reached: the search stopped before the SLO failed"
    return out
