"""V4.1's prefill indexer as SGLang's torch path on Hopper runs it (sim.timing.torch_indexer): which layers run on
which rows, the index FLOPs it takes out of the FLOP-rated attention, the measured path's interpolation, the engine
rule that picks it, and its place in a step."""

from __future__ import annotations

from dataclasses import replace

import pytest

from sim.config.engine_rules import Engine, prefill_indexer
from sim.errors import InputError
from sim.hardware import load_hw
from sim.model import load_model, prefill_cost
from sim.timing import torch_indexer as ti
from sim.timing.arith import build_arith
from sim.timing.batch import DecodeTerms, PrefillChunk
from sim.timing.calibrated import build_calibrated

V41, V4 = "deepseek-v4.1-flash", "deepseek-v4-flash"
K = 1024
MAIN = Engine(name="sglang", version="main@006cbb66")
HOPPER, BLACKWELL = "9.0", "10.0"


def constant(seconds: float) -> ti.TorchIndexer:
    """A path that takes `seconds` a layer at any rows and width."""
    pts = [
        ti.IndexerPoint(role, rows, lc, seconds)
        for role in ti.ROLES
        for rows in (16, 8192)
        for lc in (2048, 1 << 20)
    ]
    return ti.build(pts)


def test_v41_index_layers_by_role_ratio_and_rows():
    """model.md §3: layers 2/8/14 score ratio-2 keys on every prompt row; layer 20 (the candidate source) and the
    Reindex layers 24-36 score layer 20's ratio-1 keys on the decoder tail (CED), or on every row (full40)."""
    spec = load_model(V41)
    ced = ti.index_layers(spec, "ced", True)
    assert [(x.role, x.ratio, x.every_token, x.layers) for x in ced] == [
        ("plain", 2, True, 3),
        ("source", 1, False, 1),
        ("consumer", 1, False, 4),
    ]
    assert all(x.every_token for x in ti.index_layers(spec, "full40", True))
    capped = ti.index_layers(spec, "ced", False)
    assert {x.cap for x in capped if x.role == "consumer"} == {16_384}  # the candidates, when not full range
    assert {x.cap for x in capped if x.role != "consumer"} == {None}


@pytest.mark.parametrize("mode", ["ced", "full40"])
@pytest.mark.parametrize("full", [True, False])
@pytest.mark.parametrize(("new", "ctx", "last"), [(4096, 0, False), (4096, 200 * K, True), (100, 30, True)])
def test_chunk_index_flops_are_the_model_arithmetics(mode, full, new, ctx, last):
    spec = load_model(V41)
    cost = prefill_cost(spec, new, ctx, mode, last_chunk=last, reindex_full_range=full)
    tail = min(ctx + new, spec.ced.tail_tokens) if last and mode == "ced" else 0
    layers = ti.index_layers(spec, mode, full)
    assert ti.chunk_index_flops(layers, spec.index.flops_per_position, new, ctx, tail) == cost.index_flops


def test_the_path_hits_its_points_and_grows_with_rows_beyond():
    pts = [
        ti.IndexerPoint(role, rows, lc, 1e-9 * rows * lc * (1.2 if role == "consumer" else 1.0) + 1e-4)
        for role in ti.ROLES
        for rows in (16, 512, 4096)
        for lc in (2048, 65536, 1 << 20)
    ]
    path = ti.build(pts)
    for p in pts:
        assert path.layer_s(p.role, p.rows, p.lc) == pytest.approx(p.seconds)
    between = path.layer_s("plain", 1024, 131072)
    assert path.layer_s("plain", 512, 65536) < between < path.layer_s("plain", 4096, 1 << 20)
    beyond = path.layer_s("plain", 8192, 65536) / path.layer_s("plain", 4096, 65536)
    assert 1.9 < beyond < 2.05  # proportional past the most rows measured
    assert path.layer_s("plain", 0, 65536) == 0.0
    layers = ti.index_layers(load_model(V41), "ced", True)
    # a body chunk runs the three encoder layers only; the last chunk adds the five decoder layers on its tail
    body = path.chunk_s(layers, 4096, 0, 100_000)
    assert body == pytest.approx(3 * path.layer_s("plain", 4096, 50_000))
    last = path.chunk_s(layers, 4096, 128, 100_000)
    assert last - body == pytest.approx(
        path.layer_s("source", 128, 100_000) + 4 * path.layer_s("consumer", 128, 100_000)
    )


@pytest.mark.parametrize(
    ("engine", "cc", "model", "setting", "want"),
    [
        (MAIN, HOPPER, V41, "auto", "torch"),  # no SM90 kernel in that SGLang: the torch path
        (MAIN, BLACKWELL, V41, "auto", "kernel"),  # DeepGEMM fp8_fp4_mqa_logits
        (MAIN, HOPPER, V4, "auto", "kernel"),  # V4's indexer is DeepGEMM's fp8 kernel
        (MAIN, HOPPER, V4, "torch", "kernel"),  # only V4.1 has the path
        (MAIN, HOPPER, V41, "kernel", "kernel"),  # an engine with a fused Hopper scorer
        (Engine(name="vllm"), HOPPER, V41, "auto", "kernel"),  # no such rule read for vLLM
        (None, HOPPER, V41, "auto", "kernel"),
        (None, BLACKWELL, V41, "torch", "torch"),
        (MAIN, None, V41, "auto", "kernel"),  # an unknown GPU: not Hopper
    ],
)
def test_the_engine_rule_and_the_pool_setting(engine, cc, model, setting, want):
    assert prefill_indexer(engine, cc, model, setting) == want


def test_unmeasured_gpus_are_refused_with_the_field():
    with pytest.raises(InputError) as err:
        ti.for_gpu(load_hw("nvidia-b200-hgx8"))
    assert "prefill_indexer" in str(err.value.where) and "H200" in str(err.value)


@pytest.fixture
def timings(context, monkeypatch):
    """(kernel, torch at ~0 s a layer, torch at 1 ms a layer) timings of V4.1 on 8 H200 at TP 8, in prefill
    `mode` (the pool's: sim.timing.decoder_tail)."""

    def make(mode="ced", **fields):
        ctx = context(V41, tp=8, ep=8, dp=1, **fields)
        ctx = replace(ctx, arith=build_arith(V41, prefill_mode=mode, reindex_full_range=True))
        out = [build_calibrated(ctx)]
        for seconds in (1e-12, 1e-3):
            monkeypatch.setattr(ti, "for_gpu", lambda _profile, _variant, s=seconds: constant(s))
            out.append(build_calibrated(replace(ctx, prefill_indexer="torch")))
        return out

    return make


def _chunk_s(timing, chunk: PrefillChunk) -> float:
    return timing.step_s(0, DecodeTerms(), [chunk])


def test_a_step_charges_each_index_layer_the_path_instead_of_its_flops(timings):
    """TP 8 with the decoder tail (CED): a body chunk runs the three encoder index layers, the last chunk all
    eight; with the path at ~0 s the step sheds the DeepGEMM indexer's share and keeps the sparse MLA."""
    kernel, free, slow = timings()
    for chunk, layers in (
        (PrefillChunk(4096, 200 * K, last_chunk=False), 3),
        (PrefillChunk(4096, 200 * K, last_chunk=True), 8),
    ):
        assert _chunk_s(free, chunk) < _chunk_s(kernel, chunk)
        assert _chunk_s(slow, chunk) - _chunk_s(free, chunk) == pytest.approx(layers * 1e-3, rel=1e-6)


def test_under_prefill_cp_each_gpu_runs_every_layer_on_its_rows(timings):
    kernel, free, slow = timings(mode="full40", prefill_cp="round_robin")
    chunk = PrefillChunk(8192, 300 * K, last_chunk=False)
    # full40 under CP: all eight index layers on the GPU's 1,024 rows
    assert _chunk_s(slow, chunk) - _chunk_s(free, chunk) == pytest.approx(8 * 1e-3, rel=1e-6)
    assert _chunk_s(free, chunk) < _chunk_s(kernel, chunk)


def test_the_committed_path_on_the_h200_is_far_slower_than_deepgemm_at_long_context(context):
    """The committed table: a 4,096-token chunk at 256K of context through TP 8 takes at least twice as long as
    sim's DeepGEMM indexer makes it (docs/engines_and_validation.md section 52)."""
    ctx = context(V41, tp=8, ep=8, dp=1)
    ctx = replace(ctx, arith=build_arith(V41, reindex_full_range=True))
    kernel, path = build_calibrated(ctx), build_calibrated(replace(ctx, prefill_indexer="torch"))
    chunk = PrefillChunk(4096, 256 * K, last_chunk=False)
    assert _chunk_s(path, chunk) > 2 * _chunk_s(kernel, chunk)


@pytest.mark.parametrize("variant", ti.VARIANTS)
@pytest.mark.parametrize("gpu", ti.TABLE_GPUS)
def test_each_committed_table_covers_every_role_on_the_grid(gpu, variant):
    points = ti.load_points(gpu=gpu, variant=variant)
    for role in ti.ROLES:
        mine = {(p.rows, p.lc) for p in points if p.role == role}
        assert {r for r, _ in mine} >= {16, 4096, 8192} and {lc for _, lc in mine} >= {2048, 1 << 20}
    h200, h100 = ti.committed("h200"), ti.committed("h100")
    assert h100.layer_s("plain", 4096, 1 << 18) > h200.layer_s(
        "plain", 4096, 1 << 18
    )  # HBM-bound, 0.7x the bandwidth


@pytest.mark.parametrize("gpu", ti.TABLE_GPUS)
def test_the_fused_score_kernel_cuts_the_path_at_long_context_but_not_to_the_kernel(gpu):
    """The measured fused variant (section 53): a layer of 4,096 rows at 256K positions 4-10x faster than the
    default path, the top-k and the rest still over every position."""
    default, fused = ti.committed(gpu), ti.committed(gpu, "torch_fused_scores")
    for role in ti.ROLES:
        ratio = default.layer_s(role, 4096, 1 << 18) / fused.layer_s(role, 4096, 1 << 18)
        assert 4.0 < ratio < 10.0


def test_a_pool_with_the_fused_scores_sits_between_the_kernel_and_the_default_path(context):
    ctx = context(V41, tp=8, ep=8, dp=1)
    ctx = replace(ctx, arith=build_arith(V41, reindex_full_range=True))
    kernel = build_calibrated(ctx)
    default = build_calibrated(replace(ctx, prefill_indexer="torch"))
    fused = build_calibrated(replace(ctx, prefill_indexer="torch_fused_scores"))
    chunk = PrefillChunk(4096, 256 * K, last_chunk=False)
    assert _chunk_s(kernel, chunk) < _chunk_s(fused, chunk) < _chunk_s(default, chunk)


def test_the_fused_variant_is_refused_off_its_gpus_with_the_field():
    with pytest.raises(InputError) as err:
        ti.for_gpu(load_hw("nvidia-b200-hgx8"), "torch_fused_scores")
    assert "torch_fused_scores on" in str(err.value.value)
