"""kernels_bench.aic_operators: which of AIConfigurator's rows become the committed operator CSVs sim's `aic` stack
reads (from an AIConfigurator-shaped data folder written here; CI does not install AIConfigurator)."""

from __future__ import annotations

import pyarrow as pa
import pyarrow.parquet as pq

from kernels_bench import aic_operators as ops


def _write(path, rows: dict) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    pq.write_table(pa.table(rows), path)


def _system(tmp_path):
    system = tmp_path / "h200_sxm"
    _write(system / "gemm" / "sglang" / "0.5.14" / "gemm_perf.parquet", {
        "gemm_dtype": ["fp8_block"] * 5 + ["bfloat16"],
        "m": [1, 128, 1, 1, 1, 1], "n": [512, 512, 512, 8192, 51200, 512], "k": [4096, 4096, 4096, 1024, 1024, 4096],
        "latency": [0.010, 0.020, 0.012, 0.030, 0.050, 0.5]})  # fmt: skip
    moe = {"moe_dtype": ["fp8_block", "fp8_block", "fp8_block", "bfloat16"], "num_tokens": [1, 16, 1, 1],
           "hidden_size": [4096] * 4, "inter_size": [2048] * 4, "topk": [6] * 4, "num_experts": [256] * 4,
           "moe_tp_size": [1, 1, 2, 1], "moe_ep_size": [4] * 4, "distribution": ["balanced"] * 4,
           "latency": [0.1, 0.2, 0.3, 0.4]}  # fmt: skip
    _write(system / "moe" / "vllm" / "0.24.0" / "moe_perf.parquet", moe)
    _write(system / "mhc" / "sglang" / "0.5.14" / "mhc_module_perf.parquet", {
        "op_name": ["pre", "post"], "num_tokens": [8, 8], "hidden_size": [4096, 4096], "latency": [0.02, 0.01]})  # fmt: skip
    return system


def test_nearest_pair_is_nearest_in_log_space():
    pairs = [(512, 4096), (8192, 1024), (51200, 1024)]
    assert ops.nearest_pair(pairs, 512, 4096) == (512, 4096)
    assert ops.nearest_pair(pairs, 32768, 1024) == (51200, 1024)  # ln 1.56 < ln 4
    assert ops.nearest_pair(pairs, 384, 5120) == (512, 4096)


def test_rows_kept_are_the_shapes_sim_needs_at_the_engines_formats(tmp_path):
    system = _system(tmp_path)
    gemm = ops.gemm_rows(system, "h200", [(512.0, 4096.0), (32768.0, 1024.0)])
    # (512, 4096) itself, the repeat at m=1 averaged; (51200, 1024) as wq_b's nearest; (8192, 1024) not needed
    assert [(r["n"], r["k"], r["m"], r["time_us"], r["samples"]) for r in gemm] == [
        (512, 4096, 1, 11.0, 2), (512, 4096, 128, 20.0, 1), (51200, 1024, 1, 50.0, 1)]  # fmt: skip
    moe = ops.moe_rows(system, "h200")  # expert TP 2 and BF16 left out
    assert [(r["moe_dtype"], r["ep"], r["tokens"], r["time_us"]) for r in moe] == [
        ("fp8_block", 4, 1, 100.0), ("fp8_block", 4, 16, 200.0)]  # fmt: skip
    assert [(r["op"], r["hidden"], r["time_us"]) for r in ops.mhc_rows(system, "h200")] == [
        ("post", 4096, 10.0), ("pre", 4096, 20.0)]  # fmt: skip
    text = ops.csv_text("gemm", gemm)
    assert text.startswith("# what: SGLang 0.5.14's dense fp8_block GEMM") and "Apache-2.0" in text
    assert text.splitlines()[4] == "gpu,n,k,m,time_us,samples"


def test_main_writes_the_three_files_or_says_what_is_missing(tmp_path, capsys):
    data = tmp_path / "data"
    _system(data)
    out = tmp_path / "out"
    assert ops.main(["--aic-data", str(data), "--out-dir", str(out)]) == 0
    assert sorted(p.name for p in out.iterdir()) == sorted(ops.FILES.values())
    assert ops.main(["--aic-data", str(tmp_path / "empty"), "--out-dir", str(out)]) == 1
    assert "no gemm, moe, mhc rows" in capsys.readouterr().err
