"""A tiny synthetic agent trace (canonical Parquet) for the real-simulator plan tests: sessions of
turns, each turn repeating the previous context and arriving a think time after the last ended."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pyarrow.parquet as pq

from sim.workload.rows import request_table


def write_agent_trace(path: Path, *, sessions: int, turns: int, gap_s: float, seed: int = 0) -> Path:
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
        )
    }
    rid = 0
    for s in range(sessions):
        context, previous = 0, -1
        for k in range(turns):
            input_tokens = 6000 if k == 0 else context + int(rng.integers(500, 3000))
            output_tokens = int(rng.integers(50, 400))
            for name, value in (
                ("session_id", s),
                ("session_start_s", s * gap_s),
                ("request_id", rid),
                ("request_index", k),
                ("arrival", "absolute" if k == 0 else "think"),
                ("arrival_time_s", s * gap_s + 10.0 * k),
                ("think_time_s", 0.0 if k == 0 else 3.0),
                ("depends_on_request_id", previous),
                ("input_tokens", input_tokens),
                ("output_tokens", output_tokens),
                ("prefix_parent_request_id", previous),
                ("prefix_tokens", context),
            ):
                cols[name].append(value)
            context, previous, rid = input_tokens + output_tokens, rid, rid + 1
    pq.write_table(request_table(rid, cols), path)
    return path
