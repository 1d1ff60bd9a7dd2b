"""Triton sparse MLA decode / prefill attention over gathered, in-kernel dequantised KV rows.

One program owns one query token and ``heads_per_program`` of the 64 heads (all 64 by default: the h = 64 case
of FlashMLA, no 2-CTA crossover; fewer heads per program trade re-dequantised tiles for registers), loops
over blocks of ``BLOCK_N`` gathered rows, dequantises each tile once to bf16 (K = V, so the same tile feeds
both the QKᵀ and the PV MMA; Hopper has no FP4 MMA, so FP4 is decoded in registers, kernels.md §4.1) and
runs BF16 MMAs with an online softmax. Two KV sources (window + compressed) may have different formats.
Small batches split the entry list over ``nsplit`` programs and merge them in a combine kernel, where the
attention sink enters the denominator.
"""

from __future__ import annotations

import math

import torch
import triton
import triton.language as tl

from kernels_bench.tl_common import USE_ASM, dot_bf16, ue8m0_to_f32, unpack_fp4_placed

FMT_ID = {"bf16_1024": 0, "fp8_584": 1, "fp8_528": 2, "nvfp4_288": 3}
ROW = {0: 1024, 1: 584, 2: 528, 3: 288}
LOG2E = 1.4426950408889634


@triton.jit
def _load_kv(
    pool_ptr,
    rows,
    valid,
    col0,
    FMT: tl.constexpr,
    BN: tl.constexpr,
    NC: tl.constexpr,
    NO_DEQUANT: tl.constexpr,
    USE_ASM_: tl.constexpr,
):
    """bf16 [BN, NC] values of columns [col0, col0 + NC) of the pool rows ``rows``."""
    c = col0 + tl.arange(0, NC)
    if FMT == 0:
        ptr = (pool_ptr + rows * 1024).to(tl.pointer_type(tl.bfloat16))
        val = tl.load(ptr[:, None] + c[None, :], mask=valid[:, None], other=0.0)
    elif FMT == 1:
        base = pool_ptr + rows * 584
        is_nope = c < 448
        codes = tl.load(base[:, None] + c[None, :], mask=valid[:, None] & is_nope[None, :], other=0)
        g = tl.arange(0, NC // 64)
        sexp = tl.load(
            base[:, None] + 576 + col0 // 64 + g[None, :],
            mask=valid[:, None] & ((col0 // 64 + g) < 7)[None, :],
            other=127,
        )
        nope = codes.to(tl.float8e4nv, bitcast=True).to(tl.float32).reshape(BN, NC // 64, 64)
        nope = (nope * ue8m0_to_f32(sexp)[:, :, None]).reshape(BN, NC)
        rptr = (base + 448).to(tl.pointer_type(tl.bfloat16))
        rope = tl.load(
            rptr[:, None] + (c - 448)[None, :], mask=valid[:, None] & (c >= 448)[None, :], other=0.0
        )
        val = tl.where(is_nope[None, :], nope, rope.to(tl.float32)).to(tl.bfloat16)
    elif FMT == 2:
        base = pool_ptr + rows * 528
        codes = tl.load(base[:, None] + c[None, :], mask=valid[:, None], other=0)
        g = tl.arange(0, NC // 32)
        sexp = tl.load(base[:, None] + 512 + col0 // 32 + g[None, :], mask=valid[:, None], other=127)
        v = codes.to(tl.float8e4nv, bitcast=True).to(tl.float32).reshape(BN, NC // 32, 32)
        val = (v * ue8m0_to_f32(sexp)[:, :, None]).reshape(BN, NC).to(tl.bfloat16)
    else:
        base = pool_ptr + rows * 288
        b = tl.load(base[:, None] + col0 // 2 + tl.arange(0, NC // 2)[None, :], mask=valid[:, None], other=0)
        if NO_DEQUANT:
            # timing control: same bytes, one int->bf16 convert per value instead of the decode + scale
            val = tl.join(b, b).reshape(BN, NC).to(tl.bfloat16)
        else:
            lo, hi = unpack_fp4_placed(b, USE_ASM_)
            v = tl.join(lo, hi).reshape(BN, NC).to(tl.float8e4nv, bitcast=True).to(tl.float32)
            g = tl.arange(0, NC // 16)
            sc = tl.load(base[:, None] + 256 + col0 // 16 + g[None, :], mask=valid[:, None], other=0)
            sc = sc.to(tl.float8e4nv, bitcast=True).to(tl.float32) * 64.0  # undo the 2^-6 placement
            val = (v.reshape(BN, NC // 16, 16) * sc[:, :, None]).reshape(BN, NC).to(tl.bfloat16)
    return val


@triton.jit
def _attn_source(
    q,
    acc,
    m_i,
    l_i,
    pool_ptr,
    idx_ptr,
    n_src,
    blk_lo,
    blk_hi,
    qk_scale,
    col0,
    row_base,
    btab_ptr,
    FMT: tl.constexpr,
    BN: tl.constexpr,
    DV: tl.constexpr,
    NO_DEQUANT: tl.constexpr,
    USE_ASM_: tl.constexpr,
    BLOCKTAB: tl.constexpr,
):
    for blk in range(blk_lo, blk_hi):
        offs = blk * BN + tl.arange(0, BN)
        valid = offs < n_src
        rows = tl.load(idx_ptr + offs, mask=valid, other=0).to(tl.int64)
        if BLOCKTAB:  # Reindex: selected candidate j -> key row block_table[j // 8]·8 + j % 8
            rows = tl.load(btab_ptr + rows // 8, mask=valid, other=0).to(tl.int64) * 8 + rows % 8
        rows = rows + row_base
        k = _load_kv(pool_ptr, rows, valid, 0, FMT, BN, 512, NO_DEQUANT, USE_ASM_)
        s = dot_bf16(q, tl.trans(k), USE_ASM_) * qk_scale
        s = tl.where(valid[None, :], s, float("-inf"))
        m_new = tl.maximum(m_i, tl.max(s, 1))
        alpha = tl.math.exp2(m_i - m_new)
        p = tl.math.exp2(s - m_new[:, None])
        l_i = l_i * alpha + tl.sum(p, 1)
        if DV == 512:
            v = k
        else:
            v = _load_kv(pool_ptr, rows, valid, col0, FMT, BN, DV, NO_DEQUANT, USE_ASM_)
        acc = acc * alpha[:, None] + dot_bf16(p.to(tl.bfloat16), v, USE_ASM_)
        m_i = m_new
    return acc, m_i, l_i


@triton.jit
def _attn_source_584(
    q,
    q_r,
    acc,
    acc_r,
    m_i,
    l_i,
    pool_ptr,
    idx_ptr,
    n_src,
    blk_lo,
    blk_hi,
    qk_scale,
    row_base,
    btab_ptr,
    BN: tl.constexpr,
    USE_ASM_: tl.constexpr,
    BLOCKTAB: tl.constexpr,
):
    """``_attn_source`` for fp8_584 rows with the RoPE part kept apart: a [BN, 512] NoPE tile (columns 448+
    zero, scale 0) and a clean [BN, 64] bf16 RoPE tile, so no 512-wide masked bf16 load and no select; the
    RoPE columns take one extra K = 64 (QKᵀ) and N = 64 (PV) MMA into ``acc_r``."""
    c = tl.arange(0, 512)
    g = tl.arange(0, 8)
    for blk in range(blk_lo, blk_hi):
        offs = blk * BN + tl.arange(0, BN)
        valid = offs < n_src
        rows = tl.load(idx_ptr + offs, mask=valid, other=0).to(tl.int64)
        if BLOCKTAB:
            rows = tl.load(btab_ptr + rows // 8, mask=valid, other=0).to(tl.int64) * 8 + rows % 8
        base = pool_ptr + (rows + row_base) * 584
        codes = tl.load(base[:, None] + c[None, :], mask=valid[:, None] & (c < 448)[None, :], other=0)
        # scale byte of group 7 (the RoPE columns) reads as exponent 0: value +0, so those columns vanish
        sexp = tl.load(base[:, None] + 576 + g[None, :], mask=valid[:, None] & (g < 7)[None, :], other=0)
        k = codes.to(tl.float8e4nv, bitcast=True).to(tl.float32).reshape(BN, 8, 64)
        k = (k * ue8m0_to_f32(sexp)[:, :, None]).reshape(BN, 512).to(tl.bfloat16)
        rptr = (base + 448).to(tl.pointer_type(tl.bfloat16))
        kr = tl.load(rptr[:, None] + tl.arange(0, 64)[None, :], mask=valid[:, None], other=0.0)
        s = dot_bf16(q, tl.trans(k), USE_ASM_) + dot_bf16(q_r, tl.trans(kr), USE_ASM_)
        s = tl.where(valid[None, :], s * qk_scale, float("-inf"))
        m_new = tl.maximum(m_i, tl.max(s, 1))
        alpha = tl.math.exp2(m_i - m_new)
        p = tl.math.exp2(s - m_new[:, None])
        l_i = l_i * alpha + tl.sum(p, 1)
        pb = p.to(tl.bfloat16)
        acc = acc * alpha[:, None] + dot_bf16(pb, k, USE_ASM_)
        acc_r = acc_r * alpha[:, None] + dot_bf16(pb, kr, USE_ASM_)
        m_i = m_new
    return acc, acc_r, m_i, l_i


@triton.jit
def _sparse_mla_kernel(
    q_ptr,
    pool_a,
    idx_a,
    pool_b,
    idx_b,
    sink_ptr,
    out_ptr,
    opart_ptr,
    lse_ptr,
    btab_ptr,
    NA,
    NB,
    qk_scale,
    rows_per_seq_a,
    rows_per_seq_b,
    nb_tab,
    FA: tl.constexpr,
    FB: tl.constexpr,
    BN: tl.constexpr,
    NSPLIT: tl.constexpr,
    DV: tl.constexpr,
    NO_DEQUANT: tl.constexpr,
    USE_ASM_: tl.constexpr,
    BLOCKTAB: tl.constexpr,
    HB: tl.constexpr,
    DVS: tl.constexpr,
    SPLIT584: tl.constexpr,
):
    r = tl.program_id(0).to(tl.int64)
    sp = tl.program_id(1)
    col0 = (tl.program_id(2) % DVS) * DV
    offs_h = (tl.program_id(2) // DVS) * HB + tl.arange(0, HB)
    offs_d = tl.arange(0, 512)
    q = tl.load(q_ptr + r * 64 * 512 + offs_h[:, None] * 512 + offs_d[None, :])
    nblk_a = tl.cdiv(NA, BN)
    nblk = nblk_a + tl.cdiv(NB, BN)
    per = tl.cdiv(nblk, NSPLIT)
    lo = sp * per
    hi = tl.minimum(lo + per, nblk)
    acc = tl.zeros([HB, DV], dtype=tl.float32)
    m_i = tl.full([HB], float("-inf"), dtype=tl.float32)
    l_i = tl.zeros([HB], dtype=tl.float32)
    if SPLIT584:
        q_r = tl.load(q_ptr + r * 64 * 512 + offs_h[:, None] * 512 + 448 + tl.arange(0, 64)[None, :])
        acc_r = tl.zeros([HB, 64], dtype=tl.float32)
        acc, acc_r, m_i, l_i = _attn_source_584(
            q,
            q_r,
            acc,
            acc_r,
            m_i,
            l_i,
            pool_a,
            idx_a + r * NA,
            NA,
            lo,
            tl.minimum(hi, nblk_a),
            qk_scale,
            r * rows_per_seq_a,
            btab_ptr,
            BN,
            USE_ASM_,
            False,
        )
        acc, acc_r, m_i, l_i = _attn_source_584(
            q,
            q_r,
            acc,
            acc_r,
            m_i,
            l_i,
            pool_b,
            idx_b + r * NB,
            NB,
            tl.maximum(lo, nblk_a) - nblk_a,
            hi - nblk_a,
            qk_scale,
            r * rows_per_seq_b,
            btab_ptr + r * nb_tab,
            BN,
            USE_ASM_,
            BLOCKTAB,
        )
    else:
        acc, m_i, l_i = _attn_source(
            q,
            acc,
            m_i,
            l_i,
            pool_a,
            idx_a + r * NA,
            NA,
            lo,
            tl.minimum(hi, nblk_a),
            qk_scale,
            col0,
            r * rows_per_seq_a,
            btab_ptr,
            FA,
            BN,
            DV,
            NO_DEQUANT,
            USE_ASM_,
            False,
        )
        acc, m_i, l_i = _attn_source(
            q,
            acc,
            m_i,
            l_i,
            pool_b,
            idx_b + r * NB,
            NB,
            tl.maximum(lo, nblk_a) - nblk_a,
            hi - nblk_a,
            qk_scale,
            col0,
            r * rows_per_seq_b,
            btab_ptr + r * nb_tab,
            FB,
            BN,
            DV,
            NO_DEQUANT,
            USE_ASM_,
            BLOCKTAB,
        )
    offs_v = col0 + tl.arange(0, DV)
    offs_r = 448 + tl.arange(0, 64)
    # SPLIT584: acc holds columns < 448 (its RoPE columns are zero), acc_r columns 448+; disjoint stores
    if SPLIT584:
        vmask = (offs_v < 448)[None, :]
    else:
        vmask = (offs_v >= 0)[None, :]
    if NSPLIT == 1:
        sink = tl.load(sink_ptr + offs_h) * 1.4426950408889634
        den = l_i + tl.math.exp2(sink - m_i)
        orow = out_ptr + r * 64 * 512 + offs_h[:, None] * 512
        tl.store(orow + offs_v[None, :], (acc / den[:, None]).to(tl.bfloat16), mask=vmask)
        if SPLIT584:
            tl.store(orow + offs_r[None, :], (acc_r / den[:, None]).to(tl.bfloat16))
    else:
        den = tl.maximum(l_i, 1e-30)
        part = (r * NSPLIT + sp) * 64
        prow = opart_ptr + (part + offs_h[:, None]) * 512
        tl.store(prow + offs_v[None, :], acc / den[:, None], mask=vmask)
        if SPLIT584:
            tl.store(prow + offs_r[None, :], acc_r / den[:, None])
        if col0 == 0:
            tl.store(lse_ptr + part + offs_h, m_i + tl.math.log2(l_i))


@triton.jit
def _combine_kernel(opart_ptr, lse_ptr, sink_ptr, out_ptr, NSPLIT: tl.constexpr, HB: tl.constexpr):
    r = tl.program_id(0).to(tl.int64)
    h = tl.program_id(1) * HB + tl.arange(0, HB)
    offs_d = tl.arange(0, 512)
    sink = tl.load(sink_ptr + h) * 1.4426950408889634
    m = sink
    for s in tl.static_range(NSPLIT):
        m = tl.maximum(m, tl.load(lse_ptr + (r * NSPLIT + s) * 64 + h))
    den = tl.math.exp2(sink - m)
    acc = tl.zeros([HB, 512], dtype=tl.float32)
    for s in tl.static_range(NSPLIT):
        w = tl.math.exp2(tl.load(lse_ptr + (r * NSPLIT + s) * 64 + h) - m)
        den += w
        acc += w[:, None] * tl.load(opart_ptr + ((r * NSPLIT + s) * 64 + h[:, None]) * 512 + offs_d[None, :])
    tl.store(
        out_ptr + r * 64 * 512 + h[:, None] * 512 + offs_d[None, :], (acc / den[:, None]).to(tl.bfloat16)
    )


def default_nsplit(programs: int, entries: int, block_n: int, sms: int = 132) -> int:
    """Split the entries only when the (query, head-block, V-slice) programs alone leave most SMs idle."""
    nblk = triton.cdiv(entries, block_n)
    return max(1, min(triton.cdiv(sms, programs), nblk, 16))


class SparseMLA:
    """Preallocated sparse MLA over two (format, pool, indices) sources; ``__call__`` -> out [Q, 64, 512]."""

    def __init__(
        self,
        queries: int,
        fmt_a: str,
        n_a: int,
        fmt_b: str,
        n_b: int,
        device,
        *,
        sm_scale: float | None = None,
        block_n: int = 32,
        num_warps: int = 8,
        num_stages: int = 1,
        nsplit: int | None = None,
        dv_split: int = 1,
        heads_per_program: int = 64,
        split_rope: bool = False,
        no_dequant: bool = False,
    ):
        assert 64 % heads_per_program == 0 and 512 % dv_split == 0
        self.q_n, self.n_a, self.n_b = queries, n_a, n_b
        self.fa, self.fb = FMT_ID[fmt_a], FMT_ID[fmt_b]
        self.block_n, self.num_warps, self.num_stages = block_n, num_warps, num_stages
        self.hb = heads_per_program
        self.dv_split = dv_split
        # fp8_584 on both sources: NoPE and RoPE tiles apart (``_attn_source_584``)
        self.split584 = split_rope and self.fa == self.fb == 1 and dv_split == 1 and not no_dequant
        self.per_query = (64 // heads_per_program) * dv_split
        self.nsplit = nsplit or default_nsplit(queries * self.per_query, n_a + n_b, block_n)
        self.no_dequant = no_dequant
        self.qk_scale = (sm_scale if sm_scale is not None else 1.0 / math.sqrt(512)) * LOG2E
        self.out = torch.empty(queries, 64, 512, dtype=torch.bfloat16, device=device)
        if self.nsplit > 1:
            self.opart = torch.empty(queries * self.nsplit * 64, 512, dtype=torch.float32, device=device)
            self.lse = torch.empty(queries * self.nsplit * 64, dtype=torch.float32, device=device)
        else:
            self.opart = self.lse = self.out

    def __call__(
        self,
        q,
        pool_a,
        idx_a,
        pool_b,
        idx_b,
        sink,
        *,
        rows_per_seq_a: int = 0,
        rows_per_seq_b: int = 0,
        block_table: torch.Tensor | None = None,
    ):
        """Indices are pool rows, offset by ``query · rows_per_seq`` (per-sequence caches laid end to end);
        with ``block_table`` [Q, NBT] the B indices are Reindex candidate positions (8 rows per block)."""
        grid = (self.q_n, self.nsplit, self.per_query)
        _sparse_mla_kernel[grid](
            q,
            pool_a,
            idx_a,
            pool_b if pool_b is not None else pool_a,
            idx_b if idx_b is not None else idx_a,
            sink,
            self.out,
            self.opart,
            self.lse,
            block_table if block_table is not None else idx_a,
            self.n_a,
            self.n_b,
            self.qk_scale,
            rows_per_seq_a,
            rows_per_seq_b,
            block_table.shape[1] if block_table is not None else 0,
            FA=self.fa,
            FB=self.fb,
            BN=self.block_n,
            NSPLIT=self.nsplit,
            DV=512 // self.dv_split,
            NO_DEQUANT=self.no_dequant,
            USE_ASM_=USE_ASM,
            BLOCKTAB=block_table is not None,
            HB=self.hb,
            DVS=self.dv_split,
            SPLIT584=self.split584,
            num_warps=self.num_warps,
            num_stages=self.num_stages,
        )
        if self.nsplit > 1:
            hb = 8
            _combine_kernel[(self.q_n, 64 // hb)](
                self.opart, self.lse, sink, self.out, NSPLIT=self.nsplit, HB=hb, num_warps=4
            )
        return self.out
