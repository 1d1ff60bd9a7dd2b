"""A step holding prefill chunks at the board's power limit (sim.timing.sustained): the measured behaviour lives in
the hardware profiles that have one, slows exactly the GPU work of steps holding chunks (not their link or host
time) by the board's heat, which an instance carries from step to step, and leaves decode-only steps and unmeasured
GPUs as they were."""

from __future__ import annotations

import pytest

from sim.errors import InputError
from sim.hardware import load_hw
from sim.timing.batch import PrefillChunk
from sim.timing.sustained import PowerLimit, power_limit_of


def test_the_measured_profiles_carry_the_power_limit_with_its_source():
    h100, h200, b200, b300 = (load_hw(f"nvidia-{g}-hgx8") for g in ("h100", "h200", "b200", "b300"))
    a, b = power_limit_of(h100), power_limit_of(h200)
    assert a is not None and a.slowdown_x > 1.0 and 0.0 <= a.delay_s < a.onset_s
    assert 0.0 < a.recovery_x < float("inf")
    # the H200's own board (docs/carry/sustained "The H200: measured"): it throttles harder than the H100's
    assert (
        b == PowerLimit(slowdown_x=1.214, delay_s=0.0, onset_s=0.11, recovery_x=3.0)
        and b.slowdown_x > a.slowdown_x
    )
    for field in ("sustained_compute_slowdown_x", "sustained_compute_onset_s", "sustained_compute_delay_s",
                  "sustained_recovery_x"):  # fmt: skip
        assert getattr(h100.accelerator, field).src
        mine = getattr(h200.accelerator, field)
        assert mine.src == ["SUS3"] and "[D" not in (mine.note or "")
    assert "SUS3" in h200.sources
    # the B200's from flashinfer PR #2899 (attention back to back): its own slowdown, its timing read [D]
    c = power_limit_of(b200)
    assert (
        c is not None and c.slowdown_x == pytest.approx(1450 / 1237, abs=1e-3) and c.slowdown_x > a.slowdown_x
    )
    assert b200.accelerator.sustained_compute_slowdown_x.src == ["FI1"] and "FI1" in b200.sources
    assert "[D" in (b200.accelerator.sustained_compute_delay_s.note or "")
    assert power_limit_of(b300) is None  # not measured: the burst times stand


LIMIT = PowerLimit(slowdown_x=1.2, delay_s=0.02, onset_s=0.12, recovery_x=4.0)


def test_the_excess_follows_the_heat_from_nothing_before_the_delay_to_all_of_it_from_the_onset():
    def share(gpu_s: float, heat_s: float = 0.0) -> float:
        return (LIMIT.run_s(gpu_s, heat_s) / gpu_s - 1.0) / 0.2

    assert share(0.02) == 0.0  # cool board, all within the delay
    # 0.07 s from cool: E rises from 0 at 0.02 to 0.5 at 0.07, so its integral is 0.05 x 0.5 / 2
    assert share(0.07) == pytest.approx(0.0125 / 0.07)
    assert share(0.1, heat_s=0.12) == pytest.approx(1.0)  # at the onset already: all of it
    # from 0.07 s of heat for 0.1 s: E over [0.07, 0.12] averages 0.75, then 1 for 0.05 s
    assert share(0.1, heat_s=0.07) == pytest.approx((0.05 * 0.75 + 0.05) / 0.1)
    assert LIMIT.run_s(0.0, 0.1) == 0.0
    # with no delay, no memory and a ramp over 0.16 s: the first rule shipped, 0.1 s steps at 0.3125 of it
    first = PowerLimit(slowdown_x=1.136, delay_s=0.0, onset_s=0.16, recovery_x=float("inf"))
    assert (first.run_s(0.1, 0.0) / 0.1 - 1.0) / 0.136 == pytest.approx(0.3125)


def test_the_heat_builds_while_computing_and_sheds_while_not():
    assert LIMIT.heated_s(0.05, 0.04) == pytest.approx(0.09)
    assert LIMIT.heated_s(0.1, 0.5) == LIMIT.onset_s  # nothing stored past the onset
    assert LIMIT.cooled_s(0.1, 0.01) == pytest.approx(0.06)  # 4 s of heat a second
    assert LIMIT.cooled_s(0.1, 1.0) == 0.0
    assert LIMIT.cooled_s(0.1, 0.0) == 0.1  # back to back
    no_memory = PowerLimit(slowdown_x=1.2, delay_s=0.0, onset_s=0.1, recovery_x=float("inf"))
    assert no_memory.cooled_s(0.1, 1e-6) == 0.0 and no_memory.cooled_s(0.1, 0.0) == 0.1


def test_a_delay_past_the_onset_is_refused(tmp_path, monkeypatch):
    from sim.paths import hwprofiles_dir

    text = (hwprofiles_dir() / "nvidia-h100-hgx8.yaml").read_text()
    text = text.replace("sustained_compute_delay_s: {value: ", "sustained_compute_delay_s: {value: 9")
    (tmp_path / "hwprofiles").mkdir()
    (tmp_path / "hwprofiles" / "nvidia-h100-hgx8.yaml").write_text(text)
    monkeypatch.setenv("SIM_HOME", str(tmp_path))
    with pytest.raises(InputError, match="sustained_compute_delay_s"):
        load_hw("nvidia-h100-hgx8")


def test_a_factor_below_one_is_refused(tmp_path, monkeypatch):
    from sim.paths import hwprofiles_dir

    text = (
        (hwprofiles_dir() / "nvidia-h100-hgx8.yaml")
        .read_text()
        .replace("sustained_compute_slowdown_x: {value: 1.136", "sustained_compute_slowdown_x: {value: 0.9")
    )
    (tmp_path / "hwprofiles").mkdir()
    (tmp_path / "hwprofiles" / "nvidia-h100-hgx8.yaml").write_text(text)
    monkeypatch.setenv("SIM_HOME", str(tmp_path))
    with pytest.raises(InputError, match="sustained_compute_slowdown_x"):
        load_hw("nvidia-h100-hgx8")


@pytest.mark.parametrize("case", ["sglang-v4-flash-4xh200-low-latency-c16.yaml",
                                  "sglang-v4-flash-4xh200-high-throughput-c1024.yaml"])  # fmt: skip
def test_the_gpu_work_of_a_chunk_step_is_slowed_by_the_heat_and_its_links_host_and_decode_steps_are_not(
    h200_tables, case_timing, case
):
    t = case_timing(case)
    limit = t.power_limit
    assert limit is not None and limit.slowdown_x > 1.0
    terms = t.decode_seq_terms(4096.0, 1).scaled(16)
    chunks = (PrefillChunk(2048, 0, last_chunk=True),)
    decode = t.step_s(16, terms, ())
    cool = t._chunk_step_s(16, terms, chunks, 0.0)
    hot = t._chunk_step_s(16, terms, chunks, limit.onset_s)
    t.power_limit = None
    burst = t._chunk_step_s(16, terms, chunks)
    t.power_limit = limit
    rows = 16 * t.verified_tokens_per_step + 2048
    if t.par.dp > 1:  # the all-to-all as if every rank held the most-loaded rank's rows
        links = t._comm_s(-(-16 * t.verified_tokens_per_step // t.par.dp) * t.par.dp + 2048 * t.par.dp, True)
    else:
        links = t._comm_s(rows, True)
    host = t._mixed_host_s(16, chunks)
    gpu = burst - links - host
    assert cool - links - host == pytest.approx(limit.run_s(gpu, 0.0), rel=1e-9)
    assert hot - links - host == pytest.approx(gpu * limit.slowdown_x, rel=1e-9)  # a hot board: all of it
    assert burst < cool < hot
    assert t.step_s(16, terms, (), limit.onset_s) == decode  # decode-only steps keep the burst times


def test_an_unmeasured_gpu_keeps_the_burst_times(case_timing):
    assert case_timing("sglang-v4-flash-4xb300-high-throughput-c1024.yaml").power_limit is None
    b200 = case_timing("sglang-v4-flash-4xb200-high-throughput-c1024.yaml").power_limit
    assert b200 == power_limit_of(load_hw("nvidia-b200-hgx8"))


def test_timing_power_limit_off_keeps_the_burst_times(h200_tables, context):
    from sim.timing.calibrated import build_calibrated

    measured = build_calibrated(context(power_limit=True))
    off = build_calibrated(context(power_limit=False))  # timing.power_limit: off
    assert measured.power_limit == power_limit_of(load_hw("nvidia-h200-hgx8")) and off.power_limit is None
    terms = measured.decode_seq_terms(4096.0, 1).scaled(8)
    chunks = (PrefillChunk(4096, 0, last_chunk=True),)
    hot = measured.power_limit.onset_s
    assert (
        off.step_s(8, terms, chunks, hot)
        == off.step_s(8, terms, chunks)
        < measured.step_s(8, terms, chunks, hot)
    )
