"""A model's own pools (`models[].pools`): validated as `cluster.pools` are, used for that model only,
and left out of the plan's and the deployment search's candidates (they set the cluster's pools)."""

import pytest
import yaml

from sim.config.scenario import load_scenario
from sim.errors import InputError
from sim.paths import project_root
from sim.plan.backend import SimBackend

MAIN = project_root() / "scenarios" / "agent_1M.yaml"


def _doc() -> dict:
    """The main job with V4 on pools of its own: the same prefill pool as the cluster's, two TP4 decode instances."""
    doc = yaml.safe_load(MAIN.read_text())
    doc["workload"]["generator"] = str(project_root() / "scenarios" / doc["workload"]["generator"])
    prefill = dict(doc["cluster"]["pools"][0])
    decode = {
        "name": "decode",
        "role": "decode",
        "instances": 2,
        "gpus_per_instance": 4,
        "tp": 4,
        "ep": 4,
        "dp": 1,
    }
    doc["models"][0] = {"name": "deepseek-v4-flash", "pools": [prefill, decode]}
    return doc


def test_each_model_runs_on_its_own_pools_or_the_clusters(tmp_path):
    path = tmp_path / "own.yaml"
    path.write_text(yaml.safe_dump(_doc(), sort_keys=False))
    scn = load_scenario(path)
    v4, v41 = scn.for_model("deepseek-v4-flash"), scn.for_model("deepseek-v4.1-flash")
    assert v41 is scn and [p.gpus_per_instance for p in v41.cluster.pools] == [8, 8]
    assert [(p.prefill_context_parallel, p.instances) for p in v4.cluster.pools] == [
        ("round_robin", 2),
        ("off", 2),
    ]
    assert sum(v4.pool_layout(p).gpus for p in v4.cluster.pools) == sum(
        scn.pool_layout(p).gpus for p in scn.cluster.pools
    )  # the same GPU count for both models


def test_own_pools_are_checked_like_the_clusters(tmp_path):
    doc = _doc()
    doc["models"][0]["pools"][1]["name"] = "prefill"
    path = tmp_path / "bad.yaml"
    path.write_text(yaml.safe_dump(doc, sort_keys=False))
    with pytest.raises(
        InputError, match=r"models\[0\]\.pools\[1\]\.name: duplicate pool name \(also pools\[0\]\)$"
    ):
        load_scenario(path)


def test_a_candidate_drops_the_models_own_pools():
    template = _doc()
    assert SimBackend().model_overrides(template, "deepseek-v4-flash") == {
        "models": [{"name": "deepseek-v4-flash"}]
    }
