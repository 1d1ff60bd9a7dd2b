"""Measured kernel tables (`hwprofiles/<gpu>/kernels_bench_results.csv`, written by kernels_bench):
loading with validation, and the curves and grids (sim.timing.interp) the calibrated timing
reads them through.

Loading. The tidy CSV is read once per timing build (never at import): leading `# key: value`
lines are the provenance, then one row per kernel x shape (columns: kernels_bench/columns.py).
A missing column or an unparsable number is an InputError naming the file, the row and the
column. Rows whose correctness check failed carry no time and are dropped, as are timing-only
controls (no check at all); only rows with `check_passed` True and a positive median remain.

Interpolation (`Curve`, one axis; `Grid`, two axes on a possibly ragged grid) is exact at the
measured points and, between two of them, lies between their values (monotone). Per axis:
- `loglog`: piecewise linear in (log x, log t), i.e. a power law between neighbours; used for
  batch, rows, tokens per expert, expert groups and chunk size, where times follow
  latency floor -> linear growth and a power law bends the right way between the points.
- `linear`: piecewise linear in (x, t); used for the context axis, where the measured decode
  times are affine in L (e.g. V4 CSA at B = 64: 0.0011 us per token from 32K to 1M within 2 %),
  so that a batch's time at its mean context equals the mean of its sequences' times (the
  engine only knows the sum of the contexts, see sim.timing.calibrated).
Outside the measured range: below the first point the time is clamped (a latency floor: smaller
shapes never take less); above the last it scales linearly with the work: proportionally to x
on a `loglog` axis (per-row cost no longer falls), continuing the last segment (slope >= 0) on a
`linear` axis (the affine law in L). Both are conservative: measured times per unit of work fall
with size, so the extrapolation over-estimates rather than flatters.
"""

from __future__ import annotations

import csv
import functools
import math
from collections.abc import Callable, Hashable, Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from kernels_bench import columns
from sim import units
from sim.errors import InputError
from sim.paths import hwprofiles_dir
from sim.timing.interp import LINEAR, LOGLOG, Curve, Grid

TABLE_FILE = "kernels_bench_results.csv"

# the writer's columns (kernels_bench.columns), by what this reader does with them
_TEXT_COLUMNS = columns.names(columns.KERNEL_COLUMNS, "text")
_NUMBER_COLUMNS = columns.names(columns.KERNEL_COLUMNS, "number")
REQUIRED_COLUMNS = columns.names(columns.KERNEL_COLUMNS, "text", "number", "check")
# optional: the package of a production table's kernel (sim.timing.stacks)
PACKAGE_COLUMNS = columns.names(columns.PRODUCTION_COLUMNS, "package")


@dataclass(frozen=True)
class KernelRow:
    """One timed kernel x shape; absent numbers are None. Times in seconds."""

    family: str
    kernel: str
    impl: str
    model: str
    layer_kind: str
    fmt: str
    batch: float | None
    context_tokens: float | None
    chunk_tokens: float | None
    rows: float | None
    n: float | None
    k: float | None
    groups: float | None
    median_s: float
    flops: float
    bytes: float
    floor_s: float
    compute_ceiling_TFLOPs: float | None
    # where the row comes from: the package (and version) of a production kernel, "derived: ..."
    # for rows the stacks compose (sim.timing.stacks), empty for kernels_bench's own kernels
    package: str = ""

    @property
    def efficiency(self) -> float:
        """Roofline floor / measured time (the floor uses kernels.md §1's measured ceilings)."""
        return self.floor_s / self.median_s


@dataclass(frozen=True)
class KernelTables:
    """The usable rows of one table file and its provenance."""

    path: Path
    provenance: tuple[tuple[str, str], ...]
    rows: tuple[KernelRow, ...]
    dropped: int  # rows without a usable time (failed checks, timing-only controls)
    stack: str = "kernels_bench"  # which kernel stack the rows time (sim.timing.stacks)
    # per kernel group of a composed stack: where its rows come from (sim.timing.stacks.Source)
    sources: tuple = ()
    # what callers derive from these rows, built once per key (sim.timing.calibrated: one model's
    # curves and grids); the rows never change, so neither does what is derived from them
    _derived: dict = field(default_factory=dict, init=False, compare=False, repr=False)

    def derived(self, key: Hashable, build: Callable[[], Any]) -> Any:
        """`build()` the first time `key` is asked for, the same object after that."""
        if key not in self._derived:
            self._derived[key] = build()
        return self._derived[key]

    def select(self, **equal: str) -> list[KernelRow]:
        """Rows whose text columns equal the given values (e.g. family="pipeline", model="V4")."""
        return [r for r in self.rows if all(getattr(r, key) == value for key, value in equal.items())]

    def need(self, what: str, **equal: str) -> list[KernelRow]:
        """`select`, but an InputError naming the file when nothing matches (a table that lacks a
        kernel the calibrated model composes)."""
        found = self.select(**equal)
        if not found:
            where = ", ".join(f"{k}={v}" for k, v in equal.items())
            raise InputError(f"no timed rows for {what}", file=str(self.path), where=where)
        return found


# --- where tables live ---


def gpu_key(hw_profile) -> str:
    """Folder name of a profile's tables: its `gpu` field in lower case (H200 -> hwprofiles/h200/)."""
    return str(hw_profile.gpu).lower()


def table_path(key: str) -> Path:
    return hwprofiles_dir() / key / TABLE_FILE


def gpus_with_tables() -> list[str]:
    """GPU keys that have a table file under hwprofiles/."""
    root = hwprofiles_dir()
    if not root.is_dir():
        return []
    return sorted(p.parent.name for p in root.glob(f"*/{TABLE_FILE}") if p.is_file())


def resolve_gpu(name: str):
    """(GPU key, a hardware profile of that GPU) for a GPU key ("h200", "b200") or a profile id;
    any GPU with a profile works (measured tables, or the H200's carried to it)."""
    from sim.hardware import load_all_hw

    profiles = load_all_hw()
    by_id = {p.id: p for p in profiles}
    key = gpu_key(by_id[name]) if name in by_id else name.lower()
    matches = [p for p in profiles if gpu_key(p) == key]
    profile = by_id.get(name) or (matches[0] if matches else None)
    if profile is None:
        if key in gpus_with_tables():
            return key, None
        known = sorted({*gpus_with_tables(), *(gpu_key(p) for p in profiles)})
        raise InputError(
            "no hardware profile or kernel tables for this GPU", where="GPU", value=name, allowed=known
        )
    return key, profile


def has_tables(hw_profile) -> bool:
    return table_path(gpu_key(hw_profile)).is_file()


# --- loading ---


def load_tables(path: Path) -> KernelTables:
    """Read and validate one table file (see the module doc); a file read before and unchanged
    since (same modification time) is not read again: every timing model built in a process (two
    per pool set, many in a plan) shares its tables."""
    path = Path(path)
    try:
        stamp = path.stat().st_mtime_ns
    except OSError:
        stamp = None  # not cached: reading it raises the InputError
    return _load_tables(path, stamp)


@functools.lru_cache(maxsize=8)
def _load_tables(path: Path, _stamp: int | None) -> KernelTables:
    provenance, start, reader = read_table(path, "kernel table")
    header = reader.fieldnames or []
    missing = [c for c in REQUIRED_COLUMNS if c not in header]
    if missing:
        raise InputError(
            "kernel table lacks required columns",
            file=str(path),
            where=f"column {missing[0]}",
            value=header[:4] if header else None,
            allowed=list(REQUIRED_COLUMNS),
        )
    rows, dropped = [], 0
    for i, raw in enumerate(reader):
        line = start + 2 + i  # 1-based line in the file (header + this row)
        row = _parse_row(raw, path, line)
        if row is None:
            dropped += 1
        else:
            rows.append(row)
    if not rows:
        raise InputError("kernel table has no timed rows with a passed check", file=str(path))
    return KernelTables(path=path, provenance=tuple(provenance), rows=tuple(rows), dropped=dropped)


def read_table(path: Path, what: str) -> tuple[list[tuple[str, str]], int, csv.DictReader]:
    """(provenance from the leading `# key: value` lines, their count, a reader of the CSV after
    them) of a measured table; an InputError naming the file when it cannot be read."""
    try:
        lines = path.read_text().splitlines()
    except OSError as err:
        raise InputError(f"cannot read {what}: {err.strerror}", file=str(path)) from None
    provenance = []
    start = 0
    while start < len(lines) and lines[start].startswith("#"):
        key, _, value = lines[start][1:].partition(":")
        provenance.append((key.strip(), value.strip()))
        start += 1
    return provenance, start, csv.DictReader(lines[start:])


def parse_number(raw: dict, col: str, path: Path, line: int) -> float | None:
    """A number cell of a measured table: None when empty or NaN ("not applicable"), an
    InputError naming the file, line and column when it is not a number."""
    text = (raw.get(col) or "").strip()
    if text == "":
        return None
    try:
        value = float(text)
    except ValueError:
        raise InputError(
            "not a number", file=str(path), where=f"line {line}, column {col}", value=text
        ) from None
    if not math.isfinite(value):
        return None  # NaN marks "not applicable" in the writer
    return value


def _parse_row(raw: dict, path: Path, line: int) -> KernelRow | None:
    check = (raw.get("check_passed") or "").strip()
    if check not in ("True", "False", ""):
        raise InputError(
            "check_passed must be True, False or empty",
            file=str(path),
            where=f"line {line}, column check_passed",
            value=check,
        )
    nums = {c: parse_number(raw, c, path, line) for c in _NUMBER_COLUMNS}
    if check != "True":
        return None  # failed check (no time) or a timing-only control: never used
    med = nums["median_us"]
    if med is None or med <= 0.0:
        raise InputError(
            "a passed check needs a positive median_us",
            file=str(path),
            where=f"line {line}, column median_us",
            value=raw.get("median_us"),
        )
    text = {c: (raw.get(c) or "").strip() for c in _TEXT_COLUMNS}
    package = " ".join(v for v in ((raw.get(c) or "").strip() for c in PACKAGE_COLUMNS) if v)
    if not text["family"] or not text["kernel"]:
        raise InputError("family and kernel must not be empty", file=str(path), where=f"line {line}")
    return KernelRow(
        **text,
        batch=nums["batch"],
        context_tokens=nums["context_tokens"],
        chunk_tokens=nums["chunk_tokens"],
        rows=nums["rows"],
        n=nums["n"],
        k=nums["k"],
        groups=nums["groups"],
        median_s=med * units.US,
        flops=nums["flops"] or 0.0,
        bytes=nums["bytes"] or 0.0,
        floor_s=(nums["floor_us"] or 0.0) * units.US,
        compute_ceiling_TFLOPs=nums["compute_ceiling_TFLOPs"],
        package=package,
    )


# --- building curves and grids from rows ---


def _coordinate(r: KernelRow, x) -> float | None:
    return x(r) if callable(x) else getattr(r, x)


def curve_of(
    rows: Iterable[KernelRow], x, *, mode: str = LOGLOG, value=lambda r: r.median_s, path: Path | None = None
) -> Curve:
    """A curve over `x` (a column name, or a function of the row) of `rows`, one row per point;
    `value` picks what is interpolated (the median time by default)."""
    pts: dict[float, float] = {}
    for r in rows:
        key = _coordinate(r, x)
        if key is None:
            raise InputError(
                f"row lacks {x}", file=str(path) if path else None, where=f"{r.kernel} {r.layer_kind}"
            )
        if key in pts:
            raise InputError(
                f"two timed rows for one shape of {r.kernel} {r.model} {r.layer_kind} {r.fmt}",
                file=str(path) if path else None,
                where=f"{x} = {key:g}",
            )
        pts[key] = value(r)
    xs = tuple(sorted(pts))
    return Curve(xs, tuple(pts[v] for v in xs), mode)


def grid_of(
    rows: Iterable[KernelRow],
    outer,
    inner,
    *,
    outer_mode: str = LINEAR,
    inner_mode: str = LOGLOG,
    value=lambda r: r.median_s,
    path: Path | None = None,
) -> Grid:
    """A grid over (`outer`, `inner`) (column names or functions of the row) of `rows`."""
    by_outer: dict[float, list[KernelRow]] = {}
    for r in rows:
        by_outer.setdefault(_coordinate(r, outer), []).append(r)
    if None in by_outer:
        raise InputError(f"row lacks {outer}", file=str(path) if path else None)
    keys = tuple(sorted(by_outer))
    curves = tuple(curve_of(by_outer[k], inner, mode=inner_mode, value=value, path=path) for k in keys)
    return Grid(keys, curves, outer_mode)


def best_of(rows: Iterable[KernelRow], key: str) -> list[KernelRow]:
    """The fastest row at each value of column `key` (several implementations of one kernel)."""
    best: dict[float, KernelRow] = {}
    for r in rows:
        k = getattr(r, key)
        if k not in best or r.median_s < best[k].median_s:
            best[k] = r
    return [best[k] for k in sorted(best)]
