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
    fleet = _fleet_summary(run_dirs)
    if fleet is not None:
        from sim.report.fleet import build_fleet_page

        page, n_charts = build_fleet_page(fleet)
        write_atomic(out, page)
        _said(out, n_charts, run_dirs, as_json)
        return
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
    _said(out, n_charts, run_dirs, as_json)


def _fleet_summary(run_dirs: list[Path]) -> dict | None:
    """The summary of a fleet run (sim.fleet) given alone; None for other runs. A fleet among several
    folders: an error (`sim compare` draws runs of one cluster; compare the cells' folders)."""
    from sim.errors import InputError
    from sim.fleet import FLEET_FORMAT

    found = []
    for path in run_dirs:
        try:
            summary = json.loads((path / "summary.json").read_text())
        except (OSError, ValueError):
            continue  # load_run says what is wrong with it
        if isinstance(summary, dict) and summary.get("format") == FLEET_FORMAT:
            found.append((path, summary))
    if not found:
        return None
    if len(run_dirs) > 1:
        raise InputError("a fleet run cannot be compared with other runs here", file=str(found[0][0]),
                         allowed="one fleet folder (sim report), or the folders of its cells (cells/cell_NNNN)")  # fmt: skip
    return found[0][1]


def _said(out: Path, n_charts: int, run_dirs: list[Path], as_json: bool) -> None:
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
