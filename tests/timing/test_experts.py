"""The routed experts on the busiest EP rank and a grouped GEMM over fewer experts than measured
(sim.timing.experts): each would fail if its mechanism broke."""

from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from sim.timing.experts import busiest_rank, grouped_s, touched_experts
from sim.timing.interp import LINEAR, Curve, Grid


def test_the_busiest_rank_is_the_expected_maximum_of_its_binomial_draws():
    """Against a Monte-Carlo of uniform routing: each row picks top-k distinct experts, ranks hold
    contiguous blocks of E / ep experts, the busiest rank's touched count averaged over many steps."""
    rng = np.random.default_rng(0)
    e, k = 256, 6
    for ep, rows in ((8, 8), (32, 8), (32, 64), (256, 1)):
        counts = []
        for _ in range(4000):
            touched = np.zeros(e, bool)
            for _ in range(rows):
                touched[rng.choice(e, k, replace=False)] = True
            counts.append(touched.reshape(ep, e // ep).sum(1).max())
        # the binomial model treats experts as independent: within 3 % of the simulated routing
        assert busiest_rank(e, k, rows, ep).experts == pytest.approx(np.mean(counts), rel=0.03), (ep, rows)


def test_one_rank_and_many_rows_are_the_mean():
    assert busiest_rank(256, 6, 8, 1).experts == pytest.approx(touched_experts(256, 6, 8))
    assert busiest_rank(256, 6, 4096, 4).experts == pytest.approx(64.0)
    assert busiest_rank(256, 6, 8, 1).rows_per_expert == pytest.approx(8 * 6 / touched_experts(256, 6, 8))


@settings(max_examples=200, deadline=None)
@given(rows=st.floats(1, 2048), ep=st.sampled_from([1, 2, 4, 8, 16, 32, 64, 128, 256]))
def test_the_busiest_rank_is_between_the_mean_and_all_its_experts(rows, ep):
    r = busiest_rank(256, 6, rows, ep)
    mean = touched_experts(256, 6, rows) / ep
    assert mean * (1 - 1e-9) <= r.experts <= 256 // ep + 1e-9


def _grid(groups, per_group_s, fixed_s):
    rows = (1.0, 64.0)
    return Grid(
        tuple(groups), tuple(Curve(rows, (fixed_s + g * per_group_s,) * 2, LINEAR) for g in groups), LINEAR
    )


def test_few_experts_keep_the_kernels_own_cost():
    """A grid with a fixed cost of 10 us and 4 us per expert, measured from 6 experts: one expert costs 14 us
    (the line through 6 and 32), not a sixth of the 6-expert time (5.7 us)."""
    g = _grid((6, 32, 128), 4e-6, 10e-6)
    assert grouped_s(g, 1.0, 8.0) == pytest.approx(14e-6)
    assert grouped_s(g, 32.0, 8.0) == pytest.approx(138e-6)
    # a line with a negative intercept falls back to the proportional share
    neg = _grid((6, 32), 4e-6, -20e-6)
    assert grouped_s(neg, 1.0, 8.0) == pytest.approx((4e-6 * 6 - 20e-6) / 6)
    assert math.isclose(grouped_s(_grid((6,), 4e-6, 10e-6), 3.0, 8.0), 17e-6)


def _padded_mean_by_sampling(mean_rows: float, alignment: int, n: int = 400_000) -> float:
    """E[ceil(X / a) a | X >= 1] for X Poisson, by sampling."""
    x = np.random.default_rng(1).poisson(mean_rows, n)
    x = x[x >= 1]
    return float(np.mean(np.ceil(x / alignment) * alignment))


@pytest.mark.parametrize("mean_rows", [0.5, 3.0, 52.5, 100.5, 192.0, 250.0, 384.0, 768.0, 2000.0])
def test_an_aligned_segment_is_the_expected_padded_count_of_a_touched_expert(mean_rows):
    """Against sampling, on both sides of the exact / normal switch (300 rows)."""
    from sim.timing.experts import contiguous_rows_per_expert

    got = contiguous_rows_per_expert(mean_rows, 128)
    assert got == pytest.approx(_padded_mean_by_sampling(mean_rows, 128), rel=3e-3)
    assert got >= max(128.0, mean_rows)  # never below one block, never below the rows themselves


def test_no_alignment_is_the_touched_experts_mean_rows():
    from sim.timing.experts import contiguous_rows_per_expert

    for mean_rows in (0.25, 6.0, 500.0):
        assert contiguous_rows_per_expert(mean_rows, 1) == pytest.approx(mean_rows / -math.expm1(-mean_rows))
    # the switch from the exact sum to the normal approximation moves the value by under 0.1 %
    below, above = contiguous_rows_per_expert(299.999, 128), contiguous_rows_per_expert(300.001, 128)
    assert above == pytest.approx(below, rel=1e-3)
