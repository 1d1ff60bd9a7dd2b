"""FlashMLA's KV-cache layouts, built from the project's byte-exact rows (pure torch, CPU-tested).

Why this module exists (the NaN of kernels.md §9a): FlashMLA's V4 "MODEL1" cache is *not* a sequence of
584-byte rows. Per page block of ``block_size`` tokens it stores first every token's 576 data bytes (448 e4m3
NoPE codes + 64 bf16 RoPE values), then every token's 8 scale bytes (7 UE8M0 + 1 pad), and each block is
padded to a multiple of 576 bytes (FlashMLA ``tests/quant.py``, ``quantize_k_cache`` for
``MODEL1_FP8Sparse``; the SM90 kernel reads the scales at ``block + block_size·576 + i·8``,
``csrc/sm90/decode/sparse_fp8/splitkv_mla.cuh``). The tensor handed to the kernel still has the shape
``(num_blocks, block_size, 1, 584)``. Handing it our per-token rows makes the kernel read NoPE codes and
RoPE bytes as UE8M0 scales; 0xFF is NaN in UE8M0, hence NaN outputs. The bytes per token (584) and so the
byte model are unchanged; only the placement differs.

The V3.2 format (656 B/token) *is* per token: 512 e4m3 NoPE codes, 4 fp32 scales (one per 128, powers of
two), 64 bf16 RoPE values (d_qk = 576, d_v = 512).
"""

from __future__ import annotations

import torch

from kernels_bench import formats

MODEL1_DATA_BYTES = formats.NOPE_DIM + 2 * formats.ROPE_DIM  # 576: NoPE codes + bf16 RoPE
MODEL1_SCALE_BYTES = 8  # 7 UE8M0 + 1 pad
MODEL1_ROW_BYTES = MODEL1_DATA_BYTES + MODEL1_SCALE_BYTES  # 584
V32_NOPE = 512
V32_DIM = V32_NOPE + formats.ROPE_DIM  # 576 = d_qk of V3.2
V32_ROW_BYTES = V32_NOPE + 4 * 4 + 2 * formats.ROPE_DIM  # 656
V32_TILE = 128


def model1_block_stride(block_size: int) -> int:
    """Bytes per page block: block_size·584 rounded up to a multiple of 576 (FlashMLA tests/quant.py)."""
    raw = block_size * MODEL1_ROW_BYTES
    return -(-raw // MODEL1_DATA_BYTES) * MODEL1_DATA_BYTES


def model1_paged(rows: torch.Tensor, block_size: int = 64) -> torch.Tensor:
    """[N, 584] project ``fp8_584`` rows -> FlashMLA MODEL1 cache (num_blocks, block_size, 1, 584).

    Token t lives in block t // block_size at offset t % block_size (FlashMLA's index convention). Rows past
    N (padding of the last block) are zero bytes (scale 2^-127, codes 0).
    """
    n, rb = rows.shape
    assert rb == MODEL1_ROW_BYTES, rb
    nb = -(-n // block_size)
    padded = torch.zeros(nb * block_size, rb, dtype=torch.uint8, device=rows.device)
    padded[:n] = rows
    per_block = padded.reshape(nb, block_size, rb)
    stride = model1_block_stride(block_size)
    buf = torch.zeros(nb, stride, dtype=torch.uint8, device=rows.device)
    buf[:, : block_size * MODEL1_DATA_BYTES] = per_block[:, :, :MODEL1_DATA_BYTES].reshape(nb, -1)
    buf[:, block_size * MODEL1_DATA_BYTES : block_size * rb] = per_block[:, :, MODEL1_DATA_BYTES:].reshape(
        nb, -1
    )
    return buf[:, : block_size * rb].view(nb, block_size, 1, rb)


def model1_rows(paged: torch.Tensor) -> torch.Tensor:
    """Inverse of ``model1_paged``: (num_blocks, block_size, 1, 584) -> [num_blocks·block_size, 584] rows."""
    nb, bs, _, rb = paged.shape
    flat = torch.as_strided(paged, (nb, bs * rb), (paged.stride(0), 1))
    data = flat[:, : bs * MODEL1_DATA_BYTES].reshape(nb, bs, MODEL1_DATA_BYTES)
    scales = flat[:, bs * MODEL1_DATA_BYTES :].reshape(nb, bs, MODEL1_SCALE_BYTES)
    return torch.cat([data, scales], dim=2).reshape(nb * bs, rb)


def dequant_model1_paged(paged: torch.Tensor) -> torch.Tensor:
    """float32 [num_blocks·block_size, 512] values, read the way FlashMLA's tests/quant.py reads them."""
    nb, bs, _, rb = paged.shape
    flat = torch.as_strided(paged, (nb, bs * rb), (paged.stride(0), 1))
    data = flat[:, : bs * MODEL1_DATA_BYTES].reshape(nb * bs, MODEL1_DATA_BYTES)
    scales = flat[:, bs * MODEL1_DATA_BYTES :].reshape(nb * bs, MODEL1_SCALE_BYTES)[:, :7]
    nope = data[:, : formats.NOPE_DIM].contiguous().view(torch.float8_e4m3fn).float()
    s = formats.ue8m0_decode(scales)
    nope = (nope.reshape(-1, 7, 64) * s.unsqueeze(-1)).reshape(-1, formats.NOPE_DIM)
    rope = data[:, formats.NOPE_DIM :].contiguous().view(torch.bfloat16).float()
    return torch.cat([nope, rope], dim=1)


def quant_v32_656(x: torch.Tensor) -> torch.Tensor:
    """[N, 576] float -> [N, 656] V3.2 rows: e4m3 NoPE with a power-of-two fp32 scale per 128, bf16 RoPE."""
    n = x.shape[0]
    nope = x[:, :V32_NOPE].float().reshape(n, 4, V32_TILE)
    amax = nope.abs().amax(dim=-1) / formats.E4M3_MAX
    scale = torch.pow(2.0, amax.clamp_min(1e-4).log2().ceil())  # FlashMLA _cast_scale_inv_to_ue8m0
    codes = (nope / scale.unsqueeze(-1)).reshape(n, V32_NOPE).to(torch.float8_e4m3fn)
    rope = x[:, V32_NOPE:].to(torch.bfloat16)
    return torch.cat(
        [
            codes.view(torch.uint8),
            scale.float().contiguous().view(torch.uint8),
            rope.contiguous().view(torch.uint8),
        ],
        dim=1,
    )


def dequant_v32_656(rows: torch.Tensor) -> torch.Tensor:
    """float32 [N, 576] values of V3.2 rows."""
    n = rows.shape[0]
    codes = rows[:, :V32_NOPE].contiguous().view(torch.float8_e4m3fn).float().reshape(n, 4, V32_TILE)
    scale = rows[:, V32_NOPE : V32_NOPE + 16].contiguous().view(torch.float32)
    rope = rows[:, V32_NOPE + 16 :].contiguous().view(torch.bfloat16).float()
    return torch.cat([(codes * scale.unsqueeze(-1)).reshape(n, V32_NOPE), rope], dim=1)


def v32_paged(rows: torch.Tensor, block_size: int = 64) -> torch.Tensor:
    """[N, 656] V3.2 rows -> (num_blocks, block_size, 1, 656) (per-token rows, blocks contiguous)."""
    n, rb = rows.shape
    nb = -(-n // block_size)
    out = torch.zeros(nb * block_size, rb, dtype=torch.uint8, device=rows.device)
    out[:n] = rows
    return out.view(nb, block_size, 1, rb)


def random_v32_rows(n: int, generator=None, device="cpu") -> torch.Tensor:
    return quant_v32_656(torch.randn(n, V32_DIM, generator=generator, device=device))
