"""kernels_bench.aic_gemm_frac on the CPU: the median over AIConfigurator's fp8_block GEMM rows with every dimension
of at least 4,096, in TFLOP/s (its latency in ms); the profiles' `gemm_fp8_peak_frac` come from it."""

from __future__ import annotations

import pytest

from kernels_bench.aic_gemm_frac import median_tflops


def test_the_median_keeps_large_fp8_block_rows_only():
    big = 2.0 * 8192**3 / 1e12  # TFLOP of one 8192^3 GEMM
    rows = [
        {
            "gemm_dtype": "fp8_block",
            "m": 8192,
            "n": 8192,
            "k": 8192,
            "latency": big / 1000.0 * 1e3,
        },  # 1,000 TF
        {"gemm_dtype": "fp8_block", "m": 8192, "n": 8192, "k": 8192, "latency": big / 1200.0 * 1e3},  # 1,200
        {"gemm_dtype": "fp8_block", "m": 8192, "n": 8192, "k": 8192, "latency": big / 1400.0 * 1e3},  # 1,400
        {"gemm_dtype": "fp8_block", "m": 64, "n": 8192, "k": 8192, "latency": 1.0},  # too small: left out
        {"gemm_dtype": "bfloat16", "m": 8192, "n": 8192, "k": 8192, "latency": 1.0},  # another dtype
    ]
    tflops, count = median_tflops(rows)
    assert count == 3 and tflops == pytest.approx(1200.0)
    assert median_tflops([]) == (0.0, 0)
