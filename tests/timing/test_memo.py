"""The timing models' integer-keyed memo (sim.timing.memo), and that memoised step times are the
values computed afresh (a memo must change speed only)."""

import math

from sim.timing.batch import DecodeTerms, PrefillChunk
from sim.timing.calibrated import build_calibrated
from sim.timing.memo import IndexMemo


def test_index_memo_answers_nan_until_stored_and_grows_to_the_largest_key():
    memo = IndexMemo()
    assert math.isnan(memo.get(0)) and math.isnan(memo.get(7)) and math.isnan(memo.get(-1))
    memo.put(5, 0.25)
    memo.put(0, 0.0)
    assert memo.get(5) == 0.25 and memo.get(0) == 0.0
    assert math.isnan(memo.get(3)) and math.isnan(memo.get(6))
    assert len(memo) == 2
    memo.put(-2, 1.0)  # negative keys are not stored
    assert math.isnan(memo.get(-2)) and len(memo) == 2


def test_dp_mixed_steps_are_the_same_from_a_warm_memo_and_a_cold_one(context):
    """Steps with chunks on some ranks of a DP8 instance: the same seconds from a timing model that
    has answered many steps before and from fresh ones."""
    steps = [
        (0, [PrefillChunk(2048, 0, rank=3)]),
        (0, [PrefillChunk(1500, 30_000, last_chunk=True, rank=0), PrefillChunk(548, 0, rank=5)]),
        (64, [PrefillChunk(256, 8_000, last_chunk=True, rank=7)]),
        (64, [PrefillChunk(2048, 100_000, rank=r) for r in range(8)]),
    ]
    ctx = context("deepseek-v4.1-flash", tp=1, ep=8, dp=8, accepted_tokens_per_step=1.85, draft_tokens=1)
    warm = build_calibrated(ctx)
    for _ in range(2):
        for batch, chunks in steps:
            warm.step_s(batch, DecodeTerms(context_tokens=20_000.0 * batch), chunks)
    for batch, chunks in steps:
        cold = build_calibrated(ctx)
        terms = DecodeTerms(context_tokens=20_000.0 * batch)
        assert warm.step_s(batch, terms, chunks) == cold.step_s(batch, terms, chunks)


def test_model_tables_are_built_once_with_or_without_default_keywords():
    """`sim bench` builds the model's tables before its timer, the run asks with its keywords: one entry."""
    from sim.timing.arith import build_arith

    assert build_arith("deepseek-v4-flash") is build_arith(
        "deepseek-v4-flash", prefill_mode=None, kv_layout=None
    )
