"""Triton helpers shared by the kernels: FP4 / FP8 / UE8M0 decoding on Hopper (no FP4 MMA, no E2M1 cvt).

Imported only where Triton is present (the GPU machine, or the Triton interpreter on a CPU).
"""

from __future__ import annotations

import os

import triton
import triton.language as tl

# The interpreter cannot run inline PTX (the plain-Triton bit twiddling computes the same bytes), and its
# bf16 dot is wrong (numpy has no bf16), so interpreted bf16 dots run in fp32.
INTERPRET = os.environ.get("TRITON_INTERPRET", "0") == "1"
USE_ASM = not INTERPRET


@triton.jit
def placed_e4m3_lo(b):
    """Low nibble of each byte as an e4m3 byte worth e2m1(n)·2⁻⁶ (see indexer.e2m1_to_placed_e4m3)."""
    return ((b & 8) << 4) | ((b & 7) << 2)


@triton.jit
def placed_e4m3_hi(b):
    return ((b & 0x80) | ((b >> 2) & 0x1C)).to(tl.uint8)


@triton.jit
def unpack_fp4_placed(b, USE_ASM_: tl.constexpr):
    """uint8 [R, C] packed e2m1 -> (lo, hi) uint8 [R, C] e4m3 bytes (even / odd channels), value·2⁻⁶.

    With inline PTX each 32-bit register converts 8 nibbles in ~12 integer ops (1.5 per value).
    """
    if USE_ASM_:
        lo, hi = tl.inline_asm_elementwise(
            asm="""
            {
            .reg .b32 a, b, c;
            and.b32 a, $2, 0x07070707;
            shl.b32 a, a, 2;
            and.b32 b, $2, 0x08080808;
            shl.b32 b, b, 4;
            or.b32 $0, a, b;
            shr.b32 c, $2, 2;
            and.b32 a, c, 0x1C1C1C1C;
            and.b32 b, $2, 0x80808080;
            or.b32 $1, a, b;
            }
            """,
            constraints="=r,=r,r",
            args=[b],
            dtype=(tl.uint8, tl.uint8),
            is_pure=True,
            pack=4,
        )
    else:
        lo = placed_e4m3_lo(b).to(tl.uint8)
        hi = placed_e4m3_hi(b)
    return lo, hi


@triton.jit
def ue8m0_to_f32(e):
    """UE8M0 exponent bytes -> float32 2^(e-127)."""
    return (e.to(tl.int32) << 23).to(tl.float32, bitcast=True)


@triton.jit
def dot_bf16(a, b, NATIVE: tl.constexpr):
    """tl.dot of bf16 operands with fp32 accumulation (NATIVE False: fp32 operands, for the interpreter)."""
    if NATIVE:
        return tl.dot(a, b)
    return tl.dot(a.to(tl.float32), b.to(tl.float32))
