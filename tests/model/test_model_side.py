"""Side costs against model.md §6.3."""

import pytest

from sim.errors import InputError
from sim.model import (
    draft_step_flops,
    engram_flops_per_token,
    engram_gather_bytes_per_token,
    load_model,
    vision_flops_per_image,
)

V4, V41 = "deepseek-v4-flash", "deepseek-v4.1-flash"


def test_engram():  # 2 layers x 24 rows x 264 B = 12.7 KB and 0.63 GFLOP per token
    assert engram_gather_bytes_per_token(load_model(V41)) == 2 * 24 * 264
    assert engram_flops_per_token(load_model(V41)) == pytest.approx(0.63e9, rel=0.002)
    assert engram_gather_bytes_per_token(load_model(V4)) == 0
    assert engram_flops_per_token(load_model(V4)) == 0


def test_vision_18_9_tflop_per_max_image():
    spec = load_model(V41)
    assert vision_flops_per_image(spec, 1024) == pytest.approx(18.9e12, rel=0.003)
    assert vision_flops_per_image(spec, 0) == 0
    assert (
        vision_flops_per_image(spec, 256) < vision_flops_per_image(spec, 1024) / 4
    )  # attention is quadratic
    with pytest.raises(InputError):
        vision_flops_per_image(spec, 1025)
    with pytest.raises(InputError, match="no vision"):
        vision_flops_per_image(load_model(V4), 16)


def test_drafters():
    # DSpark: 5 positions x 3 blocks x (~0.54 GFLOP) ~ 8 GFLOP + 6.6 GFLOP of head (model.md §6.3, §9)
    assert 13.5e9 < draft_step_flops(load_model(V41)) < 16e9
    # MTP: one layer (0.57 GFLOP) + SWA attention + head (1.06 GFLOP)
    assert draft_step_flops(load_model(V4)) == pytest.approx(0.570e9 + 131072 * 128 + 1.059e9, rel=0.002)
    assert draft_step_flops(load_model("deepseek-llm-67b")) == 0
