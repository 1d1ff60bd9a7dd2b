"""`sim run` and `sim bench` from the command line."""

import json

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


def test_sim_bench_reports_requests_per_second():
    result = CliRunner().invoke(app, ["bench", "--requests", "300", "--repeat", "2", "--json"])
    assert result.exit_code == 0, result.output
    out = json.loads(result.stdout)
    assert out["requests"] == 300 and out["requests_per_s"] > 0
    assert out["core"].startswith(("compiled", "source"))
    assert out["runs"] == len(out["wall_s_runs"]) == 2 and out["requests_per_s_best"] >= out["requests_per_s"]
