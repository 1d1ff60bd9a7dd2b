"""`sim sweep --gpus N`: the deployments it enumerates are legal scenarios, the operating point keeps
the TTFT limit and takes a prefill-bound plateau's best point, and the CLI writes space.json."""

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from sim.cli import app
from sim.config.engine_rules import Engine, engine_refusal
from sim.config.errors import validate_or_raise
from sim.config.scenario import Scenario
from sim.errors import InputError
from sim.plan.backend import SimBackend
from sim.plan.overrides import apply_overrides
from sim.sweep.space import deployments, operating_point, parse_layouts, prefill_modes

TINY = Path(__file__).with_name("bench_tiny.yaml")


def test_every_split_of_the_gpus_over_the_layouts_and_only_legal_ones():
    deps = deployments(16, 8)
    labels = [d.label for d in deps]
    assert labels[:4] == ["agg tp4x4", "agg dp8x2", "agg widex1", "agg cp4x4"]
    assert "P4 tp4x1 : D12 tp4x3" in labels and "P8 dp8x1 : D8 dp8x1" in labels
    assert "P8 cp8x1 : D8 dp8x1" in labels and "P4 cp4x1 : D12 tp4x3" in labels
    assert "P8 tp4x2 : D8 widex1" not in labels  # a wide instance needs two whole nodes
    assert "P4 dp8x1 : D12 tp4x3" not in labels  # 4 GPUs hold no 8-GPU instance
    for d in deps:
        assert (
            sum(p.get("instances", 0) * p["gpus_per_instance"] + p.get("nodes", 0) * 8 for p in d.pools) == 16
        )
        assert (d.kind == "aggregated") == (d.prefill_gpus == 0)
    wide = next(d for d in deps if d.label == "agg widex1").pools[0]
    assert wide == {"name": "worker", "role": "colocated", "nodes": 2, "gpus_per_instance": 16, "tp": 1,
                    "ep": 16, "dp": 16}  # fmt: skip
    # prefill context parallelism on the prefill side only: the decode pool of a cp layout is plain TP
    cp = next(d for d in deps if d.label == "P8 cp8x1 : D8 dp8x1").pools[0]
    assert cp["tp"] == 8 and cp["dp"] == 1 and cp["prefill_context_parallel"] == "round_robin"
    agg_cp = next(d for d in deps if d.label == "agg cp4x4").pools[0]
    assert agg_cp["prefill_context_parallel"] == "round_robin"
    template = SimBackend().load_template(TINY)
    for d in deps:  # each is a scenario the schema accepts
        validate_or_raise(Scenario, apply_overrides(template, {"cluster.pools": list(d.pools)}), file=d.label)


def test_layout_lists_are_checked():
    assert parse_layouts(None, "decode") == ("tp4", "dp8", "wide")
    assert parse_layouts("dp8, tp4", "prefill") == ("dp8", "tp4")
    with pytest.raises(InputError, match="unknown layout") as err:
        parse_layouts("dp8,ep9", "decode")
    assert "--decode-layouts" in str(err.value) and "ep9" in str(err.value)
    with pytest.raises(InputError, match="no layout divides"):
        deployments(6, 8)


def _p(c, tpot_ms, tput, ttft90):
    return {"concurrency": c, "tpot_p50_s": tpot_ms / 1e3, "output_tokens_per_s_per_gpu": tput,
            "output_tokens_per_s": tput, "ttft_p50_s": ttft90 / 2, "ttft_p90_s": ttft90}  # fmt: skip


def test_operating_point_interpolates_or_takes_the_best_point_within_the_ttft_limit():
    crossing = [_p(8, 15, 100.0, 1.0), _p(16, 25, 180.0, 2.0)]
    point = operating_point(crossing, 0.020, 10.0)
    assert point["how"] == "interpolated" and point["output_tokens_per_s_per_gpu"] == pytest.approx(140.0)
    # prefill-bound: TPOT never reaches the target, throughput flattens while TTFT grows
    plateau = [_p(8, 12, 100.0, 2.0), _p(16, 13, 150.0, 6.0), _p(32, 13, 155.0, 14.0)]
    point = operating_point(plateau, 0.020, 10.0)
    assert point["how"] == "best point run" and point["concurrency"] == 16
    # a crossing whose points break the TTFT limit does not count
    late = [_p(8, 15, 100.0, 3.0), _p(16, 25, 180.0, 12.0)]
    assert operating_point(late, 0.020, 10.0)["concurrency"] == 8
    assert operating_point([_p(8, 25, 100.0, 1.0)], 0.020, 10.0) is None


def test_operating_point_at_a_tpot_p90_target_comes_at_a_lower_load():
    points = [{**_p(8, 12, 100.0, 1.0), "tpot_p90_s": 0.016}, {**_p(16, 18, 180.0, 2.0), "tpot_p90_s": 0.024},
              {**_p(32, 26, 240.0, 3.0), "tpot_p90_s": 0.040}]  # fmt: skip
    p50, p90 = operating_point(points, 0.020, 10.0), operating_point(points, 0.020, 10.0, "p90")
    assert p50["concurrency"] == pytest.approx(16 + 16 * 2 / 8)  # TPOT p50 18 -> 26 ms
    assert p90["concurrency"] == pytest.approx(12.0) and p90["tpot_p90_s"] == 0.020
    assert p90["output_tokens_per_s_per_gpu"] < p50["output_tokens_per_s_per_gpu"]


def test_the_cli_searches_the_deployments_and_writes_space_json(tmp_path):
    out = tmp_path / "space"
    args = ["sweep", str(TINY), "--out", str(out), "--gpus", "8", "--concurrency", "2,8", "--workers", "1",
            "--prefill-layouts", "tp4", "--decode-layouts", "tp4", "--colocated-layouts", "tp4,dp8", "--json"]  # fmt: skip
    result = CliRunner().invoke(app, args)
    assert result.exit_code == 0, result.output
    data = json.loads(result.stdout)
    assert data == json.loads((out / "space.json").read_text())
    assert data["step_composition"] == "mixed"  # the template's (sim.sched.batcher)
    assert [d["deployment"] for d in data["deployments"]] == ["agg tp4x2", "agg dp8x1", "P4 tp4x1 : D4 tp4x1"]
    best = data["best"]["deepseek-v4-flash"]
    assert best["aggregated"]["deployment"] in ("agg tp4x2", "agg dp8x1")
    assert all(d["tok_s_gpu"] is None or d["tok_s_gpu"] > 0 for d in data["deployments"])
    assert (out / "deployments" / "p4-tp4x1-d4-tp4x1" / "sweep.json").is_file()
    modes = {d["deployment"]: d["prefill_modes"] for d in data["deployments"]}
    assert modes["P4 tp4x1 : D4 tp4x1"] == {
        "prefill": "full"
    }  # V4: no decoder tail, the decode pool left out
    bad = CliRunner().invoke(app, [*args[:-1], "--decode-layouts", "ep3", "--force"])
    assert bad.exit_code != 0 and "unknown layout" in str(bad.exception) + bad.output


def test_each_prefilling_pool_says_its_v41_prefill_mode():
    """V4.1 keeps its decoder tail (ced) on plain TP, not with DP attention or prefill CP (sim.timing.decoder_tail)."""
    template = {"models": [{"name": "deepseek-v4.1-flash", "prefill_mode": "engine"}, "deepseek-v4-flash"]}
    deps = {d.label: d for d in deployments(16, 8)}
    assert prefill_modes(deps["agg dp8x2"], template, "deepseek-v4.1-flash") == {"worker": "full40"}
    assert prefill_modes(deps["agg tp4x4"], template, "deepseek-v4.1-flash") == {"worker": "engine"}
    assert prefill_modes(deps["P8 cp4x2 : D8 dp8x1"], template, "deepseek-v4.1-flash") == {
        "prefill": "full40"
    }
    assert prefill_modes(deps["agg dp8x2"], template, "deepseek-v4-flash") == {"worker": "full"}


def test_the_decoder_tail_setting_goes_to_every_prefilling_pool():
    template = {"models": ["deepseek-v4.1-flash"]}
    deps = {d.label: d for d in deployments(16, 8, decoder_tail="on")}
    dep = deps["P8 cp4x2 : D8 dp8x1"]
    assert [p.get("prefill_decoder_tail") for p in dep.pools] == ["on", None]
    assert prefill_modes(dep, template, "deepseek-v4.1-flash") == {"prefill": "ced"}
    assert prefill_modes(deps["agg dp8x2"], template, "deepseek-v4.1-flash") == {"worker": "ced"}
    assert "prefill_decoder_tail" not in deployments(16, 8)[0].pools[0]  # auto: left to the layout
    with pytest.raises(InputError, match="decoder-tail"):
        deployments(16, 8, decoder_tail="maybe")


def test_a_wide_instance_gets_the_scheduler_limits_of_its_nodes():
    template = SimBackend().load_template(TINY)
    deps = {d.label: d for d in deployments(32, 8)}
    assert deps["agg dp8x4"].scheduler_overrides(template, 8) == {}
    assert deps["agg widex1"].scheduler_overrides(template, 8) == {
        "scheduler.max_decode_batch": 256 * 4,
        "scheduler.prefill_budget_tokens": 16384 * 4,
    }
    assert deps["P16 dp8x2 : D16 widex1"].scheduler_overrides(template, 8) == {
        "scheduler.max_decode_batch": 512
    }


def test_the_search_prunes_what_the_named_engine_refuses():
    # SGLang's validate_deepseek_v41_features as PR #38949 added DSpark PD: "... DP=1 and CP=1"
    old, new = Engine(name="sglang", version="0.5.16"), Engine(name="sglang")
    v41 = "deepseek-v4.1-flash"
    refused = {d.label for d in deployments(16, 8) if engine_refusal(v41, d.pools, "dspark", old)}
    assert "P8 dp8x1 : D8 dp8x1" in refused and "P8 tp4x2 : D8 dp8x1" in refused
    assert "P4 cp4x1 : D12 tp4x3" in refused
    assert not {"agg dp8x2", "agg cp4x4", "P8 tp4x2 : D8 tp4x2", "P12 tp4x3 : D4 tp4x1"} & refused
    dep = next(d for d in deployments(16, 8) if d.label == "P8 dp8x1 : D8 dp8x1")
    assert engine_refusal(v41, dep.pools, None, old) is None  # no DSpark
    assert engine_refusal("deepseek-v4-flash", dep.pools, "mtp", old) is None  # V4's MTP
    # main@006cbb66 accepts DP attention and interleaved prefill CP with DP 1; vLLM and no engine refuse none
    assert not {d.label for d in deployments(16, 8) if engine_refusal(v41, d.pools, "dspark", new)}
    assert not {
        d.label for d in deployments(16, 8) if engine_refusal(v41, d.pools, "dspark", Engine(name="vllm"))
    }
    assert engine_refusal(v41, dep.pools, "dspark", None) is None
