"""The served step's kernel breakdown (kernels_bench.serve.breakdown): categories from kernel names and order."""

from __future__ import annotations

import csv

import pytest

from kernels_bench.serve import breakdown as b

# one step in launch order: embedding gather, a layer (GEMM, indexer + its top-k, FlashMLA, routing sort,
# grouped expert GEMM, mHC), then the final norm and the LM head GEMM
STEP = [
    ("void at::native::vectorized_elementwise_kernel<FillFunctor>", 1.0),
    ("void at::native::vectorized_gather_kernel<16, long>", 2.0),
    ("nvjet_sm90_qqtst_128x128_TNN", 10.0),
    ("_indexer_kernel", 3.0),
    ("void at::native::sbtopk::gatherTopK<float>", 4.0),
    ("void legacy::sm90::decode::sparse::flash_fwd_splitkv_mla_fp8_sparse_kernel", 5.0),
    ("void at::native::sbtopk::gatherTopK<float>", 0.5),  # after attention: MoE routing
    ("void at::native::radixSortKVInPlace<long>", 0.5),
    ("cutlass13device_kernel<GemmUniversal<GroupProblemShape<...>>>", 20.0),
    ("mhc_post_fwd_cuda_kernel", 6.0),
    ("void at::native::vectorized_layer_norm_kernel", 1.0),
    ("nvjet_sm90_tst_128x8_64x12_TNT", 30.0),
]


def test_categories_by_name_and_order() -> None:
    cats = b.categorize([n for n, _ in STEP])
    assert cats == ["glue", "lm_head_embed", "dense_gemm", "indexer", "indexer", "attention", "glue", "glue",
                    "moe_gemm", "mhc", "glue", "lm_head_embed"]  # fmt: skip
    sums = b.category_us([n for n, _ in STEP], [u for _, u in STEP])
    assert sums["lm_head_embed_us"] == 32.0 and sums["indexer_us"] == 7.0 and sums["glue_us"] == 3.0
    assert sums["gpu_busy_us"] == pytest.approx(sum(u for _, u in STEP)) and sums["kernels_per_step"] == 12


def test_replays_split_at_the_host_gaps_and_the_median_one_is_kept() -> None:
    events = []
    t = 0.0
    for rep, scale in enumerate((1.0, 3.0, 2.0)):
        for name, us in STEP:
            events.append((t, us * scale, name))
            t += us * scale + 1.0  # kernels of one graph one microsecond apart
        t += 300.0 + rep  # the host's work between synchronised steps
    steps = b.split_replays(events, 3)
    assert [len(s) for s in steps] == [12, 12, 12]
    assert [n for n, _ in b.median_step(steps)] == [n for n, _ in STEP]
    assert sum(u for _, u in b.median_step(steps)) == pytest.approx(2.0 * sum(u for _, u in STEP))


def test_chrome_trace_keeps_device_activity_only() -> None:
    trace = {"traceEvents": [
        {"ph": "X", "cat": "kernel", "name": "k1", "ts": 5, "dur": 2},
        {"ph": "X", "cat": "gpu_memcpy", "name": "Memcpy DtoD", "ts": 1, "dur": 1},
        {"ph": "X", "cat": "cuda_runtime", "name": "cudaGraphLaunch", "ts": 0, "dur": 9},
        {"ph": "i", "cat": "kernel", "name": "marker", "ts": 3},
    ]}  # fmt: skip
    assert b.chrome_trace_events(trace) == [(5.0, 2.0, "k1"), (1.0, 1.0, "Memcpy DtoD")]


def test_aggregate_rows_read_back_and_print(tmp_path, capsys) -> None:
    step = [*STEP[:3], (STEP[2][0], 5.0), *STEP[3:]]  # the dense GEMM twice
    rows = b.aggregate("decode_B1", [n for n, _ in step], [u for _, u in step])
    gemm = next(r for r in rows if r["name"] == STEP[2][0])
    assert gemm["calls"] == 2 and gemm["us"] == 15.0 and gemm["first_order"] == 2
    path = tmp_path / "k.csv"
    with path.open("w", newline="") as f:
        f.write("# commit: x\n")
        w = csv.DictWriter(f, fieldnames=list(b.KERNEL_COLUMNS))
        w.writeheader()
        w.writerows(rows)
    back = b.read_kernels(path.read_text())["decode_B1"]
    assert sum(r["us"] for r in back) == pytest.approx(sum(u for _, u in STEP) + 5.0)
    assert b.main([str(path)]) == 0
    assert "decode_B1: 88 us in 13 kernels; lm_head_embed 32" in capsys.readouterr().out
