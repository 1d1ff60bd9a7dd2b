"""The plan machinery (search, executors, ledger, outputs) on a closed-form stand-in simulator,
so these tests check the search itself: exact answers, determinism, resume, pruning."""

import json

import pytest
from fake_backend import FakeBackend, fake_evaluate, write_plan

from sim.errors import InputError
from sim.plan.frontier import X, pareto
from sim.plan.runner import run_plan
from sim.plan.search import pool_nodes
from sim.plan.space import EvalTask, candidate, combos, resolve
from sim.plan.spec import load_plan
from sim.plan.steady import steady_state


def _brute_force(plan_path):
    """Cheapest feasible (steady cost per task, GPUs) per model over every k: what the search must match."""
    spec, template_path = load_plan(plan_path)
    backend = FakeBackend()
    template = backend.load_template(template_path)
    best = {}
    for combo in combos(spec, {m: backend.model_overrides(template, m) for m in spec.models}):
        inspection = backend.inspect(resolve(template, combo, {}), combo.model, file="")
        for k in range(spec.nodes.min, spec.nodes.max + 1):
            cand = candidate(template, combo, k, spec.seed, inspection, backend.fingerprint)
            task = EvalTask(cand.key, combo.model, cand.scenario, spec.seed, cand.fingerprint)
            result = fake_evaluate(task)
            summary = result["summary"]
            rate = backend.workload_rate(cand.scenario, spec.seed)
            steady = steady_state(summary, rate, result["decode_tokens_per_s"])
            if not spec.constraints.violations(summary, steady.load):
                best[combo.model] = min(
                    best.get(combo.model, (1e9, 0)), (steady.cost_per_task_usd, cand.total_gpus)
                )
    return best


@pytest.fixture(scope="module")
def plan_and_run(tmp_path_factory):
    folder = tmp_path_factory.mktemp("fake")
    plan = write_plan(folder)
    outcome = run_plan(plan, folder / "w1", backend=FakeBackend(), workers=1)
    return folder, plan, outcome


def test_search_finds_the_brute_force_optimum_with_fewer_simulations(plan_and_run):
    _, plan, outcome = plan_and_run
    rec = outcome.recommendation["models"]
    for model, (cost, gpus) in _brute_force(plan).items():
        assert (rec[model]["cost_per_task_usd"], rec[model]["total_gpus"]) == (cost, gpus)
    # exact answer of the closed form: m-a on small nodes, 2 TB DRAM, prefill:decode 2:1 at k=7
    assert rec["m-a"]["combo_label"] == "small/2TB/p2d1"
    assert rec["m-a"]["nodes"] == {"prefill": 7, "decode": 4}
    assert rec["m-b"]["nodes"] == {"prefill": 5, "decode": 3}
    assert outcome.recommendation["verdict"]["ratios"]["m-b"]["total_nodes"] == pytest.approx(8 / 11)
    brute_force_size = 16 * 16  # 16 combinations x 16 node scales
    assert (
        outcome.simulated == outcome.recommendation["search"]["candidates_evaluated"] < brute_force_size / 4
    )


def test_a_steady_load_bound_moves_the_answer_and_the_search_still_finds_it(tmp_path):
    """Loads in the fake fall with node counts; a tight bound (0.3, under the 0.5 the latency bounds
    imply) is met only by larger clusters, and the cost bound of the search stays exact."""
    plan = write_plan(tmp_path, constraints={"ttft_p99_s": 5.0, "tpot_p99_s": 0.1, "max_steady_load": 0.3})
    rec = run_plan(plan, tmp_path / "o", backend=FakeBackend(), workers=1).recommendation["models"]
    for model, (cost, gpus) in _brute_force(plan).items():
        assert (rec[model]["cost_per_task_usd"], rec[model]["total_gpus"]) == (cost, gpus)
        assert rec[model]["steady_state"]["load"] <= 0.3
    assert rec["m-a"]["nodes"] != {"prefill": 7, "decode": 4}  # the answer without the bound


def test_two_workers_give_byte_identical_outputs(plan_and_run):
    folder, plan, _ = plan_and_run
    run_plan(plan, folder / "w2", backend=FakeBackend(), workers=2)
    for name in ("recommendation.json", "frontier.html", "scenarios/m-a.yaml"):
        assert (folder / "w1" / name).read_bytes() == (folder / "w2" / name).read_bytes()


def test_resume_reruns_only_missing_candidates_and_gives_the_same_answer(plan_and_run):
    folder, plan, first = plan_and_run
    import shutil

    shutil.copytree(folder / "w1" / "candidates", folder / "partial" / "candidates")
    parts = sorted((folder / "partial" / "candidates").glob("part-*.parquet"))
    for part in parts[::3]:
        part.unlink()
    again = run_plan(plan, folder / "partial", backend=FakeBackend(), workers=2)
    assert again.simulated == len(parts[::3])
    assert again.resumed == first.simulated - len(parts[::3])
    assert (folder / "partial" / "recommendation.json").read_bytes() == (
        folder / "w1" / "recommendation.json"
    ).read_bytes()
    done = run_plan(plan, folder / "partial", backend=FakeBackend(), workers=2)
    assert (done.simulated, done.resumed) == (0, first.simulated)  # nothing left: no worker started


def test_outputs_are_offline_and_reproducible(plan_and_run):
    folder, _, outcome = plan_and_run
    html = (folder / "w1" / "frontier.html").read_text()
    assert "<script src=" not in html and len(html) > 1_000_000  # plotly.js inline, nothing fetched
    assert "m-a: Pareto frontier" in html
    rec = json.loads((folder / "w1" / "recommendation.json").read_text())
    assert rec["models"]["m-a"]["reproduce"] == "sim run scenarios/m-a.yaml --seed 3"
    written = (folder / "w1" / "scenarios" / "m-a.yaml").read_text()
    assert "models:\n- m-a\n" in written and "nodes: 7" in written


def test_weight_pruning_skips_combinations_without_simulating(tmp_path):
    plan = write_plan(
        tmp_path,
        space={"hardware": {"tiny": {"hardware": "tiny"}, "big": {"hardware": "big"}}},
    )
    outcome = run_plan(plan, tmp_path / "o", backend=FakeBackend(), workers=1)
    assert {(p["model"], p["combination"]) for p in outcome.pruned} == {
        (m, f"tiny/{r}") for m in ("m-a", "m-b") for r in ("p1d1", "p2d1")
    }
    assert all(r["combo_label"].startswith("big/") for r in outcome.rows)
    only_tiny = write_plan(tmp_path, space={"hardware": {"tiny": {"hardware": "tiny"}}})
    with pytest.raises(InputError, match="every combination for m-a is pruned"):
        run_plan(only_tiny, tmp_path / "o2", backend=FakeBackend(), workers=1)


def test_infeasible_model_is_reported_not_invented(tmp_path):
    plan = write_plan(tmp_path, nodes={"min": 1, "max": 2, "ratios": {"p1d1": {"prefill": 1, "decode": 1}}})
    rec = run_plan(plan, tmp_path / "o", backend=FakeBackend(), workers=1).recommendation
    assert rec["models"] == {"m-a": {"feasible": False}, "m-b": {"feasible": False}}
    assert rec["verdict"] == {"baseline": "m-a", "ratios": {}, "infeasible": ["m-a", "m-b"]}


def test_bad_override_path_is_an_input_error(tmp_path):
    plan = write_plan(tmp_path, space={"hw": {"x": {"cluster.pools[name=mixed].nodes": 1}}})
    with pytest.raises(InputError, match="selector matches 0 elements"):
        run_plan(plan, tmp_path / "o", backend=FakeBackend(), workers=1)


def test_pareto_keeps_exactly_the_non_dominated_points():
    rows = [
        {"key": k, X: c, "ttft_p99_s": t}
        for k, c, t in [("a", 1, 9), ("b", 2, 5), ("c", 2, 7), ("d", 3, 5), ("e", 4, 1), ("f", 5, 2)]
    ]
    assert [r["key"] for r in pareto(rows)] == ["a", "b", "e"]


def test_pool_nodes_match_the_written_scenario(plan_and_run):
    folder, _, outcome = plan_and_run
    for row in outcome.rows[:5]:
        ratio = {"p1d1": {"prefill": 1, "decode": 1}, "p2d1": {"prefill": 2, "decode": 1}}[
            row["combo_label"][-4:]
        ]
        assert json.loads(row["nodes_json"]) == pool_nodes(ratio, row["scale"])


def test_multi_node_instances_get_whole_instances_and_each_scenario_runs_once(tmp_path):
    plan = write_plan(
        tmp_path,
        space={
            "hw": {"small": {"hardware": "small"}},
            "span": {"two": {"cluster.pools[name=decode].nodes_per_instance": 2}},
        },
    )
    outcome = run_plan(plan, tmp_path / "o", backend=FakeBackend(), workers=1)
    decode = [json.loads(r["nodes_json"])["decode"] for r in outcome.rows]
    assert decode and all(n % 2 == 0 for n in decode)
    assert outcome.simulated == len({r["key"] for r in outcome.rows})


def test_a_local_ray_instance_is_its_own_even_where_another_runs(monkeypatch):
    # `--ray local` starts an instance of the workers' CPUs; without address="local", ray.init joins a Ray
    # instance already running on the machine (`ray start`, another run's) and refuses num_cpus
    import sys
    import types

    from sim.plan.executors import RayExecutor

    calls = []
    fake = types.ModuleType("ray")
    fake.init = lambda **kw: calls.append(kw)
    fake.remote = lambda **kw: lambda fn: fn
    monkeypatch.setitem(sys.modules, "ray", fake)
    RayExecutor(len, workers=3, address=None)
    assert calls and calls[0]["address"] == "local" and calls[0]["num_cpus"] == 3
