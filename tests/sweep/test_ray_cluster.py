"""`--ray ADDRESS`: sweeps on a running Ray cluster of two worker processes on two Ray nodes, as on two
machines (the `ray_cluster` fixture, tests/conftest.py; plans: tests/plan/test_plan_real.py); an
address where no cluster listens fails at once with one line."""

from __future__ import annotations

import json
import time
from pathlib import Path

from typer.testing import CliRunner

from sim.cli import app
from sim.errors import InputError

TINY = Path(__file__).with_name("bench_tiny.yaml")
SWEEP = ["--concurrency", "1,4", "--at-tpot-ms", "15", "--json"]


def _points(folder: Path) -> dict:
    """sweep.json without the wall-clock seconds of each point (the only field that differs)."""
    data = json.loads((folder / "sweep.json").read_text())
    for model in data["models"].values():
        for point in model["points"]:
            point.pop("wall_s")
    return data


def test_a_sweep_on_a_ray_cluster_gives_the_local_points(tmp_path, ray_cluster):
    local = CliRunner().invoke(
        app, ["sweep", str(TINY), "--out", str(tmp_path / "local"), "--workers", "2", *SWEEP]
    )
    assert local.exit_code == 0, local.output
    remote = CliRunner().invoke(app, ["sweep", str(TINY), "--out", str(tmp_path / "ray"), "--ray",
                                      ray_cluster.address, *SWEEP])  # fmt: skip
    assert remote.exit_code == 0, remote.output + repr(remote.exception)
    assert _points(tmp_path / "ray") == _points(tmp_path / "local")


def test_an_address_where_no_cluster_listens_fails_at_once_in_one_line(tmp_path):
    started = time.monotonic()
    result = CliRunner().invoke(app, ["sweep", str(TINY), "--out", str(tmp_path / "o"), "--concurrency", "1",
                                      "--ray", "127.0.0.1:9"])  # fmt: skip
    assert time.monotonic() - started < 30
    assert isinstance(result.exception, InputError)
    message = str(result.exception)
    assert message.startswith("--ray: cannot reach a Ray cluster at 127.0.0.1:9") and "\n" not in message
    assert not (tmp_path / "o").exists()
