"""Triton mHC boundary: the fused single pass ("Mega-mHC" on Hopper) and the unfused 4-kernel sequence.

Fused v2 (``variant="v2"``, the tuned default): the single pass split over ``ns`` hidden slices so that
even T = 1 runs ``ns`` programs; each (token block, slice) program mixes and stores its slice of X', the
unnormalised collapse and its partial 24 mixes (bf16 MMA against a bf16 fnᵀ), Σ X'² and Σ h²; a light
second kernel sums the partials, computes gates and Sinkhorn, and RMS-scales the (L2-warm) collapsed rows.
The v1 description below is the original single-kernel pass.

Fused: one program owns ``BT`` tokens and walks the hidden dimension in chunks of ``BH``: it mixes the
streams (post), stores X', accumulates the 24 mixes with a TF32 MMA against the fp32 ``fn`` and the sums of
squares, and stores the collapsed (carried-pre) input; at the end it applies the gates, the 20 Sinkhorn
iterations and the RMSNorm (re-reading its own, L2-resident, output rows). Unfused: post, GEMM, epilogue
(gates + Sinkhorn + collapse) and RMSNorm kernels, the TileKernels-style sequence of kernels.md §5.1.

``fn`` is re-laid out once (``pack_fn``) as fnᵀ [4H, 32] with columns 0–15 comb, 16–19 pre, 20–23 post,
24–31 zero, so that MMA tiles are contiguous rows and a [BT, 32] mix tile splits into comb and (pre, post)
halves with reshapes alone.
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

from kernels_bench.mhc import NORM_EPS, SINKHORN_ITERS, MhcParams
from kernels_bench.tl_common import USE_ASM, dot_bf16


def pack_fn(params: MhcParams) -> tuple[torch.Tensor, torch.Tensor]:
    """fn [24, 4H] -> fnᵀ [4H, 32] (columns: comb 0–15, pre 16–19, post 20–23, zero 24–31), so that each MMA
    tile of fnᵀ is a run of contiguous 128-B rows; bias [24] -> [32] in the same order."""
    fn, b = params.fn.float(), params.bias.float()
    pad = torch.zeros(8, fn.shape[1], device=fn.device)
    fn_t = torch.cat([fn[8:24], fn[0:4], fn[4:8], pad]).t().contiguous()
    b32 = torch.cat([b[8:24], b[0:4], b[4:8], torch.zeros(8, device=b.device)]).contiguous()
    return fn_t, b32


@triton.jit
def _gate_vec(ptr, tok, tmask, stride: tl.constexpr, idx: tl.constexpr):
    return tl.load(ptr + tok * stride + idx, mask=tmask, other=0.0)[:, None]


@triton.jit
def _ld(x_ptr, tok, tmask, j: tl.constexpr, hh, H):
    return tl.load(x_ptr + (tok[:, None] * 4 + j) * H + hh[None, :], mask=tmask[:, None], other=0.0).to(
        tl.float32
    )


@triton.jit
def _mix_streams(x_ptr, y_ptr, comb_ptr, post_ptr, tok, tmask, hh, H):
    """X'_i = post_i·y + Σ_j comb[j, i]·X_j for i = 0..3, each [BT, BH] fp32 rounded through bf16."""
    x0 = _ld(x_ptr, tok, tmask, 0, hh, H)
    x1 = _ld(x_ptr, tok, tmask, 1, hh, H)
    x2 = _ld(x_ptr, tok, tmask, 2, hh, H)
    x3 = _ld(x_ptr, tok, tmask, 3, hh, H)
    y = tl.load(y_ptr + tok[:, None] * H + hh[None, :], mask=tmask[:, None], other=0.0).to(tl.float32)
    n0 = (
        _gate_vec(post_ptr, tok, tmask, 4, 0) * y
        + _gate_vec(comb_ptr, tok, tmask, 16, 0) * x0
        + _gate_vec(comb_ptr, tok, tmask, 16, 4) * x1
        + _gate_vec(comb_ptr, tok, tmask, 16, 8) * x2
        + _gate_vec(comb_ptr, tok, tmask, 16, 12) * x3
    )
    n1 = (
        _gate_vec(post_ptr, tok, tmask, 4, 1) * y
        + _gate_vec(comb_ptr, tok, tmask, 16, 1) * x0
        + _gate_vec(comb_ptr, tok, tmask, 16, 5) * x1
        + _gate_vec(comb_ptr, tok, tmask, 16, 9) * x2
        + _gate_vec(comb_ptr, tok, tmask, 16, 13) * x3
    )
    n2 = (
        _gate_vec(post_ptr, tok, tmask, 4, 2) * y
        + _gate_vec(comb_ptr, tok, tmask, 16, 2) * x0
        + _gate_vec(comb_ptr, tok, tmask, 16, 6) * x1
        + _gate_vec(comb_ptr, tok, tmask, 16, 10) * x2
        + _gate_vec(comb_ptr, tok, tmask, 16, 14) * x3
    )
    n3 = (
        _gate_vec(post_ptr, tok, tmask, 4, 3) * y
        + _gate_vec(comb_ptr, tok, tmask, 16, 3) * x0
        + _gate_vec(comb_ptr, tok, tmask, 16, 7) * x1
        + _gate_vec(comb_ptr, tok, tmask, 16, 11) * x2
        + _gate_vec(comb_ptr, tok, tmask, 16, 15) * x3
    )
    b = tl.bfloat16
    return (
        n0.to(b).to(tl.float32),
        n1.to(b).to(tl.float32),
        n2.to(b).to(tl.float32),
        n3.to(b).to(tl.float32),
    )


@triton.jit
def _mix_streams_g(
    x_ptr,
    y_ptr,
    tok,
    tmask,
    hh,
    H,
    q0,
    q1,
    q2,
    q3,
    c0,
    c1,
    c2,
    c3,
    c4,
    c5,
    c6,
    c7,
    c8,
    c9,
    c10,
    c11,
    c12,
    c13,
    c14,
    c15,
):
    """``_mix_streams`` with the gates (post q_i, comb c_{4j+i}) loaded once by the caller, outside its loop."""
    x0 = _ld(x_ptr, tok, tmask, 0, hh, H)
    x1 = _ld(x_ptr, tok, tmask, 1, hh, H)
    x2 = _ld(x_ptr, tok, tmask, 2, hh, H)
    x3 = _ld(x_ptr, tok, tmask, 3, hh, H)
    y = tl.load(y_ptr + tok[:, None] * H + hh[None, :], mask=tmask[:, None], other=0.0).to(tl.float32)
    b = tl.bfloat16
    n0 = (q0 * y + c0 * x0 + c4 * x1 + c8 * x2 + c12 * x3).to(b).to(tl.float32)
    n1 = (q1 * y + c1 * x0 + c5 * x1 + c9 * x2 + c13 * x3).to(b).to(tl.float32)
    n2 = (q2 * y + c2 * x0 + c6 * x1 + c10 * x2 + c14 * x3).to(b).to(tl.float32)
    n3 = (q3 * y + c3 * x0 + c7 * x1 + c11 * x2 + c15 * x3).to(b).to(tl.float32)
    return n0, n1, n2, n3


@triton.jit
def _st(xn_ptr, tok, tmask, j: tl.constexpr, hh, H, v):
    tl.store(xn_ptr + (tok[:, None] * 4 + j) * H + hh[None, :], v.to(tl.bfloat16), mask=tmask[:, None])


@triton.jit
def _fn_dot(mix, v, fn_ptr, j: tl.constexpr, hh, H, NATIVE: tl.constexpr):
    """mix += X'_j [BT, BH] @ fnᵀ[j·H + hh, 0:32] (TF32 MMA)."""
    f = tl.load(fn_ptr + (j * H + hh)[:, None] * 32 + tl.arange(0, 32)[None, :])
    if NATIVE:
        return mix + tl.dot(v, f, input_precision="tf32")
    return mix + tl.dot(v, f)


@triton.jit
def _gates(
    mix, sumsq, bias_ptr, H, a_pre, a_post, a_comb, BT: tl.constexpr, ITERS: tl.constexpr, EPS: tl.constexpr
):
    """[BT, 32] raw mixes -> pre [BT, 4], post [BT, 4], comb [BT, 16] (Sinkhorn-normalised)."""
    r = 1.0 / tl.sqrt(sumsq / (4 * H) + EPS)
    comb_raw, rest = tl.split(tl.permute((mix * r[:, None]).reshape(BT, 2, 16), (0, 2, 1)))
    c16 = tl.arange(0, 16)
    rest = tl.where(c16 < 4, a_pre, a_post)[None, :] * rest + tl.load(bias_ptr + 16 + c16)[None, :]
    rest3 = rest.reshape(BT, 4, 4)
    row = tl.arange(0, 4)[None, :, None]
    pre = tl.sigmoid(tl.sum(tl.where(row == 0, rest3, 0.0), axis=1))
    post = 2.0 * tl.sigmoid(tl.sum(tl.where(row == 1, rest3, 0.0), axis=1))
    lg = (a_comb * comb_raw + tl.load(bias_ptr + c16)[None, :]).reshape(BT, 4, 4)
    mx = tl.max(tl.max(lg, axis=2), axis=1)
    m = tl.exp(lg - mx[:, None, None])
    for _ in tl.static_range(ITERS):
        m = m / tl.sum(m, axis=2)[:, :, None]
        m = m / tl.sum(m, axis=1)[:, None, :]
    return pre, post, m.reshape(BT, 16)


@triton.jit
def _store_gates(pre_o, post_o, comb_o, tok, tmask, pre, post, comb):
    s = tl.arange(0, 4)
    tl.store(pre_o + tok[:, None] * 4 + s[None, :], pre, mask=tmask[:, None])
    tl.store(post_o + tok[:, None] * 4 + s[None, :], post, mask=tmask[:, None])
    tl.store(comb_o + tok[:, None] * 16 + tl.arange(0, 16)[None, :], comb, mask=tmask[:, None])


@triton.jit
def _rmsnorm_rows(out_ptr, gamma_ptr, tok, tmask, hsq, H, BH: tl.constexpr, EPS: tl.constexpr):
    """Scale the stored (unnormalised, bf16) rows by rsqrt(mean(h²) + eps)·γ in place."""
    rr = 1.0 / tl.sqrt(hsq / H + EPS)
    for c0 in range(0, H, BH):
        hh = c0 + tl.arange(0, BH)
        p = out_ptr + tok[:, None] * H + hh[None, :]
        v = tl.load(p, mask=tmask[:, None], other=0.0).to(tl.float32)
        g = tl.load(gamma_ptr + hh)
        tl.store(p, (v * rr[:, None] * g[None, :]).to(tl.bfloat16), mask=tmask[:, None])


@triton.jit
def _mhc_fused_kernel(
    x_ptr,
    y_ptr,
    pre_ptr,
    post_ptr,
    comb_ptr,
    fn_ptr,
    bias_ptr,
    gamma_ptr,
    xn_ptr,
    out_ptr,
    pre_o,
    post_o,
    comb_o,
    T,
    H,
    a_pre,
    a_post,
    a_comb,
    BT: tl.constexpr,
    BH: tl.constexpr,
    ITERS: tl.constexpr,
    EPS: tl.constexpr,
    NATIVE: tl.constexpr,
):
    tok = tl.program_id(0) * BT + tl.arange(0, BT)
    tmask = tok < T
    tok = tok.to(tl.int64)
    mix = tl.zeros([BT, 32], dtype=tl.float32)
    sumsq = tl.zeros([BT], dtype=tl.float32)
    hsq = tl.zeros([BT], dtype=tl.float32)
    p0 = _gate_vec(pre_ptr, tok, tmask, 4, 0)
    p1 = _gate_vec(pre_ptr, tok, tmask, 4, 1)
    p2 = _gate_vec(pre_ptr, tok, tmask, 4, 2)
    p3 = _gate_vec(pre_ptr, tok, tmask, 4, 3)
    for c0 in range(0, H, BH):
        hh = c0 + tl.arange(0, BH)
        n0, n1, n2, n3 = _mix_streams(x_ptr, y_ptr, comb_ptr, post_ptr, tok, tmask, hh, H)
        _st(xn_ptr, tok, tmask, 0, hh, H, n0)
        _st(xn_ptr, tok, tmask, 1, hh, H, n1)
        _st(xn_ptr, tok, tmask, 2, hh, H, n2)
        _st(xn_ptr, tok, tmask, 3, hh, H, n3)
        sumsq += tl.sum(n0 * n0 + n1 * n1 + n2 * n2 + n3 * n3, axis=1)
        mix = _fn_dot(mix, n0, fn_ptr, 0, hh, H, NATIVE)
        mix = _fn_dot(mix, n1, fn_ptr, 1, hh, H, NATIVE)
        mix = _fn_dot(mix, n2, fn_ptr, 2, hh, H, NATIVE)
        mix = _fn_dot(mix, n3, fn_ptr, 3, hh, H, NATIVE)
        hrow = (p0 * n0 + p1 * n1 + p2 * n2 + p3 * n3).to(tl.bfloat16)
        hf = hrow.to(tl.float32)
        hsq += tl.sum(hf * hf, axis=1)
        tl.store(out_ptr + tok[:, None] * H + hh[None, :], hrow, mask=tmask[:, None])
    pre, post, comb = _gates(mix, sumsq, bias_ptr, H, a_pre, a_post, a_comb, BT, ITERS, EPS)
    _store_gates(pre_o, post_o, comb_o, tok, tmask, pre, post, comb)
    _rmsnorm_rows(out_ptr, gamma_ptr, tok, tmask, hsq, H, BH, EPS)


@triton.jit
def _fn_dot_bf16(mix, v, fnb_ptr, j: tl.constexpr, hh, H, NATIVE: tl.constexpr):
    """mix += X'_j [BT, BH] @ fnᵀ[j·H + hh, 0:32] as a bf16 MMA (X' is already bf16-exact)."""
    f = tl.load(fnb_ptr + (j * H + hh)[:, None] * 32 + tl.arange(0, 32)[None, :])
    return mix + dot_bf16(v.to(tl.bfloat16), f, NATIVE)


@triton.jit
def _mhc_split_kernel(
    x_ptr,
    y_ptr,
    pre_ptr,
    post_ptr,
    comb_ptr,
    fnb_ptr,
    xn_ptr,
    out_ptr,
    part_ptr,
    T,
    H,
    HS: tl.constexpr,
    BT: tl.constexpr,
    BH: tl.constexpr,
    NATIVE: tl.constexpr,
):
    """Pass 1 of the split fused boundary: program (token block, hidden slice) mixes its slice of the
    streams, stores X' and the unnormalised collapse, and writes its partial 24 mixes, Σ X'² and Σ h²."""
    tok = tl.program_id(0) * BT + tl.arange(0, BT)
    tmask = tok < T
    tok = tok.to(tl.int64)
    sp = tl.program_id(1)
    mix = tl.zeros([BT, 32], dtype=tl.float32)
    sumsq = tl.zeros([BT], dtype=tl.float32)
    hsq = tl.zeros([BT], dtype=tl.float32)
    p0 = _gate_vec(pre_ptr, tok, tmask, 4, 0)
    p1 = _gate_vec(pre_ptr, tok, tmask, 4, 1)
    p2 = _gate_vec(pre_ptr, tok, tmask, 4, 2)
    p3 = _gate_vec(pre_ptr, tok, tmask, 4, 3)
    q0 = _gate_vec(post_ptr, tok, tmask, 4, 0)
    q1 = _gate_vec(post_ptr, tok, tmask, 4, 1)
    q2 = _gate_vec(post_ptr, tok, tmask, 4, 2)
    q3 = _gate_vec(post_ptr, tok, tmask, 4, 3)
    c0 = _gate_vec(comb_ptr, tok, tmask, 16, 0)
    c1 = _gate_vec(comb_ptr, tok, tmask, 16, 1)
    c2 = _gate_vec(comb_ptr, tok, tmask, 16, 2)
    c3 = _gate_vec(comb_ptr, tok, tmask, 16, 3)
    c4 = _gate_vec(comb_ptr, tok, tmask, 16, 4)
    c5 = _gate_vec(comb_ptr, tok, tmask, 16, 5)
    c6 = _gate_vec(comb_ptr, tok, tmask, 16, 6)
    c7 = _gate_vec(comb_ptr, tok, tmask, 16, 7)
    c8 = _gate_vec(comb_ptr, tok, tmask, 16, 8)
    c9 = _gate_vec(comb_ptr, tok, tmask, 16, 9)
    c10 = _gate_vec(comb_ptr, tok, tmask, 16, 10)
    c11 = _gate_vec(comb_ptr, tok, tmask, 16, 11)
    c12 = _gate_vec(comb_ptr, tok, tmask, 16, 12)
    c13 = _gate_vec(comb_ptr, tok, tmask, 16, 13)
    c14 = _gate_vec(comb_ptr, tok, tmask, 16, 14)
    c15 = _gate_vec(comb_ptr, tok, tmask, 16, 15)
    for c in range(0, HS, BH):
        hh = sp * HS + c + tl.arange(0, BH)
        n0, n1, n2, n3 = _mix_streams_g(
            x_ptr,
            y_ptr,
            tok,
            tmask,
            hh,
            H,
            q0,
            q1,
            q2,
            q3,
            c0,
            c1,
            c2,
            c3,
            c4,
            c5,
            c6,
            c7,
            c8,
            c9,
            c10,
            c11,
            c12,
            c13,
            c14,
            c15,
        )
        _st(xn_ptr, tok, tmask, 0, hh, H, n0)
        _st(xn_ptr, tok, tmask, 1, hh, H, n1)
        _st(xn_ptr, tok, tmask, 2, hh, H, n2)
        _st(xn_ptr, tok, tmask, 3, hh, H, n3)
        sumsq += tl.sum(n0 * n0 + n1 * n1 + n2 * n2 + n3 * n3, axis=1)
        mix = _fn_dot_bf16(mix, n0, fnb_ptr, 0, hh, H, NATIVE)
        mix = _fn_dot_bf16(mix, n1, fnb_ptr, 1, hh, H, NATIVE)
        mix = _fn_dot_bf16(mix, n2, fnb_ptr, 2, hh, H, NATIVE)
        mix = _fn_dot_bf16(mix, n3, fnb_ptr, 3, hh, H, NATIVE)
        hrow = (p0 * n0 + p1 * n1 + p2 * n2 + p3 * n3).to(tl.bfloat16)
        hf = hrow.to(tl.float32)
        hsq += tl.sum(hf * hf, axis=1)
        tl.store(out_ptr + tok[:, None] * H + hh[None, :], hrow, mask=tmask[:, None])
    prow = (sp * T + tok) * 34  # per (slice, token): 32 mixes, Σ X'², Σ h²
    tl.store(part_ptr + prow[:, None] + tl.arange(0, 32)[None, :], mix, mask=tmask[:, None])
    tl.store(part_ptr + prow + 32, sumsq, mask=tmask)
    tl.store(part_ptr + prow + 33, hsq, mask=tmask)


@triton.jit
def _mhc_finish_kernel(
    part_ptr,
    bias_ptr,
    gamma_ptr,
    out_ptr,
    pre_o,
    post_o,
    comb_o,
    T,
    H,
    a_pre,
    a_post,
    a_comb,
    NS: tl.constexpr,
    BT: tl.constexpr,
    BHN: tl.constexpr,
    ITERS: tl.constexpr,
    EPS: tl.constexpr,
):
    """Pass 2: sum the slices' partials; program (token block, hidden slice) RMS-scales its slice of the
    (L2-warm) collapsed rows; the programs of slice 0 also compute the gates and the Sinkhorn."""
    tok = tl.program_id(0) * BT + tl.arange(0, BT)
    tmask = tok < T
    tok = tok.to(tl.int64)
    hsq = tl.zeros([BT], dtype=tl.float32)
    for sp in tl.static_range(NS):
        hsq += tl.load(part_ptr + (sp * T + tok) * 34 + 33, mask=tmask, other=1.0)
    rr = 1.0 / tl.sqrt(hsq / H + EPS)
    hh = tl.program_id(1) * BHN + tl.arange(0, BHN)
    p = out_ptr + tok[:, None] * H + hh[None, :]
    v = tl.load(p, mask=tmask[:, None], other=0.0).to(tl.float32)
    g = tl.load(gamma_ptr + hh)
    tl.store(p, (v * rr[:, None] * g[None, :]).to(tl.bfloat16), mask=tmask[:, None])
    if tl.program_id(1) == 0:
        mix = tl.zeros([BT, 32], dtype=tl.float32)
        sumsq = tl.zeros([BT], dtype=tl.float32)
        for sp in tl.static_range(NS):
            prow = (sp * T + tok) * 34
            mix += tl.load(
                part_ptr + prow[:, None] + tl.arange(0, 32)[None, :], mask=tmask[:, None], other=0.0
            )
            sumsq += tl.load(part_ptr + prow + 32, mask=tmask, other=1.0)
        pre, post, comb = _gates(mix, sumsq, bias_ptr, H, a_pre, a_post, a_comb, BT, ITERS, EPS)
        _store_gates(pre_o, post_o, comb_o, tok, tmask, pre, post, comb)


@triton.jit
def _mhc_post_kernel(x_ptr, y_ptr, post_ptr, comb_ptr, xn_ptr, T, H, BT: tl.constexpr, BH: tl.constexpr):
    tok = tl.program_id(0) * BT + tl.arange(0, BT)
    tmask = tok < T
    tok = tok.to(tl.int64)
    hh = tl.program_id(1) * BH + tl.arange(0, BH)
    n0, n1, n2, n3 = _mix_streams(x_ptr, y_ptr, comb_ptr, post_ptr, tok, tmask, hh, H)
    _st(xn_ptr, tok, tmask, 0, hh, H, n0)
    _st(xn_ptr, tok, tmask, 1, hh, H, n1)
    _st(xn_ptr, tok, tmask, 2, hh, H, n2)
    _st(xn_ptr, tok, tmask, 3, hh, H, n3)


@triton.jit
def _mhc_gemm_kernel(
    xn_ptr, fn_ptr, mix_ptr, sumsq_ptr, T, H, BT: tl.constexpr, BH: tl.constexpr, NATIVE: tl.constexpr
):
    tok = tl.program_id(0) * BT + tl.arange(0, BT)
    tmask = tok < T
    tok = tok.to(tl.int64)
    mix = tl.zeros([BT, 32], dtype=tl.float32)
    sumsq = tl.zeros([BT], dtype=tl.float32)
    for c0 in range(0, H, BH):
        hh = c0 + tl.arange(0, BH)
        v0 = _ld(xn_ptr, tok, tmask, 0, hh, H)
        v1 = _ld(xn_ptr, tok, tmask, 1, hh, H)
        v2 = _ld(xn_ptr, tok, tmask, 2, hh, H)
        v3 = _ld(xn_ptr, tok, tmask, 3, hh, H)
        sumsq += tl.sum(v0 * v0 + v1 * v1 + v2 * v2 + v3 * v3, axis=1)
        mix = _fn_dot(mix, v0, fn_ptr, 0, hh, H, NATIVE)
        mix = _fn_dot(mix, v1, fn_ptr, 1, hh, H, NATIVE)
        mix = _fn_dot(mix, v2, fn_ptr, 2, hh, H, NATIVE)
        mix = _fn_dot(mix, v3, fn_ptr, 3, hh, H, NATIVE)
    tl.store(mix_ptr + tok[:, None] * 32 + tl.arange(0, 32)[None, :], mix, mask=tmask[:, None])
    tl.store(sumsq_ptr + tok, sumsq, mask=tmask)


@triton.jit
def _mhc_epilogue_kernel(
    xn_ptr,
    mix_ptr,
    sumsq_ptr,
    bias_ptr,
    h_ptr,
    pre_o,
    post_o,
    comb_o,
    T,
    H,
    a_pre,
    a_post,
    a_comb,
    BT: tl.constexpr,
    BH: tl.constexpr,
    ITERS: tl.constexpr,
    EPS: tl.constexpr,
):
    tok = tl.program_id(0) * BT + tl.arange(0, BT)
    tmask = tok < T
    tok = tok.to(tl.int64)
    mix = tl.load(mix_ptr + tok[:, None] * 32 + tl.arange(0, 32)[None, :], mask=tmask[:, None], other=0.0)
    sumsq = tl.load(sumsq_ptr + tok, mask=tmask, other=1.0)
    pre, post, comb = _gates(mix, sumsq, bias_ptr, H, a_pre, a_post, a_comb, BT, ITERS, EPS)
    _store_gates(pre_o, post_o, comb_o, tok, tmask, pre, post, comb)
    s = tl.arange(0, 4)[None, :]
    p0 = tl.sum(tl.where(s == 0, pre, 0.0), axis=1)[:, None]
    p1 = tl.sum(tl.where(s == 1, pre, 0.0), axis=1)[:, None]
    p2 = tl.sum(tl.where(s == 2, pre, 0.0), axis=1)[:, None]
    p3 = tl.sum(tl.where(s == 3, pre, 0.0), axis=1)[:, None]
    for c0 in range(0, H, BH):
        hh = c0 + tl.arange(0, BH)
        hrow = (
            p0 * _ld(xn_ptr, tok, tmask, 0, hh, H)
            + p1 * _ld(xn_ptr, tok, tmask, 1, hh, H)
            + p2 * _ld(xn_ptr, tok, tmask, 2, hh, H)
            + p3 * _ld(xn_ptr, tok, tmask, 3, hh, H)
        )
        tl.store(h_ptr + tok[:, None] * H + hh[None, :], hrow.to(tl.bfloat16), mask=tmask[:, None])


@triton.jit
def _rmsnorm_kernel(h_ptr, gamma_ptr, out_ptr, H, BH: tl.constexpr, EPS: tl.constexpr):
    t = tl.program_id(0).to(tl.int64)
    acc = tl.zeros([BH], dtype=tl.float32)
    for c0 in range(0, H, BH):
        v = tl.load(h_ptr + t * H + c0 + tl.arange(0, BH)).to(tl.float32)
        acc += v * v
    rr = 1.0 / tl.sqrt(tl.sum(acc, 0) / H + EPS)
    for c0 in range(0, H, BH):
        hh = c0 + tl.arange(0, BH)
        v = tl.load(h_ptr + t * H + hh).to(tl.float32)
        tl.store(out_ptr + t * H + hh, (v * rr * tl.load(gamma_ptr + hh)).to(tl.bfloat16))


class MhcBoundary:
    """Preallocated outputs for T tokens × hidden H; ``fused(...)`` / ``unfused(...)`` run one boundary.

    Both return (X' bf16 [T, 4, H], layer input bf16 [T, H], pre' [T, 4], post' [T, 4], comb' [T, 4, 4]).
    """

    def __init__(
        self,
        tokens: int,
        hidden: int,
        params: MhcParams,
        device,
        bt: int = 16,
        bh: int = 64,
        num_warps: int = 4,
        variant: str = "v1",
        ns: int = 4,
        bhn: int = 512,
        bt2: int = 16,
    ):
        self.t, self.h = tokens, hidden
        self.bt, self.bh, self.num_warps = bt, bh, num_warps
        self.variant, self.ns, self.bhn, self.bt2 = variant, ns, bhn, bt2
        self.fn32, self.b32 = pack_fn(params)
        if variant == "v2":
            assert hidden % (ns * bh) == 0 and hidden % bhn == 0
            self.fnb = self.fn32.to(torch.bfloat16)
            self.part = torch.empty(ns * tokens * 34, dtype=torch.float32, device=device)
        self.gamma = params.gamma.float().contiguous()
        self.alpha = params.alpha
        f32 = torch.float32
        self.xn = torch.empty(tokens, 4, hidden, dtype=torch.bfloat16, device=device)
        self.out = torch.empty(tokens, hidden, dtype=torch.bfloat16, device=device)
        self.hbuf = torch.empty(tokens, hidden, dtype=torch.bfloat16, device=device)
        self.pre = torch.empty(tokens, 4, dtype=f32, device=device)
        self.post = torch.empty(tokens, 4, dtype=f32, device=device)
        self.comb = torch.empty(tokens, 4, 4, dtype=f32, device=device)
        self.mix = torch.empty(tokens, 32, dtype=f32, device=device)
        self.sumsq = torch.empty(tokens, dtype=f32, device=device)

    def _outs(self):
        return self.xn, self.out, self.pre, self.post, self.comb

    def fused(self, x, y, pre, post, comb):
        if self.variant == "v2":
            return self._fused_split(x, y, pre, post, comb)
        grid = (triton.cdiv(self.t, self.bt),)
        _mhc_fused_kernel[grid](
            x,
            y,
            pre,
            post,
            comb,
            self.fn32,
            self.b32,
            self.gamma,
            self.xn,
            self.out,
            self.pre,
            self.post,
            self.comb,
            self.t,
            self.h,
            *self.alpha,
            BT=self.bt,
            BH=self.bh,
            ITERS=SINKHORN_ITERS,
            EPS=NORM_EPS,
            NATIVE=USE_ASM,
            num_warps=self.num_warps,
        )
        return self._outs()

    def _fused_split(self, x, y, pre, post, comb):
        """The single pass split over ``ns`` hidden slices (many programs even at small T) plus a light
        finishing kernel: bf16 MMA against fnᵀ, X and y read once, X' written once."""
        _mhc_split_kernel[(triton.cdiv(self.t, self.bt), self.ns)](
            x,
            y,
            pre,
            post,
            comb,
            self.fnb,
            self.xn,
            self.out,
            self.part,
            self.t,
            self.h,
            HS=self.h // self.ns,
            BT=self.bt,
            BH=self.bh,
            NATIVE=USE_ASM,
            num_warps=self.num_warps,
        )
        _mhc_finish_kernel[(triton.cdiv(self.t, self.bt2), self.h // self.bhn)](
            self.part,
            self.b32,
            self.gamma,
            self.out,
            self.pre,
            self.post,
            self.comb,
            self.t,
            self.h,
            *self.alpha,
            NS=self.ns,
            BT=self.bt2,
            BHN=self.bhn,
            ITERS=SINKHORN_ITERS,
            EPS=NORM_EPS,
            num_warps=4,
        )
        return self._outs()

    def unfused(self, x, y, pre, post, comb):
        nt = triton.cdiv(self.t, self.bt)
        _mhc_post_kernel[(nt, self.h // 256)](
            x, y, post, comb, self.xn, self.t, self.h, BT=self.bt, BH=256, num_warps=4
        )
        _mhc_gemm_kernel[(nt,)](
            self.xn,
            self.fn32,
            self.mix,
            self.sumsq,
            self.t,
            self.h,
            BT=self.bt,
            BH=self.bh,
            NATIVE=USE_ASM,
            num_warps=self.num_warps,
        )
        _mhc_epilogue_kernel[(nt,)](
            self.xn,
            self.mix,
            self.sumsq,
            self.b32,
            self.hbuf,
            self.pre,
            self.post,
            self.comb,
            self.t,
            self.h,
            *self.alpha,
            BT=self.bt,
            BH=self.bh,
            ITERS=SINKHORN_ITERS,
            EPS=NORM_EPS,
            num_warps=self.num_warps,
        )
        _rmsnorm_kernel[(self.t,)](
            self.hbuf, self.gamma, self.out, self.h, BH=min(1024, self.h), EPS=NORM_EPS, num_warps=4
        )
        return self._outs()
