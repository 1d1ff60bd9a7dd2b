"""The roofline timing: closed-form decode spans equal step-by-step sums, the inverse is exact,
and the tables reproduce sim.model's arithmetic."""

import math
import random
from dataclasses import replace

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from sim import model as m
from sim.config.timing import Timing
from sim.hardware import load_hw
from sim.timing.arith import build_arith
from sim.timing.batch import DecodeTerms, PrefillChunk
from sim.timing.factory import (
    TimingContext,
    efficiency,
    hw_rates,
    make_timing,
    profile_achievable,
    resolve_timing_name,
)
from sim.timing.roofline import Parallelism, RooflineTiming, _span, _split, _steps_within, _sum_max_lines


def _timing(model="deepseek-v4.1-flash", accepted=1.0, draft=0, tp=1, dp=8, ep=8) -> RooflineTiming:
    hw = load_hw("nvidia-h200-hgx8")
    achievable = profile_achievable(hw)
    return RooflineTiming(
        build_arith(model),
        hw_rates(hw, 10e-6),
        Parallelism(gpus=tp * dp, tp=tp, ep=ep, dp=dp),
        efficiency(achievable, Timing()),
        accepted_tokens_per_step=accepted,
        draft_tokens=draft,
    )


@pytest.mark.parametrize("model", ["deepseek-v4-flash", "deepseek-v4.1-flash"])
@pytest.mark.parametrize("spec", [(1.0, 0), (1.7, 1)])
def test_span_equals_the_sum_of_its_steps(model, spec):
    t = _timing(model, *spec)
    rng = random.Random(1)
    batch = 24
    terms = DecodeTerms()
    for _ in range(batch):  # contexts beyond every cap (16,384): the terms are linear there
        terms.add(t.decode_seq_terms(rng.randint(20_000, 600_000), 400))
    steps = 300
    by_step = sum(t.step_s(batch, terms.after(k), ()) for k in range(steps))
    assert t.decode_span_s(batch, terms, steps) == pytest.approx(by_step, rel=1e-12)
    k, end = t.decode_step_end(batch, terms, by_step * 0.37)
    assert end == t.decode_span_s(batch, terms, k)
    assert t.decode_span_s(batch, terms, k - 1) <= by_step * 0.37 < end


@settings(max_examples=200, deadline=None)
@given(
    c0=st.floats(1e-5, 1e-2), m0=st.floats(1e-5, 1e-2), c1=st.floats(0, 1e-5), m1=st.floats(0, 1e-5),
    added=st.floats(0, 1e-3), steps=st.integers(0, 2000), frac=st.floats(0, 1),
)  # fmt: skip
def test_max_of_two_lines_closed_form(c0, m0, c1, m1, added, steps, frac):
    brute = sum(max(c0 + c1 * k, m0 + m1 * k) for k in range(steps))
    assert _sum_max_lines(c0, c1, m0, m1, steps) == pytest.approx(brute, rel=1e-9, abs=1e-15)
    split = _split(c0, c1, m0, m1)
    elapsed = frac * (_span(*split, added, steps) if steps else 1.0)
    k = _steps_within(*split, added, elapsed)
    assert _span(*split, added, k) <= elapsed < _span(*split, added, k + 1)


@pytest.mark.parametrize("model", ["deepseek-v4-flash", "deepseek-v4.1-flash"])
def test_decode_terms_match_model_arithmetic(model):
    spec = m.load_model(model)
    table = build_arith(model).decode_table
    # exact at the knots (every 128 tokens, where all caps lie); between them the tables
    # interpolate floor(L / ratio) staircases linearly
    for ctx, rel in ((0, 1e-9), (128, 1e-9), (1024, 1e-9), (2048, 1e-9), (16_384, 1e-9), (1_048_576, 1e-9),
                     (1000, 2e-2), (70_001, 1e-3), (333_333, 1e-3)):  # fmt: skip
        cost = m.decode_cost(spec, ctx)
        flops, kv = table.at(ctx)
        assert flops == pytest.approx(cost.attention_flops + cost.index_flops, rel=rel, abs=1.0)
        assert kv == pytest.approx(cost.kv_read_bytes, rel=rel, abs=1.0)


@pytest.mark.parametrize("model", ["deepseek-v4-flash", "deepseek-v4.1-flash"])
def test_prefill_tables_match_model_arithmetic(model):
    spec = m.load_model(model)
    arith = build_arith(model)
    rng = random.Random(3)
    for _ in range(60):
        new = rng.choice([64, 500, 2048, 8192, 16_384])
        cached = rng.choice([0, 300, 5000, 16_000, 70_000, 300_000, 1_000_000])
        last = rng.random() < 0.5
        exact = m.prefill_cost(spec, new, cached, last_chunk=last)
        dense, attn, _kv = arith.prefill_parts(new, cached, last)
        assert dense == pytest.approx(exact.dense_flops, rel=5e-3)
        assert attn == pytest.approx(exact.attention_flops + exact.index_flops, rel=5e-3)


def test_published_decode_step_at_batch_one_is_memory_bound():
    # V4.1 at 4K context, batch 1, TP8 on one H200 node: weights ~13 GB (model.md §7.2) read at
    # 8 x 4.8 TB/s x 0.88 dominate; the step lies between the weight read and twice that
    t = _timing("deepseek-v4.1-flash", tp=8, dp=1)
    step = t.step_s(1, t.decode_seq_terms(4096, 1), ())
    weights_s = 13.03e9 / (8 * 4.8e12 * 0.88)
    assert weights_s < step < 2 * weights_s + 1e-3


def test_speculative_decoding_advances_more_tokens_per_step():
    plain, spec = _timing(accepted=1.0, draft=0), _timing(accepted=2.5, draft=5)
    assert spec.verified_tokens_per_step == 6 and spec.accepted_tokens_per_step == 2.5
    batch = plain.decode_seq_terms(100_000, 1).scaled(8)
    # per accepted token, the speculative step is cheaper when decode is memory-bound
    assert spec.step_s(8, batch, ()) / 2.5 < plain.step_s(8, batch, ())


def test_auto_timing_falls_back_to_roofline_without_a_calibrated_model():
    hw = load_hw("nvidia-h200-hgx8")
    assert resolve_timing_name("auto", hw) in ("roofline", "calibrated")
    assert resolve_timing_name("roofline", hw) == "roofline"


def test_factory_builds_the_roofline():
    hw = load_hw("nvidia-h200-hgx8")
    t = _timing()
    ctx = TimingContext.of_instance("deepseek-v4.1-flash", t.arith, hw, t.par, Timing())
    assert ctx.eff == replace(t.eff, step_overhead_s=t.eff.step_overhead_s * t.arith.layers)
    t = RooflineTiming(ctx.arith, ctx.hw, ctx.par, ctx.eff, accepted_tokens_per_step=1.0, draft_tokens=0)
    built = make_timing("roofline", ctx)
    assert isinstance(built, RooflineTiming)
    assert math.isclose(
        built.step_s(0, DecodeTerms(), [PrefillChunk(8192, 0, last_chunk=True)]),
        t.step_s(0, DecodeTerms(), [PrefillChunk(8192, 0, last_chunk=True)]),
    )
