"""Deployments SGLang would not start (sim.config.engine_rules), read on a scenario's pools."""

from __future__ import annotations

import json

import pytest
from typer.testing import CliRunner

from sim.cli import app
from sim.config.engine_rules import DSPARK_PD_REFUSAL, engine_refusal
from sim.config.scenario import load_scenario
from sim.paths import project_root

V41, V4 = "deepseek-v4.1-flash", "deepseek-v4-flash"


def _pool(role: str, **kw) -> dict:
    return {"role": role, "dp": 1, "prefill_context_parallel": "off", **kw}


def test_the_main_job_runs_v41_on_a_deployment_sglang_refuses():
    scn = load_scenario(project_root() / "scenarios" / "agent_1M.yaml")
    pools = [p.model_dump() for p in scn.cluster.pools]  # CP8 prefill, DP8 decode, DSpark on
    assert scn.spec_decode.enabled
    assert engine_refusal(V41, pools, True) == DSPARK_PD_REFUSAL
    assert engine_refusal(V4, pools, True) is None  # V4's MTP: no such rule


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


def test_scenario_check_notes_the_refusal():
    path = project_root() / "scenarios" / "agent_1M.yaml"
    result = CliRunner().invoke(app, ["scenario", "check", str(path)], env={"COLUMNS": "300"})
    assert result.exit_code == 0, result.output
    assert "note: deepseek-v4.1-flash: SGLang would not start this deployment" in result.stdout
    assert "note: deepseek-v4-flash" not in result.stdout
    data = CliRunner().invoke(app, ["scenario", "check", str(path), "--json"]).stdout
    models = {m["name"]: m["engine_refusal"] for m in json.loads(data)["summary"]["models"]}
    assert models["deepseek-v4-flash"] is None and models["deepseek-v4.1-flash"] == DSPARK_PD_REFUSAL
