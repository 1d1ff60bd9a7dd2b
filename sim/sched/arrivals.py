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

The trace is read a row batch at a time, each batch validated by sim.workload's TraceValidator
(the checks `iter_sessions` makes), and turned into Python lists column by column: per-session
tables would cost more than the simulation of their requests.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pyarrow as pa

from sim.cluster.cluster import Cluster
from sim.cluster.events import call_at
from sim.cluster.request import Request, lineage_key, shared_key
from sim.errors import InputError
from sim.workload.io import file_format, open_parquet
from sim.workload.schema import (
    ARRIVAL_ABSOLUTE,
    FORMAT_VERSION,
    OPTIONAL_COLUMNS,
    REQUEST_SCHEMA,
    complete_columns,
)
from sim.workload.validate import TraceValidator

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
BATCH_ROWS = 65_536


def iter_trace_sessions(path: str | Path, batch_rows: int = BATCH_ROWS) -> Iterator[tuple[int, float, list]]:
    """(session_id, start_s, rows) in file order; rows are tuples in COLUMNS order."""
    pf = open_parquet(path)
    if file_format(pf) not in (None, FORMAT_VERSION):
        raise InputError(
            "not a request trace", file=str(path), where="metadata format", allowed=FORMAT_VERSION
        )
    schema = pa.schema(
        [f for f in REQUEST_SCHEMA if f.name != "block_hashes" and f.name not in OPTIONAL_COLUMNS]
    )
    missing = [n for n in schema.names if n not in pf.schema_arrow.names]
    if missing:
        raise InputError("missing column", file=str(path), where=f"column {missing[0]}",
                         allowed=f"the columns of {FORMAT_VERSION}")  # fmt: skip
    validator = TraceValidator(str(path))
    sid: Any = None  # no session yet
    start = 0.0
    rows: list = []
    for batch in pf.iter_batches(batch_size=batch_rows, columns=schema.names, use_threads=False):
        table = pa.Table.from_batches([batch])
        try:
            table = table.cast(schema, safe=True)
        except (pa.ArrowInvalid, pa.ArrowNotImplementedError) as err:
            raise InputError(f"column types differ from {FORMAT_VERSION} ({err})", file=str(path)) from None
        validator.check(complete_columns(table))
        for row in zip(*(table.column(name).to_pylist() for name in COLUMNS), strict=True):
            if row[0] != sid:
                if rows:
                    yield sid, start, rows
                sid, start, rows = row[0], row[1], []
            rows.append(row)
    if rows:
        yield sid, start, rows


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
        env: Any,
        sessions: Iterator[tuple[int, float, list]],
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
        self._sessions = sessions
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
        for sid, start, rows in self._sessions:
            if start >= self.horizon_s:
                break
            if start > env.now:
                yield env.timeout(start - env.now)
            self._load(sid, rows)
            if self.max_requests is not None and self.scheduled >= self.max_requests:
                break
        self.loaded_all = True
        self._check_idle()

    def _load(self, sid: int, rows: list) -> None:
        state = _Session(sid)
        agent_of: dict[int, int] = {}
        limit = self.max_requests
        closed = self.closed_loop
        session_of = self._session_of
        children = self._children
        for (_sid, _start, rid, index, agent, arrival, at_s, think_s, dep, inp, out, parent, prefix, shared,
             shared_tokens, image_count, image_tokens) in rows:  # fmt: skip
            if limit is not None and self.scheduled >= limit:
                break
            parent_agent = agent_of.get(parent)
            req = Request(
                rid,
                sid,
                index,
                agent,
                lineage_key(sid, agent),
                lineage_key(sid, parent_agent) if parent_agent is not None else None,
                shared_key(shared) if shared >= 0 else None,
                at_s,
                inp,
                out,
                prefix if parent_agent is not None else 0,
                shared_tokens if shared >= 0 else 0,
                image_tokens,
                image_count,
            )
            agent_of[rid] = agent
            self.scheduled += 1
            state.pending += 1
            session_of[rid] = state
            if closed and arrival != ARRIVAL_ABSOLUTE and dep in agent_of and dep != rid:
                children.setdefault(dep, []).append((req, think_s))
            else:
                self._schedule(req, at_s)

    # --- arriving ---

    def _schedule(self, req: Request, time_s: float) -> None:
        if time_s >= self.horizon_s:
            self._drop(req)
            return
        req.arrival_s = time_s
        self._waiting += 1
        call_at(self.env, time_s, self._arrive, req)

    def _arrive(self, event: Any) -> None:
        req = event._value
        self._waiting -= 1
        req.measured = req.arrival_s >= self.warmup_s
        self.cluster.dispatch(req)

    def _drop(self, req: Request) -> None:
        """`req` will never arrive; neither will the requests that wait on it."""
        self.not_arrived += 1
        self.scheduled -= 1
        state = self._session_of.pop(req.request_id)
        state.pending -= 1
        for child, _think in self._children.pop(req.request_id, ()):
            self._drop(child)
        self._session_check(state)

    def on_terminal(self, req: Request) -> None:
        """`req` completed or was rejected: its follow-ups arrive after their think time."""
        now = self.env._now
        kids = self._children.pop(req.request_id, None)
        if kids is not None:
            for child, think in kids:
                self._schedule(child, now + think)
        state = self._session_of.pop(req.request_id)
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
        env: Any,
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
                if self._may_issue(self.env.now):
                    self._issue(self._new_session(), self.env.now)
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
        call_at(self.env, time_s, self._arrive, req)

    def _poisson(self):
        env = self.env
        mean_gap_s = 1.0 / self.request_rate_per_s
        while True:
            time_s = env.now + float(self.rng.exponential(mean_gap_s))
            if not self._may_issue(time_s):
                break
            yield env.timeout(time_s - env.now)
            waiting = self._waiting_sessions
            self._issue(waiting.popleft() if waiting else self._new_session(), env.now)
        self._stop()

    def _stop(self) -> None:
        """No request will be issued any more."""
        self.loaded_all = True
        self._check_idle()

    def on_terminal(self, req: Request) -> None:
        now = self.env._now
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
