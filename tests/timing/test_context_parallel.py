"""Prefill context parallelism: a step's rows over the attention group's GPUs by position
(sim.timing.context_parallel, `CalibratedTiming._cp_step_s`)."""

from __future__ import annotations

import pytest

from sim.timing.batch import PrefillChunk
from sim.timing.calibrated import build_calibrated
from sim.timing.comm import allgather_s
from sim.timing.context_parallel import (
    ContextParallel,
    cp_gather_s,
    heads_split_attention_s,
    padded_head_share,
    rank_rows,
)
from sim.timing.interp import chunk_parts

K = 1024
MODELS = ("deepseek-v4-flash", "deepseek-v4.1-flash")


def test_rows_are_dealt_evenly_and_the_busiest_gpu_gets_the_ceiling():
    assert [rank_rows(n, 8) for n in (0, 1, 8, 9, 16384)] == [0, 1, 1, 2, 2048]


def test_split_rules():
    rr, zz = ContextParallel("round_robin", 4), ContextParallel("zigzag", 4)
    assert rr.splits(0, [100]) and rr.splits(64, [3])  # any step with a chunk, decode rows too
    assert not rr.splits(64, [])
    assert zz.splits(0, [8, 4096])  # pure prefill, every request >= 2 cp rows
    assert not zz.splits(0, [7, 4096])  # a request too short for 2 cp blocks (SGLang can_cp_split)
    assert not zz.splits(2, [4096])  # a mixed step
    assert not ContextParallel("off", 8).splits(0, [4096])
    with pytest.raises(ValueError, match="2\\+ GPUs"):
        ContextParallel("round_robin", 1)
    with pytest.raises(ValueError, match="mode"):
        ContextParallel("ring", 8)


def test_allgather_and_cp_gathers():
    assert allgather_s(8e9, 8, 1e11, 1e-5) == pytest.approx(1e-5 + 7 / 8 * 8e9 / 1e11)
    assert allgather_s(8e9, 1, 1e11, 1e-5) == 0.0
    s = cp_gather_s(
        1e9, 1000, ranks=4, hidden=4096, layers=43, index_layers=21, bw_bytes_per_s=1e11, latency_s=2e-6
    )
    kv = 3 / 4 * 1e9 / 1e11 + 64 * 2e-6  # one gather per layer, one more per scoring layer
    hidden = 2e-6 + 3 / 4 * 1000 * 4096 * 2.0 / 1e11  # the hidden states once
    assert s == pytest.approx(kv + hidden)
    assert cp_gather_s(1e9, 1000, ranks=1, hidden=4096, layers=43, index_layers=21, bw_bytes_per_s=1e11,
                       latency_s=2e-6) == 0.0  # fmt: skip


def test_heads_split_keeps_the_indexer_whole():
    assert heads_split_attention_s(8.0, 3.0, 0.5) == 7.0
    assert heads_split_attention_s(8.0, 3.0, 1.0) == 11.0


def test_a_tp_gpu_pads_its_heads_to_the_kernels_width():
    """FlashMLA runs 64 or 128 query heads: V4's 64 heads stay whole at any TP, 128 heads halve once."""
    assert [padded_head_share(64, tp) for tp in (1, 2, 4, 8)] == [1.0, 1.0, 1.0, 1.0]
    assert [padded_head_share(128, tp) for tp in (1, 2, 4, 8)] == [1.0, 0.5, 0.5, 0.5]
    assert padded_head_share(256, 1) == 1.0 and padded_head_share(256, 2) == 0.5


@pytest.fixture(scope="module")
def tp8(context):
    """TP 8 / EP 8 / DP 1 H200 timings, CP off and round-robin, per model."""
    return {
        (m, mode): build_calibrated(context(m, tp=8, ep=8, dp=1, prefill_cp=mode))
        for m in MODELS
        for mode in ("off", "round_robin", "zigzag")
    }


def _decode(t, batch, context_tokens):
    return t.decode_seq_terms(context_tokens, 1).scaled(batch)


@pytest.mark.parametrize("model", MODELS)
def test_cp_off_is_the_heads_path(context, tp8, model):
    """`prefill_cp: off` times every step as a timing built without the setting."""
    plain = build_calibrated(context(model, tp=8, ep=8, dp=1))
    t = tp8[(model, "off")]
    for batch in (0, 32):
        terms = _decode(t, batch, 32 * K)
        chunks = [PrefillChunk(16 * K, 480 * K, last_chunk=True), PrefillChunk(2048, 0)]
        assert t.step_s(batch, terms, chunks) == plain.step_s(batch, terms, chunks)


@pytest.mark.parametrize("model", MODELS)
def test_round_robin_step_is_each_gpus_share(context, tp8, model):
    t = tp8[(model, "round_robin")]
    g = 8
    chunk = PrefillChunk(16 * K, 480 * K, last_chunk=True)
    _d, attn_flops, kv = chunk_parts(
        t._prefill_every, t._prefill_tail, chunk.new_tokens, chunk.context_tokens, True
    )
    share = 2 * K
    attn = attn_flops / g * t.prefill_attention_s_per_flop(share, 480 * K + 16 * K - share)
    tail = min(496 * K, t.mt.tail_tokens) if t.mt.tail_tokens else 16 * K
    rank = t._cp_rank_s(True, share) + t._cp_rank_s(False, rank_rows(tail, g))
    experts = t._experts_s(True, 16 * K) + t._experts_s(False, tail)
    comm = t._cp_comm_s(16 * K, kv)
    expected = attn + rank + experts + t.head_s(1) + comm
    assert t.step_s(0, _decode(t, 0, 0), [chunk]) == pytest.approx(expected, rel=1e-12)
    # with speculative decoding the drafter passes over the chunk's rows too (section 33), split as they are
    spec = build_calibrated(
        context(
            model, tp=8, ep=8, dp=1, prefill_cp="round_robin", accepted_tokens_per_step=1.9, draft_tokens=1
        )
    )
    assert spec.step_s(0, _decode(spec, 0, 0), [chunk]) == pytest.approx(
        expected + spec._row_draft_share * (rank + experts), rel=1e-12
    )
    # the all-gathers are in it: the KV of every layer and the hidden states, over the 8 GPUs
    gathers = cp_gather_s(kv, 16 * K, ranks=g, hidden=t.arith.hidden, layers=t.arith.layers,
                          index_layers=t.mt.prefill_index_layers, bw_bytes_per_s=t._comm_bw,
                          latency_s=t._comm_lat)  # fmt: skip
    assert gathers > 0.0 and comm > gathers
    # a GPU's dense work is the unsplit projections on its eighth of the rows: the ones attention TP splits
    # (an eighth each under TP) and the ones it replicates alike
    split, whole = t._dense_parts(True, share)
    mhc = t._gemm_mhc(True, share)[1]
    assert t._gemm_mhc(True, share)[0] == pytest.approx(split / 8 + whole)
    cls = t.mt.every
    assert t._cp_rank_s(True, share) == pytest.approx(
        split + whole + mhc + cls.layers * (t.layer_overhead_s + t.layer_row_overhead_s * share)
    )


@pytest.mark.parametrize("model", MODELS)
def test_long_prompt_attention_is_an_eighth_of_one_gpus(context, tp8, model):
    """At 480K of context a 16K chunk's attention dominates: spread by position over 8 GPUs it costs
    a GPU about an eighth of what one GPU pays for the whole chunk (DP attention, the chunk on its rank)."""
    t = tp8[(model, "round_robin")]
    one = build_calibrated(context(model, tp=1, ep=8, dp=8))
    chunk = PrefillChunk(16 * K, 480 * K, last_chunk=True)
    _d, attn_flops, _kv = chunk_parts(t._prefill_every, t._prefill_tail, 16 * K, 480 * K, True)
    whole = attn_flops * one.prefill_attention_s_per_flop(16 * K, 480 * K)
    spread = attn_flops / 8 * t.prefill_attention_s_per_flop(2 * K, 494 * K)
    assert 0.08 < spread / whole < 0.25  # an eighth, at the (lower) efficiency of 2K-row pieces
    cp_step = t.step_s(0, _decode(t, 0, 0), [chunk])
    dp_step = one.step_s(0, _decode(one, 0, 0), [PrefillChunk(16 * K, 480 * K, last_chunk=True, rank=0)])
    assert cp_step < 0.5 * dp_step


@pytest.mark.parametrize("model", MODELS)
def test_zigzag_runs_by_heads_where_sglang_cannot_split(tp8, model):
    off, zz = tp8[(model, "off")], tp8[(model, "zigzag")]
    rr = tp8[(model, "round_robin")]
    terms = _decode(off, 16, 32 * K)
    mixed = [PrefillChunk(4096, 0)]
    assert zz.step_s(16, terms, mixed) == off.step_s(16, terms, mixed)  # a mixed step
    short = [PrefillChunk(4096, 0), PrefillChunk(15, 0, last_chunk=True)]
    empty = _decode(off, 0, 0)
    assert zz.step_s(0, empty, short) == off.step_s(0, empty, short)  # 15 rows < 2 x 8
    pure = [PrefillChunk(4096, 0), PrefillChunk(16, 0, last_chunk=True)]
    assert zz.step_s(0, empty, pure) == rr.step_s(0, empty, pure)  # balanced like round-robin
    assert rr.step_s(16, terms, mixed) != off.step_s(16, terms, mixed)


@pytest.mark.parametrize("model", MODELS)
def test_decode_steps_do_not_change(tp8, model):
    off, rr = tp8[(model, "off")], tp8[(model, "round_robin")]
    terms = _decode(off, 64, 100 * K)
    assert rr.step_s(64, terms, ()) == off.step_s(64, terms, ())
    assert rr.decode_span_s(64, terms, 50) == off.decode_span_s(64, terms, 50)


@pytest.mark.parametrize("model", MODELS)
def test_tp_gpus_run_the_mla_at_64_padded_heads_and_repeat_the_indexer(tp8, model):
    """At TP 8 a V4 GPU holds 8 of the 64 heads but pads them to the kernel's 64: each runs the whole chunk's
    attention and indexer, as one GPU would."""
    t = tp8[(model, "off")]
    new, ctx, flops = 4096, 200 * K, 1e15
    assert t._head_share == 1.0
    assert t._heads_attention_s(flops, new, ctx) == pytest.approx(
        flops * t.prefill_attention_s_per_flop(new, ctx), rel=1e-12
    )
