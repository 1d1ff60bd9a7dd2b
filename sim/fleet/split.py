"""A fleet trace split into one trace per cell, streamed: never the whole trace in memory.

The source is one canonical trace file or a folder of parts (`sim trace gen --parts`: files named so
that their sorted order is the trace's order, each holding whole sessions). Whole sessions are read
in batches, the router (sim.fleet.route) gives each session a cell, and each cell's rows go to that
cell's `TraceWriter`, which checks the trace invariants as it writes (so every cell trace is a valid
trace of its own, and a bad source fails here, naming the file). Rows keep their order, so each cell
trace is in session-start order as the format requires. Memory: one batch plus each writer's pending
row group (CELL_ROW_GROUP_ROWS rows per cell).
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pyarrow as pa

from sim.config.cluster import Cells
from sim.fleet.route import CellRouter
from sim.workload.io import TraceWriter, iter_session_batches, trace_info

CELL_ROW_GROUP_ROWS = 16_384  # x cells pending at once: 1M rows for 64 cells
BATCH_ROWS = 262_144


@dataclass(frozen=True)
class CellTraces:
    paths: list[Path]  # cell k's trace
    requests: list[int]  # rows per cell
    sessions: list[int]


def parts_digest(parts: list[Path]) -> bytes:
    """sha256 over the parts' names and bytes: what a fleet run's id hashes of its trace."""
    h = hashlib.sha256()
    for part in parts:
        h.update(part.name.encode())
        with open(part, "rb") as f:
            h.update(hashlib.file_digest(f, "sha256").digest())
    return h.digest()


def total_rows(parts: list[Path]) -> int:
    return sum(int(trace_info(p)["rows"]) for p in parts)


def split_trace(
    parts: list[Path], cells: Cells, out_dir: Path, progress: Callable[[int, int], None] | None = None
) -> CellTraces:
    """Write cell k's sessions of `parts` to `out_dir/cell_{k:04d}.parquet` (module doc);
    `progress(rows_done, rows_total)` after each batch."""
    out_dir.mkdir(parents=True, exist_ok=True)
    router = CellRouter(cells)
    paths = [out_dir / f"cell_{k:04d}.parquet" for k in range(cells.count)]
    writers = [TraceWriter(p, metadata={"sim.fleet.cell": str(k)}, row_group_rows=CELL_ROW_GROUP_ROWS)
               for k, p in enumerate(paths)]  # fmt: skip
    expected, done = total_rows(parts), 0
    try:
        for part in parts:
            for table in iter_session_batches(part, BATCH_ROWS, trusted=True):
                _route(router, table, writers)
                done += table.num_rows
                if progress is not None:
                    progress(done, expected)
        summaries = [w.close() for w in writers]
    except BaseException:
        for w in writers:
            w.abort()
        raise
    return CellTraces(
        paths=paths,
        requests=[int(s["requests"]) for s in summaries],
        sessions=[int(s["sessions"]) for s in summaries],
    )


def _route(router: CellRouter, table: pa.Table, writers: list[TraceWriter]) -> None:
    sid = table.column("session_id").to_numpy()
    new = np.concatenate([[True], sid[1:] != sid[:-1]])
    first = np.flatnonzero(new)
    row_session = np.cumsum(new) - 1
    tenant = table.column("tenant").take(pa.array(first)).to_pylist()
    start = table.column("session_start_s").to_numpy()[first]
    arrival = table.column("arrival_time_s").to_numpy()
    cell = router.assign(sid[first], start, tenant, row_session, arrival)[row_session]
    order = np.argsort(cell, kind="stable")  # rows keep their order within a cell
    counts = np.bincount(cell, minlength=len(writers))
    grouped = table.take(pa.array(order))
    lo = 0
    for k, n in enumerate(counts):
        if n:
            writers[k].write(grouped.slice(lo, int(n)))
        lo += int(n)
