"""FlashMLA sparse decode / prefill (SM90 legacy kernels of sgl-flash-mla) against the float64 reference.

Decode follows FlashMLA's V4 contract (kernels.md §3.1): the main cache holds the sliding window (top-k
128 indices), the extra cache the compressed entries (CSA: 512 selected; HCA: all L/128), one query token
per sequence, 64 heads, d = 512, attention sink. Prefill (``flash_mla_sparse_fwd``) reads a bf16 KV
tensor, so production dequantises the gathered FP8 entries first; the row times the kernel alone.
"""

from __future__ import annotations

import math

import torch

from kernels_bench import attention as attn_ref
from kernels_bench import formats
from kernels_bench.production import flashmla_layout as fl

HEADS = attn_ref.HEADS
SM_SCALE_V4 = 1.0 / math.sqrt(512)  # FlashMLA default: d_qk ** -0.5
SM_SCALE_V32 = 1.0 / math.sqrt(fl.V32_DIM)


def sparse_mla_ref_qkv(q, kv, sink, sm_scale, d_v=512, dtype=torch.float64):
    """Like ``attention.sparse_mla_ref`` but with d_qk = kv's last dim and V = kv[..., :d_v] (V3.2: 576 / 512)."""
    qd, kd = q.to(dtype), kv.to(dtype)
    s = torch.einsum("qhd,qnd->qhn", qd, kd) * sm_scale
    sk = sink.to(dtype)[None, :, None].expand(s.shape[0], -1, 1)
    p = torch.softmax(torch.cat([s, sk], dim=-1), dim=-1)[..., :-1]
    return torch.einsum("qhn,qnd->qhd", p, kd[..., :d_v])


def _randint(n_hi: int, shape, g, device) -> torch.Tensor:
    return torch.randint(0, n_hi, shape, generator=g, device=device, dtype=torch.int32)


class FlashDecodeCase:
    """B sequences, ``s_q`` query tokens each (1, or the rows of a speculative verify step): ``na`` window
    entries (main cache) + ``nb`` compressed (extra). Verify row j's window is row 0's shifted by j tokens
    (j entries new); its compressed entries are all of them (HCA, ``dense_b``) or its own random top-k
    (CSA: an upper bound on the gathers, the rows of one sequence select overlapping entries in practice)."""

    def __init__(
        self, B, na, nb, seed, device, *, fmt="fp8_584", dense_b=False, pool_rows=0, block_size=64, s_q=1
    ):
        import flash_mla

        self.flash_mla = flash_mla
        g = torch.Generator(device=device)
        g.manual_seed(seed)
        self.fmt, self.B, self.na, self.nb, self.s_q = fmt, B, na, nb, s_q
        v32 = fmt == "fp8_656"
        self.dqk = fl.V32_DIM if v32 else 512
        self.sm_scale = SM_SCALE_V32 if v32 else SM_SCALE_V4

        def pool(n):
            n = max(n, 64)
            if v32:
                rows = _tiled(lambda m: fl.random_v32_rows(m, g, device), n)
                return rows, fl.v32_paged(rows, block_size)
            rows = _tiled(lambda m: formats.random_rows("fp8_584", m, g, device), n)
            return rows, fl.model1_paged(rows, block_size)

        self.rows_a, self.cache_a = pool(max(pool_rows, B * (na + s_q - 1)))
        win = _randint(self.rows_a.shape[0], (B, 1, na + s_q - 1), g, device)
        self.idx_a = torch.cat([win[:, :, j : j + na] for j in range(s_q)], dim=1).contiguous()
        self.rows_b = self.cache_b = self.idx_b = None
        if nb:
            if dense_b:  # HCA: every compressed entry of the sequence, contiguous per sequence
                self.rows_b, self.cache_b = pool(B * nb)
                self.idx_b = (
                    (
                        torch.arange(B, device=device, dtype=torch.int32)[:, None, None] * nb
                        + torch.arange(nb, device=device, dtype=torch.int32)[None, None, :]
                    )
                    .expand(B, s_q, nb)
                    .contiguous()
                )
            else:
                self.rows_b, self.cache_b = pool(max(pool_rows, B * s_q * nb))
                self.idx_b = _randint(self.rows_b.shape[0], (B, s_q, nb), g, device)
        self.q = (torch.randn(B, s_q, HEADS, self.dqk, generator=g, device=device) * 0.5).to(torch.bfloat16)
        self.sink = torch.randn(HEADS, generator=g, device=device)
        self.meta = flash_mla.get_mla_metadata()[0]

    def run(self):
        return self.flash_mla.flash_mla_with_kvcache(
            self.q,
            self.cache_a,
            None,
            None,
            512,
            self.meta,
            softmax_scale=self.sm_scale,
            is_fp8_kvcache=True,
            indices=self.idx_a,
            attn_sink=self.sink,
            extra_k_cache=self.cache_b,
            extra_indices_in_kvcache=self.idx_b,
            use_legacy=True,
            kv_format="V32" if self.fmt == "fp8_656" else "V4",
        )[0]

    def reference(self, rows: list[int], j: int = 0) -> torch.Tensor:
        """float64 output of query row j of sequences `rows`."""
        deq = fl.dequant_v32_656 if self.fmt == "fp8_656" else (lambda r: formats.dequant_rows("fp8_584", r))
        parts = [
            deq(self.rows_a[self.idx_a[rows, j].reshape(-1).long()]).reshape(len(rows), self.na, self.dqk)
        ]
        if self.nb:
            parts.append(
                deq(self.rows_b[self.idx_b[rows, j].reshape(-1).long()]).reshape(len(rows), self.nb, self.dqk)
            )
        kv = torch.cat(parts, dim=1)
        return sparse_mla_ref_qkv(self.q[rows, j], kv, self.sink, self.sm_scale)

    def check(self, rows: list[int]):
        """(output, reference) of every query row of sequences `rows`."""
        out = self.run()
        assert out.shape == (self.B, self.s_q, HEADS, 512), out.shape
        got = torch.cat([out[rows, j] for j in range(self.s_q)])
        return got, torch.cat([self.reference(rows, j) for j in range(self.s_q)])

    def working_set(self) -> float:
        rb = fl.V32_ROW_BYTES if self.fmt == "fp8_656" else fl.MODEL1_ROW_BYTES
        return self.B * self.s_q * ((self.na + self.nb) * rb + 2 * HEADS * 512 * 2)


class FlashPrefillCase:
    """T query tokens of one sequence, each attending to ``topk`` random entries of a bf16 KV pool."""

    def __init__(self, T, topk, seed, device, *, dqk=512, pool_rows=0):
        import flash_mla

        self.flash_mla = flash_mla
        g = torch.Generator(device=device)
        g.manual_seed(seed)
        self.T, self.topk, self.dqk = T, topk, dqk
        self.sm_scale = 1.0 / math.sqrt(dqk)
        n = max(pool_rows, T * topk, 4096)
        self.kv = _tiled(lambda m: torch.randn(m, 1, dqk, generator=g, device=device).to(torch.bfloat16), n)
        self.idx = _randint(n, (T, 1, topk), g, device)
        self.q = (torch.randn(T, HEADS, dqk, generator=g, device=device) * 0.5).to(torch.bfloat16)
        self.sink = torch.randn(HEADS, generator=g, device=device)

    def run(self):
        return self.flash_mla.flash_mla_sparse_fwd(
            self.q, self.kv, self.idx, self.sm_scale, 512, attn_sink=self.sink, use_legacy=True
        )[0]

    def check(self, rows: list[int]):
        out = self.run()
        kv = self.kv[self.idx[rows, 0].long(), 0]  # [R, topk, dqk]
        return out[rows], sparse_mla_ref_qkv(self.q[rows], kv.float(), self.sink, self.sm_scale)

    def working_set(self) -> float:
        return self.T * (self.topk * 2 * self.dqk + 2 * HEADS * 512 * 2)


def _tiled(make, n: int, block: int = 65536) -> torch.Tensor:
    """n rows: one random block repeated (fast for GB-sized pools; every row valid, not zero)."""
    blk = make(min(n, block))
    out = torch.empty((n, *blk.shape[1:]), dtype=blk.dtype, device=blk.device)
    for s in range(0, n, blk.shape[0]):
        m = min(blk.shape[0], n - s)
        out[s : s + m] = blk[:m]
    return out
