"""`sim plan` end to end on the real simulator: local processes, a real local Ray instance and a running
Ray cluster of two nodes (`--ray ADDRESS`) give byte-identical recommendations, and an address where
no cluster listens fails at once in one line; a plan killed half way resumes to the same answer; the
printed `sim run` command reproduces the recommended run."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from simulator.traces import agent_trace
from typer.testing import CliRunner

from sim.cli import app
from sim.errors import InputError

HERE = Path(__file__).parent
REC = "recommendation.json"


@pytest.fixture(scope="module")
def plan(tmp_path_factory) -> Path:
    """plan_tiny.yaml and its template beside a freshly written tiny trace."""
    folder = tmp_path_factory.mktemp("plan")
    for name in ("plan_tiny.yaml", "plan_tiny_scenario.yaml"):
        shutil.copy(HERE / name, folder / name)
    # a session every 0.25 s: a steady rate (sim.plan.steady) that the small clusters can keep up with
    agent_trace(folder / "plan_tiny_trace.parquet", sessions=80, turns=4, gap_s=0.25, shared_prefix_tokens=0)
    return folder / "plan_tiny.yaml"


def _plan(*args: str):
    result = CliRunner().invoke(app, ["plan", *map(str, args)], env={"COLUMNS": "200"})
    assert result.exit_code == 0, result.output + repr(result.exception)
    return result


@pytest.fixture(scope="module")
def local_run(plan):
    out = plan.parent / "local"
    result = _plan(plan, "--out", out, "--workers", 2)
    return out, result.output


def test_local_plan_recommends_a_feasible_configuration_per_model(local_run):
    out, output = local_run
    rec = json.loads((out / REC).read_text())
    assert set(rec["models"]) == {"deepseek-v4-flash", "deepseek-v4.1-flash"}
    feasible = [entry for entry in rec["models"].values() if entry["feasible"]]
    assert feasible, "the tiny plan's loose constraints should admit some configuration"
    for entry in feasible:
        assert entry["metrics"]["ttft_p99_s"] <= rec["constraints"]["ttft_p99_s"]
        assert entry["total_gpus"] == 8 * sum(entry["nodes"].values())
    assert "Capacity verdict" in output
    assert (out / "frontier.html").stat().st_size > 1_000_000
    assert list((out / "candidates").glob("part-*.parquet"))


def test_ray_local_gives_a_byte_identical_recommendation(plan, local_run):
    out, _ = local_run
    ray_out = plan.parent / "ray"
    _plan(plan, "--out", ray_out, "--workers", 2, "--ray", "local")
    assert (ray_out / REC).read_bytes() == (out / REC).read_bytes()


def test_a_plan_on_a_ray_cluster_gives_the_local_recommendation(plan, local_run, ray_cluster):
    out, _ = local_run
    cluster_out = plan.parent / "ray-cluster"
    _plan(plan, "--out", cluster_out, "--ray", ray_cluster.address)
    assert (cluster_out / REC).read_bytes() == (out / REC).read_bytes()
    assert (cluster_out / "frontier.html").read_bytes() == (out / "frontier.html").read_bytes()


def test_an_address_where_no_cluster_listens_fails_at_once_in_one_line(plan, tmp_path):
    started = time.monotonic()
    result = CliRunner().invoke(
        app, ["plan", str(plan), "--out", str(tmp_path / "o"), "--ray", "127.0.0.1:9"]
    )
    assert time.monotonic() - started < 30
    assert isinstance(result.exception, InputError)
    message = str(result.exception)
    assert message.startswith("--ray: cannot reach a Ray cluster at 127.0.0.1:9") and "\n" not in message
    assert not (tmp_path / "o").exists()


def test_printed_sim_run_command_reproduces_the_recommended_run(local_run, tmp_path):
    out, output = local_run
    rec = json.loads((out / REC).read_text())
    model = next(name for name, entry in rec["models"].items() if entry["feasible"])
    line = next(x for x in output.splitlines() if x.startswith(f"reproduce {model}: sim run "))
    _, _, scenario, _, seed = line.split(": ", 1)[1].split()
    result = CliRunner().invoke(app, ["run", scenario, "--seed", seed, "--out", str(tmp_path), "--json"])
    assert result.exit_code == 0, result.output
    summary = json.loads(result.stdout)["models"][model]
    for name, value in rec["models"][model]["metrics"].items():
        assert summary[name] == value, name


def test_killed_plan_resumes_to_the_same_answer(plan, local_run):
    out, _ = local_run
    killed = plan.parent / "killed"
    sim = Path(sys.executable).with_name("sim")
    command = [str(sim), "plan", str(plan), "--out", str(killed), "--workers", "1"]
    proc = subprocess.Popen(
        command, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True
    )
    try:
        deadline = time.monotonic() + 120
        while not list((killed / "candidates").glob("part-*.parquet")):
            assert proc.poll() is None, "the plan ended before any candidate finished"
            assert time.monotonic() < deadline
            time.sleep(0.05)
    finally:
        os.killpg(proc.pid, signal.SIGKILL)  # the plan and its worker processes: the group we started
        proc.wait()
    assert not (killed / REC).exists(), "killed too late: the plan had already finished"
    finished_before = len(list((killed / "candidates").glob("part-*.parquet")))
    result = _plan(plan, "--out", killed, "--workers", 2)
    assert f"{finished_before} from the ledger" in result.output
    assert (killed / REC).read_bytes() == (out / REC).read_bytes()


def test_bad_plan_is_one_input_error(tmp_path):
    bad = tmp_path / "bad.yaml"
    bad.write_text("name: x\n")
    result = CliRunner().invoke(app, ["plan", str(bad), "--out", str(tmp_path / "o")])
    assert result.exit_code != 0
    assert "template: required field is missing" in str(result.exception)


def test_keys_follow_the_input_files_and_workers_refuse_another_simulator(plan, tmp_path):
    from sim.plan.backend import SimBackend, evaluate
    from sim.plan.space import EvalTask

    template = SimBackend().load_template(plan.parent / "plan_tiny_scenario.yaml")
    before = SimBackend().fingerprint(template)
    copy = tmp_path / "trace.parquet"
    agent_trace(copy, sessions=3, turns=2, gap_s=1.0, shared_prefix_tokens=0)
    moved = {**template, "workload": {**template["workload"], "trace": str(copy)}}
    assert SimBackend().fingerprint(moved) != before  # other trace content, other key
    task = EvalTask("k", "deepseek-v4-flash", template, 5, "0" * 32)
    with pytest.raises(RuntimeError, match="differ from the driver's"):
        evaluate(task)
