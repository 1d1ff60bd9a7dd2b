"""Independent jobs in spawned worker processes, with messages back while they run.

`run_jobs(fn, jobs, workers, on_message)` calls `fn(job, send)` for each job, at most `workers` at a
time, each in a fresh spawned process (a clean heap: nothing shared with the parent or another
job, so a job gives the same result as it would alone); `send(message)` in the job reaches
`on_message(job_index, message)` in the parent while the job runs (progress). The results come
back in job order. The first job that raises stops the others, and its exception is raised in the
parent; a worker that dies without a result (killed, out of memory) raises RuntimeError naming
its job. Workers end with the parent however the parent ends (`die_with_parent`).
"""

from __future__ import annotations

import ctypes
import multiprocessing
import os
import pickle
import queue
import resource
import signal
import sys
import threading
import time
import traceback
from collections.abc import Callable, Sequence
from typing import Any

Send = Callable[[Any], None]
POLL_S = 0.5  # how often the parent looks for a worker that died without a word


def peak_rss_bytes(*, include_self: bool = True) -> int:
    """The peak resident set size of the largest of this process's ended children (workers are
    joined when they end), and of this process unless `include_self` is False: a maximum over
    processes, not a sum (getrusage's ru_maxrss, KiB on Linux)."""
    peak_kib = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss
    if include_self:
        peak_kib = max(peak_kib, resource.getrusage(resource.RUSAGE_SELF).ru_maxrss)
    return peak_kib * 1024


def die_with_parent(parent_pid: int) -> None:
    """Worker initialiser: end this process when its parent ends, however the parent ends (SIGKILL
    included), so no simulation runs on orphaned. Linux: the kernel's parent-death signal; elsewhere
    a thread that watches the parent id."""
    if sys.platform.startswith("linux"):
        PR_SET_PDEATHSIG = 1
        ctypes.CDLL(None, use_errno=True).prctl(PR_SET_PDEATHSIG, int(signal.SIGKILL))
    else:  # pragma: no cover - CI runs Linux

        def watch() -> None:
            while os.getppid() == parent_pid:
                time.sleep(1.0)
            os._exit(1)

        threading.Thread(target=watch, daemon=True).start()
    if os.getppid() != parent_pid:  # the parent ended before the signal was armed
        os._exit(1)


def _worker(fn: Callable[[Any, Send], Any], job: Any, index: int, out: Any, parent_pid: int) -> None:
    die_with_parent(parent_pid)

    def send(message: Any) -> None:
        out.put(("message", index, message))

    try:
        result = fn(job, send)
    except BaseException as err:  # noqa: BLE001 - every failure goes back to the parent, which raises it
        try:
            pickle.dumps(err)
        except Exception:  # an exception that cannot travel: its text does
            err = RuntimeError("".join(traceback.format_exception(err)))
        out.put(("error", index, err))
        return
    out.put(("result", index, result))


def run_jobs(
    fn: Callable[[Any, Send], Any],
    jobs: Sequence[Any],
    workers: int,
    on_message: Callable[[int, Any], None] | None = None,
) -> list[Any]:
    """`[fn(job, send) for job in jobs]`, `workers` processes at a time (module doc)."""
    ctx = multiprocessing.get_context("spawn")
    inbox = ctx.Queue()
    results: list[Any] = [None] * len(jobs)
    running: dict[int, Any] = {}
    started = finished = 0
    try:
        while finished < len(jobs):
            while started < len(jobs) and len(running) < workers:
                proc = ctx.Process(target=_worker, args=(fn, jobs[started], started, inbox, os.getpid()),
                                   name=f"sim-job-{started}", daemon=True)  # fmt: skip
                proc.start()
                running[started] = proc
                started += 1
            try:
                kind, index, payload = inbox.get(timeout=POLL_S)
            except queue.Empty:
                for index, proc in running.items():
                    if proc.exitcode not in (None, 0):
                        raise RuntimeError(
                            f"{jobs[index]}: its process died (exit code {proc.exitcode})"
                        ) from None
                continue
            if kind == "message":
                if on_message is not None:
                    on_message(index, payload)
            elif kind == "error":
                raise payload
            else:
                results[index] = payload
                running.pop(index).join()
                finished += 1
    finally:
        for proc in running.values():
            proc.terminate()
        for proc in running.values():
            proc.join()
        inbox.close()
    return results
