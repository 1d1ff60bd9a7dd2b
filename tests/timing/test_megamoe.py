"""DeepGEMM's Mega MoE timed from its published measurement (sim.timing.megamoe): the fit reproduces the published
points and recovers known constants, and only a `moe_a2a: megamoe` pool on NVIDIA Blackwell takes it."""

from __future__ import annotations

import pytest

from sim.timing.megamoe import MegaMoe, MegaMoePoint, fit, layer_s, load_points, published, rank_work

FLASH = {"experts": 256, "top_k": 6, "expert_weights": 3 * 4096 * 2048}


def test_the_fit_reproduces_the_published_points():
    m = published()
    assert m.points == 4 and m.rms_error < 0.02
    for p in load_points():
        f, w = rank_work(p.experts, p.top_k, p.expert_weights, float(p.tokens_per_rank * p.ep), p.ep)
        assert layer_s(m, f, w) == pytest.approx(p.seconds, rel=0.03)
    # compute-bound at 32K tokens a rank: ~2 PFLOP/s, 45 % of a B200's 4.5 PFLOP/s FP8 peak
    assert 1.8e15 < m.flops_per_s < 2.2e15 and 20e-6 < m.floor_s < 50e-6


def test_the_fit_recovers_known_constants():
    truth = MegaMoe(30e-6, 1.5e15, 4.0e12, 0.0, 0)
    points = []
    for ep, t in ((4, 16), (8, 64), (8, 512), (4, 2048), (8, 16384)):
        f, w = rank_work(FLASH["experts"], FLASH["top_k"], FLASH["expert_weights"], float(t * ep), ep)
        points.append(MegaMoePoint(**FLASH, ep=ep, tokens_per_rank=t, seconds=layer_s(truth, f, w)))
    got = fit(points)
    assert got.floor_s == pytest.approx(truth.floor_s, rel=0.05)
    assert got.flops_per_s == pytest.approx(truth.flops_per_s, rel=0.02)
    assert got.weight_bytes_per_s == pytest.approx(truth.weight_bytes_per_s, rel=0.02)


def test_only_a_megamoe_pool_on_blackwell_takes_it(h200_tables, case_timing):
    b200 = case_timing("sglang-v4-flash-4xb200-high-throughput-c1024.yaml")
    assert b200.par.moe_a2a == "megamoe" and b200.megamoe == published()
    rows = 256  # a decode step of 64 sequences on each of the 4 ranks
    f, w = rank_work(256, 6, 3 * 4096 * 2048, float(rows), 4)
    per_layer = layer_s(published(), f, w)
    assert b200.pass_parts(rows).moe_gemm_s == pytest.approx(per_layer * b200.mt.every.moe_layers, rel=1e-9)
    # the same pool exchanging through DeepEP, and a megamoe pool on the H200, keep the carried grouped GEMMs
    assert (
        case_timing("sglang-v4-flash-4xb200-high-throughput-c1024.yaml", pool={"moe_a2a": "deepep"}).megamoe
        is None
    )
    assert (
        case_timing(
            "sglang-v4-flash-4xh200-high-throughput-c1024.yaml", pool={"moe_a2a": "megamoe", "deepep_normal_sms": None}
        ).megamoe
        is None
    )
