"""`sim sweep SCENARIO --out DIR`: the throughput-latency frontier of a benchmark scenario (sim.sweep)."""

from __future__ import annotations

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
from sim.errors import InputError


def register(app: typer.Typer) -> None:
    """Add `sim sweep` to the top-level app."""
    app.command("sweep")(sweep)


def parse_concurrencies(text: str) -> list[int]:
    """'1,2,4' -> [1, 2, 4]; each a whole number >= 1."""
    values = []
    for part in text.split(","):
        part = part.strip()
        if not part.isdigit() or int(part) < 1:
            raise InputError("not a whole number >= 1", where="--concurrency", value=part,
                             allowed="a comma-separated list such as 1,2,4,8")  # fmt: skip
        values.append(int(part))
    return values


def sweep(
    scenario: Annotated[Path, typer.Argument(help="scenario YAML with a workload.benchmark block")],
    out: Annotated[Path, typer.Option("--out", help="output folder (sweep.json, sweep.html)")],
    concurrency: Annotated[
        str | None, typer.Option("--concurrency", help="comma-separated concurrencies, e.g. 1,2,4,8,16")
    ] = None,
    auto: Annotated[
        bool, typer.Option("--auto", help="double the concurrency from 1 until TPOT passes the target")
    ] = False,
    at_tpot_ms: Annotated[
        float | None,
        typer.Option(
            "--at-tpot-ms",
            callback=finite,
            help="interpolate the point where TPOT equals this (default: SLO TPOT)",
        ),
    ] = None,
    at_tpot_percentile: Annotated[
        str,
        typer.Option(
            "--at-tpot-percentile",
            help="the runs' TPOT percentile the target is read on: p50 (tokens/s per user = 1 / TPOT p50), "
            "p90 or p99 (a tail target)",
        ),
    ] = "p50",
    workers: Workers = CORES,
    ray: RayAddress = None,
    seed: Annotated[
        int | None, typer.Option("--seed", help="seed of every point (default: the scenario's)")
    ] = None,
    json_output: Annotated[bool, typer.Option("--json", help="print only sweep.json on stdout")] = False,
    force: Annotated[bool, typer.Option("--force", help="replace an earlier sweep in --out (whole)")] = False,
    gpus: Annotated[
        int | None,
        typer.Option(
            "--gpus",
            min=1,
            help="search every aggregated and prefill:decode deployment of this many "
            "GPUs (sim.sweep.space) instead of the scenario's pools",
        ),
    ] = None,
    prefill_layouts: Annotated[
        str | None, typer.Option("--prefill-layouts", help="with --gpus: tp4,tp8,dp8,wide (default tp4,dp8)")
    ] = None,
    decode_layouts: Annotated[
        str | None, typer.Option("--decode-layouts", help="with --gpus: default tp4,dp8,wide")
    ] = None,
    colocated_layouts: Annotated[
        str | None, typer.Option("--colocated-layouts", help="with --gpus: default tp4,dp8,wide")
    ] = None,
    decoder_tail: Annotated[
        str,
        typer.Option(
            "--decoder-tail",
            help="with --gpus: prefill_decoder_tail of every prefilling pool: auto (V4.1's decoder tail "
            "on plain attention TP only), on, off (sim/timing/decoder_tail.py)",
        ),
    ] = "auto",
) -> None:
    """Run a benchmark scenario at each concurrency for each model and draw the frontier."""
    from sim.outputs import probe_output_dir, staged_output_dir
    from sim.sweep.points import TPOT_PERCENTILES, tpot_key
    from sim.sweep.runner import load_benchmark, run_sweep, scenario_digest, write_outputs

    target = probe_output_dir(out, force=force)
    if (concurrency is None) == (not auto):
        raise InputError("give --concurrency LIST or --auto (one of them)", where="--concurrency",
                         value=concurrency, allowed="--concurrency 1,2,4,... | --auto")  # fmt: skip
    if at_tpot_ms is not None and at_tpot_ms <= 0:
        raise InputError("must be > 0", where="--at-tpot-ms", value=at_tpot_ms)
    if at_tpot_percentile not in TPOT_PERCENTILES:
        raise InputError("unknown TPOT percentile", where="--at-tpot-percentile", value=at_tpot_percentile,
                         allowed=", ".join(TPOT_PERCENTILES))  # fmt: skip
    pct = at_tpot_percentile
    levels = parse_concurrencies(concurrency) if concurrency is not None else None
    template, scn = load_benchmark(scenario)  # every problem of the file, reported the usual way
    target_s = at_tpot_ms / 1e3 if at_tpot_ms is not None else scn.slo.tpot_s
    if gpus is not None:
        from sim.cli import sweep_space

        layouts = {"prefill": prefill_layouts, "decode": decode_layouts, "colocated": colocated_layouts}
        with staged_output_dir(
            target, run_id=scenario_digest(template, gpus), command="sim sweep --gpus"
        ) as stage:
            sweep_space.run(template, scn, gpus=gpus, layouts=layouts, concurrencies=levels, target_s=target_s,
                            workers=workers, ray=ray, seed=seed, out=stage, json_output=json_output,
                            shown_out=out, decoder_tail=decoder_tail, percentile=pct)  # fmt: skip
        return

    err = Console(stderr=True)
    with Progress(TextColumn("sweep"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(),
                  console=err, transient=True) as bar:  # fmt: skip
        task = bar.add_task("sweep", total=None)

        def on_progress(done: int, planned: int) -> None:
            bar.update(task, completed=done, total=planned)

        result = run_sweep(template, concurrencies=levels, target_tpot_s=target_s, workers=workers, ray=ray,
                           seed=seed, progress=on_progress, percentile=pct)  # fmt: skip
    with staged_output_dir(target, run_id=scenario_digest(template, levels), command="sim sweep") as stage:
        written = write_outputs(result, stage)
    files = [out / path.relative_to(stage) for path in written]
    if json_output:
        typer.echo(json.dumps(result.to_json(), indent=2))
        return
    console = Console(highlight=False, soft_wrap=True, width=None if sys.stdout.isatty() else 160)
    for model, data in result.models.items():
        table = Table(title=f"{model}: {scn.name}")
        for column in ("concurrency", "tok/s/GPU", "tok/s/user", "TTFT p50 s", "TPOT p50 ms", "TPOT p90 ms",
                       "load per pool", "rejected"):  # fmt: skip
            table.add_column(column, justify="right")
        for p in data["points"]:
            loads = ", ".join(
                f"{pool['name']} {pool['load']:.0%}" for pool in p["pools"] if pool["load"] is not None
            )
            table.add_row(str(p["concurrency"]), _num(p["output_tokens_per_s_per_gpu"], 1),
                          _num(p["tokens_per_s_per_user"], 1), _num(p["ttft_p50_s"], 2),
                          _num(p["tpot_p50_s"], 2, 1e3), _num(p["tpot_p90_s"], 2, 1e3), loads,
                          str(p["requests_rejected"]))  # fmt: skip
        console.print(table)
        point = data["at_tpot"]
        if point is not None:
            console.print(
                f"{model} at TPOT {pct} = {target_s * 1e3:g} ms: {point['output_tokens_per_s_per_gpu']:.1f} output "
                f"tok/s/GPU at concurrency {point['concurrency']:.1f} (interpolated between "
                f"{point['between_concurrency'][0]} and {point['between_concurrency'][1]})"
            )
        else:
            console.print(f"{model} at TPOT {pct} = {target_s * 1e3:g} ms: not found: {data['note']}")
        best = data["floor_pick"]
        if best is not None:
            console.print(
                f"{model} best point run with TPOT {pct} <= {target_s * 1e3:g} ms: "
                f"{best['output_tokens_per_s_per_gpu']:.1f} output tok/s/GPU at concurrency {best['concurrency']} "
                f"(TPOT {pct} {best[tpot_key(pct)] * 1e3:.1f} ms, TTFT p50 {best['ttft_p50_s']:.2f} s)"
            )
    console.print(f"outputs: {', '.join(str(f) for f in files)}")


def _num(value: float | None, digits: int, scale: float = 1.0) -> str:
    return "n/a" if value is None else f"{value * scale:,.{digits}f}"
