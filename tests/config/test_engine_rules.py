"""Engine profiles (sim.config.engine_rules): the step rules a named engine gives each pool, and the
deployments it would not start, each refusal with its source and version."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml
from typer.testing import CliRunner

from sim.cli import app
from sim.config.engine_rules import (
    VERSIONS,
    Engine,
    StepRules,
    engine_refusal,
    pool_step_rules,
    profile_rows,
    speculative_method,
)
from sim.config.errors import validate_or_raise
from sim.config.scenario import load_scenario
from sim.errors import InputError
from sim.paths import project_root

V41, V4 = "deepseek-v4.1-flash", "deepseek-v4-flash"
OLD, NEW = Engine(name="sglang", version="0.5.16"), Engine(name="sglang")


def _pool(role: str, **kw) -> dict:
    return {"name": role, "role": role, "dp": 1, "prefill_context_parallel": "off", **kw}


def test_the_main_job_names_sglang_and_its_newest_rule_starts_it():
    scn = load_scenario(project_root() / "scenarios" / "agent_1M.yaml")
    assert scn.engine == NEW and NEW.resolved_version == VERSIONS["sglang"][-1] == "main@006cbb66"
    for model in (V4, V41):  # each on its own deployment (models[].pools, else cluster.pools)
        pools = [p.model_dump() for p in scn.for_model(model).cluster.pools]
        assert engine_refusal(model, pools, "dspark" if model == V41 else "mtp", NEW) is None, model
    cell = [
        _pool("prefill", prefill_context_parallel="round_robin"),
        _pool("decode", dp=8),
    ]  # the 1P + 1D cell
    refusal = engine_refusal(V41, cell, "dspark", OLD)  # the rule as SGLang first added DSpark PD
    assert (
        "sglang 0.5.16 would not start" in refusal and "PR #38949" in refusal and "DP=1 and CP=1" in refusal
    )
    assert engine_refusal(V4, cell, "mtp", OLD) is None  # V4's MTP: no such rule


@pytest.mark.parametrize(
    ("pools", "spec_decode", "old", "new"),
    [
        (
            [_pool("prefill", dp=8), _pool("decode")],
            True,
            True,
            False,
        ),  # DP attention: accepted since 006cbb66
        (
            [_pool("prefill", prefill_context_parallel="round_robin"), _pool("decode", dp=8)],
            True,
            True,
            False,
        ),
        (
            [_pool("prefill"), _pool("decode", prefill_context_parallel="round_robin")],
            True,
            True,
            True,
        ),  # decode CP
        (
            [_pool("prefill", prefill_context_parallel="zigzag"), _pool("decode")],
            True,
            True,
            True,
        ),  # NPU only
        ([_pool("prefill"), _pool("decode")], True, False, False),  # plain TP on both sides
        ([_pool("prefill", dp=8), _pool("decode", dp=8)], False, False, False),  # no DSpark
        ([_pool("colocated", dp=8)], True, False, False),  # aggregated
    ],
)
def test_sglang_dspark_pd_rule_as_it_changed(pools, spec_decode, old, new):
    method = "dspark" if spec_decode else None
    assert (engine_refusal(V41, pools, method, OLD) is not None) is old
    assert (engine_refusal(V41, pools, method, NEW) is not None) is new


def test_vllm_and_no_engine_refuse_nothing_sim_can_express():
    pools = [_pool("prefill", dp=8), _pool("decode", prefill_context_parallel="round_robin")]
    assert engine_refusal(V41, pools, "dspark", Engine(name="vllm")) is None
    assert engine_refusal(V41, pools, "dspark", None) is None
    # a pool's own engine replaces the scenario's for that pool
    assert engine_refusal(V41, [{**pools[0], "engine": {"name": "sglang", "version": "0.5.15"}}, pools[1]], "dspark",
                          Engine(name="vllm")) is not None  # fmt: skip


V4_0731 = "deepseek-v4-flash-0731"


@pytest.mark.parametrize(
    ("pool", "version", "refused"),
    [
        (_pool("colocated", tp=4), "0.5.15", "Only EAGLE"),  # 0.5.15 has no DSpark
        (_pool("colocated", tp=4), "0.5.16", None),  # the cookbook's low-latency / balanced DSpark cells
        (_pool("colocated", tp=8), "main@006cbb66", None),
        (_pool("colocated", tp=1, dp=8, moe_a2a="deepep"), "0.5.16", "built-in TP MoE"),
        (_pool("colocated", tp=1, dp=8, moe_a2a="megamoe"), "0.5.16", "built-in TP MoE"),
        (_pool("colocated", tp=2, dp=4), "0.5.16", "attn_tp == 1"),
        (_pool("colocated", tp=1, dp=8), "0.5.16", None),  # DP attention with the TP MoE and attention TP 1
        (
            _pool("prefill", tp=4, prefill_context_parallel="round_robin"),
            "0.5.16",
            "prefill context parallelism",
        ),
    ],
)
def test_sglang_v4_dspark_rules(pool, version, refused):
    """DSpark on V4's backbone (0731) as SGLang's v0.5.16 speculative hook and DSpark worker check it."""
    refusal = engine_refusal(V4_0731, [pool], "dspark", Engine(name="sglang", version=version))
    assert refusal is None if refused is None else refused in refusal
    # EAGLE on the MTP block: none of these
    assert engine_refusal(V4, [pool], "mtp", Engine(name="sglang", version=version)) is None
    assert engine_refusal(V4_0731, [pool], None, Engine(name="sglang", version=version)) is None


def test_the_drafter_a_scenario_runs_is_its_family_blocks_method_or_the_familys_default():
    on = {"enabled": True}
    assert speculative_method({"enabled": False, "v4": {"method": "dspark"}}, V4_0731) is None
    assert speculative_method(on, V4) == "mtp" and speculative_method(on, V41) == "dspark"
    assert speculative_method({**on, "v4": {"method": "dspark", "draft_tokens": 5}}, V4_0731) == "dspark"


def test_step_rules_follow_the_engine_unless_the_scheduler_sets_them():
    coloc_dp = _pool("colocated", dp=4)
    assert pool_step_rules(Engine(name="vllm"), coloc_dp, True, {}) == StepRules(
        "mixed", "per_rank", "instance"
    )
    assert pool_step_rules(NEW, coloc_dp, True, {}) == StepRules("prefill_first", "divided", "per_rank")
    # without spec each DP rank picks its own batch (SGLang's dp_step_composition); dp 1 and other roles keep
    # the engine's step_composition
    assert pool_step_rules(NEW, coloc_dp, False, {}).step_composition == "rank_prefill_first"
    assert pool_step_rules(NEW, _pool("colocated", dp=1), False, {}).step_composition == "prefill_first"
    assert pool_step_rules(NEW, _pool("decode", dp=4), False, {}).step_composition == "prefill_first"
    assert pool_step_rules(Engine(name="vllm"), coloc_dp, False, {}).step_composition == "mixed"
    assert pool_step_rules(NEW, coloc_dp, False, {"step_composition": "prefill_first"}).step_composition == (
        "prefill_first"  # an explicit what-if
    )
    assert pool_step_rules(None, coloc_dp, True, {}) == StepRules(
        "mixed", "divided", "instance"
    )  # sim's generic defaults
    explicit = {"step_composition": "mixed", "dp_prefill_budget": "divided", "dp_running_cap": "per_rank"}
    assert pool_step_rules(Engine(name="vllm"), coloc_dp, True, explicit) == StepRules(
        "mixed", "divided", "per_rank"
    )
    # SGLang caps running requests per DP worker (--max-running-requests // dp), read from its code
    cap_rule = next(r for r in profile_rows() if r["engine"] == "sglang" and r["rule"] == "dp_running_cap")
    assert cap_rule["value"] == "per_rank" and "_resolve_max_num_reqs" in cap_rule["source"]


def test_an_unknown_version_gets_one_clear_message():
    with pytest.raises(InputError) as err:
        validate_or_raise(Engine, {"name": "sglang", "version": "9.9"}, file="x.yaml")
    assert "version: not a sglang version sim has rules for (got '9.9'); allowed: 0.5.15, 0.5.16" in str(
        err.value
    )


def test_every_rule_has_a_source_and_scenario_fields_lists_them():
    rows = profile_rows()
    assert rows and all(r["source"] and r["versions"] for r in rows)
    assert {r["engine"] for r in rows} == {"vllm", "sglang"}
    result = CliRunner().invoke(app, ["scenario", "fields", "--json"])
    fields = {r["field"]: r for r in json.loads(result.stdout)}
    assert fields["engine.name"]["type"] == "Literal['vllm', 'sglang']"
    assert fields["engine rule: sglang 0.5.15, 0.5.16: refuses"]["description"].startswith("sglang python/")
    dp_rule = fields["engine rule: sglang 0.5.15, 0.5.16, main@006cbb66: dp_step_composition"]
    assert dp_rule["default"] == "rank_prefill_first" and "get_next_batch_to_run" in dp_rule["description"]
    text = CliRunner().invoke(app, ["scenario", "fields"], env={"COLUMNS": "300"}).stdout
    assert "Engine profiles" in text and "main@006cbb66" in text


def test_scenario_check_notes_a_refusal_with_its_version(tmp_path):
    path = project_root() / "scenarios" / "agent_1M.yaml"
    doc = yaml.safe_load(path.read_text())
    doc["engine"]["version"] = "0.5.16"
    doc["cluster"]["pools"][0]["prefill_context_parallel"] = "round_robin"  # V4.1 on CP prefill
    doc["workload"]["generator"] = str(path.parent / doc["workload"]["generator"])
    old = tmp_path / "agent_1M_old.yaml"
    old.write_text(yaml.safe_dump(doc, sort_keys=False))
    result = CliRunner().invoke(app, ["scenario", "check", str(old)], env={"COLUMNS": "300"})
    assert result.exit_code == 0, result.output
    assert "note: deepseek-v4.1-flash: sglang 0.5.16 would not start this deployment" in result.stdout
    assert "note: deepseek-v4-flash" not in result.stdout
    data = CliRunner().invoke(app, ["scenario", "check", str(path), "--json"]).stdout
    models = {m["name"]: m["engine_refusal"] for m in json.loads(data)["summary"]["models"]}
    assert models == {"deepseek-v4-flash": None, "deepseek-v4.1-flash": None}  # the newest rule starts it


def test_sglang_hands_a_tp_all_reduce_above_8_mib_to_nccl():
    from sim.config.engine_rules import custom_allreduce_max_bytes

    assert custom_allreduce_max_bytes(Engine(name="sglang")) == 8 * 1024 * 1024
    # vLLM 0.34.0: the largest of its FlashInfer / custom / symmetric-memory tiers per compute capability and TP
    assert custom_allreduce_max_bytes(Engine(name="vllm")) == float("inf")  # capability unknown
    assert custom_allreduce_max_bytes(Engine(name="vllm"), "10.0", 4) == 32 * 1024 * 1024
    assert custom_allreduce_max_bytes(Engine(name="vllm"), "10.0", 8) == 128 * 1024 * 1024
    assert custom_allreduce_max_bytes(Engine(name="vllm"), "9.0", 8) == 64 * 1024 * 1024
    assert custom_allreduce_max_bytes(Engine(name="vllm"), "8.0", 4) == 8 * 1024 * 1024  # custom's own 8 MiB
    assert custom_allreduce_max_bytes(Engine(name="sglang"), "10.0", 4) == 8 * 1024 * 1024
    assert custom_allreduce_max_bytes(None) == float("inf")


def test_sglang_runs_v4_prefill_eagerly_and_its_launches_follow_each_layers_attention_and_moe():
    from sim.config.engine_rules import SGLANG_V4_EXTEND_LAUNCHES as inv
    from sim.config.engine_rules import LayerShape, eager_prefill_launches, rules_for

    swa, csa, hca = (
        LayerShape(False, False, False, False),
        LayerShape(True, True, True, True),
        LayerShape(True, False, True, False),
    )
    # the counted layers (docs/carry/eager/sglang_v4_launches.md, best): Mega MoE SWA 33 / CSA 49 / HCA 38,
    # DeepEP 49 / 65 / 54, TP 4 with flashinfer_mxfp4 38 / 54 / 43
    assert [inv.layer(s, "megamoe", 1) for s in (swa, csa, hca)] == [33, 49, 38]
    assert [inv.layer(s, "deepep", 1) for s in (swa, csa, hca)] == [49, 65, 54]
    assert [inv.layer(s, "none", 4) for s in (swa, csa, hca)] == [38, 54, 43]
    v4 = [swa] * 2 + [csa, hca] * 20 + [csa]  # V4-Flash: compress_ratios [0, 0] + [4, 128] x 20 + [4]
    step, layers = eager_prefill_launches(NEW, V4, v4, "megamoe", 1)
    assert (step, layers) == (120, 1855)  # the count's best for the 43 layers
    assert eager_prefill_launches(NEW, V4, v4, "deepep", 1)[1] == 2543
    assert eager_prefill_launches(NEW, V4, v4, "none", 4)[1] == 2070
    assert eager_prefill_launches(Engine(name="vllm"), V4, v4, "megamoe", 1) is None  # graphed (breakable)
    assert eager_prefill_launches(None, V4, v4, "megamoe", 1) is None
    assert rules_for(NEW, "prefill_cuda_graph").value.startswith("off")
    assert "indexer 10" in rules_for(NEW, "eager_prefill_launches").value


def test_scenario_check_shows_each_prefilling_pools_eager_floor_and_where_it_comes_from(tmp_path):
    from sim.timing.host import HOST_S_PER_LAUNCH

    main = project_root() / "scenarios" / "agent_1M.yaml"
    data = json.loads(CliRunner().invoke(app, ["scenario", "check", str(main), "--json"]).stdout)
    floors = {m["name"]: m["eager_prefill"] for m in data["summary"]["models"]}
    # the prefill pools only (the decode pools never prefill); V4-Flash's: TP 8, experts without an exchange
    assert [f["pool"] for f in floors[V4]] == ["prefill"] and [f["pool"] for f in floors[V41]] == ["prefill"]
    v4 = floors[V4][0]
    assert v4["set_by"] == "engine" and v4["launches_per_step"] == 120 + 2070
    assert v4["floor_s"] == pytest.approx(2190 * HOST_S_PER_LAUNCH)
    doc = yaml.safe_load(main.read_text())
    doc["timing"] = {"host": {"eager_per_layer_s": 0.002}}
    path = tmp_path / "agent.yaml"
    for rel in ("generator", "trace"):  # keep the workload's relative paths valid from tmp_path
        if rel in doc["workload"] and not Path(doc["workload"][rel]).is_absolute():
            doc["workload"][rel] = str(main.parent / doc["workload"][rel])
    path.write_text(yaml.safe_dump(doc))
    result = CliRunner().invoke(app, ["scenario", "check", str(path)])
    assert result.exit_code == 0, result.stdout
    # the engine's 120 launches once a step, the scenario's 2 ms a layer
    expected_ms = (120 * HOST_S_PER_LAUNCH + 0.002 * 43) * 1e3
    assert "set by timing.host" in result.stdout and f"at least {expected_ms:.1f} ms" in result.stdout
