"""`sim report RUN_DIR` and `sim compare RUN_DIR...`: self-contained interactive HTML pages of runs."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated

import typer
from rich.console import Console
from rich.progress import BarColumn, Progress, TextColumn, TimeElapsedColumn

REPORT_FILE = "report.html"
COMPARE_FILE = "compare.html"


def _make_page(run_dirs: list[Path], out: Path, as_json: bool) -> None:
    from sim.outputs import probe_output_file
    from sim.report.build import build_page, unique_labels, write_atomic
    from sim.report.rundata import load_run

    probe_output_file(out, flag="-o/--out")  # before reading the runs: one line, no work lost
    labels = unique_labels(run_dirs)
    err = Console(stderr=True)
    with Progress(
        TextColumn("{task.description}"),
        BarColumn(),
        TimeElapsedColumn(),
        console=err,
        disable=as_json,
        transient=True,
    ) as progress:
        task = progress.add_task("reading runs", total=len(run_dirs) + 2)
        runs = []
        for path, label in zip(run_dirs, labels, strict=True):
            progress.update(task, description=f"reading {label}")
            runs.append(load_run(path, label))
            progress.advance(task)
        progress.update(task, description="building charts")
        page, n_charts = build_page(runs)
        progress.advance(task)
        progress.update(task, description=f"writing {out}")
        write_atomic(out, page)
        progress.advance(task)
    size = out.stat().st_size
    if as_json:
        typer.echo(
            json.dumps(
                {"path": str(out), "bytes": size, "charts": n_charts, "runs": [str(p) for p in run_dirs]}
            )
        )
    else:
        Console().print(f"wrote [bold]{out}[/] ({size / 1e6:.1f} MB, {n_charts} charts, works offline)")


RunDir = Annotated[Path, typer.Argument(help="Run folder written by `sim run SCENARIO --out DIR`.")]
JsonFlag = Annotated[
    bool, typer.Option("--json", help="Print only a JSON line (path, bytes, charts) on stdout.")
]


def register(app: typer.Typer) -> None:
    """Add `sim report` and `sim compare` as top-level commands."""

    @app.command()
    def report(
        run_dir: RunDir,
        out: Annotated[
            Path | None,
            typer.Option("-o", "--out", help=f"HTML file to write (default: RUN_DIR/{REPORT_FILE})."),
        ] = None,
        as_json: JsonFlag = False,
    ) -> None:
        """Write one self-contained interactive HTML page of a run (works offline)."""
        _make_page([run_dir], out or run_dir / REPORT_FILE, as_json)

    @app.command()
    def compare(
        run_dirs: Annotated[list[Path], typer.Argument(help="Run folders to put side by side.")],
        out: Annotated[Path, typer.Option("-o", "--out", help="HTML file to write.")] = Path(COMPARE_FILE),
        as_json: JsonFlag = False,
    ) -> None:
        """Write one HTML page with several runs side by side (colour = model, dash = run)."""
        _make_page(run_dirs, out, as_json)
