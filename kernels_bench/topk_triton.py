"""Triton radix-select top-k (the algorithm of ``topk``): 4 passes, each a small kernel.

``hist1`` and ``hist2`` spread each row over many programs (256-bin histograms of the top two key bytes,
merged with global atomics); ``compact`` writes the keys above the 16-bit threshold prefix straight to the
output and the keys equal to it to a candidate buffer; ``finish`` (one program per row) resolves the last
16 bits over the candidates. Each program finds the threshold bins itself from the merged histograms, so
no host round trip is needed and the sequence can be captured in a CUDA graph.
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

WS = 520  # workspace ints per row: hist1 [0, 256), hist2 [256, 512), sure count 512, candidate count 513


@triton.jit
def _ordered_key(x):
    u = x.to(tl.uint32, bitcast=True)
    return tl.where((u >> 31) != 0, u ^ 0xFFFFFFFF, u | 0x80000000)


@triton.jit
def _find_bin(h, need):
    """Bin holding the need-th largest key of histogram h [256], and the count in bins above it."""
    bins = tl.arange(0, 256)
    ge = tl.cumsum(h, 0, reverse=True)
    t = tl.max(tl.where(ge >= need, bins, -1), 0)
    above = tl.sum(tl.where(bins > t, h, 0), 0)
    return t, above


@triton.jit
def _hist1_kernel(x_ptr, ws_ptr, N, stride_x, BLOCK: tl.constexpr):
    pid = tl.program_id(0)
    r = tl.program_id(1).to(tl.int64)
    offs = pid * BLOCK + tl.arange(0, BLOCK)
    m = offs < N
    key = _ordered_key(tl.load(x_ptr + r * stride_x + offs, mask=m, other=0.0))
    h = tl.histogram((key >> 24).to(tl.int32), 256, mask=m)
    tl.atomic_add(ws_ptr + r * 520 + tl.arange(0, 256), h, sem="relaxed")


@triton.jit
def _hist2_kernel(x_ptr, ws_ptr, N, stride_x, k, BLOCK: tl.constexpr):
    pid = tl.program_id(0)
    r = tl.program_id(1).to(tl.int64)
    t1, above1 = _find_bin(tl.load(ws_ptr + r * 520 + tl.arange(0, 256)), k)
    offs = pid * BLOCK + tl.arange(0, BLOCK)
    m = offs < N
    key = _ordered_key(tl.load(x_ptr + r * stride_x + offs, mask=m, other=0.0))
    sel = m & ((key >> 24).to(tl.int32) == t1)
    h = tl.histogram(((key >> 16) & 255).to(tl.int32), 256, mask=sel)
    tl.atomic_add(ws_ptr + r * 520 + 256 + tl.arange(0, 256), h, sem="relaxed")


@triton.jit
def _compact_kernel(x_ptr, ws_ptr, out_ptr, ckey_ptr, cidx_ptr, N, stride_x, k, BLOCK: tl.constexpr):
    pid = tl.program_id(0)
    r = tl.program_id(1).to(tl.int64)
    t1, above1 = _find_bin(tl.load(ws_ptr + r * 520 + tl.arange(0, 256)), k)
    t2, above2 = _find_bin(tl.load(ws_ptr + r * 520 + 256 + tl.arange(0, 256)), k - above1)
    offs = pid * BLOCK + tl.arange(0, BLOCK)
    m = offs < N
    key = _ordered_key(tl.load(x_ptr + r * stride_x + offs, mask=m, other=0.0))
    d1 = (key >> 24).to(tl.int32)
    d2 = ((key >> 16) & 255).to(tl.int32)
    sure = m & ((d1 > t1) | ((d1 == t1) & (d2 > t2)))
    cand = m & (d1 == t1) & (d2 == t2)
    ns = tl.sum(sure.to(tl.int32), 0)
    nc = tl.sum(cand.to(tl.int32), 0)
    if ns > 0:
        base_s = tl.atomic_add(ws_ptr + r * 520 + 512, ns, sem="relaxed")
        pos_s = base_s + tl.cumsum(sure.to(tl.int32), 0) - 1
        tl.store(out_ptr + r * k + pos_s, offs, mask=sure)
    if nc > 0:
        base_c = tl.atomic_add(ws_ptr + r * 520 + 513, nc, sem="relaxed")
        pos_c = base_c + tl.cumsum(cand.to(tl.int32), 0) - 1
        tl.store(ckey_ptr + r * N + pos_c, (key & 0xFFFF).to(tl.int32), mask=cand)
        tl.store(cidx_ptr + r * N + pos_c, offs, mask=cand)


@triton.jit
def _finish_kernel(ws_ptr, out_ptr, ckey_ptr, cidx_ptr, N, k, BLOCK: tl.constexpr):
    r = tl.program_id(0).to(tl.int64)
    t1, above1 = _find_bin(tl.load(ws_ptr + r * 520 + tl.arange(0, 256)), k)
    t2, above2 = _find_bin(tl.load(ws_ptr + r * 520 + 256 + tl.arange(0, 256)), k - above1)
    need = k - above1 - above2
    n_sure = tl.load(ws_ptr + r * 520 + 512)
    c = tl.load(ws_ptr + r * 520 + 513)
    h3 = tl.zeros([256], dtype=tl.int32)
    for s in range(0, c, BLOCK):
        offs = s + tl.arange(0, BLOCK)
        m = offs < c
        key = tl.load(ckey_ptr + r * N + offs, mask=m, other=0)
        h3 += tl.histogram(key >> 8, 256, mask=m)
    t3, above3 = _find_bin(h3, need)
    need = need - above3
    h4 = tl.zeros([256], dtype=tl.int32)
    for s in range(0, c, BLOCK):
        offs = s + tl.arange(0, BLOCK)
        m = offs < c
        key = tl.load(ckey_ptr + r * N + offs, mask=m, other=0)
        h4 += tl.histogram(key & 255, 256, mask=m & ((key >> 8) == t3))
    t4, above4 = _find_bin(h4, need)
    need = need - above4
    pos = n_sure
    eq_seen = 0
    for s in range(0, c, BLOCK):
        offs = s + tl.arange(0, BLOCK)
        m = offs < c
        key = tl.load(ckey_ptr + r * N + offs, mask=m, other=0)
        idx = tl.load(cidx_ptr + r * N + offs, mask=m, other=0)
        d3 = key >> 8
        d4 = key & 255
        gt = m & ((d3 > t3) | ((d3 == t3) & (d4 > t4)))
        eq = m & (d3 == t3) & (d4 == t4)
        eq_rank = eq_seen + tl.cumsum(eq.to(tl.int32), 0)
        take = gt | (eq & (eq_rank <= need))
        p = pos + tl.cumsum(take.to(tl.int32), 0) - 1
        tl.store(out_ptr + r * k + p, idx, mask=take)
        pos += tl.sum(take.to(tl.int32), 0)
        eq_seen += tl.sum(eq.to(tl.int32), 0)


class RadixTopK:
    """Preallocated workspace for top-k over [rows, n] fp32 scores; ``__call__`` launches the 4 passes."""

    def __init__(self, rows: int, n: int, k: int, device, block: int = 8192, finish_block: int = 2048):
        if not 1 <= k <= n:
            raise ValueError(f"need 1 <= k <= n, got k={k}, n={n}")
        self.rows, self.n, self.k = rows, n, k
        self.block = min(block, triton.next_power_of_2(n))
        self.finish_block = finish_block
        self.ws = torch.empty(rows, WS, dtype=torch.int32, device=device)
        self.ckey = torch.empty(rows, n, dtype=torch.int32, device=device)
        self.cidx = torch.empty(rows, n, dtype=torch.int32, device=device)
        self.out = torch.empty(rows, k, dtype=torch.int32, device=device)

    def __call__(self, x: torch.Tensor) -> torch.Tensor:
        assert x.shape == (self.rows, self.n) and x.dtype == torch.float32 and x.stride(1) == 1
        self.ws.zero_()
        grid = (triton.cdiv(self.n, self.block), self.rows)
        _hist1_kernel[grid](x, self.ws, self.n, x.stride(0), BLOCK=self.block, num_warps=8)
        _hist2_kernel[grid](x, self.ws, self.n, x.stride(0), self.k, BLOCK=self.block, num_warps=8)
        _compact_kernel[grid](
            x,
            self.ws,
            self.out,
            self.ckey,
            self.cidx,
            self.n,
            x.stride(0),
            self.k,
            BLOCK=self.block,
            num_warps=8,
        )
        _finish_kernel[(self.rows,)](
            self.ws, self.out, self.ckey, self.cidx, self.n, self.k, BLOCK=self.finish_block, num_warps=8
        )
        return self.out
