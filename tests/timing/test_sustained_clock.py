"""A step holding prefill chunks at the board's power limit (sim.timing.sustained): the measured factor lives in
the hardware profiles that have one, multiplies exactly the GPU work of steps holding chunks (not their link or
host time), and leaves decode-only steps and unmeasured GPUs as they were."""

from __future__ import annotations

import pytest

from sim.errors import InputError
from sim.hardware import load_hw
from sim.timing.batch import PrefillChunk
from sim.timing.sustained import at_power_limit_s, onset_of, slowdown_of


def test_the_measured_profiles_carry_the_factor_with_its_source():
    h100, h200, b200 = (load_hw(f"nvidia-{g}-hgx8") for g in ("h100", "h200", "b200"))
    assert slowdown_of(h100) == slowdown_of(h200) == pytest.approx(1.136)
    assert h100.accelerator.sustained_compute_slowdown_x.src == ["SUS1"] and "[D" in (
        h200.accelerator.sustained_compute_slowdown_x.note or ""
    )
    assert onset_of(h100) == onset_of(h200) == pytest.approx(0.16)
    assert slowdown_of(b200) == 1.0 and onset_of(b200) == 0.0  # not measured: the burst times stand


def test_the_slowdown_ramps_in_over_the_onset():
    """The excess over the burst ramps linearly from a step's start to the whole slowdown at the onset: a step's
    mean share of it is t / (2 onset) within the ramp, 1 - onset / (2 t) past it."""

    def share(t: float) -> float:
        return (at_power_limit_s(t, 1.136, 0.16) / t - 1.0) / 0.136

    assert share(0.010) == pytest.approx(0.03125) and share(0.100) == pytest.approx(0.3125)
    assert share(0.16) == pytest.approx(0.5) and share(0.5) == pytest.approx(0.84)
    assert share(0.16 * (1 + 1e-9)) == pytest.approx(share(0.16))  # continuous at the onset
    assert at_power_limit_s(0.2, 1.136, 0.0) == pytest.approx(0.2 * 1.136)  # no onset: at once
    assert at_power_limit_s(0.2, 1.0, 0.16) == 0.2 and at_power_limit_s(0.0, 1.136, 0.16) == 0.0


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
def test_the_gpu_work_of_a_chunk_step_is_slowed_and_its_links_host_and_decode_steps_are_not(
    h200_tables, case_timing, case
):
    t = case_timing(case)
    assert t._sustained == pytest.approx(1.136)
    terms = t.decode_seq_terms(4096.0, 1).scaled(16)
    chunks = (PrefillChunk(2048, 0, last_chunk=True),)
    decode = t.step_s(16, terms, ())
    slowed = t._chunk_step_s(16, terms, chunks)
    t._sustained = 1.0
    burst = t._chunk_step_s(16, terms, chunks)
    rows = 16 * t.verified_tokens_per_step + 2048
    if t.par.dp > 1:  # the all-to-all as if every rank held the most-loaded rank's rows
        links = t._comm_s(-(-16 * t.verified_tokens_per_step // t.par.dp) * t.par.dp + 2048 * t.par.dp, True)
    else:
        links = t._comm_s(rows, True)
    host = t._mixed_host_s(16, chunks)
    assert slowed - links - host == pytest.approx(
        at_power_limit_s(burst - links - host, 1.136, 0.16), rel=1e-9
    )
    assert slowed > burst
    assert t.step_s(16, terms, ()) == decode  # decode-only steps keep the burst times


def test_an_unmeasured_gpu_keeps_the_burst_times(case_timing):
    assert case_timing("sglang-v4-flash-4xb200-high-throughput-c1024.yaml")._sustained == 1.0
