"""V4.1's Reindex layers as an engine scores them (sim.config.engine_rules reindex_scoring): over layer 20's
candidates only, or over every compressed position and then masked, which costs what layer 20 costs."""

from __future__ import annotations

from dataclasses import replace

import pytest

from sim.cluster.build import _pool_arith
from sim.config.cluster import Pool
from sim.config.engine_rules import Engine, reindex_full_range
from sim.model import decode_cost, load_model, prefill_cost
from sim.timing.arith import build_arith
from sim.timing.batch import PrefillChunk
from sim.timing.calibrated import build_calibrated, pipeline_kind

V41, V4 = "deepseek-v4.1-flash", "deepseek-v4-flash"
K = 1024
HOPPER, BLACKWELL = "9.0", "10.0"


@pytest.mark.parametrize(
    ("engine", "cc", "setting", "full"),
    [
        (
            Engine(name="vllm"),
            BLACKWELL,
            "auto",
            True,
        ),  # dense logits unless indexer_sparse_logits (vllm #56254)
        (Engine(name="vllm"), BLACKWELL, "candidates", False),  # the recipe sets the flag
        (Engine(name="sglang", version="main@006cbb66"), HOPPER, "auto", True),  # mask helpers on Hopper
        (Engine(name="sglang", version="main@006cbb66"), BLACKWELL, "auto", False),  # DeepGEMM sparse logits
        (Engine(name="sglang", version="main@006cbb66"), None, "auto", False),  # an unknown GPU: not Hopper
        (None, HOPPER, "auto", False),  # no engine named: the model's design
        (None, BLACKWELL, "full_range", True),
    ],
)
def test_the_engine_rule_and_the_pool_setting(engine, cc, setting, full):
    assert reindex_full_range(engine, cc, setting) is full


def test_full_range_scores_every_position_in_the_four_reindex_layers():
    """model.md §5.3 / §6.1: scoring the whole range adds 4 x 68 B x L of index keys a decode step and 4 x 8,192
    FLOPs a position scored, against the candidate cap of 16,384; below the cap nothing changes."""
    spec = load_model(V41)
    long, short = 256 * K, 8 * K
    cand, full = decode_cost(spec, long), decode_cost(spec, long, reindex_full_range=True)
    assert full.index_read_bytes - cand.index_read_bytes == pytest.approx(4 * 68 * (long - 16_384), rel=0.01)
    assert (
        decode_cost(spec, short, reindex_full_range=True).index_flops == decode_cost(spec, short).index_flops
    )
    p_cand = prefill_cost(spec, 4096, 200 * K, "full40")
    p_full = prefill_cost(spec, 4096, 200 * K, "full40", reindex_full_range=True)
    assert p_full.index_flops > 2 * p_cand.index_flops  # eight layers score every position instead of four


def test_a_pool_gets_the_tables_its_engine_scores_with():
    v41, v4 = build_arith(V41), build_arith(V4)
    pool = Pool.model_validate(dict(name="p", role="colocated", instances=1, gpus_per_instance=4, tp=4))
    assert _pool_arith(v41, pool, None, reindex_full_range=False) is v41
    assert _pool_arith(v41, pool, None, reindex_full_range=True).reindex_full_range
    assert _pool_arith(v4, pool, None, reindex_full_range=True) is v4  # no Reindex layers: the same tables


def test_a_full_range_reindex_layer_is_timed_as_layer_20(context):
    """The calibrated timing reads the Full-L20 pipeline for the four Reindex layers: a decode step of 64 sequences
    at a 256K context takes longer (8 % on 4 H200), at 8K (under the candidate cap) barely; a prefill chunk's index
    FLOPs double but they are a small share of its time, so a chunk at 768K grows by a few per cent."""
    spec = load_model(V41)
    reindex = [layer for layer in spec.layers if layer.selection == "reindex"]
    assert {pipeline_kind(layer) for layer in reindex} == {"Reindex"}
    assert {pipeline_kind(layer, reindex_full_range=True) for layer in reindex} == {"Full-L20"}
    ctx = context(V41, tp=4, ep=4, dp=1)
    cand = build_calibrated(ctx)
    full = build_calibrated(replace(ctx, arith=build_arith(V41, reindex_full_range=True)))
    for length, lo in ((256 * K, 1.05), (8 * K, 0.999)):
        terms_c, terms_f = (
            cand.decode_seq_terms(length, 1).scaled(64),
            full.decode_seq_terms(length, 1).scaled(64),
        )
        ratio = full.step_s(64, terms_f, ()) / cand.step_s(64, terms_c, ())
        assert lo <= ratio < 1.5, (length, ratio)
    chunk = [PrefillChunk(4096, 768 * K, last_chunk=True, rank=0)]
    no_decode = cand.decode_seq_terms(0, 1).scaled(0)
    assert 1.015 < full.step_s(0, no_decode, chunk) / cand.step_s(0, no_decode, chunk) < 1.2
