"""`Knots.upper` (the bucket index of the interpolation tables, sim.timing.interp) answers exactly
what bisection (`_upper`, and the standard library's `bisect_right`) answers, for any point: knots,
just beside them, outside, NaN."""

from __future__ import annotations

import math
from bisect import bisect_right

from hypothesis import given, settings
from hypothesis import strategies as st

from sim.timing.arith import _decode_grid
from sim.timing.interp import Knots, _upper

finite = st.floats(min_value=-1e7, max_value=1e7, allow_nan=False)


@settings(max_examples=200, deadline=None)
@given(st.lists(finite, min_size=1, max_size=80, unique=True), st.lists(finite, max_size=50))
def test_upper_equals_bisection(knots, points):
    xs = tuple(sorted(knots))
    index = Knots(xs)
    near = [math.nextafter(x, d) for x in xs for d in (-math.inf, math.inf)]
    for x in [*points, *xs, *near, math.nan, math.inf, -math.inf]:
        assert index.upper(x) == _upper(list(xs), x) == bisect_right(xs, x)


def test_arith_grid_is_indexed():
    """The token-position tables' knots (every 128 tokens, then geometric) use the index."""
    xs = tuple(float(v) for v in _decode_grid())
    index = Knots(xs)
    assert index._starts
    for x in (0.0, 127.9, 128.0, 65_535.5, 65_536.0, 70_000.0, xs[-1] - 0.5, xs[-1], 5e6):
        assert index.upper(x) == bisect_right(xs, x)
