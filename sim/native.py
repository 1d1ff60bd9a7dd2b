"""The simulator's compiled core: the event-loop modules, compiled to C by mypyc at install time.

The discrete-event core (engines, links, cache tiers, routing, arrivals, the timing models and
the interpolation that answers their questions) runs a few hundred Python operations per
simulated request; compiled by mypyc (part of mypy, from the same typed sources) it runs 2-3x
faster (README, Simulator speed), which is what lets a 10M-request two-week replay finish in
minutes on one core. The sources stay the reference: they run unchanged as plain Python, and a
test checks that both give byte-identical outputs.

`pip install -e .` builds the modules of `COMPILED` next to their sources (setup.py reads the
list from here). Python would import a compiled module in preference to its source, so a source
edited after the build would silently not run: `install()` (called when `sim` is imported)
makes every compiled module load from its source instead when

- `SIM_PURE_PYTHON=1` is set (debugging, profiling, the equivalence test), or
- any compiled module is older than its source (edited since the build; rebuild with
  `pip install -e .` to get the speed back; `sim bench` says which core ran).

All or nothing: compiled modules call each other's classes natively, so a mix would fail.
This module imports only the standard library (setup.py runs it before anything is installed).
"""

from __future__ import annotations

import importlib.abc
import importlib.machinery
import importlib.util
import os
import sys
from pathlib import Path

COMPILED = (
    "sim.cluster.cluster",
    "sim.cluster.events",
    "sim.cluster.instance",
    "sim.cluster.link",
    "sim.cluster.request",
    "sim.kvcache.lookup",
    "sim.kvcache.policies",
    "sim.kvcache.store",
    "sim.kvcache.tiers",
    "sim.sched.arrivals",
    "sim.sched.batcher",
    "sim.sched.router",
    "sim.timing.calibrated",
    "sim.timing.comm",
    "sim.timing.interp",
    "sim.timing.roofline",
)
PURE_ENV = "SIM_PURE_PYTHON"
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


def core_state() -> tuple[str, str]:
    """(`compiled` | `source`, why): which core `sim` runs in this process, decided once."""
    built = {m: compiled_path(m) for m in COMPILED}
    if not all(built.values()):
        return "source", "not built (install with `pip install -e .` to compile it)"
    if os.environ.get(PURE_ENV) == "1":
        return "source", f"{PURE_ENV}=1"
    stale = [m for m, so in built.items() if source_path(m).stat().st_mtime > so.stat().st_mtime]
    if stale:
        return "source", f"{stale[0]} changed since the build (rerun `pip install -e .`)"
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
