"""User SimPy processes in a run (issue 31; docs/simpy_and_extensions.md).

A scenario's `extensions` (sim.config.extensions) name functions `f(env, ops, **params)`: each is
called once, before the simulation starts, with the run's `simpy.Environment` and an `Operations`
(sim.extensions.ops) on the cluster, and may start SimPy processes on `env`. A run with
extensions uses the SimPy loop (sim.cluster.simpy_loop). What an extension returns, if it has a
`summary()` method, adds a block to the model's summary under `extensions.<entry>`.

Shipped: `sim.extensions.failures` (instance and node failures) and `sim.extensions.autoscaler`
(decode instances added and removed with the load).
"""

from __future__ import annotations

import importlib
import inspect
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from sim.config.extensions import ENTRY_POINT_FORM, Extension
from sim.errors import InputError
from sim.extensions.ops import Operations

LOOPS = ("native", "simpy")


def event_loop_of(scn, loop: str | None) -> str:
    """The loop a run uses: `loop` (the CLI's `--loop`) or the scenario's `event_loop`; SimPy
    whenever the scenario has extensions (they are SimPy processes)."""
    if loop is not None and loop not in LOOPS:
        raise InputError("unknown event loop", where="--loop", value=loop, allowed=LOOPS)
    if scn.extensions:
        if loop == "native":
            raise InputError(
                "a scenario with extensions runs on the SimPy loop",
                file=scn.source_file,
                where="--loop",
                value=loop,
                allowed="simpy (or no --loop)",
            )
        return "simpy"
    return loop if loop is not None else scn.event_loop


@dataclass(frozen=True)
class Loaded:
    entry: Extension
    fn: Callable[..., Any]


def load_extensions(scn) -> list[Loaded]:
    """Import every extension's function; one clear error for the first that does not load."""
    out = []
    for i, ext in enumerate(scn.extensions):
        where = f"extensions[{i}]" + (".use" if ext.params else "")

        def bad(message: str, ext: Extension = ext, where: str = where) -> InputError:
            return InputError(
                message, file=scn.source_file, where=where, value=ext.use, allowed=ENTRY_POINT_FORM
            )

        module_name, _, fn_name = ext.use.partition(":")
        try:
            module = importlib.import_module(module_name)
        except Exception as exc:  # a missing module, or one whose own code fails: one line either way
            raise bad(f"module {module_name} does not import ({type(exc).__name__}: {exc})") from None
        fn = getattr(module, fn_name, None)
        if not callable(fn):
            raise bad(f"module {module_name} has no function {fn_name}")
        try:
            inspect.signature(fn).bind(None, None, **ext.params)
        except TypeError as exc:
            raise InputError(
                f"{ext.use} does not take these params ({exc})",
                file=scn.source_file,
                where=f"extensions[{i}].params",
                value=ext.params,
                allowed=f"the keyword arguments of {ext.use}{inspect.signature(fn)}",
            ) from None
        out.append(Loaded(ext, fn))
    return out


class Started:
    """The extensions of one model's run: their handles, and what they add to its summary."""

    def __init__(self, ops: Operations, handles: list[tuple[str, Any]]) -> None:
        self.ops = ops
        self.handles = handles

    def summary(self, model_summary: dict) -> dict:
        out: dict = {"operations": self.ops.summary(model_summary)}
        for name, handle in self.handles:
            if hasattr(handle, "summary"):
                out[name] = handle.summary(model_summary)
        return out


def start_extensions(scn, sim, seed: int) -> Started:
    """Call each extension with the run's SimPy environment and the operations on `sim`'s cluster."""
    ops = Operations(sim, seed, slo_ttft_s=scn.slo.ttft_s, slo_tpot_s=scn.slo.tpot_s)
    handles = [(ext.entry.use, ext.fn(ops.env, ops, **ext.entry.params)) for ext in load_extensions(scn)]
    return Started(ops, handles)
