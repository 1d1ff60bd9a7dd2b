"""sim.workload.bench_clients: a named benchmark client's own length draws."""

import numpy as np
import pytest

from sim.workload.bench_clients import sglang_random_lengths


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
