"""`sim run` of a fleet (a scenario with `cluster.cells`: sim.fleet), and `sim fleet-bench`, which
times a fleet at several worker counts: simulated requests per wall-second per worker and the
speed-up against one worker (a measurement printed, not a test)."""

from __future__ import annotations

import json
import tempfile
import time
from pathlib import Path
from typing import Annotated

import typer
from rich.console import Console
from rich.table import Table

from sim import native
from sim.cli.options import RayAddress
from sim.cli.progress import eta_bar
from sim.config.scenario import load_scenario
from sim.fleet.run import FleetResult, run_fleet
from sim.processes import peak_rss_bytes
from sim.workload.io import arrow_without_pandas


def register(app: typer.Typer) -> None:
    app.command(name="fleet-bench")(fleet_bench)


def fleet_run(scn, seed, out_dir: Path, force: bool, as_json: bool, jobs: int, ray: str | None,
              loop: str | None, err: Console) -> None:  # fmt: skip
    """`sim run` of a fleet: a bar for the split, one for the cells, then the fleet tables."""
    started = time.perf_counter()
    result = _with_progress(scn, seed, out_dir, force, jobs, ray, loop, err, transient=as_json)
    if as_json:
        typer.echo(json.dumps(result.summary, indent=2))
        return
    console = Console()
    console.print(fleet_table(result.summary))
    for name, m in result.summary["models"].items():
        peak, spread = m["peak"], m["spread"]
        if peak["cells_needed_at_peak"] is not None:
            console.print(
                f"{name}: peak hour {peak['peak_hour']} ({peak['peak_hour_arrivals']:,} requests, "
                f"{peak['peak_hour_arrivals'] / max(peak['mean_hour_arrivals'], 1e-9):.2f}x the mean hour): "
                f"needs >= {peak['cells_needed_at_peak']} of {m['cells']} cells at load 1 (the hottest cell "
                f"{peak['cell_load_at_peak_max']:.2f}, mean {peak['cell_load_at_peak_mean']:.2f}); hottest cell "
                f"over the window: {spread['hottest_cell']} at {spread['hottest_over_mean_load'] or 0:.2f}x the "
                "mean bottleneck load",
                markup=False,
            )
    wall = time.perf_counter() - started
    requests = sum(c.requests for c in result.cells)
    console.print(
        f"outputs in {out_dir}/ (summary.json, cells/cell_NNNN/...), run id {result.summary['run_id']}; "
        f"wall {wall:.1f} s (split {result.split_s:.1f} s, merge {result.merge_s:.1f} s), {requests:,} "
        f"requests simulated, worker peak memory {max(c.peak_rss_bytes for c in result.cells) / 1e6:,.0f} MB, "
        f"this process {peak_rss_bytes(include_self=True) / 1e6:,.0f} MB, core {native.describe()}",
        markup=False,
    )


def _with_progress(
    scn, seed, out_dir, force, jobs, ray, loop, err: Console, *, transient: bool
) -> FleetResult:
    bar = eta_bar(err, transient=transient)
    tasks: dict[str, int] = {}

    def progress(stage: str, done: int, total: int) -> None:
        if not tasks:
            bar.start()
        if stage not in tasks:
            label = "split trace (rows)" if stage == "split" else "cells"
            tasks[stage] = bar.add_task(label, total=total)
        bar.update(tasks[stage], completed=done)

    try:
        with arrow_without_pandas():
            return run_fleet(
                scn, out_dir, seed, force=force, jobs=jobs, ray=ray, loop=loop, progress=progress
            )
    finally:
        if tasks:
            bar.stop()


def _f(v, fmt: str) -> str:
    return "-" if v is None else format(v, fmt)


def fleet_table(summary: dict) -> Table:
    models = summary["models"]
    fleet = summary["fleet"]
    table = Table(
        title=f"fleet of {fleet['cells']} cells ({fleet['router']} router): merged over every request"
    )
    table.add_column("")
    for name in models:
        table.add_column(name, justify="right")
    rows = [
        ("requests arrived (measured)", lambda m: f"{m['requests_arrived']:,}"),
        ("completed / rejected", lambda m: f"{m['requests_completed']:,} / {m['requests_rejected']:,}"),
        ("TTFT p50 / p99 (s)", lambda m: f"{_f(m['ttft_p50_s'], '.2f')} / {_f(m['ttft_p99_s'], '.2f')}"),
        ("TPOT p50 / p99 (ms)", lambda m: f"{_f(m['tpot_p50_s'] and m['tpot_p50_s'] * 1e3, '.1f')} / "
                                          f"{_f(m['tpot_p99_s'] and m['tpot_p99_s'] * 1e3, '.1f')}"),
        ("SLO attainment", lambda m: _f(m["slo_attainment"], ".3f")),
        ("output tok/s per GPU", lambda m: _f(m["output_tokens_per_s_per_gpu"], ",.0f")),
        ("GPUs, $/h", lambda m: f"{m['gpus']:,}, {m['cluster_usd_per_hour']:,.0f}"),
        ("cost per task ($)", lambda m: _f(m["cost_per_task_usd"], ".3f")),
        ("hottest / mean cell load", lambda m: f"{_f(m['spread']['hottest_load'], '.2f')} / "
                                               f"{_f(m['spread']['mean_load'], '.2f')}"),
        ("cells needed at peak hour", lambda m: _f(m["peak"]["cells_needed_at_peak"], "d")),
    ]  # fmt: skip
    for label, cell in rows:
        table.add_row(label, *(cell(m) for m in models.values()))
    return table


def fleet_bench(
    scenario: Annotated[Path, typer.Argument(help="a scenario with cluster.cells")],
    workers: Annotated[str, typer.Option("--workers", help="worker counts to time, comma-separated")] = "1,2",
    ray: RayAddress = None,
    as_json: Annotated[bool, typer.Option("--json", help="print the figures as JSON")] = False,
) -> None:
    """Time the fleet at each worker count: requests/s per worker and the speed-up against the first
    count (give 1 first for the speed-up against one worker)."""
    scn = load_scenario(scenario)
    counts = [int(w) for w in workers.split(",") if w.strip()]
    rows = []
    err = Console(stderr=True, highlight=False)
    for n in counts:
        with tempfile.TemporaryDirectory(prefix="sim-fleet-bench-") as tmp:
            began = time.perf_counter()
            result = _with_progress(scn, None, Path(tmp) / "out", False, n, ray, None, err, transient=True)
            wall = time.perf_counter() - began
        requests = sum(c.requests for c in result.cells)
        cell_s = sum(c.wall_s for c in result.cells)
        rows.append({
            "workers": n, "wall_s": wall, "split_s": result.split_s, "merge_s": result.merge_s,
            "requests": requests, "requests_per_s": requests / wall,
            "requests_per_s_per_worker": requests / wall / n, "cell_requests_per_s": requests / cell_s,
            "worker_peak_rss_bytes": max(c.peak_rss_bytes for c in result.cells),
        })  # fmt: skip
    for row in rows:
        row["speedup"] = rows[0]["wall_s"] / row["wall_s"]  # against the first count
    if as_json:
        typer.echo(json.dumps(rows, indent=2))
        return
    table = Table(title=f"{scn.name}: {scn.cluster.cells.count if scn.cluster.cells else 1} cells")
    for col in ("workers", "wall s", "split s", "merge s", "requests", "req/s", "req/s per worker",
                "req/s in a cell", "speed-up", "worker peak MB"):  # fmt: skip
        table.add_column(col, justify="right")
    for r in rows:
        table.add_row(str(r["workers"]), f"{r['wall_s']:.1f}", f"{r['split_s']:.1f}", f"{r['merge_s']:.1f}",
                      f"{r['requests']:,}", f"{r['requests_per_s']:,.0f}", f"{r['requests_per_s_per_worker']:,.0f}",
                      f"{r['cell_requests_per_s']:,.0f}", f"{r['speedup']:.2f}x",
                      f"{r['worker_peak_rss_bytes'] / 1e6:,.0f}")  # fmt: skip
    Console().print(table)
