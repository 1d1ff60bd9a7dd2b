"""Reading and writing canonical trace files, validated, streaming, and never half-written.

Writers put their output in a temporary file beside the target and rename it only when everything
succeeded, so a failed import or generation leaves no output behind. Readers check the columns and
types against `schema.REQUEST_SCHEMA` and every batch against the invariants in `validate.py`, and
raise `InputError` naming the file, the row and the column.

Public API (what the simulator uses):
- `iter_sessions(path, batch_rows=65536, columns=None)`: sessions in start order, each with all its
  rows, reading row groups in bounded memory (one batch plus the largest session).
- `read_trace_table(path, columns=None)`: the whole validated table (small files, analysis).
- `trace_info(path)`: counts and time span from the file's metadata, without reading the rows.

A trace may also be a folder of parts (`sim trace gen --parts`, sim.workload.parts): files whose name
order is the trace's order, each holding whole sessions; `trace_parts`, `iter_session_batches` and
`trace_info` read such a folder as one trace.
"""

from __future__ import annotations

import bz2
import contextlib
import gzip
import importlib.abc
import json
import lzma
import os
import sys
import zlib
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from sim.errors import InputError

from .schema import ENVELOPE_FORMAT_VERSION, FORMAT_VERSION, OPTIONAL_COLUMNS, REQUEST_SCHEMA
from .validate import TraceValidator

SUMMARY_KEY = "sim.summary"
DEFAULT_ROW_GROUP_ROWS = 131_072
# Block-hash lists can hold thousands of ids per row; a row group also ends at this many ids.
ROW_GROUP_LIST_VALUES = 8_000_000

# Fixed writer options: together with fixed row-group boundaries they make equal tables give equal
# bytes (the only version-dependent byte is pyarrow's `created_by` string).
PARQUET_OPTIONS = dict(
    version="2.6",
    compression="zstd",
    compression_level=3,
    # block-hash lists compress 3x better and write 2x faster without a dictionary
    use_dictionary=[f.name for f in REQUEST_SCHEMA if f.name != "block_hashes"],
    write_statistics=True,
    data_page_version="1.0",
    write_page_index=False,
    store_schema=True,
)

_MAGIC = ((b"\x1f\x8b", gzip.open), (b"\xfd7zXZ\x00", lzma.open), (b"BZh", bz2.open))
_DECOMPRESSION_ERRORS = (EOFError, OSError, lzma.LZMAError, zlib.error, gzip.BadGzipFile)


# ---------------------------------------------------------------------------------------------- input


def require_file(path: str | os.PathLike) -> Path:
    path = Path(path)
    if not path.exists():
        raise InputError("file not found", file=str(path))
    if not path.is_file():
        raise InputError("not a regular file", file=str(path))
    return path


def iter_lines(
    path: str | os.PathLike, progress: Callable[[int, int], None] | None = None
) -> Iterator[tuple[int, bytes]]:
    """(1-based line number, line without its newline); corrupt or truncated compressed data
    becomes an InputError naming the line where reading stopped. `progress(done, total)` gets
    bytes of the (compressed) file read so far."""
    path = require_file(path)
    total = path.stat().st_size
    raw = open(path, "rb")
    try:
        head = raw.read(6)
        raw.seek(0)
        stream: IO[bytes] = raw
        for magic, opener in _MAGIC:
            if head.startswith(magic):
                stream = opener(raw, "rb")
        lineno = 0
        while True:
            try:
                line = stream.readline()
            except _DECOMPRESSION_ERRORS as err:
                raise InputError(f"corrupt or truncated compressed data ({err})", file=str(path),
                                 where=f"line {lineno + 1}") from None  # fmt: skip
            if not line:
                return
            lineno += 1
            if progress is not None and lineno % 64 == 0:
                progress(raw.tell(), total)
            yield lineno, line.rstrip(b"\r\n")
    finally:
        raw.close()


# --------------------------------------------------------------------------------------------- output


@contextlib.contextmanager
def atomic_output(path: str | os.PathLike) -> Iterator[Path]:
    """Yield a temporary path beside `path`; rename it onto `path` only if the block succeeds."""
    path = Path(path)
    if not path.parent.exists():
        raise InputError("output folder does not exist", file=str(path.parent))
    tmp = path.with_name(f".{path.name}.tmp-{os.getpid()}")
    try:
        yield tmp
        os.replace(tmp, path)
    finally:
        with contextlib.suppress(FileNotFoundError):
            tmp.unlink()


@dataclass
class _NoPandas(importlib.abc.MetaPathFinder):
    def find_spec(self, fullname, path=None, target=None):
        if fullname == "pandas" or fullname.startswith("pandas."):
            raise ModuleNotFoundError(
                f"{fullname}: kept out (sim.workload.io.arrow_without_pandas)", name=fullname
            )
        return None


@contextlib.contextmanager
def arrow_without_pandas() -> Iterator[None]:
    """Keep pyarrow from importing pandas within the block. pyarrow imports it at its first
    conversion of any kind (to numpy, or from Python values or numpy: it checks for pandas objects),
    ~0.45 s per process; a process that only reads traces and writes run outputs never needs it, and
    pyarrow converts the same without it (as where pandas is not installed). For processes that end
    with the block: pyarrow remembers pandas as missing in its checks (an explicit `to_pandas` still
    imports it)."""
    if "pandas" in sys.modules:
        yield
        return
    finder = _NoPandas()
    sys.meta_path.insert(0, finder)
    try:
        yield
    finally:
        sys.meta_path.remove(finder)


class _Summary:
    sessions: int = 0
    requests: int = 0
    top_level_requests: int = 0
    first_arrival_s: float = float("inf")
    last_arrival_s: float = float("-inf")
    input_tokens: int = 0
    output_tokens: int = 0
    _last_session: int | None = None

    def add(self, table: pa.Table) -> None:
        sid = table.column("session_id").to_numpy()
        arrival = table.column("arrival_time_s").to_numpy()
        new = np.concatenate([[self._last_session != sid[0]], sid[1:] != sid[:-1]])
        self.sessions += int(new.sum())
        self._last_session = int(sid[-1])
        self.requests += table.num_rows
        self.top_level_requests += int((table.column("agent_id").to_numpy() == 0).sum())
        self.first_arrival_s = min(self.first_arrival_s, float(arrival.min()))
        self.last_arrival_s = max(self.last_arrival_s, float(arrival.max()))
        self.input_tokens += int(pc.sum(table.column("input_tokens").cast(pa.int64())).as_py())
        self.output_tokens += int(pc.sum(table.column("output_tokens").cast(pa.int64())).as_py())

    def as_dict(self) -> dict[str, float | int]:
        empty = self.requests == 0
        return {
            "sessions": self.sessions,
            "requests": self.requests,
            "top_level_requests": self.top_level_requests,
            "first_arrival_s": 0.0 if empty else self.first_arrival_s,
            "last_arrival_s": 0.0 if empty else self.last_arrival_s,
            "input_tokens": self.input_tokens,
            "output_tokens": self.output_tokens,
        }


class ClosedOrAborted:
    """A writer as a context manager: `close()` when the block succeeds, `abort()` when it raises."""

    def close(self) -> object:
        raise NotImplementedError

    def abort(self) -> None:
        raise NotImplementedError

    def __enter__(self):
        return self

    def __exit__(self, exc_type, exc, tb) -> None:
        if exc_type is None:
            self.close()
        else:
            self.abort()


class TraceWriter(ClosedOrAborted):
    """Streams validated request batches into one Parquet file, atomically.

    Use as a context manager: on an exception the temporary file is removed and `path` untouched.
    Batches must arrive in file order (see validate.py); a row group is written once the pending
    batches reach `row_group_rows` rows or ROW_GROUP_LIST_VALUES block ids, so the same batches
    give the same bytes.
    """

    def __init__(self, path: str | os.PathLike, *, metadata: Mapping[str, str] | None = None,
                 row_group_rows: int = DEFAULT_ROW_GROUP_ROWS) -> None:  # fmt: skip
        self.path = Path(path)
        self._output = atomic_output(self.path)
        self._tmp = self._output.__enter__()
        meta = {"format": FORMAT_VERSION, **dict(metadata or {})}
        self._writer = pq.ParquetWriter(self._tmp, REQUEST_SCHEMA.with_metadata(meta), **PARQUET_OPTIONS)
        self._validator = TraceValidator(f"{self.path} (being written)")
        self._summary = _Summary()
        self._pending: list[pa.Table] = []
        self._pending_rows = 0
        self._pending_values = 0
        self._row_group_rows = row_group_rows
        self.notes: dict[str, int] = {}  # producer counts added to the summary (e.g. repairs)
        self.summary: dict[str, float | int] | None = None

    def write(self, table: pa.Table) -> None:
        if table.num_rows == 0:
            return
        table = table.cast(REQUEST_SCHEMA) if table.schema != REQUEST_SCHEMA else table
        self._validator.check(table)
        self._summary.add(table)
        self._pending.append(table)
        self._pending_rows += table.num_rows
        hashes = table.column("block_hashes")
        if hashes.null_count < len(hashes):
            self._pending_values += sum(len(chunk.values) for chunk in hashes.chunks)
        if self._pending_rows >= self._row_group_rows or self._pending_values >= ROW_GROUP_LIST_VALUES:
            self._flush()

    def _flush(self) -> None:
        merged = pa.concat_tables(self._pending).combine_chunks()
        self._writer.write_table(merged, row_group_size=merged.num_rows)
        self._pending, self._pending_rows, self._pending_values = [], 0, 0

    def close(self) -> dict[str, float | int]:
        if self._pending_rows:
            self._flush()
        self.summary = {**self._summary.as_dict(), **self.notes}
        self._writer.add_key_value_metadata({SUMMARY_KEY: json.dumps(self.summary, sort_keys=True)})
        self._writer.close()
        self._output.__exit__(None, None, None)
        return self.summary

    def abort(self) -> None:
        with contextlib.suppress(Exception):
            self._writer.close()
        self._output.__exit__(RuntimeError, RuntimeError("aborted"), None)


def write_parquet_atomic(table: pa.Table, path: str | os.PathLike) -> None:
    """Write a small table (e.g. an envelope) in one go with the fixed options, atomically."""
    with atomic_output(path) as tmp:
        pq.write_table(table, tmp, row_group_size=max(table.num_rows, 1), **PARQUET_OPTIONS)


# --------------------------------------------------------------------------------------------- reading


def open_parquet(path: str | os.PathLike) -> pq.ParquetFile:
    path = require_file(path)
    try:
        return pq.ParquetFile(path)
    except (pa.ArrowException, OSError) as err:
        raise InputError(f"not a readable Parquet file ({err})", file=str(path)) from None


def file_format(pf: pq.ParquetFile) -> str | None:
    meta = pf.schema_arrow.metadata or {}
    value = meta.get(b"format")
    return value.decode() if value else None


def _open_trace(path: str | os.PathLike) -> pq.ParquetFile:
    pf = open_parquet(path)
    fmt = file_format(pf)
    if fmt not in (None, FORMAT_VERSION):
        hint = " (an arrival envelope, for generator specs)" if fmt == ENVELOPE_FORMAT_VERSION else ""
        raise InputError(f"not a request trace{hint}", file=str(path), where="metadata format", value=fmt,
                         allowed=FORMAT_VERSION)  # fmt: skip
    schema = pf.schema_arrow
    for field_ in REQUEST_SCHEMA:
        if field_.name not in schema.names and field_.name in OPTIONAL_COLUMNS:
            continue  # written before the column existed: read as its default
        if field_.name not in schema.names:
            raise InputError("missing column", file=str(path), where=f"column {field_.name}",
                             allowed=f"the columns of {FORMAT_VERSION} (see traces/README.md)")  # fmt: skip
        if len(schema.get_all_field_indices(field_.name)) > 1:
            raise InputError("column given more than once", file=str(path), where=f"column {field_.name}")
        got = schema.field(field_.name).type
        if not _compatible(got, field_.type):
            raise InputError("wrong column type", file=str(path), where=f"column {field_.name}", value=str(got),
                             allowed=str(field_.type))  # fmt: skip
    return pf


def _kind(t: pa.DataType) -> str:
    if pa.types.is_dictionary(t):
        return _kind(t.value_type)
    if pa.types.is_integer(t):
        return "int"
    if pa.types.is_floating(t):
        return "float"
    if pa.types.is_string(t) or pa.types.is_large_string(t):
        return "str"
    if pa.types.is_list(t) or pa.types.is_large_list(t):
        return "list:" + _kind(t.value_type)
    if pa.types.is_null(t):
        return "null"
    return str(t)


def _compatible(got: pa.DataType, want: pa.DataType) -> bool:
    g, w = _kind(got), _kind(want)
    return g == w or (g, w) == ("int", "float") or (g == "null" and w in ("str", "list:int"))


def _conform(table: pa.Table, file: str, row0: int) -> pa.Table:
    """Cast a batch to the canonical types (range-checked), dropping unknown columns."""
    arrays = []
    for field_ in REQUEST_SCHEMA:
        if field_.name not in table.column_names:
            continue
        column = table.column(field_.name)
        try:
            arrays.append(
                (field_.name, column.cast(field_.type, safe=True) if column.type != field_.type else column)
            )
        except pa.ArrowInvalid as err:
            raise InputError(f"value does not fit {field_.type} ({err})", file=file,
                             where=f"rows {row0}..{row0 + table.num_rows - 1}, column {field_.name}") from None  # fmt: skip
    return pa.table(dict(arrays))


def _read_columns(columns: list[str] | None) -> list[str]:
    """The requested columns plus those the validator needs (block_hashes only when requested)."""
    wanted = list(REQUEST_SCHEMA.names) if columns is None else list(columns)
    unknown = [c for c in wanted if c not in REQUEST_SCHEMA.names]
    if unknown:
        raise InputError(
            "unknown trace column", where="columns", value=unknown[0], allowed=REQUEST_SCHEMA.names
        )
    needed = {
        f.name
        for f in REQUEST_SCHEMA
        if f.name not in ("tenant", "source", "template", "stop_reason", "block_hashes", *OPTIONAL_COLUMNS)
    }
    return [f.name for f in REQUEST_SCHEMA if f.name in needed or f.name in wanted]


def _validated_batches(
    path: str | os.PathLike, columns: list[str] | None, batch_rows: int, *, trusted: bool = False
) -> Iterator[pa.Table]:
    """Batches cast to the canonical types and checked against the trace invariants; `trusted`: the
    invariants were checked on this file already, so only the requested columns are read and cast."""
    pf = _open_trace(path)
    present = set(pf.schema_arrow.names)
    wanted = _read_columns(columns) if not trusted or columns is None else columns
    read = [c for c in wanted if c in present]
    validator = None if trusted else TraceValidator(str(path))
    full = [f.name for f in REQUEST_SCHEMA]
    row0 = 0
    try:
        for batch in _iter_batches(pf, batch_rows, read):
            table = _with_defaults(_conform(pa.Table.from_batches([batch]), str(path), row0), columns)
            if validator is not None:
                validator.check(_with_placeholders(table, full))
            row0 += table.num_rows
            yield table.select(columns) if columns is not None else table
    except (pa.ArrowException, OSError) as err:
        raise InputError(
            f"corrupt or truncated Parquet data ({err})", file=str(path), where=f"near row {row0}"
        ) from None


def _iter_batches(pf: pq.ParquetFile, batch_rows: int, columns: list[str]) -> Iterator[pa.RecordBatch]:
    """Record batches one row group at a time: pyarrow's whole-file iter_batches keeps every
    column chunk it has read alive (memory grows with the file), per row group it does not."""
    for group in range(pf.metadata.num_row_groups):
        yield from pf.iter_batches(
            batch_size=batch_rows, row_groups=[group], columns=columns, use_threads=False
        )


def _with_placeholders(table: pa.Table, names: list[str]) -> pa.Table:
    """Fill columns the validator may skip (strings, unrequested block hashes) with nulls, and
    optional columns with their defaults."""
    return _with_defaults(table, [n for n in names if n in OPTIONAL_COLUMNS], nulls=names).select(names)


def _with_defaults(table: pa.Table, names: list[str] | None, nulls: list[str] | None = None) -> pa.Table:
    """Add the optional columns among `names` (all when None) that `table` lacks, with their
    defaults (OPTIONAL_COLUMNS), and the other `nulls` columns it lacks as nulls."""
    wanted = list(OPTIONAL_COLUMNS) if names is None else [n for n in names if n in OPTIONAL_COLUMNS]
    for name in [*wanted, *(nulls or [])]:
        if name in table.column_names:
            continue
        field_ = REQUEST_SCHEMA.field(name)
        default = OPTIONAL_COLUMNS.get(name)
        n = table.num_rows
        array = pa.nulls(n, field_.type) if default is None else pa.repeat(pa.scalar(default, field_.type), n)
        table = table.append_column(field_, array)
    return table


def read_trace_table(path: str | os.PathLike, columns: list[str] | None = None) -> pa.Table:
    """The whole trace as one validated table in REQUEST_SCHEMA types (all columns, or `columns`)."""
    batches = list(_validated_batches(path, columns, DEFAULT_ROW_GROUP_ROWS))
    if not batches:
        schema = REQUEST_SCHEMA if columns is None else pa.schema([REQUEST_SCHEMA.field(c) for c in columns])
        return schema.empty_table()
    return pa.concat_tables(batches).combine_chunks()


@dataclass(frozen=True)
class TraceSession:
    """One session: its fields and its requests (rows in request_index order, arrival order)."""

    session_id: int
    start_s: float
    requests: pa.Table = field(repr=False)

    @property
    def tenant(self) -> str | None:
        return self._first("tenant")

    @property
    def source(self) -> str | None:
        return self._first("source")

    @property
    def template(self) -> str | None:
        return self._first("template")

    def _first(self, name: str) -> str | None:
        return self.requests.column(name)[0].as_py() if name in self.requests.column_names else None

    def column(self, name: str) -> np.ndarray:
        """One request column as a numpy array (list columns come back as an object array)."""
        return self.requests.column(name).to_numpy(zero_copy_only=False)

    def records(self) -> list[dict]:
        """The requests as dicts, one per row (convenient for small sessions)."""
        return self.requests.to_pylist()


def trace_parts(path: str | os.PathLike) -> list[Path]:
    """The files of a trace: itself, or a folder's `*.parquet` parts in name order."""
    path = Path(path)
    if not path.is_dir():
        return [path]
    parts = sorted(path.glob("*.parquet"))
    if not parts:
        raise InputError(
            "folder holds no .parquet part", file=str(path), allowed="a trace or a folder of its parts"
        )
    return parts


def iter_session_batches(path: str | os.PathLike, batch_rows: int = 65_536,
                         columns: list[str] | None = None, *, trusted: bool = False) -> Iterator[pa.Table]:  # fmt: skip
    """Validated tables of whole sessions (about `batch_rows` rows each, more when one session is
    longer), in file order: for vectorised passes over a trace in bounded memory. `session_id` is
    always included. `trusted`: this file passed the checks already (a run's replay after
    `sim.preflight` read it whole, or a trace `TraceWriter` wrote): read and cast, not checked again.
    A folder of parts: each part in turn (a part holds whole sessions)."""
    if Path(path).is_dir():
        for part in trace_parts(path):
            yield from iter_session_batches(part, batch_rows, columns, trusted=trusted)
        return
    if columns is not None:
        columns = list(dict.fromkeys(["session_id", *columns]))
    pending: pa.Table | None = None
    for table in _validated_batches(path, columns, batch_rows, trusted=trusted):
        if pending is not None and pending.num_rows:
            table = pa.concat_tables([pending, table])
        sid = table.column("session_id").to_numpy()
        cuts = np.flatnonzero(sid[1:] != sid[:-1]) + 1
        last_start = int(cuts[-1]) if len(cuts) else 0
        if last_start:
            yield table.slice(0, last_start)
        # a copy: a slice would keep every earlier batch alive through the concatenations
        pending = table.take(np.arange(last_start, table.num_rows))
    if pending is not None and pending.num_rows:
        yield pending


def iter_sessions(
    path: str | os.PathLike, batch_rows: int = 65_536, columns: list[str] | None = None
) -> Iterator[TraceSession]:
    """Yield the trace's sessions in start order, each with all its rows together.

    Reads `batch_rows` rows at a time and validates them, so memory stays at one batch plus the
    longest session. `columns` selects request columns (default all; leave out `block_hashes` to
    read faster); `session_id` and `session_start_s` are always included.
    """
    if columns is not None:
        columns = list(dict.fromkeys(["session_id", "session_start_s", *columns]))
    for table in iter_session_batches(path, batch_rows, columns):
        sid = table.column("session_id").to_numpy()
        bounds = np.concatenate([[0], np.flatnonzero(sid[1:] != sid[:-1]) + 1, [len(sid)]])
        for lo, hi in zip(bounds[:-1], bounds[1:], strict=True):
            yield _session(table.slice(int(lo), int(hi - lo)))


def _session(rows: pa.Table) -> TraceSession:
    return TraceSession(
        int(rows.column("session_id")[0].as_py()), float(rows.column("session_start_s")[0].as_py()), rows
    )


def trace_info(path: str | os.PathLike) -> dict[str, object]:
    """Counts and time span of a trace from its metadata (written by TraceWriter), without reading
    rows; files from elsewhere fall back to reading three columns. A folder of parts: their sums,
    spans and row groups together."""
    if Path(path).is_dir():
        return _parts_info(path)
    pf = _open_trace(path)
    meta = {k.decode(): v.decode() for k, v in (pf.metadata.metadata or {}).items() if k != b"ARROW:schema"}
    raw = meta.pop(SUMMARY_KEY, None)
    if raw is not None:
        summary = json.loads(raw)
    else:
        table = read_trace_table(
            path, columns=["session_id", "agent_id", "arrival_time_s", "input_tokens", "output_tokens"]
        )
        acc = _Summary()
        if table.num_rows:
            acc.add(table)
        summary = acc.as_dict()
    summary["duration_s"] = summary["last_arrival_s"] - summary["first_arrival_s"]
    return {"path": str(path), "rows": pf.metadata.num_rows, "row_groups": pf.metadata.num_row_groups,
            **summary, "metadata": meta}  # fmt: skip


def _parts_info(path: str | os.PathLike) -> dict[str, object]:
    infos = [trace_info(part) for part in trace_parts(path)]
    out: dict[str, object] = {"path": str(path), "parts": len(infos)}
    for key in (
        "rows",
        "row_groups",
        "sessions",
        "requests",
        "top_level_requests",
        "input_tokens",
        "output_tokens",
    ):
        out[key] = sum(int(i[key]) for i in infos)
    out["first_arrival_s"] = min(float(i["first_arrival_s"]) for i in infos)
    out["last_arrival_s"] = max(float(i["last_arrival_s"]) for i in infos)
    out["duration_s"] = out["last_arrival_s"] - out["first_arrival_s"]
    out["metadata"] = infos[0]["metadata"]
    return out
