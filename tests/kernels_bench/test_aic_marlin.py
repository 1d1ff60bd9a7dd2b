"""kernels_bench.aic_marlin: which of AIConfigurator's rows become the committed Marlin CSV (from an
AIConfigurator-shaped table written here, so no AIConfigurator install is needed), and that sim reads what it
writes."""

from __future__ import annotations

import pyarrow as pa
import pyarrow.parquet as pq

from kernels_bench.aic_marlin import KERNEL, csv_text, main, rows
from sim.timing.marlin import POINTS_FILES, load_points


def _table(root, gpu="h200_sxm"):
    folder = root / gpu / "moe" / "vllm" / "0.24.0"
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


def test_gpu_picks_the_gpus_own_rows_and_names_it(tmp_path, capsys):
    _table(tmp_path, "h100_sxm")
    assert main(["--aic-data", str(tmp_path)]) == 1  # no H200 rows here
    assert "h200_sxm" in capsys.readouterr().err
    assert main(["--aic-data", str(tmp_path), "--gpu", "h100_sxm"]) == 0
    out = capsys.readouterr().out
    assert (
        "systems/data/h100_sxm/" in out
        and "NVIDIA H100 SXM" in out
        and out == csv_text(rows(tmp_path, "h100_sxm"), "h100_sxm")
    )


def test_tp_split_writes_sglangs_module_at_each_expert_tp_size(tmp_path, capsys):
    from kernels_bench.aic_marlin import SGLANG_KERNEL, tp_rows

    folder = tmp_path / "h100_sxm" / "moe" / "sglang" / "0.5.14"
    folder.mkdir(parents=True)
    base = {"kernel_source": SGLANG_KERNEL, "moe_dtype": "w4a16_mxfp4", "distribution": "balanced", "moe_ep_size": 1,
            "hidden_size": 3584, "inter_size": 3072, "num_experts": 896, "topk": 16}  # fmt: skip
    kept = [{**base, "moe_tp_size": tp, "num_tokens": 64, "latency": 1.0 / tp} for tp in (8, 1)]
    dropped = [{**kept[0], "moe_ep_size": 64}, {**kept[0], "distribution": "power_law_1.2"}]
    pq.write_table(pa.Table.from_pylist(kept + dropped), folder / "moe_perf.parquet")
    assert [(r["tp"], r["time_us"]) for r in tp_rows(tmp_path, "h100_sxm")] == [(1, 1000.0), (8, 125.0)]
    assert main(["--aic-data", str(tmp_path), "--gpu", "h100_sxm", "--tp-split"]) == 0
    out = capsys.readouterr().out
    assert (
        "moe/sglang/0.5.14" in out
        and "section 27" in out
        and out.strip().endswith("3584,3072,896,16,8,64,125.0")
    )


def test_the_committed_csvs_name_their_source_and_gpu():
    from sim.paths import project_root

    for gpu, folder in (("h200", "h200_sxm"), ("h100", "h100_sxm")):
        head = project_root().joinpath(*POINTS_FILES[gpu]).read_text().splitlines()[:3]
        assert head[1].startswith("# source: NVIDIA AIConfigurator 0.12.0") and KERNEL in head[1]
        assert f"systems/data/{folder}/moe/vllm" in head[1]
        assert (
            head[2] == "# used by: sim/timing/marlin.py (docs/engines_and_validation.md sections 19 and 24)"
        )


def test_the_cross_shape_check_gives_one_where_the_time_goes_by_the_experts_weights(tmp_path):
    """Two int4 Marlin shapes whose time above an 80 us floor is local experts x weights x a cost that depends on
    the rows an expert and the local experts only: each carried from the other exactly. A shape measured at too few
    EP sizes is no module and is not checked."""
    from kernels_bench.aic_marlin import cross_shapes

    folder = tmp_path / "h200_sxm" / "moe" / "vllm" / "0.19.0"
    folder.mkdir(parents=True)
    table = []
    for hidden, inter, experts, top_k, eps in ((7168, 2048, 256, 8, (1, 2, 4, 8)), (4096, 1536, 256, 8, (1, 2, 4, 8)),
                                                (4096, 14336, 8, 2, (1, 2))):  # fmt: skip
        weights = 3 * hidden * inter
        for ep in eps:
            local = experts / ep
            for per_expert in (0.5, 1.0, 2.0, 8.0, 64.0):
                tokens = per_expert * experts / top_k
                cost = 1e-13 * (1.0 + per_expert / 4.0) * (1.0 + 8.0 / local)
                touched = min(local, tokens * top_k / ep)
                table.append({"kernel_source": "vllm_marlin_int4_moe", "distribution": "balanced", "moe_tp_size": 1,
                              "hidden_size": hidden, "inter_size": inter, "num_experts": experts, "topk": top_k,
                              "moe_ep_size": ep, "num_tokens": int(tokens),
                              "latency": (80e-6 + touched * weights * cost) * 1e3})  # fmt: skip
    # the module's floor is its least time: a call with almost nothing to do
    table.append({**table[-1], "hidden_size": 7168, "inter_size": 2048, "num_experts": 256, "topk": 8,
                  "moe_ep_size": 8, "num_tokens": 1, "latency": 80e-6 * 1e3})  # fmt: skip
    pq.write_table(pa.Table.from_pylist(table), folder / "moe_perf.parquet")
    out = cross_shapes(tmp_path, ((7168, 2048, 256, 8),))
    assert [r["shape"] for r in out] == [(4096, 1536, 256, 8)]  # the 8-expert shape has two EP sizes only
    assert out[0]["rows"] == 4 * 4 and abs(out[0]["median"] - 1.0) < 1e-9
    assert abs(out[0]["p10"] - 1.0) < 1e-9 and abs(out[0]["p90"] - 1.0) < 1e-9
