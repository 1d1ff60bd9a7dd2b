"""Piecewise interpolation for the timing models: `Curve` (one axis) and `Grid` (two axes on a
possibly ragged grid) over measured kernel times (sim.timing.tables builds them from rows, whose
module doc gives the rules per axis), and `LinearTable` / `QuadraticTable` over the model
arithmetic (sim.timing.arith).

Only arithmetic on floats and tuples lives here, with nothing to import but `math`:
it answers most of the simulator's timing questions, so it is part of the compiled core
(sim/native.py).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any, Final

from mypy_extensions import i64

LOGLOG: Final = "loglog"
LINEAR: Final = "linear"


def _upper(xs: list[float], x: float) -> int:
    """The number of knots <= x (`bisect.bisect_right`'s answer, same steps): compiled, it compares
    C doubles (with machine-integer indices), where bisect_right compares Python floats through the
    generic protocol."""
    lo: i64 = 0
    hi: i64 = len(xs)
    while lo < hi:
        mid = (lo + hi) >> 1
        if x < xs[mid]:
            hi = mid
        else:
            lo = mid + 1
    return lo


# knot vectors longer than this get a bucket index (`Knots`); shorter ones are bisected (a few steps)
_INDEXED_KNOTS: Final = 16
_MAX_BUCKETS: Final = 8192  # constants: compiled code reads a Final inline, other globals from a dict


class Knots:
    """A strictly increasing knot vector and `upper(x)`, the number of knots <= x (`_upper`'s
    answer, exactly), found through a bucket index when the vector is long: equal-width buckets
    over [first, last] each record the answer at their start, and a few comparisons walk from there
    to x. The tables over token positions have hundreds of knots (sim.timing.arith: every 128 tokens
    to 64K, then geometric), where bisection takes ten steps, each a tuple read and a float unboxing
    in compiled code."""

    __slots__ = ("xs", "n", "_lo", "_hi", "_inv_width", "_starts")

    def __init__(self, xs: tuple[float, ...]) -> None:
        self.xs = list(xs)  # a list: compiled code reads it by machine-integer index
        n = self.n = len(xs)
        self._lo = xs[0] if n else 0.0
        self._hi = xs[-1] if n else 0.0
        self._starts: list[int] = []
        self._inv_width = 0.0
        if n > _INDEXED_KNOTS and self._hi > self._lo:
            width = (self._hi - self._lo) / _MAX_BUCKETS
            self._inv_width = 1.0 / width
            self._starts = [_upper(self.xs, self._lo + b * width) for b in range(_MAX_BUCKETS)]

    def upper(self, x: float) -> int:
        xs = self.xs
        starts = self._starts
        if not starts:
            return _upper(xs, x)
        if x < self._lo:
            return 0
        if x >= self._hi or x != x:  # NaN: bisection answers n too
            return self.n
        b = int((x - self._lo) * self._inv_width)
        if b >= _MAX_BUCKETS:
            b = _MAX_BUCKETS - 1
        i = starts[b]
        # the bucket's start is at or below x up to rounding: walk either way to the exact answer
        while xs[i] <= x:  # stops before n: x < the last knot
            i += 1
        while i > 0 and xs[i - 1] > x:
            i -= 1
        return i


def _step(x0: float, x1: float, loglog: bool) -> float:
    """Width of [x0, x1] in the axis' interpolation coordinate (log x or x); fixed per segment, so
    curves and grids compute it once."""
    return math.log(x1 / x0) if loglog else x1 - x0


def _between(x0: float, step: float, y0: float, y1: float, x: float, loglog: bool) -> float:
    """Value at x in [x0, x1] on the segment through (x0, y0), (x1, y1); step = _step(x0, x1)."""
    if loglog:
        # math.pow: the C pow() both ways (float ** float compiles to a generic call on boxed floats)
        return y0 * math.pow(y1 / y0, math.log(x / x0) / step)
    return y0 + (y1 - y0) * (x - x0) / step


def _beyond(xs: Sequence[float], ys: Sequence[float], x: float, mode: str) -> float:
    """Value at x above the last point: proportional to x (loglog) or the last segment continued
    with a slope >= 0 (linear)."""
    if mode == LOGLOG:
        return ys[-1] * x / xs[-1]
    if len(xs) < 2:
        return ys[-1]
    slope = max(0.0, (ys[-1] - ys[-2]) / (xs[-1] - xs[-2]))
    return ys[-1] + slope * (x - xs[-1])


class _Segment:
    """One segment of a `Curve`: its start, width (`_step`) and end values, as unboxed fields."""

    __slots__ = ("x0", "step", "y0", "y1")

    def __init__(self, x0: float, step: float, y0: float, y1: float) -> None:
        self.x0 = x0
        self.step = step
        self.y0 = y0
        self.y1 = y1


class Curve:
    """t(x) through measured points (xs strictly increasing; ys > 0 on a loglog axis). Immutable
    by convention: built once per timing model, read millions of times."""

    def __init__(self, xs: tuple[float, ...], ys: tuple[float, ...], mode: str = LOGLOG) -> None:
        if not xs or len(xs) != len(ys):
            raise ValueError("a curve needs as many values as points, at least one")
        if any(b <= a for a, b in zip(xs, xs[1:], strict=False)):
            raise ValueError(f"curve points must increase strictly: {xs}")
        if mode == LOGLOG and (xs[0] <= 0.0 or min(ys) <= 0.0):
            raise ValueError("a loglog curve needs positive points and values")
        if mode not in (LOGLOG, LINEAR):
            raise ValueError(f"unknown interpolation mode {mode!r}")
        self.xs = tuple(float(x) for x in xs)
        self.ys = tuple(float(y) for y in ys)
        self.mode = mode
        self._knots = Knots(self.xs)
        xs, ys = self.xs, self.ys
        # per piece (below the first point, each segment, above the last): (start x, value,
        # slope) of the linear form, for closed-form sums
        pieces = [(xs[0], ys[0], 0.0)]
        pieces += [(xs[i], ys[i], (ys[i + 1] - ys[i]) / (xs[i + 1] - xs[i])) for i in range(len(xs) - 1)]
        pieces.append((xs[-1], ys[-1], max(0.0, pieces[-1][2]) if len(xs) > 1 else 0.0))
        self._pieces = tuple(pieces)
        # per segment, for `at`, and the ends and the mode as plain fields (lookups are the hot path)
        self._loglog = mode == LOGLOG
        self._segments = [
            _Segment(xs[i], _step(xs[i], xs[i + 1], self._loglog), ys[i], ys[i + 1])
            for i in range(len(xs) - 1)
        ]
        self._x_first, self._y_first = xs[0], ys[0]
        self._x_last, self._y_last = xs[-1], ys[-1]

    def __repr__(self) -> str:
        return f"Curve(xs={self.xs}, ys={self.ys}, mode={self.mode!r})"

    def at(self, x: float) -> float:
        if x <= self._x_first:
            return self._y_first
        if x >= self._x_last:
            return _beyond(self.xs, self.ys, x, self.mode) if x > self._x_last else self._y_last
        seg = self._segments[self._knots.upper(x) - 1]
        return _between(seg.x0, seg.step, seg.y0, seg.y1, x, self._loglog)

    def sum_along(self, x0: float, dx: float, n: int) -> float:
        """sum over k in [0, n) of at(x0 + dx k), in closed form per piece (linear curves, dx >= 0):
        the clamp below the first point, each segment, and the continuation above the last."""
        if self._loglog:
            raise ValueError("closed-form sums need a linear curve")
        if n <= 0:
            return 0.0
        if dx <= 0.0:
            return n * self.at(x0)
        xs, pieces = self.xs, self._pieces
        knots = self._knots
        first = knots.upper(x0)  # piece of x0 (piece p starts at xs[p - 1])
        last = knots.upper(x0 + dx * (n - 1))
        total, ka = 0.0, 0
        for p in range(first, last + 1):
            kb = n if p == last else min(n, max(0, math.ceil((xs[p] - x0) / dx)))  # first k in piece p + 1
            if kb > ka:
                start, value, slope = pieces[p]
                m = kb - ka
                total += m * (value + slope * (x0 - start)) + slope * dx * (ka + kb - 1) * m / 2.0
                ka = kb
        return total


class Grid:
    """t(outer, inner) on a ragged grid: each outer point carries its own inner `Curve` (e.g. the
    batch sizes measured at one context); the outer axis interpolates their values at `inner`."""

    def __init__(self, outer: tuple[float, ...], inner: tuple[Curve, ...], mode: str = LINEAR) -> None:
        Curve(outer, tuple(1.0 for _ in outer), mode)  # same checks on the outer points
        if len(inner) != len(outer):
            raise ValueError("a grid needs one inner curve per outer point")
        self.outer = tuple(float(x) for x in outer)
        self.inner = inner
        self.mode = mode  # along the outer axis
        self._loglog = mode == LOGLOG
        xs = self.outer
        self._steps = tuple(_step(a, b, self._loglog) for a, b in zip(xs, xs[1:], strict=False))
        self._knots = Knots(xs)

    def __repr__(self) -> str:
        return f"Grid(outer={self.outer}, mode={self.mode!r})"

    def at(self, outer: float, inner: float) -> float:
        xs, curves = self.outer, self.inner
        if outer <= xs[0]:
            return curves[0].at(inner)
        if outer >= xs[-1]:
            last = curves[-1].at(inner)
            if outer == xs[-1]:
                return last
            ys = (curves[-2].at(inner), last) if len(xs) > 1 else (last,)
            return _beyond(xs[-len(ys) :], ys, outer, self.mode)
        i = self._knots.upper(outer) - 1
        return _between(
            xs[i], self._steps[i], curves[i].at(inner), curves[i + 1].at(inner), outer, self._loglog
        )


class GridPair:
    """Two grids over the same points (one kernel's times and FLOPs, from the same rows) read at one
    point together: each value is what its grid's `at` answers, the knot searches done once."""

    __slots__ = ("a", "b")

    def __init__(self, a: Grid, b: Grid) -> None:
        same = a.outer == b.outer and a.mode == b.mode and len(a.inner) == len(b.inner)
        if not same or any(
            ca.xs != cb.xs or ca.mode != cb.mode for ca, cb in zip(a.inner, b.inner, strict=True)
        ):
            raise ValueError("a grid pair needs two grids over the same points")
        self.a = a
        self.b = b

    def at(self, outer: float, inner: float) -> tuple[float, float]:
        a, b = self.a, self.b
        xs = a.outer
        if outer <= xs[0]:
            return _pair_at(a.inner[0], b.inner[0], inner)
        if outer >= xs[-1]:
            last_a, last_b = _pair_at(a.inner[-1], b.inner[-1], inner)
            if outer == xs[-1]:
                return last_a, last_b
            if len(xs) == 1:
                return _beyond(xs, (last_a,), outer, a.mode), _beyond(xs, (last_b,), outer, b.mode)
            prev_a, prev_b = _pair_at(a.inner[-2], b.inner[-2], inner)
            ends = xs[-2:]
            return _beyond(ends, (prev_a, last_a), outer, a.mode), _beyond(
                ends, (prev_b, last_b), outer, b.mode
            )
        i = a._knots.upper(outer) - 1
        a0, b0 = _pair_at(a.inner[i], b.inner[i], inner)
        a1, b1 = _pair_at(a.inner[i + 1], b.inner[i + 1], inner)
        x0 = xs[i]
        return (
            _between(x0, a._steps[i], a0, a1, outer, a._loglog),
            _between(x0, b._steps[i], b0, b1, outer, b._loglog),
        )


def _pair_at(ca: Curve, cb: Curve, x: float) -> tuple[float, float]:
    """(ca.at(x), cb.at(x)) of two curves over the same points, with one knot search."""
    if x <= ca._x_first:
        return ca._y_first, cb._y_first
    if x >= ca._x_last:
        return ca.at(x), cb.at(x)
    i = ca._knots.upper(x) - 1
    sa, sb = ca._segments[i], cb._segments[i]
    loglog = ca._loglog
    return _between(sa.x0, sa.step, sa.y0, sa.y1, x, loglog), _between(
        sb.x0, sb.step, sb.y0, sb.y1, x, loglog
    )


def _steps_below(curve: Curve, fixed_s: float, x0: float, dx: float, steps: int, floor_s: float) -> int:
    """How many of a span's first steps (x = x0, x0 + dx, ...) take less than `floor_s`: steps never get
    shorter within a span, so they come first and a binary search finds where they end."""
    if fixed_s + curve.at(x0) >= floor_s:
        return 0
    if fixed_s + curve.at(x0 + dx * (steps - 1)) < floor_s:
        return steps
    lo, hi = 0, steps - 1  # step lo is below the floor, step hi is not
    while hi - lo > 1:
        mid = (lo + hi) // 2
        if fixed_s + curve.at(x0 + dx * mid) < floor_s:
            lo = mid
        else:
            hi = mid
    return hi


def _span_s(
    curve: Curve, fixed_s: float, x0: float, dx: float, steps: int, floor_s: float, below: int
) -> float:
    """`span_s` of `steps` steps, the first `below` of them (at most) under the floor."""
    below = below if below < steps else steps
    rest = steps - below
    return below * floor_s + rest * fixed_s + curve.sum_along(x0 + dx * below, dx, rest)


def span_s(curve: Curve, fixed_s: float, x0: float, dx: float, steps: int, floor_s: float = 0.0) -> float:
    """Seconds of `steps` decode steps of max(`fixed_s + curve.at(x)`, `floor_s`) with x = x0, x0 + dx, ...
    (a span of fixed membership: the mean context grows by dx a step; `curve` is linear)."""
    below = _steps_below(curve, fixed_s, x0, dx, steps, floor_s) if floor_s > 0.0 and steps > 0 else 0
    return _span_s(curve, fixed_s, x0, dx, steps, floor_s, below)


def span_end(
    curve: Curve, fixed_s: float, x0: float, dx: float, elapsed_s: float, floor_s: float = 0.0
) -> tuple[int, float]:
    """(k + 1, span_s of k + 1 steps) for the largest k whose span fits in `elapsed_s`: where the
    step in progress `elapsed_s` into a span ends. Steps never get shorter within a span, so k
    lies between elapsed / (its last step) and elapsed / (its first step); a binary search over
    that narrow bracket finds it."""
    if elapsed_s <= 0.0:
        return 1, span_s(curve, fixed_s, x0, dx, 1, floor_s)
    first = fixed_s + curve.at(x0)
    shortest = first if first > floor_s else floor_s  # no step of the span is shorter
    # the steps under the floor, found once: no more than elapsed / shortest + 1 steps end the span, and
    # a span read further (the bracket's doubling) is longer than `elapsed_s` with those counted
    below = 0
    if floor_s > 0.0:
        below = _steps_below(curve, fixed_s, x0, dx, int(elapsed_s / shortest) + 2, floor_s)
    hi = int(elapsed_s / shortest) + 1
    last = fixed_s + curve.at(x0 + dx * hi)
    lo = min(hi - 1, int(elapsed_s / (last if last > floor_s else floor_s)))
    # guards for a curve that dips between knots
    while _span_s(curve, fixed_s, x0, dx, hi, floor_s, below) <= elapsed_s:
        lo, hi = hi, 2 * hi
    while lo > 0 and _span_s(curve, fixed_s, x0, dx, lo, floor_s, below) > elapsed_s:
        lo //= 2
    while hi - lo > 1:
        mid = (lo + hi) // 2
        if _span_s(curve, fixed_s, x0, dx, mid, floor_s, below) <= elapsed_s:
            lo = mid
        else:
            hi = mid
    return lo + 1, _span_s(curve, fixed_s, x0, dx, lo + 1, floor_s, below)


class LinearTable:
    """Piecewise-linear interpolation of two components over one knot vector (plain floats:
    numpy scalars would cost ten times more per lookup)."""

    __slots__ = ("xs", "_knots", "_rows")

    def __init__(self, xs: Any, cols: list[Any]) -> None:
        if len(cols) != 2:
            raise ValueError("LinearTable holds exactly two components")
        x = [float(v) for v in xs]
        self.xs = x
        self._knots = Knots(tuple(x))
        rows: list[tuple[float, ...]] = []
        for i in range(len(x)):
            j = min(i, len(x) - 2)
            dx = x[j + 1] - x[j]
            rows.append(
                tuple(
                    float(v)
                    for v in (
                        cols[0][i],
                        (cols[0][j + 1] - cols[0][j]) / dx,
                        cols[1][i],
                        (cols[1][j + 1] - cols[1][j]) / dx,
                    )
                )
            )
        self._rows = rows

    def at(self, x: float) -> tuple[float, float]:
        xs = self.xs
        i = self._knots.upper(x) - 1
        if i < 0:
            i = 0
        a0, s0, a1, s1 = self._rows[i]
        t = x - xs[i]
        return a0 + s0 * t, a1 + s1 * t


class _Quadratic:
    """A + B t + C t^2 of three components on one segment of a `QuadraticTable`, as unboxed fields."""

    __slots__ = ("a0", "b0", "c0", "a1", "b1", "c1", "a2", "b2", "c2")

    def __init__(
        self,
        a0: float,
        b0: float,
        c0: float,
        a1: float,
        b1: float,
        c1: float,
        a2: float,
        b2: float,
        c2: float,
    ) -> None:
        self.a0, self.b0, self.c0 = a0, b0, c0
        self.a1, self.b1, self.c1 = a1, b1, c1
        self.a2, self.b2, self.c2 = a2, b2, c2


class QuadraticTable:
    """Piecewise-quadratic interpolation of three components (through knots i, i+1, i+2 on
    [x_i, x_{i+1}])."""

    __slots__ = ("xs", "_knots", "_coef", "_last")

    def __init__(self, xs: Any, cols: list[Any]) -> None:
        if len(cols) != 3:
            raise ValueError("QuadraticTable holds exactly three components")
        x = [float(v) for v in xs]
        self.xs = x
        self._knots = Knots(tuple(x))
        n = len(x)
        coef: list[_Quadratic] = []
        for i in range(n - 1):
            j = min(i, n - 3)
            x0, x1, x2 = x[j], x[j + 1], x[j + 2]
            row: list[float] = []
            for c in cols:
                y0, y1, y2 = float(c[j]), float(c[j + 1]), float(c[j + 2])
                # Newton form around x0, expanded about the segment start x_i for accuracy
                d1 = (y1 - y0) / (x1 - x0)
                d2 = ((y2 - y1) / (x2 - x1) - d1) / (x2 - x0)
                xi = x[i]
                # p(x) = y0 + d1 (x - x0) + d2 (x - x0)(x - x1); write as A + B t + C t^2 with t = x - xi
                a = y0 + d1 * (xi - x0) + d2 * (xi - x0) * (xi - x1)
                b = d1 + d2 * ((xi - x0) + (xi - x1))
                row.extend((a, b, d2))
            coef.append(_Quadratic(row[0], row[1], row[2], row[3], row[4], row[5], row[6], row[7], row[8]))
        self._coef = coef
        self._last = len(coef) - 1

    def _segment(self, x: float) -> int:
        i = self._knots.upper(x) - 1
        if i < 0:
            return 0
        return self._last if i > self._last else i

    def at(self, x: float) -> tuple[float, float, float]:
        # token positions come as ints: a float bisects the float knots twice as fast, and
        # x - xs[i] rounds the int to the same double either way (positions < 2^53)
        x = float(x)
        i = self._segment(x)
        t = x - self.xs[i]
        q = self._coef[i]
        return q.a0 + t * (q.b0 + t * q.c0), q.a1 + t * (q.b1 + t * q.c1), q.a2 + t * (q.b2 + t * q.c2)

    def second_at(self, x: float) -> float:
        """`at(x)[1]` alone."""
        x = float(x)
        i = self._segment(x)
        t = x - self.xs[i]
        q = self._coef[i]
        return q.a1 + t * (q.b1 + t * q.c1)


def chunk_parts(
    every: QuadraticTable, tail: QuadraticTable, new_tokens: int, context_tokens: int, last_chunk: bool
) -> tuple[float, float, float]:
    """(GEMM FLOPs, attention+index FLOPs, KV bytes written) of a prefill chunk of `new_tokens`
    after `context_tokens`: G(end) - G(start) on the every-token layers (`every`), plus the
    decoder tail T(end) on the request's last chunk (`tail`); sim.timing.arith builds both."""
    end = context_tokens + new_tokens
    e0, e1, e2 = every.at(end)
    s0, s1, s2 = every.at(context_tokens)
    d, a, kv = e0 - s0, e1 - s1, e2 - s2
    if last_chunk:
        t0, t1, t2 = tail.at(end)
        d += t0
        a += t1
        kv += t2
    return d, a, kv


def chunk_attention_flops(
    every: QuadraticTable, tail: QuadraticTable, new_tokens: int, context_tokens: int, last_chunk: bool
) -> float:
    """`chunk_parts`' attention+index FLOPs alone (the same operations)."""
    end = context_tokens + new_tokens
    a = every.second_at(end) - every.second_at(context_tokens)
    if last_chunk:
        a += tail.second_at(end)
    return a
