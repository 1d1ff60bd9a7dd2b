"""The engines' MoE runners from their measured rows (sim.timing.engine_moe): each module gives back every row
measured at one row an expert and more, at the served shapes and under expert TP; a pool that names a runner gets
it on the GPUs with its rows (measured or carried); `auto` keeps Marlin's module for W4A16 on Hopper and the kernel
tables elsewhere; a runner that does not run the pool's experts on its GPU is refused."""

from __future__ import annotations

import pytest

from sim.errors import InputError
from sim.hardware import load_hw
from sim.timing import engine_moe as em
from sim.timing.experts import busiest_rank

V4 = (4096, 2048, 256, 6)
V41 = (5120, 2304, 384, 6)


def _weights(shape) -> int:
    return 3 * shape[0] * shape[1]


@pytest.mark.parametrize("shape", [V4, V41])
def test_the_module_gives_back_every_row_measured_at_one_row_an_expert_and_more(shape):
    m = em.module("flashinfer_cutlass", "h100", shape)
    points = em.load_points("flashinfer_cutlass", "h100")
    assert m.floor_s == min(p.seconds for p in points)  # the whole table's least time, for both shapes
    checked = 0
    for p in points:
        if (p.hidden, p.intermediate, p.experts, p.top_k) != shape or p.tokens * p.top_k < p.experts:
            continue
        rows = p.tokens * p.top_k / p.experts
        assert m.floor_s + m.layer_s(p.experts / p.ep, rows, _weights(shape)) == pytest.approx(
            p.seconds, rel=1e-9
        )
        checked += 1
    assert checked == 3 * 9  # EP 1, 4 and 8 from 64 tokens up


def test_one_row_an_expert_is_held_from_the_next_measured_point_not_interpolated():
    """V4-Flash's one row an expert falls at 42.7 tokens, between 16 (96 experts touched) and 64 measured tokens:
    the kernel's time follows the experts it touches, so the 64-token time stands for it."""
    m = em.module("flashinfer_cutlass", "h100", V4)
    at64 = next(
        p
        for p in em.load_points("flashinfer_cutlass", "h100")
        if p.ep == 4 and p.tokens == 64 and p.experts == 256
    )
    assert m.floor_s + m.layer_s(64.0, 1.0, _weights(V4)) == pytest.approx(at64.seconds, rel=1e-9)


def test_under_expert_tp_the_measured_tp4_rows_come_back():
    m = em.module("flashinfer_cutlass", "h100", V4)
    assert m.tp_split is not None and m.tp_split.efficiency.outer == (1.0, 4.0)
    tp4 = [
        p
        for p in em.tp_points("flashinfer_cutlass", "h100", V4)
        if p.ep == 4 and p.tokens * p.top_k >= p.experts
    ]
    assert len(tp4) == 9
    for p in tp4:
        rows = p.tokens * p.top_k / p.experts
        got = m.floor_s + m.tp_layer_s(256.0, rows, _weights(V4), 4.0)
        assert got == pytest.approx(p.seconds, rel=1e-9)
    # V4.1's shape takes V4-Flash's measured split (module doc) [D]
    other = em.module("flashinfer_cutlass", "h100", V41).tp_split
    assert other is not None
    assert all(other.at(4.0, r) == m.tp_split.at(4.0, r) for r in (1.0, 3.0, 24.0, 384.0))


def test_a_model_takes_its_own_shape_else_the_nearest_in_weights_an_expert():
    assert em.shape_for("flashinfer_cutlass", "h100", _weights(V41), 384, 6) == V41
    assert em.shape_for("flashinfer_cutlass", "h100", _weights(V4), 256, 6) == V4
    assert (
        em.shape_for("flashinfer_cutlass", "h100", 3 * 4608 * 2048, 128, 8) == V4
    )  # 28 M weights: nearer V4's 25 M than V4.1's 35 M


def test_the_h200_takes_the_h100_rows_and_other_gpus_are_refused():
    h100, h200 = load_hw("nvidia-h100-hgx8"), load_hw("nvidia-h200-hgx8")
    fi = "flashinfer_cutlass"
    assert em.available_on(fi, h100) and not em.is_carried(fi, h100)
    assert em.available_on(fi, h200) and em.is_carried(fi, h200)
    assert em.for_model(fi, h200, _weights(V41), 384, 6) is em.module(fi, "h100", V41)
    with pytest.raises(InputError) as err:
        em.for_model(fi, load_hw("amd-mi300x-ubb8"), _weights(V4), 256, 6)
    assert err.value.where == "cluster.pools[].moe_runner" and "H100" in str(err.value)


def test_a_pool_that_names_flashinfer_times_its_experts_on_it_and_marlin_stays_the_default(case_timing):
    from sim.timing.marlin import measured

    case = "sglang-v4-flash-fp4-4xh200-balanced-c64.yaml"
    fi = case_timing(case)  # the case names flashinfer_cutlass, as its --moe-runner-backend flashinfer_mxfp4
    marlin = case_timing(case, pool={"moe_runner": "auto"})
    assert fi.moe_module is em.module("flashinfer_cutlass", "h100", V4) and marlin.moe_module is measured(
        "h200"
    )
    rows = 128  # 64 sequences with EAGLE 1-1-2's 2 verify rows, TP 4 without EP: each GPU a 1/4 slice of 256
    rank = busiest_rank(256, 6, float(rows), 1)
    m = fi.moe_module
    assert fi._experts(rows) == pytest.approx(
        m.layer_s(rank.experts, rank.rows_per_expert, _weights(V4))
        / (4 * m.tp_split.at(4.0, rank.rows_per_expert))
    )
    assert fi.pass_parts(rows).dense_gemm_s == marlin.pass_parts(rows).dense_gemm_s
    # a W4A16 runner on a GPU with FP4 MMAs (where W4A16 runs at the BF16 rate) is refused
    with pytest.raises(InputError) as err:
        case_timing(case, hardware="nvidia-b200-hgx8")
    assert err.value.where == "cluster.pools[].moe_runner" and "without FP4 MMAs" in str(err.value)


def test_scenario_check_names_the_runner_of_each_pool_timed_from_a_module():
    from typer.testing import CliRunner

    from sim.cli import app
    from sim.paths import project_root

    path = project_root() / "scenarios" / "dynamo_v41" / "8xh200-disagg.yaml"
    out = CliRunner().invoke(app, ["scenario", "check", str(path)])
    assert out.exit_code == 0, out.output
    lines = [line for line in out.output.splitlines() if line.strip().startswith("experts:")]
    assert len(lines) == 2 and all("FlashInfer's SM90 CUTLASS module" in line for line in lines)


def test_a_blackwell_pool_naming_flashinfer_trtllm_times_its_w4a8_experts_on_sglangs_measured_module(
    case_timing,
):
    case = "sglang-v4-flash-4xb200-low-latency-c16.yaml"  # --tp 4 --moe-runner-backend flashinfer_mxfp4
    trtllm = case_timing(case)
    tables = case_timing(case, pool={"moe_runner": "auto"})
    module = em.module("flashinfer_trtllm", "b200", V4)
    assert trtllm.moe_module is module and tables.moe_module is None
    # every AIConfigurator row at expert TP 4 from one row an expert up comes back through the TP split
    for p in em.tp_points("flashinfer_trtllm", "b200", V4):
        if p.ep == 4 and p.tokens * p.top_k >= p.experts:
            rows = p.tokens * p.top_k / p.experts
            got = module.floor_s + module.tp_layer_s(256.0, rows, _weights(V4), 4.0)
            assert got == pytest.approx(p.seconds, rel=1e-9)
    # the GB200 takes the B200's rows; the B300 has its own
    assert (
        em.rows_gpu("flashinfer_trtllm", "gb200") == "b200"
        and em.rows_gpu("flashinfer_trtllm", "b300") == "b300"
    )
    # a W4A8 runner on a GPU without FP4 MMAs is refused
    with pytest.raises(InputError) as err:
        case_timing(case, hardware="nvidia-h200-hgx8", model={"expert_activations": "fp8"})
    assert err.value.where == "cluster.pools[].moe_runner" and "with FP4 MMAs" in str(err.value)


def test_preflight_names_the_file_and_pool_of_a_runner_that_does_not_fit(tmp_path):
    import yaml

    from sim.config.scenario import load_scenario
    from sim.paths import project_root
    from sim.preflight import preflight

    case = project_root() / "scenarios" / "validation" / "sglang-v4-flash-4xh200-high-throughput-c1024.yaml"
    doc = yaml.safe_load(case.read_text())["scenario"]
    doc["cluster"]["pools"][0]["moe_runner"] = "flashinfer_trtllm"  # W4A8 on Blackwell, on an H200
    path = tmp_path / "bad.yaml"
    path.write_text(yaml.safe_dump(doc))
    scn = load_scenario(path)
    with pytest.raises(InputError) as err:
        preflight(scn)
    text = str(err.value)
    assert err.value.file == str(path) and "cluster.pools[0].moe_runner" in text and "GPU with FP4 MMAs" in text
