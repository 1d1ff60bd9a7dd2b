"""`sim trace`: import public traces, generate, fit and describe agent workloads (issue 3)."""

from __future__ import annotations

import json
import sys
from contextlib import contextmanager
from pathlib import Path
from typing import Annotated

import typer
from rich.console import Console
from rich.progress import BarColumn, Progress, TextColumn, TimeElapsedColumn, TimeRemainingColumn
from rich.table import Table

from sim.cli.numbers import finite
from sim.config.base import MAX_DURATION_S
from sim.outputs import probe_output_file

trace_app = typer.Typer(
    help="Agent traces: import public traces, generate, fit, describe.", no_args_is_help=True
)


def register(app: typer.Typer) -> None:
    """Add this module's commands to the top-level app."""
    app.add_typer(trace_app, name="trace")


@contextmanager
def _progress(label: str, quiet: bool):
    """A rich progress bar with ETA on stderr; yields the callback progress(done, total)."""
    if quiet or not sys.stderr.isatty():
        yield None
        return
    columns = (
        TextColumn(label),
        BarColumn(),
        TextColumn("{task.percentage:>3.0f}%"),
        TimeElapsedColumn(),
        TimeRemainingColumn(),
    )
    with Progress(*columns, console=Console(stderr=True), transient=True) as bar:
        task = bar.add_task(label, total=None)
        yield lambda done, total: bar.update(task, completed=done, total=total)


def _summary_table(title: str, values: dict) -> Table:
    table = Table(title=title, show_header=False)
    for key, value in values.items():
        table.add_row(
            key,
            f"{value:,}"
            if isinstance(value, int)
            else (f"{value:,.3f}" if isinstance(value, float) else str(value)),
        )
    return table


@trace_app.command("import")
def import_cmd(
    fmt: Annotated[str, typer.Argument(metavar="FORMAT", help="weka, mooncake, azure or servegen")],
    src: Annotated[Path, typer.Argument(help="the source file (gzip/xz compressed or plain)")],
    out: Annotated[Path, typer.Option("-o", "--out", help="output Parquet file")],
    select: Annotated[
        str | None, typer.Option(help="servegen only: keep clients whose path starts with this")
    ] = None,
    session_start: Annotated[
        str | None,
        typer.Option(
            "--session-start",
            help="weka only: when sessions start - zero (default: all at 0 s), poisson:RATE_PER_H "
            "or spread:HOURS (sim.workload.starts)",
        ),
    ] = None,
    seed: Annotated[int | None, typer.Option(min=0, help="weka only: seed of the session starts")] = None,
    as_json: Annotated[bool, typer.Option("--json", help="print the summary as JSON only")] = False,
) -> None:
    """Convert a public trace into the canonical Parquet format (ServeGen: an arrival envelope)."""
    from sim.workload.importers import import_trace

    probe_output_file(out, flag="-o/--out")
    given = {"select": select, "session_start": session_start, "seed": seed}
    options = {k: v for k, v in given.items() if v is not None}
    with _progress(f"importing {src.name}", as_json) as progress:
        summary = import_trace(fmt, src, out, progress=progress, **options)
    _emit(summary, as_json, f"{fmt} -> {out}")


def _days(value: float | None) -> float | None:
    if value is not None and not 0 < value <= MAX_DURATION_S / 86_400:  # NaN fails too
        raise typer.BadParameter(f"{value} is not a number of days in (0, {MAX_DURATION_S // 86_400}]")
    return value


@trace_app.command("gen")
def gen_cmd(
    spec: Annotated[Path, typer.Argument(help="generator spec (YAML), e.g. traces/agent_2w.yaml")],
    out: Annotated[
        Path, typer.Option("-o", "--out", help="output Parquet file (with --parts: a new folder)")
    ],
    seed: Annotated[int | None, typer.Option(min=0, help="random seed (default: the spec's)")] = None,
    days: Annotated[
        float | None, typer.Option(callback=_days, help="horizon in days (default: the spec's)")
    ] = None,
    sessions_per_hour: Annotated[
        float | None,
        typer.Option(
            min=0.001, callback=finite, help="session starts per hour (default: the spec's arrivals)"
        ),
    ] = None,
    parts: Annotated[
        int | None,
        typer.Option(
            min=1, help="write a folder of parts (-o names it): one per day, at most N sessions each"
        ),
    ] = None,
    as_json: Annotated[bool, typer.Option("--json", help="print the summary as JSON only")] = False,
) -> None:
    """Generate a synthetic agent trace from a spec; same spec and seed give identical bytes. With
    --parts, a fleet-scale trace as a folder of parts, in bounded memory (sim.workload.parts)."""
    from sim.workload.generator import generate_trace

    if parts is None:
        probe_output_file(out, flag="-o/--out")
    with _progress("generating sessions", as_json) as progress:
        summary = generate_trace(spec, out, seed=seed, days=days, progress=progress,
                                 sessions_per_hour=sessions_per_hour, part_sessions=parts)  # fmt: skip
    _emit(summary, as_json, f"{spec} -> {out}")


@trace_app.command("fit")
def fit_cmd(
    file: Annotated[Path, typer.Argument(help="a canonical trace (Parquet), e.g. an imported Weka trace")],
    out: Annotated[Path, typer.Option("-o", "--out", help="output spec (YAML)")],
    name: Annotated[str | None, typer.Option(help="name of the fitted workload")] = None,
) -> None:
    """Fit generator parameters to a trace and write them as a spec."""
    from sim.workload.fit import fit_spec, write_spec
    from sim.workload.io import trace_info

    probe_output_file(out, flag="-o/--out")
    spec = fit_spec(file, name=name)
    info = trace_info(file)
    header = (f"Fitted by `sim trace fit {file.name}`: {info['sessions']:,} sessions, {info['requests']:,} requests.\n"
              "Generate with: sim trace gen THIS.yaml -o OUT.parquet [--days D] [--seed N]")  # fmt: skip
    write_spec(spec, out, header)
    Console(highlight=False).print(f"wrote {out}")


@trace_app.command("stats")
def stats_cmd(
    file: Annotated[
        Path,
        typer.Argument(help="a canonical trace (Parquet), a folder of its parts, or an imported envelope"),
    ],
    as_json: Annotated[bool, typer.Option("--json", help="print all statistics as JSON only")] = False,
    html_out: Annotated[
        Path | None, typer.Option("--html", help="also write a self-contained plotly page")
    ] = None,
    blocks: Annotated[
        bool, typer.Option(help="block-level reuse from block hashes (slower on long lists)")
    ] = True,
) -> None:
    """Rates over time, session shapes, token and think-time percentiles, prefix reuse, tokens per day."""
    from sim.workload.envelope import read_envelope_table
    from sim.workload.importers.servegen import summarize
    from sim.workload.io import file_format, open_parquet
    from sim.workload.schema import ENVELOPE_FORMAT_VERSION
    from sim.workload.stats import trace_stats

    if html_out is not None:
        probe_output_file(html_out, flag="--html")
    if not file.is_dir() and file_format(open_parquet(file)) == ENVELOPE_FORMAT_VERSION:
        summary = summarize(read_envelope_table(file))
        if as_json:
            typer.echo(json.dumps(summary))
        else:
            _print_envelope(summary, file)
        return
    with _progress(f"reading {file.name}", as_json) as progress:
        stats = trace_stats(file, progress=progress, blocks=blocks)
    if html_out is not None:
        from sim.workload.stats_html import write_stats_html

        write_stats_html(stats, html_out)
    if as_json:
        typer.echo(json.dumps(stats))
        return
    _print_stats(stats, html_out)


def _emit(summary: dict, as_json: bool, title: str) -> None:
    if as_json:
        typer.echo(json.dumps(summary))
    elif "groups" in summary:
        _print_envelope(summary, title)
    else:
        Console(highlight=False).print(_summary_table(title, summary))


def _print_envelope(summary: dict, title: object) -> None:
    table = Table(title=f"{title}: {summary['clients']:,} clients, {summary['windows']:,} windows")
    for col in ("group", "clients", "days", "mean req/s", "min req/s", "max req/s", "peak/mean"):
        table.add_column(col, justify="right")
    for group, g in summary["groups"].items():
        table.add_row(group, f"{g['clients']}", f"{g['span_s'] / 86400:.1f}", f"{g['rate_mean_per_s']:,.1f}",
                      f"{g['rate_min_per_s']:,.1f}", f"{g['rate_max_per_s']:,.1f}", f"{g['peak_to_mean']:.2f}")  # fmt: skip
    Console(highlight=False).print(table)


def _print_stats(stats: dict, html_out: Path | None) -> None:
    console = Console(highlight=False)
    rates = stats["rates"]
    console.print(_summary_table(f"{stats['file']}", {
        "sessions": stats["sessions"],
        "requests": stats["requests"],
        "top-level requests": stats["top_level_requests"],
        "sub-agents / their requests": f"{stats['subagents']:,} / {stats['subagent_requests']:,}",
        "span (days)": stats["span_s"] / 86400.0,
        "mean requests/s": rates["mean_requests_per_s"] or 0.0,
        "peak requests/s (per bin)": rates["peak_requests_per_s"],
        "mean concurrent sessions": rates["mean_concurrent_sessions"] or 0.0,
        "prefix reuse within sessions (tokens)": f"{stats['prefix_reuse']['tokens']['within_session']:.1%}",
        "prefix reuse across sessions (tokens)": f"{stats['prefix_reuse']['tokens']['cross_session']:.1%}",
    }))  # fmt: skip
    table = Table(title="per request (top level) and per session")
    for col in ("", "p10", "p50", "p90", "p99", "max", "mean"):
        table.add_column(col, justify="right", no_wrap=not col)
    rows = {**{k: v for k, v in stats["percentiles"]["top_level"].items()},
            **{f"after {k[6:]}: think s": v for k, v in stats["think_time_s"].items()},
            **{f"per session: {k.replace('top_level_', 'top-level ')}": v for k, v in stats["session"].items()}}  # fmt: skip
    for name, s in rows.items():
        if s.get("count"):
            table.add_row(
                name,
                *(
                    f"{s[k]:,.0f}" if abs(s[k]) >= 10 else f"{s[k]:.2f}"
                    for k in ("p10", "p50", "p90", "p99", "max", "mean")
                ),
            )
    console.print(table)
    if stats["prefix_reuse"]["blocks"]:
        b = stats["prefix_reuse"]["blocks"]
        console.print(f"blocks seen before (infinite cache): {b['reused']:.1%} "
                      f"(within sessions {b['within_session']:.1%}, across {b['cross_session']:.1%})")  # fmt: skip
    if html_out is not None:
        console.print(f"wrote {html_out}")
