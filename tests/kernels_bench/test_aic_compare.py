"""kernels_bench.aic_compare on a small AIConfigurator-shaped data folder written here (AIC itself is not
needed: CI does not install it)."""

from __future__ import annotations

import csv

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from kernels_bench import aic_compare
from sim.errors import InputError
from sim.timing.aic_data import find_aic


def _write(path, rows: dict) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    pq.write_table(pa.table(rows), path)


@pytest.fixture()
def aic_dir(tmp_path):
    root = tmp_path / "site" / "aiconfigurator_core" / "systems" / "data"
    (tmp_path / "site" / "aiconfigurator_core-9.9.9.dist-info").mkdir(parents=True)
    for system in ("b200_sxm", "h200_sxm"):
        _write(root / system / "gemm" / "vllm" / "0.24.0" / "gemm_perf.parquet", {
            "kernel_source": ["k"] * 3, "gemm_dtype": ["fp8_block"] * 3, "m": [1, 128, 16384],
            "n": [512, 512, 77], "k": [4096, 4096, 77], "latency": [1e9, 1e9, 1e9]})  # fmt: skip
        _write(root / system / "mhc" / "vllm" / "0.24.0" / "mhc_module_perf.parquet", {
            "op_name": ["pre", "post"], "kernel_source": ["t", "t"], "num_tokens": [64, 64],
            "hidden_size": [4096, 4096], "latency": [1e9, 1e9]})  # fmt: skip
    return root


def test_predict_reads_shapes_only_and_writes_sims_times(aic_dir, tmp_path, monkeypatch):
    monkeypatch.setattr(pq, "read_table", _shape_only(pq.read_table))
    aic = find_aic(aic_dir)
    assert aic.version == "9.9.9"
    written = {p.name: p for p in aic_compare.predict(aic, tmp_path / "out")}
    assert set(written) == {f"{g}_vllm_{c}.csv" for g in ("b200", "h200") for c in ("gemm", "mhc")}
    rows = _rows(written["b200_vllm_gemm.csv"])
    assert [(r["m"], r["sim_op"], r["in_sim_grid"]) for r in rows] == [
        ("1", "wkv", "True"),
        ("128", "wkv", "True"),
    ]
    b200 = {r["m"]: float(r["sim_us"]) for r in rows}
    h200 = {r["m"]: float(r["sim_us"]) for r in _rows(written["h200_vllm_gemm.csv"])}
    assert 0 < b200["128"] < h200["128"] < 1e3  # carried to a faster GPU: faster, never AIC's 1e9
    assert len(_rows(written["b200_vllm_mhc.csv"])) == 1  # pre and post: one boundary


def test_compare_flags_the_fp8_block_artifact_and_reads_ms(aic_dir, tmp_path):
    aic = find_aic(aic_dir)
    for system in ("b200_sxm", "h200_sxm", "h100_sxm"):  # BF16 0.01 ms, FP8-block 0.18 ms: the 180-us artifact
        _write(aic_dir / system / "gemm" / "vllm" / "0.24.0" / "gemm_perf.parquet", {
            "kernel_source": ["b", "b", "f", "f"], "gemm_dtype": ["bfloat16", "bfloat16", "fp8_block", "fp8_block"],
            "m": [1, 128, 1, 128], "n": [512] * 4, "k": [4096] * 4, "latency": [0.01, 0.01, 0.18, 0.18]})  # fmt: skip
    aic_compare.predict(aic, tmp_path / "pred")
    summary = aic_compare.compare(aic, tmp_path / "pred", tmp_path / "out")
    gemm = {(r["gpu"], r["aic_variant"]): r for r in summary if r["op_class"] == "gemm"}
    assert gemm["b200", "fp8_block"]["excluded"] == "2 aic_table_artifact"
    assert gemm["b200", "bfloat16"]["in_summary"] == 2
    rows = _rows(tmp_path / "out" / "compare" / "h200_vllm_gemm.csv")
    bf16 = next(r for r in rows if r["gemm_dtype"] == "bfloat16" and r["m"] == "128")
    assert float(bf16["aic_us"]) == 10.0  # AIC's latency is milliseconds
    assert float(bf16["error"]) == round(float(bf16["sim_us"]) / 10.0 - 1.0, 4)
    # the carry ratio of every GPU against the H200: AIC's times are the same on all three here, so it is sim's
    # own GPU / H200 ratio at each shape
    ratio = {(r["gpu"], r["aic_variant"]): r for r in _rows(tmp_path / "out" / "carry_ratio.csv")}
    h100 = {r["m"]: float(r["sim_us"]) for r in _rows(tmp_path / "out" / "compare" / "h100_vllm_gemm.csv")
            if r["gemm_dtype"] == "bfloat16"}  # fmt: skip
    h200 = {r["m"]: float(r["sim_us"]) for r in _rows(tmp_path / "out" / "compare" / "h200_vllm_gemm.csv")
            if r["gemm_dtype"] == "bfloat16"}  # fmt: skip
    want = sorted(h100[m] / h200[m] - 1.0 for m in h100)
    assert float(ratio["h100", "bfloat16"]["median_error"]) == pytest.approx(sum(want) / 2, abs=1e-4)
    assert ("b200", "bfloat16") in ratio


def test_shapes_refuses_a_time_column(aic_dir):
    path = next(aic_dir.rglob("gemm_perf.parquet"))
    with pytest.raises(ValueError, match="shape columns only"):
        aic_compare._shapes(path, ["m", "latency"])


def test_missing_data_folder_is_one_clear_error(tmp_path, monkeypatch):
    monkeypatch.delenv("SIM_AIC_DATA", raising=False)
    with pytest.raises(InputError, match="pip install"):
        find_aic(tmp_path / "nowhere")


def _shape_only(read):
    def guarded(path, columns=None, **kw):
        assert columns is not None and "latency" not in columns
        return read(path, columns=columns, **kw)

    return guarded


def _rows(path):
    with path.open() as f:
        return list(csv.DictReader(line for line in f if not line.startswith("#")))


def test_prefill_attention_module_is_the_layers_attention_side_for_the_chunk(aic_dir, tmp_path):
    """`attention_prefill_*`: sim's sparse MLA prefill at the padded heads (whole for V4), the indexer whole (CSA), the attention projections
    and wo_a at M = isl with the split ones / tp, against AIC's context module rows of one sequence, no prefix."""
    from sim.timing.calibrated import ATTENTION_SIDE, TP_REPLICATED
    from sim.timing.context_parallel import heads_split_attention_s

    rows = {"model": ["deepseek-ai/DeepSeek-V4-Flash"] * 4, "gemm_type": ["fp8_block"] * 3 + ["bfloat16"],
            "num_heads": [64, 16, 16, 16], "batch_size": [1, 1, 2, 1], "isl": [2048, 2048, 2048, 2048],
            "tp_size": [1, 4, 4, 4], "step": [0, 0, 0, 0], "latency": [1.0, 0.5, 9.0, 9.0]}  # fmt: skip
    for system in ("b200_sxm", "h200_sxm"):
        _write(aic_dir / system / "sparse_attention" / "sglang" / "0.5.14" / "dsv4_csa_context_module_perf.parquet",
               rows)  # fmt: skip
    aic = find_aic(aic_dir)
    written = {p.name: p for p in aic_compare.predict(aic, tmp_path / "pred", frozenset({"attention_prefill_csa"}))}
    assert set(written) == {"b200_sglang_attention_prefill_csa.csv", "h200_sglang_attention_prefill_csa.csv"}
    got = {(r["num_heads"], r["tp_size"]): float(r["sim_us"]) for r in _rows(written["h200_sglang_attention_prefill_csa.csv"])}
    assert set(got) == {("64", "1"), ("16", "4")}  # the batch-2 and bfloat16 rows are not compared
    side = aic_compare.SimSide("h200")
    mt, names = side.mt, [n for n in side._layer_projections("CSA") if n in ATTENTION_SIDE]
    split = mt.wo_a.at(2048) + sum(side.dense[n][0].at(2048) for n in names if n not in TP_REPLICATED)
    whole = sum(side.dense[n][0].at(2048) for n in names if n in TP_REPLICATED)
    attn = heads_split_attention_s(mt.mla_prefill.at(2048), mt.index_prefill.at(2048, 2048), 1.0)
    assert got[("16", "4")] == pytest.approx((attn + split / 4 + whole) * 1e6, rel=1e-4)
    assert got[("16", "4")] < got[("64", "1")]
    summary = aic_compare.compare(aic, tmp_path / "pred", tmp_path / "out")
    h200 = next(r for r in summary if r["gpu"] == "h200" and r["op_class"] == "attention_prefill_csa")
    assert h200["points"] == 2
    assert aic_compare.main(["predict", "--aic-data", str(aic_dir), "--out", str(tmp_path / "x"),
                             "--classes", "attention_prefil_csa"]) == 2  # fmt: skip
