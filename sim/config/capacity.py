"""`capacity:` of a scenario: the capacity search of `sim run` (sim.capacity), on unless `capacity: off`.

For each model the search finds the highest load at which the scenario's SLO still holds (`slo_holds`):
the session rate of a generator workload (its `arrivals.sessions_per_hour`) or the concurrency of a
benchmark client, each point a simulation of its own. A trace replayed as recorded has no rate to
raise: the search is skipped there, and the summary says so.

A point runs the scenario's workload over the search window (`warmup_s`, `horizon_s`; null: the
workload's own, and then the point at the scenario's own load is the run itself, not simulated again).
A shorter window makes each point cheaper but can miss load that builds up slowly: agent sessions
whose contexts grow for hours load the cluster more in the third hour than in the first
(docs/capacity.md measures it), so the window must reach the steady mix of old and new sessions.
"""

from __future__ import annotations

from typing import Any

from pydantic import Field, model_validator

from sim.config.base import StrictModel


class CapacitySearch(StrictModel):
    enabled: bool = Field(True, description="run the capacity search (`capacity: off` turns it off)")
    warmup_s: float | None = Field(None, ge=0, description="each point's warm-up; null = workload.warmup_s")
    horizon_s: float | None = Field(
        None,
        gt=0,
        description="each point's horizon (> warmup_s); null = workload.horizon_s or the whole trace",
    )
    tolerance_frac: float = Field(
        0.05, gt=0, le=1, description="stop when the rate above the reported one is within this share of it"
    )  # a choice [D]: 5% is finer than the run-to-run spread of a p99 over one window
    max_points: int = Field(10, ge=2, le=40, description="simulations per model at most")

    @model_validator(mode="before")
    @classmethod
    def _switch(cls, value: Any) -> Any:
        """`capacity: off` / `on` (YAML reads them as booleans) as the whole block."""
        if isinstance(value, bool):
            return {"enabled": value}
        if isinstance(value, str) and value in ("on", "off"):
            return {"enabled": value == "on"}
        return value

    @model_validator(mode="after")
    def _window(self) -> CapacitySearch:
        if self.warmup_s is not None and self.horizon_s is not None and self.horizon_s <= self.warmup_s:
            raise ValueError(f"horizon_s ({self.horizon_s:g}) must be after warmup_s ({self.warmup_s:g})")
        return self
