"""The capacity block of the run summary (sim.metrics.capacity) and the lines `sim run` prints."""

from pathlib import Path

from sim.api import run_scenario
from sim.cli.capacity_view import capacity_lines
from sim.config.errors import validate_or_raise
from sim.config.scenario import Scenario
from sim.config.yamlio import read_yaml_mapping
from sim.metrics.capacity import low_load_line
from sim.plan.overrides import apply_overrides

TINY = Path(__file__).with_name("bench_tiny.yaml")


def _summary(**overrides) -> dict:
    doc = apply_overrides(read_yaml_mapping(TINY), overrides)
    scn = validate_or_raise(Scenario, doc, file=str(TINY), context={"base_dir": TINY.parent})
    return run_scenario(scn).summary


def test_light_load_is_flagged_and_extrapolated():
    summary = _summary(**{"workload.benchmark": {"concurrency": 1}, "slo": {"ttft_s": 60, "tpot_s": 0.05}})
    cap = summary["models"]["deepseek-v4-flash"]["capacity"]
    (pool,) = cap["pools"]
    assert pool["role"] == "colocated" and 0 < pool["load"] < 0.3
    assert pool["headroom"] == 1 - pool["load"] and pool["slo_batch"] >= 1
    assert cap["low_decode_load"] and cap["slo_p99_met"]
    assert cap["sessions_per_serving_node_at_slo"] > cap["sessions_in_progress_per_serving_node"] > 0
    lines = capacity_lines(summary)
    assert any("capacity search of `sim run`" in line and "sim plan" in line for line in lines)


def test_a_missed_slo_gives_no_extrapolation():
    summary = _summary(slo={"ttft_s": 0.001, "tpot_s": 0.001})
    cap = summary["models"]["deepseek-v4-flash"]["capacity"]
    assert cap["slo_p99_met"] is False and cap["sessions_per_serving_node_at_slo"] is None
    assert cap["pools"][0]["slo_batch"] == 0  # no batch decodes a token in 1 ms
    assert any("already miss the p99 SLO" in line for line in capacity_lines(summary))


def test_low_load_line_threshold():
    assert low_load_line({"decode_load_mean": 0.5}) is None
    assert low_load_line({"decode_load_mean": None}) is None
    assert "29%" in low_load_line({"decode_load_mean": 0.29})
