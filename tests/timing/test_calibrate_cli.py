"""`sim calibrate show`: JSON with every usable row and the composed steps; unknown GPUs and
broken tables are clean input errors."""

from __future__ import annotations

import json

import pytest
from typer.testing import CliRunner

from sim.cli import app
from sim.errors import InputError
from sim.paths import hwprofiles_dir


def test_show_h200_json(h200_tables):
    result = CliRunner().invoke(app, ["calibrate", "show", "h200", "--json"])
    assert result.exit_code == 0, result.output
    data = json.loads(result.stdout)
    assert data["gpu"] == "h200" and data["rows_used"] == len(h200_tables.rows)
    assert data["rows_dropped"] == h200_tables.dropped
    for row in data["kernels"]:
        assert row["efficiency"] == pytest.approx(row["floor_us"] / row["median_us"])
    comp = data["composed"]
    assert comp["instance"]["hardware"] == "nvidia-h200-hgx8"
    models = {d["model"] for d in comp["decode"]}
    assert models == {
        "deepseek-v4-flash",
        "deepseek-v4-flash-0731",
        "deepseek-v4-flash-mini",
        "deepseek-v4.1-flash",
        "deepseek-v4.1-flash-mini",
    }
    for d in comp["decode"]:
        assert d["calibrated_ms"] > d["roofline_ms"] > 0
        assert sum(d["calibrated_parts"].values()) == pytest.approx(d["calibrated_ms"], rel=1e-9)
    assert all(p["calibrated_ms"] > 0 for p in comp["prefill"])
    # both kernel stacks, each with composed decode and prefill steps and its sources
    stacks = data["stacks"]
    assert set(stacks) == {"production", "kernels_bench"} and comp == stacks["production"]["composed"]
    for stack in stacks.values():
        assert len(stack["composed"]["decode"]) == len(comp["decode"]) and stack["composed"]["prefill"]
    assert {s["origin"] for s in stacks["production"]["sources"]} <= {
        "production",
        "kernels_bench",
        "derived",
    }


def test_show_table_by_profile_id(h200_tables):
    result = CliRunner().invoke(app, ["calibrate", "show", "nvidia-h200-hgx8"])
    assert result.exit_code == 0, result.output
    assert "Decode step, calibrated (production stack" in result.output
    # W4A16 experts (vLLM's Marlin) are timed from the module measured on this GPU
    assert "W4A16 (models[].expert_activations: bf16" in result.output
    data = json.loads(CliRunner().invoke(app, ["calibrate", "show", "h200", "--json"]).stdout)
    assert data["experts"]["marlin"]["points"] == 216 and data["experts"]["marlin"]["local_experts"][0] == 7.0
    # FlashInfer's SM90 W4A16 module, the H100's rows carried here [D] (sim.timing.engine_moe)
    fi = data["experts"]["engine_runners"]["flashinfer_cutlass"]
    assert (
        fi["carried"]
        and fi["points_file"].endswith("flashinfer_w4a16_moe_h100.csv")
        and len(fi["shapes"]) == 2
    )
    assert (
        "FlashInfer's SM90 CUTLASS W4A16 MoE (cluster.pools[].moe_runner: flashinfer_cutlass)"
        in result.output
    )
    # steps holding prefill chunks at the power limit, as the H200's own board measured it (SUS3)
    assert data["power_limit"]["sustained_compute_slowdown_x"] == 1.214
    assert (
        data["power_limit"]["sustained_recovery_x"] > 0
        and data["power_limit"]["sustained_compute_onset_s"] > 0
    )
    assert "1.214x the burst times" in result.output and "sheds" in result.output and "SUS3" in result.output


def test_unknown_gpu_lists_the_known_ones(h200_tables):
    result = CliRunner().invoke(app, ["calibrate", "show", "tpu9"])
    assert isinstance(result.exception, InputError)
    message = str(result.exception)
    assert "no hardware profile or kernel tables" in message and "b200" in message and "h200" in message


def test_show_b200_json_carried_from_h200(h200_tables):
    result = CliRunner().invoke(app, ["calibrate", "show", "b200", "--json"])
    assert result.exit_code == 0, result.output
    data = json.loads(result.stdout)
    assert data["gpu"] == "b200" and data["carried_from"] == "h200"
    assert data["peaks"]["fp4_tflops"] == 9000 and "nvidia-b200-hgx8" in data["peaks"]["src"]
    # rule 3b, the profiles' measured fractions
    assert data["peaks"]["gemm_frac"] == pytest.approx(0.570 / 0.606)
    assert all(a["applied"] and a["source"] for a in data["anchors"])
    assert {k["source"].split(" (")[0] for k in data["kernels"]} == {"carried from h200"}
    assert set(data["efficiency_curves"]) == {"production", "kernels_bench"}
    # W4A8 experts at the FP8 rate, and the Mega MoE fit a megamoe pool takes on Blackwell
    assert data["experts"]["native_fp4"] and "FP8 MMA rate" in data["experts"]["text"][0]
    assert data["experts"]["megamoe"]["points"] == 4 and data["experts"]["megamoe"]["rms_error"] < 0.02
    assert (
        data["experts"]["marlin"] is None and "W4A16 (expert_activations: bf16)" in data["experts"]["text"][0]
    )
    # SGLang's measured Blackwell modules: flashinfer_mxfp4 a pool names, and Mega MoE's Triton fallback
    runners = data["experts"]["engine_runners"]
    assert set(runners) == {"flashinfer_trtllm", "triton_fp8"}
    assert not any(r["carried"] for r in runners.values()) and runners["flashinfer_trtllm"]["shapes"] == [
        [4096, 2048, 256, 6]
    ]
    # the B200's own power limit (flashinfer PR #2899), not the H200's it is carried from
    assert (
        data["power_limit"]["sustained_compute_slowdown_x"] == 1.172 and "FI1" in data["power_limit"]["text"]
    )
    for stack in data["stacks"].values():
        decode = stack["composed"]["decode"]
        for model in ("deepseek-v4-flash", "deepseek-v4.1-flash"):
            for context in (8192, 131072, 1048576):
                steps = [
                    d["calibrated_ms"]
                    for d in decode
                    if (d["model"], d["context_tokens"]) == (model, context)
                ]
                assert (
                    len(steps) == 4 and steps == sorted(steps) and steps[0] < steps[-1]
                )  # TPOT grows with batch


def test_broken_table_is_a_clean_input_error(tmp_path, monkeypatch, h200_tables):
    home = tmp_path / "home"
    (home / "hwprofiles" / "h200").mkdir(parents=True)
    for profile in hwprofiles_dir().glob("nvidia-h200*.yaml"):
        (home / "hwprofiles" / profile.name).write_text(profile.read_text())
    src = (hwprofiles_dir() / "h200" / "kernels_bench_results.csv").read_text().splitlines()
    broken = [line.replace(",median_us,", ",median,") for line in src[:60]]
    path = home / "hwprofiles" / "h200" / "kernels_bench_results.csv"
    path.write_text("\n".join(broken) + "\n")
    monkeypatch.setenv("SIM_HOME", str(home))
    result = CliRunner().invoke(app, ["calibrate", "show", "h200"])
    assert isinstance(result.exception, InputError)
    assert str(path) in str(result.exception) and "column median_us" in str(result.exception)


def test_show_prints_the_prefill_indexer_path_and_says_which_table_is_derived(h200_tables):
    """On the H200 and the H100 `calibrate show` names SGLang's V4.1 torch prefill indexer tables (the default path
    and the fused-scores variant), says which are carried rather than measured and reads one layer from each; a
    GPU without tables has none."""
    for gpu, derived in (("h200", True), ("h100", False)):
        data = json.loads(CliRunner().invoke(app, ["calibrate", "show", gpu, "--json"]).stdout)
        got = {v["variant"]: v for v in data["prefill_indexer"]["variants"]}
        assert set(got) == {"torch", "torch_fused_scores"}
        for v in got.values():
            assert v["derived"] is derived and v["file"].endswith(f"_{gpu}.csv")
            assert v["layer_ms_at_4096_rows"]["256K"]["plain"] > v["layer_ms_at_4096_rows"]["32K"]["plain"]
        default, fused = (
            got[k]["layer_ms_at_4096_rows"]["256K"]["plain"] for k in ("torch", "torch_fused_scores")
        )
        assert default > 4 * fused
    text = CliRunner().invoke(app, ["calibrate", "show", "h200"]).stdout
    assert "prefill_indexer: torch_fused_scores" in text and "derived [D]" in text
    data = json.loads(CliRunner().invoke(app, ["calibrate", "show", "b200", "--json"]).stdout)
    assert data["prefill_indexer"] is None
