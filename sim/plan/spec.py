"""The plan spec (`sim plan PLAN.yaml`): a scenario template, a search space, constraints and an
objective. Strict and frozen like every config of `sim` (unknown keys rejected, one line per error).

    name: plan_agent
    template: plan_agent_scenario.yaml      # a scenario YAML, relative to the plan file
    seed: 7
    models: [deepseek-v4-flash, deepseek-v4.1-flash]   # one recommendation per model
    space:                                  # discrete axes: axis -> option label -> overrides
      hardware:
        h200: {cluster.pools[name=prefill].hardware: nvidia-h200-hgx8, ...}
    nodes:                                  # node counts are bisected, not enumerated
      min: 1
      max: 8
      ratios:                               # one more discrete axis: pool weights
        p1d2: {prefill: 1, decode: 2}
    constraints: {ttft_p99_s: 20, tpot_p99_s: 0.1, min_slo_attainment_frac: 0.9}   # max_steady_load: 1
    objective: min_cost_per_task            # steady-state cost per task (sim.plan.steady)

Overrides use the dotted paths of `sim.plan.overrides` on the template's YAML document.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Literal

from pydantic import Field, model_validator

from sim.config.base import StrictModel
from sim.config.errors import Problem, raise_problems, validate_or_raise
from sim.config.yamlio import read_yaml_mapping

Overrides = dict[str, Any]


class NodeSearch(StrictModel):
    """How node counts are searched: a bisection on one integer k per discrete combination.

    For a ratio {pool: weight}, the pool with the largest weight gets k nodes and every other pool
    ceil(k x weight / largest weight) (at least 1). Every pool's count is non-decreasing in k, so
    latency is non-increasing and cost increasing in k: the smallest k that meets the constraints
    is found by bisection in [min, max]. The ratio itself is a discrete axis, so the search also
    compares prefill:decode splits without enumerating every pair of counts.
    """

    min: int = Field(1, ge=1, description="smallest k tried")
    max: int = Field(ge=1, description="largest k tried; a combination infeasible at max is infeasible")
    ratios: dict[str, dict[str, float]] = Field(
        min_length=1, description="label -> {pool name: weight > 0}; pools not named keep their nodes"
    )

    @model_validator(mode="after")
    def _check(self) -> NodeSearch:
        problems = []
        if self.max < self.min:
            problems.append(Problem("max", "must be >= min", self.max))
        for label, weights in self.ratios.items():
            if not weights:
                problems.append(Problem(f"ratios.{label}", "needs at least one pool"))
            problems += [
                Problem(f"ratios.{label}.{pool}", "weight must be > 0", w)
                for pool, w in weights.items()
                if not w > 0
            ]
        raise_problems(problems)
        return self


class Constraints(StrictModel):
    """What a candidate must meet to be feasible (all given bounds at once)."""

    ttft_p99_s: float | None = Field(None, gt=0, description="upper bound on p99 time to first token")
    tpot_p99_s: float | None = Field(None, gt=0, description="upper bound on p99 time per output token")
    min_slo_attainment_frac: float | None = Field(
        None, ge=0, le=1, description="lower bound on SLO attainment"
    )
    min_completed_frac: float = Field(
        1.0, ge=0, le=1, description="lower bound on requests completed / arrived (rejections count against)"
    )
    max_steady_load: float | None = Field(
        1.0,
        gt=0,
        description="upper bound on the busiest pool's load at the workload's steady rate (sim.plan.steady); "
        "above 1 its queue grows for as long as tasks arrive; null: not checked",
    )

    def violations(self, summary: dict[str, Any], steady_load: float | None) -> list[str]:
        """Every bound a model's run summary (and its steady load, sim.plan.steady) fails, in
        words (empty: feasible). A metric the run could not measure (None) fails its bound."""
        problems: list[str] = []
        for name, bound in (("ttft_p99_s", self.ttft_p99_s), ("tpot_p99_s", self.tpot_p99_s)):
            value = summary.get(name)
            if bound is not None and (value is None or value > bound):
                problems.append(f"{name} {value} > {bound}")
        attained = summary.get("slo_attainment")
        floor = self.min_slo_attainment_frac
        if floor is not None and (attained is None or attained < floor):
            problems.append(f"slo_attainment {attained} < {floor}")
        arrived = summary.get("requests_arrived") or 0
        completed = (summary.get("requests_completed") or 0) / arrived if arrived else 0.0
        if completed < self.min_completed_frac:
            problems.append(f"completed fraction {completed:.4f} < {self.min_completed_frac}")
        bound = self.max_steady_load
        if bound is not None and (steady_load is None or steady_load > bound):
            shown = "unknown" if steady_load is None else f"{steady_load:.3f}"
            problems.append(f"steady load {shown} > {bound} (cannot keep up with the task arrivals)")
        return problems


class PlanSpec(StrictModel):
    name: str = Field(min_length=1)
    template: str = Field(description="scenario YAML the candidates start from, relative to the plan file")
    seed: int = Field(ge=0, description="simulation seed of every candidate")
    models: list[str] = Field(min_length=1, description="model names; one recommendation each")
    space: dict[str, dict[str, Overrides]] = Field(
        default_factory=dict, description="axis -> option label -> {dotted path: value}"
    )
    nodes: NodeSearch
    constraints: Constraints
    # Least cost per task in steady state (sim.plan.steady): every candidate serves the template's
    # workload, so among those that keep up it is the same ranking as least $/hour; one name keeps
    # the door open for objectives that vary the load.
    objective: Literal["min_cost_per_task"] = "min_cost_per_task"

    @model_validator(mode="after")
    def _check(self) -> PlanSpec:
        problems = [
            Problem(f"space.{axis}", "needs at least one option")
            for axis, opts in self.space.items()
            if not opts
        ]
        if len(set(self.models)) != len(self.models):
            problems.append(Problem("models", "a model is listed twice", self.models))
        raise_problems(problems)
        return self


def load_plan(path: str | Path) -> tuple[PlanSpec, Path]:
    """The validated plan and the absolute path of its scenario template."""
    path = Path(path)
    spec = validate_or_raise(PlanSpec, read_yaml_mapping(path), file=str(path))
    return spec, (path.parent / spec.template).resolve()
