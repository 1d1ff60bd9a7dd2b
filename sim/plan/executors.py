"""Where candidates run: a local process pool (default) or Ray (a local instance or a cluster).

Every candidate is an independent call `fn(task) -> result`; an executor only submits tasks and
hands back finished ones, in whatever order they finish. The search never depends on that order
(see `sim.plan.search`), so every executor gives the same plan. Ray is used as it is:
`ray.init(address="local", num_cpus=N)` starts a local instance, `ray.init(address=...)` joins an existing
cluster, whose nodes need the same `sim` installed and the scenario's files at the same paths (a
worker whose simulator or files differ refuses to run: see `sim.plan.backend.evaluate`).
"""

from __future__ import annotations

import contextlib
import multiprocessing
import os
import socket
import sys
from collections.abc import Callable, Iterator
from concurrent.futures import FIRST_COMPLETED, Future, ProcessPoolExecutor, wait
from typing import Any, Protocol

from sim.errors import InputError
from sim.processes import die_with_parent

RAY_ALLOWED = "local, auto, or the HOST:PORT (ray://HOST:PORT for Ray Client) of a running Ray head"
CONNECT_TIMEOUT_S = 10.0  # a Ray head answers a TCP connect in milliseconds, even across a WAN


class Executor(Protocol):
    """Submit keyed tasks; `next_done` blocks until one finishes and returns (key, result)."""

    def submit(self, key: str, task: Any) -> None: ...

    def next_done(self) -> tuple[str, Any]: ...

    def pending(self) -> int: ...

    def close(self) -> None: ...


class LocalExecutor:
    """`workers` local processes. Spawned, not forked: the parent runs a progress thread."""

    def __init__(self, fn: Callable[[Any], Any], workers: int) -> None:
        self._fn = fn
        self._pool = ProcessPoolExecutor(
            max_workers=workers,
            mp_context=multiprocessing.get_context("spawn"),
            initializer=die_with_parent,
            initargs=(os.getpid(),),
        )
        self._running: dict[Future, str] = {}

    def submit(self, key: str, task: Any) -> None:
        self._running[self._pool.submit(self._fn, task)] = key

    def next_done(self) -> tuple[str, Any]:
        done, _ = wait(self._running, return_when=FIRST_COMPLETED)
        future = min(done, key=lambda f: self._running[f])  # several at once: any fixed pick will do
        key = self._running.pop(future)
        return key, future.result()

    def pending(self) -> int:
        return len(self._running)

    def close(self) -> None:
        """Shut the pool down; simulations still running are abandoned (an error or an interrupt in
        the parent): stop them rather than wait for them."""
        if self._running:
            for proc in list(getattr(self._pool, "_processes", {}).values()):  # no public handle
                proc.terminate()
        self._pool.shutdown(wait=True, cancel_futures=True)


class RayExecutor:
    """Ray tasks of one CPU each. `address` None starts a local instance of `workers` CPUs; else
    it joins the running cluster at `address` (checked first: `ray_reachable`)."""

    def __init__(self, fn: Callable[[Any], Any], workers: int, address: str | None) -> None:
        import ray  # imported here: Ray is optional (`pip install sim[dist]`) and slow to import

        self._ray = ray
        if address is None:
            # "local": a new instance even where another Ray instance runs on this machine (without it,
            # ray.init joins that one and refuses num_cpus)
            ray.init(address="local", num_cpus=workers, include_dashboard=False, log_to_driver=False,
                     logging_level="WARNING")  # fmt: skip
        else:
            ray_reachable(address)
            try:
                with _stderr_silenced():  # Ray's core logs every retry there: the error says it once
                    ray.init(address=address, log_to_driver=False, logging_level="WARNING")
            except (ConnectionError, RuntimeError) as err:
                raise InputError(f"cannot join a Ray cluster at {address}: {err}", where="--ray",
                                 allowed=RAY_ALLOWED) from None  # fmt: skip
        self._remote = ray.remote(num_cpus=1, max_retries=0)(fn)
        self._running: dict[Any, str] = {}

    def submit(self, key: str, task: Any) -> None:
        self._running[self._remote.remote(task)] = key

    def next_done(self) -> tuple[str, Any]:
        ready, _ = self._ray.wait(list(self._running), num_returns=1)
        ref = ready[0]
        key = self._running.pop(ref)
        return key, self._ray.get(ref)

    def pending(self) -> int:
        return len(self._running)

    def close(self) -> None:
        for ref in self._running:
            self._ray.cancel(ref, force=True)
        self._running.clear()
        self._ray.shutdown()


@contextlib.contextmanager
def _stderr_silenced() -> Iterator[None]:
    """File descriptor 2 to /dev/null for the block (C++ libraries write there directly)."""
    sys.stderr.flush()
    saved = os.dup(2)
    try:
        with open(os.devnull, "w") as null:
            os.dup2(null.fileno(), 2)
        yield
    finally:
        os.dup2(saved, 2)
        os.close(saved)


def ray_reachable(address: str) -> None:
    """Fail at once, in one line, when nothing listens at `address`: `ray.init` would retry for
    minutes, logging as it goes. `auto` (RAY_ADDRESS, or the cluster started on this machine) is
    left to Ray, which answers at once when there is none."""
    if address == "auto":
        return
    host, sep, port = address.removeprefix("ray://").rpartition(":")
    if not sep or not host or not port.isdigit():
        raise InputError("not a Ray address", where="--ray", value=address, allowed=RAY_ALLOWED)
    try:
        socket.create_connection((host.strip("[]"), int(port)), timeout=CONNECT_TIMEOUT_S).close()
    except OSError as err:
        reason = (err.strerror or str(err) or type(err).__name__).lower()
        raise InputError(f"cannot reach a Ray cluster at {address} ({reason})", where="--ray",
                         allowed=RAY_ALLOWED) from None  # fmt: skip


def make_executor(fn: Callable[[Any], Any], workers: int, ray: str | None) -> Executor:
    """`ray` None: local processes; "local": a local Ray instance; anything else: a Ray address."""
    if ray is None:
        return LocalExecutor(fn, workers)
    return RayExecutor(fn, workers, None if ray == "local" else ray)
