"""Production-stack adapters: FlashMLA cache layouts, the TileKernels mHC reference, the missing-package
message (CPU), and the production kernels against the references on the GPU (``gpu``: skipped without CUDA)."""

from __future__ import annotations

import math

import pytest
import torch

from kernels_bench import attention, formats
from kernels_bench.production import MissingPackage, mhc_tk, require
from kernels_bench.production import flashmla_layout as fl
from kernels_bench.production.attention import sparse_mla_ref_qkv


def _g(seed=0):
    g = torch.Generator()
    g.manual_seed(seed)
    return g


@pytest.mark.parametrize("n,block", [(64, 64), (100, 64), (7, 4)])
def test_model1_paged_round_trip_and_placement(n, block):
    rows = formats.random_rows("fp8_584", n, generator=_g())
    paged = fl.model1_paged(rows, block)
    nb = -(-n // block)
    assert paged.shape == (nb, block, 1, 584)
    assert paged.stride(1) == 584
    if nb > 1:  # a size-1 dimension may carry any stride
        assert paged.stride(0) == fl.model1_block_stride(block)
    assert fl.model1_block_stride(block) % 576 == 0
    assert torch.equal(fl.model1_rows(paged)[:n], rows)
    # token 1's scales sit after every token's 576 data bytes, not after its own data (FlashMLA quant.py)
    flat = torch.as_strided(paged, (nb, block * 584), (paged.stride(0), 1))
    assert torch.equal(flat[0, block * 576 + 8 : block * 576 + 16], rows[1, 576:584])
    assert torch.equal(flat[0, 576 : 2 * 576], rows[1, :576])


def test_model1_dequant_matches_project_rows():
    rows = formats.random_rows("fp8_584", 130, generator=_g(1))
    got = fl.dequant_model1_paged(fl.model1_paged(rows, 64))[:130]
    assert torch.equal(got, formats.dequant_rows("fp8_584", rows))


def test_per_token_rows_read_as_model1_give_nan():
    """The §9a NaN: our per-token rows handed over as the MODEL1 cache put data bytes where scales belong."""
    x = torch.randn(64, 512, generator=_g(2))
    rows = formats.quant_rows("fp8_584", x)
    # finite bf16 RoPE values whose low byte is 0xFF (bits 0x3FFF = 1.99); 0xFF read as UE8M0 is NaN
    rows[:, 448:576] = torch.full((64, 64), 0x3FFF, dtype=torch.int16).view(torch.uint8)
    assert torch.isfinite(formats.dequant_rows("fp8_584", rows)).all()
    wrong = rows.view(1, 64, 1, 584)  # per-token rows, no re-layout
    assert not torch.isfinite(fl.dequant_model1_paged(wrong)).all()
    assert torch.isfinite(fl.dequant_model1_paged(fl.model1_paged(rows, 64))).all()


def test_v32_quant_error_and_layout():
    x = torch.randn(256, 576, generator=_g(3))
    rows = fl.quant_v32_656(x)
    assert rows.shape == (256, 656) and rows.dtype == torch.uint8
    y = fl.dequant_v32_656(rows)
    assert torch.equal(y[:, 512:], x[:, 512:].to(torch.bfloat16).float())
    rel = ((y[:, :512] - x[:, :512]).norm() / x[:, :512].norm()).item()
    assert rel < 0.05
    scales = rows[:, 512:528].contiguous().view(torch.float32)
    assert torch.equal(scales, torch.pow(2.0, scales.log2().round()))  # powers of two
    assert fl.v32_paged(rows, 64).shape == (4, 64, 1, 656)


def test_qkv_reference_reduces_to_project_reference():
    g = _g(4)
    q = torch.randn(3, 64, 512, generator=g)
    kv = torch.randn(3, 40, 512, generator=g)
    sink = torch.randn(64, generator=g)
    a = sparse_mla_ref_qkv(q, kv, sink, 1 / math.sqrt(512))
    b = attention.sparse_mla_ref(q, kv, sink, 1 / math.sqrt(512))
    assert torch.allclose(a, b)
    out = sparse_mla_ref_qkv(
        torch.randn(2, 64, 576, generator=g), torch.randn(2, 9, 576, generator=g), sink, 0.04
    )
    assert out.shape == (2, 64, 512)


def test_tk_sinkhorn_is_doubly_stochastic():
    m = mhc_tk.sinkhorn_tk(torch.randn(5, 4, 4, generator=_g(5), dtype=torch.float64))
    assert torch.allclose(m.sum(-2), torch.ones(5, 4, dtype=torch.float64), atol=1e-5)
    assert torch.allclose(m.sum(-1), torch.ones(5, 4, dtype=torch.float64), atol=1e-3)


def test_tk_boundary_reference_shapes_and_post_mix():
    H = 64
    p = mhc_tk.make_params(H, generator=_g(6))
    x = torch.randn(3, 4, H, generator=_g(7)).bfloat16()
    y = torch.randn(3, H, generator=_g(8)).bfloat16()
    post = torch.rand(3, 4, generator=_g(9))
    comb = torch.eye(4).expand(3, 4, 4)
    xn, out, post_n, comb_n = mhc_tk.boundary_ref(x, y, post, comb, p)
    want = (post[:, :, None].double() * y.double()[:, None, :] + x.double()).bfloat16()
    assert torch.equal(xn, want)
    assert out.shape == (3, H) and post_n.shape == (3, 4) and comb_n.shape == (3, 4, 4)
    assert ((post_n > 0) & (post_n < mhc_tk.POST_MULT)).all()


def test_missing_package_says_what_to_install(monkeypatch):
    import sys

    monkeypatch.setitem(sys.modules, "flash_mla", None)  # makes the import fail, installed or not
    with pytest.raises(MissingPackage, match="pip install --no-deps sgl-flash-mla==1.0.0"):
        require("flash_mla")


# ---- GPU: the production kernels against the references (device machine only) -------------------------


def _have(name):
    try:
        require(name)
    except MissingPackage:
        return False
    return True


@pytest.mark.gpu
@pytest.mark.parametrize("B,nb,dense", [(2, 512, False), (3, 0, False), (2, 256, True)])
def test_flashmla_v4_decode_matches_reference(B, nb, dense):
    if not _have("flash_mla"):
        pytest.skip("sgl-flash-mla not installed")
    from kernels_bench.production.attention import FlashDecodeCase

    got, ref = FlashDecodeCase(B, 128, nb, 1, "cuda", dense_b=dense).check(list(range(B)))
    assert torch.isfinite(got).all()
    assert ((got.double() - ref).norm() / ref.norm()).item() < 1e-2


@pytest.mark.gpu
@pytest.mark.parametrize("s_q,nb,dense", [(2, 512, False), (4, 512, False), (4, 0, False), (2, 64, True)])
def test_flashmla_v4_verify_rows_match_reference(s_q, nb, dense):
    """Speculative verify steps: s_q query rows per sequence, each with its own window and top-k."""
    if not _have("flash_mla"):
        pytest.skip("sgl-flash-mla not installed")
    from kernels_bench.production.attention import FlashDecodeCase

    case = FlashDecodeCase(3, 128, nb, 4, "cuda", dense_b=dense, s_q=s_q)
    assert torch.equal(case.idx_a[:, 1, :-1], case.idx_a[:, 0, 1:])  # row 1's window: row 0's, one on
    got, ref = case.check([0, 2])
    assert got.shape[0] == 2 * s_q and torch.isfinite(got).all()
    assert ((got.double() - ref).norm() / ref.norm()).item() < 1e-2


@pytest.mark.gpu
def test_flashmla_v32_decode_and_prefill_match_reference():
    if not _have("flash_mla"):
        pytest.skip("sgl-flash-mla not installed")
    from kernels_bench.production.attention import FlashDecodeCase, FlashPrefillCase

    for case in (FlashDecodeCase(2, 640, 0, 2, "cuda", fmt="fp8_656"), FlashPrefillCase(128, 640, 3, "cuda")):
        got, ref = case.check([0, 1])
        assert ((got.double() - ref).norm() / ref.norm()).item() < 1e-2


@pytest.mark.gpu
def test_tile_kernels_mhc_matches_reference():
    if not _have("tile_kernels"):
        pytest.skip("tile-kernels not installed")
    from kernels_bench.production.families import _MhcCase

    p = mhc_tk.make_params(4096, device="cuda")
    got, want = _MhcCase(8, 4096, 1, "cuda", p).check([0])
    assert ((got - want).norm() / want.norm()).item() < 2e-2


@pytest.mark.gpu
def test_flashmla_with_per_token_rows_is_wrong():
    """The §9a NaN on the hardware: the same rows without the MODEL1 re-layout do not give the reference."""
    if not _have("flash_mla"):
        pytest.skip("sgl-flash-mla not installed")
    from kernels_bench.production.attention import FlashDecodeCase

    case = FlashDecodeCase(2, 128, 512, 5, "cuda")
    n = case.rows_a.shape[0] // 64 * 64
    case.cache_a = case.rows_a[:n].reshape(n // 64, 64, 1, 584)  # per-token rows handed over as they are
    case.idx_a.clamp_(max=n - 1)
    got, ref = case.check([0, 1])
    rel = ((got.double() - ref).norm() / ref.norm()).item()
    assert not (rel < 1e-2)  # NaN or a large error
