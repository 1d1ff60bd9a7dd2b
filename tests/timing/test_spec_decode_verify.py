"""The verify step of speculative decoding: its extra query rows are counted in the GEMMs, the attention
FLOPs and the communication, its KV once, and the drafter's FLOPs from the model arithmetic."""

from __future__ import annotations

import pytest

from sim import model as m
from sim.timing.batch import DecodeTerms, PrefillChunk
from sim.timing.calibrated import build_calibrated
from sim.timing.factory import make_timing

V4, V41 = "deepseek-v4-flash", "deepseek-v4.1-flash"


def _roofline(context, model, **spec):
    return make_timing("roofline", context(model, **spec))


@pytest.mark.parametrize(("model", "draft", "rows"), [(V4, 1, 2), (V41, 5, 4), (V41, 5, 6)])
def test_roofline_verify_step_cost_by_hand(context, model, draft, rows):
    t = _roofline(context, model, accepted_tokens_per_step=1.5, draft_tokens=draft, verify_rows=rows)
    a, hw, par, eff = t.arith, t.hw, t.par, t.eff
    batch, ctx_tokens = 32, 65_536
    attn_flops, kv_bytes = a.decode_table.at(ctx_tokens)  # per sequence, per query row / once
    draft_flops = m.draft_step_flops(a.spec, draft)  # per sequence
    # the drafter: its drafting per sequence and its pass over each verified row (section 33)
    row_flops = a.dense_flops_per_token + m.draft_row_flops(a.spec)
    compute = (batch * rows * row_flops + batch * draft_flops) / (
        par.gpus * hw.fp8_flops_per_s * eff.mfu_decode
    ) + batch * rows * attn_flops / (par.gpus * hw.bf16_flops_per_s * eff.mfu_decode)
    hbm = hw.hbm_bw_bytes_per_s * eff.hbm_bw_frac
    memory = (a.dense_weight_bytes / par.tp + a.expert_bytes_touched(batch * rows) / par.ep) / hbm + (
        batch * kv_bytes / (par.dp * hbm)  # the KV is read once for all the rows of a sequence
    )
    expected = max(compute, memory) + t._comm_s(batch * rows)
    terms = DecodeTerms(attn_row_flops=batch * attn_flops, kv_read_bytes=batch * kv_bytes)
    assert t.step_s(batch, terms, ()) == pytest.approx(expected, rel=1e-12)
    assert t.verified_tokens_per_step == rows


def test_drafter_flops_scale_with_the_drafted_tokens(arith):
    spec = m.load_model(V41)
    assert m.draft_step_flops(spec, 5) == pytest.approx(m.draft_step_flops(spec))  # DSpark blocks of 5
    assert arith(V41).draft_step_flops(5) == pytest.approx(m.draft_step_flops(spec))
    assert arith(V41).draft_step_flops(0) == 0.0 and arith(V41).draft_row_flops == m.draft_row_flops(spec)
    # DSpark drafts its positions in parallel: linear in them; MTP: a head each, a block pass after the first
    assert m.draft_step_flops(spec, 2) == pytest.approx(2 * m.draft_step_flops(spec, 1))
    v4 = m.load_model(V4)
    head, block = m.draft_step_flops(v4, 1), m.draft_row_flops(v4)
    assert m.draft_step_flops(v4, 2) == pytest.approx(2 * head + block)


def test_fewer_verified_rows_cost_less_at_a_compute_bound_batch(context):
    four, six = (
        _roofline(context, V41, accepted_tokens_per_step=2.5, draft_tokens=5, verify_rows=r) for r in (4, 6)
    )
    batch = 512  # far past the ridge: the step is GEMM + attention FLOPs
    terms = four.decode_seq_terms(131_072, 1).scaled(batch)
    assert six.step_s(batch, terms, ()) > 1.3 * four.step_s(batch, terms, ())


@pytest.mark.parametrize("kernels", ["production", "kernels_bench"])
def test_calibrated_verify_step_counts_rows_and_drafter(context, h200_tables, kernels):
    """The verify step's GEMMs, communication and logits see every row; its attention is the stack's
    verify pipelines at the sequences (production: sim.timing.stacks rule 5) or, in a stack without them,
    the plain pipelines with the rows timed as sequences (an upper bound)."""
    batch, rows, draft = 16, 4, 5
    spec = build_calibrated(
        context(V41, accepted_tokens_per_step=2.5, draft_tokens=draft, verify_rows=rows, kernels=kernels)
    )
    plain = build_calibrated(context(V41, kernels=kernels))
    # the drafter: its drafting per sequence and its pass over each verified row (section 33)
    a = spec.arith
    share = (a.draft_step_flops(draft) / rows + a.draft_row_flops) / a.dense_flops_per_token
    ctx = 65_536.0
    verify = spec.mt.spec_pipelines.get(rows)
    assert (verify is not None) == (kernels == "production")
    attention = (
        sum(n * g.at(ctx, batch / 8) for g, n in verify.values())  # 16 sequences over dp 8
        if verify
        else plain._attn_curve(batch * rows).at(ctx)
    )
    expected = (
        plain._pass_s(batch * rows, batch * rows) * (1.0 + share)
        + plain._comm_s(batch * rows)
        + plain.head_s(batch * rows)  # logits of every verified row
        + attention
    )
    terms = DecodeTerms(context_tokens=batch * ctx)
    assert spec.step_s(batch, terms, ()) == pytest.approx(expected, rel=1e-12)
    if verify:  # 4 rows: FlashMLA's s_q rows and the indexer as sequences (SM90: next_n <= 2), near the old
        assert attention == pytest.approx(plain._attn_curve(batch * rows).at(ctx), rel=0.1)


@pytest.mark.parametrize("model", [V4, V41])
def test_a_chunk_pays_the_drafters_pass_over_its_tokens(context, model):
    """SGLang's EAGLE draft extend over every new token of a prefill batch, vLLM's proposer over every scheduled
    token, DSpark's projection of each context row into its blocks' KV (docs/engines_and_validation.md section
    33): a chunk-only step with speculative decoding costs the drafter's FLOP share of the chunk's pass more."""
    chunk = [PrefillChunk(8192, 4096, last_chunk=True)]
    spec = {"accepted_tokens_per_step": 1.9, "draft_tokens": 1, "verify_rows": 2}
    with_spec = build_calibrated(context(model, tp=4, ep=4, dp=1, **spec))
    without = build_calibrated(context(model, tp=4, ep=4, dp=1))
    a = with_spec.arith
    assert with_spec._row_draft_share == pytest.approx(m.draft_row_flops(a.spec) / a.dense_flops_per_token)
    assert without._row_draft_share == 0.0
    extra = with_spec._row_draft_share * with_spec._pass_s(8192, 8192)
    assert 0.0 < extra < 0.03 * without.step_s(0, DecodeTerms(), chunk)
    assert with_spec.step_s(0, DecodeTerms(), chunk) - without.step_s(
        0, DecodeTerms(), chunk
    ) == pytest.approx(extra, rel=1e-9)
    # the roofline charges the same FLOPs at its prefill GEMM rate: compute-bound, exactly them
    roof, plain = (
        _roofline(context, model, tp=4, ep=4, dp=1, **spec),
        _roofline(context, model, tp=4, ep=4, dp=1),
    )
    more = roof.step_s(0, DecodeTerms(), chunk) - plain.step_s(0, DecodeTerms(), chunk)
    assert more == pytest.approx(8192 * m.draft_row_flops(a.spec) / roof._dense_rate_prefill, rel=1e-9)
