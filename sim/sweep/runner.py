"""`run_sweep`: a benchmark scenario at each concurrency for each model, through the planner's
executors (local processes or Ray, sim.plan.executors), and the outputs of `sim sweep`.

`--auto` doubles the concurrency from 1, a round of `AUTO_ROUND` points at a time, until the TPOT
percentile read (`--at-tpot-percentile`, p50 by default) passes the target (`--at-tpot-ms`, else the
scenario's SLO TPOT), requests are rejected, or
`AUTO_MAX` is reached; then it runs `REFINE_POINTS` concurrencies evenly inside the pair that
brackets the target, so the interpolation spans a short stretch of the curve. Points are collected in whatever order they finish and then sorted by
(model, concurrency), so every executor writes the same files.

Outputs in `out_dir`: `sweep.json` (`models.<name>.points[]`, `models.<name>.at_tpot` and
`models.<name>.floor_pick`: the best point run whose TPOT meets the target) and
`sweep.html` (the frontier, TTFT and TPOT against load, load per pool), each written whole.
"""

from __future__ import annotations

import hashlib
import json
import os
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from sim.config.scenario import Scenario
from sim.errors import InputError
from sim.plan.backend import SimBackend
from sim.plan.executors import make_executor
from sim.plan.overrides import apply_overrides
from sim.sweep.points import (
    SweepTask,
    at_tpot,
    evaluate,
    floor_pick,
    point_record,
    tpot_key,
    unbracketed_reason,
)

AUTO_ROUND = 6  # concurrencies per round of --auto (1, 2, 4, ... 32 first)
AUTO_MAX = 4096
REFINE_POINTS = 4
FLOOR_KEYS = (
    "concurrency",
    "output_tokens_per_s_per_gpu",
    "tokens_per_s_per_user",
    "ttft_p50_s",
    "tpot_p50_s",
)
SWEEP_JSON = "sweep.json"
SWEEP_HTML = "sweep.html"

Progress = Callable[[int, int], None]  # (points finished, points planned so far)


@dataclass
class SweepResult:
    scenario: str
    target_tpot_s: float
    models: dict[str, dict[str, Any]]  # name -> {"points": [...], "at_tpot": {...} | None, "note": str}
    summaries: dict[str, dict[int, dict[str, Any]]]  # name -> concurrency -> full run summary
    tpot_percentile: str = "p50"  # the runs' TPOT percentile the target is read on

    def to_json(self) -> dict[str, Any]:
        return {
            "format": "sim.sweep/v1",
            "scenario": self.scenario,
            "at_tpot_ms": self.target_tpot_s * 1e3,
            "at_tpot_percentile": self.tpot_percentile,
            "models": self.models,
        }


def load_benchmark(path: Path) -> tuple[dict[str, Any], Scenario]:
    """The scenario document (paths made absolute) and the validated scenario, read once; refused
    unless its workload is a benchmark."""
    template, scenario = SimBackend().load_template_and_scenario(path)
    if not isinstance(template.get("workload", {}).get("benchmark"), dict):
        raise InputError(
            "sim sweep raises a benchmark client's concurrency; this scenario's workload has none",
            file=str(path),
            where="workload.benchmark",
            allowed="a workload.benchmark block (docs/concepts.md: Benchmark workload)",
        )
    return template, scenario


def model_names(template: dict[str, Any]) -> list[str]:
    return [m if isinstance(m, str) else m["name"] for m in template.get("models", [])]


def point_scenario(template: dict[str, Any], model: str, concurrency: int) -> dict[str, Any]:
    """The template serving `model` alone, its benchmark client holding `concurrency` requests."""
    overrides = SimBackend().model_overrides(template, model)
    overrides["workload.benchmark"] = {"concurrency": concurrency, "request_rate_per_s": None}
    return apply_overrides(template, overrides)


def run_sweep(
    template: dict[str, Any],
    *,
    concurrencies: list[int] | None,
    target_tpot_s: float,
    workers: int,
    ray: str | None = None,
    seed: int | None = None,
    models: list[str] | None = None,
    progress: Progress | None = None,
    percentile: str = "p50",
) -> SweepResult:
    """Every model of `models` (default: the scenario's) at each of `concurrencies`, or `--auto`
    (concurrencies None)."""
    names = models or model_names(template)
    run_seed = int(template.get("seed", 0)) if seed is None else seed
    done: dict[str, dict[int, dict[str, Any]]] = {m: {} for m in names}
    executor = make_executor(evaluate, workers, ray)
    planned = 0
    finished = 0

    def submit(model: str, c: int) -> None:
        nonlocal planned
        task = SweepTask(f"{model}@{c}", model, c, point_scenario(template, model, c), run_seed)
        executor.submit(task.key, task)
        planned += 1

    def drain() -> None:
        nonlocal finished
        while executor.pending():
            key, result = executor.next_done()
            model, c = key.rsplit("@", 1)
            done[model][int(c)] = result
            finished += 1
            if progress is not None:
                progress(finished, planned)

    try:
        if concurrencies is not None:
            for model in names:
                for c in sorted(set(concurrencies)):
                    submit(model, c)
            drain()
        else:
            nxt = {m: 1 for m in names}
            active = set(names)
            while active:
                for model in sorted(active):
                    for _ in range(AUTO_ROUND):
                        if nxt[model] <= AUTO_MAX:
                            submit(model, nxt[model])
                            nxt[model] *= 2
                drain()
                active = {
                    m for m in active if nxt[m] <= AUTO_MAX and not _saturated(done[m], target_tpot_s, percentile)
                }
            for model in names:
                for c in _refinement(done[model], target_tpot_s, percentile):
                    submit(model, c)
            drain()
    finally:
        executor.close()

    out: dict[str, dict[str, Any]] = {}
    for model in names:
        points = [point_record(c, r["summary"], r["wall_s"]) for c, r in sorted(done[model].items())]
        point = at_tpot(points, target_tpot_s, percentile=percentile)
        best = floor_pick(points, target_tpot_s, percentile)
        out[model] = {
            "points": points,
            "at_tpot": point,
            "floor_pick": None if best is None else {k: best.get(k) for k in floor_keys(percentile)},
            "note": None if point is not None else unbracketed_reason(points, target_tpot_s, percentile),
        }
    summaries = {m: {c: r["summary"] for c, r in done[m].items()} for m in names}
    return SweepResult(str(template.get("name", "")), target_tpot_s, out, summaries, percentile)


def floor_keys(percentile: str) -> tuple[str, ...]:
    """What a floor pick keeps: FLOOR_KEYS, and the TPOT its target was read on."""
    key = tpot_key(percentile)
    return FLOOR_KEYS if key in FLOOR_KEYS else (*FLOOR_KEYS, key)


def _refinement(results: dict[int, dict[str, Any]], target_tpot_s: float, percentile: str) -> list[int]:
    """Concurrencies not yet run, evenly inside the pair whose TPOT brackets the target."""
    key = tpot_key(percentile)
    points = [{"concurrency": c, key: r["summary"].get(key)} for c, r in results.items()]
    point = at_tpot(points, target_tpot_s, ("concurrency",), percentile)
    if point is None:
        return []
    lo, hi = point["between_concurrency"]
    inside = {lo + round((hi - lo) * k / (REFINE_POINTS + 1)) for k in range(1, REFINE_POINTS + 1)}
    return sorted(c for c in inside if c not in results)


def _saturated(results: dict[int, dict[str, Any]], target_tpot_s: float, percentile: str) -> bool:
    """--auto stops raising the load once the TPOT read passed the target or requests were rejected."""
    if not results:
        return False
    top = results[max(results)]["summary"]
    tpot = top.get(tpot_key(percentile))
    return (tpot is not None and tpot >= target_tpot_s) or bool(top.get("requests_rejected"))


def scenario_digest(template: dict[str, Any], *args: Any) -> str:
    """The id a sweep's output folder carries (its `.sim-output` marker): a hash of what it was asked."""
    return hashlib.sha256(json.dumps([template, *args], sort_keys=True, default=str).encode()).hexdigest()[
        :16
    ]


def write_outputs(result: SweepResult, out_dir: Path) -> list[Path]:
    """sweep.json and sweep.html, each under a temporary name first."""
    from sim.sweep.page import sweep_page

    out_dir.mkdir(parents=True, exist_ok=True)
    files = []
    for name, text in (
        (SWEEP_JSON, json.dumps(result.to_json(), indent=2) + "\n"),
        (SWEEP_HTML, sweep_page(result)),
    ):
        path = out_dir / name
        tmp = path.with_name(path.name + ".tmp")
        tmp.write_text(text)
        os.replace(tmp, path)
        files.append(path)
    return files
