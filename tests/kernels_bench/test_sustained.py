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
    assert "| gemm | 1000.0 | 1100.0 | 1.100 | 1980 -> 1800 |" in table(rows)


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
