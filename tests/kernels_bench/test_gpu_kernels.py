"""Triton kernels against their references at full shapes on the GPU (skipped without CUDA + Triton)."""

from __future__ import annotations

import math

import pytest
import torch

from kernels_bench import attention, formats, indexer, mhc, topk

pytestmark = pytest.mark.gpu


def _rel(a, b):
    return ((a.double() - b.double()).norm() / b.double().norm()).item()


@pytest.mark.parametrize("fmt,heads", [("fp8_132", 64), ("mxfp4_68", 32)])
def test_indexer_decode_full_shape(fmt, heads):
    from kernels_bench.indexer_triton import indexer_logits

    B, N = 4, 32768
    keys = formats.quant_rows(fmt, torch.randn(B * N, 128, device="cuda"))
    qc, qs, qd = indexer.quant_queries(fmt, torch.randn(B, heads, 128, device="cuda"))
    w = torch.rand(B, heads, device="cuda")
    out, _ = indexer_logits(fmt, qc, qs, w, keys, N)
    ref = indexer.indexer_logits_ref(qd, w, indexer.dequant_keys(fmt, keys).reshape(B, N, 128))
    assert _rel(out, ref) < 5e-3


@pytest.mark.parametrize("rows,n", [(1, 1 << 20), (64, 16384)])
def test_radix_topk_full_shape(rows, n):
    from kernels_bench.topk_triton import RadixTopK

    x = torch.randn(rows, n, device="cuda")
    assert topk.topk_values_match(x, RadixTopK(rows, n, 512, "cuda")(x), 512)


@pytest.mark.parametrize(
    "fa,fb,cfg",
    [
        ("fp8_584", "fp8_584", {}),
        ("fp8_528", "nvfp4_288", {}),
        ("bf16_1024", "bf16_1024", {}),
        ("fp8_584", "fp8_584", {"heads_per_program": 32, "block_n": 32}),
        ("fp8_584", "fp8_584", {"split_rope": True, "num_warps": 8}),
        ("fp8_528", "nvfp4_288", {"heads_per_program": 16, "dv_split": 2, "block_n": 32, "num_warps": 4}),
    ],
)
def test_sparse_mla_full_shape(fa, fb, cfg):
    from kernels_bench.attention_triton import SparseMLA

    Q = 64
    pa, pb = formats.random_rows(fa, 4096, device="cuda"), formats.random_rows(fb, 65536, device="cuda")
    ia = torch.randint(0, 4096, (Q, 128), device="cuda", dtype=torch.int32)
    ib = torch.randint(0, 65536, (Q, 512), device="cuda", dtype=torch.int32)
    q = (torch.randn(Q, 64, 512, device="cuda") * 0.5).bfloat16()
    sink = torch.randn(64, device="cuda")
    out = SparseMLA(Q, fa, 128, fb, 512, "cuda", **cfg)(q, pa, ia, pb, ib, sink)
    ref = attention.sparse_mla_ref_from_pools(q, sink, 1 / math.sqrt(512), [(fa, pa, ia), (fb, pb, ib)])
    assert _rel(out, ref) < 1e-2


@pytest.mark.parametrize(
    "fmt,variant",
    [("nvfp4_288", "v1"), ("nvfp4_288", "v2"), ("fp8_584", "v1"), ("fp8_528", "v1"), ("mxfp4_68", "v1")],
)
def test_quantize_on_write_bytes(fmt, variant):
    from kernels_bench.kvquant_triton import quantize_on_write

    # scaled rows reach every e2m1 tie and the saturating / minimum scales
    x = torch.randn(4093, formats.ROW_DIM[fmt], device="cuda")
    x = (x * torch.logspace(-4, 4, 4093, device="cuda")[:, None]).bfloat16()
    cache = torch.zeros(8192, formats.ROW_BYTES[fmt], dtype=torch.uint8, device="cuda")
    slots = torch.randperm(8192, device="cuda")[:4093]
    quantize_on_write(fmt, x, slots, cache, variant=variant)
    assert torch.equal(cache[slots], formats.quant_rows(fmt, x))


@pytest.mark.parametrize(
    "fused,cfg",
    [
        (True, {}),
        (False, {}),
        (True, {"variant": "v2", "bt": 32, "ns": 8}),
        (True, {"variant": "v2", "bh": 128}),
    ],
)
def test_mhc_boundary_full_shape(fused, cfg):
    from kernels_bench.mhc_triton import MhcBoundary

    T, H = 250, 5120  # T not a multiple of the token block: masked tails
    p = mhc.make_params(H, device="cuda")
    st = mhc.make_state(T, H, device="cuda")
    op = MhcBoundary(T, H, p, "cuda", **cfg)
    outs = op.fused(*st) if fused else op.unfused(*st)
    ref = mhc.mhc_boundary_ref(*st, p, shifted=fused)
    for got, want in zip(outs, ref, strict=True):
        assert _rel(got.reshape(want.shape), want) < 2e-2
