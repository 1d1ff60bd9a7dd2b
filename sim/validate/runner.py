"""Run validation cases: each case's scenario, serving its model, through `sim sweep --auto` (doubling
from concurrency 1, then refined inside the bracket around the target), and the case's metric
interpolated at the operating point.

error_frac = (simulated - published) / published. A case whose target is never bracketed (TPOT p50
stays under it up to the highest load, or is over it at concurrency 1) reports simulated None and
says why. Nothing is tuned here: the step-time model, cache and scheduler are whatever runs now.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from sim.sweep.points import at_tpot, point_record, unbracketed_reason
from sim.sweep.runner import run_sweep
from sim.validate.cases import LoadedCase

Progress = Callable[[str, int, int], None]  # (case name, points finished, points planned)


@dataclass
class CaseResult:
    name: str
    source: str
    model: str
    metric: str
    tpot_p50_ms: float
    published: float
    simulated: float | None
    error_frac: float | None
    concurrency: float | None
    note: str | None
    points: list[dict[str, Any]] = field(default_factory=list)
    setup: list[str] = field(default_factory=list)
    file: str = ""

    def to_json(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "published": self.published,
            "simulated": self.simulated,
            "error_frac": self.error_frac,
            "metric": self.metric,
            "at": {"tpot_p50_ms": self.tpot_p50_ms},
            "model": self.model,
            "concurrency": self.concurrency,
            "source": self.source,
            "note": self.note,
            "file": self.file,
            "setup": self.setup,
            "points": self.points,
        }


def _records(result, model: str, metric: str) -> dict[int, dict[str, Any]]:
    out = {}
    for c, summary in result.summaries[model].items():
        wall = next(p["wall_s"] for p in result.models[model]["points"] if p["concurrency"] == c)
        out[c] = {**point_record(c, summary, wall), metric: summary.get(metric)}
    return out


def run_case(
    loaded: LoadedCase, *, workers: int, ray: str | None, progress: Progress | None = None
) -> CaseResult:
    case = loaded.case
    target_s = case.at.tpot_p50_ms / 1e3
    keys = ("concurrency", case.metric) if case.metric != "concurrency" else ("concurrency",)

    def hook(done: int, planned: int) -> None:
        if progress is not None:
            progress(case.name, done, planned)

    common = dict(target_tpot_s=target_s, workers=workers, ray=ray, models=[case.model], progress=hook)
    result = run_sweep(loaded.scenario, concurrencies=None, **common)
    records = _records(result, case.model, case.metric)
    point = at_tpot(list(records.values()), target_s, keys)
    points = [records[c] for c in sorted(records)]
    simulated = point.get(case.metric) if point is not None else None
    if case.metric == "tokens_per_s_per_user" and point is not None:
        simulated = point["tokens_per_s_per_user"]
    error = (
        (simulated - case.published) / case.published if simulated is not None and case.published else None
    )
    return CaseResult(
        name=case.name,
        source=case.source,
        model=case.model,
        metric=case.metric,
        tpot_p50_ms=case.at.tpot_p50_ms,
        published=case.published,
        simulated=simulated,
        error_frac=error,
        concurrency=point["concurrency"] if point is not None else None,
        note=None if point is not None else unbracketed_reason(points, target_s),
        points=points,
        setup=list(case.setup),
        file=str(loaded.path),
    )


def run_cases(
    cases: list[LoadedCase], *, workers: int, ray: str | None = None, progress: Progress | None = None
) -> list[CaseResult]:
    return [run_case(c, workers=workers, ray=ray, progress=progress) for c in cases]
