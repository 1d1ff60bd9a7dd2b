"""What the page plots: one series per (run, model), with its name, colour (per model) and dash (per run)."""

from __future__ import annotations

from dataclasses import dataclass

from sim.report.rundata import RunData
from sim.report.theme import model_colors, run_dash, run_pattern


@dataclass(frozen=True)
class Series:
    run: RunData
    run_index: int
    model: str
    name: str
    color: str
    dash: str

    @property
    def summary(self) -> dict:
        """This model's block of the run's summary.json."""
        return self.run.model_summary(self.model)

    def value(self, key: str) -> float | None:
        """A number of this model's summary (None when absent, null or not a number)."""
        v = self.summary.get(key)
        return float(v) if isinstance(v, int | float) and not isinstance(v, bool) else None

    @property
    def pattern(self) -> str:
        """Bar fill pattern: the bar-chart counterpart of the run's dash."""
        return run_pattern(self.run_index)

    def line(self, width: float = 2.0) -> dict:
        return dict(color=self.color, dash=self.dash, width=width)


def build_series(runs: list[RunData]) -> list[Series]:
    """Series of every model of every run, in run order then model order.

    Names carry the run label only when the page shows several runs, so a single-run report reads
    "v41-flash", not "run_a · v41-flash".
    """
    colors = model_colors(m for run in runs for m in run.models)
    several = len(runs) > 1
    return [
        Series(
            run=run,
            run_index=i,
            model=model,
            name=f"{run.label} · {model}" if several else model,
            color=colors[model],
            dash=run_dash(i),
        )
        for i, run in enumerate(runs)
        for model in run.models
    ]
