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
