"""Memory stays flat in simulated time for a stationary workload (docs/memory.md): the peak RSS of
three simulated days of a stationary generator is that of one day, within noise, although three
times the requests went through. Each run is a fresh process (its peak RSS is its own)."""

from __future__ import annotations

import subprocess
import sys

import pytest

from sim.workload.generator import generate_trace
from sim.workload.io import TraceWriter, read_trace_table
from sim.workload.spec import parse_spec

from .helpers import scenario

# Short agent sessions at a constant rate: ~20K requests a simulated day, a cluster that keeps up,
# cache TTLs of an hour, so that what the caches hold saturates early in the first day.
SPEC = {
    "name": "stationary",
    "days": 1,
    "seed": 5,
    "max_context_tokens": 60_000,
    "max_output_tokens": 2_000,
    "arrivals": {"sessions_per_hour": 120, "envelope": {"kind": "diurnal", "amplitude": 0.0}},
    "sessions": {
        "kind": "parametric",
        "requests_per_session": {"lognormal": {"median": 6, "sigma": 0.5}, "min": 1, "max": 30},
        "turn_end_probability": {"constant": 0.2},
        "main": {
            "initial_context_tokens": {"lognormal": {"median": 2000, "sigma": 0.5}},
            "tool_result_tokens": {"lognormal": {"median": 300, "sigma": 0.5}},
            "output_tokens": {"lognormal": {"median": 100, "sigma": 0.5}},
            "think_after_tool_s": {"lognormal": {"median": 5, "sigma": 0.5}},
        },
        "user_message_tokens": {"constant": 50},
        "think_after_end_turn_s": {"lognormal": {"median": 30, "sigma": 0.5}},
    },
}  # fmt: skip
CACHE = {"tiers": {"hbm": {"ttl_s": 60}, "dram": {"ttl_s": 600}, "ssd": {"ttl_s": 3600}}}
# Row groups of 4,096 rows (trace and request log) instead of 131,072 and 65,536: the buffers that
# hold one row group then fill and empty many times in both runs, as in any run of a few hundred
# thousand requests, and what is left to compare is what the simulation holds.
ROWS = 4096
RUN = f"""
import sys
import sim.metrics.recorder
sim.metrics.recorder.ROWS_PER_GROUP = {ROWS}
from sim.api import run_scenario
from sim.config.scenario import load_scenario
summary = run_scenario(load_scenario(sys.argv[1])).summary["models"]["deepseek-v4-flash"]
# VmHWM: this process's own peak (ru_maxrss would start from the parent's size at the fork)
peak_kib = next(int(line.split()[1]) for line in open("/proc/self/status") if line.startswith("VmHWM"))
print(summary["requests_arrived_incl_warmup"], peak_kib)
"""


def _peak(tmp_path, days: int) -> tuple[int, float]:
    """(requests, peak RSS in MB) of `days` simulated days, run in a fresh process."""
    generated = tmp_path / f"generated{days}.parquet"
    generate_trace(parse_spec({**SPEC, "days": days}), generated, seed=5, days=days)
    table = read_trace_table(generated)
    trace = tmp_path / f"days{days}.parquet"
    with TraceWriter(trace, row_group_rows=ROWS) as writer:  # read a row group at a time, as any long trace
        for start in range(0, table.num_rows, ROWS):
            writer.write(table.slice(start, ROWS))
    scn = scenario(tmp_path, trace, models=["deepseek-v4-flash"], cache=CACHE,
                   workload={"replay": "closed_loop"}, outputs={"timeseries_interval_s": 600})  # fmt: skip
    out = subprocess.run(
        [sys.executable, "-c", RUN, scn.source_file], capture_output=True, text=True, check=True
    )
    requests, peak_kib = out.stdout.split()
    return int(requests), int(peak_kib) / 1024


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads the peak from /proc (Linux)")
def test_three_simulated_days_peak_at_the_memory_of_one(tmp_path):
    one_requests, one_mb = _peak(tmp_path, 1)
    three_requests, three_mb = _peak(tmp_path, 3)
    assert three_requests > 2.5 * one_requests
    # a leak of ~1 KB per request would add ~40 MB here; allocator and page noise stay well below
    assert three_mb <= one_mb * 1.05 + 15, (one_mb, three_mb)
