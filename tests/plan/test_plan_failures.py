"""`sim plan` with failures on (issue 31): a template that lists the failures extension has every
candidate simulated with failures, so the recommendation is the cheapest cluster whose SLO holds with
them: the spare capacity a purchase needs."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import yaml
from simulator.traces import agent_trace
from typer.testing import CliRunner

from sim.cli import app

HERE = Path(__file__).parent
FAILURES = {
    "use": "sim.extensions.failures:start",
    "params": {"mtbf_gpu_hours": 0.2, "repair_s": 20, "node_fraction": 0.0},
}


def _recommended_nodes(folder: Path, name: str, extensions: list | None) -> dict:
    template = yaml.safe_load((HERE / "plan_tiny_scenario.yaml").read_text())
    plan = yaml.safe_load((HERE / "plan_tiny.yaml").read_text())
    template["models"] = plan["models"] = ["deepseek-v4.1-flash"]
    if extensions:
        template["extensions"] = extensions
    (folder / f"{name}_scenario.yaml").write_text(yaml.safe_dump(template))
    plan["template"] = f"{name}_scenario.yaml"
    (folder / f"{name}.yaml").write_text(yaml.safe_dump(plan))
    result = CliRunner().invoke(
        app, ["plan", str(folder / f"{name}.yaml"), "--out", str(folder / name), "--workers", "1"]
    )
    assert result.exit_code == 0, result.output + repr(result.exception)
    entry = json.loads((folder / name / "recommendation.json").read_text())["models"]["deepseek-v4.1-flash"]
    assert entry["feasible"]
    return entry["nodes"]


def test_a_plan_with_failures_on_buys_the_spare_capacity_they_need(tmp_path):
    shutil.copy(HERE / "plan_tiny.yaml", tmp_path)
    # sessions every 0.5 s: one prefill node carries them with room (its TP 8 GPUs pad their heads, sixth sitting)
    agent_trace(tmp_path / "plan_tiny_trace.parquet", sessions=80, turns=4, gap_s=0.5, shared_prefix_tokens=0)
    without = _recommended_nodes(tmp_path, "plain", None)
    with_failures = _recommended_nodes(tmp_path, "failures", [FAILURES])
    assert without == {"prefill": 1, "decode": 1}
    assert sum(with_failures.values()) > sum(without.values())  # a spare to take over while one is down
    reproduce = yaml.safe_load((tmp_path / "failures" / "scenarios" / "deepseek-v4.1-flash.yaml").read_text())
    assert reproduce["extensions"] == [FAILURES]
