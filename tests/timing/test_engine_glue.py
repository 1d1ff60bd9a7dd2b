"""The engine's prefill attention glue (sim.timing.engine_glue): its fit, its table and where steps pay it."""

from __future__ import annotations

import tempfile
from pathlib import Path

import pytest

from sim.errors import InputError
from sim.timing.batch import DecodeTerms, PrefillChunk
from sim.timing.calibrated import build_calibrated
from sim.timing.engine_glue import (
    STACK_LAYERS,
    AttentionSideParts,
    ModulePoint,
    engine_glue,
    fit_glue,
    load_modules,
    modules_path,
    stack_points,
)

NO_DECODE = DecodeTerms(context_tokens=0.0, context_tokens_growth=1.0)


def test_the_fit_recovers_a_known_glue_exactly():
    whole, split = 90e-9 * 43, 60e-9 * 43
    points = [(n, tp, 1e-3 + n * 1e-7, 1e-3 + n * 1e-7 + n * (whole + split / tp))
              for n in (512, 2048, 8192) for tp in (1, 2, 4, 8)]  # fmt: skip
    got = fit_glue(points)
    assert got == pytest.approx((whole, split), rel=1e-9)


def test_the_fit_needs_two_tp_degrees():
    with pytest.raises(ValueError, match="two attention-TP"):
        fit_glue([(n, 1, 1e-3, 2e-3) for n in (512, 2048)])


def test_a_stack_is_21_csa_and_22_hca_modules_inside_the_measured_chunks():
    pts = [ModulePoint("CSA", 1, 2048, 1e-3), ModulePoint("HCA", 1, 2048, 5e-4),
           ModulePoint("CSA", 1, 256, 1e-4), ModulePoint("HCA", 1, 256, 1e-4),  # below 512 tokens
           ModulePoint("CSA", 2, 4096, 1e-3)]  # no HCA module at this point  # fmt: skip
    assert stack_points(pts) == [
        (2048, 1, pytest.approx(STACK_LAYERS["CSA"] * 1e-3 + STACK_LAYERS["HCA"] * 5e-4))
    ]


def test_a_malformed_module_row_names_the_file_and_line(tmp_path):
    f = tmp_path / "m.csv"
    f.write_text("# what: x\ngpu,engine,engine_version,layer_kind,tp,heads,isl,latency_us,samples\n"
                 "h200,sglang,0.5.14,CSA,1,64,512,328.1,1\nh200,sglang,0.5.14,CSA,two,64,512,1,1\n")  # fmt: skip
    with pytest.raises(InputError) as e:
        load_modules(f)
    assert "line 4" in str(e.value) and str(f) in str(e.value)


def test_the_committed_modules_cover_every_engine_and_tp_on_five_gpus():
    modules = load_modules(modules_path())
    assert {g for g, _e in modules} == {"b200", "b300", "gb200", "h100", "h200"}
    for (gpu, engine), (_version, points) in modules.items():
        stacks = stack_points(points)
        assert {tp for _n, tp, _s in stacks} == {1, 2, 4, 8}, (gpu, engine)


def test_the_glue_is_what_the_measured_modules_add_to_sims_composition():
    """A synthetic GPU whose modules are sim's composition plus 100 ns + 50 ns / tp a layer and row: the fit
    finds exactly that, and the error falls to zero."""
    layers = sum(STACK_LAYERS.values())
    parts = {n: AttentionSideParts(n * 1e-7, n * 2e-8, n * 3e-8, n * 4e-8) for n in (512, 2048, 8192)}
    rows = []
    for n, p in parts.items():
        for tp in (1, 2, 4, 8):
            stack = p.at(tp, 1.0) + n * layers * (100e-9 + 50e-9 / tp)
            # every layer the same module: 21 x CSA + 22 x HCA = the stack (only the sum is fitted)
            rows += [ModulePoint("CSA", tp, n, stack / layers), ModulePoint("HCA", tp, n, stack / layers)]
    path = _write_modules(rows)
    glue = engine_glue("x1", "sglang", parts.__getitem__, lambda tp: 1.0, path=path)
    assert glue is not None
    assert glue.whole_s == pytest.approx(100e-9, rel=1e-9) and glue.split_s == pytest.approx(50e-9, rel=1e-9)
    assert glue.rms_rel_error_after < 1e-9 < glue.rms_rel_error_before
    assert engine_glue("x1", "vllm", parts.__getitem__, lambda tp: 1.0, path=path) is None


def _write_modules(points):
    f = Path(tempfile.mkdtemp()) / "modules.csv"
    lines = ["gpu,engine,engine_version,layer_kind,tp,heads,isl,latency_us,samples"]
    lines += [
        f"x1,sglang,0.5.14,{p.layer_kind},{p.tp},{64 // p.tp},{p.isl},{p.latency_s * 1e6!r},1" for p in points
    ]
    f.write_text("\n".join(lines) + "\n")
    return f


@pytest.mark.parametrize("hardware", ["nvidia-h200-hgx8", "nvidia-b200-hgx8", "nvidia-h100-hgx8"])
def test_the_fitted_glue_brings_sim_closer_to_the_engines_modules(context, hardware):
    for engine in ("sglang", "vllm"):
        glue = build_calibrated(context(hardware=hardware, engine=engine)).engine_glue
        assert glue is not None and glue.engine == engine
        assert glue.rms_rel_error_after < 0.5 * glue.rms_rel_error_before
        assert glue.whole_s > 0 and glue.split_s > 0


@pytest.mark.parametrize("model", ["deepseek-v4-flash", "deepseek-v4.1-flash"])
def test_a_chunk_step_pays_the_glue_on_each_prompt_row(context, model):
    """TP 1, no decode: the step with a 4,096-token chunk is longer by 4,096 x the glue of every layer on the
    prompt row; no engine, or engine_glue none, pays none."""
    sgl = build_calibrated(context(model, tp=1, ep=1, dp=1, engine="sglang"))
    bare = build_calibrated(context(model, tp=1, ep=1, dp=1))
    off = build_calibrated(context(model, tp=1, ep=1, dp=1, engine="sglang", engine_glue="none"))
    assert bare.engine_glue is None and off.engine_glue is None
    chunk = [PrefillChunk(4096, 0, last_chunk=False)]
    extra = sgl.step_s(0, NO_DECODE, chunk) - bare.step_s(0, NO_DECODE, chunk)
    layers = sgl.mt.every.layers
    assert extra == pytest.approx(4096 * layers * sgl.engine_glue.per_layer_row_s(1), rel=1e-9)
    assert off.step_s(0, NO_DECODE, chunk) == bare.step_s(0, NO_DECODE, chunk)
    assert sgl.step_s(8, NO_DECODE.scaled(8), ()) == bare.step_s(8, NO_DECODE.scaled(8), ())  # decode: none


def test_the_dp_rank_holding_the_chunk_pays_the_glue(context):
    sgl = build_calibrated(context(tp=1, ep=4, dp=4, engine="sglang"))
    bare = build_calibrated(context(tp=1, ep=4, dp=4))
    chunk = [PrefillChunk(2048, 0, last_chunk=False, rank=1)]
    extra = sgl.step_s(0, NO_DECODE, chunk) - bare.step_s(0, NO_DECODE, chunk)
    assert extra == pytest.approx(2048 * sgl.mt.every.layers * sgl.engine_glue.per_layer_row_s(1), rel=1e-6)


def test_a_gpu_without_the_engines_modules_gets_no_glue(context):
    assert build_calibrated(context(hardware="nvidia-h20-hgx8", engine="sglang")).engine_glue is None


def test_a_cp_gpu_pays_the_glue_of_its_share_of_the_rows_with_whole_weights(context):
    sgl = build_calibrated(context(tp=8, ep=8, dp=1, prefill_cp="round_robin", engine="sglang"))
    bare = build_calibrated(context(tp=8, ep=8, dp=1, prefill_cp="round_robin"))
    chunk = [PrefillChunk(4096, 0, last_chunk=False)]
    extra = sgl.step_s(0, NO_DECODE, chunk) - bare.step_s(0, NO_DECODE, chunk)
    assert extra == pytest.approx(
        4096 / 8 * sgl.mt.every.layers * sgl.engine_glue.per_layer_row_s(1), rel=1e-9
    )
