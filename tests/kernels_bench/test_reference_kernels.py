"""References of the indexer, top-k, sparse attention and mHC (the CPU halves of the Triton kernels)."""

from __future__ import annotations

import math

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from kernels_bench import attention, formats, indexer, mhc, topk


def test_indexer_reference_matches_explicit_sum():
    g = torch.Generator().manual_seed(0)
    q, w, k = (
        torch.randn(2, 4, 128, generator=g),
        torch.rand(2, 4, generator=g),
        torch.randn(2, 9, 128, generator=g),
    )
    got = indexer.indexer_logits_ref(q, w, k)
    for b in range(2):
        for j in range(9):
            want = sum(w[b, h] * max(float(q[b, h] @ k[b, j]), 0.0) for h in range(4))
            assert got[b, j].item() == pytest.approx(float(want), rel=1e-6, abs=1e-6)


def test_indexer_causal_mask_and_block_max():
    g = torch.Generator().manual_seed(1)
    q, w, k = (
        torch.randn(3, 2, 128, generator=g),
        torch.rand(3, 2, generator=g),
        torch.randn(1, 20, 128, generator=g),
    )
    out = indexer.indexer_logits_ref(q, w, k, visible=torch.tensor([5, 12, 20]))
    assert torch.isinf(out[0, 5:]).all() and torch.isfinite(out[0, :5]).all()
    bm = indexer.block_max_ref(out.float(), 8)
    assert bm.shape == (3, 3) and torch.isinf(bm[:, 2]).all() and bm[:, 2].gt(0).all()  # newest block kept


def test_mxfp4_queries_dequantise_consistently():
    q = torch.randn(2, 3, 128)
    codes, scales, deq = indexer.quant_queries("mxfp4_68", q)
    vals = codes.float().reshape(2, 3, 4, 32) * scales[..., None]
    assert torch.equal(vals.reshape(2, 3, 128), deq)


def test_reindex_rows():
    bt = torch.tensor([[3, 0]])
    assert indexer.reindex_rows(bt, 8).tolist() == [[24, 25, 26, 27, 28, 29, 30, 31, 0, 1, 2, 3, 4, 5, 6, 7]]


@pytest.mark.parametrize("kind", ["randn", "ties", "negative", "neg_inf", "constant"])
def test_radix_topk_selects_torch_topk_values(kind):
    g = torch.Generator().manual_seed(2)
    x = torch.randn(3, 3000, generator=g)
    if kind == "ties":
        x = x.round()
    elif kind == "negative":
        x = -x.abs() - 10
    elif kind == "neg_inf":
        x[:, 100:] = float("-inf")
    elif kind == "constant":
        x = torch.ones(3, 3000)
    idx = topk.radix_topk(x, 512)
    assert topk.topk_values_match(x, idx, 512)


@settings(max_examples=25, deadline=None)
@given(st.integers(1, 200), st.integers(1, 4), st.integers(0, 2**16))
def test_radix_topk_property(n, rows, seed):
    x = torch.randn(rows, n, generator=torch.Generator().manual_seed(seed)).mul(4).round()
    k = 1 + seed % n
    assert topk.topk_values_match(x, topk.radix_topk(x, k), k)


def test_topk_values_match_rejects_duplicates():
    x = torch.arange(10.0)[None]
    assert not topk.topk_values_match(x, torch.tensor([[9, 9]]), 2)
    assert topk.topk_values_match(x, torch.tensor([[8, 9]]), 2)


def test_float_keys_preserve_order():
    x = torch.tensor([float("-inf"), -2.0, -0.5, 0.0, 1e-30, 0.5, 3.0, float("inf")])
    keys = topk.float_to_ordered_key(x)
    assert torch.all(keys[1:] > keys[:-1])


def test_sparse_mla_reference_softmax_with_sink():
    g = torch.Generator().manual_seed(3)
    q, kv, sink = (
        torch.randn(1, 2, 512, generator=g),
        torch.randn(1, 5, 512, generator=g),
        torch.randn(2, generator=g),
    )
    out = attention.sparse_mla_ref(q, kv, sink, 0.1)
    for h in range(2):
        s = (q[0, h].double() @ kv[0].double().T) * 0.1
        p = torch.exp(s) / (torch.exp(s).sum() + math.exp(float(sink[h])))
        assert torch.allclose(out[0, h], p @ kv[0].double(), rtol=1e-10, atol=1e-12)
    no_sink = attention.sparse_mla_ref(q, kv, torch.full((2,), float("-inf")), 0.1)
    assert torch.allclose(
        no_sink.sum(0), (torch.softmax(q[0].double() @ kv[0].double().T * 0.1, -1) @ kv[0].double())
    )


def test_sparse_mla_from_pools_gathers_dequantised_rows():
    pool = formats.random_rows("nvfp4_288", 10, generator=torch.Generator().manual_seed(4))
    idx = torch.tensor([[3, 7]])
    got = attention.gather_dequant("nvfp4_288", pool, idx)
    assert torch.equal(got[0, 1], formats.dequant_nvfp4_288(pool[7:8])[0])


def test_sinkhorn_is_doubly_stochastic():
    m = mhc.sinkhorn(torch.randn(7, 4, 4, dtype=torch.float64, generator=torch.Generator().manual_seed(6)))
    assert torch.allclose(m.sum(-2), torch.ones(7, 4, dtype=torch.float64), atol=1e-12)
    assert torch.allclose(m.sum(-1), torch.ones(7, 4, dtype=torch.float64), atol=1e-2)  # 20 iterations


def test_mhc_boundary_reference_identities():
    g = torch.Generator().manual_seed(5)
    p = mhc.make_params(64, generator=g)
    x, y, pre, post, comb = mhc.make_state(3, 64, generator=g)
    eye = torch.eye(4).expand(3, 4, 4)
    xn, out, *_ = mhc.mhc_boundary_ref(x, y, pre, torch.zeros(3, 4), eye, p, shifted=True)
    assert torch.equal(xn, x)  # comb = I, post = 0: the streams pass through
    a = mhc.mhc_boundary_ref(x, y, pre, post, comb, p, shifted=True)
    b = mhc.mhc_boundary_ref(x, y, pre, post, comb, p, shifted=False)
    assert torch.equal(a[0], b[0]) and all(torch.equal(u, v) for u, v in zip(a[2:], b[2:], strict=True))
    assert not torch.equal(a[1], b[1])  # only the collapse uses the carried (shifted) pre-mix
    rms = a[1].double().div(p.gamma.double()).pow(2).mean(-1).sqrt()
    assert torch.allclose(rms, torch.ones(3, dtype=torch.float64), atol=2e-2)
