"""Run validation cases: each case's scenario, serving its model, at the case's operating point
(sim.validate.cases: a concurrency, a floor pick over concurrencies, or a TPOT p50 target reached by
`sim sweep --auto`), and every published metric read there.

error_frac[metric] = (simulated - published) / published. Every case yields numbers or one clear
reason. A TPOT target the load never brackets because TPOT stays under it up to the highest
concurrency run (a disaggregated cluster whose prefill pool saturates first) is read at the floor pick
of the points run (the most tokens/s per GPU whose TPOT meets the target), and the note says so.
Nothing is tuned here: the step-time model, cache and scheduler are whatever runs now.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from sim.sweep.points import at_tpot, floor_pick, point_record, unbracketed_reason
from sim.sweep.runner import run_sweep
from sim.validate.cases import LoadedCase
from sim.validate.consistency import Consistency, consistency

Progress = Callable[[str, int, int], None]  # (case name, points finished, points planned)


@dataclass
class CaseResult:
    name: str
    source: str
    model: str
    at: dict[str, Any]  # the case's `at`, as written
    at_label: str
    published: dict[str, float]
    simulated: dict[str, float | None]
    error_frac: dict[str, float | None]
    concurrency: float | None  # where the metrics were read (interpolated under a TPOT target)
    note: str | None
    points: list[dict[str, Any]] = field(default_factory=list)
    setup: list[str] = field(default_factory=list)
    file: str = ""
    group: str = ""  # the deployment the case runs (LoadedCase.group): its GPUs and engines
    consistency: Consistency | None = None  # the published point against its own medians, beside sim's run

    def to_json(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "at": self.at,
            "published": self.published,
            "simulated": self.simulated,
            "error_frac": self.error_frac,
            "model": self.model,
            "concurrency": self.concurrency,
            "source": self.source,
            "note": self.note,
            "file": self.file,
            "group": self.group,
            "consistency": self.consistency.to_json() if self.consistency is not None else None,
            "setup": self.setup,
            "points": self.points,
        }


def _records(result, model: str, metrics: tuple[str, ...]) -> list[dict[str, Any]]:
    out = []
    for c, summary in sorted(result.summaries[model].items()):
        wall = next(p["wall_s"] for p in result.models[model]["points"] if p["concurrency"] == c)
        done = summary.get("requests_completed") or 0
        mean_out = (
            summary["output_tokens"] / done if done and summary.get("output_tokens") is not None else None
        )
        out.append({**point_record(c, summary, wall), **{m: summary.get(m) for m in metrics},
                    "mean_output_tokens": mean_out})  # fmt: skip
    return out


def _read(loaded: LoadedCase, run: Callable[..., Any]) -> tuple[dict[str, Any] | None, list, str | None]:
    """(the point the metrics are read at, all points run, a note) for the case's operating point."""
    case = loaded.case
    metrics = tuple(case.published)
    at = case.at
    if at.concurrency is not None:
        points = _records(run([at.concurrency], None), case.model, metrics)
        return points[0], points, None
    if at.floor_pick is not None:
        fp = at.floor_pick
        target_s = 1.0 / fp.min_tokens_per_s_per_user
        points = _records(run(fp.concurrencies, target_s), case.model, metrics)
        best = floor_pick(points, target_s, max_ttft_p50_s=fp.max_ttft_p50_s)
        if best is None:
            gate = f" and TTFT p50 < {fp.max_ttft_p50_s:g} s" if fp.max_ttft_p50_s is not None else ""
            return None, points, (f"no concurrency of {fp.concurrencies} clears {fp.min_tokens_per_s_per_user:g} "
                                  f"tok/s/user (TPOT p50 <= {target_s * 1e3:.3g} ms){gate}")  # fmt: skip
        return best, points, None
    target_s = (at.tpot_p50_ms or 0.0) / 1e3
    points = _records(run(None, target_s), case.model, metrics)
    point = at_tpot(points, target_s, ("concurrency", *metrics))
    if point is not None:
        return point, points, None
    reason = unbracketed_reason(points, target_s)
    best = floor_pick(points, target_s)
    if best is None or max(p["tpot_p50_s"] for p in points if p.get("tpot_p50_s") is not None) >= target_s:
        return None, points, reason
    return (
        best,
        points,
        f"{reason}: read at the floor pick of the points run (concurrency {best['concurrency']})",
    )


def run_case(
    loaded: LoadedCase, *, workers: int, ray: str | None, progress: Progress | None = None
) -> CaseResult:
    case = loaded.case

    def hook(done: int, planned: int) -> None:
        if progress is not None:
            progress(case.name, done, planned)

    def run(concurrencies: list[int] | None, target_s: float | None):
        scn_target = (loaded.scenario.get("slo") or {}).get("tpot_s", 0.05)  # only names the sweep's own read
        return run_sweep(loaded.scenario, concurrencies=concurrencies, target_tpot_s=target_s or scn_target,
                         workers=workers, ray=ray, models=[case.model], progress=hook)  # fmt: skip

    point, points, note = _read(loaded, run)
    simulated = {m: (point.get(m) if point is not None else None) for m in case.published}
    errors = {
        m: (simulated[m] - v) / v if simulated[m] is not None and v else None
        for m, v in case.published.items()
    }
    return CaseResult(
        name=case.name,
        source=case.source,
        model=case.model,
        at=case.at.model_dump(exclude_none=True),
        at_label=case.at.label(),
        published=dict(case.published),
        simulated=simulated,
        error_frac=errors,
        concurrency=point["concurrency"] if point is not None else None,
        note=note,
        points=points,
        setup=list(case.setup),
        file=str(loaded.path),
        group=loaded.group,
        consistency=consistency(
            point.get("concurrency"), point.get("gpus"), point.get("mean_output_tokens"),
            case.published, point,
        ) if point is not None else None,
    )  # fmt: skip


def run_cases(
    cases: list[LoadedCase], *, workers: int, ray: str | None = None, progress: Progress | None = None
) -> list[CaseResult]:
    return [run_case(c, workers=workers, ray=ray, progress=progress) for c in cases]
