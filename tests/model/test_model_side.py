"""Side costs against model.md §6.3."""

import pytest

from sim.errors import InputError
from sim.model import (
    draft_row_flops,
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
    # MTP drafting one position: its head (1.06 GFLOP); the block pass that gives it its hidden state is the
    # row pass over the last verified row (docs/engines_and_validation.md section 33)
    block = 0.570e9 + 131072 * 128  # one layer + its 128-token window's attention
    assert draft_step_flops(load_model(V4)) == pytest.approx(1.059e9, rel=0.002)
    # each position after the first: a block pass and a head (SGLang's `speculative_num_steps - 1` passes)
    assert draft_step_flops(load_model(V4), 3) == pytest.approx(3 * 1.059e9 + 2 * block, rel=0.002)
    assert draft_step_flops(load_model("deepseek-llm-67b")) == 0


def test_the_drafter_passes_every_row_the_target_runs():
    # MTP: its block over the row (SGLang's EAGLE draft extend, vLLM's proposer): 2.2 % of V4's 26.5 GFLOP a token
    assert draft_row_flops(load_model(V4)) == pytest.approx(0.570e9 + 131072 * 128, rel=0.002)
    # DSpark: the row's target features through main_proj (15,360 -> 5,120), then each of 3 blocks' wkv (5,120 -> 512)
    assert draft_row_flops(load_model(V41)) == 2 * (15360 * 5120 + 3 * 5120 * 512)
    assert draft_row_flops(load_model("deepseek-llm-67b")) == 0
