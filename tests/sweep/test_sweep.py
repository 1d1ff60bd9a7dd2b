"""`sim sweep`: the interpolation at a TPOT target, the JSON shape, and bad input."""

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from sim.cli import app
from sim.sweep.points import at_tpot

TINY = Path(__file__).with_name("bench_tiny.yaml")


def test_at_tpot_interpolates_between_the_bracketing_points():
    points = [
        {"concurrency": 1, "tpot_p50_s": 0.010, "output_tokens_per_s_per_gpu": 10.0},
        {"concurrency": 4, "tpot_p50_s": 0.015, "output_tokens_per_s_per_gpu": 30.0},
        {"concurrency": 8, "tpot_p50_s": 0.025, "output_tokens_per_s_per_gpu": 50.0},
    ]
    p = at_tpot(points, 0.020)
    assert p["concurrency"] == pytest.approx(6.0)
    assert p["output_tokens_per_s_per_gpu"] == pytest.approx(40.0)
    assert p["tokens_per_s_per_user"] == pytest.approx(50.0)
    assert at_tpot(points, 0.030) is None and at_tpot(points, 0.005) is None


def test_sweep_json_shape(tmp_path):
    out = tmp_path / "sweep"
    result = CliRunner().invoke(
        app,
        [
            "sweep",
            str(TINY),
            "--out",
            str(out),
            "--concurrency",
            "1,8",
            "--workers",
            "1",
            "--at-tpot-ms",
            "15",
            "--json",
        ],  # fmt: skip
    )
    assert result.exit_code == 0, result.output
    data = json.loads(result.stdout)
    assert data == json.loads((out / "sweep.json").read_text())
    points = data["models"]["deepseek-v4-flash"]["points"]
    assert [p["concurrency"] for p in points] == [1, 8]
    for key in ("output_tokens_per_s_per_gpu", "tokens_per_s_per_user", "ttft_p50_s", "tpot_p50_s"):
        assert all(isinstance(p[key], float) for p in points), key
    assert points[1]["output_tokens_per_s_per_gpu"] > points[0]["output_tokens_per_s_per_gpu"]
    assert {"at_tpot", "floor_pick"} <= set(data["models"]["deepseek-v4-flash"])
    assert (out / "sweep.html").read_text().startswith("<!DOCTYPE html>")


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--concurrency", "1,x"], "--concurrency"),
        ([], "give --concurrency LIST or --auto"),
        (["--auto", "--at-tpot-ms", "-1"], "--at-tpot-ms"),
        (["--auto", "--at-tpot-percentile", "p75"], "--at-tpot-percentile"),
    ],
)
def test_sweep_bad_arguments(tmp_path, args, message):
    result = CliRunner().invoke(app, ["sweep", str(TINY), "--out", str(tmp_path / "o"), *args])
    assert result.exit_code != 0
    assert message in str(result.exception) + result.output


def test_sweep_refuses_a_scenario_without_a_benchmark(tmp_path):
    smoke = Path(__file__).resolve().parents[2] / "scenarios" / "smoke.yaml"
    result = CliRunner().invoke(
        app, ["sweep", str(smoke), "--out", str(tmp_path / "o"), "--concurrency", "1"]
    )
    assert "workload.benchmark" in str(result.exception)


def test_floor_pick_is_the_best_point_meeting_the_target():
    from sim.sweep.points import floor_pick

    points = [
        {"concurrency": 8, "tpot_p50_s": 0.010, "output_tokens_per_s_per_gpu": 50.0},
        {"concurrency": 16, "tpot_p50_s": 0.012, "output_tokens_per_s_per_gpu": 80.0},
        {"concurrency": 32, "tpot_p50_s": 0.012, "output_tokens_per_s_per_gpu": 70.0},  # prefill-bound
        {"concurrency": 64, "tpot_p50_s": 0.030, "output_tokens_per_s_per_gpu": 90.0},
    ]
    assert floor_pick(points, 0.020)["concurrency"] == 16
    assert floor_pick(points, 0.005) is None
    # Dynamo's V4.1 recipes gate TTFT p50 too (< 5 s): a point over it, or without a TTFT, does not count
    gated = [{**p, "ttft_p50_s": t} for p, t in zip(points, (1.0, 6.0, 4.9, None), strict=True)]
    assert floor_pick(gated, 0.020, max_ttft_p50_s=5.0)["concurrency"] == 32
    assert floor_pick(gated, 0.020)["concurrency"] == 16
    assert floor_pick(gated, 0.011, max_ttft_p50_s=0.5) is None


def test_a_tail_target_reads_tpot_p90_and_interpolates_what_a_user_sees_there():
    from sim.sweep.points import floor_pick, tpot_key, unbracketed_reason

    points = [
        {"concurrency": 1, "tpot_p50_s": 0.008, "tpot_p90_s": 0.010, "tokens_per_s_per_user": 125.0,
         "output_tokens_per_s_per_gpu": 10.0},
        {"concurrency": 4, "tpot_p50_s": 0.010, "tpot_p90_s": 0.016, "tokens_per_s_per_user": 100.0,
         "output_tokens_per_s_per_gpu": 30.0},
        {"concurrency": 8, "tpot_p50_s": 0.014, "tpot_p90_s": 0.024, "tokens_per_s_per_user": 71.4,
         "output_tokens_per_s_per_gpu": 50.0},
    ]  # fmt: skip
    p50, p90 = at_tpot(points, 0.020), at_tpot(points, 0.020, percentile="p90")
    assert p50 is None  # TPOT p50 never reaches 20 ms here
    assert p90["tpot_p90_s"] == 0.020 and p90["concurrency"] == pytest.approx(6.0)
    assert p90["output_tokens_per_s_per_gpu"] == pytest.approx(40.0)
    assert p90["tpot_p50_s"] == pytest.approx(0.012)  # read between the points, not set to the target
    assert p90["tokens_per_s_per_user"] == pytest.approx((100.0 + 71.4) / 2)
    assert floor_pick(points, 0.020, "p90")["concurrency"] == 4
    assert floor_pick(points, 0.020)["concurrency"] == 8
    assert "TPOT p90 is over 5 ms" in unbracketed_reason(points, 0.005, "p90")
    with pytest.raises(ValueError, match="p75"):
        tpot_key("p75")


def test_sweep_at_a_p90_target_says_so_in_its_json(tmp_path):
    out = tmp_path / "sweep"
    args = ["sweep", str(TINY), "--out", str(out), "--concurrency", "1,8", "--workers", "1",
            "--at-tpot-ms", "15", "--at-tpot-percentile", "p90", "--json"]  # fmt: skip
    result = CliRunner().invoke(app, args)
    assert result.exit_code == 0, result.output
    data = json.loads(result.stdout)
    assert data["at_tpot_percentile"] == "p90" and data["at_tpot_ms"] == 15.0
    model = data["models"]["deepseek-v4-flash"]
    assert all(isinstance(p["tpot_p99_s"], float) for p in model["points"])
    if model["at_tpot"] is not None:
        assert model["at_tpot"]["tpot_p90_s"] == pytest.approx(0.015)
    if model["floor_pick"] is not None:
        assert model["floor_pick"]["tpot_p90_s"] <= 0.015
    assert "at TPOT p90 = 15 ms" in (out / "sweep.html").read_text()
