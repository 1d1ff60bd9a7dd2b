"""Kernel times carried from the H200 to other GPUs (sim.timing.carry): the rule is the identity
on the H200, scales each row by its bound resource elsewhere, runs MXFP4 experts on Blackwell,
and is bounded by the published Blackwell anchors."""

from __future__ import annotations

import pytest

from sim.hardware import load_hw
from sim.timing.batch import DecodeTerms
from sim.timing.carry import (
    ANCHORS,
    H200_SM_RATE,
    KNEE,
    LAUNCH_S,
    MXFP4_BYTES_PER_WEIGHT,
    GpuPeaks,
    carry_tables,
    efficiency_curves,
    regime,
    saturation,
    work_of,
)
from sim.timing.factory import make_timing

K = 1024


@pytest.fixture(scope="module")
def gpus():
    return {
        name: GpuPeaks.of(load_hw(name))
        for name in ("nvidia-h200-hgx8", "nvidia-b200-hgx8", "nvidia-h100-hgx8")
    }


@pytest.fixture(scope="module")
def b200_tables(h200_tables, gpus):
    return carry_tables(h200_tables, gpus["nvidia-b200-hgx8"])


def _pairs(h200_tables, carried, **equal):
    order = [r for r in h200_tables.rows if r.family != "pipeline"] + [
        r for r in h200_tables.rows if r.family == "pipeline"
    ]
    return [
        (h, c)
        for h, c in zip(order, carried.rows, strict=True)
        if all(getattr(h, k) == v for k, v in equal.items())
    ]


def test_the_rule_is_the_identity_on_the_h200(h200_tables, gpus):
    same = carry_tables(h200_tables, gpus["nvidia-h200-hgx8"])
    for h, c in _pairs(h200_tables, same):
        assert c.median_s == pytest.approx(h.median_s, rel=1e-9), (h.kernel, h.layer_kind)


def test_a_bandwidth_bound_row_scales_with_hbm_and_keeps_its_floor(h200_tables, gpus):
    h100 = carry_tables(h200_tables, gpus["nvidia-h100-hgx8"])
    sat = saturation(h200_tables)
    pairs = [
        (h, c) for h, c in _pairs(h200_tables, h100, family="gemm_dense") if regime(h, sat) == "bandwidth"
    ]
    assert pairs
    for h, c in pairs:
        work = work_of(h)
        want = (
            work.latency_s + (h.median_s - work.latency_s) * 4.8 / 3.35
        )  # H200 vs H100 datasheet HBM (TB/s)
        assert c.median_s == pytest.approx(want, rel=1e-6)


def test_the_ceilings_set_the_saturation_and_a_row_below_the_knee_is_concurrency_bound(h200_tables, gpus):
    """Rule 2b: the ceiling rows give what HBM and the tensor cores deliver at saturation (kernels.md §1 [M]:
    4.24 TB/s, 775 BF16 / 1432 FP8 TFLOP/s); a row below KNEE of both keeps its H200 time on a GPU with the same
    SMs and clock (the H100) and scales with SM count x clock on the B200, never below the floors there."""
    sat = saturation(h200_tables)
    assert sat.bandwidth == pytest.approx(4240.42e9 / 4.8e12, rel=1e-3)
    assert sat.compute_of("bf16") == pytest.approx(774.53 / 989.0, rel=1e-3)
    assert sat.compute_of("fp8") == pytest.approx(1432.37 / 1979.0, rel=1e-3)
    h100 = carry_tables(h200_tables, gpus["nvidia-h100-hgx8"])
    b200 = carry_tables(h200_tables, gpus["nvidia-b200-hgx8"])
    assert gpus["nvidia-b200-hgx8"].sm_rate == pytest.approx(148 * 1980e6)
    low = [(h, c, b) for (h, c), (_, b) in zip(_pairs(h200_tables, h100, family="gemm_dense"),
                                               _pairs(h200_tables, b200, family="gemm_dense"), strict=True)
           if regime(h, sat) == "concurrency"]  # fmt: skip
    assert len(low) > 20
    for h, c, b in low:
        work = work_of(h)
        assert work.bandwidth_frac < KNEE * sat.bandwidth
        assert c.median_s == pytest.approx(h.median_s, rel=1e-9)
        scaled = work.latency_s + (h.median_s - work.latency_s) * H200_SM_RATE / (148 * 1980e6)
        assert b.median_s >= scaled * (1 - 1e-9) and b.median_s <= h.median_s


def test_a_compute_bound_row_scales_with_the_peak_of_its_precision(h200_tables, b200_tables, gpus):
    pairs = _pairs(h200_tables, b200_tables, family="gemm_dense", kernel="proj_wq_b", rows=8192.0)
    assert pairs
    share = gpus[
        "nvidia-b200-hgx8"
    ].gemm_frac  # rule 3b: a GEMM at the B200's measured fraction over the H200's
    for h, c in pairs:
        work = work_of(h)
        assert work.compute_bound
        peak = (1979.0, 4500.0) if (h.compute_ceiling_TFLOPs or 0) >= 1000 else (989.0, 2250.0)
        want = LAUNCH_S + (h.median_s - LAUNCH_S) * peak[0] / peak[1] / share  # still compute-bound on B200
        assert c.median_s == pytest.approx(want, rel=1e-6)


def test_gemms_carry_at_each_gpus_measured_fraction_of_its_fp8_peak(h200_tables, gpus):
    """Rule 3b: the profiles' measured large-GEMM fractions (AIConfigurator's fp8_block GEMMs) over the H200's; a
    compute-bound GEMM row slows by it, a compute-bound row of another class does not; unmeasured GPUs keep 1."""
    from dataclasses import replace

    assert gpus["nvidia-h200-hgx8"].gemm_frac == 1.0
    assert gpus["nvidia-b200-hgx8"].gemm_frac == pytest.approx(0.570 / 0.606)
    assert gpus["nvidia-h100-hgx8"].gemm_frac == pytest.approx(0.619 / 0.606)
    assert GpuPeaks.of(load_hw("amd-mi300x-ubb8")).gemm_frac == 1.0
    b200 = gpus["nvidia-b200-hgx8"]
    plain = carry_tables(h200_tables, replace(b200, gemm_frac=1.0))
    measured = carry_tables(h200_tables, b200)
    sat = saturation(h200_tables)
    order = [r for r in h200_tables.rows if r.family != "pipeline"] + [
        r for r in h200_tables.rows if r.family == "pipeline"
    ]
    slower = 0
    for h, p, m in zip(order, plain.rows, measured.rows, strict=True):
        if h.family in ("gemm_dense", "gemm_grouped"):
            assert m.median_s >= p.median_s  # a GEMM is never faster for its lower fraction
            slower += regime(h, sat) == "compute" and m.median_s > p.median_s * 1.05
        else:
            assert m.median_s == p.median_s  # attention, mHC, the rest: rule 3
    assert slower > 0


def test_blackwell_runs_the_experts_in_mxfp4(h200_tables, b200_tables):
    sat = saturation(h200_tables)
    pairs = _pairs(h200_tables, b200_tables, family="gemm_grouped", kernel="moe_gate_up", fmt="fp8_rowwise")
    streaming = [(h, c) for h, c in pairs if regime(h, sat) == "bandwidth"]
    assert streaming
    for h, c in streaming:  # weight streaming: FP8 bytes -> MXFP4 bytes, 4.8 -> 8 TB/s
        weights = h.groups * h.n * h.k
        nbytes = h.bytes - weights + weights * MXFP4_BYTES_PER_WEIGHT
        want = LAUNCH_S + (h.median_s - LAUNCH_S) * (nbytes / h.bytes) * (4.8 / 8.0)
        assert c.median_s == pytest.approx(want, rel=1e-6)
        assert c.median_s < h.median_s / 2.5


def test_blackwell_expert_mma_rate_follows_the_activations(h200_tables, gpus):
    """An FP8 x FP4 expert GEMM (W4A8, the engines' MXFP4 runners) is tcgen05 kind::mxf8f6f4 at the FP8 rate; only
    W4A4 (an NVFP4 checkpoint) reaches the FP4 peak: a compute-bound expert row takes twice as long in W4A8."""
    b200 = load_hw("nvidia-b200-hgx8")
    w4a8 = carry_tables(h200_tables, GpuPeaks.of(b200))
    w4a4 = carry_tables(h200_tables, GpuPeaks.of(b200, "fp4"))
    assert GpuPeaks.of(b200) == gpus["nvidia-b200-hgx8"]  # W4A8 is the default
    sat = saturation(h200_tables)
    compute = [
        (h, a8, a4)
        for (h, a8), (_h, a4) in zip(
            _pairs(h200_tables, w4a8, family="gemm_grouped", kernel="moe_gate_up", fmt="fp8_rowwise"),
            _pairs(h200_tables, w4a4, family="gemm_grouped", kernel="moe_gate_up", fmt="fp8_rowwise"),
            strict=True,
        )
        if regime(h, sat) == "compute"
    ]
    assert compute
    for h, a8, a4 in compute:
        # still compute-bound on the B200: the work at the H200's FP8 fraction of the B200's FP8 / FP4 peak, times
        # rule 3b's measured GEMM share
        share = gpus["nvidia-b200-hgx8"].gemm_frac
        want = (h.median_s - LAUNCH_S) * 1979.0 / 4500.0 / share
        assert a8.median_s - LAUNCH_S == pytest.approx(want, rel=1e-6)
        assert a4.median_s - LAUNCH_S == pytest.approx((a8.median_s - LAUNCH_S) / 2.0, rel=1e-6)
    # non-expert rows do not depend on the experts' activations
    for c8, c4 in zip(w4a8.rows, w4a4.rows, strict=True):
        if c8.family != "gemm_grouped":
            assert c8.median_s == c4.median_s


def test_blackwell_anchors_bound_sparse_mla(h200_tables, b200_tables):
    floor = next(a for a in ANCHORS if a.unit == "s").value
    for h, c in _pairs(h200_tables, b200_tables, family="attention", kernel="sparse_mla_decode"):
        assert c.median_s >= floor and c.median_s >= h.flops / 350e12
    for h, c in _pairs(h200_tables, b200_tables, family="attention", kernel="sparse_mla_prefill"):
        assert c.median_s >= h.flops / 1450e12 * (1 - 1e-12)
    # the decode pipelines carry the anchored kernel: never below its floor either
    for _h, c in _pairs(h200_tables, b200_tables, family="pipeline"):
        assert c.median_s >= floor


def test_efficiency_curves_are_fractions_per_class(h200_tables):
    curves = efficiency_curves(h200_tables)
    assert {c["op_class"] for c in curves} == {"attention", "dense_gemm", "grouped_gemm", "elementwise"}
    for c in curves:
        for key in ("compute_frac", "bandwidth_frac"):
            assert c[key] is None or 0.0 < c[key] <= 1.0
    gemm = {c["rows"]: c for c in curves if c["op_class"] == "dense_gemm"}
    assert gemm[1.0]["compute_frac"] is None and gemm[8192.0]["compute_frac"] > gemm[512.0]["compute_frac"]


@pytest.mark.parametrize("model", ["deepseek-v4-flash", "deepseek-v4.1-flash"])
def test_b200_decode_grows_with_batch(context, h200_tables, model):
    """Weight streaming (experts touched) and attention make the step grow with the batch."""
    timing = make_timing("auto", context(model, hardware="nvidia-b200-hgx8"))
    for ctx_tokens in (8 * K, 128 * K):
        steps = [
            timing.step_s(b, DecodeTerms(context_tokens=ctx_tokens * b), ()) for b in (8, 64, 256, 1024, 4096)
        ]
        assert steps == sorted(steps) and steps[-1] > 1.5 * steps[0], steps


def test_a_models_expert_activations_reach_its_pools_timing(h200_tables):
    """`models[].expert_activations: fp4` (an NVFP4 checkpoint, W4A4) times a B200 pool's experts at the FP4 rate:
    a 16K-token prefill is faster than with the default W4A8, a one-sequence decode (weight streaming) is not."""
    import yaml

    from sim.cluster.build import build_simulation
    from sim.config.errors import validate_or_raise
    from sim.config.scenario import Scenario
    from sim.paths import project_root
    from sim.timing.arith import build_arith
    from sim.timing.batch import PrefillChunk

    case = project_root() / "scenarios" / "validation" / "v4-flash-4xb200-agg.yaml"
    doc = yaml.safe_load(case.read_text())["scenario"]
    assert doc["models"][0]["expert_activations"] == "fp4"  # the recipe's NVFP4 checkpoint
    steps = {}
    for acts in ("fp4", None):
        scn = validate_or_raise(Scenario, {**doc, "models": [{**doc["models"][0], "expert_activations": acts}]},
                                file=str(case))  # fmt: skip
        one = scn.for_model(scn.models[0].name)
        t = (
            build_simulation(one, one.models[0], build_arith(scn.models[0].name), out_dir=None)
            .instances[0]
            .timing
        )
        terms = t.decode_seq_terms(8192, 1)
        steps[acts] = (
            t.step_s(0, DecodeTerms(), [PrefillChunk(16 * K, 0, last_chunk=True)]),
            t.step_s(1, terms, []),
        )
    (prefill4, decode4), (prefill8, decode8) = steps["fp4"], steps[None]
    assert prefill4 < 0.99 * prefill8
    assert decode4 == pytest.approx(decode8, rel=0.02)
