"""kernels_bench.sustained on the CPU: nvidia-smi's lines read, and the summary of a burst and a sustained phase
(the tail's median against the burst's, the readings inside each window). The measurement itself needs a GPU
(docs/carry/sustained/README.md has the device run)."""

from __future__ import annotations

import pytest

from kernels_bench.sustained import Phase, parse_smi, summarise, table


def test_an_nvidia_smi_line_reads_and_a_bad_one_is_skipped():
    r = parse_smi("2026/12/06 15:10:01.250, 1755, 698.42, 67, 0x0000000000000004")
    assert r is not None and (r.sm_MHz, r.power_W, r.temp_C, r.reasons) == (
        1755.0,
        698.42,
        67.0,
        "0x0000000000000004",
    )
    assert parse_smi("2026/12/06 15:10:01.350, 1755, [N/A], 67, 0x0") is None
    assert parse_smi("name, driver") is None


def test_the_summary_takes_the_sustained_tail_against_the_burst_and_the_readings_of_each_window():
    from kernels_bench.sustained import SmiReading

    burst = Phase("gemm", "burst", 100.0, 101.0, (1000.0,), (101.0,))
    # 20 s sustained: 1,000 us for 10 s, then 1,100 us once the clocks drop
    times = tuple(1000.0 if t < 10 else 1100.0 for t in range(20))
    ends = tuple(102.0 + t + 1 for t in range(20))
    sus = Phase("gemm", "sustained", 102.0, 122.0, times, ends)
    readings = [SmiReading(100.5, 1980.0, 500.0, 40.0, "0x0")]
    readings += [
        SmiReading(102.0 + t + 0.5, 1980.0 if t < 10 else 1800.0, 700.0, 60.0, "0x4") for t in range(20)
    ]
    rows = summarise([burst, sus], readings, tail_s=8.0)
    assert rows[0]["ratio"] == pytest.approx(1.1) and rows[0]["tail_samples"] == 9
    assert rows[0]["burst_sm_MHz"] == 1980.0 and rows[0]["sustained_sm_MHz"] == 1800.0
    assert rows[0]["sustained_power_W"] == 700.0
    assert "| gemm | 1000.0 | 1100.0 | 1.100 | - -> - | 1980 -> 1800 |" in table(rows)


def test_the_duty_summary_averages_each_block_and_takes_the_second_half_of_blocks():
    from kernels_bench.sustained import DutyBlock, duty_summary

    # two patterns; in the first, block 0 is fast and the later blocks slow at their second piece
    pieces = [DutyBlock(100, 10, "copy", b, off, 1.0 if (b == 0 or off == 0.0) else 1.2)
              for b in range(4) for off in (0.0, 10.0)]  # fmt: skip
    pieces += [DutyBlock(20, 20, "copy", b, 0.0, 1.01) for b in range(3)]
    rows = duty_summary(pieces)
    assert [(r["compute_ms"], r["rest_ms"], r["blocks"]) for r in rows] == [(100, 10, 4), (20, 20, 3)]
    assert rows[0]["first"] == pytest.approx(1.0)
    assert rows[0]["steady"] == pytest.approx(1.1)  # blocks 2 and 3: (1.0 + 1.2) / 2
    assert rows[1]["first"] == rows[1]["steady"] == pytest.approx(1.01)


def test_attention_flops_count_both_products_and_halve_under_a_causal_mask():
    from kernels_bench.sustained import ATTENTION_SHAPE, attention_flop

    # flashinfer PR #2899's shape: 1,450 TFLOP/s there is 0.76 ms a call with the causal count (hardware profile FI1)
    b, h, s, d = ATTENTION_SHAPE
    assert attention_flop(b, h, s, d, causal=False) == 4 * 4 * 16 * 8192**2 * 128
    assert attention_flop(b, h, s, d, causal=True) == pytest.approx(1.0995e12, rel=1e-4)
    assert attention_flop(b, h, s, d, causal=True) / 1450e12 == pytest.approx(0.76e-3, rel=0.01)


def test_the_summary_gives_each_counted_workload_its_flop_rate_and_none_to_a_copy():
    burst = Phase("gemm", "burst", 0.0, 1.0, (1000.0,), (1.0,))
    sus = Phase("gemm", "sustained", 1.0, 3.0, (1250.0, 1250.0), (2.0, 3.0))
    copy_b = Phase("copy", "burst", 3.0, 4.0, (500.0,), (4.0,))
    copy_s = Phase("copy", "sustained", 4.0, 6.0, (500.0, 500.0), (5.0, 6.0))
    rows = summarise([burst, sus, copy_b, copy_s], [], tail_s=5.0, flop={"gemm": 1e12, "copy": 0.0})
    assert rows[0]["burst_TFLOPs"] == pytest.approx(1000.0) and rows[0]["sustained_TFLOPs"] == pytest.approx(
        800.0
    )
    assert rows[1]["burst_TFLOPs"] is None
    assert "| gemm | 1000.0 | 1250.0 | 1.250 | 1000 -> 800 |" in table(rows)
    assert "| copy | 500.0 | 500.0 | 1.000 | - -> - |" in table(rows)
