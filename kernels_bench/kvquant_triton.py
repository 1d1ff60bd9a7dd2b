"""Triton quantise-on-write of KV rows and index keys into their cache slots, and bulk dequantisation.

Each program quantises ``BLOCK_R`` bf16 rows and writes the byte-exact rows of ``formats`` at
``cache + slot·row_bytes``. Divisions use round-to-nearest (``div_rn``) so the bytes match the PyTorch
reference exactly; divisions by power-of-two scales are exact multiplications.
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

from kernels_bench import formats
from kernels_bench.tl_common import ue8m0_to_f32


@triton.jit
def _e2m1_encode(y):
    """Nearest e2m1 code (ties to even, saturating) of y; uint8 0..15."""
    a = tl.abs(y)
    mag = (
        (a > 0.25).to(tl.uint8)
        + (a >= 0.75).to(tl.uint8)
        + (a > 1.25).to(tl.uint8)
        + (a >= 1.75).to(tl.uint8)
        + (a > 2.5).to(tl.uint8)
        + (a >= 3.5).to(tl.uint8)
        + (a > 5.0).to(tl.uint8)
    )
    return mag | ((y < 0).to(tl.uint8) << 3)


@triton.jit
def _e2m1_encode_scaled(x, s):
    """e2m1 codes of the exact quotient x / s via exact scaled thresholds (formats.e2m1_encode_scaled)."""
    a = tl.abs(x)
    mag = (
        (a > 0.25 * s).to(tl.uint8)
        + (a >= 0.75 * s).to(tl.uint8)
        + (a > 1.25 * s).to(tl.uint8)
        + (a >= 1.75 * s).to(tl.uint8)
        + (a > 2.5 * s).to(tl.uint8)
        + (a >= 3.5 * s).to(tl.uint8)
        + (a > 5.0 * s).to(tl.uint8)
    )
    return mag | ((x < 0).to(tl.uint8) << 3)


@triton.jit
def _ue8m0_ceil(amax, qmax: tl.constexpr):
    """Biased exponent of the smallest power of two >= amax / qmax (clamped to [1, 254])."""
    y = tl.math.div_rn(tl.maximum(amax, 1e-30), qmax)
    bits = y.to(tl.int32, bitcast=True)
    e = ((bits >> 23) & 0xFF) + ((bits & 0x7FFFFF) != 0).to(tl.int32)
    return tl.minimum(tl.maximum(e, 1), 254)


@triton.jit
def _pack_pairs(codes, BR: tl.constexpr, NPAIR: tl.constexpr):
    lo, hi = tl.split(codes.reshape(BR, NPAIR, 2))
    return lo | (hi << 4)


@triton.jit
def _quant_kernel(x_ptr, slot_ptr, cache_ptr, R, FMT: tl.constexpr, BR: tl.constexpr):
    pid = tl.program_id(0)
    offs_r = pid * BR + tl.arange(0, BR)
    rmask = offs_r < R
    slot = tl.load(slot_ptr + offs_r, mask=rmask, other=0).to(tl.int64)
    if FMT == 0:  # nvfp4_288
        c = tl.arange(0, 512)
        x = tl.load(x_ptr + offs_r[:, None].to(tl.int64) * 512 + c[None, :], mask=rmask[:, None], other=0.0)
        xg = x.to(tl.float32).reshape(BR, 32, 16)
        amax = tl.maximum(tl.max(tl.abs(xg), axis=2), 0.01171875)  # 6·2^-9 (kernels.md §4.1)
        s8 = tl.minimum(tl.math.div_rn(amax, 6.0), 448.0).to(tl.float8e4nv)
        s = s8.to(tl.float32)
        codes = _e2m1_encode_scaled(xg, s[:, :, None]).reshape(BR, 512)
        packed = _pack_pairs(codes, BR, 256)
        base = cache_ptr + slot * 288
        tl.store(base[:, None] + tl.arange(0, 256)[None, :], packed, mask=rmask[:, None])
        tl.store(
            base[:, None] + 256 + tl.arange(0, 32)[None, :],
            s8.to(tl.uint8, bitcast=True),
            mask=rmask[:, None],
        )
    elif FMT == 1:  # fp8_584
        c = tl.arange(0, 512)
        x = tl.load(x_ptr + offs_r[:, None].to(tl.int64) * 512 + c[None, :], mask=rmask[:, None], other=0.0)
        xg = x.to(tl.float32).reshape(BR, 8, 64)
        e = _ue8m0_ceil(tl.max(tl.abs(xg), axis=2), 448.0)
        inv = ((254 - e) << 23).to(tl.float32, bitcast=True)  # 2^(127 - e), exact reciprocal of the scale
        codes = (xg * inv[:, :, None]).reshape(BR, 512).to(tl.float8e4nv).to(tl.uint8, bitcast=True)
        base = cache_ptr + slot * 584
        is_nope = c < 448
        tl.store(base[:, None] + c[None, :], codes, mask=rmask[:, None] & is_nope[None, :])
        rptr = (base + 448).to(tl.pointer_type(tl.bfloat16))
        tl.store(rptr[:, None] + (c - 448)[None, :], x, mask=rmask[:, None] & (c >= 448)[None, :])
        g = tl.arange(0, 8)
        sbytes = tl.where(g[None, :] < 7, e, 0).to(tl.uint8)  # byte 583 is the zero pad
        tl.store(base[:, None] + 576 + g[None, :], sbytes, mask=rmask[:, None])
    elif FMT == 2:  # fp8_528
        c = tl.arange(0, 512)
        x = tl.load(x_ptr + offs_r[:, None].to(tl.int64) * 512 + c[None, :], mask=rmask[:, None], other=0.0)
        xg = x.to(tl.float32).reshape(BR, 16, 32)
        e = _ue8m0_ceil(tl.max(tl.abs(xg), axis=2), 448.0)
        inv = ((254 - e) << 23).to(tl.float32, bitcast=True)
        codes = (xg * inv[:, :, None]).reshape(BR, 512).to(tl.float8e4nv).to(tl.uint8, bitcast=True)
        base = cache_ptr + slot * 528
        tl.store(base[:, None] + c[None, :], codes, mask=rmask[:, None])
        tl.store(base[:, None] + 512 + tl.arange(0, 16)[None, :], e.to(tl.uint8), mask=rmask[:, None])
    elif FMT == 3:  # mxfp4_68
        c = tl.arange(0, 128)
        x = tl.load(x_ptr + offs_r[:, None].to(tl.int64) * 128 + c[None, :], mask=rmask[:, None], other=0.0)
        xg = x.to(tl.float32).reshape(BR, 4, 32)
        e = _ue8m0_ceil(tl.max(tl.abs(xg), axis=2), 6.0)
        inv = ((254 - e) << 23).to(tl.float32, bitcast=True)
        codes = _e2m1_encode(xg * inv[:, :, None]).reshape(BR, 128)
        base = cache_ptr + slot * 68
        tl.store(base[:, None] + tl.arange(0, 64)[None, :], _pack_pairs(codes, BR, 64), mask=rmask[:, None])
        tl.store(base[:, None] + 64 + tl.arange(0, 4)[None, :], e.to(tl.uint8), mask=rmask[:, None])
    else:  # fp8_132
        c = tl.arange(0, 128)
        x = tl.load(x_ptr + offs_r[:, None].to(tl.int64) * 128 + c[None, :], mask=rmask[:, None], other=0.0)
        xf = x.to(tl.float32)
        scale = tl.maximum(tl.math.div_rn(tl.max(tl.abs(xf), axis=1), 448.0), 1e-30)
        codes = tl.math.div_rn(xf, scale[:, None]).to(tl.float8e4nv).to(tl.uint8, bitcast=True)
        base = cache_ptr + slot * 132
        tl.store(base[:, None] + c[None, :], codes, mask=rmask[:, None])
        tl.store((base + 128).to(tl.pointer_type(tl.float32)), scale, mask=rmask)


@triton.jit
def _nvfp4_v2_kernel(x_ptr, slot_ptr, cache_ptr, R, BR: tl.constexpr):
    """NVFP4 rows, ALU-lean: each 16-channel group is the last axis of a [BR, 32, 16] block (amax in a
    thread pair), codes are int32 (no 8-bit arithmetic), and 8 codes are packed into one 32-bit word by a
    shift-and-sum over a [BR, 64, 8] view, so each row is stored as 64 + 8 aligned words (288 = 4 · 72)."""
    pid = tl.program_id(0)
    offs_r = pid * BR + tl.arange(0, BR)
    rmask = offs_r < R
    slot = tl.load(slot_ptr + offs_r, mask=rmask, other=0).to(tl.int64)
    g = tl.arange(0, 32)
    e = tl.arange(0, 16)
    ptr = x_ptr + offs_r.to(tl.int64)[:, None, None] * 512 + (g * 16)[None, :, None] + e[None, None, :]
    x = tl.load(ptr, mask=rmask[:, None, None], other=0.0).to(tl.float32)
    a = tl.abs(x)
    amax = tl.maximum(tl.max(a, axis=2), 0.01171875)  # 6·2^-9 (kernels.md §4.1)
    s8 = tl.minimum(tl.math.div_rn(amax, 6.0), 448.0).to(tl.float8e4nv)
    s = s8.to(tl.float32)[:, :, None]
    # exact scaled thresholds (formats.e2m1_encode_scaled): '>' where the lower code is even, '>=' else
    mag = (
        (a > 0.25 * s).to(tl.int32)
        + (a >= 0.75 * s).to(tl.int32)
        + (a > 1.25 * s).to(tl.int32)
        + (a >= 1.75 * s).to(tl.int32)
        + (a > 2.5 * s).to(tl.int32)
        + (a >= 3.5 * s).to(tl.int32)
        + (a > 5.0 * s).to(tl.int32)
    )
    codes = mag | ((x < 0).to(tl.int32) << 3)
    # little-endian words: channel 8w + i sits at bits 4i..4i+3 (low nibble = even channel)
    words = tl.sum(codes.reshape(BR, 64, 8) << (tl.arange(0, 8) * 4)[None, None, :], axis=2)
    base = cache_ptr.to(tl.pointer_type(tl.int32)) + slot * 72
    tl.store(base[:, None] + tl.arange(0, 64)[None, :], words, mask=rmask[:, None])
    sb = s8.to(tl.uint8, bitcast=True).to(tl.int32).reshape(BR, 8, 4)
    sw = tl.sum(sb << (tl.arange(0, 4) * 8)[None, None, :], axis=2)
    tl.store(base[:, None] + 64 + tl.arange(0, 8)[None, :], sw, mask=rmask[:, None])


QUANT_FMT_ID = {"nvfp4_288": 0, "fp8_584": 1, "fp8_528": 2, "mxfp4_68": 3, "fp8_132": 4}


def quantize_on_write(
    fmt: str,
    x: torch.Tensor,
    slots: torch.Tensor,
    cache: torch.Tensor,
    block_r: int = 16,
    *,
    variant: str = "v1",
    num_warps: int = 4,
):
    """Quantise bf16 rows x [R, dim] into ``cache`` (uint8 [S, row_bytes]) at rows ``slots`` [R].

    ``variant="v2"`` (NVFP4 only) runs the ALU-lean kernel; both write the same bytes.
    """
    r = x.shape[0]
    assert x.dtype == torch.bfloat16 and x.shape[1] == formats.ROW_DIM[fmt]
    assert cache.shape[1] == formats.ROW_BYTES[fmt] and cache.dtype == torch.uint8
    grid = (triton.cdiv(r, block_r),)
    if variant == "v2" and fmt == "nvfp4_288":
        _nvfp4_v2_kernel[grid](x, slots, cache, r, BR=block_r, num_warps=num_warps)
    else:
        _quant_kernel[grid](x, slots, cache, r, FMT=QUANT_FMT_ID[fmt], BR=block_r, num_warps=num_warps)
    return cache


@triton.jit
def _dequant_kernel(rows_ptr, out_ptr, R, FMT: tl.constexpr, BR: tl.constexpr):
    pid = tl.program_id(0)
    offs_r = pid * BR + tl.arange(0, BR)
    rmask = offs_r < R
    r64 = offs_r.to(tl.int64)
    c = tl.arange(0, 512)
    if FMT == 0:  # nvfp4_288 -> bf16
        b = tl.load(rows_ptr + r64[:, None] * 288 + tl.arange(0, 256)[None, :], mask=rmask[:, None], other=0)
        lo = ((b & 8) << 4) | ((b & 7) << 2)
        hi = (b & 0x80) | ((b >> 2) & 0x1C)
        v = tl.join(lo.to(tl.uint8), hi.to(tl.uint8)).reshape(BR, 512).to(tl.float8e4nv, bitcast=True)
        sc = tl.load(
            rows_ptr + r64[:, None] * 288 + 256 + tl.arange(0, 32)[None, :], mask=rmask[:, None], other=0
        )
        sc = sc.to(tl.float8e4nv, bitcast=True).to(tl.float32) * 64.0
        val = (v.to(tl.float32).reshape(BR, 32, 16) * sc[:, :, None]).reshape(BR, 512)
    else:  # fp8_584 -> bf16
        base = rows_ptr + r64 * 584
        is_nope = c < 448
        codes = tl.load(base[:, None] + c[None, :], mask=rmask[:, None] & is_nope[None, :], other=0)
        g = tl.arange(0, 8)
        sexp = tl.load(base[:, None] + 576 + g[None, :], mask=rmask[:, None] & (g < 7)[None, :], other=127)
        nope = codes.to(tl.float8e4nv, bitcast=True).to(tl.float32).reshape(BR, 8, 64)
        nope = (nope * ue8m0_to_f32(sexp)[:, :, None]).reshape(BR, 512)
        rptr = (base + 448).to(tl.pointer_type(tl.bfloat16))
        rope = tl.load(
            rptr[:, None] + (c - 448)[None, :], mask=rmask[:, None] & (c >= 448)[None, :], other=0.0
        )
        val = tl.where(is_nope[None, :], nope, rope.to(tl.float32))
    tl.store(out_ptr + r64[:, None] * 512 + c[None, :], val.to(tl.bfloat16), mask=rmask[:, None])


DEQUANT_FMT_ID = {"nvfp4_288": 0, "fp8_584": 1}


def bulk_dequant(fmt: str, rows: torch.Tensor, out: torch.Tensor | None = None, block_r: int = 16):
    """[R, row_bytes] rows -> bf16 [R, 512] (the 'staged' dequantise-then-attend path of kernels.md §4.1)."""
    r = rows.shape[0]
    if out is None:
        out = torch.empty(r, 512, dtype=torch.bfloat16, device=rows.device)
    _dequant_kernel[(triton.cdiv(r, block_r),)](
        rows, out, r, FMT=DEQUANT_FMT_ID[fmt], BR=block_r, num_warps=4
    )
    return out
