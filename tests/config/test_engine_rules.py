"""Deployments SGLang would not start (sim.config.engine_rules), read on a scenario's pools."""

from __future__ import annotations

import json

import pytest
import yaml
from typer.testing import CliRunner

from sim.cli import app
from sim.config.engine_rules import DSPARK_PD_REFUSAL, engine_refusal
from sim.config.scenario import load_scenario
from sim.paths import project_root

V41, V4 = "deepseek-v4.1-flash", "deepseek-v4-flash"


def _pool(role: str, **kw) -> dict:
    return {"role": role, "dp": 1, "prefill_context_parallel": "off", **kw}


def test_the_main_job_runs_each_model_on_a_deployment_its_engine_starts():
    scn = load_scenario(project_root() / "scenarios" / "agent_1M.yaml")
    assert scn.spec_decode.enabled
    for model in (V4, V41):
        pools = [p.model_dump() for p in scn.for_model(model).cluster.pools]
        assert engine_refusal(model, pools, True) is None, model
    v4_pools = [
        p.model_dump() for p in scn.for_model(V4).cluster.pools
    ]  # CP4 prefill: V4's MTP, no such rule
    assert engine_refusal(V41, v4_pools, True) == DSPARK_PD_REFUSAL


@pytest.mark.parametrize(
    ("pools", "spec_decode", "refused"),
    [
        ([_pool("prefill", dp=8), _pool("decode")], True, True),
        ([_pool("prefill", prefill_context_parallel="round_robin"), _pool("decode")], True, True),
        ([_pool("prefill"), _pool("decode", dp=8)], True, True),
        ([_pool("prefill"), _pool("decode")], True, False),  # plain TP on both sides
        ([_pool("prefill", dp=8), _pool("decode", dp=8)], False, False),  # no DSpark
        ([_pool("colocated", dp=8)], True, False),  # aggregated
    ],
)
def test_dspark_pd_needs_dp1_cp1_pools(pools, spec_decode, refused):
    assert (engine_refusal(V41, pools, spec_decode) is not None) is refused


def test_scenario_check_notes_the_refusal(tmp_path):
    doc = yaml.safe_load((project_root() / "scenarios" / "agent_1M.yaml").read_text())
    doc["models"] = [V4, V41]  # both on the scenario's pools: V4.1's TP pools, V4's CP4 prefill
    doc["cluster"]["pools"][0]["prefill_context_parallel"] = "round_robin"
    doc["workload"]["generator"] = str(project_root() / "scenarios" / doc["workload"]["generator"])
    path = tmp_path / "refused.yaml"
    path.write_text(yaml.safe_dump(doc, sort_keys=False))
    result = CliRunner().invoke(app, ["scenario", "check", str(path)], env={"COLUMNS": "300"})
    assert result.exit_code == 0, result.output
    assert "note: deepseek-v4.1-flash: SGLang would not start this deployment" in result.stdout
    assert "note: deepseek-v4-flash" not in result.stdout
    data = CliRunner().invoke(app, ["scenario", "check", str(path), "--json"]).stdout
    models = {m["name"]: m["engine_refusal"] for m in json.loads(data)["summary"]["models"]}
    assert models["deepseek-v4-flash"] is None and models["deepseek-v4.1-flash"] == DSPARK_PD_REFUSAL
    main = CliRunner().invoke(app, ["scenario", "check", str(project_root() / "scenarios" / "agent_1M.yaml")])
    assert main.exit_code == 0 and "SGLang would not start" not in main.stdout
