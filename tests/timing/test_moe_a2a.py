"""The MoE all-to-all by the pool's `moe_a2a` (sim.timing.roofline): DeepEP's measured low-latency kernels
in decode steps and normal kernels in steps with prefill rows, none apart for Mega MoE, the link model as
before; a pool asking for DeepEP on a GPU without its measurements is refused with one clear message."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from sim.config.errors import validate_or_raise
from sim.config.scenario import Scenario
from sim.errors import InputError
from sim.hardware import load_hw
from sim.timing.batch import PrefillChunk
from sim.timing.calibrated import build_calibrated
from sim.timing.comm import deepep_destination_ranks, deepep_normal_per_token_s
from sim.timing.factory import deepep_costs
from sim.timing.roofline import Parallelism

K = 1024


def _timing(context, moe_a2a: str, hardware: str = "nvidia-h200-hgx8", sms: int = 20, ep: int = 4):
    ctx = context(hardware=hardware, tp=1, ep=ep, dp=ep)
    par = Parallelism(gpus=ep, tp=1, ep=ep, dp=ep, moe_a2a=moe_a2a, deepep_normal_sms=sms)
    return build_calibrated(type(ctx)(**{**ctx.__dict__, "par": par}))


@pytest.mark.parametrize("hardware", ["nvidia-h200-hgx8", "nvidia-b200-hgx8", "nvidia-b300-hgx8"])
def test_deepep_charges_its_measured_kernels_by_the_step_kind(context, hardware):
    link, deepep, mega = (_timing(context, k, hardware) for k in ("link", "deepep", "megamoe"))
    costs = deepep_costs(load_hw(hardware).scale_up.deepep)
    layers = deepep.arith.moe_layers
    for rows in (4, 256, 8192):
        tokens = rows / 4  # every GPU dispatches its own DP rank's rows
        ll = layers * (costs.ll_dispatch.at(tokens) + costs.ll_combine.at(tokens))
        d, c = costs.normal_at(
            ep=4,
            sms=20,
            hidden=deepep.arith.hidden,
            experts=deepep.arith.routed_experts,
            top_k=deepep.arith.top_k,
            link_bw_bytes_per_s=deepep._comm_bw,
        )
        normal = layers * (d.at(tokens) + c.at(tokens))
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


def test_a_token_goes_once_to_each_rank_holding_one_of_its_experts():
    """deepep_destination_ranks against counting every top-k choice of a small model."""
    import itertools

    experts, top_k = 8, 3
    for ep in (1, 2, 4, 8):
        per = experts // ep
        choices = list(itertools.combinations(range(experts), top_k))
        counted = sum(len({e // per for e in c}) for c in choices) / len(choices)
        assert deepep_destination_ranks(ep, experts, top_k) == pytest.approx(counted)
    # V4-Flash (256 experts, top-6): 4.44 ranks a token at EP 8, 3.30 at EP 4
    assert deepep_destination_ranks(8, 256, 6) == pytest.approx(4.44, abs=0.01)
    assert deepep_destination_ranks(4, 256, 6) == pytest.approx(3.30, abs=0.01)


@settings(max_examples=200, deadline=None)
@given(
    measured=st.floats(1e-9, 1e-6),
    share=st.floats(0.0, 1.0),
    sms=st.integers(2, 160),
    ratio=st.floats(0.1, 1.0),
    floor=st.floats(0.0, 1e-6),
)
def test_the_normal_per_token_time_follows_sms_and_pairs_above_the_link_floor(measured, share, sms, ratio, floor):
    t = deepep_normal_per_token_s(
        measured, sm_frac=share, measured_sms=20, sms=sms, destinations_ratio=ratio, link_floor_s=floor
    )
    assert t >= floor
    more = deepep_normal_per_token_s(
        measured, sm_frac=share, measured_sms=20, sms=sms + 2, destinations_ratio=ratio, link_floor_s=floor
    )
    assert more <= t  # more SMs never slower
    # at the measured SMs and ranks, above the floor, the measured time itself
    assert deepep_normal_per_token_s(
        measured, sm_frac=share, measured_sms=20, sms=20, destinations_ratio=1.0, link_floor_s=0.0
    ) == pytest.approx(measured)


@pytest.mark.parametrize("hardware", ["nvidia-h200-hgx8", "nvidia-b200-hgx8", "nvidia-b300-hgx8"])
def test_the_cells_96_sms_and_four_ranks_make_deepep_normal_cheaper_and_leave_decode(context, hardware):
    costs = deepep_costs(load_hw(hardware).scale_up.deepep)
    at20, at96 = _timing(context, "deepep", hardware), _timing(context, "deepep", hardware, sms=96)
    a = at20.arith
    kw = dict(hidden=a.hidden, experts=a.routed_experts, top_k=a.top_k, link_bw_bytes_per_s=at20._comm_bw)
    # at the tables' own EP and SMs: the measured calls
    d8, c8 = costs.normal_at(ep=costs.measured_ep_gpus, sms=costs.measured_sms, **kw)
    for got, measured in ((d8, costs.normal_dispatch), (c8, costs.normal_combine)):
        assert got.fixed_s == measured.fixed_s and got.per_token_s == pytest.approx(measured.per_token_s, rel=1e-12)
    # four ranks: 3.30 / 4.44 of the pairs, the fixed parts as measured
    d4, c4 = costs.normal_at(ep=4, sms=20, **kw)
    assert d4.per_token_s == pytest.approx(costs.normal_dispatch.per_token_s * 0.744, rel=0.01)
    assert d4.fixed_s == costs.normal_dispatch.fixed_s
    # 96 SMs: per-token at most 0.6 of the 20-SM one, never below the link's time for the remote bytes
    d96, c96 = costs.normal_at(ep=4, sms=96, **kw)
    remote = deepep_destination_ranks(4, a.routed_experts, a.top_k) * 3 / 4
    floor = remote * a.hidden * 2 / at20._comm_bw  # combine's remote BF16 bytes over the link
    assert c96.per_token_s >= floor * (1 - 1e-12)
    for at96_, at20_ in ((d96, d4), (c96, c4)):
        assert at96_.per_token_s < at20_.per_token_s
    # on the B200 / B300 the SMs bind (at most 0.6 of the 20-SM time); the H200's combine sits on its link
    if hardware == "nvidia-h200-hgx8":
        assert c96.per_token_s == pytest.approx(floor)
    else:
        assert d96.per_token_s < 0.6 * d4.per_token_s and c96.per_token_s < 0.6 * c4.per_token_s
    for rows in (256, 16384):
        assert at96._comm_s(rows, True) < at20._comm_s(rows, True)  # prefill steps: cheaper
        assert at96._comm_s(rows) == at20._comm_s(rows)  # decode steps run the low-latency kernels


def _doc(**pool):
    return {
        "name": "x",
        "models": ["deepseek-v4-flash"],
        "hardware": "nvidia-h200-hgx8",
        "cluster": {"pools": [{"name": "w", "role": "colocated", "instances": 1, "gpus_per_instance": 4,
                               "tp": 1, "ep": 4, "dp": 4, **pool}]},  # fmt: skip
        "workload": {"benchmark": {"isl_tokens": 1000, "osl_tokens": 100, "concurrency": 4}, "horizon_s": 60},
    }


@pytest.mark.parametrize(
    "pool, field, words",
    [
        ({"moe_a2a": "deepep", "deepep_normal_sms": 95}, "deepep_normal_sms", "even"),
        ({"moe_a2a": "link", "deepep_normal_sms": 96}, "deepep_normal_sms", "needs moe_a2a deepep"),
        ({"moe_a2a": "deepep", "deepep_normal_sms": 200}, "deepep_normal_sms", "132"),
    ],
)
def test_a_bad_deepep_sm_count_is_refused_with_the_field_and_what_is_allowed(pool, field, words):
    with pytest.raises(InputError) as err:
        validate_or_raise(Scenario, _doc(**pool), file="s.yaml")
    text = str(err.value)
    assert field in text and words in text
    validate_or_raise(Scenario, _doc(moe_a2a="deepep", deepep_normal_sms=96), file="s.yaml")
