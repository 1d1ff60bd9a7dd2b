"""The invariants of a canonical trace, checked batch by batch in bounded memory.

A file is valid when, in row order:
- rows are sorted by (session_start_s, session_id, request_index) and each session's rows are
  together; every row of a session repeats its session start;
- `request_index` counts 0, 1, 2, ... within a session and `request_id` strictly increases in the file;
- `arrival_time_s` is finite, never before the session start and never decreases within a session;
- `arrival` is "absolute" (then `depends_on_request_id` = -1) or "think" (then it names an earlier
  request of the same session); `think_time_s` is finite and >= 0;
- token counts are >= 0; `prefix_tokens`, `shared_prefix_tokens` and `image_tokens` are <= `input_tokens`;
  `prefix_tokens` > 0 needs a `prefix_parent_request_id` naming an earlier request of the same session,
  and is <= that parent's input + output tokens;
- `block_hashes`, when present, has a positive `block_size_tokens` and at most ceil(input/block) entries;
- `reasoning_effort` is in 0..100.

Rows are numbered from 0 in error messages.
"""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from sim.errors import InputError

from .schema import ARRIVAL_ABSOLUTE, ARRIVAL_THINK, REQUEST_SCHEMA

_NON_NEGATIVE = (
    "input_tokens",
    "output_tokens",
    "prefix_tokens",
    "shared_prefix_tokens",
    "image_count",
    "image_tokens",
)
_WITHIN_INPUT = ("prefix_tokens", "shared_prefix_tokens", "image_tokens")


class TraceValidator:
    """Checks consecutive batches of one file; keeps only the state of the session in progress."""

    def __init__(self, file: str) -> None:
        self.file = file
        self.rows_seen = 0
        self._last: dict[str, float] | None = None  # last row of the previous batch
        # rows of the session still open at the end of the previous batch (for parent look-ups)
        self._carry_ids = np.zeros(0, dtype=np.int64)
        self._carry_total = np.zeros(0, dtype=np.int64)
        self._carry_session = np.zeros(0, dtype=np.int64)
        self._seen_sessions = np.zeros(0, dtype=np.int64)  # ids of finished sessions (contiguity)

    def fail(self, row: int, column: str, message: str, value: object = None, allowed: str | None = None):
        raise InputError(
            message,
            file=self.file,
            where=f"row {self.rows_seen + row}, column {column}",
            value=value,
            allowed=allowed,
        )

    def check(self, table: pa.Table) -> None:
        """Check one batch (already in REQUEST_SCHEMA types); raises InputError at the first bad row."""
        n = table.num_rows
        if n == 0:
            return
        for field in REQUEST_SCHEMA:
            if not field.nullable and table.column(field.name).null_count:
                row = int(
                    np.flatnonzero(table.column(field.name).is_null().to_numpy(zero_copy_only=False))[0]
                )
                self.fail(row, field.name, "missing value")
        col = {name: table.column(name).to_numpy() for name in _NUMERIC}
        self._check_values(table, col)
        self._check_order(col)
        self._check_links(col)
        self._check_blocks(table, col)
        self.rows_seen += n

    def _first(self, bad: np.ndarray, column: str, message: str, values: np.ndarray, allowed: str) -> None:
        if bad.any():
            row = int(np.flatnonzero(bad)[0])
            value = values[row]
            self.fail(row, column, message, value.item() if hasattr(value, "item") else value, allowed)

    def _check_values(self, table: pa.Table, col: dict[str, np.ndarray]) -> None:
        for name in ("session_start_s", "arrival_time_s", "think_time_s"):
            self._first(~np.isfinite(col[name]), name, "not a finite number", col[name], "finite seconds")
        self._first(
            col["think_time_s"] < 0, "think_time_s", "negative think time", col["think_time_s"], ">= 0"
        )
        for name in _NON_NEGATIVE:
            self._first(col[name] < 0, name, "negative count", col[name], ">= 0")
        for name in _WITHIN_INPUT:
            self._first(
                col[name] > col["input_tokens"], name, "exceeds input_tokens", col[name], "<= input_tokens"
            )
        effort = col["reasoning_effort"]
        self._first(
            (effort < 0) | (effort > 100), "reasoning_effort", "out of range", effort, "0..100 (0 = unknown)"
        )
        arrival = table.column("arrival")
        is_think = pc.equal(arrival, ARRIVAL_THINK).to_numpy(zero_copy_only=False)
        is_abs = pc.equal(arrival, ARRIVAL_ABSOLUTE).to_numpy(zero_copy_only=False)
        unknown = ~(is_think | is_abs)
        if unknown.any():  # the strings as numpy objects only then: costly
            self._first(unknown, "arrival", "unknown arrival rule", arrival.to_numpy(zero_copy_only=False),
                        f"{ARRIVAL_ABSOLUTE}, {ARRIVAL_THINK}")  # fmt: skip
        dep = col["depends_on_request_id"]
        self._first(is_abs & (dep != -1), "depends_on_request_id", "set on an absolute arrival", dep, "-1")
        self._first(
            is_think & (dep < 0),
            "depends_on_request_id",
            "missing on a think arrival",
            dep,
            "an earlier request_id",
        )

    def _check_order(self, col: dict[str, np.ndarray]) -> None:
        sid, start, idx, rid, t = (
            col[k] for k in ("session_id", "session_start_s", "request_index", "request_id", "arrival_time_s")
        )
        last = self._last
        prev_sid = np.concatenate([[last["session_id"] if last else -(2**62)], sid[:-1]])
        prev_start = np.concatenate([[last["session_start_s"] if last else -np.inf], start[:-1]])
        prev_idx = np.concatenate([[last["request_index"] if last else -1], idx[:-1]])
        prev_rid = np.concatenate([[last["request_id"] if last else -(2**62)], rid[:-1]])
        prev_t = np.concatenate([[last["arrival_time_s"] if last else -np.inf], t[:-1]])
        same = sid == prev_sid
        new = ~same
        self._first(new & (start == prev_start) & (sid < prev_sid), "session_id", "sessions out of order", sid,
                    "rows sorted by (session_start_s, session_id, request_index)")  # fmt: skip
        starts = sid[new]
        seen_before = np.isin(starts, self._seen_sessions)
        repeated = np.zeros(len(sid), dtype=bool)
        repeated[np.flatnonzero(new)] = seen_before | _duplicates(starts)
        self._first(
            repeated, "session_id", "session rows not together", sid, "each session's rows contiguous"
        )
        # both sorted and disjoint now (checked above): a stable sort merges them in linear time, where
        # a union would hash every session seen so far at each batch
        self._seen_sessions = np.sort(np.concatenate([self._seen_sessions, np.sort(starts)]), kind="stable")
        self._first(
            same & (start != prev_start),
            "session_start_s",
            "differs within a session",
            start,
            "one value per session",
        )
        self._first(start < prev_start, "session_start_s", "time going backwards (sessions must be in start order)",
                    start, "not before the previous session's start")  # fmt: skip
        self._first(np.where(same, idx != prev_idx + 1, idx != 0), "request_index", "not consecutive within the session",
                    idx, "0, 1, 2, ... within each session")  # fmt: skip
        self._first(rid <= prev_rid, "request_id", "not increasing", rid, "strictly increasing in file order")
        self._first(t < start, "arrival_time_s", "before the session start", t, ">= session_start_s")
        self._first(same & (t < prev_t), "arrival_time_s", "time going backwards within the session", t,
                    "non-decreasing in request_index order")  # fmt: skip
        self._last = {
            k: col[k][-1]
            for k in ("session_id", "session_start_s", "request_index", "request_id", "arrival_time_s")
        }

    def _check_links(self, col: dict[str, np.ndarray]) -> None:
        sid, rid = col["session_id"], col["request_id"]
        total = col["input_tokens"].astype(np.int64) + col["output_tokens"]
        ids = np.concatenate([self._carry_ids, rid])
        totals = np.concatenate([self._carry_total, total])
        sessions = np.concatenate([self._carry_session, sid])
        for name in ("depends_on_request_id", "prefix_parent_request_id"):
            ref = col[name]
            linked = ref >= 0
            pos = np.clip(np.searchsorted(ids, ref), 0, len(ids) - 1)
            found = linked & (ids[pos] == ref) & (sessions[pos] == sid) & (ref < rid)
            self._first(linked & ~found, name, "does not name an earlier request of the same session", ref,
                        "-1 or the request_id of an earlier row of this session")  # fmt: skip
            if name == "prefix_parent_request_id":
                self._first(~linked & (col["prefix_tokens"] > 0), "prefix_parent_request_id",
                            "missing while prefix_tokens > 0", ref, "an earlier request_id")  # fmt: skip
                over = linked & (col["prefix_tokens"] > totals[pos])
                self._first(over, "prefix_tokens", "exceeds the parent's input + output tokens", col["prefix_tokens"],
                            "<= parent input_tokens + output_tokens")  # fmt: skip
        keep = sessions == sid[-1]
        self._carry_ids, self._carry_total, self._carry_session = ids[keep], totals[keep], sessions[keep]

    def _check_blocks(self, table: pa.Table, col: dict[str, np.ndarray]) -> None:
        hashes = table.column("block_hashes")
        if hashes.null_count == len(hashes):
            return
        present = hashes.is_valid().to_numpy(zero_copy_only=False)
        size = col["block_size_tokens"]
        self._first(
            present & (size <= 0), "block_size_tokens", "not positive while block_hashes is set", size, "> 0"
        )
        lengths = pc.fill_null(pc.list_value_length(hashes), 0).to_numpy(zero_copy_only=False)
        limit = -(-col["input_tokens"].astype(np.int64) // np.maximum(size, 1))
        self._first(present & (lengths > limit), "block_hashes", "more blocks than the input holds", lengths,
                    "<= ceil(input_tokens / block_size_tokens)")  # fmt: skip


def _duplicates(values: np.ndarray) -> np.ndarray:
    """True at each value that already occurred earlier in the array."""
    _, first = np.unique(values, return_index=True)
    dup = np.ones(len(values), dtype=bool)
    dup[first] = False
    return dup


_NUMERIC = tuple(
    f.name for f in REQUEST_SCHEMA if pa.types.is_integer(f.type) or pa.types.is_floating(f.type)
)
