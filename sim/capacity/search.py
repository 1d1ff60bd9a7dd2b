"""The bracket-and-bisect search over an integer load (sessions per hour, or a benchmark's concurrency).

Every point is measured (`measure(load)` runs a simulation and says whether the SLO holds); nothing is
extrapolated. The search:
1. measures the scenario's own load;
2. brackets: while the SLO holds, the next load is a guess from the busiest resource's measured share
   (`next_up`: the load that would bring it to `TARGET_SHARE`, at least x1.1 and at most x8; x2 where
   no resource was measured); while it fails, halves (to 1 at least);
3. bisects the bracket (geometric midpoint) until the load above the sustained one is within
   `tolerance_frac` of it (or a step of 1), or `max_points` simulations were run.
It reports the highest load measured to hold (`sustained`) and the lowest measured to fail above it
(`above`). The search assumes the SLO fails from one load upwards; where it does not (a p99 set by a few
requests can dip above a failing load), it reports a bracket it measured, and both its ends stand.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

# a step up from a load that held: to where the busiest resource would be this used, within these
# multiples (choices [D]: queues make latency pass an SLO somewhere around 80-95% busy)
TARGET_SHARE = 0.9
GUESS_MIN, GUESS_MAX = 1.1, 8.0


@dataclass(frozen=True)
class Measured:
    """One load's simulation: whether the SLO held, why not, the load of its busiest resource, and
    whatever the caller keeps of it (`record`)."""

    load: int
    holds: bool
    busiest_share: float | None
    record: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class SearchResult:
    points: list[Measured]  # in the order run
    sustained: Measured | None  # the highest load that held (None: not even the lowest tried)
    above: Measured | None  # the lowest load above it that failed (None: none failed up to the cap)
    converged: bool  # the bracket closed within the tolerance before max_points


def next_up(load: int, busiest_share: float | None) -> int:
    """The next load to try above one that held (module doc)."""
    factor = 2.0 if not busiest_share else TARGET_SHARE / busiest_share
    return max(load + 1, round(load * min(GUESS_MAX, max(GUESS_MIN, factor))))


def closed(lo: int, hi: int, tolerance_frac: float) -> bool:
    return hi - lo <= max(1, math.floor(lo * tolerance_frac))


def points_expected(run: int, lo: int | None, hi: int | None, tolerance_frac: float, max_points: int) -> int:
    """How many points the search will have run in all, `run` so far (for a progress bar's ETA): the
    bisections a bracket still needs, or a step to find one and three bisections where none is yet."""
    if lo is None or hi is None:
        return min(max_points, run + 4)
    if closed(lo, hi, tolerance_frac):
        return run
    halvings = math.log(math.log(hi / lo) / math.log1p(max(tolerance_frac, 1.0 / lo)), 2)
    return min(max_points, run + max(1, math.ceil(halvings)))


def search(
    measure: Callable[[int], Measured],
    start: int,
    *,
    tolerance_frac: float,
    max_points: int,
    max_load: int = 1_000_000,
    on_plan: Callable[[int], None] | None = None,
) -> SearchResult:
    """The search of the module doc from `start` (>= 1); `on_plan(points)` hears, before each point,
    how many the search expects to run in all (`points_expected`)."""
    points: list[Measured] = []

    def run(load: int) -> Measured:
        if on_plan is not None:
            on_plan(points_expected(len(points), _load(lo), _load(hi), tolerance_frac, max_points))
        point = measure(load)
        points.append(point)
        return point

    lo: Measured | None = None
    hi: Measured | None = None
    p = run(max(1, start))
    if p.holds:
        lo = p
        while len(points) < max_points and next_up(p.load, p.busiest_share) <= max_load:
            p = run(next_up(p.load, p.busiest_share))
            if not p.holds:
                hi = p
                break
            lo = p
    else:
        hi = p
        while len(points) < max_points and hi.load > 1:
            p = run(max(1, hi.load // 2))
            if p.holds:
                lo = p
                break
            hi = p
    while lo is not None and hi is not None and not closed(lo.load, hi.load, tolerance_frac):
        if len(points) >= max_points:
            break
        mid = min(hi.load - 1, max(lo.load + 1, round(math.sqrt(lo.load * hi.load))))
        p = run(mid)
        if p.holds:
            lo = p
        else:
            hi = p
    converged = lo is not None and hi is not None and closed(lo.load, hi.load, tolerance_frac)
    return SearchResult(points, lo, hi, converged)


def _load(point: Measured | None) -> int | None:
    return None if point is None else point.load
