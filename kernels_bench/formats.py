"""Byte-exact KV / index-key row formats and their PyTorch quantise / dequantise references.

All functions work on CPU and CUDA tensors; rows are ``uint8`` tensors of shape ``[R, row_bytes]``.
The Triton kernels in ``kvquant_triton`` and the attention / indexer loaders read and write exactly
these layouts, and the tests compare them byte for byte.

Layouts (offsets in bytes inside one row):

* ``fp8_584`` V4 "MODEL1" (kernels.md §2 [A]): [0, 448) e4m3 NoPE codes, [448, 576) 64 bf16 RoPE values,
  [576, 583) 7 UE8M0 scales (one per 64 NoPE channels), [583] pad.
* ``fp8_528`` V4.1 window (kernels.md §2 [A]): [0, 512) e4m3 codes (RoPE dims included), [512, 528) 16 UE8M0
  scales (one per 32).
* ``nvfp4_288`` V4.1 compressed KV (kernels.md §4.1 [B]): [0, 256) packed e2m1 codes (low nibble = even
  channel), [256, 288) 32 e4m3 scales (one per 16), no global scale; codes round the exact quotient x/s.
* ``bf16_1024``: plain bf16 latent, the no-dequant control (kernels.md §3.2).
* ``mxfp4_68`` index key (kernels.md §2 [B]): [0, 64) packed e2m1 codes, [64, 68) 4 UE8M0 scales (per 32).
* ``fp8_132`` index key as DeepGEMM's SM90 indexer reads it (kernels.md §2): [0, 128) e4m3 codes,
  [128, 132) one little-endian fp32 scale.

Scale rules: NVFP4 uses ``s = e4m3(max(amax, 6·2⁻⁹)/6)`` and ties-to-even e2m1 codes of ``x/s`` (kernels.md
§4.1 [B]). The UE8M0 formats use the smallest power of two ``s ≥ amax/qmax`` (DeepSeek's "round the scale
up" rule), so no code saturates; qmax is 448 for e4m3 and 6 for e2m1.
"""

from __future__ import annotations

import torch

LATENT_DIM = 512  # kernels.md §2: d = 512 (448 NoPE + 64 RoPE), K = V
NOPE_DIM = 448  # kernels.md §2
ROPE_DIM = 64  # kernels.md §2
INDEX_DIM = 128  # kernels.md §2: indexer head dim 128

E4M3_MAX = 448.0  # largest finite float8_e4m3fn
E2M1_MAX = 6.0  # largest e2m1 magnitude
NVFP4_MIN_AMAX = 6.0 * 2.0**-9  # kernels.md §4.1: s = e4m3(max(amax, 6·2⁻⁹)/6)
UE8M0_BIAS = 127

# Bytes per row of each format (kernels.md §2 / §3.2 [C]).
ROW_BYTES: dict[str, int] = {
    "fp8_584": 584,
    "fp8_528": 528,
    "nvfp4_288": 288,
    "bf16_1024": 1024,
    "mxfp4_68": 68,
    "fp8_132": 132,
}
ROW_DIM: dict[str, int] = {
    "fp8_584": LATENT_DIM,
    "fp8_528": LATENT_DIM,
    "nvfp4_288": LATENT_DIM,
    "bf16_1024": LATENT_DIM,
    "mxfp4_68": INDEX_DIM,
    "fp8_132": INDEX_DIM,
}

# e2m1 magnitudes by 3-bit code.
_E2M1_VALUES = (0.0, 0.5, 1.0, 1.5, 2.0, 3.0, 4.0, 6.0)


def e2m1_encode(x: torch.Tensor) -> torch.Tensor:
    """Nearest e2m1 code (ties to even, saturating at 6) of float values; returns uint8 codes 0..15."""
    a = x.abs().float()
    # Boundaries between neighbouring magnitudes; at a tie the even code (mantissa bit 0) wins, so
    # the comparison is '>' where the lower neighbour is even and '>=' where the upper one is.
    mag = (
        (a > 0.25).to(torch.uint8)
        + (a >= 0.75).to(torch.uint8)
        + (a > 1.25).to(torch.uint8)
        + (a >= 1.75).to(torch.uint8)
        + (a > 2.5).to(torch.uint8)
        + (a >= 3.5).to(torch.uint8)
        + (a > 5.0).to(torch.uint8)
    )
    sign = (x < 0).to(torch.uint8) << 3
    return sign | mag


def e2m1_encode_scaled(x: torch.Tensor, s: torch.Tensor) -> torch.Tensor:
    """e2m1 codes of the exact quotient x / s (ties to even, saturating), without dividing.

    |x|/s > t  <=>  |x| > t·s, and t·s is exact in fp32 (t has 2 significant bits, an e4m3 scale 4), so
    comparing with scaled thresholds rounds the true quotient, not a rounded one (and costs no division).
    """
    a = x.abs().float()
    sf = s.float()
    mag = (
        (a > 0.25 * sf).to(torch.uint8)
        + (a >= 0.75 * sf).to(torch.uint8)
        + (a > 1.25 * sf).to(torch.uint8)
        + (a >= 1.75 * sf).to(torch.uint8)
        + (a > 2.5 * sf).to(torch.uint8)
        + (a >= 3.5 * sf).to(torch.uint8)
        + (a > 5.0 * sf).to(torch.uint8)
    )
    return ((x < 0).to(torch.uint8) << 3) | mag


def e2m1_decode(codes: torch.Tensor) -> torch.Tensor:
    """float32 values of uint8 e2m1 codes (0..15)."""
    lut = torch.tensor(_E2M1_VALUES, dtype=torch.float32, device=codes.device)
    mag = lut[(codes & 7).long()]
    return torch.where((codes & 8) != 0, -mag, mag)


def pack_nibbles(codes: torch.Tensor) -> torch.Tensor:
    """[R, 2C] codes -> [R, C] bytes; the even channel goes to the low nibble."""
    return codes[:, 0::2] | (codes[:, 1::2] << 4)


def unpack_nibbles(packed: torch.Tensor) -> torch.Tensor:
    """[R, C] bytes -> [R, 2C] codes (inverse of ``pack_nibbles``)."""
    lo = packed & 0xF
    hi = packed >> 4
    return torch.stack([lo, hi], dim=-1).reshape(packed.shape[0], -1)


def ue8m0_ceil_exponent(y: torch.Tensor) -> torch.Tensor:
    """Biased exponent e (int32) of the smallest power of two 2^(e-127) >= y, for positive normal y."""
    bits = y.float().contiguous().view(torch.int32)
    exp_field = (bits >> 23) & 0xFF
    mantissa = bits & 0x7FFFFF
    return exp_field + (mantissa != 0).to(torch.int32)


def ue8m0_decode(e: torch.Tensor) -> torch.Tensor:
    """float32 value 2^(e-127) of UE8M0 exponent bytes (e = 0 decodes to 0, never used by the writers)."""
    return (e.to(torch.int32) << 23).view(torch.float32)


def _pow2_scales(x: torch.Tensor, group: int, qmax: float, min_amax: float = 1e-30):
    """Per-group UE8M0 exponents and float scales for [R, C] values (C divisible by group)."""
    r, c = x.shape
    amax = x.float().abs().reshape(r, c // group, group).amax(dim=-1).clamp_min(min_amax)
    e = ue8m0_ceil_exponent(amax / qmax).clamp(1, 254)
    return e, ue8m0_decode(e)


def _as_bytes(t: torch.Tensor) -> torch.Tensor:
    return t.contiguous().view(torch.uint8)


def quant_nvfp4_288(x: torch.Tensor) -> torch.Tensor:
    """[R, 512] float -> [R, 288] NVFP4 rows (e4m3 scale per 16, e2m1 codes, no global scale)."""
    r = x.shape[0]
    xf = x.float().reshape(r, LATENT_DIM // 16, 16)
    amax = xf.abs().amax(dim=-1).clamp_min(NVFP4_MIN_AMAX)
    scale = (amax / E2M1_MAX).clamp_max(E4M3_MAX).to(torch.float8_e4m3fn)
    codes = e2m1_encode_scaled(xf, scale.float().unsqueeze(-1)).reshape(r, LATENT_DIM)
    return torch.cat([pack_nibbles(codes), _as_bytes(scale)], dim=1)


def dequant_nvfp4_288(rows: torch.Tensor) -> torch.Tensor:
    r = rows.shape[0]
    codes = unpack_nibbles(rows[:, :256])
    scale = rows[:, 256:288].contiguous().view(torch.float8_e4m3fn).float()
    vals = e2m1_decode(codes).reshape(r, 32, 16) * scale.unsqueeze(-1)
    return vals.reshape(r, LATENT_DIM)


def quant_fp8_584(x: torch.Tensor) -> torch.Tensor:
    """[R, 512] float -> [R, 584] MODEL1 rows: e4m3 NoPE with UE8M0 per 64, bf16 RoPE, 1 pad byte."""
    r = x.shape[0]
    nope = x[:, :NOPE_DIM].float()
    e, s = _pow2_scales(nope, 64, E4M3_MAX)
    codes = (nope.reshape(r, 7, 64) / s.unsqueeze(-1)).reshape(r, NOPE_DIM).to(torch.float8_e4m3fn)
    rope = x[:, NOPE_DIM:].to(torch.bfloat16)
    pad = torch.zeros(r, 1, dtype=torch.uint8, device=x.device)
    return torch.cat([_as_bytes(codes), _as_bytes(rope), e.to(torch.uint8), pad], dim=1)


def dequant_fp8_584(rows: torch.Tensor) -> torch.Tensor:
    r = rows.shape[0]
    codes = rows[:, :NOPE_DIM].contiguous().view(torch.float8_e4m3fn).float()
    s = ue8m0_decode(rows[:, 576:583])
    nope = (codes.reshape(r, 7, 64) * s.unsqueeze(-1)).reshape(r, NOPE_DIM)
    rope = rows[:, NOPE_DIM:576].contiguous().view(torch.bfloat16).float()
    return torch.cat([nope, rope], dim=1)


def quant_fp8_528(x: torch.Tensor) -> torch.Tensor:
    """[R, 512] float -> [R, 528] V4.1 window rows: e4m3 codes with one UE8M0 scale per 32."""
    r = x.shape[0]
    xf = x.float()
    e, s = _pow2_scales(xf, 32, E4M3_MAX)
    codes = (xf.reshape(r, 16, 32) / s.unsqueeze(-1)).reshape(r, LATENT_DIM).to(torch.float8_e4m3fn)
    return torch.cat([_as_bytes(codes), e.to(torch.uint8)], dim=1)


def dequant_fp8_528(rows: torch.Tensor) -> torch.Tensor:
    r = rows.shape[0]
    codes = rows[:, :LATENT_DIM].contiguous().view(torch.float8_e4m3fn).float()
    s = ue8m0_decode(rows[:, 512:528])
    return (codes.reshape(r, 16, 32) * s.unsqueeze(-1)).reshape(r, LATENT_DIM)


def quant_bf16_1024(x: torch.Tensor) -> torch.Tensor:
    return _as_bytes(x.to(torch.bfloat16)).reshape(x.shape[0], 1024)


def dequant_bf16_1024(rows: torch.Tensor) -> torch.Tensor:
    return rows.contiguous().view(torch.bfloat16).float()


def quant_mxfp4_68(x: torch.Tensor) -> torch.Tensor:
    """[R, 128] float -> [R, 68] MXFP4 index keys: e2m1 codes, one UE8M0 scale per 32."""
    r = x.shape[0]
    xf = x.float()
    e, s = _pow2_scales(xf, 32, E2M1_MAX)
    codes = e2m1_encode(xf.reshape(r, 4, 32) / s.unsqueeze(-1)).reshape(r, INDEX_DIM)
    return torch.cat([pack_nibbles(codes), e.to(torch.uint8)], dim=1)


def dequant_mxfp4_68(rows: torch.Tensor) -> torch.Tensor:
    r = rows.shape[0]
    vals = e2m1_decode(unpack_nibbles(rows[:, :64])).reshape(r, 4, 32)
    return (vals * ue8m0_decode(rows[:, 64:68]).unsqueeze(-1)).reshape(r, INDEX_DIM)


def quant_fp8_132(x: torch.Tensor) -> torch.Tensor:
    """[R, 128] float -> [R, 132] FP8 index keys: e4m3 codes and one fp32 scale (amax/448) per key."""
    xf = x.float()
    scale = (xf.abs().amax(dim=1, keepdim=True) / E4M3_MAX).clamp_min(1e-30)
    codes = (xf / scale).to(torch.float8_e4m3fn)
    return torch.cat([_as_bytes(codes), _as_bytes(scale)], dim=1)


def dequant_fp8_132(rows: torch.Tensor) -> torch.Tensor:
    codes = rows[:, :INDEX_DIM].contiguous().view(torch.float8_e4m3fn).float()
    scale = rows[:, 128:132].contiguous().view(torch.float32)
    return codes * scale


QUANT = {
    "fp8_584": quant_fp8_584,
    "fp8_528": quant_fp8_528,
    "nvfp4_288": quant_nvfp4_288,
    "bf16_1024": quant_bf16_1024,
    "mxfp4_68": quant_mxfp4_68,
    "fp8_132": quant_fp8_132,
}
DEQUANT = {
    "fp8_584": dequant_fp8_584,
    "fp8_528": dequant_fp8_528,
    "nvfp4_288": dequant_nvfp4_288,
    "bf16_1024": dequant_bf16_1024,
    "mxfp4_68": dequant_mxfp4_68,
    "fp8_132": dequant_fp8_132,
}


def quant_rows(fmt: str, x: torch.Tensor) -> torch.Tensor:
    """Quantise [R, dim] values into [R, ROW_BYTES[fmt]] rows of format ``fmt``."""
    return QUANT[fmt](x)


def dequant_rows(fmt: str, rows: torch.Tensor) -> torch.Tensor:
    """float32 [R, dim] values of [R, ROW_BYTES[fmt]] rows."""
    return DEQUANT[fmt](rows)


def random_rows(fmt: str, n: int, generator: torch.Generator | None = None, device="cpu") -> torch.Tensor:
    """Valid rows of ``fmt`` built by quantising N(0, 1) values (a pool of random, not zero, entries)."""
    x = torch.randn(n, ROW_DIM[fmt], generator=generator, device=device)
    return quant_rows(fmt, x)
