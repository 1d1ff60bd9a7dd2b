"""A fused score kernel for V4.1's prefill indexer on Hopper, as SGLang's opt-in flag runs it
(`SGLANG_OPT_USE_FUSED_DSV41_INDEXER_SCORES`; docs/engines_and_validation.md section 53). Written here from the
design its source describes (sim copies no engine code): one program scores a tile of BLOCK_M query rows by
BLOCK_N keys, loops over the heads with one BF16 MMA each (the keys already dequantised to BF16 by the torch
path), applies relu and the head weight and sums the heads in registers, masks each row's positions past its reach
and writes only the FP32 [rows, lc] scores. Row tiles are the outer grid axis, so a tile's queries stay in L2
while the keys stream past them. What the flag leaves in torch (the per-request loop, the keys' dequantisation,
the top-k and its sort, the candidate masks) stays in `sglang_v41_indexer.index_layer`.

Imported only where Triton is present (the GPU machine).
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

BLOCK_M, BLOCK_N = 64, 128  # the tile its source reports best on the H200


@triton.jit
def _fused_scores_kernel(
    q_ptr,  # [rows, H, D] bf16
    k_ptr,  # [lc, D] bf16
    w_ptr,  # [rows, H] bf16
    lens_ptr,  # [rows] int64: positions each row may see
    out_ptr,  # [rows, lc] fp32
    rows,
    lc,
    H: tl.constexpr,
    D: tl.constexpr,
    BM: tl.constexpr,
    BN: tl.constexpr,
):
    pid_m = tl.program_id(1)
    pid_n = tl.program_id(0)
    offs_m = pid_m * BM + tl.arange(0, BM)
    offs_n = pid_n * BN + tl.arange(0, BN)
    offs_d = tl.arange(0, D)
    row_ok = offs_m < rows
    col_ok = offs_n < lc
    k = tl.load(k_ptr + offs_n[:, None].to(tl.int64) * D + offs_d[None, :], mask=col_ok[:, None], other=0.0)
    acc = tl.zeros((BM, BN), dtype=tl.float32)
    for h in range(H):
        q = tl.load(
            q_ptr + (offs_m[:, None].to(tl.int64) * H + h) * D + offs_d[None, :],
            mask=row_ok[:, None],
            other=0.0,
        )
        w = tl.load(w_ptr + offs_m.to(tl.int64) * H + h, mask=row_ok, other=0.0).to(tl.float32)
        s = tl.dot(q, tl.trans(k))
        acc += tl.maximum(s, 0.0) * w[:, None]
    lens = tl.load(lens_ptr + offs_m, mask=row_ok, other=0)
    acc = tl.where(offs_n[None, :] < lens[:, None], acc, float("-inf"))
    out = out_ptr + offs_m[:, None].to(tl.int64) * lc + offs_n[None, :]
    tl.store(out, acc, mask=row_ok[:, None] & col_ok[None, :])


def fused_scores(q: torch.Tensor, k: torch.Tensor, w: torch.Tensor, lens: torch.Tensor) -> torch.Tensor:
    """FP32 [rows, lc]: sum over heads of w . relu(q . k), positions at or past a row's `lens` at -inf."""
    rows, heads, dim = q.shape
    lc = k.shape[0]
    out = torch.empty((rows, lc), dtype=torch.float32, device=q.device)
    grid = (triton.cdiv(lc, BLOCK_N), triton.cdiv(rows, BLOCK_M))
    _fused_scores_kernel[grid](
        q.contiguous(), k.contiguous(), w.contiguous(), lens.contiguous(), out, rows, lc,
        H=heads, D=dim, BM=BLOCK_M, BN=BLOCK_N, num_warps=4, num_stages=2,
    )  # fmt: skip
    return out
