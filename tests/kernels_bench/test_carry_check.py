"""The carry check's tools (issue 28): carry_predict writes sim's carried times for a GPU, carry_compare sets
them against a measurement. CPU only: the H200's own tables stand in for a measurement."""

from __future__ import annotations

import shutil

import pytest

from kernels_bench import carry_compare, carry_predict
from sim.paths import hwprofiles_dir


def test_carried_to_the_h200_itself_every_row_keeps_its_time():
    """The carry is the identity on its reference GPU, so the prediction for the H200 is its own table."""
    rows = carry_predict.kernel_rows("h200")
    assert len(rows) > 2000
    assert {r["stack"] for r in rows} == {"production", "kernels_bench"}
    assert {r["bound"] for r in rows} <= {"compute", "bandwidth", "concurrency"}
    for r in rows:
        assert r["predicted_us"] == pytest.approx(r["h200_us"], rel=1e-6), r


def test_the_comparison_joins_each_prediction_with_its_measured_row(tmp_path):
    """With the H200's tables as the 'measurement', each kernel's error is its predicted / H200 time - 1, the
    forward points and served steps join on their shapes, and the summary names every stack."""
    pred = tmp_path / "predicted"
    pred.mkdir()
    header = {"what": "test"}
    h100 = carry_predict.kernel_rows("h100")
    carry_predict._write(pred / "kernels.csv", h100, header)
    carry_predict._write(pred / "forward.csv", carry_predict.forward_rows("h100"), header)
    measured = tmp_path / "measured"
    measured.mkdir()
    for name in ("production_results.csv", "kernels_bench_results.csv", "forward_pass_results.csv"):
        shutil.copy(hwprofiles_dir() / "h200" / name, measured / name)
    text = carry_compare.run(pred, measured, tmp_path / "out")
    assert "| kernels_bench |" in text and "| production |" in text and "Forward-pass points" in text
    joined = carry_compare.read_csv(tmp_path / "out" / "kernels.csv")
    assert len(joined) > 1500
    for r in joined:
        want = float(r["predicted_us"]) / float(r["h200_us"]) - 1.0
        assert float(r["error"]) == pytest.approx(want, abs=2e-4), r
    forward = carry_compare.read_csv(tmp_path / "out" / "forward.csv")
    predicted = {(r["stack"], r["mode"], r["batch"], r["context_tokens"], r["chunk_tokens"]): r
                 for r in carry_compare.read_csv(pred / "forward.csv")}  # fmt: skip
    assert len(forward) == 20
    for r in forward:
        p = predicted[r["stack"], r["mode"], r["batch"], r["context_tokens"], r["chunk_tokens"]]
        assert float(r["measured_us"]) == pytest.approx(float(p["h200_measured_us"]), rel=1e-4)
        want = float(p["predicted_measured_us"]) / float(r["measured_us"]) - 1.0
        assert float(r["error_measured"]) == pytest.approx(want, abs=2e-4)
