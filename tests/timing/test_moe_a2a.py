"""The MoE all-to-all by the pool's `moe_a2a` (sim.timing.roofline): DeepEP's measured low-latency kernels
in decode steps and normal kernels in steps with prefill rows, none apart for Mega MoE, the link model as
before; a pool asking for DeepEP on a GPU without its measurements is refused with one clear message."""

from __future__ import annotations

import pytest

from sim.config.errors import validate_or_raise
from sim.config.scenario import Scenario
from sim.errors import InputError
from sim.hardware import load_hw
from sim.timing.batch import PrefillChunk
from sim.timing.calibrated import build_calibrated
from sim.timing.factory import deepep_costs
from sim.timing.roofline import Parallelism

K = 1024


def _timing(context, moe_a2a: str, hardware: str = "nvidia-h200-hgx8"):
    ctx = context(hardware=hardware, tp=1, ep=4, dp=4)
    return build_calibrated(
        type(ctx)(**{**ctx.__dict__, "par": Parallelism(gpus=4, tp=1, ep=4, dp=4, moe_a2a=moe_a2a)})
    )


@pytest.mark.parametrize("hardware", ["nvidia-h200-hgx8", "nvidia-b200-hgx8", "nvidia-b300-hgx8"])
def test_deepep_charges_its_measured_kernels_by_the_step_kind(context, hardware):
    link, deepep, mega = (_timing(context, k, hardware) for k in ("link", "deepep", "megamoe"))
    costs = deepep_costs(load_hw(hardware).scale_up.deepep)
    layers = deepep.arith.moe_layers
    for rows in (4, 256, 8192):
        tokens = rows / 4  # every GPU dispatches its own DP rank's rows
        ll = layers * (costs.ll_dispatch.at(tokens) + costs.ll_combine.at(tokens))
        normal = layers * (costs.normal_dispatch.at(tokens) + costs.normal_combine.at(tokens))
        # the rest of the communication (TP all-reduce: none at TP 1, overhead) is the same for every kind
        rest = mega._comm_s(rows)
        assert deepep._comm_s(rows) == pytest.approx(ll + rest, rel=1e-12)
        assert deepep._comm_s(rows, True) == pytest.approx(normal + rest, rel=1e-12)
        assert mega._comm_s(rows, True) == rest
        assert link._comm_s(rows) == link._comm_s(rows, True) > rest  # the link model: one cost, overlapped
    # measured per call, the kernels cost tens of microseconds where the link model charges a few
    assert deepep._comm_s(64) > 3 * link._comm_s(64)
    # a step with a chunk runs the normal kernels: it costs more than the same step decoding only
    terms = deepep.decode_seq_terms(4 * K, 1).scaled(64)
    chunk = [PrefillChunk(2048, 0, last_chunk=True, rank=0)]
    extra_deepep = deepep.step_s(64, terms, chunk) - link.step_s(64, terms, chunk)
    assert extra_deepep == pytest.approx(
        deepep._comm_s(64 + 2048 * 4, True) - link._comm_s(64 + 2048 * 4, True)
    )


def test_deepep_on_a_gpu_without_measurements_is_refused():
    doc = {
        "name": "x",
        "models": ["deepseek-v4-flash"],
        "hardware": "nvidia-h100-hgx8",
        "cluster": {
            "pools": [
                {
                    "name": "w",
                    "role": "colocated",
                    "instances": 1,
                    "gpus_per_instance": 8,
                    "tp": 1,
                    "ep": 8,
                    "dp": 8,
                    "moe_a2a": "deepep",
                }
            ]
        },  # fmt: skip
        "workload": {"benchmark": {"isl_tokens": 1000, "osl_tokens": 100, "concurrency": 4}, "horizon_s": 60},
    }
    with pytest.raises(InputError) as err:
        validate_or_raise(Scenario, doc, file="s.yaml")
    text = str(err.value)
    assert "cluster.pools[0].moe_a2a" in text and "nvidia-h100-hgx8" in text and "scale_up.deepep" in text
    validate_or_raise(Scenario, {**doc, "hardware": "nvidia-h200-hgx8"}, file="s.yaml")  # measured there


def test_deepep_normal_pads_each_experts_rows_in_steps_with_prefill_only(context):
    """SGLang's DeepEP normal mode hands DeepGEMM each expert's rows padded to 128 (section 29): a step holding
    prefill runs its experts at the padded rows, a decode step (DeepEP low-latency, masked GEMM) does not, and
    without the engine's alignment nothing changes."""
    from sim.timing.experts import busiest_rank, contiguous_rows_per_expert, grouped_s

    ctx = context(tp=1, ep=4, dp=4)
    par = Parallelism(gpus=4, tp=1, ep=4, dp=4, moe_a2a="deepep")
    plain = build_calibrated(type(ctx)(**{**ctx.__dict__, "par": par}))
    padded = build_calibrated(type(ctx)(**{**ctx.__dict__, "par": par, "expert_alignment_rows": 128}))
    terms = plain.decode_seq_terms(4 * K, 1).scaled(64)
    assert padded.step_s(64, terms, ()) == plain.step_s(64, terms, ())  # decode: unchanged
    chunks = [PrefillChunk(2048, 0, last_chunk=True, rank=r) for r in range(4)]  # 8,192 rows + 64 decode
    extra = padded.step_s(64, terms, chunks) - plain.step_s(64, terms, chunks)
    rows = 64 + 4 * 2048
    a, mt = plain.arith, plain.mt
    rank = busiest_rank(a.routed_experts, a.top_k, float(rows), 4)
    per = contiguous_rows_per_expert(rows * a.top_k / a.routed_experts, 128)
    assert per > 1.3 * rank.rows_per_expert  # ~192 rows an expert -> 256

    def experts(m):
        return grouped_s(mt.moe_gate_up, rank.experts, m) + grouped_s(mt.moe_down, rank.experts, m)

    expected = mt.every.moe_layers * (experts(per) - experts(rank.rows_per_expert)) * plain._gemm_scale
    assert extra == pytest.approx(expected, rel=1e-9)
    assert extra > 1e-3  # milliseconds a step on the H200


def test_the_alignment_is_sglangs_rule_on_deepep_pools():
    from sim.config.engine_rules import Engine, deepep_expert_alignment_rows

    assert deepep_expert_alignment_rows(Engine(name="sglang", version="0.5.15")) == 128
    assert deepep_expert_alignment_rows(Engine(name="vllm", version="0.23.0")) == 1  # not read for vLLM
    assert deepep_expert_alignment_rows(None) == 1


def test_a_run_pads_on_sglang_deepep_pools_and_not_on_mega_moe_or_tp_pools(case_timing):
    assert case_timing("sglang-v4-flash-4xh200-high-throughput-c1024.yaml")._align_rows == 128  # DeepEP
    assert case_timing("sglang-v4-flash-4xb200-high-throughput-c1024.yaml")._align_rows == 1  # Mega MoE
    assert case_timing("sglang-v4-flash-4xb200-low-latency-c1.yaml")._align_rows == 1  # TP experts, no DeepEP
