"""What a validation's errors say at a glance: how many cases read each metric within a tolerance, and the
error of the two speed axes by deployment (the cases' GPUs and engines), signed and absolute medians, so a
reader sees where sim runs fast or slow before reading any case (`sim validate`'s second table, its JSON's
`groups`, its page)."""

from __future__ import annotations

from dataclasses import asdict, dataclass
from statistics import median
from typing import Any

SPEED_METRICS = (
    "output_tokens_per_s_per_gpu",
    "tokens_per_s_per_user",
)  # the two axes serving benchmarks publish
ALL_CASES = "all"  # the group of every case


def within_counts(results: list, tolerance_frac: float) -> dict[str, dict[str, int]]:
    """How many cases read each metric within +-`tolerance_frac` of the published value, of those that give it
    a number; and (`speed`) how many cases publish both SPEED_METRICS and read both within it."""
    out: dict[str, dict[str, int]] = {}
    for r in results:
        for metric, error in r.error_frac.items():
            counts = out.setdefault(metric, {"within": 0, "scored": 0})
            if error is not None:
                counts["scored"] += 1
                counts["within"] += abs(error) <= tolerance_frac
    speed = [r for r in results if all(m in r.published for m in SPEED_METRICS)]
    out["speed"] = {"within": sum(_both_within(r, tolerance_frac) for r in speed), "scored": len(speed)}
    return out


def _both_within(r, tolerance_frac: float) -> bool:
    return all(r.error_frac[m] is not None and abs(r.error_frac[m]) <= tolerance_frac for m in SPEED_METRICS)


@dataclass(frozen=True)
class GroupError:
    """The speed errors of one deployment group's cases (those publishing both SPEED_METRICS): `within` of
    `cases` read both within the tolerance; per metric the median signed error (sim fast: > 0) and the median
    absolute error, over the cases that give a number (None: none does)."""

    group: str
    cases: int
    within: int
    median_error_frac: dict[str, float | None]
    median_abs_error_frac: dict[str, float | None]

    def to_json(self) -> dict[str, Any]:
        return asdict(self)


def _group_error(group: str, results: list, tolerance_frac: float) -> GroupError:
    signed: dict[str, float | None] = {}
    absolute: dict[str, float | None] = {}
    for m in SPEED_METRICS:
        errors = [r.error_frac[m] for r in results if r.error_frac[m] is not None]
        signed[m] = median(errors) if errors else None
        absolute[m] = median(abs(e) for e in errors) if errors else None
    within = sum(_both_within(r, tolerance_frac) for r in results)
    return GroupError(group, len(results), within, signed, absolute)


def group_errors(results: list, tolerance_frac: float) -> list[GroupError]:
    """The speed errors by deployment group (`CaseResult.group`), groups by name, then every case together
    (`ALL_CASES`); cases that do not publish both speed metrics are left out."""
    speed = [r for r in results if all(m in r.published for m in SPEED_METRICS)]
    groups = sorted({r.group for r in speed})
    rows = [_group_error(g, [r for r in speed if r.group == g], tolerance_frac) for g in groups]
    return [*rows, _group_error(ALL_CASES, speed, tolerance_frac)] if speed else []
