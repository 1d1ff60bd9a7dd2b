"""The global router of a fleet: which cell each session goes to (`cluster.cells.router`).

A session goes whole to one cell, decided once, when the trace is split (sim.fleet.split): the cells
are then independent simulations, which is what lets them run in parallel and merge exactly. The
router sees sessions in start order (the trace's order) and decides from what a global router in
front of real cells could know at the session's start, never from the session's own future requests:

- hash: a stable 64-bit mix (splitmix64's finaliser) of the session id, modulo the cells: the same
  session goes to the same cell in every run and every process (Python's `hash()` of a string is
  salted per process, so it is not used).
- least_loaded: the cell with the fewest requests in the previous `interval_s` (counted by the
  trace's arrival times: in closed loop the simulated arrivals shift by the queueing, which the
  router cannot see before the cells run), plus the requests the sessions it was already sent in
  this interval are expected to bring (the previous interval's requests per session started); ties
  go to the lowest cell.
- tenant: the cell `pins` names for the session's tenant; other tenants (and none) by hash.
"""

from __future__ import annotations

import numpy as np

from sim.config.cluster import Cells


def session_hash(session_id: np.ndarray) -> np.ndarray:
    """splitmix64's finaliser of each id (uint64): consecutive ids land far apart."""
    with np.errstate(over="ignore"):
        z = session_id.astype(np.uint64) + np.uint64(0x9E3779B97F4A7C15)
        z = (z ^ (z >> np.uint64(30))) * np.uint64(0xBF58476D1CE4E5B9)
        z = (z ^ (z >> np.uint64(27))) * np.uint64(0x94D049BB133111EB)
        return z ^ (z >> np.uint64(31))


class CellRouter:
    """Assigns sessions to cells, batch after batch, in the trace's session order (module doc)."""

    def __init__(self, cells: Cells) -> None:
        self.cells = cells
        self._interval = -1  # the interval whose sessions are being assigned (least_loaded)
        self._previous = np.zeros(cells.count)  # requests per cell in the interval before it
        self._sent = np.zeros(cells.count)  # sessions sent per cell in this interval
        self._per_session = 1.0  # requests a session brings, from the previous interval
        self._arrivals: dict[int, np.ndarray] = {}  # interval -> requests per cell (by trace time)
        self._started: dict[int, int] = {}  # interval -> sessions started

    def assign(
        self,
        session_id: np.ndarray,
        start_s: np.ndarray,
        tenant: list[str | None],
        row_session: np.ndarray,
        row_arrival_s: np.ndarray,
    ) -> np.ndarray:
        """The cell of each session of a batch (arrays per session; `row_session`: each request's
        session index in the batch, `row_arrival_s` its trace arrival time)."""
        count = self.cells.count
        router = self.cells.router
        hashed = (session_hash(session_id) % np.uint64(count)).astype(np.int64)
        if router == "hash":
            return hashed
        if router == "tenant":
            pins = self.cells.pins
            pinned = np.array([pins.get(t, -1) if t is not None else -1 for t in tenant], dtype=np.int64)
            return np.where(pinned >= 0, pinned, hashed)
        return self._least_loaded(start_s, row_session, row_arrival_s)

    def _least_loaded(
        self, start_s: np.ndarray, row_session: np.ndarray, row_arrival_s: np.ndarray
    ) -> np.ndarray:
        interval_s = self.cells.interval_s
        session_interval = (start_s // interval_s).astype(np.int64)
        cell = np.empty(len(start_s), dtype=np.int64)
        # interval by interval: the requests of every session of earlier intervals are counted before a
        # session of a later interval is assigned (all of them arrive after their session's start)
        bounds = np.flatnonzero(np.diff(session_interval)) + 1
        for lo, hi in zip([0, *bounds], [*bounds, len(start_s)], strict=True):
            self._enter(int(session_interval[lo]))
            for i in range(lo, hi):
                c = int(np.argmin(self._previous + self._sent * self._per_session))
                cell[i] = c
                self._sent[c] += 1
            self._started[self._interval] = self._started.get(self._interval, 0) + hi - lo
            rows = np.flatnonzero((row_session >= lo) & (row_session < hi))
            self._count(cell[row_session[rows]], row_arrival_s[rows])
        return cell

    def _enter(self, interval: int) -> None:
        if interval == self._interval:
            return
        previous = self._arrivals.get(interval - 1)
        self._previous = previous.copy() if previous is not None else np.zeros(self.cells.count)
        started = self._started.get(interval - 1, 0)
        if started and previous is not None:
            self._per_session = float(previous.sum()) / started
        self._sent = np.zeros(self.cells.count)
        self._interval = interval
        for old in [k for k in self._arrivals if k < interval - 1]:
            del self._arrivals[old]

    def _count(self, cell: np.ndarray, arrival_s: np.ndarray) -> None:
        interval = (arrival_s // self.cells.interval_s).astype(np.int64)
        for k in np.unique(interval):
            sel = interval == k
            into = self._arrivals.setdefault(int(k), np.zeros(self.cells.count))
            into += np.bincount(cell[sel], minlength=self.cells.count)
