"""The `aic` kernel stack (sim.timing.aic): the engines' operators from the committed AIConfigurator extracts
(hwprofiles/engine_modules/aic_*.csv), what it replaces, how V4.1-Flash's shapes are carried, and which scenarios
get it by default."""

from __future__ import annotations

import math

import pytest

from sim.config.scenario import Scenario
from sim.config.timing import Timing
from sim.errors import InputError
from sim.hardware import load_hw
from sim.timing import aic
from sim.timing.carry import tables_for

B200 = "nvidia-b200-hgx8"


def _replaced(stack, base):
    return [(a, b) for a, b in zip(stack.rows, base.rows, strict=True) if a.impl == "aic"]


def test_the_extracts_cover_every_gpu_aic_measured():
    for gpu in aic.GPUS:
        assert aic.gemms(gpu), gpu
        assert aic.mhc(gpu).keys() >= {4096, 7168}, gpu
        assert aic.moe(gpu, "fp8_block"), gpu
    assert aic.moe("b200", "w4a8_mxfp4_mxfp8") and aic.moe("b200", "nvfp4")


def test_aic_stack_replaces_gemms_experts_and_mhc_of_both_models():
    profile = load_hw(B200)
    got, base = aic.aic_tables(profile), tables_for(profile, "production")
    assert len(got.rows) == len(base.rows) and got.stack == "aic"
    replaced = _replaced(got, base)
    kinds = {(a.model, a.family) for a, _b in replaced}
    for model in ("V4", "V4.1"):
        assert {(model, "gemm_dense"), (model, "gemm_grouped"), (model, "mhc")} <= kinds
    untouched = [b for a, b in zip(got.rows, base.rows, strict=True) if a.impl != "aic"]
    assert any(r.family == "pipeline" for r in untouched) and any(r.kernel == "proj_wo_a" for r in untouched)
    assert all(a.package.startswith("aic 0.12.0: ") for a, _b in replaced)


def test_a_measured_gemm_shape_is_read_as_is_and_another_carried_by_its_flops():
    profile = load_hw(B200)
    got = aic.aic_tables(profile)
    wkv = next(r for r in got.rows if r.model == "V4" and r.kernel == "proj_wkv" and r.rows == 128)
    curve, scale, nk = aic.gemm_at("b200", 512, 4096)
    assert nk == (512, 4096) and scale == 1.0 and wkv.median_s == pytest.approx(curve.at(128))
    # V4-Flash's wq_b (32,768 x 1,024) is outside AIC's grid: the nearest measured shape, by N K
    curve, scale, nk = aic.gemm_at("b200", 32768, 1024)
    assert nk != (32768, 1024) and scale == pytest.approx(32768 * 1024 / (nk[0] * nk[1]))
    wq_b = next(r for r in got.rows if r.model == "V4" and r.kernel == "proj_wq_b" and r.rows == 128)
    assert wq_b.median_s == pytest.approx(curve.at(128) * scale) and "by N K" in wq_b.package


def test_experts_are_the_fused_layer_split_by_the_production_rows_and_v41_carried_by_its_weights():
    profile = load_hw(B200)
    got, base = aic.aic_tables(profile), tables_for(profile, "production")
    layer = aic.moe("b200", "w4a8_mxfp4_mxfp8")[1]  # all 256 experts on one GPU (EP 1)

    def both(stack, model, batch):
        rows = {r.kernel: r.median_s for r in stack.rows
                if r.model == model and r.groups == 256 and r.batch == batch and r.kernel.startswith("moe_")}  # fmt: skip
        return rows["moe_gate_up"] + rows["moe_down"]

    batch = next(r.batch for r in got.rows if r.model == "V4" and r.groups == 256 and r.impl == "aic")
    assert both(got, "V4", batch) == pytest.approx(layer.at(256 * batch / 6))
    # V4.1's experts: the same fused layer at equal tokens an expert, x their weights (N K over V4-Flash's)
    assert both(got, "V4.1", batch) == pytest.approx(layer.at(256 * batch / 6) * 4608 * 5120 / (4096 * 4096))
    # experts whose activations are FP4 too (an NVFP4 checkpoint) read AIC's nvfp4 rows
    w4a4 = aic.stack_tables(profile, "aic", "fp4")
    assert both(w4a4, "V4", batch) == pytest.approx(aic.moe("b200", "nvfp4")[1].at(256 * batch / 6))
    assert both(base, "V4", batch) != pytest.approx(both(got, "V4", batch))


def test_mhc_is_pre_plus_post_linear_in_the_hidden_size():
    curves = aic.mhc("h200")
    rows = 1024.0
    v4, pro = curves[4096].at(rows), curves[7168].at(rows)
    assert aic.mhc_at("h200", 4096, rows) == pytest.approx(v4)
    assert aic.mhc_at("h200", 5120, rows) == pytest.approx(v4 + (pro - v4) * (5120 - 4096) / (7168 - 4096))
    assert aic.mhc_at("h200", 5120, 1e9) is None  # outside the tokens measured: the production row stays


def test_a_gpu_aic_did_not_measure_is_one_clear_error():
    with pytest.raises(InputError, match="AIConfigurator has no measured operators for this GPU"):
        aic.stack_tables(load_hw("amd-mi300x-ubb8"), "aic")


def test_auto_is_the_engines_operators_where_an_engine_is_named_and_aic_measured_the_gpu():
    assert Timing().kernels == "auto"
    assert aic.resolved_stack("auto", "sglang", load_hw(B200)) == "aic"
    assert aic.resolved_stack("auto", "", load_hw(B200)) == "production"  # no engine named: the kernels alone
    assert aic.resolved_stack("auto", "vllm", load_hw("amd-mi300x-ubb8")) == "production"
    assert aic.resolved_stack("production", "sglang", load_hw(B200)) == "production"


def test_a_scenario_naming_its_engine_times_its_pools_on_the_engines_operators():
    from sim.plan.backend import built_cluster

    pool = dict(name="w", role="colocated", instances=1, gpus_per_instance=8, tp=8, ep=8, dp=1)
    doc = dict(name="aic-default", models=["deepseek-v4-flash"], engine={"name": "sglang"}, hardware=B200,
               cluster={"pools": [pool]}, workload={"benchmark": {"isl_tokens": 1024, "osl_tokens": 128,
                                                                  "concurrency": 4}, "max_requests": 8})  # fmt: skip
    step = {}
    for kernels in ("auto", "production"):
        scn = Scenario.model_validate({**doc, "timing": {"kernels": kernels}})
        timing = built_cluster(scn, "deepseek-v4-flash").instances[0].timing
        step[kernels] = timing.step_s(64, timing.decode_seq_terms(4096 * 64, 1), [])
    assert step["auto"] != step["production"] and math.isfinite(step["auto"])


def test_scenario_check_says_which_stack_each_pool_reads():
    import json

    from typer.testing import CliRunner

    from sim.cli import app
    from sim.paths import project_root

    runner = CliRunner()
    for scenario, stack in (("agent_1M.yaml", "aic"), ("smoke.yaml", "production")):  # engine named / none
        path = project_root() / "scenarios" / scenario
        out = runner.invoke(app, ["scenario", "check", str(path)])
        lines = [line.strip() for line in out.output.splitlines() if line.strip().startswith("kernels:")]
        assert out.exit_code == 0 and lines and all(f": {stack}, " in line for line in lines), out.output
        got = json.loads(runner.invoke(app, ["scenario", "check", str(path), "--json"]).output)
        assert {k["stack"] for k in got["summary"]["kernels"]} == {stack}
