"""Case files: one YAML per published result (docs/validation.md; docs/engines_and_validation.md).

    name: v4-flash-4xh200-agg
    source: "where the numbers were published, with date"
    scenario: {...}          # an inline scenario mapping, or a path relative to the case file
    model: deepseek-v4-flash
    at: {concurrency: 16}    # the operating point (one of three forms, below)
    published: {output_tokens_per_s_per_gpu: 145.4, tokens_per_s_per_user: 50.7}
    setup: ["each modelling choice and where it comes from", ...]

`at` is one of
    {concurrency: N}                      the published point itself: the benchmark held at N requests
    {floor_pick: {min_tokens_per_s_per_user: 50, concurrencies: [8, 16, 32]}}
                                          the recipes' rule: of those concurrencies, the one with the most
                                          output tokens/s per GPU whose tokens/s per user (1 / TPOT p50) clears
                                          the floor
    {tpot_p50_ms: 20}                     the concurrency is raised (`sim sweep --auto`) until TPOT p50 is 20 ms,
                                          and the metrics are interpolated there
`published` compares one or more summary keys (METRICS) at once. A request's TPOT is (latency - TTFT) /
(output tokens - 1) over requests with more than one output token, as SGLang's bench_serving computes it;
tokens/s per user is 1 / its p50 (`tpot_mean_s`, the mean over requests, can be compared on its own).

A benchmark that sends a fixed number of prompts and times the whole run (bench_serving's
`--num-prompts N --max-concurrency C`: the first C requests at once, the next as each one ends, the
duration from the first send to the last completion) is the scenario's closed loop with
`workload.max_requests: N`, `warmup_s: 0` and no horizon: the measured window is then the whole run.

The scenario must have a `workload.benchmark` block (the load that `at` sets) and serve `model`.
Every problem of a case file is reported at once, naming the file and the field.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from pydantic import Field, field_validator, model_validator

from sim.config.base import StrictModel
from sim.config.errors import Problem, field_error, raise_problems, validate_or_raise
from sim.config.scenario import Scenario
from sim.config.yamlio import read_yaml_mapping
from sim.errors import InputError

# summary keys a case may compare (sim.metrics.summarize)
METRICS = (
    "output_tokens_per_s_per_gpu",
    "output_tokens_per_s",
    "tokens_per_s_per_user",
    "input_tokens_per_s",
    "ttft_mean_s",
    "ttft_p50_s",
    "ttft_p90_s",
    "ttft_p99_s",
    "tpot_mean_s",
    "tpot_p50_s",
    "tpot_p90_s",
    "tpot_p99_s",
    "e2e_p50_s",
    "e2e_p90_s",
    "prefix_hit_rate",
    "cost_per_task_usd",
    "usd_per_mtok_output",
)


class FloorPick(StrictModel):
    min_tokens_per_s_per_user: float = Field(
        gt=0, description="the floor on tokens/s per user (1 / TPOT p50)"
    )
    concurrencies: list[int] = Field(min_length=1, description="the concurrencies the publisher ran")
    max_ttft_p50_s: float | None = Field(
        None, gt=0, description="a second gate: TTFT p50 under this (Dynamo's V4.1 recipes: 5 s); null: none"
    )

    @field_validator("concurrencies")
    @classmethod
    def _positive(cls, values: list[int]) -> list[int]:
        if any(c < 1 for c in values) or len(set(values)) != len(values):
            raise field_error("concurrencies must be distinct and >= 1", "e.g. [8, 16, 32, 64]")
        return sorted(values)


class OperatingPoint(StrictModel):
    """Exactly one of the three forms (module doc)."""

    concurrency: int | None = Field(None, ge=1, description="the published point: requests held in flight")
    floor_pick: FloorPick | None = Field(None, description="best tok/s/GPU whose tok/s/user clears the floor")
    tpot_p50_ms: float | None = Field(
        None, gt=0, description="TPOT p50 at which the metrics are interpolated (1000 / tok/s per user)"
    )

    @model_validator(mode="after")
    def _one_form(self) -> OperatingPoint:
        given = [k for k in ("concurrency", "floor_pick", "tpot_p50_ms") if getattr(self, k) is not None]
        if len(given) != 1:
            raise_problems([Problem("", f"{len(given)} forms given ({', '.join(given) or 'none'})",
                                    allowed="exactly one of: concurrency, floor_pick, tpot_p50_ms")])  # fmt: skip
        return self

    @property
    def kind(self) -> str:
        return next(k for k in ("concurrency", "floor_pick", "tpot_p50_ms") if getattr(self, k) is not None)

    def label(self) -> str:
        """How a table names the operating point."""
        if self.concurrency is not None:
            return f"concurrency {self.concurrency}"
        if self.floor_pick is not None:
            fp = self.floor_pick
            gate = f", TTFT p50 < {fp.max_ttft_p50_s:g} s" if fp.max_ttft_p50_s is not None else ""
            return f"floor pick >= {fp.min_tokens_per_s_per_user:g} tok/s/user{gate}"
        return f"TPOT p50 {self.tpot_p50_ms:g} ms"


class Case(StrictModel):
    name: str = Field(pattern=r"^[A-Za-z0-9][A-Za-z0-9_.-]*$", description="short unique name")
    source: str = Field(min_length=1, description="where the numbers were published, with their date")
    scenario: dict[str, Any] | str = Field(
        description="inline scenario mapping, or a path relative to the case"
    )
    model: str = Field(description="the model whose result is compared")
    at: OperatingPoint
    published: dict[str, float] = Field(
        min_length=1, description="summary key (one of METRICS) -> the published value at `at`"
    )
    setup: list[str] = Field(
        default_factory=list, description="how the scenario mirrors the deployment, sourced"
    )

    @field_validator("published")
    @classmethod
    def _known_metrics(cls, published: dict[str, float]) -> dict[str, float]:
        unknown = [m for m in published if m not in METRICS]
        if unknown:
            raise field_error(f"not a metric a case can compare: {', '.join(unknown)}", METRICS)
        return published


class LoadedCase:
    """A validated case with its scenario document resolved (paths absolute) and validated; `group` names the
    deployment it runs (`deployment_group`)."""

    def __init__(self, case: Case, path: Path, scenario: dict[str, Any], group: str) -> None:
        self.case = case
        self.path = path
        self.scenario = scenario
        self.group = group


def deployment_group(scn: Scenario, model: str) -> str:
    """The GPUs and engines `model`'s pools run on, e.g. 'B200, sglang 0.5.15' (several: joined by ' + '): the
    group `sim validate` summarises the case's error in (sim.validate.summary)."""
    pools = scn.for_model(model).cluster.pools
    gpus = sorted({scn.pool_profile(p).gpu for p in pools})
    engines = sorted({e.label if (e := scn.pool_engine(p)) is not None else "no engine" for p in pools})
    return f"{' + '.join(gpus)}, {' + '.join(engines)}"


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
        raise InputError("a case's scenario needs a benchmark client (`at` sets its concurrency)",
                         file=str(path), where="scenario.workload.benchmark")  # fmt: skip
    for name in ("trace", "generator"):  # absolute, so the points can run from any folder
        if getattr(scn.workload, name) is not None:
            document = {**document, "workload": {**document["workload"], name: getattr(scn.workload, name)}}
    return LoadedCase(case, path, document, deployment_group(scn, case.model))


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
