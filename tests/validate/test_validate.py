"""`sim validate`: case files (clear messages for bad ones) and the JSON shape of a tiny case."""

import json
from pathlib import Path

import pytest
import yaml
from typer.testing import CliRunner

from sim.cli import app
from sim.paths import project_root
from sim.validate.cases import load_cases

TINY = project_root() / "tests" / "sweep" / "bench_tiny.yaml"


def write_case(folder: Path, **fields) -> Path:
    case = {
        "name": "tiny",
        "source": "a test fixture, 2026-12-03",
        "scenario": str(TINY),
        "model": "deepseek-v4-flash",
        "at": {"tpot_p50_ms": 16},
        "metric": "output_tokens_per_s_per_gpu",
        "published": 100.0,
    }
    case.update(fields)
    case = {k: v for k, v in case.items() if v is not None}
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / f"{case.get('name', 'case')}.yaml"
    path.write_text(yaml.safe_dump(case))
    return path


def test_shipped_cases_load():
    cases = load_cases(project_root() / "scenarios" / "validation")
    names = {c.case.name for c in cases}
    assert {"v4-flash-4xh200-agg", "v4-flash-4xb200-agg"} <= names
    for c in cases:
        assert c.case.source and c.case.setup and c.case.at.tpot_p50_ms == 20


def test_validate_json_shape(tmp_path):
    write_case(tmp_path / "cases")
    out = tmp_path / "out"
    result = CliRunner().invoke(
        app, ["validate", "--cases", str(tmp_path / "cases"), "--json", "--out", str(out), "--workers", "2"]
    )
    assert result.exit_code == 0, result.output
    data = json.loads(result.stdout)
    assert data == json.loads((out / "validate.json").read_text())
    (case,) = data["cases"]
    assert {"name", "published", "simulated", "error_frac"} <= set(case)
    assert case["name"] == "tiny" and case["published"] == 100.0
    if case["simulated"] is not None:
        assert case["error_frac"] == pytest.approx((case["simulated"] - 100.0) / 100.0)
    else:
        assert case["note"]
    assert (out / "validate.html").read_text().startswith("<!DOCTYPE html>")


@pytest.mark.parametrize(
    ("fields", "message"),
    [
        ({"metric": "speed"}, "metric: not a metric a case can compare (got 'speed')"),
        ({"published": None}, "published"),
        ({"model": "deepseek-v4.1-flash"}, "model: not one of the scenario's models"),
        ({"scenario": "missing.yaml"}, "scenario: scenario file not found"),
        ({"at": {"tpot_p50_ms": -5}}, "at.tpot_p50_ms"),
        ({"scenario": {"name": "x"}}, "scenario"),
    ],
)
def test_bad_case_file_gives_one_clear_message(tmp_path, fields, message):
    path = write_case(tmp_path, **fields)
    result = CliRunner().invoke(app, ["validate", "--cases", str(tmp_path)])
    assert result.exit_code != 0
    text = str(result.exception)
    assert message in text and str(path.name) in text, text


def test_validate_needs_a_folder_of_cases(tmp_path):
    result = CliRunner().invoke(app, ["validate", "--cases", str(tmp_path)])
    assert "no case files" in str(result.exception)
