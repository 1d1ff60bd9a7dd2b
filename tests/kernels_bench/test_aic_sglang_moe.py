"""kernels_bench.aic_sglang_moe: which of AIConfigurator's SGLang MoE rows become the committed CSVs (from an
AIConfigurator-shaped table written here, so no AIConfigurator install is needed), that the committed files hold
what it writes from the real table's shape, and that sim.timing.engine_moe reads them."""

from __future__ import annotations

import pyarrow as pa
import pyarrow.parquet as pq

from kernels_bench.aic_sglang_moe import COLUMNS, MODULES, SHAPE, csv_text, main, rows
from sim.paths import project_root
from sim.timing import engine_moe


def _table(root, gpu="b200_sxm"):
    folder = root / gpu / "moe" / "sglang" / "0.5.14"
    folder.mkdir(parents=True)
    kernel, dtype = MODULES["flashinfer_trtllm"]
    base = {"kernel_source": kernel, "moe_dtype": dtype, "distribution": "balanced", **SHAPE}
    kept = [{**base, "moe_tp_size": tp, "moe_ep_size": ep, "num_tokens": t, "latency": 0.01 * tp + 0.1 * ep + 1e-4 * t}
            for tp, ep in ((1, 1), (1, 4), (4, 1)) for t in (64, 1)]  # fmt: skip
    dropped = [
        {**kept[0], "distribution": "power_law_1.2"},
        {**kept[0], "moe_tp_size": 2, "moe_ep_size": 2},  # expert TP and EP together: not a column sim reads
        {**kept[0], "hidden_size": 7168},
        {**kept[0], "kernel_source": "sglang_fused_moe_triton"},
    ]
    pq.write_table(pa.Table.from_pylist(kept + dropped), folder / "moe_perf.parquet")


def test_the_balanced_rows_at_v4_flashs_shape_become_the_csv(tmp_path, capsys):
    _table(tmp_path)
    got = rows(tmp_path, "b200_sxm", "flashinfer_trtllm")
    assert [(r["tp"], r["ep"], r["tokens"]) for r in got] == [
        (1, 1, 1), (1, 1, 64), (1, 4, 1), (1, 4, 64), (4, 1, 1), (4, 1, 64)
    ]  # fmt: skip
    assert got[1]["time_us"] == 116.4  # ms in AIConfigurator's table, us in the CSV
    assert main(["--aic-data", str(tmp_path), "--module", "flashinfer_trtllm"]) == 0
    assert capsys.readouterr().out == csv_text(got, "b200_sxm", "flashinfer_trtllm")
    assert main(["--aic-data", str(tmp_path), "--module", "triton_fp8"]) == 1
    assert "no triton_fp8 rows" in capsys.readouterr().err


def test_the_committed_files_are_what_sim_reads():
    for runner in ("flashinfer_trtllm", "triton_fp8"):
        for gpu in ("b200", "b300"):
            path = project_root().joinpath(*engine_moe.points_file(runner, gpu))
            lines = path.read_text().splitlines()
            assert lines[3] == ",".join(COLUMNS) and f"--module {runner}" in lines[1]
            points = engine_moe.load_points(runner, gpu)
            assert {(p.hidden, p.intermediate, p.experts, p.top_k) for p in points} == {(4096, 2048, 256, 6)}
            assert {p.ep for p in points} >= {1, 2, 4, 8} and len(
                engine_moe.tp_points(runner, gpu, (4096, 2048, 256, 6))
            ) > 27
