"""Triton lightning-indexer scoring for V4 (FP8 keys, 64 heads) and V4.1 (MXFP4 keys, 32 heads).

One program scores ``BLOCK_N`` keys for ``BQ`` query rows (decode: 1 row with its own key cache; prefill: a
block of rows of one sequence sharing the keys, with a causal limit). Keys are read once per program as the
byte-exact rows of ``formats`` and fed to FP8 MMAs: FP8 keys directly; MXFP4 keys after an exact bit
placement of e2m1 into e4m3 (value·2⁻⁶), one MMA per 32-channel scale group. Optional epilogues: the
block-of-8 max for V4.1 layer 20 (newest block forced to +inf) and a Reindex mode that reads the
candidate keys through a block table.
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

from kernels_bench import formats
from kernels_bench.tl_common import USE_ASM, ue8m0_to_f32, unpack_fp4_placed

FMT_ID = {"fp8_132": 0, "mxfp4_68": 1}


@triton.jit
def _indexer_kernel(
    q_ptr,  # [NQ, H, 128] e4m3 codes
    qs_ptr,  # [NQ, H, 4] fp32 per-group query scales (MXFP4 path)
    w_ptr,  # [NQ, H] fp32 head weights
    k_ptr,  # uint8 key rows
    blk_ptr,  # int32 [NSEQ, NB] block table (REINDEX)
    out_ptr,  # fp32 [NQ, N] logits
    bmax_ptr,  # fp32 [NQ, N // 8] block maxima (BLOCK_MAX)
    N,  # keys scored per query row
    q_per_seq,  # query rows per sequence (decode 1, prefill T)
    rows_per_seq,  # key rows per sequence in the cache (0: one shared cache)
    nb_tab,  # columns of the block table
    visible_base,  # causal: row r sees keys j < (visible_base + r + 1) // RATIO
    H: tl.constexpr,
    BLOCK_N: tl.constexpr,
    BQ: tl.constexpr,
    FMT: tl.constexpr,
    REINDEX: tl.constexpr,
    CAUSAL: tl.constexpr,
    RATIO: tl.constexpr,
    BLOCK_MAX: tl.constexpr,
    USE_ASM_: tl.constexpr,
):
    pid_n = tl.program_id(0)
    pid_q = tl.program_id(1)
    q0 = pid_q * BQ
    seq = q0 // q_per_seq
    offs_n = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
    valid = offs_n < N
    if REINDEX:
        blk = tl.load(blk_ptr + seq.to(tl.int64) * nb_tab + offs_n // 8, mask=valid, other=0)
        row = blk.to(tl.int64) * 8 + (offs_n % 8)
    else:
        row = offs_n.to(tl.int64)
    row = row + seq.to(tl.int64) * rows_per_seq
    offs_h = tl.arange(0, H)
    if FMT == 0:
        base = k_ptr + row * 132
        kt = tl.load(base[:, None] + tl.arange(0, 128)[None, :], mask=valid[:, None], other=0)
        kt = kt.to(tl.float8e4nv, bitcast=True)
        kscale = tl.load((base + 128).to(tl.pointer_type(tl.float32)), mask=valid, other=0.0)
    else:
        base = k_ptr + row * 68
        kexp = tl.load(base[:, None] + 64 + tl.arange(0, 4)[None, :], mask=valid[:, None], other=127)
        kscale4 = ue8m0_to_f32(kexp) * 64.0  # undo the 2^-6 of the placed e4m3 codes
        offs_b = tl.arange(0, 16)
        kg0 = tl.load(base[:, None] + offs_b[None, :], mask=valid[:, None], other=0)
        kg1 = tl.load(base[:, None] + 16 + offs_b[None, :], mask=valid[:, None], other=0)
        kg2 = tl.load(base[:, None] + 32 + offs_b[None, :], mask=valid[:, None], other=0)
        kg3 = tl.load(base[:, None] + 48 + offs_b[None, :], mask=valid[:, None], other=0)
        lo, hi = unpack_fp4_placed(kg0, USE_ASM_)
        k0 = tl.join(lo, hi).reshape(BLOCK_N, 32).to(tl.float8e4nv, bitcast=True)
        lo, hi = unpack_fp4_placed(kg1, USE_ASM_)
        k1 = tl.join(lo, hi).reshape(BLOCK_N, 32).to(tl.float8e4nv, bitcast=True)
        lo, hi = unpack_fp4_placed(kg2, USE_ASM_)
        k2 = tl.join(lo, hi).reshape(BLOCK_N, 32).to(tl.float8e4nv, bitcast=True)
        lo, hi = unpack_fp4_placed(kg3, USE_ASM_)
        k3 = tl.join(lo, hi).reshape(BLOCK_N, 32).to(tl.float8e4nv, bitcast=True)
        col = tl.arange(0, 4)[None, :]
        ks0 = tl.sum(tl.where(col == 0, kscale4, 0.0), axis=1)
        ks1 = tl.sum(tl.where(col == 1, kscale4, 0.0), axis=1)
        ks2 = tl.sum(tl.where(col == 2, kscale4, 0.0), axis=1)
        ks3 = tl.sum(tl.where(col == 3, kscale4, 0.0), axis=1)
    for qi in tl.static_range(BQ):
        r = (q0 + qi).to(tl.int64)
        qrow = q_ptr + r * H * 128 + offs_h[:, None] * 128
        w = tl.load(w_ptr + r * H + offs_h)
        if FMT == 0:
            qt = tl.load(qrow + tl.arange(0, 128)[None, :])
            s = tl.dot(kt, tl.trans(qt))  # [BLOCK_N, H]
            s = s * kscale[:, None]
        else:
            offs_c = tl.arange(0, 32)[None, :]
            qsrow = qs_ptr + r * H * 4 + offs_h * 4
            q0t = tl.load(qrow + offs_c)
            s = tl.dot(k0, tl.trans(q0t)) * ks0[:, None] * tl.load(qsrow)[None, :]
            q1t = tl.load(qrow + 32 + offs_c)
            s += tl.dot(k1, tl.trans(q1t)) * ks1[:, None] * tl.load(qsrow + 1)[None, :]
            q2t = tl.load(qrow + 64 + offs_c)
            s += tl.dot(k2, tl.trans(q2t)) * ks2[:, None] * tl.load(qsrow + 2)[None, :]
            q3t = tl.load(qrow + 96 + offs_c)
            s += tl.dot(k3, tl.trans(q3t)) * ks3[:, None] * tl.load(qsrow + 3)[None, :]
        logit = tl.sum(tl.maximum(s, 0.0) * w[None, :], axis=1)
        ok = valid
        if CAUSAL:
            ok = ok & (offs_n < (visible_base + q0 + qi + 1) // RATIO)
        logit = tl.where(ok, logit, float("-inf"))
        tl.store(out_ptr + r * N + offs_n, logit, mask=valid)
        if BLOCK_MAX:
            bm = tl.max(tl.reshape(logit, (BLOCK_N // 8, 8)), axis=1)
            offs_blk = pid_n * (BLOCK_N // 8) + tl.arange(0, BLOCK_N // 8)
            bm = tl.where(offs_blk == (N - 1) // 8, float("inf"), bm)
            tl.store(bmax_ptr + r * (N // 8) + offs_blk, bm, mask=offs_blk < N // 8)


def indexer_logits(
    key_fmt: str,
    q_codes: torch.Tensor,
    q_scales: torch.Tensor,
    w: torch.Tensor,
    key_rows: torch.Tensor,
    n_keys: int,
    *,
    q_per_seq: int = 1,
    rows_per_seq: int | None = None,
    block_table: torch.Tensor | None = None,
    causal_base: int | None = None,
    ratio: int = 1,
    block_max: bool = False,
    out: torch.Tensor | None = None,
    bmax: torch.Tensor | None = None,
    block_n: int = 128,
    bq: int = 1,
    num_warps: int = 4,
    num_stages: int = 2,
):
    """Score ``n_keys`` keys for every query row; returns (logits [NQ, n_keys] fp32, block maxima or None).

    Decode: ``q_per_seq=1`` and ``rows_per_seq`` = rows of each sequence's cache. Prefill: all rows share one
    cache (``rows_per_seq=0``) and ``causal_base`` = cached tokens before the chunk. Reindex: ``block_table``
    [NSEQ, n_keys // 8] of 8-row blocks inside each sequence's cache.
    """
    nq, h, _ = q_codes.shape
    if out is None:
        out = torch.empty(nq, n_keys, dtype=torch.float32, device=q_codes.device)
    if block_max and bmax is None:
        bmax = torch.empty(nq, n_keys // 8, dtype=torch.float32, device=q_codes.device)
    if rows_per_seq is None:
        rows_per_seq = n_keys
    assert nq % bq == 0 and q_per_seq % bq == 0
    grid = (triton.cdiv(n_keys, block_n), nq // bq)
    _indexer_kernel[grid](
        q_codes,
        q_scales,
        w,
        key_rows,
        block_table if block_table is not None else out,
        out,
        bmax if bmax is not None else out,
        n_keys,
        q_per_seq,
        rows_per_seq,
        block_table.shape[1] if block_table is not None else 0,
        causal_base or 0,
        H=h,
        BLOCK_N=block_n,
        BQ=bq,
        FMT=FMT_ID[key_fmt],
        REINDEX=block_table is not None,
        CAUSAL=causal_base is not None,
        RATIO=ratio,
        BLOCK_MAX=block_max,
        USE_ASM_=USE_ASM,
        num_warps=num_warps,
        num_stages=num_stages,
    )
    return out, bmax


def key_row_bytes(key_fmt: str) -> int:
    return formats.ROW_BYTES[key_fmt]
