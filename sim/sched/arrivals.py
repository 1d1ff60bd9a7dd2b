"""Arrivals: streams the trace in row batches (bounded memory) and makes each request arrive
when the replay mode says.

- open loop: every request at its `arrival_time_s`.
- closed loop (the trace's arrival rule, sim.workload.schema): `absolute` rows at
  `arrival_time_s`; `think` rows `think_time_s` after the simulated end (completion or
  rejection) of `depends_on_request_id`. A dependency outside the session's earlier rows is
  treated as absolute.

A benchmark client (`BenchmarkArrivals`, the scenario's `workload.benchmark`) makes its requests
as it goes instead of reading them: fixed-shape requests (lengths optionally jittered) in sessions
of `turns_per_session` turns, each turn after the first reusing `prefix_reuse_frac` of its input
from the previous turn's context (its KV, wherever the cache tiers still hold it).
- closed loop: `concurrency` requests are in flight from time 0; when one ends (completed or
  rejected) the next starts `think_s` later (at once by default, so the count never drops), the
  next turn of the same session, or the first turn of a new one;
- open loop: Poisson arrivals at `request_rate_per_s`; each continues the session that has waited
  longest since its previous turn ended, or starts a new session when none waits.
No request arrives at or after `horizon_s` or past `max_requests`.

Sessions are loaded when the clock reaches their start (rows are sorted by session start), so
only started sessions' future requests are held. Requests arriving at or after `horizon_s`,
past `max_requests`, or depending on one of those, never arrive (`not_arrived` counts them).
A session is complete when all its arriving requests have ended; `on_session` gets
(session_id, first arrival, last end, requests, rejected, largest context in tokens).

The trace is read by sim.workload.io (the reader of every command: the same casts and checks),
a batch of whole sessions at a time, and each batch's columns turned into Python lists
(`TraceColumns`) that the loader indexes row by row: per-row or per-session objects would cost
more than the simulation of their requests.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow.compute as pc

from sim.cluster.cluster import Cluster
from sim.cluster.events import EventLoop
from sim.cluster.request import Request, lineage_key, shared_key
from sim.workload.io import iter_session_batches
from sim.workload.schema import ARRIVAL_ABSOLUTE

COLUMNS = (
    "session_id",
    "session_start_s",
    "request_id",
    "request_index",
    "agent_id",
    "arrival",
    "arrival_time_s",
    "think_time_s",
    "depends_on_request_id",
    "input_tokens",
    "output_tokens",
    "prefix_parent_request_id",
    "prefix_tokens",
    "shared_prefix_id",
    "shared_prefix_tokens",
    "image_count",
    "image_tokens",
)
BATCH_ROWS = 16_384


class TraceColumns:
    """Whole sessions of a trace, column by column as Python lists (what compiled code indexes
    fastest); `bounds[k]:bounds[k + 1]` are the rows of the k-th session."""

    def __init__(self, table: Any) -> None:
        def ints(name: str) -> list[int]:
            return table.column(name).to_numpy().tolist()

        def floats(name: str) -> list[float]:
            return table.column(name).to_numpy().tolist()

        sid = table.column("session_id").to_numpy()
        self.bounds: list[int] = [0, *(np.flatnonzero(sid[1:] != sid[:-1]) + 1).tolist(), len(sid)]
        self.session_id: list[int] = sid.tolist()
        self.session_start_s = floats("session_start_s")
        self.request_id = ints("request_id")
        self.request_index = ints("request_index")
        self.agent_id = ints("agent_id")
        self.absolute: list[bool] = pc.equal(table.column("arrival"), ARRIVAL_ABSOLUTE).to_pylist()
        self.arrival_time_s = floats("arrival_time_s")
        self.think_time_s = floats("think_time_s")
        self.depends_on_request_id = ints("depends_on_request_id")
        self.input_tokens = ints("input_tokens")
        self.output_tokens = ints("output_tokens")
        self.prefix_parent_request_id = ints("prefix_parent_request_id")
        self.prefix_tokens = ints("prefix_tokens")
        self.shared_prefix_id = ints("shared_prefix_id")
        self.shared_prefix_tokens = ints("shared_prefix_tokens")
        self.image_count = ints("image_count")
        self.image_tokens = ints("image_tokens")


def iter_trace_columns(
    path: str | Path, batch_rows: int = BATCH_ROWS, *, trusted: bool = False
) -> Iterator[TraceColumns]:
    """The trace's sessions in file order, a batch of whole sessions at a time, read and validated
    by sim.workload.io (the reader every command uses); `trusted`: validated already (a run's
    preflight, or the writer of a generated trace), so only read and cast."""
    for table in iter_session_batches(path, batch_rows, list(COLUMNS), trusted=trusted):
        yield TraceColumns(table)


class _Session:
    __slots__ = ("sid", "pending", "first_s", "last_s", "count", "rejected", "max_context_tokens")

    def __init__(self, sid: int) -> None:
        self.sid = sid
        self.pending = 0  # requests that will still arrive or are in the system
        self.first_s = float("inf")
        self.last_s = 0.0
        self.count = 0
        self.rejected = 0
        self.max_context_tokens = 0


class Arrivals:
    def __init__(
        self,
        env: EventLoop,
        trace: Iterator[TraceColumns],
        cluster: Cluster,
        *,
        closed_loop: bool,
        warmup_s: float,
        horizon_s: float | None,
        max_requests: int | None,
        on_session: Callable[[int, float, float, int, int, int], None],
        on_idle: Callable[[], None],
    ) -> None:
        self.env = env
        self._trace = trace
        self.cluster = cluster
        cluster.arrivals = self
        self.closed_loop = closed_loop
        self.warmup_s = warmup_s
        self.horizon_s = float("inf") if horizon_s is None else horizon_s
        self.max_requests = max_requests
        self.on_session = on_session
        self.on_idle = on_idle
        self.scheduled = 0  # requests that will arrive (scheduled or waiting on a dependency)
        self.not_arrived = 0
        self.loaded_all = False
        self._children: dict[int, list[tuple[Request, float]]] = {}  # request id -> [(request, think_s)]
        self._session_of: dict[int, _Session] = {}  # request id -> session, while the request lives
        self._waiting = 0  # arrivals scheduled, not yet happened

    def start(self) -> None:
        self.env.process(self._loader())

    def done(self) -> bool:
        return self.loaded_all and self._waiting == 0 and not self._children and self.cluster.in_flight == 0

    # --- loading ---

    def _loader(self):
        env = self.env
        for cols in self._trace:
            bounds = cols.bounds
            for k in range(len(bounds) - 1):
                lo = bounds[k]
                start = cols.session_start_s[lo]
                if start >= self.horizon_s or self._full():
                    self._stop_loading()
                    return
                if start > env.now_s:
                    yield env.timeout(start - env.now_s)
                self._load(cols, lo, bounds[k + 1])
        self._stop_loading()

    def _full(self) -> bool:
        return self.max_requests is not None and self.scheduled >= self.max_requests

    def _stop_loading(self) -> None:
        self.loaded_all = True
        self._check_idle()

    def _load(self, cols: TraceColumns, lo: int, hi: int) -> None:
        """Make the requests of rows lo..hi-1 (one session) and schedule those that do not wait."""
        sid = cols.session_id[lo]
        state = _Session(sid)
        agent_of: dict[int, int] = {}
        limit = self.max_requests
        closed = self.closed_loop
        session_of = self._session_of
        children = self._children
        for i in range(lo, hi):
            if limit is not None and self.scheduled >= limit:
                break
            rid = cols.request_id[i]
            agent = cols.agent_id[i]
            shared = cols.shared_prefix_id[i]
            at_s = cols.arrival_time_s[i]
            parent_agent = agent_of.get(cols.prefix_parent_request_id[i])
            req = Request(
                rid,
                sid,
                cols.request_index[i],
                agent,
                lineage_key(sid, agent),
                lineage_key(sid, parent_agent) if parent_agent is not None else None,
                shared_key(shared) if shared >= 0 else None,
                at_s,
                cols.input_tokens[i],
                cols.output_tokens[i],
                cols.prefix_tokens[i] if parent_agent is not None else 0,
                cols.shared_prefix_tokens[i] if shared >= 0 else 0,
                cols.image_tokens[i],
                cols.image_count[i],
            )
            agent_of[rid] = agent
            self.scheduled += 1
            state.pending += 1
            session_of[rid] = state
            dep = cols.depends_on_request_id[i]
            if closed and not cols.absolute[i] and dep in agent_of and dep != rid:
                children.setdefault(dep, []).append((req, cols.think_time_s[i]))
            else:
                self._schedule(req, at_s)

    # --- arriving ---

    def _schedule(self, req: Request, time_s: float) -> None:
        if time_s >= self.horizon_s:
            self._drop(req)
            return
        req.arrival_s = time_s
        self._waiting += 1
        self.env.call_at(time_s, self._arrive, req)

    def _arrive(self, req: Request) -> None:
        self._waiting -= 1
        req.measured = req.arrival_s >= self.warmup_s
        self.cluster.dispatch(req)

    def _drop(self, req: Request) -> None:
        """`req` will never arrive; neither will the requests that wait on it."""
        self.not_arrived += 1
        self.scheduled -= 1
        state = _take(self._session_of, req.request_id)
        state.pending -= 1
        kids = self._children.get(req.request_id)
        if kids is not None:
            del self._children[req.request_id]
            for child, _think in kids:
                self._drop(child)
        self._session_check(state)

    def on_terminal(self, req: Request) -> None:
        """`req` completed or was rejected: its follow-ups arrive after their think time."""
        now = self.env.now_s
        kids = self._children.get(req.request_id)
        if kids is not None:
            del self._children[req.request_id]
            for child, think in kids:
                self._schedule(child, now + think)
        state = _take(self._session_of, req.request_id)
        state.pending -= 1
        state.count += 1
        if req.status == "rejected":
            state.rejected += 1
        ctx = req.input_tokens + req.output_tokens
        if ctx > state.max_context_tokens:
            state.max_context_tokens = ctx
        if req.arrival_s < state.first_s:
            state.first_s = req.arrival_s
        state.last_s = now
        if state.pending == 0:
            self.on_session(
                state.sid, state.first_s, now, state.count, state.rejected, state.max_context_tokens
            )
            if self.loaded_all:
                self._check_idle()

    def _session_check(self, state: _Session) -> None:
        if state.pending == 0 and state.count:
            self.on_session(
                state.sid, state.first_s, state.last_s, state.count, state.rejected, state.max_context_tokens
            )

    def _check_idle(self) -> None:
        if self.done():
            self.on_idle()


def _take(sessions: dict[int, _Session], request_id: int) -> _Session:
    """Remove and return a request's session (get + del: compiled primitives, where dict.pop is
    a generic method call)."""
    state = sessions[request_id]
    del sessions[request_id]
    return state


class _BenchSession:
    __slots__ = ("sid", "turns", "context_tokens", "first_s", "count", "rejected", "max_context_tokens")

    def __init__(self, sid: int) -> None:
        self.sid = sid
        self.turns = 0  # turns issued so far
        self.context_tokens = 0  # the previous turn's input + output: what the next turn can reuse
        self.first_s = float("inf")
        self.count = 0
        self.rejected = 0
        self.max_context_tokens = 0


class BenchmarkArrivals(Arrivals):
    """The benchmark client of the module doc; `rng` is a numpy Generator (lengths, open-loop gaps)."""

    def __init__(
        self,
        env: EventLoop,
        cluster: Cluster,
        *,
        isl_tokens: int,
        osl_tokens: int,
        prefix_reuse_frac: float,
        concurrency: int,
        request_rate_per_s: float,
        think_s: float,
        length_jitter_frac: float,
        turns_per_session: int,
        rng: Any,
        warmup_s: float,
        horizon_s: float | None,
        max_requests: int | None,
        on_session: Callable[[int, float, float, int, int, int], None],
        on_idle: Callable[[], None],
    ) -> None:
        super().__init__(
            env,
            iter(()),
            cluster,
            closed_loop=concurrency > 0,
            warmup_s=warmup_s,
            horizon_s=horizon_s,
            max_requests=max_requests,
            on_session=on_session,
            on_idle=on_idle,
        )
        self.isl_tokens = isl_tokens
        self.osl_tokens = osl_tokens
        self.prefix_reuse_frac = prefix_reuse_frac
        self.concurrency = concurrency  # 0: open loop
        self.request_rate_per_s = request_rate_per_s
        self.think_s = think_s
        self.jitter = length_jitter_frac
        self.turns_per_session = turns_per_session
        self.rng = rng
        self._next_rid = 0
        self._next_sid = 0
        self._active = 0  # closed loop: client slots still issuing
        self._of: dict[int, _BenchSession] = {}  # request id -> its session, while the request lives
        self._waiting_sessions: deque[_BenchSession] = deque()  # open loop: sessions between turns

    def start(self) -> None:
        if self.closed_loop:
            for _ in range(self.concurrency):
                if self._may_issue(self.env.now_s):
                    self._issue(self._new_session(), self.env.now_s)
                    self._active += 1
            if self._active == 0:
                self._stop()
        else:
            self.env.process(self._poisson())

    def _may_issue(self, time_s: float) -> bool:
        return time_s < self.horizon_s and (self.max_requests is None or self.scheduled < self.max_requests)

    def _new_session(self) -> _BenchSession:
        sess = _BenchSession(self._next_sid)
        self._next_sid += 1
        return sess

    def _length(self, nominal: int) -> int:
        if self.jitter <= 0.0:
            return nominal
        u = float(self.rng.uniform(-self.jitter, self.jitter))
        return max(1, int(round(nominal * (1.0 + u))))

    def _issue(self, sess: _BenchSession, time_s: float) -> None:
        inp = self._length(self.isl_tokens)
        out = self._length(self.osl_tokens)
        turn = sess.turns
        lineage = lineage_key(sess.sid, 0)
        prefix = 0
        if turn > 0:
            prefix = min(int(round(self.prefix_reuse_frac * inp)), sess.context_tokens)
        rid = self._next_rid
        self._next_rid += 1
        req = Request(rid, sess.sid, turn, 0, lineage, lineage if turn > 0 else None, None,
                      time_s, inp, out, prefix, 0, 0, 0)  # fmt: skip
        sess.turns = turn + 1
        self._of[rid] = sess
        self.scheduled += 1
        self._waiting += 1
        self.env.call_at(time_s, self._arrive, req)

    def _poisson(self):
        env = self.env
        mean_gap_s = 1.0 / self.request_rate_per_s
        while True:
            time_s = env.now_s + float(self.rng.exponential(mean_gap_s))
            if not self._may_issue(time_s):
                break
            yield env.timeout(time_s - env.now_s)
            waiting = self._waiting_sessions
            self._issue(waiting.popleft() if waiting else self._new_session(), env.now_s)
        self._stop()

    def _stop(self) -> None:
        """No request will be issued any more."""
        self.loaded_all = True
        self._check_idle()

    def on_terminal(self, req: Request) -> None:
        now = self.env.now_s
        sess = self._of.pop(req.request_id)
        sess.count += 1
        if req.status == "rejected":
            sess.rejected += 1
        ctx = req.input_tokens + req.output_tokens
        sess.context_tokens = ctx
        if ctx > sess.max_context_tokens:
            sess.max_context_tokens = ctx
        if req.arrival_s < sess.first_s:
            sess.first_s = req.arrival_s
        ended = sess.turns >= self.turns_per_session
        if ended:
            self.on_session(sess.sid, sess.first_s, now, sess.count, sess.rejected, sess.max_context_tokens)
        if self.closed_loop:
            next_s = now + self.think_s
            if self._may_issue(next_s):
                self._issue(self._new_session() if ended else sess, next_s)
            else:
                self._active -= 1
                if self._active == 0:
                    self._stop()
        else:
            if not ended:
                self._waiting_sessions.append(sess)
            if self.loaded_all:
                self._check_idle()
