"""`sim validate --real RUN_DIR [--model NAME] [--json] [--out DIR]`: a real serving run against the simulator
(sim.validate.real)."""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

import typer
from rich.console import Console
from rich.table import Table

REAL_JSON = "validate_real.json"
REAL_HTML = "validate_real.html"


def _pct(v: float | None) -> str:
    return f"{v:+.1%}" if v is not None else "n/a"


def validate_real_cmd(run_dir: Path, model: str | None, out: Path | None, json_output: bool) -> None:
    from sim.outputs import probe_writable_dir
    from sim.validate.real import STEP_KINDS, validate_real
    from sim.validate.real_page import real_page

    if out is not None:
        probe_writable_dir(out)
    report = validate_real(run_dir, model)
    document = report.to_json()
    if out is not None:
        out.mkdir(parents=True, exist_ok=True)
        for name, text in (
            (REAL_JSON, json.dumps(document, indent=2) + "\n"),
            (REAL_HTML, real_page(report)),
        ):
            tmp = out / (name + ".tmp")
            tmp.write_text(text)
            os.replace(tmp, out / name)
    if json_output:
        typer.echo(json.dumps(document, indent=2))
        return
    console = Console(highlight=False, soft_wrap=True, width=None if sys.stdout.isatty() else 160)
    table = Table(
        title=f"sim validate --real: {report.model}, measured vs simulated (a measurement, not a target)"
    )
    for column in ("metric", "stat", "measured", "simulated", "error"):
        table.add_column(column, justify="left" if column in ("metric", "stat") else "right")
    for m in report.metrics:
        table.add_row(m.metric, m.stat, f"{m.measured:,.4g}", f"{m.simulated:,.4g}", _pct(m.error_frac))
    console.print(table)
    steps = Table(
        title="engine steps: sim's prediction of each measured step, (predicted - measured) / measured"
    )
    for column in ("steps", "count", "median", "median |err|", "p10", "p90", "total time"):
        steps.add_column(column, justify="left" if column == "steps" else "right")
    for kind in STEP_KINDS:
        s = report.steps.get(kind)
        if s is not None:
            steps.add_row(kind, f"{s['steps']:,}", *(_pct(s[k]) for k in ("median_error_frac", "median_abs_error_frac",
                          "p10_error_frac", "p90_error_frac", "total_error_frac")))  # fmt: skip
    console.print(steps)
    for term, by_kind in report.steps_by_term.items():
        s = by_kind.get("all")
        if s is not None:
            console.print(f"with forward_term {term} instead: step median error {_pct(s['median_error_frac'])}, "
                          f"p10 {_pct(s['p10_error_frac'])}, p90 {_pct(s['p90_error_frac'])}")  # fmt: skip
    console.print("settings: " + ", ".join(f"{k}={v}" for k, v in report.settings.items()))
    if out is not None:
        console.print(f"outputs: {out / REAL_JSON}, {out / REAL_HTML}")
