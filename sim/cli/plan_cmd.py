"""`sim plan PLAN.yaml --out DIR`: capacity planning over a search space (sim.plan)."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Annotated

import typer
from rich.console import Console

from sim.cli.options import CORES, RayAddress, Workers
from sim.cli.progress import eta_bar


def register(app: typer.Typer) -> None:
    """Add `sim plan` to the top-level app."""
    app.command("plan")(plan)


def plan(
    plan_file: Annotated[Path, typer.Argument(help="plan spec YAML (e.g. scenarios/plan_agent.yaml)")],
    out: Annotated[
        Path, typer.Option("--out", help="output folder; a folder holding a partial plan is resumed")
    ],
    workers: Workers = CORES,
    ray: RayAddress = None,
    json_output: Annotated[
        bool, typer.Option("--json", help="print only the recommendation JSON on stdout")
    ] = False,
) -> None:
    """Find the cheapest configuration per model that meets the plan's constraints."""
    from sim.outputs import probe_writable_dir
    from sim.plan.backend import SimBackend
    from sim.plan.runner import run_plan

    probe_writable_dir(out)

    err = Console(stderr=True)
    with eta_bar(err, "candidates (the total is a bound: it shrinks as bisections finish)") as bar:
        task = bar.add_task("plan", total=None)

        def on_progress(done: int, total: int, resumed: int) -> None:
            bar.update(task, completed=done, total=total, description=f"plan ({resumed} resumed)")

        try:
            outcome = run_plan(
                plan_file, out, backend=SimBackend(), workers=workers, ray=ray, progress=on_progress
            )
        except KeyboardInterrupt:
            err.print(
                f"workers stopped; the candidates finished so far are kept in {out} "
                "(the same command resumes from them)",
                markup=False,
                soft_wrap=True,
            )
            raise

    rec = outcome.recommendation
    if json_output:
        typer.echo(json.dumps(rec, indent=2))
        return
    from sim.plan.verdict import configuration_lines, verdict_table

    # Long lines stay whole (they are commands to copy); a log or pipe gets a wide table.
    console = Console(highlight=False, soft_wrap=True, width=None if sys.stdout.isatty() else 160)
    console.print(verdict_table(rec["models"], rec["verdict"]))
    for line in configuration_lines(rec["models"]):
        console.print(f"configuration {line}")
    for model, entry in rec["models"].items():
        if entry["feasible"]:
            console.print(f"reproduce {model}: sim run {out / entry['scenario_file']} --seed {rec['seed']}")
    for item in outcome.pruned:
        console.print(f"pruned without simulating: {item['model']} {item['combination']}: {item['reason']}")
    console.print(
        f"{rec['search']['candidates_evaluated']} candidates ({outcome.simulated} simulated now, "
        f"{outcome.resumed} from the ledger), wall time {outcome.wall_s:.1f} s; "
        f"outputs in {out}: recommendation.json, frontier.html, candidates/"
    )
