"""Sparse MLA attention (64 heads, one shared 512-d latent, K = V, attention sink): float64 reference.

Each query token attends to two KV sources: its window rows (SWA, ``idx_a``) and its selected or dense
compressed rows (``idx_b``), each a byte-exact row format of ``formats`` gathered from a pool. This is the
FlashMLA sparse-decode contract of kernels.md §3.1 without the output's inverse RoPE (an elementwise
epilogue that moves no KV bytes).
"""

from __future__ import annotations

import torch

from kernels_bench import formats

HEADS = 64  # kernels.md §2
DIM = 512  # kernels.md §2: d_qk = d_v = 512


def gather_dequant(fmt: str, pool: torch.Tensor, idx: torch.Tensor) -> torch.Tensor:
    """float32 [Q, N, 512] values of pool rows idx [Q, N]."""
    q, n = idx.shape
    return formats.dequant_rows(fmt, pool[idx.reshape(-1).long()]).reshape(q, n, DIM)


def sparse_mla_ref(
    q: torch.Tensor, kv: torch.Tensor, sink: torch.Tensor, sm_scale: float, dtype=torch.float64
) -> torch.Tensor:
    """q [Q, H, 512], kv [Q, N, 512] (K = V), sink [H] logits -> out [Q, H, 512] in ``dtype``.

    softmax over the N scores plus the per-head sink logit (which takes probability mass but adds no value).
    """
    qd, kd = q.to(dtype), kv.to(dtype)
    s = torch.einsum("qhd,qnd->qhn", qd, kd) * sm_scale
    sk = sink.to(dtype)[None, :, None].expand(s.shape[0], -1, 1)
    p = torch.softmax(torch.cat([s, sk], dim=-1), dim=-1)[..., :-1]
    return torch.einsum("qhn,qnd->qhd", p, kd)


def sparse_mla_ref_from_pools(q, sink, sm_scale, sources) -> torch.Tensor:
    """Reference over several (fmt, pool, idx) sources concatenated along the entry axis."""
    kv = torch.cat([gather_dequant(f, p, i) for f, p, i in sources if i.shape[1] > 0], dim=1)
    return sparse_mla_ref(q, kv, sink, sm_scale)
