"""Small canonical traces for the engine's CPU tests."""

from __future__ import annotations

from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq

from sim.workload.rows import request_table
from sim.workload.schema import ARRIVAL_ABSOLUTE, ARRIVAL_THINK


def session_trace(sessions: int, turns: int, *, first_in: int = 600, growth: int = 300, out: int = 8,
                  think_s: float = 0.5, stagger_s: float = 0.01, shared: int = 0) -> pa.Table:  # fmt: skip
    """`sessions` closed-loop sessions of `turns` pure-append turns (each repeats the previous input)."""
    cols: dict[str, list] = {k: [] for k in (
        "session_id", "session_start_s", "request_id", "request_index", "arrival", "arrival_time_s",
        "think_time_s", "depends_on_request_id", "input_tokens", "output_tokens",
        "prefix_parent_request_id", "prefix_tokens", "shared_prefix_id", "shared_prefix_tokens")}  # fmt: skip
    rid = 0
    for s in range(sessions):
        start = s * stagger_s
        for t in range(turns):
            inp = first_in + t * growth
            cols["session_id"].append(s)
            cols["session_start_s"].append(start)
            cols["request_id"].append(rid)
            cols["request_index"].append(t)
            cols["arrival"].append(ARRIVAL_ABSOLUTE if t == 0 else ARRIVAL_THINK)
            cols["arrival_time_s"].append(start + t)
            cols["think_time_s"].append(0.0 if t == 0 else think_s)
            cols["depends_on_request_id"].append(-1 if t == 0 else rid - 1)
            cols["input_tokens"].append(inp)
            cols["output_tokens"].append(out)
            cols["prefix_parent_request_id"].append(-1 if t == 0 else rid - 1)
            cols["prefix_tokens"].append(0 if t == 0 else first_in + (t - 1) * growth)
            cols["shared_prefix_id"].append(7 if shared else -1)
            cols["shared_prefix_tokens"].append(shared)
            rid += 1
    return request_table(rid, cols)


def writer(folder: Path):
    """write(table, name) -> the Parquet file's path under `folder`."""

    def write(table: pa.Table, name: str = "trace.parquet") -> Path:
        path = folder / name
        pq.write_table(table, path)
        return path

    return write
