"""Azure LLM inference trace 2023 (CSV: `TIMESTAMP` wall clock with 100 ns digits, `ContextTokens`,
`GeneratedTokens`). Fields and caveats: ../shared/traces/public/README.md §2.

No sessions and no prefixes in the source: every request becomes a one-request session arriving at
its recorded time (open loop), in seconds from the first row (the wall-clock date is dropped).
"""

from __future__ import annotations

import csv
import io
from collections.abc import Callable, Iterator
from pathlib import Path

import numpy as np
import pyarrow as pa

from ..io import iter_lines
from ..rows import request_table
from ..schema import ARRIVAL_ABSOLUTE
from .common import Where

SOURCE = "azure"
COLUMNS = ("TIMESTAMP", "ContextTokens", "GeneratedTokens")
ROWS_PER_BATCH = 65_536


def read(src: str | Path, progress: Callable[[int, int], None] | None = None) -> Iterator[pa.Table]:
    """Canonical request tables, one request per session, in time order."""
    lines = iter_lines(src, progress)
    header_line, header = _header(src, lines)
    stamps, inputs, outputs, linenos = [], [], [], []
    for lineno, raw in lines:
        if not raw.strip():
            continue
        w = Where(str(src), lineno)
        try:
            fields = next(csv.reader(io.StringIO(raw.decode())))
        except (UnicodeDecodeError, csv.Error) as err:
            raise w.error(f"not a CSV row ({err})") from None
        if len(fields) != len(header):
            raise w.error("wrong number of fields", len(fields), f"{len(header)} ({', '.join(header)})")
        row = dict(zip(header, fields, strict=True))
        stamps.append(row["TIMESTAMP"])
        inputs.append(_count(row["ContextTokens"], w.at("ContextTokens")))
        outputs.append(_count(row["GeneratedTokens"], w.at("GeneratedTokens")))
        linenos.append(lineno)
    if not stamps:
        raise Where(str(src), header_line + 1).error("no requests after the header")
    times_s = _seconds(stamps, linenos, str(src))
    n = len(times_s)
    for lo in range(0, n, ROWS_PER_BATCH):
        hi = min(n, lo + ROWS_PER_BATCH)
        yield request_table(
            hi - lo,
            {
                "session_id": np.arange(lo, hi),
                "session_start_s": times_s[lo:hi],
                "source": SOURCE,
                "request_id": np.arange(lo, hi),
                "request_index": 0,
                "arrival": ARRIVAL_ABSOLUTE,
                "arrival_time_s": times_s[lo:hi],
                "input_tokens": np.asarray(inputs[lo:hi]),
                "output_tokens": np.asarray(outputs[lo:hi]),
            },
        )


def _header(src: str | Path, lines: Iterator[tuple[int, bytes]]) -> tuple[int, list[str]]:
    for lineno, raw in lines:
        if raw.strip():
            header = [h.strip().lstrip("\ufeff") for h in raw.decode(errors="replace").split(",")]
            if sorted(header) != sorted(COLUMNS):
                raise Where(str(src), lineno).error("wrong columns", ",".join(header), ",".join(COLUMNS))
            return lineno, header
    raise Where(str(src), 1).error("empty file: no header", allowed=",".join(COLUMNS))


def _count(text: str, w: Where) -> int:
    try:
        value = int(text.strip())
    except ValueError:
        raise w.error("not an integer", text, "a non-negative integer") from None
    if value < 0:
        raise w.error("negative count", value, ">= 0")
    return value


def _seconds(stamps: list[str], linenos: list[int], file: str) -> np.ndarray:
    """Seconds from the first row; wall clock parsed at ns resolution; time must not go backwards."""
    try:
        ns = np.array(stamps, dtype="datetime64[ns]").astype(np.int64)
    except ValueError:
        for text, lineno in zip(stamps, linenos, strict=True):
            try:
                np.datetime64(text, "ns")
            except ValueError:
                raise Where(file, lineno, "TIMESTAMP").error(
                    "not a date-time", text, "YYYY-MM-DD HH:MM:SS.fffffff"
                ) from None
        raise
    back = np.flatnonzero(np.diff(ns) < 0)
    if len(back):
        i = int(back[0]) + 1
        raise Where(file, linenos[i], "TIMESTAMP").error(
            "time going backwards", stamps[i], f">= {stamps[i - 1]} (the previous row)"
        )
    return (ns - ns[0]) / 1e9
