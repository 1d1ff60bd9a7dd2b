"""Reduction helpers: exact values on tiny inputs, conservation and caps as properties."""

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from sim.report.reduce import (
    CDF_POINTS,
    MAX_POINTS_PER_TRACE,
    bucket_levels,
    cdf_points,
    spread_amounts,
    summed_levels,
    time_grid,
)
from sim.units import DAY_S


def test_time_grid_picks_nice_width_and_caps_buckets():
    edges = time_grid(0.0, 14 * DAY_S, 500)  # two weeks -> 1-h buckets (336 of them)
    assert edges[1] - edges[0] == 3600.0
    assert len(edges) - 1 == 336
    assert edges[0] <= 0.0 and edges[-1] >= 14 * DAY_S


@given(st.floats(0, 1e6), st.floats(1e-3, 3e6), st.integers(10, 3000))
def test_time_grid_covers_span_within_cap(t0, span, cap):
    edges = time_grid(t0, t0 + span, cap)
    assert len(edges) - 1 <= cap
    assert edges[0] <= t0 and edges[-1] >= t0 + span - 1e-6 * span


def test_bucket_levels_mean_min_max_and_drops_empty_buckets():
    edges = np.array([0.0, 10.0, 20.0, 30.0])
    b = bucket_levels(np.array([1.0, 2.0, 25.0, 26.0, np.nan]), np.array([4.0, 8.0, 1.0, 3.0, 5.0]), edges)
    assert list(b.centers_s) == [5.0, 25.0]  # bucket [10, 20) had no sample
    assert list(b.mean) == [6.0, 2.0]
    assert list(b.lo) == [4.0, 1.0]
    assert list(b.hi) == [8.0, 3.0]


def test_summed_levels_adds_parts_sampled_at_different_instants():
    edges = np.array([0.0, 10.0, 20.0])
    b = summed_levels([(np.array([1.0, 11.0]), np.array([2.0, 4.0])), (np.array([5.0, 15.0]), np.array([10.0, 20.0]))],
                      edges)  # fmt: skip
    assert list(b.mean) == [12.0, 24.0]


def test_spread_amounts_splits_a_request_across_buckets_exactly():
    edges = np.array([0.0, 60.0, 120.0])
    # 90 tokens decoded evenly from t=30 to t=120: 30 tokens in the first minute, 60 in the second
    tokens = spread_amounts(np.array([30.0]), np.array([120.0]), np.array([90.0]), edges)
    np.testing.assert_allclose(tokens, [30.0, 60.0])


@settings(max_examples=60, deadline=None)
@given(
    st.lists(st.tuples(st.floats(0, 1000), st.floats(0, 500), st.integers(0, 5000)), min_size=1, max_size=40)
)
def test_spread_amounts_conserves_tokens(reqs):
    start = np.array([r[0] for r in reqs])
    end = start + np.array([r[1] for r in reqs])
    amount = np.array([r[2] for r in reqs], dtype=float)
    edges = time_grid(0.0, float(end.max()) + 1.0, 50)
    produced = spread_amounts(start, end, amount, edges)
    np.testing.assert_allclose(produced.sum(), amount.sum(), rtol=1e-9, atol=1e-6)
    assert (produced > -1e-6).all()


def test_cdf_points_small_sample_is_exact_and_large_is_capped():
    x, p = cdf_points(np.array([3.0, 1.0, 2.0, np.nan]))
    assert list(x) == [1.0, 2.0, 3.0] and list(p) == [1 / 3, 2 / 3, 1.0]
    rng = np.random.default_rng(0)
    v = rng.lognormal(0, 1, 200_000)
    x, p = cdf_points(v)
    assert len(x) <= CDF_POINTS + 1 <= MAX_POINTS_PER_TRACE
    assert np.all(np.diff(x) >= 0) and np.all(np.diff(p) > 0)
    i = int(np.argmin(abs(p - 0.99)))
    assert abs(p[i] - 0.99) < 1e-3
    np.testing.assert_allclose(x[i], np.quantile(v, p[i], method="inverted_cdf"))
    assert x[-1] == v.max()  # the tail ends at the worst request
