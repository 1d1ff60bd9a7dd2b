"""A trace written in parts: one folder, a part per simulated day of session starts and at most
`part_sessions` sessions, so a fleet-scale trace is never one file that a reader must take whole.

Parts are named `day_DDD_part_KKKK.parquet`: their name order is the trace's order (sessions by
start), each holds whole sessions and is a valid trace of its own (its `TraceWriter` checks it), and
`sim.workload.io` reads the folder as one trace. The folder is written beside its target under a
temporary name and renamed onto it when every part is written (a target folder that exists is
refused), so a failed generation leaves nothing behind.
"""

from __future__ import annotations

import os
import shutil
from collections.abc import Mapping
from pathlib import Path

import numpy as np
import pyarrow as pa

from sim.errors import InputError
from sim.units import DAY_S

from .io import ClosedOrAborted, TraceWriter, trace_info

DEFAULT_PART_SESSIONS = 100_000  # ~6M requests of agent_2w's sessions: ~0.2 GB a part


class TracePartsWriter(ClosedOrAborted):
    """`TraceWriter`'s interface (write, close, abort, summary; a context manager) over parts."""

    def __init__(self, folder: str | os.PathLike, *, metadata: Mapping[str, str] | None = None,
                 part_sessions: int = DEFAULT_PART_SESSIONS) -> None:  # fmt: skip
        self.path = Path(folder)
        if self.path.exists():
            raise InputError("exists already", where=str(self.path), allowed="a new folder for the parts")
        if not self.path.parent.is_dir():
            raise InputError("output folder does not exist", file=str(self.path.parent))
        if part_sessions < 1:
            raise InputError("must be >= 1", where="part sessions", value=part_sessions)
        self._tmp = self.path.with_name(f".{self.path.name}.tmp-{os.getpid()}")
        self._tmp.mkdir()
        self._metadata = dict(metadata or {})
        self._part_sessions = part_sessions
        self._writer: TraceWriter | None = None
        self._day = -1
        self._part = 0
        self._sessions = 0  # in the open part
        self._last_session: int | None = None
        self.summary: dict | None = None

    def write(self, table: pa.Table) -> None:
        if table.num_rows == 0:
            return
        sid = table.column("session_id").to_numpy()
        start = table.column("session_start_s").to_numpy()
        new = np.concatenate([[self._last_session != sid[0]], sid[1:] != sid[:-1]])
        day = (start // DAY_S).astype(np.int64)
        lo = 0
        for row in np.flatnonzero(new):  # a part ends only where a session begins
            if self._opens_part(int(day[row])):
                if row > lo:
                    self._writer.write(table.slice(lo, row - lo))
                self._roll(int(day[row]))
                lo = row
            self._sessions += 1
        self._writer.write(table.slice(lo))
        self._last_session = int(sid[-1])

    def _opens_part(self, day: int) -> bool:
        return self._writer is None or day != self._day or self._sessions >= self._part_sessions

    def _roll(self, day: int) -> None:
        if self._writer is not None:
            self._writer.close()
        self._part = self._part + 1 if day == self._day else 0
        self._day = day
        self._sessions = 0
        name = f"day_{day:03d}_part_{self._part:04d}.parquet"
        self._writer = TraceWriter(self._tmp / name, metadata={**self._metadata, "sim.part": name})

    def close(self) -> dict:
        if self._writer is not None:
            self._writer.close()
        os.replace(self._tmp, self.path)
        self.summary = trace_info(self.path)
        self.summary.pop("metadata")
        return self.summary

    def abort(self) -> None:
        if self._writer is not None:
            self._writer.abort()
        shutil.rmtree(self._tmp, ignore_errors=True)
