"""A fleet (cluster.cells, sim.fleet): sessions split whole over cells by the router, cells run serially,
in processes or on Ray with the same bytes, and the fleet's percentiles are those of every request."""

from __future__ import annotations

import filecmp
import importlib.util
from pathlib import Path

import numpy as np
import pyarrow.parquet as pq
import pytest

from sim.config.cluster import Cells
from sim.config.scenario import load_scenario
from sim.errors import InputError
from sim.fleet.route import CellRouter, session_hash
from sim.fleet.run import run_fleet
from sim.paths import project_root
from sim.workload.io import trace_info

SCENARIO = project_root() / "scenarios" / "fleet_smoke.yaml"


def _files(root: Path) -> list[Path]:
    return sorted(p.relative_to(root) for p in root.rglob("*") if p.is_file())


def _same_bytes(a: Path, b: Path) -> None:
    assert _files(a) == _files(b)
    for rel in _files(a):
        assert filecmp.cmp(a / rel, b / rel, shallow=False), rel


@pytest.fixture(scope="module")
def serial(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("fleet") / "serial"
    run_fleet(SCENARIO, out, jobs=1)
    return out


def test_jobs_give_the_serial_bytes(serial: Path, tmp_path: Path) -> None:
    # GIVEN the 4-cell scenario run serially WHEN it runs with 2 worker processes THEN every file is the same
    run_fleet(SCENARIO, tmp_path / "jobs2", jobs=2)
    _same_bytes(serial, tmp_path / "jobs2")


@pytest.mark.skipif(
    importlib.util.find_spec("ray") is None, reason="Ray is not installed (pip install sim[dist])"
)
def test_ray_gives_the_serial_bytes(serial: Path, tmp_path: Path) -> None:
    run_fleet(SCENARIO, tmp_path / "ray", jobs=2, ray="local")
    _same_bytes(serial, tmp_path / "ray")


def test_every_request_in_one_cell_and_merged_percentiles_exact(serial: Path) -> None:
    scn = load_scenario(SCENARIO)
    summary = __import__("json").loads((serial / "summary.json").read_text())
    fleet = summary["fleet"]
    assert sum(fleet["requests_per_cell"]) == trace_info(scn.workload.trace)["rows"]
    assert min(fleet["requests_per_cell"]) > 0
    for model, m in summary["models"].items():
        logs = [
            pq.read_table(serial / "cells" / f"cell_{k:04d}" / model / "requests.parquet") for k in range(4)
        ]
        sessions = [set(t.column("session_id").to_pylist()) for t in logs]
        assert all(
            not (a & b) for i, a in enumerate(sessions) for b in sessions[i + 1 :]
        )  # a session, one cell
        assert sum(t.num_rows for t in logs) == sum(fleet["requests_per_cell"])
        ttft = np.concatenate([
            t.column("ttft_s").to_numpy(zero_copy_only=False)[
                t.column("measured").to_numpy() & (t.column("status").to_numpy(zero_copy_only=False) == "completed")
            ] for t in logs
        ])  # fmt: skip
        assert m["ttft_p99_s"] == float(np.percentile(ttft, 99))
        assert m["ttft_p50_s"] == float(np.percentile(ttft, 50))
        assert m["requests_completed"] == len(ttft)
        per_cell_p99 = [c["ttft_p99_s"] for c in m["per_cell"]]
        assert min(per_cell_p99) <= m["ttft_p99_s"] <= max(per_cell_p99)
        assert m["peak"]["cells_needed_at_peak"] >= 1


def test_hash_router_is_stable_and_spreads() -> None:
    ids = np.arange(10_000, dtype=np.int64)
    assert session_hash(ids[:3]).tolist() == session_hash(ids[:3].copy()).tolist()
    cells = CellRouter(Cells(count=8)).assign(ids, np.zeros(len(ids)), [None] * len(ids),
                                              np.arange(len(ids)), np.zeros(len(ids)))  # fmt: skip
    counts = np.bincount(cells, minlength=8)
    assert counts.min() > 0.9 * len(ids) / 8


def test_least_loaded_router_sends_sessions_away_from_last_hours_hot_cell() -> None:
    # GIVEN hour 0: session 0 (cell 0) brings 10 requests, session 1 (cell 1) brings 1
    router = CellRouter(Cells(count=2, router="least_loaded", interval_s=3600))
    first = router.assign(np.array([0, 1]), np.array([0.0, 1.0]), [None, None],
                          np.array([0] * 10 + [1]), np.full(11, 10.0))  # fmt: skip
    assert first.tolist() == [0, 1]
    # WHEN two sessions start in hour 1 THEN both go to cell 1 (1 + 5.5 < 10 for the second too)
    second = router.assign(np.array([2, 3]), np.array([3700.0, 3701.0]), [None, None], np.array([0, 1]),
                           np.array([3700.0, 3701.0]))  # fmt: skip
    assert second.tolist() == [1, 1]


def test_tenant_router_pins() -> None:
    router = CellRouter(Cells(count=4, router="tenant", pins={"t0": 3}))
    cells = router.assign(np.array([5, 6]), np.zeros(2), ["t0", "t9"], np.array([0, 1]), np.zeros(2))
    assert cells[0] == 3
    assert cells[1] == int(session_hash(np.array([6]))[0] % np.uint64(4))


def test_bad_pin_names_field_value_and_allowed() -> None:
    from sim.config.errors import validate_or_raise

    with pytest.raises(InputError) as err:
        validate_or_raise(Cells, {"count": 2, "router": "tenant", "pins": {"t0": 5}}, file="f.yaml")
    text = str(err.value)
    assert "f.yaml" in text and "pins.t0" in text and "5" in text and "0..1" in text


def test_a_trace_in_parts_needs_cells(tmp_path: Path) -> None:
    from sim.api import run_scenario

    parts = tmp_path / "parts"
    parts.mkdir()
    (parts / "p0.parquet").write_bytes((project_root() / "traces" / "agent_1M_sample.parquet").read_bytes())
    text = SCENARIO.read_text().replace("../traces/agent_1M_sample.parquet", str(parts))
    text = text.replace("  cells: {count: 4, router: hash}\n", "")
    (tmp_path / "s.yaml").write_text(text)
    with pytest.raises(InputError, match="cluster.cells"):
        run_scenario(tmp_path / "s.yaml", out_dir=tmp_path / "out")
    assert not (tmp_path / "out").exists()


def test_report_of_a_fleet_shows_the_spread(serial: Path, tmp_path: Path) -> None:
    from typer.testing import CliRunner

    from sim.cli import app

    result = CliRunner().invoke(app, ["report", str(serial), "-o", str(tmp_path / "r.html"), "--json"])
    assert result.exit_code == 0, result.output
    page = (tmp_path / "r.html").read_text()
    assert "Bottleneck load per cell" in page and "cells needed at the peak hour" in page
    cell = CliRunner().invoke(
        app, ["report", str(serial / "cells" / "cell_0001"), "-o", str(tmp_path / "c.html")]
    )
    assert cell.exit_code == 0, cell.output
    mixed = CliRunner().invoke(app, ["compare", str(serial), str(serial / "cells" / "cell_0001"),
                                     "-o", str(tmp_path / "m.html")])  # fmt: skip
    assert isinstance(mixed.exception, InputError) and "fleet run cannot be compared" in str(mixed.exception)
