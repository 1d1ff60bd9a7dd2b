"""Tier paths (sim.kvcache.paths): segments per block from the model's KV layout, transfer time."""

from __future__ import annotations

import pytest

from sim import model as m
from sim.config.cache import TierPath
from sim.hardware import load_hw
from sim.kvcache.paths import PathCost, PathRates, kv_regions_per_block, kv_segments, path_rates
from sim.timing.factory import profile_achievable


def test_regions_per_block_follow_the_layout():
    assert kv_regions_per_block(m.load_model("qwen3-coder-30b-a3b")) == 96  # 48 layers x separate K and V
    v4 = m.load_model("deepseek-v4-flash")
    owners = sum(1 for layer in v4.layers if layer.owns_kv) + sum(
        1 for layer in v4.layers if layer.owns_index_keys
    )
    assert kv_regions_per_block(v4) == owners
    assert kv_segments(65536, 256, 10) == 2560 and kv_segments(257, 256, 10) == 20


def test_transfer_is_request_plus_segments_plus_bytes():
    rates = PathRates("net", 10e9, PathCost(0.01, 2e-6))
    assert rates.transfer_s(5e9, 1000) == pytest.approx(0.01 + 0.002 + 0.5)


def test_path_rates_use_the_profile_share_unless_the_path_sets_one():
    hw = load_hw("nvidia-h20-hgx8")
    achievable = profile_achievable(hw)
    assert path_rates(TierPath(link="pcie_h2d"), hw, achievable, 2).bw_bytes_per_s == pytest.approx(
        2 * 64e9 * 0.85
    )
    assert path_rates(TierPath(link="net", bw_frac=0.5), hw, achievable, 1).bw_bytes_per_s == pytest.approx(
        25e9
    )
