"""Transfer links: a processor-sharing link for loads on a request's critical path, and a FIFO
write queue for background writes (demotion to host DRAM, persistence to SSD).

`SharedLink` is a deterministic fluid model: n concurrent jobs each move at bw / n. It keeps a
virtual clock V (bytes served to every active job so far), so a job's finish point V_start +
size never changes when others join or leave; only the mapping from V to time does. Events
happen only when a job finishes (one timer for the earliest finish, moved when the set changes,
so a link with a single transfer costs one event and a re-plan leaves no stale one), never per byte
or per interval. Ties finish in submission order.

A link's fixed latency is charged as extra bytes at the link's rate (latency x bw), which keeps
one event per job; under sharing that latency stretches like data, a small, stated error.

`FifoLink` needs no event at all: writes queue in order, so a write's completion time is known
when it is submitted (start = max(now, link free), end = start + latency + bytes / bw).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from sim.cluster.events import EventLoop
from sim.cluster.heap import Keyed, pop, push


class _Job(Keyed):
    """A transfer in flight: it finishes when the virtual clock reaches `key` (ties: lower `seq` first)."""

    __slots__ = ("nbytes", "on_done", "arg")

    def __init__(self, vf: float, seq: int, nbytes: float, on_done: Callable[[Any], None], arg: Any) -> None:
        super().__init__(vf, seq)
        self.nbytes = nbytes
        self.on_done = on_done
        self.arg = arg


class SharedLink:
    """Bandwidth `bw_bytes_per_s` shared equally by the jobs in flight (processor sharing)."""

    __slots__ = (
        "env",
        "name",
        "bw_bytes_per_s",
        "latency_s",
        "bytes_done",
        "jobs_done",
        "_v",
        "_t",
        "_heap",
        "_seq",
        "_timer",
    )

    def __init__(self, env: EventLoop, name: str, bw_bytes_per_s: float, latency_s: float = 0.0) -> None:
        if not bw_bytes_per_s > 0.0:
            raise ValueError(f"link {name}: bandwidth must be > 0, got {bw_bytes_per_s}")
        if latency_s < 0.0:
            raise ValueError(f"link {name}: latency must be >= 0, got {latency_s}")
        self.env = env
        self.name = name
        self.bw_bytes_per_s = float(bw_bytes_per_s)
        self.latency_s = float(latency_s)
        self.bytes_done = 0.0  # payload bytes of finished jobs (for bandwidth time series)
        self.jobs_done = 0
        self._v = 0.0  # virtual clock: bytes served to each active job
        self._t = env.now_s  # time of the last update of _v
        self._heap: list[Keyed] = []  # the _Jobs in flight, by finish point (sim.cluster.heap)
        self._seq = 0
        self._timer = env.timer(self._wake)  # the earliest finish (moved when the set changes)

    def submit(
        self, nbytes: float, on_done: Callable[[Any], None], arg: Any = None, extra_s: float = 0.0
    ) -> None:
        """Start moving `nbytes` now; `on_done(arg)` is called when the last byte arrives. `extra_s`
        (software overhead of this job) is charged like the latency, as bytes at the link's rate."""
        if nbytes < 0.0:
            raise ValueError(f"link {self.name}: negative transfer of {nbytes} bytes")
        heap = self._heap
        now = self.env.now_s
        bw = self.bw_bytes_per_s
        # advance the virtual clock to now (restart it when idle, so it stays small)
        n = len(heap)
        # float(n): the same double Python converts the int to, without a generic (boxed) operation
        self._v = self._v + (now - self._t) * bw / float(n) if n else 0.0
        self._t = now
        self._seq += 1
        push(heap, _Job(self._v + nbytes + (self.latency_s + extra_s) * bw, self._seq, nbytes, on_done, arg))
        self.env.set_timer_after(self._timer, (heap[0].key - self._v) * float(len(heap)) / bw)

    def in_flight(self) -> int:
        """Transfers started and not finished."""
        return len(self._heap)

    def cancel(self, arg: Any) -> int:
        """Drop the transfers whose `on_done` argument is `arg` (a failure ended them:
        sim.cluster.faults); the others share the bandwidth from now on. Returns how many."""
        heap = self._heap
        now = self.env.now_s
        n = len(heap)
        if not n:
            return 0
        self._v = self._v + (now - self._t) * self.bw_bytes_per_s / float(n)
        self._t = now
        kept: list[Keyed] = []
        for item in heap:
            assert isinstance(item, _Job)
            if item.arg is not arg:
                push(kept, item)
        dropped = n - len(kept)
        if dropped:
            self._heap = kept
            if kept:
                self.env.set_timer_after(
                    self._timer, (kept[0].key - self._v) * float(len(kept)) / self.bw_bytes_per_s
                )
        return dropped

    def _wake(self, _arg: Any) -> None:
        heap = self._heap
        if not heap:
            return  # its transfers were cancelled after this wake-up was set
        now = self.env.now_s
        bw = self.bw_bytes_per_s
        v = self._v = self._v + (now - self._t) * bw / float(len(heap))
        self._t = now
        # The head is due by construction; others finishing within rounding of it finish too.
        first = pop(heap)
        assert isinstance(first, _Job)
        self.bytes_done += first.nbytes
        self.jobs_done += 1
        tol = 1e-12 * (v if v > 1.0 else 1.0)
        also: list[_Job] | None = None  # rarely any: made only then
        while heap and heap[0].key <= v + tol:
            job = pop(heap)
            assert isinstance(job, _Job)
            self.bytes_done += job.nbytes
            self.jobs_done += 1
            if also is None:
                also = []
            also.append(job)
        if heap:
            self.env.set_timer_after(self._timer, (heap[0].key - v) * float(len(heap)) / bw)
        first.on_done(first.arg)
        if also is not None:
            for job in also:
                job.on_done(job.arg)


class FifoLink:
    """Writes served one after another at `bw_bytes_per_s`; completion known at submission."""

    __slots__ = ("name", "bw_bytes_per_s", "latency_s", "free_at_s", "bytes_done", "jobs_done")

    def __init__(self, name: str, bw_bytes_per_s: float, latency_s: float = 0.0) -> None:
        if not bw_bytes_per_s > 0.0:
            raise ValueError(f"link {name}: bandwidth must be > 0, got {bw_bytes_per_s}")
        self.name = name
        self.bw_bytes_per_s = float(bw_bytes_per_s)
        self.latency_s = float(latency_s)
        self.free_at_s = 0.0
        self.bytes_done = 0.0
        self.jobs_done = 0

    def submit(self, now_s: float, nbytes: float, extra_s: float = 0.0) -> float:
        """Queue a write of `nbytes` at `now_s` (plus `extra_s` of software overhead); returns the
        time it is complete."""
        start = self.free_at_s if self.free_at_s > now_s else now_s
        self.free_at_s = start + self.latency_s + extra_s + nbytes / self.bw_bytes_per_s
        self.bytes_done += nbytes
        self.jobs_done += 1
        return self.free_at_s

    def backlog_s(self, now_s: float) -> float:
        """Seconds of queued writes still ahead of a write submitted now."""
        return self.free_at_s - now_s if self.free_at_s > now_s else 0.0
