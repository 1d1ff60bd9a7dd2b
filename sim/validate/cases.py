"""Case files: one YAML per published result (docs/validation.md).

    name: v4-flash-4xh200-agg
    source: "where the number was published, with date"
    scenario: {...}          # an inline scenario mapping, or a path relative to the case file
    model: deepseek-v4-flash
    at: {tpot_p50_ms: 20}    # the operating point: the benchmark's concurrency is raised until it holds
    metric: output_tokens_per_s_per_gpu
    published: 145.4
    setup: ["each modelling choice and where it comes from", ...]

The scenario must have a `workload.benchmark` block (the load that `at` raises) and serve `model`.
Every problem of a case file is reported at once, naming the file and the field.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from pydantic import Field, field_validator

from sim.config.base import StrictModel
from sim.config.errors import field_error, validate_or_raise
from sim.config.scenario import Scenario
from sim.config.yamlio import read_yaml_mapping
from sim.errors import InputError

# summary keys a case may compare (sim.metrics.summarize); all are interpolated at the operating point
METRICS = (
    "output_tokens_per_s_per_gpu",
    "output_tokens_per_s",
    "tokens_per_s_per_user",
    "input_tokens_per_s",
    "ttft_p50_s",
    "ttft_p90_s",
    "ttft_p99_s",
    "tpot_p90_s",
    "tpot_p99_s",
    "e2e_p50_s",
    "e2e_p90_s",
    "prefix_hit_rate",
    "cost_per_task_usd",
    "usd_per_mtok_output",
)


class OperatingPoint(StrictModel):
    tpot_p50_ms: float = Field(
        gt=0, description="TPOT p50 at which the metric is read (1000 / tok/s per user)"
    )


class Case(StrictModel):
    name: str = Field(pattern=r"^[A-Za-z0-9][A-Za-z0-9_.-]*$", description="short unique name")
    source: str = Field(min_length=1, description="where the number was published, with its date")
    scenario: dict[str, Any] | str = Field(
        description="inline scenario mapping, or a path relative to the case"
    )
    model: str = Field(description="the model whose result is compared")
    at: OperatingPoint
    metric: str = Field(description="summary key compared (one of METRICS)")
    published: float = Field(description="the published value of `metric` at `at`")
    setup: list[str] = Field(
        default_factory=list, description="how the scenario mirrors the deployment, sourced"
    )

    @field_validator("metric")
    @classmethod
    def _known_metric(cls, metric: str) -> str:
        if metric not in METRICS:
            raise field_error("not a metric a case can compare", METRICS)
        return metric


class LoadedCase:
    """A validated case with its scenario document resolved (paths absolute) and validated."""

    def __init__(self, case: Case, path: Path, scenario: dict[str, Any]) -> None:
        self.case = case
        self.path = path
        self.scenario = scenario


def load_case(path: Path) -> LoadedCase:
    data = read_yaml_mapping(path)
    case = validate_or_raise(Case, data, file=str(path))
    if isinstance(case.scenario, str):
        scenario_path = (path.parent / case.scenario).resolve()
        if not scenario_path.is_file():
            raise InputError("scenario file not found", file=str(path), where="scenario", value=case.scenario)
        document, base, label = read_yaml_mapping(scenario_path), scenario_path.parent, str(scenario_path)
    else:
        document, base, label = dict(case.scenario), path.parent, f"{path}: scenario"
    scn = validate_or_raise(Scenario, document, file=label, context={"base_dir": base.resolve()})
    models = [m.name for m in scn.models]
    if case.model not in models:
        raise InputError("not one of the scenario's models", file=str(path), where="model", value=case.model,
                         allowed=", ".join(models))  # fmt: skip
    if scn.workload.benchmark is None:
        raise InputError("a case's scenario needs a benchmark client (its concurrency is raised to reach `at`)",
                         file=str(path), where="scenario.workload.benchmark")  # fmt: skip
    for name in ("trace", "generator"):  # absolute, so the points can run from any folder
        if getattr(scn.workload, name) is not None:
            document = {**document, "workload": {**document["workload"], name: getattr(scn.workload, name)}}
    return LoadedCase(case, path, document)


def load_cases(folder: Path) -> list[LoadedCase]:
    """Every `*.yaml` case of `folder`, sorted by file name; names must be unique."""
    if not folder.is_dir():
        raise InputError("not a folder of case files", where="--cases", value=str(folder))
    paths = sorted(p for p in folder.iterdir() if p.suffix in (".yaml", ".yml") and p.is_file())
    if not paths:
        raise InputError("no case files (*.yaml) in the folder", where="--cases", value=str(folder))
    cases = [load_case(p) for p in paths]
    seen: dict[str, Path] = {}
    for c in cases:
        if c.case.name in seen:
            raise InputError(f"case name also used by {seen[c.case.name]}", file=str(c.path), where="name",
                             value=c.case.name)  # fmt: skip
        seen[c.case.name] = c.path
    return cases
