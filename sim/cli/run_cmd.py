"""`sim run SCENARIO [--out DIR] [--force] [--seed N] [--jobs N] [--json]`: simulate every model of a
scenario on the same cluster and trace (up to --jobs models at once, one process each), search each
model's capacity in the same process (sim.capacity), write the outputs (whole or not at all:
sim.outputs), and print the capacity verdict first, then the models side by side at the scenario's
own rate (ratio last/first) next to the DeepSeek API list prices."""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Annotated

import typer
from rich.console import Console
from rich.table import Table

from sim import native, units
from sim.api import run_scenario
from sim.capacity.run import SearchStep
from sim.capacity.verdict import model_label, verdict_line
from sim.cli.capacity_view import capacity_lines, capacity_table, search_table
from sim.cli.fleet_cmd import fleet_run
from sim.cli.options import CORES, Jobs, RayAddress
from sim.cli.progress import eta_bar
from sim.config.scenario import load_scenario
from sim.errors import InputError
from sim.extensions import event_loop_of
from sim.processes import peak_rss_bytes
from sim.workload.io import arrow_without_pandas


def register(app: typer.Typer) -> None:
    """Add this module's commands to the top-level app."""
    app.command(name="run")(run)


def _fmt_sim_time(seconds: float) -> str:
    d, rem = divmod(int(seconds), 86400)
    h, rem = divmod(rem, 3600)
    m, s = divmod(rem, 60)
    return f"{d}d{h:02d}h{m:02d}m" if d else f"{h:02d}h{m:02d}m{s:02d}s"


def run(
    scenario: Annotated[Path, typer.Argument(help="scenario YAML (see `sim scenario check`)")],
    out: Annotated[
        Path | None, typer.Option("--out", help="output folder (default: runs/<scenario name>)")
    ] = None,
    force: Annotated[
        bool, typer.Option("--force", help="replace an earlier run in the output folder (whole)")
    ] = False,
    seed: Annotated[
        int | None,
        typer.Option(
            "--seed", min=0, help="override the scenario's seed (it drives a workload generator only)"
        ),
    ] = None,
    as_json: Annotated[
        bool, typer.Option("--json", help="print summary.json to stdout, nothing else")
    ] = False,
    jobs: Jobs = CORES,
    loop: Annotated[
        str | None,
        typer.Option(
            "--loop",
            help="event loop: native (the fast default) or simpy (same outputs; the scenario's "
            "extensions run on it); default: the scenario's event_loop",
        ),
    ] = None,
    ray: RayAddress = None,
) -> None:
    """Replay the scenario's trace on its cluster for each model; write Parquet + summary.json. With
    `cluster.cells`, a fleet: its cells run --jobs at a time (or on Ray) and merge (sim.fleet)."""
    scn = load_scenario(scenario)
    out_dir = out if out is not None else Path("runs") / scn.name
    err = Console(stderr=True, highlight=False)
    if scn.cluster.cells is not None:
        fleet_run(scn, seed, out_dir, force, as_json, jobs, ray, loop, err)
        return
    if ray is not None:
        raise InputError("--ray runs the cells of a fleet; this scenario has none", where="--ray", value=ray,
                         allowed="a scenario with cluster.cells, or no --ray")  # fmt: skip
    started = time.perf_counter()
    try:
        result = _run(scn, seed, out_dir, force, as_json, err, jobs, loop)
    except KeyboardInterrupt:
        err.print(f"nothing of this run was written; {out_dir} is as it was", markup=False, soft_wrap=True)
        raise
    if seed is not None and scn.workload.trace is not None:
        note = f"note: --seed {seed} changes nothing here: {result.summary['seed_affects']}"
        err.print(note, markup=False, soft_wrap=True)
    if as_json:
        typer.echo(json.dumps(result.summary, indent=2))
        return
    console = Console()
    verdict = verdict_line(result.summary)
    if verdict:
        console.print(f"Verdict: {verdict}", markup=False, style="bold")
    table = search_table(result.summary)
    if table is not None:
        console.print(table)
    for model, s in result.summary["models"].items():
        note = (s.get("capacity") or {}).get("search_note")
        if note:
            console.print(f"{model}: no capacity search: {note}", markup=False)
    console.print("At the scenario's own load (the fixed-rate comparison):", markup=False, style="bold")
    console.print(summary_table(result.summary))
    console.print(cost_table(result.summary))
    console.print(capacity_table(result.summary))
    for line in capacity_lines(result.summary):
        console.print(line, markup=False)
    for model, s in result.summary["models"].items():
        if s.get("engine_refusal"):
            console.print(
                f"{model}: {s['engine_refusal']} (sim.config.engine_rules); its figures here are what the "
                "engine would serve if it started",
                markup=False,
            )
    console.print(
        f"outputs in {out_dir}/ (summary.json, <model>/requests.parquet, <model>/timeseries/*.parquet), "
        f"run id {result.summary['run_id']}; the seed ({result.seed}) affects {result.summary['seed_affects']}; "
        f"wall {time.perf_counter() - started:.1f} s, peak memory {peak_rss_bytes() / 1e6:,.0f} MB "
        f"(resident, the largest process), simulator core {native.describe()}, "
        f"event loop {event_loop_of(scn, loop)}",
        markup=False,
    )


def _run(
    scn,
    seed: int | None,
    out_dir: Path,
    force: bool,
    as_json: bool,
    err: Console,
    jobs: int,
    loop: str | None,
):
    """The simulation under a progress bar per model (shown from the first model on: the checks
    before it print only errors); models run `jobs` at a time, their bars side by side."""
    bar = eta_bar(err, "sim {task.fields[sim_time]}", transient=as_json)
    tasks: dict[str, int] = {}
    searches: dict[str, int] = {}

    def progress(model: str, index: int, models: int, now_s: float, ended: int, expected: int) -> None:
        if not tasks:
            bar.start()
        if model not in tasks:
            tasks[model] = bar.add_task(f"{model} ({index + 1}/{models})", total=expected, sim_time="")
        bar.update(tasks[model], completed=ended, sim_time=_fmt_sim_time(now_s))

    def search_progress(step: SearchStep) -> None:
        """A search's bar counts points, its total the search's current estimate (so the ETA moves)."""
        if step.model in tasks:  # the fixed-rate run is over
            bar.update(tasks[step.model], completed=bar.tasks[tasks[step.model]].total)
        if step.model not in searches:
            label = f"{model_label(step.model)} capacity search"
            searches[step.model] = bar.add_task(label, total=step.max_points, sim_time="")
        shown = f"{step.load:,}/h" if step.unit == "sessions/h" else f"concurrency {step.load:,}"
        bar.update(searches[step.model], total=step.max_points, completed=step.point + step.ended / max(step.expected, 1),
                   sim_time=f"point {step.point + 1} at {shown}")  # fmt: skip

    try:
        with arrow_without_pandas():  # this process ends after the run, which never needs pandas
            result = run_scenario(scn, seed=seed, out_dir=out_dir, progress=progress, force=force, jobs=jobs,
                                  loop=loop, search_progress=search_progress)  # fmt: skip
        for model, task in tasks.items():
            s = result.summary["models"][model]
            bar.update(
                task, completed=bar.tasks[task].total, sim_time=_fmt_sim_time(s["window_s"] + s["warmup_s"])
            )
        for model, task in searches.items():
            search = result.summary["models"][model]["capacity"]["search"]
            bar.update(task, total=search["points_run"], completed=search["points_run"], sim_time="done")
    finally:
        if tasks:
            bar.stop()
    return result


# --- tables ---

_GB = units.GB


def _num(v, fmt: str) -> str:
    return "-" if v is None else format(v, fmt)


ROWS = [
    # (label, key or function, format)
    ("requests arrived", "requests_arrived", ",d"),
    ("requests completed", "requests_completed", ",d"),
    ("requests rejected", "requests_rejected", ",d"),
    ("TTFT p50 (s)", "ttft_p50_s", ".3f"),
    ("TTFT p90 (s)", "ttft_p90_s", ".3f"),
    ("TTFT p99 (s)", "ttft_p99_s", ".3f"),
    ("TPOT p50 (ms)", lambda s: None if s["tpot_p50_s"] is None else s["tpot_p50_s"] * 1e3, ".2f"),
    ("TPOT p99 (ms)", lambda s: None if s["tpot_p99_s"] is None else s["tpot_p99_s"] * 1e3, ".2f"),
    ("E2E p50 (s)", "e2e_p50_s", ".2f"),
    ("output tokens/s", "output_tokens_per_s", ",.0f"),
    ("output tokens/s per GPU", "output_tokens_per_s_per_gpu", ",.1f"),
    ("tokens/s per user (1 / TPOT p50)", "tokens_per_s_per_user", ",.1f"),
    ("input tokens/s", "input_tokens_per_s", ",.0f"),
    ("tasks/hour", "tasks_per_hour", ",.1f"),
    ("SLO attainment", "slo_attainment", ".3f"),
    ("prefix hit (share of input)", "prefix_hit_rate", ".3f"),
    ("  in HBM already", "hit_rate_hbm", ".3f"),
    ("  loaded from host DRAM", "hit_rate_dram", ".3f"),
    ("  loaded from SSD", "hit_rate_ssd", ".3f"),
    ("SWA pool hits / replays", lambda s: f"{s['swa_pool_hits']:,} / {s['swa_replays']:,}", "s"),
    ("loaded from DRAM (GB)", lambda s: s["bytes_loaded_dram"] / _GB, ",.1f"),
    ("loaded from SSD (GB)", lambda s: s["bytes_loaded_ssd"] / _GB, ",.1f"),
    ("written to SSD (GB)", lambda s: s["bytes_written_ssd"] / _GB, ",.1f"),
    ("KV P->D transfer (GB)", lambda s: s["bytes_kv_transfer"] / _GB, ",.1f"),
    ("HBM KV peak / mean (GB)", lambda s: _pair(s, "hbm"), "s"),
    ("DRAM KV peak / mean (GB)", lambda s: _pair(s, "dram"), "s"),
    ("SSD KV peak / mean (GB)", lambda s: _pair(s, "ssd"), "s"),
    ("global KV bytes/token", "kv_bytes_per_token", ",.2f"),
    ("session context, mean (tokens)", "session_context_tokens_mean", ",.0f"),
    ("KV per session, mean (MB)", lambda s: _mb(s["session_kv_bytes_mean"]), ",.1f"),
    ("SSD per session, mean (MB)", lambda s: _mb(s["session_ssd_bytes_mean"]), ",.1f"),
    ("SSD per session at 1M tokens (GB)", lambda s: s["session_ssd_bytes_at_1m_tokens"] / _GB, ",.2f"),
    ("cluster $/hour", "cluster_usd_per_hour", ",.2f"),
    ("cost per task ($)", "cost_per_task_usd", ",.4f"),
]


def _mb(v):
    return None if v is None else v / 1e6


def _pair(s: dict, tier: str) -> str:
    t = s["tiers"][tier]
    mean = t["mean_bytes"]
    return f"{t['peak_bytes'] / _GB:,.1f} / {'-' if mean is None else format(mean / _GB, ',.1f')}"


def _value(s: dict, key):
    return key(s) if callable(key) else s.get(key)


def summary_table(summary: dict) -> Table:
    models = list(summary["models"])
    table = Table(title=f"sim run {summary['scenario']['name']} (seed {summary['seed']})")
    table.add_column("metric")
    for m in models:
        table.add_column(model_label(m), justify="right")
    ratio = len(models) >= 2
    if ratio:
        table.add_column(f"{model_label(models[-1])} / {model_label(models[0])}", justify="right")
    for label, key, fmt in ROWS:
        vals = [_value(summary["models"][m], key) for m in models]
        cells = [_num(v, fmt) if fmt != "s" else (v or "-") for v in vals]
        if ratio:
            a, b = vals[0], vals[-1]
            numeric = isinstance(a, int | float) and isinstance(b, int | float)
            cells.append(f"{b / a:.2f}" if numeric and a else "-")
        table.add_row(label, *cells)
    return table


def cost_table(summary: dict) -> Table:
    rows = []
    for name, s in summary["models"].items():
        api = s.get("api") or {}
        rows.append(
            (
                model_label(name),
                _num(s["usd_per_mtok_input"], ".4f"),
                _num(s["usd_per_mtok_output"], ".4f"),
                _num(api.get("cache_hit_usd_per_mtok"), ".4f"),
                _num(api.get("cache_miss_usd_per_mtok"), ".2f"),
                _num(api.get("output_usd_per_mtok"), ".2f"),
                _num(api.get("bill_usd_per_task"), ".4f"),
                _num(s["cost_per_task_usd"], ".4f"),
            )
        )
    # Two-line headers and no outer edge: model names and $ figures stay whole at 80 columns.
    table = Table(
        title="$ per 1M tokens and per task: simulated cluster vs DeepSeek API list price "
        "(peak hours, hardware.md §4)",
        show_edge=False,
    )
    headers = ("model", "sim\ninput", "sim\noutput", "API hit", "API\nmiss", "API\noutput", "API\nper task",
               "sim\nper task")  # fmt: skip
    for i, col in enumerate(headers):
        table.add_column(col, justify="right" if i else "left")
    for row in rows:
        table.add_row(*row)
    return table
