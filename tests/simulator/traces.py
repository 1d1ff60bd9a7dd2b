"""Tiny canonical traces for the simulator's tests, built with pyarrow (sim.workload.rows)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pyarrow.parquet as pq

from sim.workload.rows import request_table


def agent_trace(
    path: Path,
    *,
    sessions: int = 20,
    turns: int = 5,
    seed: int = 0,
    gap_s: float = 2.0,
    first_input: int = 6000,
    tool_tokens: tuple[int, int] = (500, 3000),
    output_tokens: tuple[int, int] = (50, 400),
    think_s: float = 3.0,
    shared_prefix_tokens: int = 4000,
) -> Path:
    """Agent sessions: each turn repeats the whole previous context (prefix = previous input +
    output), adds a tool result, and arrives `think_s` after the previous turn ends."""
    rng = np.random.default_rng(seed)
    cols: dict[str, list] = {
        k: []
        for k in (
            "session_id",
            "session_start_s",
            "request_id",
            "request_index",
            "arrival",
            "arrival_time_s",
            "think_time_s",
            "depends_on_request_id",
            "input_tokens",
            "output_tokens",
            "prefix_parent_request_id",
            "prefix_tokens",
            "shared_prefix_id",
            "shared_prefix_tokens",
        )
    }
    rid = 0
    for s in range(sessions):
        start = s * gap_s
        ctx = 0
        prev = -1
        t = start
        for k in range(turns):
            inp = first_input if k == 0 else ctx + int(rng.integers(*tool_tokens))
            out = int(rng.integers(*output_tokens))
            cols["session_id"].append(s)
            cols["session_start_s"].append(start)
            cols["request_id"].append(rid)
            cols["request_index"].append(k)
            cols["arrival"].append("absolute" if k == 0 else "think")
            cols["arrival_time_s"].append(t)
            cols["think_time_s"].append(0.0 if k == 0 else think_s)
            cols["depends_on_request_id"].append(prev)
            cols["input_tokens"].append(inp)
            cols["output_tokens"].append(out)
            cols["prefix_parent_request_id"].append(prev)
            cols["prefix_tokens"].append(ctx)
            shared = min(shared_prefix_tokens, first_input)
            cols["shared_prefix_id"].append(0 if shared else -1)
            cols["shared_prefix_tokens"].append(shared)
            ctx = inp + out
            prev = rid
            rid += 1
            t += 10.0
    table = request_table(len(cols["request_id"]), cols)
    pq.write_table(table, path)
    return path


def fixed_trace(path: Path, arrivals_s: list[float], input_tokens: int, output_tokens: int) -> Path:
    """One single-request session per arrival time, no shared prefix (queueing tests)."""
    n = len(arrivals_s)
    cols = {
        "session_id": np.arange(n),
        "session_start_s": np.asarray(arrivals_s, dtype=np.float64),
        "request_id": np.arange(n),
        "request_index": 0,
        "arrival": "absolute",
        "arrival_time_s": np.asarray(arrivals_s, dtype=np.float64),
        "input_tokens": input_tokens,
        "output_tokens": output_tokens,
    }
    pq.write_table(request_table(n, cols), path)
    return path
