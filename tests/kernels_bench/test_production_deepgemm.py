"""DeepGEMM adapters (kernels_bench.production.deepgemm): the inputs each case builds (paged FP8 key cache,
causal key ranges, blockwise FP8 recipes, grouped layouts) and its float64 check, on the CPU against a
stand-in ``deep_gemm`` that follows the documented contracts; a stand-in that breaks a contract must fail
the check. The real kernels against the same checks on the GPU (``gpu``: skipped without DeepGEMM)."""

from __future__ import annotations

import sys
import types

import pytest
import torch

from kernels_bench import indexer
from kernels_bench.production import MissingPackage, require
from kernels_bench.production import deepgemm as D

TOL = D.TOL


def _paged_ref(q, cache, w, context_lens, block_table, _meta, max_context, *, scale=True):
    """fp8_paged_mqa_logits' contract: per block 64·128 FP8 keys then 64 fp32 scales; [B·next_n, max_context]."""
    B, nn = q.shape[:2]
    flat = cache.reshape(cache.shape[0], -1)
    out = torch.full((B * nn, max_context), float("nan"))
    for b in range(B):
        n = int(context_lens[b, 0])
        rows = flat[block_table[b].long()]
        k = rows[:, : D.BLOCK_KV * 128].contiguous().view(torch.float8_e4m3fn).float().reshape(-1, 128)
        s = rows[:, D.BLOCK_KV * 128 :].contiguous().view(torch.float32).reshape(-1)
        kd = (k * s[:, None] if scale else k)[:n]
        out[b * nn : (b + 1) * nn, :n] = indexer.indexer_logits_ref(
            q[b].float(), w[b * nn : (b + 1) * nn], kd[None]
        ).float()
    return out


def _mqa_ref(q, kv, w, ks, ke, clean_logits=True):
    k, s = kv
    vis = ke.long()
    out = indexer.indexer_logits_ref(q.float(), w, (k.float() * s[:, None])[None], visible=vis).float()
    j = torch.arange(out.shape[1])
    return out.masked_fill(j[None, :] < ks[:, None].long(), float("-inf"))


def _gemm_ref(a, b, d):
    d.copy_((D._deq_token(*a) @ D._deq_block(*b).T).to(d.dtype))


def _masked_ref(a, b, d, masked_m, expected_m):
    for g in range(d.shape[0]):
        m = int(masked_m[g])
        d[g, :m] = (D._deq_token(a[0][g, :m], a[1][g, :m]) @ D._deq_block(b[0][g], b[1][g]).T).to(d.dtype)


def _contiguous_ref(a, b, d, layout):
    x = D._deq_token(*a)
    for g in range(b[0].shape[0]):
        r = layout == g
        d[r] = (x[r] @ D._deq_block(b[0][g], b[1][g]).T).to(d.dtype)


def _hc_ref(a, b, d, s, num_splits=None):
    x = a.float()
    if num_splits:  # the partial sums of K-splits: split 0 holds everything, the others zeros
        d.zero_()
        s.zero_()
        d[0], s[0] = x @ b.T, x.square().sum(-1)
    else:
        d.copy_(x @ b.T)
        s.copy_(x.square().sum(-1))


@pytest.fixture()
def fake_dg(monkeypatch):
    m = types.SimpleNamespace(
        fp8_mqa_logits=_mqa_ref,
        fp8_paged_mqa_logits=_paged_ref,
        get_paged_mqa_logits_metadata=lambda cl, bk, sms: torch.zeros(sms + 1, 2, dtype=torch.int32),
        get_num_sms=lambda: 132,
        fp8_gemm_nt=_gemm_ref,
        m_grouped_fp8_gemm_nt_masked=_masked_ref,
        m_grouped_fp8_gemm_nt_contiguous=_contiguous_ref,
        tf32_hc_prenorm_gemm=_hc_ref,
        get_mk_alignment_for_contiguous_layout=lambda: 128,
    )
    monkeypatch.setitem(sys.modules, "deep_gemm", m)
    return m


def test_prefill_case_is_causal_over_compressed_keys(fake_dg):
    c = D.PrefillCase(64, 64, 256, 4, "cpu")
    assert c.n == (256 + 64) // 4
    # row t sees the keys of tokens <= Lp + t, compressed by 4
    assert c.ke.tolist() == [(256 + t + 1) // 4 for t in range(64)]
    assert c.check([0, 32, 63])[1] < 1e-6


def test_prefill_check_catches_a_kernel_that_drops_the_key_scales(fake_dg, monkeypatch):
    monkeypatch.setattr(
        fake_dg,
        "fp8_mqa_logits",
        lambda q, kv, *a, **k: _mqa_ref(q, (kv[0], torch.ones_like(kv[1])), *a, **k),
    )
    assert D.PrefillCase(32, 16, 128, 2, "cpu").check([0, 15])[1] > TOL


def test_paged_pool_layout_is_deepgemms(fake_dg):
    pool = D.PagedPool(12, "cpu")
    assert pool.cache.shape == (12, 64, 1, 132) and pool.cache.stride(1) == 132
    # block 3: 64·128 key bytes first, then 64 fp32 scales in [0.5, 1.5)
    s = pool.flat[3, 64 * 128 :].contiguous().view(torch.float32)
    assert ((s >= 0.5) & (s < 1.5)).all()
    keys = pool.keys(torch.tensor([3, 5]), 100)
    raw = pool.flat[3, :128].contiguous().view(torch.float8_e4m3fn).float()
    assert torch.equal(keys[0], raw * s[0])
    assert keys.shape == (100, 128)


def test_paged_case_checks_against_the_reference(fake_dg, monkeypatch):
    pool = D.PagedPool(40, "cpu")
    c = D.PagedCase(pool, 32, 3, 300, "cpu", seed=1)
    assert c.block_table.shape == (3, 5) and len(set(c.block_table.flatten().tolist())) == 15
    assert c.check([0, 2])[1] < 1e-6
    monkeypatch.setattr(fake_dg, "fp8_paged_mqa_logits", lambda *a: _paged_ref(*a, scale=False))
    assert c.check([0, 2])[1] > TOL


@pytest.mark.parametrize("next_n", D.SPEC_NEXT_N)
def test_paged_case_with_next_n_rows_checks_every_row(fake_dg, monkeypatch, next_n):
    pool = D.PagedPool(40, "cpu")
    c = D.PagedCase(pool, 32, 3, 300, "cpu", seed=1, next_n=next_n)
    assert c.q.shape == (3, next_n, 32, 128) and c.w.shape == (3 * next_n, 32)
    assert c.check([0, 2])[1] < 1e-6

    def first_row_only(q, *a):  # a kernel that scores every verify row with the first row's query
        return _paged_ref(q[:, :1].expand_as(q).contiguous(), *a)

    monkeypatch.setattr(fake_dg, "fp8_paged_mqa_logits", first_row_only)
    assert c.check([0, 2])[1] > TOL


def test_expanded_case_repeats_each_sequences_blocks_per_row(fake_dg):
    pool = D.PagedPool(40, "cpu")
    c = D.PagedCase(pool, 32, 3, 300, "cpu", seed=1, next_n=2)
    e = D.expanded(c, 32, "cpu")
    assert (e.B, e.next_n, e.n) == (6, 1, 300)
    assert torch.equal(e.block_table[2], c.block_table[1]) and torch.equal(e.block_table[3], c.block_table[1])
    assert e.check([0, 5])[1] < 1e-6


def test_fp8_recipes_round_trip():
    x = torch.randn(3, 256, 384)
    q, s = D._per_token_fp8(x)
    assert s.shape == (3, 256, 3) and q.dtype == torch.float8_e4m3fn
    assert ((D._deq_token(q, s) - x).norm() / x.norm()).item() < 0.05
    q, s = D._per_block_fp8(x)
    assert s.shape == (3, 2, 3)
    assert ((D._deq_block(q, s) - x).norm() / x.norm()).item() < 0.05


@pytest.mark.parametrize(
    "case,args,check_at",
    [
        (D.DenseCase, (8, 256, 384), [0, 7]),
        (D.MaskedCase, (3, 5, 256, 256), [0, 2]),
        (D.ContiguousCase, (3, 130, 256, 256), [0, 2]),
    ],
)
def test_gemm_cases_check_against_float64(fake_dg, case, args, check_at):
    c = case(*args, "cpu", 1)
    assert c.check(check_at)[1] < D.GEMM_TOL
    assert c.working_set() > 0


def test_contiguous_layout_pads_each_expert_to_the_alignment(fake_dg):
    c = D.ContiguousCase(3, 130, 256, 256, "cpu", 1)
    assert c.step == 256 and c.layout.shape == (768,)
    assert c.layout[:130].eq(0).all() and c.layout[130:256].eq(-1).all() and c.layout[256:386].eq(1).all()


def test_masked_check_catches_a_kernel_that_skips_the_weight_scales(fake_dg, monkeypatch):
    monkeypatch.setattr(
        fake_dg,
        "m_grouped_fp8_gemm_nt_masked",
        lambda a, b, *r: _masked_ref(a, (b[0], torch.ones_like(b[1])), *r),
    )
    assert D.MaskedCase(2, 4, 256, 256, "cpu", 1).check([0, 1])[1] > D.GEMM_TOL


@pytest.mark.parametrize("M", [5, 5000])
def test_prenorm_case_sums_the_splits(fake_dg, M):
    c = D.PrenormCase(M, 512, "cpu", 1)
    assert (c.splits is None) == (M > D.HC_SPLIT_MAX_M)
    assert c.check([0, M - 1])[1] < 1e-6


def test_wo_a_case_checks_the_grouped_product(fake_dg, monkeypatch):
    monkeypatch.setattr(
        fake_dg,
        "fp8_einsum",
        lambda expr, a, b, d: d.copy_(torch.einsum(expr, D._deq_token(*a), D._deq_block(*b)).to(d.dtype)),
        raising=False,
    )
    c = D.WoACase(3, "cpu", 1)
    assert c.d.shape == (3, D.WO_A_GROUPS, D.WO_A_OUT)
    assert c.check([0, 2])[1] < D.GEMM_TOL
    # a kernel that pairs each group's activations with group 0's weights fails the check
    monkeypatch.setattr(
        fake_dg,
        "fp8_einsum",
        lambda expr, a, b, d: d.copy_(
            torch.einsum(expr, D._deq_token(*a), D._deq_block(*b)[:1].expand_as(b[0])).to(d.dtype)
        ),
    )
    assert c.check([0, 2])[1] > D.GEMM_TOL


@pytest.mark.parametrize("T", [5, 5000])
def test_deepgemm_prenorm_partials_sum_to_the_product(fake_dg, T):
    """DgPrenorm's split partials (what mhc_pre_big_fuse_fwd sums with n_splits) hold x·fnᵀ and Σx²."""
    from kernels_bench.production import mhc_tk

    g = torch.Generator().manual_seed(2)
    fn = torch.randn(24, 512, generator=g)
    x = torch.randn(T, 512, generator=g).to(torch.bfloat16)
    pre = mhc_tk.DgPrenorm(T, fn, "cpu")
    assert pre.splits == (mhc_tk.PRENORM_SPLITS if T <= mhc_tk.PRENORM_SPLIT_MAX_T else 1)
    mul, sq = pre(x)
    assert mul.shape == (pre.splits, T, 24) and sq.shape == (pre.splits, T)
    xd = x.double()
    assert torch.allclose(mul.sum(0).double(), xd @ fn.double().T, rtol=1e-4, atol=1e-3)
    assert torch.allclose(sq.sum(0).double(), xd.square().sum(-1), rtol=1e-5)
    ref = mhc_tk.TorchPrenorm(T, fn, "cpu")(x)
    assert torch.allclose(ref[0].sum(0), mul.sum(0), rtol=2e-2, atol=0.3)


def test_warm_units_cover_every_family():
    units = D.warm_units()
    assert {u.split(":")[0] for u in units} == set(D.FAMILIES)
    assert len(units) == len(set(units))


def test_missing_deepgemm_says_how_to_build_it(monkeypatch):
    monkeypatch.setitem(sys.modules, "deep_gemm", None)
    with pytest.raises(MissingPackage, match="build_deepgemm.sh"):
        require("deep_gemm")


# ---- GPU: the real kernels (device machine, DeepGEMM built by build_deepgemm.sh) -----------------------


def _deepgemm_on_gpu() -> bool:
    if not torch.cuda.is_available():
        return False
    try:
        require("deep_gemm")
    except MissingPackage:
        return False
    return True


gpu_deepgemm = pytest.mark.skipif(
    not _deepgemm_on_gpu(), reason="needs a CUDA GPU and DeepGEMM (README, Kernels)"
)


@pytest.mark.gpu
@gpu_deepgemm
@pytest.mark.parametrize("heads", [32, 64])
def test_deepgemm_indexer_matches_reference(heads):
    assert D.PrefillCase(heads, 512, 4096, 4, "cuda").check([0, 255, 511])[1] < TOL
    pool = D.PagedPool(256, "cuda")
    assert D.PagedCase(pool, heads, 4, 3000, "cuda", seed=3).check([0, 3])[1] < TOL


@pytest.mark.gpu
@gpu_deepgemm
def test_deepgemm_gemms_match_reference():
    assert D.DenseCase(64, 1024, 2048, "cuda", 1).check([0, 63])[1] < D.GEMM_TOL
    assert D.MaskedCase(4, 16, 1024, 2048, "cuda", 1).check([0, 3])[1] < D.GEMM_TOL
    assert D.ContiguousCase(4, 300, 1024, 2048, "cuda", 1).check([0, 3])[1] < D.GEMM_TOL
    assert D.PrenormCase(64, 16384, "cuda", 1).check([0, 63])[1] < 1e-3


@pytest.mark.gpu
@gpu_deepgemm
@pytest.mark.parametrize("next_n", D.SPEC_NEXT_N)
def test_deepgemm_indexer_next_n_and_expanded_match_reference(next_n):
    """The verify-step indexer both ways engines call it: next_n rows per sequence (vLLM) and the same rows
    as sequences of one row over repeated block tables (SGLang)."""
    pool = D.PagedPool(256, "cuda")
    for heads in (32, 64):
        c = D.PagedCase(pool, heads, 3, 2000, "cuda", seed=5, next_n=next_n)
        assert D.expanded(c, heads, "cuda").check([0, 3 * next_n - 1])[1] < TOL
        if next_n <= D.SM90_MAX_NEXT_N:
            assert c.check([0, 2])[1] < TOL
        else:  # the SM90 kernel's limit, which the production stack's verify rows are built around
            with pytest.raises(RuntimeError, match="next_n == 1 or next_n == 2"):
                c.run()


@pytest.mark.gpu
@gpu_deepgemm
def test_deepgemm_wo_a_einsum_matches_reference():
    assert D.WoACase(40, "cuda", 1).check([0, 39])[1] < D.GEMM_TOL


@pytest.mark.gpu
@gpu_deepgemm
@pytest.mark.parametrize("T", [8, 5000])
def test_tile_kernels_mhc_with_deepgemm_prenorm_matches_reference(T):
    """The production boundary: TileKernels with DeepGEMM's pre-norm GEMM (split partials summed by
    mhc_pre_big_fuse_fwd at T <= 4096, one pass above), against the float64 reference."""
    pytest.importorskip("tile_kernels")
    from kernels_bench.production import mhc_tk
    from kernels_bench.production.families import _MhcCase

    p = mhc_tk.make_params(4096, device="cuda")
    case = _MhcCase(T, 4096, 1, "cuda", p)
    assert case.op.prenorm.splits == mhc_tk.prenorm_splits(T)
    got, want = case.check([0])
    assert ((got - want).norm() / want.norm()).item() < 2e-2
