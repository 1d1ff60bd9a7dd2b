"""Mega MoE's cap (docs/engines_and_validation.md section 62): an SGLang Mega MoE pool runs Mega MoE only in steps
whose most-loaded DP rank holds at most the cap's rows (SGLang 0.5.15 / 0.5.16: 1,024 unless the pool sets its
env's value); a step over it times the experts as SGLang's Triton fused MoE over every rank's rows plus the gather
and reduce-scatter of the hidden states; decode steps and steps under the cap are untouched."""

from __future__ import annotations

import pytest

from sim.config.engine_rules import Engine, megamoe_max_tokens_per_rank
from sim.timing import engine_moe
from sim.timing.batch import DecodeTerms, PrefillChunk
from sim.timing.comm import allgather_s
from sim.timing.experts import busiest_rank

CASE = "sglang-v4-flash-4xb200-high-throughput-c1024.yaml"  # --tp 4 --dp 4 --moe-a2a-backend megamoe, no env


def test_the_engine_rule_and_the_pool_setting():
    assert megamoe_max_tokens_per_rank(Engine(name="sglang", version="0.5.15")) == 1024
    assert megamoe_max_tokens_per_rank(Engine(name="sglang", version="0.5.16")) == 1024
    assert megamoe_max_tokens_per_rank(Engine(name="sglang", version="0.5.16"), 8320) == 8320
    assert megamoe_max_tokens_per_rank(Engine(name="vllm", version="0.28.1")) is None  # none read: no cap
    assert megamoe_max_tokens_per_rank(None) is None


def test_the_cases_caps_come_from_their_engine_or_their_env(case_timing):
    t = case_timing(CASE)
    assert t._megamoe_cap_rows == 1024 and t.megamoe_fallback is not None
    assert case_timing("sglang-v4-flash-0731-8xb200-high-throughput-c1024.yaml")._megamoe_cap_rows == 8320
    # a pool without Mega MoE has no cap and no fallback
    deepep = case_timing("sglang-v4-flash-4xb200-balanced-c64.yaml")
    assert deepep._megamoe_cap_rows == 0 and deepep.megamoe_fallback is None


def _chunk_step(t, chunk_tokens: int, decoding: int):
    """One rank holds a chunk, every rank decodes (SGLang 0.5.15 without speculative decoding)."""
    terms = t.decode_seq_terms(8192, 1).scaled(decoding) if decoding else DecodeTerms()
    return t.step_s(decoding, terms, [PrefillChunk(chunk_tokens, 0, last_chunk=True, rank=0)])


def test_a_step_over_the_cap_runs_the_triton_module_and_its_exchange(case_timing):
    capped = case_timing(CASE)
    uncapped = case_timing(CASE, pool={"megamoe_max_tokens_per_rank": 16384})
    rows = 4096 + 64  # the chunk and 64 decoding sequences, one row each
    extra = _chunk_step(capped, 4096, 64) - _chunk_step(uncapped, 4096, 64)
    every = capped.mt.every.moe_layers
    module = capped.megamoe_fallback
    rank = busiest_rank(256, 6, float(rows), 4)
    triton = module.tp_layer_s(rank.experts, rank.rows_per_expert, 3 * 4096 * 2048, 1.0)
    exchange = 2.0 * allgather_s(rows * 4096 * 2.0, 4, capped._comm_bw, capped._comm_lat)
    mega = capped._experts_s(True, rows)
    assert module is engine_moe.module("triton_fp8", "b200", (4096, 2048, 256, 6))
    # the step is at the power limit's slowdown or not, so compare the experts' part where it is linear in them
    assert extra == pytest.approx(every * (triton + exchange) - mega, rel=0.2)
    assert extra > 0.01  # tens of ms a chunk step: Triton's module is ~3x Mega MoE's at 4K rows
    # under the cap (a 512-token chunk a rank) nothing changes, nor in a decode step
    assert _chunk_step(capped, 512, 64) == _chunk_step(uncapped, 512, 64)
    terms = capped.decode_seq_terms(8192, 1).scaled(256)
    assert capped.step_s(256, terms, ()) == uncapped.step_s(256, terms, ())
