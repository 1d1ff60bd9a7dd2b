"""Weights and active parameters against model.md §1, §7."""

import numpy as np
import pytest

from sim.model import (
    active_params_decode,
    active_params_prefill,
    decode_weight_bytes_per_step,
    engram_table_bytes,
    expected_experts_touched,
    expert_bytes,
    load_model,
    total_params,
    weights_bytes,
    weights_bytes_by_dtype,
    weights_bytes_by_group,
)

V4, V41 = "deepseek-v4-flash", "deepseek-v4.1-flash"
GB = 1e9


def test_weights_on_disk_within_1_percent_of_published():  # model.md §1 [B, S15, S16]
    assert weights_bytes(load_model(V41)) == pytest.approx(510.3 * GB, rel=0.01)
    assert weights_bytes(load_model(V41)) == pytest.approx(510.36 * GB, rel=0.0002)  # §7.1 sum
    assert weights_bytes(load_model(V4)) == pytest.approx(159.6 * GB, rel=0.01)
    assert weights_bytes(load_model(V4)) == pytest.approx(160.17 * GB, rel=0.0002)  # §7.1 sum


def test_v41_groups_match_section_7_1():
    g = {k: v / GB for k, v in weights_bytes_by_group(load_model(V41)).items()}
    expected = {
        "routed_experts": 288.78,
        "drafter_routed_experts": 7.22,
        "engram_tables": 202.76,
        "other_fp8": 7.33,
        "other_bf16": 3.14,
        "vision": 0.97,
        "other_fp32": 0.17,
    }
    assert g.keys() == expected.keys()
    for k, v in expected.items():
        assert g[k] == pytest.approx(v, abs=0.006), k


def test_v4_groups_match_section_7_1():
    spec = load_model(V4)
    g = {k: v / GB for k, v in weights_bytes_by_group(spec).items()}
    assert g["routed_experts"] + g["drafter_routed_experts"] == pytest.approx(150.59, abs=0.006)
    assert g["other_fp8"] == pytest.approx(5.99, abs=0.006)
    assert g["other_bf16"] == pytest.approx(2.21, rel=0.01)
    assert g["other_fp32"] + g["other_int64"] == pytest.approx(
        1.22 + 0.16, abs=0.01
    )  # compressors + mHC/hash
    assert sum(weights_bytes_by_dtype(spec).values()) == pytest.approx(weights_bytes(spec))


def test_expert_bytes_and_engram():  # model.md §7.1
    assert expert_bytes(load_model(V41)) == pytest.approx(18.80e6, rel=0.001)
    assert expert_bytes(load_model(V4)) == pytest.approx(13.37e6, rel=0.001)
    assert engram_table_bytes(load_model(V41)) == (384_006_168 + 384_016_682) * 264
    assert engram_table_bytes(load_model(V4)) == 0


def test_total_params():  # model.md §1: V4 284.3B without MTP; V4.1 ~763B
    v4 = load_model(V4)
    assert total_params(v4) == pytest.approx(290.9e9, rel=0.002)
    assert total_params(load_model(V41)) == pytest.approx(763e9, rel=0.002)


def test_active_params():  # model.md §1, §6.2
    assert active_params_decode(load_model(V4)) == pytest.approx(13.27e9, rel=0.001)
    assert active_params_decode(load_model(V41)) == pytest.approx(16.13e9, rel=0.001)
    v41 = load_model(V41)
    assert active_params_prefill(v41) == pytest.approx(7.90e9, rel=0.001)  # CED default
    assert 2 * active_params_prefill(v41, "ced") == pytest.approx(15.79e9, rel=0.001)
    assert 2 * active_params_prefill(v41, "full40") == pytest.approx(30.94e9, rel=0.001)
    # vLLM / ATOM run all of layer 20 on every token: ~ +0.76 GFLOP per prompt token (§6.2)
    extra = 2 * (active_params_prefill(v41, "engine") - active_params_prefill(v41, "ced"))
    assert extra == pytest.approx(0.76e9, abs=0.01e9)
    assert 2 * active_params_prefill(load_model(V4)) == pytest.approx(25.48e9, rel=0.001)


def test_decode_weight_bytes_at_batch_1():  # model.md §7.2
    assert decode_weight_bytes_per_step(load_model(V41), 1) == pytest.approx(13.0e9, rel=0.01)
    assert decode_weight_bytes_per_step(load_model(V4), 1) == pytest.approx(11.8e9, rel=0.01)


def test_decode_weight_bytes_grow_with_batch_toward_all_experts():
    spec = load_model(V41)
    batch = np.array([1, 2, 8, 64, 512, 100_000])
    wb = decode_weight_bytes_per_step(spec, batch)
    assert np.all(np.diff(wb) > 0)
    # one more distinct expert per layer adds 18.80 MB per MoE layer (§7.2)
    assert wb[1] - wb[0] == pytest.approx(40 * (expected_experts_touched(384, 6, 2) - 6) * expert_bytes(spec))
    all_experts = 40 * 384 * expert_bytes(spec)
    assert wb[-1] - wb[0] == pytest.approx(all_experts - 40 * 6 * expert_bytes(spec), rel=1e-6)


def test_expected_experts_touched():
    assert expected_experts_touched(384, 6, 1) == pytest.approx(6)
    assert expected_experts_touched(384, 6, 0) == 0
    assert expected_experts_touched(256, 6, 10_000) == pytest.approx(256)


def test_instance_holds_one_copy_of_the_experts_whatever_the_expert_split():
    """Expert TP (GPUs / EP, sim/config/cluster.py) splits each expert; it does not copy it. A TP4
    instance without EP and a TP4/EP4 instance hold the same weights; DP copies the rest."""
    from sim.cluster.build import instance_weight_bytes

    spec = load_model(V4)
    g = weights_bytes_by_group(spec)
    experts = g.get("routed_experts", 0.0) + g.get("drafter_routed_experts", 0.0)
    rest = sum(g.values()) - experts - g.get("engram_tables", 0.0)
    assert instance_weight_bytes(spec, 1, True) == pytest.approx(weights_bytes(spec))
    assert instance_weight_bytes(spec, 8, True) == pytest.approx(experts + 8 * rest)


def test_experts_run_at_the_fp8_rate_on_a_gpu_without_fp4_are_held_in_fp8(tmp_path):
    """An H200 runs W4A8 experts as FP8 grouped GEMMs over FP8 weights (V4's FP8 checkpoint): the budget holds them
    in the model's FP8 format, 1.88x their MXFP4 bytes; W4A16 (bf16) and a GPU with FP4 MMAs hold MXFP4."""
    import yaml

    from sim.cluster.build import experts_held_in_fp8, hbm_budget, instance_weight_bytes
    from sim.config.scenario import load_scenario
    from sim.hardware import load_hw

    h200, b200 = load_hw("nvidia-h200-hgx8"), load_hw("nvidia-b200-hgx8")
    assert experts_held_in_fp8(h200, "fp8") and not experts_held_in_fp8(h200, "bf16")
    assert not experts_held_in_fp8(b200, "fp8")
    spec = load_model(V4)
    g = weights_bytes_by_group(spec)
    experts = g["routed_experts"] + g.get("drafter_routed_experts", 0.0)
    extra = experts * (1.00006103515625 / 0.53125 - 1.0)  # model.md §7.1: FP8 128x128 blocks against MXFP4
    assert extra == pytest.approx(132.7e9, rel=0.01)
    assert instance_weight_bytes(spec, 4, True, experts_fp8=True) == pytest.approx(
        instance_weight_bytes(spec, 4, True) + extra
    )

    def weights(model) -> float:
        path = tmp_path / "s.yaml"
        path.write_text(yaml.safe_dump({
            "name": "fp8", "models": [model], "hardware": "nvidia-h200-hgx8",
            "cluster": {"pools": [{"name": "p", "role": "colocated", "nodes": 1, "gpus_per_instance": 4, "tp": 4,
                                   "ep": 4}]},
            "workload": {"benchmark": {"isl_tokens": 10, "osl_tokens": 10, "concurrency": 1}, "horizon_s": 10},
        }))  # fmt: skip
        scn = load_scenario(path)
        return hbm_budget(scn, scn.cluster.pools[0], spec, engram_in_hbm=True).weights_bytes

    assert weights(V4) - weights({"name": V4, "expert_activations": "bf16"}) == pytest.approx(extra)


def test_unset_expert_activations_are_the_stock_deployment_on_each_gpu():
    """V4 ships an FP8 checkpoint, so a GPU without FP4 runs its experts at the FP8 rate; V4.1 ships none, so the
    H200 and the H100 run its MXFP4 experts W4A16 on Marlin; a GPU with FP4 runs W4A8; a GPU without FP4 or Marlin's
    measured module, an FP8 conversion; experts already FP8 in the spec stay FP8; a setting always wins."""
    from sim.cluster.build import expert_activations_on
    from sim.hardware import load_hw

    h200, h100, b200, h20 = (
        load_hw(f"nvidia-{g}") for g in ("h200-hgx8", "h100-hgx8", "b200-hgx8", "h20-hgx8")
    )
    v4, v41 = load_model(V4), load_model("deepseek-v4.1-flash")
    assert v4.moe.fp8_checkpoint and v41.moe.fp8_checkpoint is None
    assert expert_activations_on(v4, h200, None) == "fp8"
    assert expert_activations_on(v41, h200, None) == expert_activations_on(v41, h100, None) == "bf16"
    assert expert_activations_on(v41, b200, None) == "fp8" and expert_activations_on(v41, h20, None) == "fp8"
    assert expert_activations_on(load_model("deepseek-v4-flash-mini"), h200, None) == "fp8"
    assert (
        expert_activations_on(v41, h200, "fp8") == "fp8" and expert_activations_on(v4, b200, "bf16") == "bf16"
    )
