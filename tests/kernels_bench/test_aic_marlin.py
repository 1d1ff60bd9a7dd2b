"""kernels_bench.aic_marlin: which of AIConfigurator's rows become the committed Marlin CSV (from an
AIConfigurator-shaped table written here, so no AIConfigurator install is needed), and that sim reads what it
writes."""

from __future__ import annotations

import pyarrow as pa
import pyarrow.parquet as pq

from kernels_bench.aic_marlin import KERNEL, csv_text, main, rows
from sim.timing.marlin import POINTS_FILE, load_points


def _table(root):
    folder = root / "h200_sxm" / "moe" / "vllm" / "0.24.0"
    folder.mkdir(parents=True)
    base = {"kernel_source": KERNEL, "moe_dtype": "w4a16_mxfp4", "distribution": "balanced", "moe_tp_size": 1,
            "hidden_size": 3584, "inter_size": 3072, "num_experts": 896, "topk": 16}  # fmt: skip
    kept = [{**base, "moe_ep_size": ep, "num_tokens": t, "latency": 0.1 * ep + 0.001 * t}
            for ep in (2, 1) for t in (64, 1)]  # fmt: skip
    dropped = [
        {**kept[0], "distribution": "power_law_1.01"},
        {**kept[0], "moe_tp_size": 2},
        {**kept[0], "moe_dtype": "int4_wo"},
        {**kept[0], "kernel_source": "vllm_fp8moe_triton_tritonexperts"},
    ]
    pq.write_table(pa.Table.from_pylist(kept + dropped), folder / "moe_perf.parquet")


def test_the_balanced_expert_parallel_marlin_rows_become_the_csv_sim_reads(tmp_path, capsys):
    _table(tmp_path)
    got = rows(tmp_path)
    assert [(r["ep"], r["tokens"]) for r in got] == [(1, 1), (1, 64), (2, 1), (2, 64)]
    assert got[1]["time_us"] == 164.0  # ms in AIConfigurator's table, us in the CSV
    assert main(["--aic-data", str(tmp_path)]) == 0
    out = tmp_path / "marlin.csv"
    out.write_text(capsys.readouterr().out)
    assert out.read_text() == csv_text(got)
    points = load_points(out)
    assert [(p.ep, p.tokens, p.seconds) for p in points][1] == (1, 64, 164e-6)
    assert main(["--aic-data", str(tmp_path / "none")]) == 1
    assert "no Marlin MXFP4 rows" in capsys.readouterr().err


def test_the_committed_csv_names_its_source():
    from sim.paths import project_root

    head = project_root().joinpath(*POINTS_FILE).read_text().splitlines()[:3]
    assert head[1].startswith("# source: NVIDIA AIConfigurator 0.12.0") and KERNEL in head[1]
    assert head[2] == "# used by: sim/timing/marlin.py (docs/engines_and_validation.md section 19)"
