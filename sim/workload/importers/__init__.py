"""Importers: public trace formats -> the canonical Parquet trace (or, for ServeGen, an arrival
envelope). Each module exposes `read(src, progress) -> Iterator[pa.Table]` of canonical batches in
file order, except servegen (`read_envelope`). `import_trace` writes atomically."""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path

from sim.errors import InputError

from ..io import TraceWriter, require_file, write_parquet_atomic
from ..starts import SessionStarts
from . import azure, mooncake, servegen, weka

TRACE_READERS = {"weka": weka.read, "mooncake": mooncake.read, "azure": azure.read}
FORMATS = (*TRACE_READERS, "servegen")


def import_trace(fmt: str, src: str | os.PathLike, out: str | os.PathLike,
                 progress: Callable[[int, int], None] | None = None, **options) -> dict:  # fmt: skip
    """Convert `src` (format `fmt`) into `out`; returns the written file's summary. Nothing is left
    at `out` when the input is bad. `options` go to the format's reader (see its docstring): for weka,
    `session_start` (sim.workload.starts: zero | poisson:RATE_PER_H | spread:HOURS) and `seed`."""
    if fmt not in FORMATS:
        raise InputError("unknown trace format", where="FORMAT", value=fmt, allowed=FORMATS)
    if fmt == "servegen":  # a tar archive, a folder or one CSV
        if not Path(src).exists():
            raise InputError("file not found", file=str(src))
        table = servegen.read_envelope(src, progress=progress, **options)
        write_parquet_atomic(table, out)
        return servegen.summarize(table)
    require_file(src)
    extra = set(options) - ({"session_start", "seed"} if fmt == "weka" else set())
    if extra:
        raise InputError("option not supported by this format", where=fmt, value=sorted(extra)[0])
    kwargs: dict = {}
    if fmt == "weka":
        kwargs["starts"] = SessionStarts.parse(
            options.get("session_start") or "zero", options.get("seed") or 0
        )
        kwargs["notes"] = {}
    with TraceWriter(out, metadata={"sim.source": fmt, "sim.source_file": Path(src).name}) as writer:
        for table in TRACE_READERS[fmt](src, progress=progress, **kwargs):
            writer.write(table)
        writer.notes.update(kwargs.get("notes", {}))
    return writer.summary
