"""The decision: the recommended configuration per model (the best feasible candidate under the
objective), and the verdict: how many nodes and dollars each model needs for the same workload
and SLO. The table shows exactly the numbers of `recommendation.json`; ratios are each model
against the first model of the plan.
"""

from __future__ import annotations

import json
import math
from typing import Any

from rich.table import Table

from sim.plan.ledger import METRIC_COLUMNS
from sim.plan.space import Combo
from sim.plan.spec import PlanSpec
from sim.plan.steady import METHOD

SCENARIOS_DIR = "scenarios"


def objective_key(row: dict[str, Any]) -> tuple:
    """Sort key of the recommendation (objective `min_cost_per_task`): the steady-state cost per
    task (sim.plan.steady), which for candidates that keep up is $/hour over the workload's task
    arrivals per hour; then $/hour, fewer GPUs, search order. The run's own cost per task ($/h x
    window / tasks completed in it) is no key: it moves with the drain after the last arrival."""
    cost = row["steady_cost_per_task_usd"]
    return (
        math.inf if cost is None else cost,  # unknown only where the plan checks no steady load
        row["cluster_usd_per_hour"],
        row["total_gpus"],
        row["combo"],
        row["scale"],
    )


def scenario_file(model: str) -> str:
    """Where the recommended scenario of `model` is written, relative to the output folder."""
    return f"{SCENARIOS_DIR}/{model}.yaml"


def recommend(spec: PlanSpec, rows: list[dict[str, Any]], all_combos: list[Combo]) -> dict[str, Any]:
    """recommendation.json (less its `search` section): per model the best feasible candidate, and
    the verdict. `rows` are every simulated (combination, k), in search order."""
    models: dict[str, dict[str, Any]] = {}
    for model in spec.models:
        feasible = sorted((r for r in rows if r["model"] == model and r["feasible"]), key=objective_key)
        if not feasible:
            models[model] = {"feasible": False}
            continue
        best = feasible[0]
        path = scenario_file(model)
        models[model] = {
            "feasible": True,
            "candidate": best["key"],
            "combo_label": best["combo_label"],
            "choices": dict(all_combos[best["combo"]].choices),
            "nodes": json.loads(best["nodes_json"]),
            "total_nodes": best["total_nodes"],
            "total_gpus": best["total_gpus"],
            "cluster_usd_per_hour": best["cluster_usd_per_hour"],
            "cost_per_task_usd": best["steady_cost_per_task_usd"],
            "cost_per_task_method": METHOD,
            "steady_state": {
                "task_arrivals_per_hour": best["task_arrivals_per_hour"],
                "load": best["steady_load"],
                "bottleneck_pool": best["steady_bottleneck"],
            },
            "metrics": {name: best[name] for name in METRIC_COLUMNS},
            "scenario_file": path,
            "reproduce": f"sim run {path} --seed {best['seed']}",
        }
    return {
        "plan": spec.name,
        "objective": spec.objective,
        "constraints": spec.constraints.model_dump(),
        "seed": spec.seed,
        "models": models,
        "verdict": verdict(models),
    }


_QUANTITIES = ("total_nodes", "total_gpus", "cluster_usd_per_hour", "cost_per_task_usd")


def verdict(models: dict[str, dict[str, Any]]) -> dict[str, Any]:
    """{"baseline": model, "ratios": {model: {quantity: model / baseline}}} over feasible models."""
    feasible = {name: rec for name, rec in models.items() if rec["feasible"]}
    names = list(models)
    baseline = names[0]
    ratios: dict[str, dict[str, float | None]] = {}
    for name in names[1:]:
        if name in feasible and baseline in feasible:
            ratios[name] = {q: _ratio(feasible[name][q], feasible[baseline][q]) for q in _QUANTITIES}
    return {"baseline": baseline, "ratios": ratios, "infeasible": [n for n in names if n not in feasible]}


def _ratio(a: float, b: float) -> float | None:
    return None if not b else a / b


def verdict_table(models: dict[str, dict[str, Any]], summary: dict[str, Any]) -> Table:
    """One row per model (nodes per pool, GPUs, $/h, steady $/task and load, TTFT/TPOT p99), then the
    ratio rows; the caption names the cost method."""
    table = Table(
        title="Capacity verdict: cheapest configuration meeting the constraints, same workload",
        caption=f"$/task: {METHOD}",
    )
    columns = ("model", "nodes", "GPUs", "$/hour", "$/task", "steady load", "TTFT p99 s", "TPOT p99 s")
    for column in columns:
        table.add_column(column, justify="left" if column in ("model", "nodes") else "right")
    for name, rec in models.items():
        if not rec["feasible"]:
            table.add_row(name, "[red]none feasible in the search space[/]", *[""] * (len(columns) - 2))
            continue
        metrics = rec["metrics"]
        table.add_row(
            name,
            ", ".join(f"{pool} {n}" for pool, n in rec["nodes"].items()),
            str(rec["total_gpus"]),
            f"{rec['cluster_usd_per_hour']:,.2f}",
            "n/a" if rec["cost_per_task_usd"] is None else f"{rec['cost_per_task_usd']:.4f}",
            _fmt_load(rec["steady_state"]),
            f"{metrics['ttft_p99_s']:.3f}",
            f"{metrics['tpot_p99_s']:.4f}",
        )
    for name, ratio in summary["ratios"].items():
        table.add_row(
            f"{name} / {summary['baseline']}",
            _fmt_ratio(ratio["total_nodes"]) + " the nodes",
            _fmt_ratio(ratio["total_gpus"]),
            _fmt_ratio(ratio["cluster_usd_per_hour"]),
            _fmt_ratio(ratio["cost_per_task_usd"]),
            "",
            "",
            "",
            style="bold",
        )
    return table


def configuration_lines(models: dict[str, dict[str, Any]]) -> list[str]:
    """`model: axis=option ...` for each feasible recommendation (the table leaves these out)."""
    return [
        f"{name}: " + " ".join(f"{axis}={option}" for axis, option in rec["choices"].items())
        for name, rec in models.items()
        if rec["feasible"]
    ]


def _fmt_load(steady: dict[str, Any]) -> str:
    return "n/a" if steady["load"] is None else f"{steady['load']:.2f} ({steady['bottleneck_pool']})"


def _fmt_ratio(value: float | None) -> str:
    return "n/a" if value is None else f"{value:.2f}x"
