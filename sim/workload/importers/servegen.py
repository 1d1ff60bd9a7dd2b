"""Alibaba ServeGen per-client rate series (`<category>/<model>/chunk-<client>-trace.csv`, no header:
window start s, mean rate req/s, interarrival CV, family, two parameters; 600 s windows).
Fields and caveats: ../shared/traces/public/README.md §4.

Not a request trace: it imports into an arrival *envelope* (schema.ENVELOPE_SCHEMA), which
generator specs use to shape session arrivals over days and weeks. SRC is the tar archive (any
compression), a folder of those CSVs, or one CSV; `select` keeps the members whose path starts with
it (e.g. "language/m-large").
"""

from __future__ import annotations

import csv
import io
import math
import re
import tarfile
from collections.abc import Callable, Iterator
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.csv as pcsv

from sim.errors import InputError

from ..schema import ENVELOPE_SCHEMA
from .common import Where

_MEMBER = re.compile(r"^(?:\./)?(?P<group>.*?)/?chunk-(?P<client>\d+)-trace\.csv$")
FAMILIES = ("Gamma", "Weibull")
DEFAULT_WINDOW_S = 600.0  # README §4: 600-second windows


def read_envelope(src: str | Path, progress: Callable[[int, int], None] | None = None,
                  select: str | None = None) -> pa.Table:  # fmt: skip
    """The envelope table, rows sorted by (client, window_start_s)."""
    columns: dict[str, list] = {f.name: [] for f in ENVELOPE_SCHEMA}
    members = sorted(_members(Path(src), select), key=lambda m: _natural(m[0]))
    if not members:
        raise InputError("no ServeGen rate files (chunk-<k>-trace.csv) found", file=str(src), where="select",
                         value=select)  # fmt: skip
    for done, (name, client, text) in enumerate(members):
        _parse_csv(f"{src}:{name}", client, text, columns)
        if progress is not None:
            progress(done + 1, len(members))
    return pa.table(columns, schema=ENVELOPE_SCHEMA)


def _natural(name: str) -> tuple:
    return tuple(int(p) if p.isdigit() else p for p in re.split(r"(\d+)", name))


def _members(src: Path, select: str | None) -> Iterator[tuple[str, str, bytes]]:
    """(member path, client name, file bytes) for every rate CSV under `select`."""

    def keep(name: str) -> str | None:
        match = _MEMBER.match(name)
        if not match or (select and not name.lstrip("./").startswith(select.strip("/"))):
            return None
        return f"{match['group']}/{match['client']}".lstrip("/")

    if src.is_dir():
        for path in sorted(src.rglob("chunk-*-trace.csv")):
            rel = path.relative_to(src).as_posix()
            if (client := keep(rel)) is not None:
                yield rel, client, path.read_bytes()
        return
    if not tarfile.is_tarfile(src):
        if (client := keep(src.name)) is None and select:
            return
        yield src.name, client or src.stem, src.read_bytes()
        return
    try:
        with tarfile.open(src) as archive:
            for member in archive:
                if member.isfile() and (client := keep(member.name)) is not None:
                    yield member.name, client, archive.extractfile(member).read()
    except (tarfile.TarError, EOFError, OSError) as err:
        raise InputError(f"corrupt or truncated archive ({err})", file=str(src)) from None


_NAMES = ("window_start_s", "rate_per_s", "interarrival_cv", "family", "param_1", "param_2")


def _parse_csv(file: str, client: str, text: bytes, out: dict[str, list]) -> None:
    """Append one client's rows to `out`; errors name the line (1-based, no header) and field."""
    try:
        table = pcsv.read_csv(
            io.BytesIO(text),
            read_options=pcsv.ReadOptions(column_names=list(_NAMES)),
            convert_options=pcsv.ConvertOptions(column_types={n: pa.string() if n == "family" else pa.float64() for n in _NAMES},
                                                strings_can_be_null=True),
        )  # fmt: skip
    except pa.ArrowInvalid:
        table = None
    if table is None or table.num_rows == 0:
        _parse_slowly(file, text)  # finds and names the bad line
        return
    col = {n: table.column(n).to_numpy(zero_copy_only=False) for n in _NAMES}
    numeric = [n for n in _NAMES if n != "family"]
    for name in numeric:
        bad = ~np.isfinite(col[name].astype(np.float64))
        if bad.any():
            raise Where(file, int(np.flatnonzero(bad)[0]) + 1, name).error("not a finite number")
    for name in ("rate_per_s", "interarrival_cv"):
        bad = col[name] < 0
        if bad.any():
            i = int(np.flatnonzero(bad)[0])
            raise Where(file, i + 1, name).error("negative value", float(col[name][i]), ">= 0")
    back = np.flatnonzero(np.diff(col["window_start_s"]) < 0)
    if len(back):
        i = int(back[0]) + 1
        raise Where(file, i + 1, "window_start_s").error("time going backwards", float(col["window_start_s"][i]),
                                                         f">= {col['window_start_s'][i - 1]} (the previous row)")  # fmt: skip
    family = np.array([f if f else None for f in col["family"]], dtype=object)
    unknown = np.array([f is not None and f not in FAMILIES for f in family])
    if unknown.any():
        i = int(np.flatnonzero(unknown)[0])
        raise Where(file, i + 1, "family").error("unknown interarrival family", family[i], FAMILIES)
    n = table.num_rows
    steps = np.diff(col["window_start_s"])
    out["client"].extend([client] * n)
    for name in numeric:
        out[name].extend(col[name].tolist())
    out["family"].extend(family.tolist())
    out["window_s"].extend([float(np.median(steps)) if len(steps) else DEFAULT_WINDOW_S] * n)


def _parse_slowly(file: str, text: bytes) -> None:
    """Check a CSV line by line and raise at the first problem."""
    try:
        rows = list(csv.reader(io.StringIO(text.decode())))
    except (UnicodeDecodeError, csv.Error) as err:
        raise Where(file, 1).error(f"not a CSV file ({err})") from None
    if not any(rows):
        raise Where(file, 1).error("no rows")
    for lineno, row in enumerate(rows, start=1):
        if not row:
            continue
        w = Where(file, lineno)
        if len(row) != len(_NAMES):
            raise w.error("wrong number of fields", len(row), "6: " + ", ".join(_NAMES))
        for k, name in enumerate(_NAMES):
            if name != "family":
                _number(row[k], w.at(name))
    raise Where(file, 1).error("not a ServeGen rate CSV")


def _number(text: str, w: Where) -> float:
    try:
        value = float(text)
    except ValueError:
        raise w.error("not a number", text) from None
    if not math.isfinite(value):
        raise w.error("not a finite number", text)
    return value


def aggregate_rate(table: pa.Table) -> tuple[np.ndarray, np.ndarray]:
    """(window starts, summed rate over all clients) of an envelope, windows in time order."""
    grouped = table.group_by("window_start_s").aggregate([("rate_per_s", "sum")]).sort_by("window_start_s")
    return grouped.column("window_start_s").to_numpy(), grouped.column("rate_per_s_sum").to_numpy()


def summarize(table: pa.Table) -> dict:
    """Per model group (client path without its number): clients, span and aggregate rate."""
    groups = pc.replace_substring_regex(table.column("client"), r"/[^/]*$", "").to_numpy(zero_copy_only=False)
    out = {"clients": len(set(table.column("client").to_pylist())), "windows": table.num_rows, "groups": {}}
    for group in sorted(set(groups)):
        sub = table.filter(pa.array(groups == group))
        starts, rate = aggregate_rate(sub)
        span = float(starts[-1] - starts[0] + sub.column("window_s")[0].as_py()) if len(starts) else 0.0
        out["groups"][group] = {
            "clients": len(set(sub.column("client").to_pylist())),
            "span_s": span,
            "rate_mean_per_s": float(rate.mean()),
            "rate_min_per_s": float(rate.min()),
            "rate_max_per_s": float(rate.max()),
            "peak_to_mean": float(rate.max() / rate.mean()) if rate.mean() > 0 else 0.0,
        }
    return out
