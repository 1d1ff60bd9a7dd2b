"""sim.workload.bench_clients: a named benchmark client's own length draws."""

import numpy as np
import pytest

from sim.workload.bench_clients import sglang_random_lengths, trace_quantile_lengths


def test_sglang_bench_serving_random_draws_inputs_then_outputs_from_its_seed():
    """SGLang v0.5.15 bench_serving seeds numpy's global generator with --seed (42) and draws every input length,
    then every output length, each uniform in [max(int(len x ratio), 1), len]: the cookbook's 32-prompt sample
    (ISL 8192, OSL 1024, ratio 0) has these first lengths and a mean output of 569.5 tokens, not 512."""
    drawn = sglang_random_lengths(8192, 1024, 32, 0.0, 42)
    assert drawn.input_tokens[:4] == (7271, 7604, 861, 5391)
    assert drawn.output_tokens[:4] == (460, 314, 22, 253)
    assert np.mean(drawn.output_tokens) == pytest.approx(569.53125)
    assert np.median(drawn.input_tokens) == pytest.approx(5209.5)
    # the same as numpy's global generator after np.random.seed, as bench_serving uses it
    np.random.seed(42)
    assert drawn.input_tokens == tuple(np.random.randint(1, 8193, size=32).tolist())
    assert drawn.output_tokens == tuple(np.random.randint(1, 1025, size=32).tolist())


def test_range_ratio_bounds_the_draws_and_one_fixes_the_lengths():
    half = sglang_random_lengths(1000, 100, 500, 0.5, 1)
    assert min(half.input_tokens) >= 500 and max(half.input_tokens) <= 1000
    assert min(half.output_tokens) >= 50 and max(half.output_tokens) <= 100
    fixed = sglang_random_lengths(1000, 100, 5, 1.0, 1)
    assert fixed.input_tokens == (1000,) * 5 and fixed.output_tokens == (100,) * 5


IN_Q = [(0.0, 1024), (0.18, 8192), (0.5, 67600), (0.99, 450000), (1.0, 900000)]
OUT_Q = [(0.0, 16), (0.5, 399), (0.9, 6943), (1.0, 28000)]


def test_trace_quantile_draws_keep_the_published_quantiles():
    """Log-linear between the quantiles given: a large draw lands on them (the median within 1 %, the share under
    8,192 tokens within a point), and the same seed gives the same draws."""
    drawn = trace_quantile_lengths(IN_Q, OUT_Q, 40_000, 50, 0, seed=3)
    inputs, outputs = np.array(drawn.input_tokens), np.array(drawn.output_tokens)
    assert len(inputs) == len(outputs) == 40_000
    assert np.median(inputs) == pytest.approx(67_600, rel=0.01)
    assert np.mean(inputs <= 8192) == pytest.approx(0.18, abs=0.01)
    assert np.quantile(outputs, 0.9) == pytest.approx(6943, rel=0.02)
    assert inputs.min() >= 1024 and inputs.max() <= 900_000
    assert drawn == trace_quantile_lengths(IN_Q, OUT_Q, 40_000, 50, 0, seed=3)
    assert drawn != trace_quantile_lengths(IN_Q, OUT_Q, 40_000, 50, 0, seed=4)


def test_trace_quantile_sessions_grow_turn_by_turn_in_a_shuffled_order():
    """Session-major: each session's turns are neighbouring lengths of the sorted draw, non-decreasing, so a turn
    can reuse 90 % of its input from the previous turn's context; the sessions themselves are not sorted. Spare
    sessions cover the slots a closed loop leaves cut short at its end."""
    drawn = trace_quantile_lengths(IN_Q, OUT_Q, 1000, 10, 4, seed=1)
    assert drawn.session_turns == 10 and len(drawn.input_tokens) == (100 + 4) * 10
    sessions = np.array(drawn.input_tokens).reshape(-1, 10)
    assert (np.diff(sessions, axis=1) >= 0).all()
    firsts = sessions[:, 0]
    assert not (np.diff(firsts) >= 0).all()  # shuffled, not in length order
    grown = sessions[:, 1:] / sessions[:, :-1]
    assert np.median(grown) < 1.05  # neighbours: a turn's input barely beyond its predecessor's
