"""Steady-state cost per task (sim.plan.steady): the workload's rate from a trace, each pool's load at
that rate, and a candidate that cannot keep up never reported as cheap."""

from __future__ import annotations

import pyarrow.parquet as pq
import pytest
from simulator.traces import agent_trace

from sim.config.scenario import load_scenario
from sim.plan.backend import built_cluster
from sim.plan.steady import WorkloadRate, decode_capacity, steady_state, workload_rate

RATE = WorkloadRate(tasks_per_hour=360.0, requests_per_hour=1000.0, output_tokens_per_hour=3.6e6)


def _summary(*, usd_h=36.0, served=100, window_s=360.0, busy=0.4, tasks=3):
    """A model summary whose window served `served` requests in `window_s` (and completed `tasks`)."""
    return {
        "cluster_usd_per_hour": usd_h,
        "requests_arrived": served,
        "window_s": window_s,
        "cost_per_task_usd": usd_h * window_s / 3600 / tasks,  # the run's figure: not used
        "capacity": {
            "pools": [
                {"name": "prefill", "role": "prefill", "busy": busy},
                {"name": "decode", "role": "decode"},
            ]
        },
    }


def test_the_rate_counts_sessions_starting_after_the_warm_up(tmp_path):
    # 11 sessions of 3 requests starting every 10 s from 0 s to 100 s
    trace = agent_trace(tmp_path / "t.parquet", sessions=11, turns=3, gap_s=10.0, shared_prefix_tokens=0)
    out = pq.read_table(trace, columns=["session_start_s", "output_tokens"]).to_pandas()
    out_per_session = out[out.session_start_s >= 20].output_tokens.sum() / 9
    rate = workload_rate(trace, warmup_s=15.0, horizon_s=None)  # 9 sessions, 20..100 s
    assert rate == WorkloadRate(
        pytest.approx(360.0), pytest.approx(3 * 360.0), pytest.approx(out_per_session * 360.0)
    )
    cut = workload_rate(trace, warmup_s=20.0, horizon_s=60.0)  # 4 sessions, 20..50 s
    assert (cut.tasks_per_hour, cut.requests_per_hour) == (pytest.approx(360.0), pytest.approx(3 * 360.0))
    assert workload_rate(trace, warmup_s=95.0, horizon_s=None) is None  # one session: no rate


def test_a_burst_has_no_rate(tmp_path):
    trace = agent_trace(tmp_path / "t.parquet", sessions=5, turns=2, gap_s=0.0, shared_prefix_tokens=0)
    assert workload_rate(trace, warmup_s=0.0, horizon_s=None) is None


def test_cost_per_task_is_the_hourly_cost_over_the_arrival_rate_when_it_keeps_up():
    # the window served the workload's 1000 requests/h at busy 0.4; decode needs 1000 of 2000 tokens/s
    steady = steady_state(_summary(), RATE, {"decode": 2000.0})
    assert (steady.load, steady.bottleneck) == (pytest.approx(0.5), "decode")
    assert steady.cost_per_task_usd == pytest.approx(36.0 / 360.0)
    # the window's edges move the run's own figure, not this one
    longer = steady_state(_summary(window_s=720.0, served=200, tasks=2), RATE, {"decode": 2000.0})
    assert longer.cost_per_task_usd == steady.cost_per_task_usd


def test_a_candidate_that_cannot_keep_up_pays_for_the_tasks_it_cannot_serve():
    # the window served a quarter of the workload's requests per hour at busy 0.5: at the workload's
    # rate prefill would carry 2.0, so the cluster completes at most half the arriving tasks
    steady = steady_state(_summary(served=25, busy=0.5), RATE, {"decode": 2000.0})
    assert (steady.load, steady.bottleneck) == (pytest.approx(2.0), "prefill")
    assert steady.cost_per_task_usd == pytest.approx(2.0 * 36.0 / 360.0)
    assert steady_state(_summary(), RATE, {"decode": 0.0}).load == float("inf")  # no batch meets the SLO


def test_an_unmeasured_load_gives_no_figure():
    assert steady_state(_summary(busy=None), RATE, {"decode": 2000.0}).cost_per_task_usd is None
    assert steady_state(_summary(), RATE, {}).cost_per_task_usd is None


def test_decode_capacity_is_the_slo_batch_over_its_step_time(tmp_path):
    """On the real cluster model: a looser TPOT SLO admits a larger batch and more tokens per
    second, and two decode nodes emit twice what one does."""
    trace = agent_trace(tmp_path / "t.parquet", sessions=2, turns=2, shared_prefix_tokens=0)
    doc = tmp_path / "s.yaml"
    doc.write_text(
        "name: cap\nseed: 1\nmodels: [deepseek-v4-flash]\nhardware: nvidia-h200-hgx8\ncluster:\n  pools:\n"
        "    - {name: prefill, role: prefill, nodes: 1, gpus_per_instance: 8, tp: 8, ep: 8, dp: 1}\n"
        "    - {name: decode, role: decode, nodes: NODES, gpus_per_instance: 8, tp: 8, ep: 8, dp: 1}\n"
        f"workload: {{trace: {trace}}}\n"
    )
    text = doc.read_text()
    doc.write_text(text.replace("NODES", "1"))
    one = built_cluster(load_scenario(doc), "deepseek-v4-flash")
    doc.write_text(text.replace("NODES", "2"))
    two = built_cluster(load_scenario(doc), "deepseek-v4-flash")
    tight, loose = (decode_capacity(one, 100_000, slo)["decode"] for slo in (0.02, 0.1))
    assert 0 < tight < loose
    assert "prefill" not in decode_capacity(one, 100_000, 0.1)
    assert decode_capacity(two, 100_000, 0.1)["decode"] == pytest.approx(2 * loose)
