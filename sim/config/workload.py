"""`workload:` of a scenario: where requests come from and how they are replayed.

Paths are relative to the scenario file; the loader passes that folder as validation context
(`base_dir`), and the validated model holds absolute paths.
"""

from __future__ import annotations

from pathlib import Path
from typing import Literal

from pydantic import Field, ValidationInfo, field_validator, model_validator

from sim.config.base import StrictModel
from sim.config.errors import Problem, field_error, raise_problems


class Workload(StrictModel):
    trace: str | None = Field(
        None, description="canonical Parquet trace (sim.workload.schema), relative path"
    )
    generator: str | None = Field(None, description="generator spec YAML, relative path")
    days: float | None = Field(
        None, gt=0, description="days to generate (generator only; default: the spec's)"
    )
    replay: Literal["closed_loop", "open_loop"] = Field(
        "closed_loop",
        description="closed: next turn after the previous finishes + think time; open: trace times",
    )
    warmup_s: float = Field(0.0, ge=0, description="simulated seconds excluded from metrics")
    horizon_s: float | None = Field(None, gt=0, description="stop after this simulated time (> warmup_s)")
    max_requests: int | None = Field(None, ge=1, description="stop after this many arrivals")
    drain_limit_s: float = Field(
        604800.0,
        gt=0,
        description="after the last arrival, run at most this long; requests still in the system are "
        "then rejected as unfinished_at_end",
    )  # a choice: 7 days, so an overloaded cluster ends instead of running on

    @field_validator("trace", "generator")
    @classmethod
    def _file_exists(cls, value: str | None, info: ValidationInfo) -> str | None:
        if value is None:
            return None
        base = Path((info.context or {}).get("base_dir", "."))
        path = (base / value).resolve()
        if info.field_name == "trace" and path.suffix != ".parquet":
            raise field_error(
                "a trace must be a canonical Parquet file; import others with `sim trace`", ".parquet"
            )
        if info.field_name == "generator" and path.suffix not in (".yaml", ".yml"):
            raise field_error("a generator spec must be a YAML file", ".yaml, .yml")
        if not path.is_file():
            raise field_error(f"file not found: {path}")
        return str(path)

    @model_validator(mode="after")
    def _source_and_window(self) -> Workload:
        problems = []
        if (self.trace is None) == (self.generator is None):
            message = "both trace and generator given" if self.trace else "neither trace nor generator given"
            problems.append(Problem("", message, allowed="exactly one of: trace, generator"))
        if self.days is not None and self.generator is None:
            problems.append(Problem("days", "days applies to a generator only", self.days))
        if self.horizon_s is not None and self.horizon_s <= self.warmup_s:
            problems.append(
                Problem(
                    "horizon_s",
                    f"must be greater than warmup_s ({self.warmup_s:g} s)",
                    self.horizon_s,
                    f"> {self.warmup_s:g}",
                )
            )
        raise_problems(problems)
        return self

    @property
    def source_path(self) -> Path:
        """The trace or generator spec, absolute."""
        return Path(self.trace or self.generator)  # one of them is set after validation
