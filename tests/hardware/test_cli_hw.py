"""`sim hw list / show / api-prices` through the CLI runner."""

from __future__ import annotations

import json

import pytest
from typer.testing import CliRunner

from sim.cli import app


def test_hw_list_json():
    result = CliRunner().invoke(app, ["hw", "list", "--json"])
    assert result.exit_code == 0, result.output
    rows = {r["id"]: r for r in json.loads(result.stdout)}
    h200 = rows["nvidia-h200-hgx8"]
    assert h200 == {
        "id": "nvidia-h200-hgx8", "gpu": "H200", "gpus_per_node": 8, "hbm_capacity_gb": 150.76,
        "hbm_bw_TBps": 4.8, "bf16_tflops": 989.0, "fp8_tflops": 1979.0, "fp4_tflops": None,
        "default_term": "aws_on_demand", "usd_per_gpu_hour": 7.912,
    }  # fmt: skip
    assert rows["amd-mi355x-ubb8"]["usd_per_gpu_hour"] is None


def test_hw_list_table():
    result = CliRunner().invoke(app, ["hw", "list"])
    assert result.exit_code == 0
    assert "nvidia-gb200-nvl72" in result.output


def test_hw_show_lists_sources_and_est_flags():
    result = CliRunner().invoke(app, ["hw", "show", "nvidia-h200-hgx8"])
    assert result.exit_code == 0, result.output
    out = result.output
    assert "accelerator.hbm_bw_TBps" in out
    assert "measured.bf16_gemm_tflops" in out
    assert "HW6" in out and "est" in out
    assert "peak_flops_per_s(fp8)" in out


def test_hw_show_json_has_every_field_with_src():
    result = CliRunner().invoke(app, ["hw", "show", "nvidia-h200-hgx8", "--json"])
    assert result.exit_code == 0
    data = json.loads(result.stdout)
    bw = data["profile"]["accelerator"]["hbm_bw_TBps"]
    assert bw == {"value": 4.8, "src": ["S4", "S5"], "est": False, "tag": None, "note": ""}
    assert data["profile"]["host"]["dram_bw_GBps"]["est"] is True
    assert data["derived_si"]["hbm_bw_bytes_per_s (per GPU, peak)"] == 4.8e12
    capex = next(p for p in data["prices"] if p["term"] == "capex_4y")
    assert capex["usd_per_gpu_hour"] == pytest.approx(
        (370000 / 35040 + 37000 / 8760 + 10.2 * 1.3 * 0.0977) / 8
    )


def test_hw_show_unknown_is_an_input_error():
    result = CliRunner().invoke(app, ["hw", "show", "nvidia-h300"])
    assert result.exit_code != 0
    assert "unknown hardware profile" in str(result.exception)


def test_api_prices_json():
    result = CliRunner().invoke(app, ["hw", "api-prices", "--json"])
    assert result.exit_code == 0
    rows = json.loads(result.stdout)
    assert {(r["family"], r["tier"]) for r in rows} == {("v4", "peak"), ("v4", "off_peak"), ("v41", "peak"),
                                                       ("v41", "off_peak")}  # fmt: skip
