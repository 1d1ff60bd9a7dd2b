"""`sim bench --requests N [--json]`: how fast the simulator runs, in simulated requests per
wall-second, on a synthetic agent trace (generated first, not timed) and a fixed disaggregated
H200 cluster. The figure is for one core: the simulator is single-threaded."""

from __future__ import annotations

import json
import multiprocessing
import statistics
import sys
import tempfile
import time
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path
from typing import Annotated

import numpy as np
import typer
import yaml
from rich.console import Console
from rich.table import Table

from sim import native
from sim.api import run_scenario
from sim.config.scenario import load_scenario
from sim.processes import peak_rss_bytes
from sim.timing.arith import build_arith
from sim.workload.io import TraceWriter, arrow_without_pandas
from sim.workload.rows import request_table
from sim.workload.schema import ARRIVAL_ABSOLUTE, ARRIVAL_THINK

# The benchmark's agent workload (numbers for the benchmark only): one session per second, ~30
# requests each, contexts growing from ~12K tokens by the previous output (~400 tokens) and a
# tool result (~1.5K tokens) per request, 4 s think time, an 8K-token system prompt shared by all.
SESSION_GAP_S = 1.0
REQUESTS_MEDIAN = 30
SHARED_PREFIX_TOKENS = 8000


def agent_trace(path: Path, requests: int, seed: int) -> Path:
    """A synthetic agent trace of exactly `requests` rows (closed-loop turns), vectorised.

    Kept here rather than taken from sim.workload's generator so that the benchmark's workload
    does not move when the generator's spec does."""
    rng = np.random.default_rng(seed)
    lengths = []
    total = 0
    while total < requests:
        n = int(np.clip(rng.lognormal(np.log(REQUESTS_MEDIAN), 0.5), 1, 200))
        n = min(n, requests - total)
        lengths.append(n)
        total += n
    lengths = np.array(lengths, dtype=np.int64)
    sessions = len(lengths)
    session = np.repeat(np.arange(sessions), lengths)
    first = np.concatenate([[0], np.cumsum(lengths)[:-1]])
    index = np.arange(requests) - np.repeat(first, lengths)
    output = np.clip(rng.lognormal(np.log(400), 0.8, requests), 1, 8000).astype(np.int64)
    tool = np.clip(rng.lognormal(np.log(1500), 0.8, requests), 1, 30000).astype(np.int64)
    initial = SHARED_PREFIX_TOKENS + rng.lognormal(np.log(12000), 0.3, sessions).astype(np.int64)
    # input_k = initial + sum_{j<k} (output_j + tool_j): a cumulative sum restarted per session
    grow = output + tool
    csum = np.cumsum(grow)
    before = csum - grow - np.repeat(csum[first] - grow[first], lengths)
    inputs = np.repeat(initial, lengths) + before
    prev = np.arange(requests) - 1
    has_prev = index > 0
    prefix = np.where(has_prev, np.roll(inputs + output, 1), 0)
    start = session * SESSION_GAP_S
    think = np.where(has_prev, rng.lognormal(np.log(4.0), 0.5, requests), 0.0)
    cols = {
        "session_id": session,
        "session_start_s": start,
        "request_id": np.arange(requests),
        "request_index": index,
        "arrival": np.where(has_prev, ARRIVAL_THINK, ARRIVAL_ABSOLUTE).tolist(),
        "arrival_time_s": start + index * 10.0,
        "think_time_s": think,
        "depends_on_request_id": np.where(has_prev, prev, -1),
        "input_tokens": inputs,
        "output_tokens": output,
        "prefix_parent_request_id": np.where(has_prev, prev, -1),
        "prefix_tokens": prefix,
        "shared_prefix_id": session % 4,
        "shared_prefix_tokens": SHARED_PREFIX_TOKENS,
    }
    with TraceWriter(path) as writer:  # with its summary in the metadata: `trace_info` reads no rows
        writer.write(request_table(requests, cols))
    return path


BENCH_SCENARIO = {
    "name": "bench",
    "seed": 0,
    "models": ["deepseek-v4.1-flash"],
    "hardware": "nvidia-h200-hgx8",
    "cluster": {
        "pools": [
            {
                "name": "prefill",
                "role": "prefill",
                "nodes": 2,
                "gpus_per_instance": 8,
                "tp": 1,
                "ep": 8,
                "dp": 8,
            },
            {
                "name": "decode",
                "role": "decode",
                "nodes": 6,
                "gpus_per_instance": 8,
                "tp": 1,
                "ep": 8,
                "dp": 8,
            },
        ]
    },
    "workload": {"trace": "trace.parquet", "replay": "closed_loop"},
    "outputs": {"timeseries_interval_s": 60.0},
}


def _timed_run(scenario_path: str, out_dir: str, model: str) -> tuple[float, dict, str]:
    """One timed `sim run` in this process: (wall seconds, the model's summary, the core used)."""
    scn = load_scenario(scenario_path)
    build_arith(model)  # model tables: a fixed start-up cost (memoised), not per request
    started = time.perf_counter()
    with arrow_without_pandas():  # as `sim run` runs it (sim.cli.run_cmd): pyarrow would import pandas
        result = run_scenario(scn, out_dir=out_dir, capacity=False)
    wall = time.perf_counter() - started
    return wall, result.summary["models"][model], native.describe()


def run_bench(
    requests: int, seed: int = 0, model: str = "deepseek-v4.1-flash", timing: str = "auto", repeat: int = 1
) -> dict:
    """Generate the trace (untimed), then time `sim run` of `requests` requests of one model
    with the `timing` model (`auto`: what `sim run` picks for the H200: calibrated where its
    tables exist), `repeat` times on the same trace, each run in a fresh process one after the
    other (a run in a process that already ran one starts from a fragmented heap and is slower).
    Shared machines are noisy: the median and the best of several runs say more than one."""
    walls = []
    with tempfile.TemporaryDirectory(prefix="sim-bench-") as tmp:
        folder = Path(tmp)
        agent_trace(folder / "trace.parquet", requests, seed)
        scenario = {**BENCH_SCENARIO, "models": [model], "seed": seed, "timing": {"model": timing}}
        scenario["workload"] = {**scenario["workload"], "max_requests": requests}
        (folder / "bench.yaml").write_text(yaml.safe_dump(scenario))
        load_scenario(folder / "bench.yaml")  # a bad scenario fails here, not in a worker
        spawn = multiprocessing.get_context("spawn")
        with ProcessPoolExecutor(max_workers=1, mp_context=spawn, max_tasks_per_child=1) as pool:
            for run in range(repeat):
                wall, summary, core = pool.submit(
                    _timed_run, str(folder / "bench.yaml"), str(folder / f"out{run}"), model
                ).result()
                walls.append(wall)
    rss = peak_rss_bytes(include_self=False)  # the largest run (this process only wrote the trace)
    done = summary["requests_arrived_incl_warmup"]
    wall = statistics.median(walls)
    return {
        "requests": done,
        "model": model,
        "timing_model": summary["pools"][0]["timing_model"],
        "runs": repeat,
        "wall_s": wall,
        "wall_s_runs": walls,
        "requests_per_s": done / wall if wall > 0 else None,
        "requests_per_s_best": done / min(walls) if min(walls) > 0 else None,
        "simulated_s": summary["window_s"],
        "peak_rss_bytes": rss,
        "python": sys.version.split()[0],
        "core": core,
    }


def bench(
    requests: Annotated[int, typer.Option("--requests", min=1, help="simulated requests")] = 100_000,
    seed: Annotated[int, typer.Option("--seed")] = 0,
    model: Annotated[str, typer.Option("--model")] = "deepseek-v4.1-flash",
    timing: Annotated[str, typer.Option("--timing", help="auto | roofline | calibrated")] = "auto",
    repeat: Annotated[int, typer.Option("--repeat", min=1, help="timed runs on the same trace")] = 1,
    as_json: Annotated[bool, typer.Option("--json", help="print JSON only")] = False,
) -> None:
    """Simulated requests per wall-second on a synthetic agent trace (trace generation not timed)."""
    out = run_bench(requests, seed, model, timing, repeat)
    if as_json:
        typer.echo(json.dumps(out, indent=2))
        return
    table = Table(title="sim bench")
    table.add_column("metric")
    table.add_column("value", justify="right")
    table.add_row("requests", f"{out['requests']:,}")
    table.add_row("model", out["model"])
    table.add_row("timing model", out["timing_model"])
    table.add_row("runs", f"{out['runs']}")
    table.add_row("wall (s), median", f"{out['wall_s']:.2f}")
    table.add_row("requests/s, median", f"{out['requests_per_s']:,.0f}")
    table.add_row("requests/s, best run", f"{out['requests_per_s_best']:,.0f}")
    table.add_row("simulated time (s)", f"{out['simulated_s']:,.0f}")
    table.add_row("peak memory (MB)", f"{out['peak_rss_bytes'] / 1e6:,.0f}")
    table.add_row("core", out["core"])
    Console().print(table)


def register(app: typer.Typer) -> None:
    """Add this module's commands to the top-level app."""
    app.command(name="bench")(bench)
