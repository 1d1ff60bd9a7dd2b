"""The served reduced V4.1 (kernels_bench.serve.model41: CSA2 Full / Reuse / Reindex layers) at tiny shapes
on the CPU with float64 reference kernels: a mixed multi-sequence schedule (chunked prefill ending inside
ratio-2 groups, decode, a prefix-reused block) equals each sequence alone and the dense one-pass reference
(kernels_bench.serve.reference.dense_logits41); the candidate restriction of the Reindex layer is live at
these shapes; and on the GPU (``gpu``) the production kernels against the reference."""

from __future__ import annotations

from dataclasses import replace

import pytest
import torch
from serve_steps import rel, run_steps, tiny_dims, tokens, work

from kernels_bench.production import forward as fw
from kernels_bench.serve import model41 as m41
from kernels_bench.serve.kernels import ServeRef, masked_topk
from kernels_bench.serve.reference import dense_logits41

TINY = m41.ServeConfig41(
    dims=tiny_dims(),
    vocab=1000,
    state_slots=8,
    candidate_blocks=4,  # 32 candidate keys of ~270: the Reindex layer's restriction matters here
)


def _tokens(seed: int, n: int) -> list[int]:
    return tokens(seed, n, TINY.vocab)


A = _tokens(1, 263)  # 181 + 79 prompt tokens (the first chunk ends inside a ratio-2 group), then 3 decoded
B = A[:256] + _tokens(2, 22)  # reuses A's first block, 21 new (odd), then 1 decoded
C = _tokens(3, 141)  # 131 + 9 prompt tokens, then 1 decoded
A_BT, B_BT, C_BT = [3, 7], [3, 9], [1]


def _mixed_steps():
    return [
        ([], [work(10, A_BT, 0, A[:181])]),
        ([], [work(10, A_BT, 181, A[181:260])]),
        ([work(10, A_BT, 260, A[260:261])], [work(11, B_BT, 256, B[256:277]), work(12, C_BT, 0, C[:131])]),
        (
            [work(10, A_BT, 261, A[261:262]), work(11, B_BT, 277, B[277:278])],
            [work(12, C_BT, 131, C[131:140])],
        ),
        ([work(10, A_BT, 262, A[262:263]), work(12, C_BT, 140, C[140:141])], []),
    ]


@pytest.fixture(scope="module")
def runs():
    m = m41.ServedModel41(TINY, ServeRef(), num_blocks=12, device="cpu")
    ma = m41.ServedModel41(TINY, ServeRef(), num_blocks=12, device="cpu")
    alone_a = run_steps(
        ma,
        [([], [work(10, A_BT, 0, A[:181])]), ([], [work(10, A_BT, 181, A[181:260])])]
        + [([work(10, A_BT, 260 + i, A[260 + i : 261 + i])], []) for i in range(3)],
    )
    return m, run_steps(m, _mixed_steps()), alone_a


def test_mixed_schedule_equals_each_sequence_alone(runs):
    _, got, alone_a = runs
    for i in range(5):
        assert rel(got[(10, i)], alone_a[(10, i)]) < 1e-9
    mb = m41.ServedModel41(TINY, ServeRef(), num_blocks=12, device="cpu")
    alone_b = run_steps(
        mb,
        [
            ([], [work(20, [4], 0, B[:256])]),
            ([], [work(11, [4, 6], 256, B[256:277])]),
            ([work(11, [4, 6], 277, B[277:278])], []),
        ],
    )
    for mixed_i, alone_i in ((2, 1), (3, 2)):
        assert rel(got[(11, mixed_i)], alone_b[(11, alone_i)]) < 1e-6


def test_served_logits_equal_the_dense_reference(runs):
    m, got, _ = runs
    ref_b = dense_logits41(m, B)  # B's first block is A's: A's steps 0-1 wrote it
    assert rel(got[(11, 2)], ref_b[276]) < 1e-6  # end of B's chunk after the reused block
    assert rel(got[(11, 3)], ref_b[277]) < 1e-6
    assert rel(ref_b[276], ref_b[277]) > 0.1  # (positions differ: the check can fail)
    ref_c = dense_logits41(m, C)
    for step, p in ((2, 130), (3, 139), (4, 140)):  # a chunk ends mid-group (state across steps), decode
        assert rel(got[(12, step)], ref_c[p]) < 1e-6


def test_reindex_candidates_change_the_selection_at_tiny_shapes(runs):
    """With every block a candidate the logits at C's end differ (141 keys > 4 blocks x 8)."""
    _, got, _ = runs
    wide = m41.ServedModel41(replace(TINY, candidate_blocks=64), ServeRef(), num_blocks=12, device="cpu")
    assert rel(dense_logits41(wide, C)[140], got[(12, 4)]) > 1e-3


def test_candidate_mask_keeps_the_best_blocks_and_the_newest():
    s = torch.full((2, 40), float("-inf"))
    s[0, :37] = torch.arange(37.0)  # visible 37: blocks 0..4, block 4 (keys 32..36) is the newest
    s[0, 3] = 100.0  # block 0's maximum is the largest
    s[1, :20] = -torch.arange(20.0)  # visible 20: the newest block (2) has the lowest scores
    keep = m41.candidate_mask(s, torch.tensor([37, 20]), blocks=2, block_keys=8)
    assert keep[0, :8].all() and keep[0, 32:37].all() and not keep[0, 8:32].any()
    assert keep[1, 16:24].all() and keep[1, :8].all() and not keep[1, 8:16].any()
    assert m41.candidate_mask(s, torch.tensor([37, 20]), blocks=5, block_keys=8) is None
    sel = masked_topk(s.masked_fill(~keep, float("-inf")), 4)
    assert set(sel[0].tolist()) == {3, 36, 35, 34}


def test_layer_modes_own_what_the_spec_says():
    """Owners alone have compressed rows, index keys (and ratio 2 a pooling state); the pattern is the
    spec's (deepseek-v4.1-flash-mini.yaml) layer for layer."""
    from sim.model import load_model

    spec = load_model(m41.SPEC)
    m = m41.ServedModel41(TINY, ServeRef(), num_blocks=2, device="cpu")
    assert len(spec.layers) == len(TINY.layers)
    for i, (ls, lay, kv) in enumerate(zip(spec.layers, TINY.layers, m.kv, strict=True)):
        assert ls.ratio == lay.ratio and (ls.kv_source or None) == lay.kv_source
        assert (ls.selection if ls.ratio else "swa") == {"swa": "swa"}.get(lay.mode, lay.mode)
        assert (kv.comp is not None) == (lay.mode == "full") == ls.owns_kv
        assert (kv.state is not None) == (lay.mode == "full" and lay.ratio == 2)
        if lay.mode == "reuse":
            assert ls.selection_source == lay.selection_source
        assert ("index_q" in m.weights[i].w) == ls.has_index_query
    assert spec.moe.routed_experts == m41.DIMS.experts and spec.hidden == m41.DIMS.hidden
    assert spec.index.heads == m41.DIMS.index_heads and spec.index.candidates.source_layer == 3


def test_kv_bytes_per_block():
    cfg = m41.ServeConfig41()
    # 6 layers x 256 raw rows + the ratio-2 owner's 128 and the ratio-1 owner's 256 (rows + 132-B keys)
    assert m41.kv_bytes_per_block(cfg) == 6 * 256 * 585 + (128 + 256) * (585 + 132)


def test_bad_layer_pattern_is_refused():
    bad = (m41.Csa2Layer(0, "swa"), m41.Csa2Layer(2, "reuse", 0, 0))
    with pytest.raises(ValueError, match="kv_source"):
        m41.ServeConfig41(layers=bad)
    bad = (m41.Csa2Layer(2, "full", 0, 0), m41.Csa2Layer(2, "reindex", 0, 1))
    with pytest.raises(ValueError, match="ratio-1"):
        m41.ServeConfig41(layers=bad)


@pytest.mark.gpu
def test_production_served_model41_matches_reference_and_alone():
    """The GPU check of kernels_bench.serve.bench for the V4.1 mini (real shapes, 8 experts), graphed and
    eager, against the float64 reference and each sequence alone (criteria: bench.check_failures)."""
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

    res = bench.check(sys.stdout, spec=m41.SPEC)
    print({k: v for k, v in res.items() if k != "works"})
    if os.environ.get("SERVE_CHECK41_JSON"):  # the device call keeps the full result
        Path(os.environ["SERVE_CHECK41_JSON"]).write_text(json.dumps(res, indent=1) + "\n")
    assert not bench.check_failures(res)


def test_k_padding_leaves_a_blockwise_gemm_unchanged():
    """ServeGpu pads V4.1's K = 1280 / 2304 to a multiple of 512 for cuBLASLt; the padded operands give the
    same product (here through the float64 reference GEMM)."""
    from kernels_bench.serve.kernels import pad_act_k, pad_weight_k

    g = torch.Generator().manual_seed(0)
    x = torch.randn(5, 1280, generator=g, dtype=torch.float64)
    w = fw.quant_weight_blockwise((torch.randn(256, 1280, generator=g) / 36).to(torch.bfloat16))
    xq, xs = fw.act_quant_blockwise(x)
    ref = ServeRef()
    want = ref.gemm((xq, xs), w)
    got = ref.gemm(pad_act_k((xq, xs), 1536), pad_weight_k(w, 1536))
    assert got.shape == want.shape and torch.allclose(got, want, rtol=0, atol=1e-12)


def test_sim_times_the_v41_mini_with_its_own_served_table():
    """sim's calibrated H200 timing accepts deepseek-v4.1-flash-mini; its served term is fitted on the V4.1
    mini's own bench table (serve_step_times_<model>.csv), the V4 mini keeps serve_step_times.csv."""
    from kernels_bench.serve import predict
    from sim.timing.served import served_paths

    assert served_paths("h200", m41.SPEC)[0].name == f"serve_step_times_{m41.SPEC}.csv"
    assert served_paths("h200", predict.SPEC)[0].name == "serve_step_times.csv"
    tm = predict.mini_timing(spec=m41.SPEC)
    d1, d64 = (predict.predict_step_s(tm, b, 8192, 0, 0) for b in (1, 64))
    p512, p4096 = (predict.predict_step_s(tm, 0, 0, t, 0) for t in (512, 4096))
    assert 0 < d1 < d64 < 0.05 and 0 < p512 < p4096 < 0.5
    v4 = predict.mini_timing()
    assert predict.predict_step_s(tm, 32, 8192, 0, 0) > predict.predict_step_s(v4, 32, 8192, 0, 0)
