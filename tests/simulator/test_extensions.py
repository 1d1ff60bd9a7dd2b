"""SimPy as the event loop (sim/cluster/simpy_loop.py) and user extensions (sim/extensions): the same
bytes on both loops from the CLI; one clear error for a bad extension; a failed instance's requests
go back to the router and start over, none lost or duplicated; failures and the autoscaler are
seeded and conserve requests."""

import json
import textwrap

import pyarrow.parquet as pq
import pytest
import yaml

from sim.api import run_scenario
from sim.errors import InputError
from sim.paths import project_root

TRACE = project_root() / "traces" / "agent_1M_sample.parquet"

# a test extension: fail one instance at a time, bring it back later; its summary lists who restarted
EXTENSION = """
def fail_at(env, ops, instance, at_s, repair_s, when_decoding=False):
    class Handle:
        def summary(self, _model_summary):
            stats = ops.fault_stats()
            return {"recomputed_ids": stats.recomputed_ids, "rerouted": stats.rerouted}

    def outage():
        yield env.timeout(at_s)
        while when_decoding and ops.instance(instance)["decode_batch"] == 0:
            yield env.timeout(1.0)  # the first second it decodes: a failure then loses work whatever the step times
        ops.fail_instance(instance)
        yield env.timeout(repair_s)
        ops.restore_instance(instance)

    env.process(outage())
    return Handle()
"""


def _scenario(tmp_path, pools, extensions=None, max_requests=150, name="ext"):
    scn = {
        "name": name,
        "seed": 5,
        "models": ["deepseek-v4-flash"],
        "hardware": "nvidia-h200-hgx8",
        "cluster": {"pools": pools},
        "workload": {"trace": str(TRACE), "replay": "closed_loop", "max_requests": max_requests},
        "outputs": {"timeseries_interval_s": 30},
    }
    if extensions is not None:
        scn["extensions"] = extensions
    path = tmp_path / f"{name}.yaml"
    path.write_text(yaml.safe_dump(scn, sort_keys=False))
    return path


def _pool(name, role, instances, gpus=4):
    return {
        "name": name,
        "role": role,
        "instances": instances,
        "gpus_per_instance": gpus,
        "tp": 1,
        "ep": gpus,
        "dp": gpus,
    }


@pytest.fixture
def test_extension(tmp_path, monkeypatch):
    (tmp_path / "sim_test_ext.py").write_text(textwrap.dedent(EXTENSION))
    monkeypatch.syspath_prepend(str(tmp_path))
    return "sim_test_ext:fail_at"


def test_smoke_on_the_simpy_loop_writes_the_native_loops_bytes(tmp_path):
    from typer.testing import CliRunner

    from sim.cli import app

    smoke = project_root() / "scenarios" / "smoke.yaml"
    for loop in ("native", "simpy"):
        result = CliRunner().invoke(app, ["run", str(smoke), "--out", str(tmp_path / loop), "--loop", loop])
        assert result.exit_code == 0, result.output
    files = sorted(
        p.relative_to(tmp_path / "native") for p in (tmp_path / "native").rglob("*") if p.is_file()
    )
    assert len(files) >= 5
    for f in files:
        assert (tmp_path / "native" / f).read_bytes() == (tmp_path / "simpy" / f).read_bytes(), f


def test_a_failed_instance_s_requests_start_over_elsewhere_none_lost_or_duplicated(tmp_path, test_extension):
    # GIVEN two colocated instances, and instance 0 failing for 5 minutes from the first second after 400 s at
    # which it decodes
    path = _scenario(
        tmp_path,
        [_pool("c", "colocated", 2)],
        [
            {
                "use": test_extension,
                "params": {"instance": 0, "at_s": 400.0, "repair_s": 300.0, "when_decoding": True},
            }
        ],
    )
    # WHEN the run ends
    result = run_scenario(path, out_dir=tmp_path / "out")
    s = result.summary["models"]["deepseek-v4-flash"]
    ops, mine = s["extensions"]["operations"], s["extensions"][test_extension]
    # THEN the requests it held started over (its KV is gone) on the other instance
    restarted = set(mine["recomputed_ids"])
    assert restarted and ops["requests_recomputed"] == len(restarted) and ops["instance_failures"] == 1
    assert ops["kv_lost_hbm_bytes"] > 0 and ops["degraded_requests"] > 0
    start_s = ops["outages"][0]["start_s"]
    assert start_s >= 400.0 and ops["outages"] == [
        {"kind": "instance", "instance": 0, "node": 0, "start_s": start_s, "end_s": start_s + 300.0}
    ]
    rows = pq.read_table(tmp_path / "out" / "deepseek-v4-flash" / "requests.parquet").to_pandas()
    # none lost, none twice: one row per request that arrived, each ended once
    assert rows["request_id"].is_unique and len(rows) == s["requests_arrived_incl_warmup"] == 150
    assert (rows["status"] == "completed").all()
    again = rows[rows["request_id"].isin(restarted)]
    assert (again["prefill_instance"] == 1).all()  # served by the survivor
    assert (again["arrival_s"] < start_s).all() and (again["first_token_s"] > start_s).all()
    # recomputed: what the dead HBM held is not reused (no hit from instance 0's HBM after the failure)
    assert (again["computed_tokens"] > 0).all()
    # AND the report marks the outage on its time axis
    from typer.testing import CliRunner

    from sim.cli import app

    page = tmp_path / "page.html"
    assert CliRunner().invoke(app, ["report", str(tmp_path / "out"), "--out", str(page)]).exit_code == 0
    assert "instance failure: instance 0, node 0" in page.read_text()


def test_a_failed_decode_instance_sends_its_waiting_requests_on_with_their_kv(tmp_path, test_extension):
    # GIVEN one prefill and two decode instances; decode instance 1 fails early, at the first second after 200 s
    # at which it decodes (so that it holds requests whatever the step times)
    path = _scenario(
        tmp_path,
        [_pool("p", "prefill", 1), _pool("d", "decode", 2)],
        [
            {
                "use": test_extension,
                "params": {"instance": 1, "at_s": 200.0, "repair_s": 600.0, "when_decoding": True},
            }
        ],
    )
    s = run_scenario(path, out_dir=tmp_path / "out").summary["models"]["deepseek-v4-flash"]
    ops = s["extensions"]["operations"]
    # THEN every request still ends once, completed (the run's invariants hold: sim.metrics.invariants)
    assert s["requests_completed"] == s["requests_arrived"] and ops["instance_failures"] == 1
    assert ops["requests_recomputed"] + ops["requests_rerouted"] > 0


def test_failures_are_seeded_and_conserve_requests(tmp_path):
    # GIVEN the shipped failures extension at a stress rate on a disaggregated cluster of two nodes
    ext = [
        {
            "use": "sim.extensions.failures:start",
            "params": {"mtbf_gpu_hours": 0.5, "repair_s": 120, "node_fraction": 0.3},
        }
    ]
    path = _scenario(tmp_path, [_pool("p", "prefill", 2), _pool("d", "decode", 2)], ext, max_requests=250)
    # WHEN it runs twice
    a = run_scenario(path, out_dir=tmp_path / "a")
    run_scenario(path, out_dir=tmp_path / "b")
    # THEN the same failures, the same bytes; every request ended once; node failures took host DRAM
    for f in ("summary.json", "deepseek-v4-flash/requests.parquet"):
        assert (tmp_path / "a" / f).read_bytes() == (tmp_path / "b" / f).read_bytes()
    s = a.summary["models"]["deepseek-v4-flash"]
    ops = s["extensions"]["operations"]
    assert ops["instance_failures"] >= 3 and ops["node_failures"] >= 1 and ops["requests_recomputed"] > 0
    assert ops["kv_lost_host_bytes"] > 0
    assert s["requests_completed"] + s["requests_rejected"] == s["requests_arrived"]
    rows = pq.read_table(tmp_path / "a" / "deepseek-v4-flash" / "requests.parquet", columns=["request_id"])
    assert rows.num_rows == 250 and len(set(rows.column(0).to_pylist())) == 250
    assert json.loads((tmp_path / "a" / "summary.json").read_text())["scenario"]["extensions"] == ext


@pytest.mark.parametrize(
    ("entry", "message"),
    [
        ("no_such_module_xyz:start", "does not import"),
        ("sim.extensions.failures:no_such_function", "has no function no_such_function"),
        ({"use": "sim.extensions.failures:start", "params": {"mtbf": 1}}, "does not take these params"),
    ],
)
def test_a_bad_extension_gets_one_clear_error_before_anything_is_written(tmp_path, entry, message):
    path = _scenario(tmp_path, [_pool("c", "colocated", 1, 8)], [entry])
    with pytest.raises(InputError, match=message) as err:
        run_scenario(path, out_dir=tmp_path / "out")
    assert str(path) in str(err.value) and "extensions[0]" in str(err.value) and "allowed" in str(err.value)
    assert not (tmp_path / "out").exists()


def test_an_extension_entry_must_name_a_module_and_a_function(tmp_path):
    from sim.config.scenario import load_scenario

    path = _scenario(tmp_path, [_pool("c", "colocated", 1, 8)], ["sim.extensions.failures"])
    with pytest.raises(InputError, match=r"extensions\[0\]"):
        load_scenario(path)


def test_extensions_refuse_the_native_loop(tmp_path):
    path = _scenario(tmp_path, [_pool("c", "colocated", 1, 8)], ["sim.extensions.failures:start"])
    with pytest.raises(InputError, match="runs on the SimPy loop"):
        run_scenario(path, loop="native")


def test_the_autoscaler_adds_decode_instances_under_load_and_bills_only_what_it_held(tmp_path):
    # GIVEN a decode pool of up to 3 instances, kept at 1 and grown when the mean decode batch passes 2
    ext = [{"use": "sim.extensions.autoscaler:start",
            "params": {"pool": "d", "min_instances": 1, "add_above": 2.0, "remove_below": 0.5, "interval_s": 10}}]  # fmt: skip
    path = _scenario(tmp_path, [_pool("p", "prefill", 1, 8), _pool("d", "decode", 3)], ext, max_requests=250)
    s = run_scenario(path).summary["models"]["deepseek-v4-flash"]
    ops, scaler = s["extensions"]["operations"], s["extensions"]["sim.extensions.autoscaler:start"]
    # THEN it added instances after their weights loaded, and what it held cost less than the whole pool
    assert scaler["instances_added"] >= 1 and scaler["peak_serving"] >= 2
    assert 0 < scaler["warmup_s"] < 60  # one instance's weights over its node's NVMe
    fixed_usd = s["cluster_usd_per_hour"] * s["window_s"] / 3600
    assert 0 < ops["usd_held"] < fixed_usd and ops["cost_per_task_usd_held"] < s["cost_per_task_usd"]
    assert s["requests_completed"] + s["requests_rejected"] == s["requests_arrived"]


@pytest.mark.slow  # ~6 s: 64 small runs; CI runs it
def test_failures_across_the_equivalence_matrix_keep_every_invariant(tmp_path):
    # GIVEN the 64 cases of the equivalence matrix (both layouts, DRAM, RDMA pool and SSD tiers under memory
    # pressure, pins, queue limits, speculative decoding), each with frequent instance and node failures
    from .test_native import CASES, scenario

    failures = {"use": "sim.extensions.failures:start",
                "params": {"mtbf_gpu_hours": 0.05, "repair_s": 5, "node_fraction": 0.3}}  # fmt: skip
    seen = {"instance_failures": 0, "node_failures": 0, "requests_recomputed": 0, "requests_rerouted": 0}
    for name, levels in CASES.items():
        path = tmp_path / f"{name}.yaml"
        path.write_text(yaml.safe_dump({**scenario(name, levels), "extensions": [failures]}, sort_keys=False))
        # WHEN each runs: the end-of-run invariants (sim.metrics.invariants) raise if a request was lost or
        # ended twice, if HBM stayed reserved or a transfer was left behind
        s = next(iter(run_scenario(path).summary["models"].values()))
        assert s["requests_completed"] + s["requests_rejected"] == s["requests_arrived"]
        for key in seen:
            seen[key] += s["extensions"]["operations"][key]
    # THEN failures of every kind happened, and requests were both recomputed and re-routed
    assert all(seen.values()), seen


def test_an_extension_whose_module_fails_and_sim_scenario_check_say_so_in_one_line(tmp_path, monkeypatch):
    from typer.testing import CliRunner

    from sim.cli import app

    (tmp_path / "sim_broken_ext.py").write_text("def start(env, ops):\n    return (\n")  # a syntax error
    monkeypatch.syspath_prepend(str(tmp_path))
    path = _scenario(tmp_path, [_pool("c", "colocated", 1, 8)], ["sim_broken_ext:start"])
    result = CliRunner().invoke(app, ["scenario", "check", str(path), "--json"])
    assert result.exit_code == 2
    (line,) = json.loads(result.stdout)["errors"]
    assert line.startswith(f"{path}: extensions[0]: module sim_broken_ext does not import (SyntaxError")
