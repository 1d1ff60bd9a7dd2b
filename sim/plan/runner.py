"""`run_plan`: spec -> combinations -> bisections fed by an executor -> ledger -> outputs.

The simulator is reached only through a `Backend` (see `sim.plan.backend` for the real one), so
the search, executors, ledger and outputs work with any function candidate -> metrics.

Determinism: every decision is taken on data sorted by (combination index, k), never in the
order results arrive; resumed results come from the ledger by key and are used exactly like
fresh ones. Outputs are written to a temporary file and renamed, so a kill leaves none half-written.
"""

from __future__ import annotations

import json
import math
import os
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

import yaml

from sim.errors import InputError
from sim.plan.executors import Executor, make_executor, ray_reachable
from sim.plan.frontier import frontier_figure, frontier_html
from sim.plan.ledger import Ledger, metric_columns
from sim.plan.search import Bisection, pool_nodes
from sim.plan.space import Candidate, Combo, EvalTask, Inspection, candidate, combos, resolve
from sim.plan.spec import Constraints, PlanSpec, load_plan
from sim.plan.steady import WorkloadRate, steady_state
from sim.plan.verdict import recommend

LEDGER_DIR = "candidates"
RECOMMENDATION = "recommendation.json"
FRONTIER = "frontier.html"


class Backend(Protocol):
    """The simulator as the plan sees it."""

    def load_template(self, path: Path) -> dict[str, Any]:
        """The template scenario as a plain document (paths in it made absolute)."""

    def model_overrides(self, template: dict[str, Any], model: str) -> dict[str, Any]:
        """Overrides that make the template serve `model`."""

    def node_steps(self, scenario: dict[str, Any]) -> dict[str, int]:
        """Per pool, the nodes one instance spans (node counts must be multiples), from the raw document."""

    def inspect(self, scenario: dict[str, Any], model: str, *, file: str) -> Inspection:
        """Validate a combination's scenario (InputError when invalid): per-pool GPUs, $/node-hour and
        node step, and whether the model can work on it at all (else a prune reason)."""

    def workload_rate(self, scenario: dict[str, Any], seed: int) -> WorkloadRate | None:
        """Tasks, requests and output tokens per hour the scenario's workload brings in steady
        state (None: it has no arrival rate of its own)."""

    def fingerprint(self, scenario: dict[str, Any]) -> str:
        """Hash of everything besides the scenario document and seed that decides a result (the
        simulator's code and data, the files the scenario names): part of every candidate key."""

    @property
    def evaluate(self) -> Callable[[EvalTask], dict[str, Any]]:
        """A picklable module-level function: task -> {"summary": {model's summary},
        "decode_tokens_per_s": {pool: tokens/s at its SLO batch}, "wall_s": float}."""


ProgressFn = Callable[[int, int, int], None]  # (finished, estimated total, of which resumed)


@dataclass
class PlanOutcome:
    recommendation: dict[str, Any]
    rows: list[dict[str, Any]]
    simulated: int  # simulations run now
    resumed: int  # results taken from the ledger
    wall_s: float
    out_dir: Path
    pruned: list[dict[str, str]] = field(default_factory=list)


def _row(cand: Candidate, result: dict[str, Any], limits: Constraints, rate: WorkloadRate) -> dict[str, Any]:
    summary = result["summary"]
    steady = steady_state(summary, rate, result["decode_tokens_per_s"])
    problems = limits.violations(summary, steady.load)
    return {
        "key": cand.key,
        "model": cand.combo.model,
        "combo": cand.combo.index,
        "combo_label": cand.combo.label,
        "scale": cand.scale,
        "nodes_json": json.dumps(cand.nodes),
        "total_nodes": sum(cand.nodes.values()),
        "total_gpus": cand.total_gpus,
        "seed": cand.seed,
        "feasible": not problems,
        "violations": "; ".join(problems),
        **metric_columns(summary),
        "task_arrivals_per_hour": rate.tasks_per_hour,
        "steady_load": steady.load,
        "steady_bottleneck": steady.bottleneck,
        "steady_cost_per_task_usd": steady.cost_per_task_usd,
        "decode_tokens_per_s_json": json.dumps(result["decode_tokens_per_s"], sort_keys=True),
        "scenario_json": json.dumps(cand.scenario),  # key order kept: it is the YAML written later
        "wall_s": float(result["wall_s"]),
    }


def _cost_bounds(rows: list[dict[str, Any]]) -> dict[str, float]:
    """Per model, the steady cost per task of the cheapest feasible candidate so far (the pruning
    bound: no candidate costs less per task than its $/hour / task arrivals per hour)."""
    bounds: dict[str, float] = {}
    for row in rows:
        if row["feasible"] and row["steady_cost_per_task_usd"] is not None:
            bounds[row["model"]] = min(bounds.get(row["model"], math.inf), row["steady_cost_per_task_usd"])
    return bounds


def _check_cost(cand: Candidate, result: dict[str, Any]) -> None:
    """The cost bound is only sound if the driver's $/hour is the simulator's: insist on it."""
    reported = result["summary"].get("cluster_usd_per_hour")
    if reported is None or not math.isclose(reported, cand.usd_per_hour, rel_tol=1e-9):
        raise RuntimeError(
            f"candidate {cand.key}: simulator reports {reported} $/h, the plan {cand.usd_per_hour}"
        )


def _result_from_row(row: dict[str, Any]) -> dict[str, Any]:
    return {
        "summary": json.loads(row["summary_json"]),
        "decode_tokens_per_s": json.loads(row["decode_tokens_per_s_json"]),
        "wall_s": row["wall_s"],
    }


def run_plan(
    plan_path: str | Path,
    out_dir: str | Path,
    *,
    backend: Backend,
    workers: int,
    ray: str | None = None,
    progress: ProgressFn | None = None,
) -> PlanOutcome:
    started = time.perf_counter()
    spec, template_path = load_plan(plan_path)
    out = Path(out_dir)
    template = backend.load_template(template_path)
    all_combos = combos(spec, {m: backend.model_overrides(template, m) for m in spec.models})

    states: dict[int, Bisection] = {}
    inspections: dict[int, Inspection] = {}
    rates: dict[int, WorkloadRate] = {}  # node counts never change the workload: one per combination
    pruned: list[dict[str, str]] = []
    for combo in all_combos:
        steps = backend.node_steps(resolve(template, combo, {}))
        first = resolve(template, combo, pool_nodes(dict(combo.ratio), spec.nodes.min, steps))
        where = f"{plan_path} [{combo.model}: {combo.label}]"
        inspection = backend.inspect(first, combo.model, file=where)
        rate = backend.workload_rate(first, spec.seed)
        if rate is None:
            raise InputError(
                "the workload has no task arrival rate: a plan compares clusters by cost per task in "
                "steady state (sim.plan.steady)",
                file=where,
                where="workload",
                allowed="a trace or generator whose sessions start over time after workload.warmup_s",
            )
        rates[combo.index] = rate
        if inspection.prune_reason:
            pruned.append(
                {"model": combo.model, "combination": combo.label, "reason": inspection.prune_reason}
            )
        else:
            states[combo.index] = Bisection(spec.nodes.min, spec.nodes.max)
            inspections[combo.index] = inspection
    for model in spec.models:
        if not any(all_combos[i].model == model for i in states):
            reason = next(p["reason"] for p in pruned if p["model"] == model)
            raise InputError(f"every combination for {model} is pruned: {reason}", file=str(plan_path))

    if ray not in (None, "local"):
        ray_reachable(ray)  # before the output folder is made: an unreachable cluster leaves nothing
    ledger = Ledger(out / LEDGER_DIR)
    finished = ledger.load()
    from_ledger = set(finished)  # keys finished by an earlier (interrupted) run of this folder
    rows: list[dict[str, Any]] = []
    counts = {"simulated": 0, "resumed": 0, "capped_by_cost": 0}

    def report(done_in_round: int) -> None:
        if progress:
            done = len(rows) + done_in_round
            left = sum(s.steps_left_at_most() for s in states.values()) - done_in_round
            progress(done, done + left, counts["resumed"])

    def next_probe(combo: Combo, bound_usd_per_task: float | None) -> Candidate | None:
        state = states[combo.index]
        while (k := state.next_k()) is not None:
            cand = candidate(template, combo, k, spec.seed, inspections[combo.index], backend.fingerprint)
            floor_usd_per_task = cand.usd_per_hour / rates[combo.index].tasks_per_hour
            if bound_usd_per_task is None or floor_usd_per_task <= bound_usd_per_task * (1 + 1e-9):
                return cand
            state.cap(k - 1)  # k and every larger k cost more than a feasible answer already found
            counts["capped_by_cost"] += 1
        return None

    executor: Executor | None = None  # started at the first simulation: a full resume starts none
    try:
        while True:
            # One round: every open combination proposes its next probe, given all results so far.
            # Rounds make the cost bound (and so the set of simulated candidates) independent of
            # the order in which results arrive.
            bounds = _cost_bounds(rows)
            probes = [
                c for i in sorted(states) if (c := next_probe(all_combos[i], bounds.get(all_combos[i].model)))
            ]
            if not probes:
                break
            first_probe: dict[str, Candidate] = {}
            for cand in probes:  # two combinations (or two k) may resolve to one scenario: run it once
                first_probe.setdefault(cand.key, cand)
            results: dict[str, dict[str, Any]] = {}
            for key, cand in first_probe.items():
                if key in finished:  # resumed, or met earlier in this plan (k rounded to one count)
                    results[key] = _result_from_row(finished[key])
                    counts["resumed"] += key in from_ledger
                else:
                    executor = executor or make_executor(backend.evaluate, workers, ray)
                    executor.submit(
                        key, EvalTask(key, cand.combo.model, cand.scenario, spec.seed, cand.fingerprint)
                    )
            report(len(results))
            while executor is not None and executor.pending():
                key, result = executor.next_done()
                cand = first_probe[key]
                _check_cost(cand, result)
                row = _row(cand, result, spec.constraints, rates[cand.combo.index])
                ledger.append(row)
                finished[key] = row
                results[key] = result
                counts["simulated"] += 1
                report(len(results))
            for cand in probes:
                row = _row(cand, results[cand.key], spec.constraints, rates[cand.combo.index])
                rows.append(row)
                states[cand.combo.index].record(cand.scale, row["feasible"])
    finally:
        if executor is not None:
            executor.close()
    report(0)

    rows.sort(key=lambda r: (r["combo"], r["scale"]))
    recommendation = recommend(spec, rows, all_combos)
    recommendation["search"] = {
        "combinations": len(all_combos),
        "pruned": pruned,
        "candidates_evaluated": len({r["key"] for r in rows}),
        "probes_skipped_by_cost_bound": counts["capped_by_cost"],
        "node_scale_range": [spec.nodes.min, spec.nodes.max],
    }
    _write_outputs(out, spec, rows, recommendation)
    return PlanOutcome(
        recommendation=recommendation,
        rows=rows,
        simulated=counts["simulated"],
        resumed=counts["resumed"],
        wall_s=time.perf_counter() - started,
        out_dir=out,
        pruned=pruned,
    )


def _write_atomic(path: Path, text: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    temp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    temp.write_text(text, encoding="utf-8")
    os.replace(temp, path)


def _write_outputs(
    out: Path, spec: PlanSpec, rows: list[dict[str, Any]], recommendation: dict[str, Any]
) -> None:
    by_key = {r["key"]: r for r in rows}
    for rec in recommendation["models"].values():
        if rec["feasible"]:
            scenario = json.loads(by_key[rec["candidate"]]["scenario_json"])
            _write_atomic(out / rec["scenario_file"], yaml.safe_dump(scenario, sort_keys=False))
    recommended = {m: rec["candidate"] for m, rec in recommendation["models"].items() if rec["feasible"]}
    but_ttft = spec.constraints.model_copy(update={"ttft_p99_s": None})
    basis = {
        r["key"] for r in rows if not but_ttft.violations(json.loads(r["summary_json"]), r["steady_load"])
    }
    figure = frontier_figure(rows, spec.models, recommended, spec.constraints.ttft_p99_s, basis)
    _write_atomic(out / FRONTIER, frontier_html(figure))
    _write_atomic(out / RECOMMENDATION, json.dumps(recommendation, indent=2, sort_keys=False) + "\n")
