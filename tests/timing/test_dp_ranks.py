"""A step with prefill chunks on an instance with DP attention lasts as long as its slowest rank:
each chunk runs on its request's rank, the experts see every rank's rows (sim.timing.calibrated,
`_dp_mixed_s`)."""

from __future__ import annotations

import pytest

from sim.timing.batch import DecodeTerms, PrefillChunk
from sim.timing.calibrated import build_calibrated
from sim.timing.interp import chunk_parts
from sim.timing.roofline import RooflineTiming

K = 1024
MODELS = ("deepseek-v4-flash", "deepseek-v4.1-flash")


@pytest.fixture(scope="module")
def dp8(context):
    """Calibrated H200 timings, 8 GPUs TP 1 / EP 8 / DP 8, speculative decoding as in runs."""
    return {m: build_calibrated(context(m, accepted_tokens_per_step=1.85, draft_tokens=1)) for m in MODELS}


def _decode(t, batch, context_tokens):
    return t.decode_seq_terms(context_tokens, 1).scaled(batch)


def _attn_flops(t, c: PrefillChunk) -> float:
    return chunk_parts(t._prefill_every, t._prefill_tail, c.new_tokens, c.context_tokens, c.last_chunk)[1]


def _balanced_s(t, batch, terms, chunks) -> float:
    """The step with every chunk's rows and attention spread evenly over the DP groups (the model
    before chunks had ranks): what a step with equal chunks on every rank must cost."""
    verify, tail_tokens = t.verified_tokens_per_step, t.mt.tail_tokens
    decode_rows = batch * verify
    every = tail = decode_rows
    attn = t._attn_curve(batch).at(terms.context_tokens / batch) if batch else 0.0
    for c in chunks:
        if t.par.tp > 1:  # the TP GPUs split the MLA by heads, the indexer is replicated
            attn += t._heads_attention_s(_attn_flops(t, c), c.new_tokens, c.context_tokens)
        else:
            attn += (
                _attn_flops(t, c)
                / t.par.gpus
                * t.prefill_attention_s_per_flop(c.new_tokens, c.context_tokens)
            )
        every += c.new_tokens
        if c.last_chunk and tail_tokens:
            tail += min(c.context_tokens + c.new_tokens, tail_tokens)
    tail = tail if tail_tokens else every
    drafter = t._draft_share * t._pass_s(decode_rows, decode_rows) if decode_rows else 0.0
    prompt = every - decode_rows  # the drafter's pass over the prompt tokens: its FLOP share of theirs
    drafter += t._row_draft_share * t._pass_s(prompt, prompt)
    head = t.head_s(decode_rows + len(chunks))
    return t._pass_s(every, tail) + drafter + attn + head + t._comm_s(every)


def _draft_prompt_s(t, rank_rows, rows):
    """The drafter's pass over `rows` prompt tokens, `rank_rows` on the busiest rank (docs/engines_and_validation.md
    section 33): its FLOP share of the rank's own work on them, the term's per-row part and the experts."""
    spread = -(-rows // t.par.dp)
    own = t._rank_s(True, rank_rows) + t._rank_s(False, rank_rows)
    own += t._row_term_s(True, spread) + t._row_term_s(False, spread)
    return t._row_draft_share * (own + t._experts_s(True, rows) + t._experts_s(False, rows))


@pytest.mark.parametrize("model", MODELS)
def test_chunks_on_every_rank_cost_the_balanced_step(dp8, model):
    t = dp8[model]
    for batch in (0, 64, 256):  # decode rows divisible by the 8 ranks
        terms = _decode(t, batch, 64 * K)
        chunks = [PrefillChunk(2048, 60 * K, last_chunk=True, rank=r) for r in range(8)]
        assert t.step_s(batch, terms, chunks) == pytest.approx(
            _balanced_s(t, batch, terms, chunks), rel=1e-12
        )


@pytest.mark.parametrize("model", MODELS)
def test_one_4k_chunk_costs_its_rank_not_an_eighth_of_it(dp8, model):
    t = dp8[model]
    batch, terms = 128, _decode(t, 128, 64 * K)
    decode = t.step_s(batch, terms, ())
    one = PrefillChunk(4096, 60 * K, last_chunk=True, rank=3)
    alone = t.step_s(batch, terms, [one])
    # the slowest rank's own work, plus the experts over every rank's rows and the all-to-all at its rows
    share = batch * t.verified_tokens_per_step // 8
    rows = batch * t.verified_tokens_per_step + 4096
    tail = min(60 * K + 4096, t.mt.tail_tokens) if t.mt.tail_tokens else 0
    slowest = (
        _attn_flops(t, one) / 1 * t.prefill_attention_s_per_flop(4096, 60 * K)  # TP 1
        + t._rank_s(True, share + 4096)
        + t._rank_s(False, share + (tail or 4096))
        + t._head_rank_s(share + 1)  # its decode rows' logits and the chunk's last row
        # the term's per-row part with the experts: every rank's rows spread evenly
        + t._row_term_s(True, -(-rows // 8))
        + t._row_term_s(False, -(-(share * 8 + tail if tail else rows) // 8))
    )
    experts = t._experts_s(True, rows) + t._experts_s(False, share * 8 + tail if tail else rows)
    drafter = t._draft_share * t._pass_s(share * 8, share * 8) + _draft_prompt_s(t, 4096, 4096)
    assert (
        0.0 < _draft_prompt_s(t, 4096, 4096) < 0.05 * slowest
    )  # one drafter block against the target's layers
    attn = t._attn_curve(batch).at(terms.context_tokens / batch)
    assert alone == pytest.approx(
        attn + slowest + experts + drafter + t._comm_s((share + 4096) * 8), rel=1e-12
    )
    # the rank does all of the chunk: far more than the same tokens spread over the ranks
    spread = t.step_s(batch, terms, [PrefillChunk(512, 60 * K, last_chunk=True, rank=r) for r in range(8)])
    assert alone - decode > 3.0 * (spread - decode)
    # which rank holds it does not matter; a smaller chunk on another rank hides behind it: only the
    # experts and the term's per-row part (expert work, spread over the ranks) see its rows
    assert t.step_s(batch, terms, [PrefillChunk(4096, 60 * K, last_chunk=True, rank=0)]) == pytest.approx(
        alone
    )
    both = t.step_s(batch, terms, [one, PrefillChunk(1024, 60 * K, last_chunk=True, rank=5)])
    tail_rows = share * 8 + tail if tail else rows
    more_experts = (
        t._experts_s(True, rows + 1024)
        - t._experts_s(True, rows)
        + t._experts_s(False, tail_rows + (tail or 1024))
        - t._experts_s(False, tail_rows)
    )
    more_term = (
        t._row_term_s(True, -(-(rows + 1024) // 8))
        - t._row_term_s(True, -(-rows // 8))
        + t._row_term_s(False, -(-(tail_rows + (tail or 1024)) // 8))
        - t._row_term_s(False, -(-tail_rows // 8))
    )
    more_draft = _draft_prompt_s(t, 4096, 5120) - _draft_prompt_s(t, 4096, 4096)
    assert both - alone == pytest.approx(more_experts + more_term + more_draft, rel=1e-6, abs=1e-12)


def test_a_chunk_outside_the_ranks_is_refused(dp8):
    t = dp8["deepseek-v4-flash"]
    with pytest.raises(ValueError, match="DP rank 8"):
        t.step_s(0, DecodeTerms(), [PrefillChunk(1024, 0, rank=8)])


@pytest.mark.parametrize("model", MODELS)
def test_without_dp_the_step_is_unchanged(context, model):
    # TP 8 / DP 1: one group holds every row, as before chunks had ranks
    t = build_calibrated(context(model, tp=8, ep=8, dp=1))
    for batch in (0, 32):
        terms = _decode(t, batch, 32 * K)
        chunks = [PrefillChunk(4096, 16 * K, last_chunk=True), PrefillChunk(2048, 0)]
        assert t.step_s(batch, terms, chunks) == _balanced_s(t, batch, terms, chunks)


@pytest.mark.parametrize("model", MODELS)
def test_where_ranks_pick_their_own_batch_a_chunk_rank_holds_no_decode_rows(dp8, model):
    # SGLang with DP attention and no speculative decoding (sim.sched.batcher, rank_prefill_first): the rank
    # holding the chunk runs it alone; the 128 decoding sequences sit on the other 7 ranks
    t = dp8[model]
    batch, terms = 128, _decode(t, 128, 64 * K)
    one = PrefillChunk(4096, 60 * K, last_chunk=True, rank=3)
    alone = t.rank_step_s(batch, terms, [one])
    verify = t.verified_tokens_per_step
    decode_rows = batch * verify
    share = -(-decode_rows // 7)  # a decoding rank's rows: the decode rows over the 7 ranks without a chunk
    tail = min(60 * K + 4096, t.mt.tail_tokens) if t.mt.tail_tokens else 0
    chunk_rank = (  # the chunk's own work, no decode rows beside it: one row needing logits
        _attn_flops(t, one) * t.prefill_attention_s_per_flop(4096, 60 * K)  # TP 1
        + t._rank_s(True, 4096)
        + t._rank_s(False, tail or 4096)
        + t._head_rank_s(1)
    )
    decode_rank = (  # decode attention at the 19 sequences of a decoding rank, its rows and their logits
        t._attn_curve(-(-batch // 7) * 8).at(terms.context_tokens / batch)
        + t._rank_s(True, share)
        + t._rank_s(False, share)
        + t._head_rank_s(share)
    )
    rows = decode_rows + 4096
    tail_rows = decode_rows + tail if tail else rows
    expected = (
        max(chunk_rank, decode_rank)
        + t._row_term_s(True, -(-rows // 8))
        + t._row_term_s(False, -(-tail_rows // 8))
        + t._experts_s(True, rows)
        + t._experts_s(False, tail_rows)
        + t._draft_share * t._pass_s(decode_rows, decode_rows)
        + _draft_prompt_s(t, 4096, 4096)
        + t._comm_s(4096 * 8)
    )
    assert alone == pytest.approx(expected, rel=1e-12)
    # the same step with the decode rows spread over every rank (the chunk rank too) costs more: the
    # chunk rank, the slowest, no longer carries its 32 decode rows
    assert t.step_s(batch, terms, [one]) > alone
    # with a chunk on every rank nothing may decode; no decoding sequences: the flag changes nothing
    every = [PrefillChunk(2048, 60 * K, last_chunk=True, rank=r) for r in range(8)]
    with pytest.raises(ValueError, match="every one of the 8 DP ranks"):
        t.rank_step_s(batch, terms, every)
    assert t.rank_step_s(0, DecodeTerms(), every) == t.step_s(0, DecodeTerms(), every)
    # a decode-only step is every rank's decode step
    assert t.rank_step_s(batch, terms, ()) == t.step_s(batch, terms, ())


def test_the_roofline_reads_only_the_sequences_passed(context):
    # it spreads every row over the instance's GPUs whatever its rank: where the decoding sequences sit
    # changes nothing there
    ctx = context("deepseek-v4-flash")
    roof = RooflineTiming(ctx.arith, ctx.hw, ctx.par, ctx.eff)
    terms, one = _decode(roof, 128, 64 * K), [PrefillChunk(4096, 60 * K, last_chunk=True, rank=3)]
    assert roof.rank_step_s(128, terms, one) == roof.step_s(128, terms, one)
