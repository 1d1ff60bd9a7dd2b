"""Scenario loading: a valid file loads frozen; each kind of bad input names its field path."""

from __future__ import annotations

import copy
import json
from pathlib import Path

import pydantic
import pytest
import yaml
from simulator.traces import agent_trace
from typer.testing import CliRunner

from sim.cli import app
from sim.config import Scenario, load_scenario
from sim.errors import InputError

VALID = {
    "name": "smoke",
    "seed": 7,
    "models": [
        "deepseek-v4-flash",
        {"name": "deepseek-v4.1-flash", "prefill_mode": "ced", "kv_layout": "deepseek"},
    ],
    "hardware": "nvidia-h200-hgx8",
    "cluster": {
        "pools": [
            {"name": "pre", "role": "prefill", "nodes": 2, "gpus_per_instance": 8, "tp": 8, "ep": 8, "dp": 1},
            {
                "name": "dec",
                "role": "decode",
                "nodes": 4,
                "gpus_per_instance": 16,
                "tp": 4,
                "ep": 16,
                "dp": 4,
            },
        ],
        "node": {"dram_gb": 4096},
    },
    "workload": {"trace": "traces/t.parquet", "replay": "closed_loop", "warmup_s": 60, "horizon_s": 3600},
    "slo": {"ttft_s": 2.0, "tpot_s": 0.05},
    "pricing": {"term": "capex_4y"},
}


@pytest.fixture
def folder(tmp_path: Path) -> Path:
    (tmp_path / "traces").mkdir()
    agent_trace(tmp_path / "traces" / "t.parquet", sessions=3, turns=2)  # `scenario check` reads it whole
    (tmp_path / "gen.yaml").write_text("days: 1\n")
    return tmp_path


def write(folder: Path, data: dict | str) -> Path:
    path = folder / "scenario.yaml"
    path.write_text(data if isinstance(data, str) else yaml.safe_dump(data, sort_keys=False))
    return path


def errors_of(folder: Path, data: dict | str) -> list[str]:
    path = write(folder, data)
    with pytest.raises(InputError) as err:
        load_scenario(path)
    prefix = f"{path}: "
    assert all(line.startswith(prefix) for line in err.value.lines)
    return [line.removeprefix(prefix) for line in err.value.lines]


def variant(**changes) -> dict:
    """VALID with dotted-path changes applied; a value of DELETE removes the key."""
    data = copy.deepcopy(VALID)
    for dotted, value in changes.items():
        *parents, last = dotted.split("__")
        node = data
        for key in parents:
            node = node[int(key)] if isinstance(node, list) else node[key]
        if value is DELETE:
            del node[last]
        elif isinstance(node, list):
            node[int(last)] = value
        else:
            node[last] = value
    return data


DELETE = object()


def test_valid_scenario_loads_and_is_frozen(folder):
    scn = load_scenario(write(folder, VALID))
    assert isinstance(scn, Scenario)
    assert [m.name for m in scn.models] == ["deepseek-v4-flash", "deepseek-v4.1-flash"]
    assert [m.family for m in scn.models] == ["v4", "v41"]
    assert scn.workload.trace == str((folder / "traces" / "t.parquet").resolve())
    assert scn.pool_hardware(scn.cluster.pools[1]) == "nvidia-h200-hgx8"
    # published defaults (model.md §10)
    assert scn.cache.v41.global_retention_s == 259200
    assert scn.cache.v41.swa_pool_dram_frac == 0.10
    assert scn.cache.v41.swa_replay_tokens == 128
    assert scn.cache.v4.persist_to == "ssd"
    assert scn.spec_decode.for_family("v41").draft_tokens == 5
    with pytest.raises(pydantic.ValidationError):
        scn.seed = 8
    with pytest.raises(pydantic.ValidationError):
        scn.cluster.pools[0].nodes = 9


def test_pool_helpers_apply_overrides_and_price_extras(folder):
    data = variant(timing={"efficiency": {"hbm_bw_frac": 0.7}})
    scn = load_scenario(write(folder, data))
    pool = scn.cluster.pools[0]
    assert scn.node_dram_bytes(pool) == 4096e9  # cluster.node.dram_gb override
    assert scn.node_ssd_bytes(pool) == pytest.approx(8 * 3.84e12)  # the profile's
    assert scn.achievable(pool)["hbm_bw_frac"] == 0.7  # override
    assert scn.achievable(pool)["mfu_prefill"] == 0.60  # profile
    cost = scn.pool_node_cost(pool)  # capex_4y + 2,048 GB extra DRAM at $11/GB over 4 years
    assert cost.term == "capex_4y"
    assert cost.extras_usd_per_hour == pytest.approx(2048 * 11.0 / (4 * 8760))
    own = load_scenario(write(folder, variant(pricing={"usd_per_gpu_hour": 2.5})))
    assert own.pool_node_cost(pool).rental_usd_per_hour == pytest.approx(20.0)


def test_generator_workload_loads(folder):
    scn = load_scenario(write(folder, variant(workload={"generator": "gen.yaml", "days": 14})))
    assert scn.workload.generator.endswith("gen.yaml")
    assert scn.workload.days == 14


# --- one test per kind of bad input: exact field path + a fragment of the message ---------------


@pytest.mark.parametrize(
    ("changes", "path", "fragment"),
    [
        pytest.param({"models__0": "gpt-5"}, "models[0].name", "unknown model (got 'gpt-5'); allowed: "
                     "deepseek-v4-flash, deepseek-v4-flash-0731, deepseek-v4-flash-mini, deepseek-v4.1-flash", id="unknown-model"),
        pytest.param({"hardware": "nvidia-h300"}, "hardware", "unknown hardware profile (got 'nvidia-h300')",
                     id="unknown-hardware"),
        pytest.param({"cluster__pools__0__nodes": -2}, "cluster.pools[0].nodes",
                     "must be greater than or equal to 1 (got -2)", id="negative-nodes"),
        pytest.param({"cluster__pools__0__gpus_per_instance": 0}, "cluster.pools[0].gpus_per_instance",
                     "must be greater than or equal to 1 (got 0)", id="zero-gpus"),
        pytest.param({"cluster__pools__1__dp": 2}, "cluster.pools[1].tp",
                     "tp x dp must equal gpus_per_instance (4 x 2 = 8, gpus_per_instance = 16)", id="tp-dp-mismatch"),
        pytest.param({"cluster__pools__0__tp": 1, "cluster__pools__0__dp": 8,
                      "cluster__pools__0__prefill_context_parallel": "round_robin"},
                     "cluster.pools[0].prefill_context_parallel",
                     "prefill context parallelism spreads a step's rows over the tp GPUs of one attention group: "
                     "needs tp >= 2 and dp = 1 (got tp 1, dp 8) (got 'round_robin')", id="cp-without-tp"),
        pytest.param({"cluster__pools__0__prefill_context_parallel": "ring"},
                     "cluster.pools[0].prefill_context_parallel",
                     "not one of the allowed values (got 'ring'); allowed: 'off', 'round_robin' or 'zigzag'",
                     id="cp-unknown-mode"),
        pytest.param({"cluster__pools__0__prefill_decoder_tail": "sometimes"},
                     "cluster.pools[0].prefill_decoder_tail",
                     "not one of the allowed values (got 'sometimes'); allowed: 'auto', 'on' or 'off'",
                     id="decoder-tail-unknown"),
        pytest.param({"scheduler": {"dp_prefill_budget": "shared"}}, "scheduler.dp_prefill_budget",
                     "not one of the allowed values (got 'shared'); allowed: 'divided' or 'per_rank'",
                     id="dp-budget-unknown-rule"),
        pytest.param({"scheduler": {"step_composition": "interleaved"}}, "scheduler.step_composition",
                     "not one of the allowed values (got 'interleaved'); allowed: 'mixed', 'prefill_first' or "
                     "'rank_prefill_first'", id="step-composition-unknown"),
        pytest.param({"slo": {"ttft_s": "2ms"}}, "slo.ttft_s",
                     "expected a plain number in seconds (the suffix _s of 'ttft_s' is the unit), not a string "
                     "(got '2ms')", id="string-with-unit"),
        pytest.param({"name": DELETE}, "name", "required field is missing", id="missing-field"),
        pytest.param({"workload__replya": "open_loop"}, "workload.replya",
                     "unknown key; did you mean 'replay'? (got 'open_loop'); allowed: trace, generator", id="typo-key"),
        pytest.param({"workload__warmup_sec": 5}, "workload.warmup_sec",
                     "wrong unit suffix '_sec' = not a unit sim knows; this field is 'warmup_s', in seconds",
                     id="wrong-unit-suffix"),
        pytest.param({"seed": "seven"}, "seed", "expected an integer (got 'seven')", id="wrong-type"),
        pytest.param({"workload__generator": "gen.yaml"}, "workload",
                     "trace and generator given; allowed: exactly one of: trace, generator, benchmark",
                     id="both-sources"),
        pytest.param({"workload__trace": DELETE}, "workload",
                     "no request source given; allowed: exactly one of: trace, generator, benchmark",
                     id="neither-source"),
        pytest.param({"workload__trace": "traces/missing.parquet"}, "workload.trace", "file not found: ",
                     id="missing-trace"),
        pytest.param({"models": []}, "models", "must not be empty (got [])", id="empty-models"),
        pytest.param({"cluster__pools__1__name": "pre"}, "cluster.pools[1].name",
                     "duplicate pool name (also pools[0]) (got 'pre')", id="duplicate-pool"),
        pytest.param({"workload__horizon_s": 60}, "workload.horizon_s",
                     "must be greater than warmup_s (60 s) (got 60.0)", id="horizon-not-after-warmup"),
        pytest.param({"cluster__pools__0__role": "both"}, "cluster.pools[0].role",
                     "not one of the allowed values (got 'both'); allowed: 'prefill', 'decode' or 'colocated'",
                     id="bad-literal"),
        pytest.param({"cluster__pools__1__role": "prefill"}, "cluster.pools",
                     "disaggregated serving needs a decode pool", id="roles-inconsistent"),
        pytest.param({"cluster__pools__0__gpus_per_instance": 3, "cluster__pools__0__tp": 3, "cluster__pools__0__ep": 3},
                     "cluster.pools[0].gpus_per_instance", "must divide the 8 GPUs per node of nvidia-h200-hgx8",
                     id="instance-does-not-fit-node"),
        pytest.param({"pricing": {"term": "aws_free"}}, "pricing.term",
                     "not a pricing term of nvidia-h200-hgx8 (got 'aws_free'); allowed: aws_on_demand",
                     id="unknown-pricing-term"),
        pytest.param({"cluster__activation_reserve_frac": 0.7}, "cluster.activation_reserve_frac",
                     "must be less than or equal to 0.5 (got 0.7)", id="fraction-out-of-range"),
        pytest.param({"models__0": {"name": "deepseek-v4-flash", "prefill_mode": "ced"}}, "models[0].prefill_mode",
                     "not a prefill mode of deepseek-v4-flash (got 'ced'); allowed: full", id="bad-prefill-mode"),
        pytest.param({"spec_decode": {"v4": {"method": "mtp", "accepted_tokens_per_step": 2.5, "draft_tokens": 1}}},
                     "spec_decode.v4.accepted_tokens_per_step", "cannot exceed the rows verified per step (2) (got 2.5)",
                     id="acceptance-above-draft"),
        pytest.param({"spec_decode": {"v41": {"method": "dspark", "accepted_tokens_per_step": 2, "draft_tokens": 3,
                                              "verify_rows": 5}}},
                     "spec_decode.v41.verify_rows", "cannot exceed 1 + draft_tokens (4) (got 5)", id="rows-above-draft"),
        pytest.param({"spec_decode": {"enabled": True, "v4": {"method": "dspark", "accepted_tokens_per_step": 1.5,
                                                              "draft_tokens": 1}}},
                     "spec_decode.v4.method", "deepseek-v4-flash has no dspark drafter (got 'dspark'); allowed: mtp",
                     id="drafter-not-the-models"),
        pytest.param({"models": [{"name": "deepseek-v4-flash", "accepted_tokens_per_step": 2.5}]},
                     "models[0].accepted_tokens_per_step",
                     "cannot exceed the rows spec_decode.v4 verifies per step (2) (got 2.5)", id="model-acceptance"),
        pytest.param({"outputs": {"timeseries_interval_s": 0}}, "outputs.timeseries_interval_s",
                     "must be greater than 0 (got 0)", id="zero-interval"),
    ],
)  # fmt: skip
def test_bad_input_names_field_path(folder, changes, path, fragment):
    lines = errors_of(folder, variant(**changes))
    matching = [line for line in lines if line.startswith(f"{path}: ")]
    assert matching, lines
    assert any(fragment in line for line in matching), matching


def test_bad_yaml_reports_line_and_column(folder):
    text = "name: smoke\nmodels: [deepseek-v4-flash\nhardware: nvidia-h200-hgx8\n"
    lines = errors_of(folder, text)
    assert len(lines) == 1
    assert lines[0].startswith("line 3, column 9: YAML syntax error:")


def test_duplicate_yaml_key_is_an_error(folder):
    lines = errors_of(folder, "name: a\nname: b\n")
    assert lines == ["line 2, column 1: YAML syntax error: duplicate key 'name' (first at line 1)"]


def test_top_level_must_be_a_mapping(folder):
    assert errors_of(folder, "- a\n- b\n") == ["expected a mapping of keys at the top level, found list"]


def test_all_problems_reported_at_once(folder):
    lines = errors_of(folder, variant(seed=-1, hardware="x", models=["gpt"], slo={"tpot_s": "50ms"}))
    assert [line.split(":")[0] for line in lines] == ["seed", "models[0].name", "hardware", "slo.tpot_s"]


def test_exponent_numbers_are_numbers(folder):
    text = yaml.safe_dump(VALID, sort_keys=False).replace("horizon_s: 3600", "horizon_s: 3.6e3")
    assert load_scenario(write(folder, text)).workload.horizon_s == 3600.0


def test_profile_without_price_needs_own_price(folder):
    data = variant(hardware="amd-mi355x-ubb8", pricing={})
    assert errors_of(folder, data) == [
        "pricing: amd-mi355x-ubb8 lists no price; give pricing.usd_per_gpu_hour"
    ]
    scn = load_scenario(write(folder, variant(hardware="amd-mi355x-ubb8", pricing={"usd_per_gpu_hour": 3.0})))
    assert scn.pricing.usd_per_gpu_hour == 3.0


# --- the CLI ------------------------------------------------------------------------------------


def test_cli_check_valid(folder):
    path = write(folder, VALID)
    result = CliRunner().invoke(app, ["scenario", "check", str(path)])
    assert result.exit_code == 0, result.output
    assert (
        "ok" in result.output
        and "pool dec: decode, 4 x nvidia-h200-hgx8 nodes, 2 instances of 16 GPUs" in result.output
    )
    result = CliRunner().invoke(app, ["scenario", "check", str(path), "--json"])
    summary = json.loads(result.stdout)
    assert summary["valid"] is True
    assert summary["summary"]["models"][1]["family"] == "v41"
    dec = summary["summary"]["pools"][1]
    assert (dec["gpus"], dec["instances"], dec["pricing_term"]) == (32, 2, "capex_4y")


def test_cli_check_invalid_exits_nonzero_with_one_line_per_problem(folder):
    path = write(folder, variant(seed=-1, hardware="x"))
    result = CliRunner().invoke(app, ["scenario", "check", str(path), "--json"])
    assert result.exit_code == 2
    data = json.loads(result.stdout)
    assert data["valid"] is False
    assert data["errors"] == [
        f"{path}: seed: must be greater than or equal to 0 (got -1)",
        f"{path}: hardware: unknown hardware profile (got 'x'); allowed: amd-mi300x-ubb8, amd-mi355x-ubb8, "
        "nvidia-b200-hgx8, nvidia-b300-hgx8, nvidia-gb200-nvl72, nvidia-h100-hgx8, nvidia-h20-hgx8, nvidia-h200-hgx8",
    ]
    result = CliRunner().invoke(app, ["scenario", "check", str(path)])
    assert result.exit_code != 0
    assert isinstance(result.exception, InputError)


def test_cli_fields_lists_every_leaf_with_defaults():
    result = CliRunner().invoke(app, ["scenario", "fields", "--json"])
    assert result.exit_code == 0
    rows = {r["field"]: r for r in json.loads(result.stdout)}
    assert rows["cache.v41.global_retention_s"]["default"] == "259200.0"
    assert rows["spec_decode.v41.draft_tokens"]["default"] == "5"
    assert (
        rows["spec_decode.v41.verify_rows"]["default"] == "None"
    )  # 1 + draft_tokens: the whole block (engine rule dspark_verify)
    assert rows["spec_decode.v4.verify_rows"]["default"] == "None"  # 1 + draft_tokens
    assert "verify step" in rows["spec_decode.v4.accepted_tokens_per_step"]["description"]
    assert rows["models[].accepted_tokens_per_step"]["type"] == "float | None"
    assert rows["cluster.pools[].tp"]["type"] == "int"
    assert rows["models"]["type"] == "list[ModelRef]"
    assert rows["name"]["default"] == "(required)"


def test_prefill_first_loads_where_the_engine_rule_is_known(folder):
    # plain attention (dp 1) needs no rank sync; DP attention with speculative decoding is SGLang's synced case,
    # without it a what-if (sim.sched.batcher); a disaggregated cluster has no colocated pool for the rule to touch
    tp = [{"name": "w", "role": "colocated", "nodes": 1, "gpus_per_instance": 8, "tp": 8, "ep": 8, "dp": 1}]
    dp = [{**tp[0], "tp": 1, "dp": 8}]
    for pools, spec in ((tp, False), (dp, True), (dp, False), (VALID["cluster"]["pools"], False)):
        data = variant(cluster__pools=pools, scheduler={"step_composition": "prefill_first"},
                       spec_decode={"enabled": spec})  # fmt: skip
        assert load_scenario(write(folder, data)).scheduler.step_composition == "prefill_first"
    # unset: the pool's engine rule (sim.config.engine_rules); no engine named: mixed
    scn = load_scenario(write(folder, VALID))
    assert scn.scheduler.step_composition is None
    assert {scn.pool_step_rules(p).step_composition for p in scn.cluster.pools} == {"mixed"}
    scn = load_scenario(write(folder, variant(engine={"name": "sglang"}, cluster__pools=tp)))
    assert scn.pool_step_rules(scn.cluster.pools[0]).step_composition == "prefill_first"
    scn = load_scenario(write(folder, variant(engine={"name": "sglang"}, cluster__pools=dp)))
    assert scn.pool_step_rules(scn.cluster.pools[0]).step_composition == "rank_prefill_first"


def test_cli_check_says_what_runs_v41s_index_layers_per_pool():
    """The main job's V4.1 pools on H200 under SGLang main: the prefill pool's indexer is the torch path (its H200
    table carried from the H100, so marked [D]), the decode pool runs no prefill step; both score the Reindex
    layers over every position. V4 has no Reindex layers and no such lines."""
    path = Path(__file__).resolve().parents[2] / "scenarios" / "agent_1M.yaml"
    data = json.loads(CliRunner().invoke(app, ["scenario", "check", str(path), "--json"]).stdout)
    by_model = {m["name"]: m["index_paths"] for m in data["summary"]["models"]}
    assert by_model["deepseek-v4-flash"] == []
    prefill, decode = by_model["deepseek-v4.1-flash"]
    assert (prefill["pool"], prefill["prefill_indexer"], prefill["reindex_scoring"]) == (
        "prefill",
        "torch",
        "full_range",
    )
    assert (
        prefill["indexer_table"].endswith("sglang_v41_torch_indexer_h200.csv")
        and prefill["indexer_table_derived"]
    )
    assert (decode["prefill_indexer"], decode["indexer_table"], decode["reindex_scoring"]) == (
        None,
        None,
        "full_range",
    )
    text = CliRunner().invoke(app, ["scenario", "check", str(path)]).output
    assert "pool prefill: prefill indexer torch, its table carried [D]" in text


def test_cli_check_says_how_each_pool_runs_and_holds_the_experts():
    """The main job: V4's FP8 checkpoint (the stock deployment on the H200) runs and holds FP8; V4.1, set to W4A16,
    holds MXFP4. The plan's template names no format: V4.1 on its H200 pools gets the stock W4A16."""
    root = Path(__file__).resolve().parents[2] / "scenarios"
    data = json.loads(
        CliRunner().invoke(app, ["scenario", "check", str(root / "agent_1M.yaml"), "--json"]).stdout
    )
    experts = {m["name"]: m["experts"] for m in data["summary"]["models"]}
    assert {(e["expert_activations"], e["held_in"], e["set_by"]) for e in experts["deepseek-v4-flash"]} == {
        ("fp8", "fp8", "stock")
    }
    assert {(e["expert_activations"], e["held_in"], e["set_by"]) for e in experts["deepseek-v4.1-flash"]} == {
        ("bf16", "mxfp4", "scenario")
    }
    plan = CliRunner().invoke(app, ["scenario", "check", str(root / "plan_agent_scenario.yaml")]).output
    assert "experts: deepseek-v4.1-flash pool decode: bf16" in " ".join(plan.split())
