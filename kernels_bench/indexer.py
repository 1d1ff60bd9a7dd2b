"""Lightning-indexer scoring: PyTorch reference and input builders (CPU-capable).

``logit[q, j] = Σ_h w[q, h] · relu(q_h · k_j)`` over 128-d keys (kernels.md §3.1, DeepGEMM
``fp8_mqa_logits`` contract). V4 keys are FP8 with one fp32 scale (132 B); V4.1 keys and queries are MXFP4
(68 B per key, UE8M0 per 32). The Triton kernel (``indexer_triton``) reads the byte-exact rows of
``formats``; this module holds the float64 reference it is checked against.
"""

from __future__ import annotations

import torch

from kernels_bench import formats


def dequant_keys(key_fmt: str, rows: torch.Tensor) -> torch.Tensor:
    """[..., row_bytes] key rows -> float32 [..., 128]."""
    lead = rows.shape[:-1]
    flat = formats.dequant_rows(key_fmt, rows.reshape(-1, rows.shape[-1]))
    return flat.reshape(*lead, formats.INDEX_DIM)


def quant_queries(key_fmt: str, q: torch.Tensor):
    """Quantise [Q, H, 128] queries as the kernel consumes them.

    Returns ``(codes, scales, q_dequant)``: FP8 path = e4m3 codes with unit scales; MXFP4 path = e2m1
    codes re-expressed as e4m3 bytes worth value·2⁻⁶ (an exact bit placement, see
    ``e2m1_to_placed_e4m3``) with per-32 scales that undo the 2⁻⁶.
    """
    nq, h, d = q.shape
    flat = q.reshape(nq * h, d).float()
    if key_fmt == "fp8_132":
        codes = flat.clamp(-formats.E4M3_MAX, formats.E4M3_MAX).to(torch.float8_e4m3fn)
        scales = torch.ones(nq * h, 4, device=q.device)
        deq = codes.float()
    elif key_fmt == "mxfp4_68":
        rows = formats.quant_mxfp4_68(flat)
        codes = e2m1_to_placed_e4m3(formats.unpack_nibbles(rows[:, :64])).view(torch.float8_e4m3fn)
        scales = formats.ue8m0_decode(rows[:, 64:68]) * 64.0
        deq = formats.dequant_mxfp4_68(rows)
    else:
        raise ValueError(key_fmt)
    return codes.reshape(nq, h, d), scales.reshape(nq, h, 4), deq.reshape(nq, h, d)


def e2m1_to_placed_e4m3(codes: torch.Tensor) -> torch.Tensor:
    """e2m1 code n -> e4m3 byte ((n & 8) << 4) | ((n & 7) << 2), whose value is exactly e2m1(n)·2⁻⁶.

    Putting the 2 exponent bits and 1 mantissa bit of e2m1 into the low exponent bits and top mantissa
    bit of e4m3 rescales normal and subnormal values alike by 2^(1 - 7) (the bias difference), so an FP8
    MMA can consume FP4 data after two masks and two shifts.
    """
    return ((codes & 8) << 4) | ((codes & 7) << 2)


def indexer_logits_ref(
    q: torch.Tensor, w: torch.Tensor, keys: torch.Tensor, visible: torch.Tensor | None = None
) -> torch.Tensor:
    """Float64 reference. q [Q, H, 128], w [Q, H], keys [Q or 1, N, 128] (dequantised) -> [Q, N].

    ``visible`` [Q] (optional): query q sees keys j < visible[q]; the others get -inf (causal prefill).
    """
    s = torch.einsum("qhd,qnd->qhn", q.double(), keys.double().expand(q.shape[0], -1, -1))
    out = (torch.relu(s) * w.double().unsqueeze(-1)).sum(dim=1)
    if visible is not None:
        j = torch.arange(out.shape[1], device=out.device)
        out = out.masked_fill(j[None, :] >= visible[:, None], float("-inf"))
    return out


def block_max_ref(logits: torch.Tensor, block: int, keep_last: bool = True) -> torch.Tensor:
    """Max over consecutive blocks of ``block`` scores; the block holding the newest key gets +inf."""
    q, n = logits.shape
    nb = -(-n // block)
    pad = torch.full((q, nb * block - n), float("-inf"), dtype=logits.dtype, device=logits.device)
    out = torch.cat([logits, pad], dim=1).reshape(q, nb, block).amax(dim=-1)
    if keep_last:
        out[:, (n - 1) // block] = float("inf")
    return out


def reindex_rows(block_table: torch.Tensor, block: int) -> torch.Tensor:
    """[Q, NB] block ids -> [Q, NB·block] key rows (the Reindex candidate positions)."""
    j = torch.arange(block, device=block_table.device)
    return (block_table.long().unsqueeze(-1) * block + j).reshape(block_table.shape[0], -1)
