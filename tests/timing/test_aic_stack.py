"""The `aic` kernel stack (sim.timing.aic) on a small AIConfigurator-shaped data folder written here (CI does
not install AIConfigurator), and its one clear error when AIConfigurator is absent."""

from __future__ import annotations

import importlib.util

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from sim.config.timing import Timing
from sim.errors import InputError
from sim.hardware import load_hw
from sim.timing import aic
from sim.timing.carry import tables_for


def _write(path, rows: dict) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    pq.write_table(pa.table(rows), path)


@pytest.fixture()
def aic_dir(tmp_path, monkeypatch):
    root = tmp_path / "aiconfigurator_core" / "systems" / "data"
    b200 = root / "b200_sxm"
    _write(b200 / "gemm" / "sglang" / "0.5.14" / "gemm_perf.parquet", {  # wkv: 512 x 4096, 10 us flat
        "gemm_dtype": ["fp8_block"] * 3, "m": [1, 128, 16384], "n": [512] * 3, "k": [4096] * 3,
        "latency": [0.01] * 3})  # fmt: skip
    # W4A4 (nvfp4) 300 us flat, W4A8 (w4a8_mxfp4_mxfp8) 600 us flat
    moe = {"moe_dtype": ["nvfp4"] * 2 + ["w4a8_mxfp4_mxfp8"] * 2, "num_tokens": [1, 16384] * 2,
           "hidden_size": [4096] * 4, "topk": [6] * 4, "num_experts": [256] * 4, "moe_tp_size": [1] * 4,
           "moe_ep_size": [1] * 4, "distribution": ["balanced"] * 4, "latency": [0.3, 0.3, 0.6, 0.6]}  # fmt: skip
    _write(b200 / "moe" / "vllm" / "0.24.0" / "moe_perf.parquet", moe)
    _write(b200 / "mhc" / "sglang" / "0.5.14" / "mhc_module_perf.parquet", {
        "op_name": ["pre", "post", "pre", "post"], "num_tokens": [1, 1, 8192, 8192], "hidden_size": [4096] * 4,
        "latency": [0.02, 0.01, 0.02, 0.01]})  # fmt: skip
    monkeypatch.setenv("SIM_AIC_DATA", str(root))
    aic._cached.cache_clear()
    return root


def test_aic_stack_replaces_only_what_aic_covers(aic_dir):
    profile = load_hw("nvidia-b200-hgx8")
    got, base = aic.aic_tables(profile), tables_for(profile, "production")
    assert len(got.rows) == len(base.rows) and got.stack == "aic"
    replaced = [(a, b) for a, b in zip(got.rows, base.rows, strict=True) if a.impl == "aic"]
    kinds = {(a.family, a.layer_kind) for a, _b in replaced}
    assert kinds == {("gemm_dense", "wkv"), ("gemm_grouped", "gate_up"), ("gemm_grouped", "down"),
                     ("mhc", "boundary")}  # fmt: skip
    assert all(a.model == "V4" for a, _b in replaced)  # AIC 0.12 has no V4.1: the carry stays
    for a, _b in replaced:
        if a.family == "gemm_dense":
            assert a.median_s == pytest.approx(10e-6)
        if a.family == "mhc":
            assert a.median_s == pytest.approx(30e-6)  # one boundary = pre + post
    # all 256 experts with b tokens each: the layer's W4A8 600 us split in the production rows' proportion
    up = {a.batch: a.median_s for a, _b in replaced if a.kernel == "moe_gate_up" and a.groups == 256}
    down = {a.batch: a.median_s for a, _b in replaced if a.kernel == "moe_down" and a.groups == 256}
    assert up and all(up[b] + down[b] == pytest.approx(600e-6) for b in up)
    # experts whose activations are FP4 too (an NVFP4 checkpoint) read AIC's nvfp4 rows
    w4a4 = aic.stack_tables(profile, "aic", "fp4")
    up4 = {
        a.batch: a.median_s
        for a in w4a4.rows
        if a.impl == "aic" and a.kernel == "moe_gate_up" and a.groups == 256
    }
    down4 = {
        a.batch: a.median_s
        for a in w4a4.rows
        if a.impl == "aic" and a.kernel == "moe_down" and a.groups == 256
    }
    assert up4 and all(up4[b] + down4[b] == pytest.approx(300e-6) for b in up4)
    untouched = [b for a, b in zip(got.rows, base.rows, strict=True) if a.impl != "aic"]
    assert any(r.family == "pipeline" for r in untouched) and any(r.kernel == "proj_wq_b" for r in untouched)


def test_aic_stack_without_aiconfigurator_is_one_clear_error(monkeypatch):
    if importlib.util.find_spec("aiconfigurator_core") is not None:
        pytest.skip("AIConfigurator is installed here")
    monkeypatch.delenv("SIM_AIC_DATA", raising=False)
    with pytest.raises(
        InputError, match=r'timing.kernels: aic: AIConfigurator is not installed.*pip install "\.\[aic\]"'
    ):
        aic.stack_tables(load_hw("nvidia-b200-hgx8"), "aic")


def test_aic_is_a_kernel_stack_of_the_timing_block():
    assert Timing(kernels="aic").kernels == "aic"
