"""The simulator's compiled core: the event-loop modules, compiled to C by mypyc at install time.

The discrete-event core (engines, links, cache tiers, routing, arrivals, the timing models and
the interpolation that answers their questions) runs a few hundred Python operations per
simulated request; compiled by mypyc (part of mypy, from the same typed sources) it runs 2-3x
faster (docs/speed.md), which is what lets a 10M-request two-week replay finish in
minutes on one core. The sources stay the reference: they run unchanged as plain Python, and a
test checks that both give byte-identical outputs.

`pip install -e .` builds the modules of `COMPILED` next to their sources (setup.py reads the
list from here) and records, in `sim/native_build.json`, the SHA-256 of each one's source and of
every `sim` module it imports (mypyc compiles against their types too), as read before compiling. Python would import a
compiled module in preference to its source, so a source edited after the build would silently
not run: `install()` (called when `sim` is imported) makes every compiled module load from its
source instead when

- `SIM_PURE_PYTHON=1` is set (debugging, profiling, the equivalence test), or
- any of those files' content differs from the build's record, or there is no record (edited
  since the build; rebuild with `pip install -e .` to get the speed back; `sim bench` says which
  core ran). Content, not file times: a checkout or a `touch` does not make a build stale, and an
  edit made within the same second as the build still does.

All or nothing: compiled modules call each other's classes natively, so a mix would fail.
`SIM_REQUIRE_COMPILED=1` (CI sets it) makes a failed compilation fail the install instead of
falling back to the sources, and tests/simulator/test_native.py fail unless the compiled core runs.
This module imports only the standard library (setup.py runs it before anything is installed).
"""

from __future__ import annotations

import ast
import hashlib
import importlib.abc
import importlib.machinery
import importlib.util
import json
import os
import sys
from pathlib import Path

COMPILED = (
    "sim.cluster.cluster",
    "sim.cluster.events",
    "sim.cluster.heap",
    "sim.cluster.instance",
    "sim.cluster.link",
    "sim.core.request",
    "sim.cluster.simpy_loop",
    "sim.kvcache.lookup",
    "sim.kvcache.paths",
    "sim.kvcache.policies",
    "sim.kvcache.store",
    "sim.kvcache.tiers",
    "sim.metrics.invariants",
    "sim.metrics.requestlog",
    "sim.sched.batcher",
    "sim.sched.router",
    "sim.timing.calibrated",
    "sim.timing.comm",
    "sim.timing.interp",
    "sim.timing.memo",
    "sim.timing.batch",
    "sim.timing.roofline",
    "sim.workload.arrivals",
)
PURE_ENV = "SIM_PURE_PYTHON"
REQUIRE_ENV = "SIM_REQUIRE_COMPILED"
MANIFEST = "native_build.json"  # in the `sim` package folder, written by setup.py after the build
_ROOT = Path(__file__).resolve().parent.parent  # the folder that holds the `sim` package


def source_path(module: str) -> Path:
    return _ROOT.joinpath(*module.split(".")).with_suffix(".py")


def compiled_path(module: str) -> Path | None:
    """The built extension of `module` beside its source, if any."""
    src = source_path(module)
    for suffix in importlib.machinery.EXTENSION_SUFFIXES:
        path = src.with_suffix(suffix)
        if path.is_file():
            return path
    return None


def _module_file(module: str, root: Path) -> Path | None:
    """The source of a module or package under `root`, if it is one."""
    base = root.joinpath(*module.split("."))
    for path in (base.with_suffix(".py"), base / "__init__.py"):
        if path.is_file():
            return path
    return None


def imported_sim_modules(source: Path, root: Path) -> set[Path]:
    """The `sim` modules a source imports (at module level, in functions, under TYPE_CHECKING)."""
    names = set()
    for node in ast.walk(ast.parse(source.read_text(), str(source))):
        if isinstance(node, ast.Import):
            names.update(a.name for a in node.names)
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            names.add(node.module)
            names.update(f"{node.module}.{a.name}" for a in node.names)  # `from sim.x import module`
    found = (_module_file(n, root) for n in names if n == "sim" or n.startswith("sim."))
    return {p for p in found if p is not None}


def hashed_sources() -> list[str]:
    """The files a build depends on, relative to the source root: the compiled modules and the `sim`
    modules they import (mypyc compiles against their types)."""
    files = set()
    for module in COMPILED:
        src = source_path(module)
        files |= {src, *imported_sim_modules(src, _ROOT)}
    return sorted(p.relative_to(_ROOT).as_posix() for p in files)


def _digest(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def source_digests() -> dict[str, str]:
    """The SHA-256 of each file a build depends on (`hashed_sources`), as they are now. setup.py
    takes them before mypyc reads the sources: a source edited while the build runs then differs
    from the record (its source runs), where digests taken after the build would record the edited
    text beside a module compiled from the earlier one."""
    return {rel: _digest(_ROOT / rel) for rel in hashed_sources()}


def write_manifest(package_dir: Path, digests: dict[str, str]) -> Path:
    """Record the sources of a finished build (setup.py): `digests`, taken before it compiled them
    (`source_digests`); `package_dir` is where the built `sim` lives."""
    record = {"sha256": digests}
    path = package_dir / MANIFEST
    path.write_text(json.dumps(record, indent=1, sort_keys=True) + "\n")
    return path


def stale_reason() -> str | None:
    """Why the build does not match the sources (the first file whose content differs from its record,
    or no record at all); None when it matches."""
    try:
        recorded = json.loads((_ROOT / "sim" / MANIFEST).read_text())["sha256"]
    except (OSError, ValueError, KeyError):
        return f"no record of the build's sources (sim/{MANIFEST})"
    # the record lists what each compiled source imported when built; an unchanged source imports the same
    compiled = [source_path(m).relative_to(_ROOT).as_posix() for m in COMPILED]
    for rel in [*(c for c in compiled if c not in recorded), *sorted(recorded)]:
        path = _ROOT / rel
        if rel not in recorded or not path.is_file() or _digest(path) != recorded[rel]:
            return f"{rel} changed since the build"
    return None


def core_state() -> tuple[str, str]:
    """(`compiled` | `source`, why): which core `sim` runs in this process, decided once."""
    if not all(compiled_path(m) for m in COMPILED):
        return "source", "not built (install with `pip install -e .` to compile it)"
    if os.environ.get(PURE_ENV) == "1":
        return "source", f"{PURE_ENV}=1"
    stale = stale_reason()
    if stale is not None:
        return "source", f"{stale} (rerun `pip install -e .`)"
    return "compiled", "mypyc"


class _SourceFirst(importlib.abc.MetaPathFinder):
    """Loads the compiled modules from their `.py` sources."""

    def find_spec(self, fullname, path=None, target=None):
        if fullname not in COMPILED:
            return None
        return importlib.util.spec_from_file_location(fullname, source_path(fullname))


_STATE: tuple[str, str] | None = None


def install() -> tuple[str, str]:
    """Decide the core for this process (once) and make the imports follow it."""
    global _STATE  # the import system is process-wide state; this records what was done to it
    if _STATE is None:
        _STATE = core_state()
        if _STATE[0] == "source":
            sys.meta_path.insert(0, _SourceFirst())
    return _STATE


def describe() -> str:
    kind, why = install()
    return f"{kind} ({why})"
