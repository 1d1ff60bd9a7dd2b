"""V4.1's decoder tail per pool (sim.timing.decoder_tail): kept on plain attention TP, dropped with DP
attention or prefill CP (SGLang refuses the combination), and what that costs a prefill chunk."""

from __future__ import annotations

from dataclasses import replace

import pytest

from sim.cluster.build import _pool_arith
from sim.config.cluster import Pool
from sim.model import load_model
from sim.timing.arith import build_arith
from sim.timing.batch import PrefillChunk
from sim.timing.calibrated import build_calibrated
from sim.timing.decoder_tail import has_decoder_tail, pool_prefill_mode, tail_allowed

V41, V4 = "deepseek-v4.1-flash", "deepseek-v4-flash"
K = 1024


def test_which_modes_have_a_tail():
    v41, v4 = load_model(V41), load_model(V4)
    assert has_decoder_tail(v41, "ced") and has_decoder_tail(v41, "engine")
    assert not has_decoder_tail(v41, "full40")
    assert not has_decoder_tail(v4, "full")


@pytest.mark.parametrize(
    ("setting", "dp", "cp", "allowed"),
    [
        ("auto", 1, "off", True),  # plain attention TP: SGLang's --enable-decoder-swa-bounded-replay
        ("auto", 8, "off", False),  # DP attention: refused
        ("auto", 1, "round_robin", False),  # prefill CP turns DP attention on
        ("on", 8, "round_robin", True),
        ("off", 1, "off", False),
    ],
)
def test_tail_allowed(setting, dp, cp, allowed):
    assert tail_allowed(setting, dp=dp, prefill_cp=cp) is allowed


def test_unknown_setting_is_refused():
    with pytest.raises(ValueError, match="prefill_decoder_tail"):
        tail_allowed("sometimes", dp=1, prefill_cp="off")


def test_pool_mode_falls_back_to_every_layer_on_every_token():
    v41, v4 = load_model(V41), load_model(V4)
    assert pool_prefill_mode(v41, "ced", setting="auto", dp=8, prefill_cp="off") == "full40"
    assert pool_prefill_mode(v41, "engine", setting="auto", dp=1, prefill_cp="zigzag") == "full40"
    assert pool_prefill_mode(v41, "ced", setting="auto", dp=1, prefill_cp="off") == "ced"
    assert pool_prefill_mode(v41, "full40", setting="on", dp=1, prefill_cp="off") == "full40"
    assert pool_prefill_mode(v4, "full", setting="auto", dp=8, prefill_cp="off") == "full"


def _pool(**fields):
    base = dict(name="p", role="colocated", instances=1, gpus_per_instance=8, tp=1, ep=8, dp=8)
    return Pool.model_validate({**base, **fields})


def test_a_dp_pool_gets_the_tables_of_its_mode():
    ced = build_arith(V41)
    assert ced.prefill_mode == "ced"
    assert _pool_arith(ced, _pool(), None).prefill_mode == "full40"
    assert _pool_arith(ced, _pool(prefill_decoder_tail="on"), None) is ced
    assert _pool_arith(ced, _pool(tp=8, dp=1), None) is ced
    assert _pool_arith(ced, _pool(tp=8, dp=1, prefill_context_parallel="round_robin"), None).prefill_mode == "full40"
    v4 = build_arith(V4)
    assert _pool_arith(v4, _pool(), None) is v4


def test_without_the_tail_a_chunk_costs_more(context):
    """A V4.1 chunk through every layer (full40) against CED on a DP8 H200 instance: model.md §6.2 puts
    the prefill FLOPs at 2x (CED / full 0.50-0.52); the step grows less (1.47x here), because the
    experts' weights are streamed once a layer whatever the rows and the LM head is the same."""
    ced = build_calibrated(context(V41, tp=1, ep=8, dp=8))
    full_ctx = context(V41, tp=1, ep=8, dp=8)
    full = build_calibrated(replace(full_ctx, arith=build_arith(V41, prefill_mode="full40")))
    assert full.mt.tail_tokens == 0 and ced.mt.tail_tokens == 128
    assert full.mt.tail.layers == 0 and ced.mt.tail.layers > 0
    chunk = [PrefillChunk(2048, 30 * K, last_chunk=True, rank=0)]
    terms = ced.decode_seq_terms(0, 1).scaled(0)
    ratio = full.step_s(0, terms, chunk) / ced.step_s(0, terms, chunk)
    assert 1.3 < ratio < 2.05, ratio
