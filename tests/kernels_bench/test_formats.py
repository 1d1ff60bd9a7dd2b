"""Byte layouts, scale rules and round trips of the KV / index-key formats (kernels.md §2, §4)."""

from __future__ import annotations

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from kernels_bench import formats
from kernels_bench.indexer import e2m1_to_placed_e4m3


def test_row_bytes_match_reference():
    # kernels.md §2 / §3.2: 584, 528, 288, 1024, 68, 132 bytes per row
    assert formats.ROW_BYTES == {
        "fp8_584": 584,
        "fp8_528": 528,
        "nvfp4_288": 288,
        "bf16_1024": 1024,
        "mxfp4_68": 68,
        "fp8_132": 132,
    }
    for fmt, nbytes in formats.ROW_BYTES.items():
        rows = formats.random_rows(fmt, 5, generator=torch.Generator().manual_seed(0))
        assert rows.shape == (5, nbytes) and rows.dtype == torch.uint8


def test_e2m1_encode_ties_to_even_and_saturates():
    x = torch.tensor([0.0, 0.25, 0.26, 0.75, 1.25, 1.75, 2.5, 3.5, 5.0, 5.01, 100.0, -0.75, -6.0])
    got = formats.e2m1_decode(formats.e2m1_encode(x))
    want = torch.tensor([0.0, 0.0, 0.5, 1.0, 1.0, 2.0, 2.0, 4.0, 4.0, 6.0, 6.0, -1.0, -6.0])
    assert torch.equal(got, want)


def test_e2m1_codes_round_trip_exactly():
    codes = torch.arange(16, dtype=torch.uint8)
    vals = formats.e2m1_decode(codes)
    back = formats.e2m1_encode(vals)
    assert torch.equal(formats.e2m1_decode(back), vals)  # -0 and +0 both decode to 0


def test_placed_e4m3_is_e2m1_times_2_pow_minus_6():
    codes = torch.arange(16, dtype=torch.uint8)
    placed = e2m1_to_placed_e4m3(codes).view(torch.float8_e4m3fn).float()
    assert torch.equal(placed, formats.e2m1_decode(codes) * 2.0**-6)


@settings(max_examples=30, deadline=None)
@given(st.integers(min_value=-30, max_value=30), st.floats(min_value=1.0, max_value=1.99))
def test_scaled_thresholds_equal_division_for_power_of_two_scales(exp, mant):
    s = torch.tensor(2.0**exp)
    x = torch.linspace(-7, 7, 301) * s * mant
    assert torch.equal(formats.e2m1_encode_scaled(x, s), formats.e2m1_encode(x / s))


def test_ue8m0_ceil_exponent_is_the_smallest_power_of_two_above():
    y = torch.tensor([1.0, 1.5, 0.75, 2.0**-20, 3.0e5])
    e = formats.ue8m0_ceil_exponent(y)
    s = formats.ue8m0_decode(e.to(torch.uint8))
    assert torch.all(s >= y) and torch.all(s / 2 < y)


def test_pack_unpack_nibbles_inverse():
    codes = torch.randint(0, 16, (3, 64), dtype=torch.uint8)
    assert torch.equal(formats.unpack_nibbles(formats.pack_nibbles(codes)), codes)


@pytest.mark.parametrize(
    "fmt,bound",
    # worst-case relative error per element of the format's grid
    [
        ("fp8_584", 2**-4),
        ("fp8_528", 2**-4),
        ("fp8_132", 2**-4),
        ("nvfp4_288", 0.35),
        ("mxfp4_68", 0.35),
        ("bf16_1024", 2**-8),
    ],
)
def test_quant_dequant_round_trip_error(fmt, bound):
    g = torch.Generator().manual_seed(1)
    x = torch.randn(64, formats.ROW_DIM[fmt], generator=g) * 3
    y = formats.dequant_rows(fmt, formats.quant_rows(fmt, x))
    rel = (y - x).norm() / x.norm()
    assert rel < bound


def test_fp8_584_layout_keeps_rope_in_bf16_and_pads():
    x = torch.randn(4, 512)
    rows = formats.quant_fp8_584(x)
    rope = rows[:, 448:576].contiguous().view(torch.bfloat16)
    assert torch.equal(rope, x[:, 448:].to(torch.bfloat16))
    assert torch.all(rows[:, 583] == 0)


def test_nvfp4_scale_rule():
    x = torch.zeros(1, 512)
    x[0, :16] = torch.linspace(-3, 3, 16)  # amax 3 -> s = e4m3(0.5)
    rows = formats.quant_nvfp4_288(x)
    scales = rows[:, 256:288].contiguous().view(torch.float8_e4m3fn).float()
    assert scales[0, 0] == 0.5
    assert scales[0, 1] == formats.NVFP4_MIN_AMAX / 6  # all-zero group: amax clamped to 6·2⁻⁹
    assert torch.equal(formats.dequant_nvfp4_288(rows)[0, 16:], torch.zeros(496))
