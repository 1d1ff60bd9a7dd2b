"""The capacity search of `sim run` (sim.capacity): the bracket and bisection on a known answer, and on a
small scenario the reported load meets the SLO while the load just above it, simulated again on its own,
does not."""

from __future__ import annotations

import json

import pytest
import yaml
from typer.testing import CliRunner

from sim.api import run_scenario
from sim.capacity.point import point_scenario, point_trace, violations
from sim.capacity.search import Measured, search
from sim.cli import app
from sim.config.scenario import Scenario, load_scenario
from sim.errors import InputError
from sim.metrics.capacity import steady_cost_per_task_usd
from sim.paths import project_root
from sim.plan.backend import built_cluster
from sim.plan.steady import WorkloadRate, decode_capacity, steady_state

WORKLOAD = project_root() / "scenarios" / "agent_1M_workload.yaml"


def _oracle(cap: int, calls: list[int]):
    def measure(load: int) -> Measured:
        calls.append(load)
        return Measured(load, load <= cap, min(1.0, load / (max(cap, 1) * 1.2)))

    return measure


@pytest.mark.parametrize("start, cap", [(220, 537), (900, 537), (10, 3), (50, 3000)])
def test_the_search_brackets_the_answer_within_its_tolerance(start, cap):
    calls: list[int] = []
    result = search(_oracle(cap, calls), start, tolerance_frac=0.05, max_points=12)
    assert result.sustained is not None and result.sustained.load <= cap
    assert result.above is not None and result.above.load > cap
    assert result.converged
    assert result.above.load - result.sustained.load <= max(1, int(result.sustained.load * 0.05))
    assert len(calls) == len(set(calls)) == len(result.points) <= 12


def test_the_search_stops_at_max_points_and_reports_what_it_measured():
    result = search(_oracle(10_000, []), 10, tolerance_frac=0.01, max_points=3)
    assert len(result.points) == 3 and result.above is None and not result.converged
    assert result.sustained.load == max(p.load for p in result.points)


def test_the_search_reports_none_when_even_one_fails():
    result = search(_oracle(0, []), 8, tolerance_frac=0.05, max_points=10)
    assert result.sustained is None and result.above.load == 1


def _small(tmp_path, **capacity) -> Scenario:
    """V4-Flash on one 4-GPU colocated instance serving agent_1M's sessions: a search of a few seconds."""
    doc = {
        "name": "capacity_small",
        "seed": 5,
        "models": ["deepseek-v4-flash"],
        "hardware": "nvidia-h200-hgx8",
        "cluster": {"pools": [{"name": "worker", "role": "colocated", "instances": 1, "gpus_per_instance": 4,
                               "tp": 4, "ep": 4, "dp": 1, "prefill_context_parallel": "round_robin"}]},
        "workload": {"generator": str(WORKLOAD), "days": 0.0125, "warmup_s": 300},
        "spec_decode": {"enabled": True},
        "slo": {"ttft_s": 10.0, "tpot_s": 0.05},
        "capacity": {"warmup_s": 300, "horizon_s": 1200, "tolerance_frac": 0.1, **capacity},
        "outputs": {"timeseries_interval_s": 30},
    }  # fmt: skip
    path = tmp_path / "small.yaml"
    path.write_text(yaml.safe_dump(doc, sort_keys=False))
    return load_scenario(path)


@pytest.mark.slow
def test_the_reported_load_meets_the_slo_and_the_load_just_above_fails(tmp_path):
    scn = _small(tmp_path)
    out = CliRunner().invoke(app, ["run", str(tmp_path / "small.yaml"), "--out", str(tmp_path / "run")],
                             env={"COLUMNS": "200"})  # fmt: skip
    assert out.exit_code == 0, out.output
    assert out.stdout.startswith("Verdict: V4-Flash sustains "), out.stdout[:300]
    cap = json.loads((tmp_path / "run" / "summary.json").read_text())["models"]["deepseek-v4-flash"][
        "capacity"
    ]
    assert {"sessions_per_hour", "sessions_per_hour_per_gpu", "cost_per_task_usd", "binding_limit"} <= set(
        cap
    )
    search_ = cap["search"]
    assert search_["converged"], search_
    rate, above = cap["sessions_per_hour"], cap["slo_fails_above"]["load"]
    assert 0 < rate < above <= rate + max(1, int(rate * 0.1))
    # both ends simulated again, on their own, from the same seed: the same verdicts
    summaries = {}
    for load, holds in ((rate, True), (above, False)):
        at = point_scenario(scn, load)
        trace = point_trace(scn, load, scn.seed, tmp_path / f"trace_{load}.parquet")
        at = at.model_copy(
            update={
                "workload": at.workload.model_copy(
                    update={"generator": None, "trace": str(trace), "days": None}
                )
            }
        )
        summary = run_scenario(at, capacity=False).summary["models"]["deepseek-v4-flash"]
        assert (not violations(summary, scn.slo)) is holds, (load, violations(summary, scn.slo))
        summaries[load] = (at, summary)
    # the figures reported are the sustained point's, priced by the one steady-state formula
    point = next(p for p in search_["points"] if p["load"] == rate)
    assert cap["ttft_p99_s"] == point["ttft_p99_s"] and point["slo_holds"]
    assert cap["sessions_per_hour_per_gpu"] == rate / 4
    assert cap["cost_per_task_usd"] == steady_cost_per_task_usd(
        point["cluster_usd_per_hour"], rate, point["busiest"]["share"]
    )
    assert cap["binding_limit"]
    # `sim plan` prices the same deployment at the same rate alike (sim.plan.steady, one formula)
    at, summary = summaries[rate]
    hours = summary["window_s"] / 3600
    workload = WorkloadRate(rate, summary["requests_arrived"] / hours, summary["output_tokens"] / hours)
    context = summary["capacity"]["context_tokens_mean"]
    plan = steady_state(
        summary, workload, decode_capacity(built_cluster(at, "deepseek-v4-flash"), context, 0.05)
    )
    assert plan.load <= 1.0 + 1e-9  # the sustained point keeps up (then both costs are $/h / rate)
    assert plan.cost_per_task_usd == pytest.approx(cap["cost_per_task_usd"], rel=1e-12)
    # same seed, same bytes
    again = run_scenario(scn).summary["models"]["deepseek-v4-flash"]["capacity"]
    assert json.dumps(again, sort_keys=True) == json.dumps(cap, sort_keys=True)


def test_capacity_off_runs_no_search(tmp_path):
    scn = _small(tmp_path)
    doc = scn.model_dump(mode="json")
    assert doc["capacity"]["enabled"] is True
    path = tmp_path / "off.yaml"
    path.write_text(
        yaml.safe_dump({**doc, "capacity": False}, sort_keys=False).replace(
            "capacity: false", "capacity: off"
        )
    )
    off = load_scenario(path)
    assert off.capacity.enabled is False
    cap = run_scenario(off).summary["models"]["deepseek-v4-flash"]["capacity"]
    assert cap["search"] is None and cap["search_note"].startswith("capacity: off")


def test_a_search_window_that_measures_nothing_is_refused(tmp_path):
    with pytest.raises(InputError, match=r"capacity: horizon_s \(600\) must be after warmup_s"):
        _small(tmp_path, warmup_s=600, horizon_s=600)
