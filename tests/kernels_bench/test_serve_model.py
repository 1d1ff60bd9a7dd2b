"""The served reduced V4 model (kernels_bench.serve.model) at tiny shapes on the CPU with float64 reference
kernels: a mixed multi-sequence schedule with chunked prefill, decode, different contexts and a
prefix-reused block table equals each sequence run alone and the dense one-pass reference
(kernels_bench.serve.reference); and on the GPU (``gpu``) the production kernels against the reference."""

from __future__ import annotations

import pytest
import torch
from serve_steps import rel, run_steps, tiny_dims, tokens, work

from kernels_bench import formats
from kernels_bench.production import flashmla_layout as fl
from kernels_bench.serve import model as sm
from kernels_bench.serve import paged
from kernels_bench.serve.kernels import ServeRef
from kernels_bench.serve.reference import dense_logits
from kernels_bench.serve.step_api import StepPlan

TINY = sm.ServeConfig(
    dims=tiny_dims(compressor_out={"CSA": 1024, "HCA": 1024}, index_compressor_out=256),
    kinds=("SWA", "CSA", "HCA"),
    vocab=1000,
    state_slots=8,
)


def _tokens(seed: int, n: int) -> list[int]:
    return tokens(seed, n, TINY.vocab)


A = _tokens(1, 263)  # 260 prompt tokens then 3 decoded
B = A[:256] + _tokens(2, 22)  # reuses A's first block (256 tokens), 20 new, then 2 decoded
C = _tokens(3, 141)  # 130 + 10 prompt tokens (chunks end inside CSA and HCA groups), then 1 decoded
A_BT, B_BT, C_BT = [3, 7], [3, 9], [1]


def _mixed_steps():
    return [
        ([], [work(10, A_BT, 0, A[:180])]),
        ([], [work(10, A_BT, 180, A[180:260])]),
        ([work(10, A_BT, 260, A[260:261])], [work(11, B_BT, 256, B[256:276]), work(12, C_BT, 0, C[:130])]),
        (
            [work(10, A_BT, 261, A[261:262]), work(11, B_BT, 276, B[276:277])],
            [work(12, C_BT, 130, C[130:140])],
        ),
        (
            [
                work(10, A_BT, 262, A[262:263]),
                work(11, B_BT, 277, B[277:278]),
                work(12, C_BT, 140, C[140:141]),
            ],
            [],
        ),
    ]


@pytest.fixture(scope="module")
def runs():
    """The mixed schedule, and A alone (same chunks and decodes in its own cache)."""
    m = sm.ServedModel(TINY, ServeRef(), num_blocks=12, device="cpu")
    ma = sm.ServedModel(TINY, ServeRef(), num_blocks=12, device="cpu")
    alone_a = run_steps(
        ma,
        [([], [work(10, A_BT, 0, A[:180])]), ([], [work(10, A_BT, 180, A[180:260])])]
        + [([work(10, A_BT, 260 + i, A[260 + i : 261 + i])], []) for i in range(3)],
    )
    return m, run_steps(m, _mixed_steps()), ma, alone_a


def test_mixed_schedule_equals_each_sequence_alone(runs):
    _, got, _, alone_a = runs
    for i in range(5):
        assert rel(got[(10, i)], alone_a[(10, i)]) < 1e-9
    # B alone: its prefix written by another sequence in one chunk in another block, then its own work
    mb = sm.ServedModel(TINY, ServeRef(), num_blocks=12, device="cpu")
    alone_b = run_steps(
        mb,
        [
            ([], [work(20, [4], 0, B[:256])]),
            ([], [work(11, [4, 6], 256, B[256:276])]),
            ([work(11, [4, 6], 276, B[276:277])], []),
            ([work(11, [4, 6], 277, B[277:278])], []),
        ],
    )
    for mixed_i, alone_i in ((2, 1), (3, 2), (4, 3)):
        assert rel(got[(11, mixed_i)], alone_b[(11, alone_i)]) < 1e-6


def test_served_logits_equal_the_dense_reference(runs):
    m, got, _, _ = runs
    ref_b = dense_logits(m, B)
    assert rel(got[(11, 2)], ref_b[275]) < 1e-6  # end of B's prefill chunk (prefix reused)
    assert rel(got[(11, 4)], ref_b[277]) < 1e-6  # B's second decode
    assert rel(ref_b[276], ref_b[277]) > 0.1  # (positions differ: the check can fail)
    ref_c = dense_logits(m, C)
    for step, p in ((2, 129), (3, 139), (4, 140)):  # chunks end mid-group (state across steps), then decode
        assert rel(got[(12, step)], ref_c[p]) < 1e-6


def test_prefix_reuse_reads_the_shared_blocks_without_writing_them(runs):
    """B reused A's block 3: its steps wrote only block 9, so the rows of block 3 are those of A alone."""
    m, _, ma, _ = runs
    for lk, lf in zip(m.kv, ma.kv, strict=True):
        for b in (3,):
            rows = torch.arange(b * 256, (b + 1) * 256)
            assert torch.equal(lk.raw.gather(rows), lf.raw.gather(rows))


def test_row_pool_scatters_into_flashmla_model1_layout():
    pool = paged.RowPool(200, "cpu")
    rows = formats.random_rows("fp8_584", 200, generator=torch.Generator().manual_seed(0))
    perm = torch.randperm(200, generator=torch.Generator().manual_seed(1))
    pool.write(perm, rows[perm])
    assert torch.equal(fl.model1_rows(pool.view)[:200], rows)
    assert torch.equal(pool.gather(torch.tensor([5, 199, 64])), rows[[5, 199, 64]])
    assert pool.view.shape == (pool.pages, 64, 1, 584) and pool.scratch_row >= 200


def test_kv_bytes_per_block():
    cfg = sm.ServeConfig()
    # 5 layers x 256 raw rows + 2 CSA x 64 (rows + 132-B keys) + 2 HCA x 2 rows; 585 B a row in MODEL1 pages
    assert sm.kv_bytes_per_block(cfg) == 5 * 256 * 585 + 2 * 64 * (585 + 132) + 2 * 2 * 585
    assert sm.ServedModel.blocks_that_fit(cfg, 10 * sm.kv_bytes_per_block(cfg) + 5) == 10


def test_bad_block_table_is_refused():
    m = sm.ServedModel(TINY, ServeRef(), num_blocks=4, device="cpu")
    with pytest.raises(ValueError, match="blocks for"):
        m.step(StepPlan((), (work(1, [0], 200, _tokens(5, 100)),)))
    with pytest.raises(ValueError, match="outside"):
        m.step(StepPlan((), (work(1, [9], 0, _tokens(5, 10)),)))


@pytest.mark.gpu
def test_production_served_model_matches_reference_and_alone():
    """The GPU check of kernels_bench.serve.bench (real shapes, 8 experts): the production kernels against
    the float64 reference on one mixed schedule (every step a CUDA graph, and eagerly) and each sequence
    alone (criteria: bench.check_failures)."""
    try:
        from kernels_bench.serve.kernels import ServeGpu

        ServeGpu()
    except Exception as e:  # noqa: BLE001 - packages missing on this machine
        pytest.skip(str(e)[:200])
    import json
    import os
    import sys
    from pathlib import Path

    from kernels_bench.serve import bench

    res = bench.check(sys.stdout)
    print({k: v for k, v in res.items() if k != "works"})
    if os.environ.get("SERVE_CHECK_JSON"):  # the device call keeps the full result
        Path(os.environ["SERVE_CHECK_JSON"]).write_text(json.dumps(res, indent=1) + "\n")
    assert not bench.check_failures(res)
    assert [1, 8192] in res["graph_buckets"] and [512, 8192] in res["graph_buckets"]


def test_sim_times_the_mini_spec():
    """sim's calibrated H200 timing accepts deepseek-v4-flash-mini (one GPU, all 32 experts) and answers
    the step shapes the bench measures (kernels_bench.serve.predict)."""
    from kernels_bench.serve import predict

    tm = predict.mini_timing()
    d1, d64 = (predict.predict_step_s(tm, b, 8192, 0, 0) for b in (1, 64))
    p512, p4096 = (predict.predict_step_s(tm, 0, 0, t, 0) for t in (512, 4096))
    mixed = predict.predict_step_s(tm, 16, 8192, 2048, 8192)
    assert 0 < d1 < d64 < 0.05 and 0 < p512 < p4096 < 0.5
    assert mixed > predict.predict_step_s(tm, 0, 0, 2048, 8192)


def test_graph_row_buckets_cover_every_step_up_to_the_budget() -> None:
    assert sm.graph_row_buckets(8192) == list(sm.ROW_BUCKETS)
    assert sm.graph_row_buckets(64)[-1] == 64 and sm.graph_row_buckets(65)[-1] == 80
    assert sm.graph_row_buckets(10**6) == list(sm.ROW_BUCKETS)
    for n in (1, 33, 2049, 8192):  # the bucket a step of n rows replays is pre-captured
        assert next(b for b in sm.ROW_BUCKETS if b >= n) in sm.graph_row_buckets(8192)
