"""`sim validate [--cases DIR] [--json] [--out DIR]`: published results against the simulator (sim.validate);
`sim validate --real RUN_DIR [--model NAME]`: a real serving run against it (sim.cli.validate_real)."""

from __future__ import annotations

import hashlib
import json
import sys
from pathlib import Path
from typing import Annotated

import typer
from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn
from rich.table import Table

from sim.cli.numbers import finite
from sim.cli.options import CORES, RayAddress, Workers
from sim.paths import project_root

VALIDATE_JSON = "validate.json"
VALIDATE_HTML = "validate.html"


def register(app: typer.Typer) -> None:
    """Add `sim validate` to the top-level app."""
    app.command("validate")(validate)


def validate(
    cases: Annotated[
        Path | None, typer.Option("--cases", help="folder of case files (default: scenarios/validation/)")
    ] = None,
    out: Annotated[
        Path | None, typer.Option("--out", help="write validate.json and validate.html here")
    ] = None,
    json_output: Annotated[bool, typer.Option("--json", help="print only the JSON ({cases: [...]})")] = False,
    workers: Workers = CORES,
    ray: RayAddress = None,
    force: Annotated[
        bool, typer.Option("--force", help="replace an earlier validation in --out (whole)")
    ] = False,
    real: Annotated[
        Path | None,
        typer.Option(
            "--real", help="a run directory of kernels_bench.serve.run: compare it with sim instead"
        ),
    ] = None,
    model: Annotated[
        str | None, typer.Option("--model", help="with --real: the model (default: the run's provenance)")
    ] = None,
    within: Annotated[
        float,
        typer.Option(
            "--within",
            min=0.0,
            callback=finite,
            help="the tolerance the summary counts cases against (0.15 = +-15 %)",
        ),
    ] = 0.15,
) -> None:
    """Run each case's deployment to its operating point and print published vs simulated (exit 0:
    the error is a measurement, not a verdict). With --real: a measured serving run against sim."""
    if real is not None:
        from sim.cli.validate_real import validate_real_cmd

        validate_real_cmd(real, model, out, json_output)
        return
    from sim.outputs import probe_output_dir, staged_output_dir
    from sim.validate.cases import load_cases
    from sim.validate.page import validate_page
    from sim.validate.runner import run_cases
    from sim.validate.summary import SPEED_METRICS, group_errors, within_counts

    folder = cases if cases is not None else project_root() / "scenarios" / "validation"
    target = probe_output_dir(out, force=force) if out is not None else None
    loaded = load_cases(folder)  # every case file is checked before anything runs
    err = Console(stderr=True)
    with Progress(TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(),
                  console=err, transient=True) as bar:  # fmt: skip
        task = bar.add_task("validate", total=None)

        def on_progress(name: str, done: int, planned: int) -> None:
            bar.update(task, description=f"validate {name}", completed=done, total=planned)

        results = run_cases(loaded, workers=workers, ray=ray, progress=on_progress)
    counts = within_counts(results, within)
    groups = group_errors(results, within)
    document = {
        "format": "sim.validate/v2",
        "cases": [r.to_json() for r in results],
        "within": {"tolerance_frac": within, **counts},
        "groups": [g.to_json() for g in groups],
    }
    if target is not None:
        text = json.dumps(document, indent=2) + "\n"
        digest = hashlib.sha256(text.encode()).hexdigest()[:16]
        with staged_output_dir(target, run_id=digest, command="sim validate") as stage:
            (stage / VALIDATE_JSON).write_text(text)
            (stage / VALIDATE_HTML).write_text(validate_page(results, groups, within))
    if json_output:
        typer.echo(json.dumps(document, indent=2))
        return
    console = Console(highlight=False, soft_wrap=True, width=None if sys.stdout.isatty() else 160)
    table = Table(title="sim validate: published vs simulated (a measurement, not a target)")
    for column in ("case", "metric", "at", "published", "simulated", "error", "concurrency"):
        table.add_column(column, justify="left" if column in ("case", "metric", "at") else "right")
    for r in results:
        for metric, published in r.published.items():
            sim_value, error = r.simulated[metric], r.error_frac[metric]
            table.add_row(
                r.name, metric, r.at_label, f"{published:,.4g}",
                f"{sim_value:,.4g}" if sim_value is not None else "n/a",
                f"{error:+.1%}" if error is not None else "n/a",
                f"{r.concurrency:.1f}" if r.concurrency is not None else "n/a",
            )  # fmt: skip
    console.print(table)
    for r in results:
        if r.note:
            console.print(f"{r.name}: {r.note}")
        console.print(f"{r.name}: source: {r.source}")
    apart = [r for r in results if r.consistency is not None and abs(r.consistency.gap_frac) > within]
    for r in apart:
        c = r.consistency
        console.print(
            f"{r.name}: its published tok/s/GPU is {c.published_ratio:.2f}x what its own TTFT and TPOT medians imply, "
            f"sim's run {c.simulated_ratio:.2f}x ({c.gap_frac:+.0%}): the published throughput holds time neither "
            "median shows (sim.validate.consistency)"
        )
    # the summary last, where a terminal leaves the reader
    speed = counts.pop("speed")
    per_metric = ", ".join(f"{m} {c['within']} of {c['scored']}" for m, c in counts.items())
    console.print(_groups_table(groups, within))
    checked = sum(r.consistency is not None for r in results)
    console.print(
        f"within +-{within:.0%}: {speed['within']} of {speed['scored']} cases on both {' and '.join(SPEED_METRICS)}; "
        f"by metric: {per_metric}; published throughput and own medians apart from sim's run by more than "
        f"+-{within:.0%}: {len(apart)} of {checked} cases"
    )
    if out is not None:
        console.print(f"outputs: {out / VALIDATE_JSON}, {out / VALIDATE_HTML}")


def _groups_table(groups, within: float) -> Table:
    """The speed errors by deployment (sim.validate.summary): median signed error (sim fast: +) and median |error|."""
    from sim.validate.summary import SPEED_METRICS

    table = Table(title="error by deployment (cases publishing both speeds): median (median |error|)")
    for column in ("GPU, engine", "cases", f"within +-{within:.0%}", "tok/s/GPU", "tok/s/user"):
        table.add_column(column, justify="left" if column == "GPU, engine" else "right")
    for g in groups:
        cells = [
            f"{g.median_error_frac[m]:+.0%} ({g.median_abs_error_frac[m]:.0%})"
            if g.median_error_frac[m] is not None else "n/a"
            for m in SPEED_METRICS
        ]  # fmt: skip
        table.add_row(g.group, str(g.cases), str(g.within), *cells)
    return table
