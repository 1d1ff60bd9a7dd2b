"""The TP all-reduce in the engine's custom all-reduce up to its largest message, in NCCL above it."""

from __future__ import annotations

import pytest

from sim.hardware import load_hw
from sim.timing.comm import allreduce_s, tp_allreduce_s
from sim.timing.factory import hw_rates

MiB = 1024 * 1024
ROWS_8_MIB = 8 * MiB / (4096 * 2.0)  # BF16 rows of hidden 4096 in an 8 MiB message


def _tp4(rows: float, custom_max_bytes: float) -> float:
    return tp_allreduce_s(rows, dp=1, tp=4, hidden=4096, layers=1, allreduces_per_layer=1, act_bytes_per_elem=2.0,
                          bw_bytes_per_s=300e9, latency_s=8e-6, custom_max_bytes=custom_max_bytes,
                          nccl_bw_bytes_per_s=700e9, nccl_latency_s=55e-6)  # fmt: skip


def test_a_message_above_the_custom_all_reduces_largest_runs_at_nccls_rate():
    small, large = ROWS_8_MIB, 4 * ROWS_8_MIB
    assert _tp4(small, 8 * MiB) == pytest.approx(allreduce_s(8 * MiB, 4, 300e9, 8e-6))
    assert _tp4(large, 8 * MiB) == pytest.approx(allreduce_s(32 * MiB, 4, 700e9, 55e-6))
    assert _tp4(large, float("inf")) == pytest.approx(allreduce_s(32 * MiB, 4, 300e9, 8e-6))
    assert _tp4(large, 8 * MiB) < _tp4(large, float("inf"))


@pytest.mark.parametrize("hardware", ["nvidia-h100-hgx8", "nvidia-h200-hgx8", "nvidia-b200-hgx8",
                                      "nvidia-b300-hgx8", "nvidia-gb200-nvl72"])  # fmt: skip
def test_the_nvidia_profiles_carry_nccls_measured_rate_and_nccl_wins_at_prefill_sizes(hardware):
    r = hw_rates(load_hw(hardware), 0.0)
    assert r.allreduce_nccl_bw_bytes_per_s > r.allreduce_bw_bytes_per_s > 0.0
    assert r.allreduce_custom_max_bytes == float("inf")  # an engine rule, set per pool (sim.cluster.build)
    big = 64 * MiB  # TP 4, 8,192 prompt rows
    nccl = allreduce_s(big, 4, r.allreduce_nccl_bw_bytes_per_s, r.allreduce_nccl_latency_s)
    assert nccl < allreduce_s(big, 4, r.allreduce_bw_bytes_per_s, r.allreduce_latency_s)


def test_an_sglang_pool_takes_its_rule_and_a_pool_without_an_engine_does_not():
    import yaml

    from sim.cluster.build import build_simulation
    from sim.config.errors import validate_or_raise
    from sim.config.scenario import Scenario
    from sim.paths import project_root
    from sim.timing.arith import build_arith

    case = project_root() / "scenarios" / "validation" / "sglang-v4-flash-4xb200-low-latency-c16.yaml"
    doc = yaml.safe_load(case.read_text())["scenario"]
    comm = {}
    for engine, expected in ((doc["engine"], 8 * MiB), (None, float("inf"))):
        scn = validate_or_raise(
            Scenario, {k: v for k, v in doc.items() if k != "engine" or engine}, file=str(case)
        )
        one = scn.for_model(scn.models[0].name)
        timing = (
            build_simulation(one, one.models[0], build_arith(scn.models[0].name), out_dir=None)
            .instances[0]
            .timing
        )
        assert timing.hw.allreduce_custom_max_bytes == expected
        comm[expected] = (timing.comm_s(64, False), timing.comm_s(8192, True))
    # TP 4 decode rows stay in the custom all-reduce; a 8,192-row chunk's 64 MiB messages go to NCCL, faster
    assert comm[8 * MiB][0] == comm[float("inf")][0]
    assert comm[8 * MiB][1] < 0.8 * comm[float("inf")][1]


def test_a_vllm_pool_takes_its_tiers_for_its_gpu_and_tp_size():
    """vLLM 0.34.0 on a B200 (compute capability 10.0) at TP 4: FlashInfer's all-reduce up to 32 MiB, NCCL above."""
    import yaml

    from sim.cluster.build import build_simulation
    from sim.config.errors import validate_or_raise
    from sim.config.scenario import Scenario
    from sim.paths import project_root
    from sim.timing.arith import build_arith

    assert load_hw("nvidia-b200-hgx8").accelerator.compute_capability.value == "10.0"
    case = project_root() / "scenarios" / "validation" / "v4-flash-4xb200-agg.yaml"
    scn = validate_or_raise(Scenario, yaml.safe_load(case.read_text())["scenario"], file=str(case))
    one = scn.for_model(scn.models[0].name)
    timing = (
        build_simulation(one, one.models[0], build_arith(scn.models[0].name), out_dir=None)
        .instances[0]
        .timing
    )
    assert timing.hw.allreduce_custom_max_bytes == 32 * MiB
    # a 8,192-row prefill chunk's 64 MiB all-reduces go to NCCL; 4,096 rows (32 MiB) stay in the fast tier
    assert timing.comm_s(8192, True) < 2.0 * timing.comm_s(4096, True)
