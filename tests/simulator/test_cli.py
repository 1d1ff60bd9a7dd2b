"""`sim run` and `sim bench` from the command line."""

import json

import yaml
from typer.testing import CliRunner

from sim.cli import app
from sim.paths import project_root


def test_sim_run_smoke_prints_json_and_writes_outputs(tmp_path):
    scenario = project_root() / "scenarios" / "smoke.yaml"
    result = CliRunner().invoke(app, ["run", str(scenario), "--out", str(tmp_path), "--json"])
    assert result.exit_code == 0, result.output
    summary = json.loads(result.stdout)
    assert set(summary["models"]) == {"deepseek-v4-flash", "deepseek-v4.1-flash"}
    for name, s in summary["models"].items():
        assert s["requests_arrived"] == s["requests_completed"] + s["requests_rejected"]
        assert (tmp_path / name / "requests.parquet").is_file()
        assert (tmp_path / name / "timeseries" / "node.parquet").is_file()
    assert json.loads((tmp_path / "summary.json").read_text()) == summary


def test_sim_run_prints_the_side_by_side_table(tmp_path):
    scenario = project_root() / "scenarios" / "smoke.yaml"
    result = CliRunner().invoke(app, ["run", str(scenario), "--out", str(tmp_path)], env={"COLUMNS": "160"})
    assert result.exit_code == 0, result.output
    assert "V4.1-Flash / V4-Flash" in result.stdout and "API hit" in result.stdout
    words = " ".join(result.stdout.split())  # the footer wraps where its wall time has one digit more
    assert "simulator core compiled" in words or "simulator core source" in words
    peak_mb = float(words.split("peak memory ")[1].split(" MB")[0].replace(",", ""))
    assert 30 < peak_mb < 4_000  # resident MB of the largest process: Python + numpy + a smoke run


def test_sim_run_says_when_the_engine_would_not_start_the_deployment(tmp_path):
    smoke = yaml.safe_load((project_root() / "scenarios" / "smoke.yaml").read_text())
    smoke["workload"] = {**smoke["workload"], "max_requests": 40,
                         "trace": str(project_root() / "traces" / "agent_1M_sample.parquet")}  # fmt: skip
    smoke["cluster"]["pools"] = [  # DP-attention pools on both sides, as agent_1M's decode pool
        {"name": "p", "role": "prefill", "nodes": 1, "gpus_per_instance": 8, "tp": 1, "ep": 8, "dp": 8},
        {"name": "d", "role": "decode", "nodes": 1, "gpus_per_instance": 8, "tp": 1, "ep": 8, "dp": 8},
    ]
    smoke["spec_decode"] = {"enabled": True}
    smoke["engine"] = {"name": "sglang", "version": "0.5.16"}  # before main@006cbb66 accepted DP attention
    path = tmp_path / "dspark_pd.yaml"
    path.write_text(yaml.safe_dump(smoke))
    result = CliRunner().invoke(
        app, ["run", str(path), "--out", str(tmp_path / "out")], env={"COLUMNS": "200"}
    )
    assert result.exit_code == 0, result.output
    words = " ".join(result.stdout.split())
    assert "deepseek-v4.1-flash: sglang 0.5.16 would not start this deployment" in words
    assert "deepseek-v4-flash: sglang" not in words
    models = json.loads((tmp_path / "out" / "summary.json").read_text())["models"]
    assert models["deepseek-v4-flash"]["engine_refusal"] is None
    refusal = models["deepseek-v4.1-flash"]["engine_refusal"]
    assert "DP 1 and CP off" in refusal and "sglang PR #38949" in refusal


def test_sim_bench_reports_requests_per_second():
    result = CliRunner().invoke(app, ["bench", "--requests", "300", "--repeat", "2", "--json"])
    assert result.exit_code == 0, result.output
    out = json.loads(result.stdout)
    assert out["requests"] == 300 and out["requests_per_s"] > 0
    assert out["core"].startswith(("compiled", "source"))
    assert out["runs"] == len(out["wall_s_runs"]) == 2 and out["requests_per_s_best"] >= out["requests_per_s"]


def test_sim_run_records_what_ran_v41s_index_layers_per_pool(tmp_path):
    """summary.json keeps, per pool, the index path the run timed (sim.cluster.build.pool_index_record): under
    SGLang main on the H200 the prefill pool runs the torch indexer from its table, the decode pool runs no prefill
    step, both score the Reindex layers over every position; a pool's `prefill_indexer` setting replaces the rule."""
    smoke = yaml.safe_load((project_root() / "scenarios" / "smoke.yaml").read_text())
    smoke["workload"] = {**smoke["workload"], "max_requests": 20,
                         "trace": str(project_root() / "traces" / "agent_1M_sample.parquet")}  # fmt: skip
    smoke["models"] = ["deepseek-v4.1-flash"]
    smoke["cluster"]["pools"] = [
        {"name": "p", "role": "prefill", "nodes": 1, "gpus_per_instance": 8, "tp": 8},
        {"name": "d", "role": "decode", "nodes": 1, "gpus_per_instance": 8, "tp": 8},
    ]
    smoke["engine"] = {"name": "sglang", "version": "main@006cbb66"}
    path = tmp_path / "v41_sglang.yaml"
    path.write_text(yaml.safe_dump(smoke))
    result = CliRunner().invoke(app, ["run", str(path), "--out", str(tmp_path / "out"), "--json"])
    assert result.exit_code == 0, result.output
    pools = {
        p["name"]: p["index_paths"]
        for p in json.loads((tmp_path / "out" / "summary.json").read_text())["models"]["deepseek-v4.1-flash"][
            "pools"
        ]
    }
    assert pools["p"]["prefill_indexer"] == "torch" and pools["p"]["reindex_scoring"] == "full_range"
    assert pools["p"]["indexer_table"].endswith("sglang_v41_torch_indexer_h200.csv")
    assert isinstance(pools["p"]["indexer_table_derived"], bool)
    assert pools["d"] == {"prefill_indexer": None, "reindex_scoring": "full_range", "indexer_table": None,
                          "indexer_table_derived": None}  # fmt: skip
