"""Speculative decoding in a run: a model's own acceptance overrides its family's."""

from sim.api import run_scenario

from .helpers import scenario
from .traces import agent_trace

V4, V41 = "deepseek-v4-flash", "deepseek-v4.1-flash"


def test_a_models_own_acceptance_reaches_its_engines(tmp_path):
    trace = agent_trace(tmp_path / "t.parquet", sessions=2, turns=2, gap_s=1.0, first_input=2000, seed=0)
    models = [{"name": V4}, {"name": V41, "accepted_tokens_per_step": 3.0}]
    summary = run_scenario(scenario(tmp_path, trace, models=models, spec_decode={"enabled": True})).summary
    assert summary["models"][V41]["spec_decode"] == {
        "enabled": True, "method": "dspark", "accepted_tokens_per_step": 3.0, "draft_tokens": 5, "verify_rows": 6,
        "acceptance_source": "models[].accepted_tokens_per_step", "workload_kind": "coding",
    }  # fmt: skip
    v4 = summary["models"][V4]["spec_decode"]
    assert v4["accepted_tokens_per_step"] == 1.79 and "dsv4_mtp.yaml" in v4["acceptance_source"]  # measured
    assert summary["models"][V4]["spec_decode"]["verify_rows"] == 2
