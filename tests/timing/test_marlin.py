"""vLLM's Marlin MoE (W4A16) on the H200 from AIConfigurator's measured module (sim.timing.marlin): the module gives
back every measured row, carries to other experts by their weights at equal rows per expert, and only a model with
`expert_activations: bf16` on the H200 takes it."""

from __future__ import annotations

import math

import pytest

from sim.errors import InputError
from sim.timing.experts import busiest_rank
from sim.timing.marlin import for_gpu, load_points, measured
from sim.timing.moe_module import ModulePoint, build

FLASH_WEIGHTS = 3 * 4096 * 2048  # V4-Flash's gate, up and down


def test_the_module_gives_back_every_measured_row_from_one_row_an_expert_up():
    m = measured()
    points = load_points()
    assert len(points) == 216 and m.floor_s == min(p.seconds for p in points)
    checked = 0
    for p in points:
        rows = p.tokens * p.top_k / p.experts
        if rows < 1.0:
            continue  # fewer rows than experts: the module takes the touched experts at one row each
        got = m.floor_s + m.layer_s(p.experts / p.ep, rows, p.expert_weights)
        assert got == pytest.approx(p.seconds, rel=1e-9)
        checked += 1
    assert checked == 8 * 20  # every EP size, the 20 token counts from 64 up


def test_the_time_carries_by_the_experts_weights_at_equal_rows_and_interpolates_geometrically_in_experts():
    m = measured()
    for experts, rows in ((64.0, 2.0), (256.0, 384.0), (9.0, 30.0)):
        assert m.layer_s(experts, rows, 2 * FLASH_WEIGHTS) == pytest.approx(
            2 * m.layer_s(experts, rows, FLASH_WEIGHTS)
        )
    # halfway (geometrically) between two measured local expert counts: the geometric mean of their cost per weight
    lo, hi = 56.0, 112.0
    mid = math.sqrt(lo * hi)
    cost = [m.layer_s(e, 8.0, FLASH_WEIGHTS) / (e * FLASH_WEIGHTS) for e in (lo, mid, hi)]
    assert cost[1] == pytest.approx(math.sqrt(cost[0] * cost[2]), rel=1e-9)
    # beyond the most rows measured (293 an expert) the time grows linearly with the rows
    t = [m.layer_s(224.0, r, FLASH_WEIGHTS) for r in (1000.0, 2000.0, 3000.0)]  # a measured count
    assert t[2] - t[1] == pytest.approx(t[1] - t[0], rel=1e-9) and t[1] > t[0]
    assert m.layer_s(0.0, 4.0, FLASH_WEIGHTS) == 0.0


def test_the_module_against_the_fp8_grouped_gemms_it_replaces(h200_tables, case_timing):
    """What the rule does to V4-Flash on the H200 (docs section 19): half the bytes do not make Marlin faster than
    DeepGEMM's FP8 at tens of experts, and at prefill sizes it runs several times slower."""
    from sim.timing.experts import grouped_s

    mt = case_timing("v4-flash-4xh200-agg.yaml", model={"expert_activations": "fp8"}, kernels="production").mt
    m = measured()

    def ratio(experts: float, rows: float) -> float:
        fp8 = grouped_s(mt.moe_gate_up, experts, rows) + grouped_s(mt.moe_down, experts, rows)
        return m.layer_s(experts, rows, FLASH_WEIGHTS) / fp8

    assert ratio(256.0, 1.0) < 0.75  # one row an expert over all 256: W4 reads half of FP8's bytes
    assert ratio(64.0, 2.0) > 1.0  # EP 4 decode: Marlin over 64 experts reaches less of the HBM than DeepGEMM
    assert ratio(64.0, 384.0) > 4.0  # a 16K-token prefill chunk at EP 4


def test_build_takes_one_expert_shape():
    p = ModulePoint(3584, 3072, 896, 16, 1, 64, 1e-3)
    with pytest.raises(ValueError, match="one expert shape"):
        build([p, p._replace(hidden=7168, ep=2)])


def test_the_h200_and_the_h100_have_their_own_measured_modules():
    from sim.hardware import load_hw

    h200, h100 = for_gpu(load_hw("nvidia-h200-hgx8")), for_gpu(load_hw("nvidia-h100-hgx8"))
    assert h200 is measured() and h100 is measured("h100") and h100 is not h200
    # AIConfigurator's H100 module within a few % of the H200's: Marlin is not bound by the H100's lower HBM
    assert 0.9 < h100.per_weight.at(128.0, 1.0) / h200.per_weight.at(128.0, 1.0) < 1.1
    with pytest.raises(InputError) as err:
        for_gpu(load_hw("amd-mi300x-ubb8"))
    assert err.value.where == "models[].expert_activations" and "H100" in str(err.value)


def test_a_bf16_model_on_the_h200_times_its_experts_as_the_module_unscaled(h200_tables, case_timing):
    case = "v4-flash-4xh200-agg.yaml"
    marlin = case_timing(case, model={"expert_activations": "bf16"})
    fp8 = case_timing(case, model={"expert_activations": "fp8"})
    assert marlin.moe_module is measured() and fp8.moe_module is None
    rows = 32  # 4 sequences a rank with MTP's 2 verify rows, over the 4 DP ranks
    rank = busiest_rank(256, 6, float(rows), 4)
    per_layer = measured().layer_s(rank.experts, rank.rows_per_expert, FLASH_WEIGHTS)
    # the measured module is the whole routed-expert op: not scaled for the work the kernel tables lack
    assert marlin.pass_parts(rows).moe_gemm_s == pytest.approx(
        per_layer * marlin.mt.every.moe_layers, rel=1e-9
    )
    # everything but the experts is the same
    assert marlin.pass_parts(rows).dense_gemm_s == fp8.pass_parts(rows).dense_gemm_s
    assert marlin.pass_parts(16384).moe_gemm_s > 3 * fp8.pass_parts(16384).moe_gemm_s


def test_bf16_off_the_h200_is_refused_or_carried_at_the_bf16_rate(h200_tables, case_timing):
    with pytest.raises(InputError, match="H200"):
        case_timing(
            "v4-flash-4xh200-agg.yaml", model={"expert_activations": "bf16"}, hardware="amd-mi300x-ubb8"
        )
    h100 = case_timing(
        "v4-flash-4xh200-agg.yaml", model={"expert_activations": "bf16"}, hardware="nvidia-h100-hgx8"
    )
    assert h100.moe_module is measured("h100")
    # on Blackwell (native FP4) W4A16 is the carry at the BF16 MMA rate: slower than W4A8 where compute binds
    b200_bf16 = case_timing("v4-flash-4xb200-agg.yaml", model={"expert_activations": "bf16"})
    b200_fp8 = case_timing("v4-flash-4xb200-agg.yaml", model={"expert_activations": "fp8"})
    assert b200_bf16.moe_module is None
    assert b200_bf16.pass_parts(16384).moe_gemm_s > 1.5 * b200_fp8.pass_parts(16384).moe_gemm_s


def test_under_expert_tp_the_module_splits_at_its_measured_efficiency():
    from sim.timing.marlin import load_tp_points
    from sim.timing.moe_module import build_tp_split

    # built from points: 100 us of glue; TP 2 takes 0.6 of TP 1's work above it at 64 tokens (e = 1 / 1.2)
    pts = [ModulePoint(3584, 3072, 896, 16, tp, 64, s) for tp, s in ((1, 1.1e-3), (2, 0.7e-3), (4, 0.1e-3))]
    split = build_tp_split(pts)
    rows = 64 * 16 / 896
    assert split.at(1.0, rows) == 1.0 and split.at(2.0, rows) == pytest.approx(1.0 / 1.2)
    for gpu in (
        "h100",
        "h200",
    ):  # AIConfigurator's SGLang rows: ~0.93 at decode sizes, 0.70-0.76 at prefill (TP 8)
        m = measured(gpu)
        assert len(load_tp_points(gpu)) == 162 and m.tp_split is not None
        assert 0.9 < m.tp_split.at(8.0, 1.14) < 0.97 and 0.68 < m.tp_split.at(8.0, 293.0) < 0.78
        assert m.tp_split.at(4.0, 293.0) > m.tp_split.at(8.0, 293.0)
        assert m.tp_layer_s(256.0, 73.0, FLASH_WEIGHTS, 8.0) == pytest.approx(
            m.layer_s(256.0, 73.0, FLASH_WEIGHTS) / (8.0 * m.tp_split.at(8.0, 73.0))
        )


def test_a_tp8_h100_pool_times_its_marlin_experts_at_the_split_efficiency(case_timing):
    t = case_timing("sglang-v4-flash-fp4-8xh100-high-throughput-c1024.yaml")
    m = measured("h100")
    assert t.moe_module is m
    rows = 8192  # a prefill chunk: every expert of the 256 on each GPU's 1/8 slice
    rank = busiest_rank(256, 6, float(rows), 1)
    whole = m.layer_s(rank.experts, rank.rows_per_expert, FLASH_WEIGHTS)
    assert t._experts(rows) == pytest.approx(whole / (8 * m.tp_split.at(8.0, rank.rows_per_expert)))
    assert t._experts(rows) > 1.25 * whole / 8
