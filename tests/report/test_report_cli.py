"""`sim report` and `sim compare`: files written atomically, --json, bad input as an InputError."""

import json

from report_synth import V41, write_run
from typer.testing import CliRunner

from sim.cli import app
from sim.errors import InputError


def test_report_writes_page_into_the_run_folder_and_json_describes_it(tmp_path):
    run = write_run(tmp_path / "run", n_requests=400)
    result = CliRunner().invoke(app, ["report", str(run), "--json"])
    assert result.exit_code == 0, result.output
    info = json.loads(result.stdout)
    page = run / "report.html"
    assert info == {"path": str(page), "bytes": page.stat().st_size, "charts": 14, "runs": [str(run)]}
    assert [p.name for p in run.iterdir() if p.name.startswith(".")] == []  # no temp file left behind


def test_compare_puts_runs_side_by_side(tmp_path):
    a = write_run(tmp_path / "a", n_requests=300)
    b = write_run(tmp_path / "b", n_requests=300, models=(V41,), seed=3)
    out = tmp_path / "cmp.html"
    result = CliRunner().invoke(app, ["compare", str(a), str(b), "-o", str(out)])
    assert result.exit_code == 0, result.output
    text = out.read_text()
    assert "sim compare — 2 runs" in text and f"b · {V41}" in text and f"a · {V41}" in text


def test_not_a_run_folder_is_an_input_error_naming_the_folder_and_nothing_is_written(tmp_path):
    # sim.cli.main turns an InputError into one line on stderr and exit 2 (tests/test_cli_basics.py)
    result = CliRunner().invoke(app, ["report", str(tmp_path)])
    assert isinstance(result.exception, InputError)
    assert str(result.exception) == (
        f"{tmp_path}: not a run directory: summary.json is missing; "
        "allowed: a folder written by `sim run SCENARIO --out DIR`"
    )
    assert list(tmp_path.iterdir()) == []
