"""Arrivals: streams the trace in row batches (bounded memory) and makes each request arrive
when the replay mode says.

- open loop: every request at its `arrival_time_s`.
- closed loop (the trace's arrival rule, sim.workload.schema): `absolute` rows at
  `arrival_time_s`; `think` rows `think_time_s` after the simulated end (completion or
  rejection) of `depends_on_request_id`. A dependency outside the session's earlier rows is
  treated as absolute.

A benchmark client (`BenchmarkArrivals`, the scenario's `workload.benchmark`) makes its requests
as it goes instead of reading them: fixed-shape requests (lengths optionally jittered, or drawn
request by request as a named client draws them: sim.workload.bench_clients) in sessions
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

A request exists as a `Request` only from its arrival to its end (docs/memory.md). The trace is
read by sim.workload.io (the reader of every command: the same casts and checks), a batch of
whole sessions at a time; `TraceColumns` packs a batch with numpy into what the loader needs per
row: `FIELDS` int64 values (a row's request fields, the dependency links resolved to the
session's own row numbers) in one `array('q')`, row after row, and its two times in an
`array('d')`. A started session copies its rows out of the batch (`_Session`, about 130 bytes a
row, freed when the session ends); a request due to arrive is a `Due` in the event heap, and its
`Request` is made when the event runs. Per-row Python objects made ahead of their arrival would
cost ~1.3 KB of memory each, held from the session's start (hours for an agent session).
"""

from __future__ import annotations

import struct
from array import array
from collections import deque
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any, Final

import numpy as np
import pyarrow.compute as pc

from sim.cluster.cluster import Cluster
from sim.cluster.events import EventLoop
from sim.core.request import Request, lineage_key, shared_key
from sim.workload.bench_clients import ClientLengths
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

# A row's int64 fields in `TraceColumns.ints` (FIELDS per row); the links are rows of the same
# session, numbered from its first row.
REQUEST_ID: Final = 0
REQUEST_INDEX: Final = 1
AGENT: Final = 2
PARENT_AGENT: Final = 3  # the agent of prefix_parent_request_id's row, -1: no prefix parent
SHARED_ID: Final = 4  # shared_prefix_id, -1: none
INPUT: Final = 5
OUTPUT: Final = 6
PREFIX: Final = 7  # prefix_tokens, 0 without a prefix parent
SHARED_TOKENS: Final = 8  # shared_prefix_tokens, 0 without a shared prefix
IMAGE_TOKENS: Final = 9
IMAGE_COUNT: Final = 10
WAITS: Final = 11  # 1: a think row whose dependency is an earlier row of its session
FIRST_CHILD: Final = 12  # the first row that waits on this one, -1: none
NEXT_SIBLING: Final = 13  # the next row waiting on the same row, -1: none
FIELDS: Final = 14
_ROW: Final = struct.Struct(f"{FIELDS}q")  # a row of `TraceColumns.ints`
# A row's floats in `TraceColumns.times` (TIMES per row).
ARRIVAL_TIME: Final = 0
THINK_TIME: Final = 1
TIMES: Final = 2


class TraceColumns:
    """Whole sessions of a trace, packed (module doc): `bounds[k]:bounds[k + 1]` are the rows of
    the k-th session, which starts at `session_start_s[k]`."""

    def __init__(self, table: Any) -> None:
        def col(name: str) -> Any:
            return table.column(name).to_numpy().astype(np.int64)

        sid = table.column("session_id").to_numpy()
        n = len(sid)
        cuts = np.flatnonzero(sid[1:] != sid[:-1]) + 1
        lo_k = np.concatenate([[0], cuts]).astype(np.int64)
        self.bounds: list[int] = [*lo_k.tolist(), n]
        self.session_id: list[int] = sid[lo_k].tolist()
        self.session_start_s: list[float] = table.column("session_start_s").to_numpy()[lo_k].tolist()
        row = np.arange(n, dtype=np.int64)
        first = np.repeat(lo_k, np.diff(np.append(lo_k, n)))  # each row's session's first row
        rid = col("request_id")

        def earlier_row(ref: Any) -> Any:
            """The row of request id `ref` among the earlier rows of the same session, else -1
            (request ids increase in file order, sim.workload.validate)."""
            pos = np.clip(np.searchsorted(rid, ref), 0, n - 1)
            found = (ref >= 0) & (rid[pos] == ref) & (pos >= first) & (pos < row)
            return np.where(found, pos, -1)

        agent = col("agent_id")
        parent = earlier_row(col("prefix_parent_request_id"))
        has_parent = parent >= 0
        shared = col("shared_prefix_id")
        dep = earlier_row(col("depends_on_request_id"))
        think = ~pc.equal(table.column("arrival"), ARRIVAL_ABSOLUTE).to_numpy(zero_copy_only=False)
        waits = think & (dep >= 0)
        # the rows waiting on each row, in row order: a first child and a chain of next siblings
        kids = np.flatnonzero(waits)
        kids = kids[np.argsort(dep[kids], kind="stable")]
        first_child = np.full(n, -1, dtype=np.int64)
        next_sibling = np.full(n, -1, dtype=np.int64)
        if len(kids):
            parents = dep[kids]
            head = np.ones(len(kids), dtype=bool)
            head[1:] = parents[1:] != parents[:-1]
            first_child[parents[head]] = kids[head] - first[kids[head]]
            chained = ~head[1:]
            next_sibling[kids[:-1][chained]] = kids[1:][chained] - first[kids[1:][chained]]
        packed = np.empty((n, FIELDS), dtype=np.int64)
        packed[:, REQUEST_ID] = rid
        packed[:, REQUEST_INDEX] = col("request_index")
        packed[:, AGENT] = agent
        packed[:, PARENT_AGENT] = np.where(has_parent, agent[np.maximum(parent, 0)], -1)
        packed[:, SHARED_ID] = shared
        packed[:, INPUT] = col("input_tokens")
        packed[:, OUTPUT] = col("output_tokens")
        packed[:, PREFIX] = np.where(has_parent, col("prefix_tokens"), 0)
        packed[:, SHARED_TOKENS] = np.where(shared >= 0, col("shared_prefix_tokens"), 0)
        packed[:, IMAGE_TOKENS] = col("image_tokens")
        packed[:, IMAGE_COUNT] = col("image_count")
        packed[:, WAITS] = waits
        packed[:, FIRST_CHILD] = first_child
        packed[:, NEXT_SIBLING] = next_sibling
        times = np.empty((n, TIMES), dtype=np.float64)
        times[:, ARRIVAL_TIME] = table.column("arrival_time_s").to_numpy()
        times[:, THINK_TIME] = table.column("think_time_s").to_numpy()
        self.ints: array[int] = array("q", packed.tobytes())
        self.times: array[float] = array("d", times.tobytes())


def iter_trace_columns(
    path: str | Path, batch_rows: int = BATCH_ROWS, *, trusted: bool = False
) -> Iterator[TraceColumns]:
    """The trace's sessions in file order, a batch of whole sessions at a time, read and validated
    by sim.workload.io (the reader every command uses); `trusted`: validated already (a run's
    preflight, or the writer of a generated trace), so only read and cast."""
    for table in iter_session_batches(path, batch_rows, list(COLUMNS), trusted=trusted):
        yield TraceColumns(table)


class _Session:
    """A started session: its rows (copied out of their batch) and its counts so far."""

    __slots__ = ("sid", "ints", "times", "loaded", "pending", "first_s", "last_s", "count", "rejected",
                 "max_context_tokens")  # fmt: skip

    def __init__(self, sid: int, ints: array[int], times: array[float]) -> None:
        self.sid = sid
        self.ints = ints
        self.times = times
        self.loaded = 0  # rows loaded so far (fewer than all when max_requests cuts the session)
        self.pending = 0  # requests that will still arrive or are in the system
        self.first_s = float("inf")
        self.last_s = 0.0
        self.count = 0
        self.rejected = 0
        self.max_context_tokens = 0


class Due:
    """Row `row` of a session, due to arrive at `time_s` (an event's argument)."""

    __slots__ = ("state", "row", "time_s")

    def __init__(self, state: _Session, row: int, time_s: float) -> None:
        self.state = state
        self.row = row
        self.time_s = time_s


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
        cluster.on_terminal = self.on_terminal
        self.closed_loop = closed_loop
        self.warmup_s = warmup_s
        self.horizon_s = float("inf") if horizon_s is None else horizon_s
        self.max_requests = max_requests
        self.on_session = on_session
        self.on_idle = on_idle
        self.scheduled = 0  # requests that will arrive (scheduled or waiting on a dependency)
        self.not_arrived = 0
        self.loaded_all = False
        self._held = 0  # loaded rows waiting on a dependency that has not ended
        self._waiting = 0  # arrivals scheduled, not yet happened

    def start(self) -> None:
        self.env.process(self._loader())

    def done(self) -> bool:
        return self.loaded_all and self._waiting == 0 and self._held == 0 and self.cluster.in_flight == 0

    # --- loading ---

    def _loader(self):
        env = self.env
        for cols in self._trace:
            bounds = cols.bounds
            for k in range(len(bounds) - 1):
                start = cols.session_start_s[k]
                if start >= self.horizon_s or self._full():
                    self._stop_loading()
                    return
                if start > env.now_s:
                    yield env.timeout(start - env.now_s)
                self._load(cols, k)
        self._stop_loading()

    def _full(self) -> bool:
        return self.max_requests is not None and self.scheduled >= self.max_requests

    def _stop_loading(self) -> None:
        self.loaded_all = True
        self._check_idle()

    def _load(self, cols: TraceColumns, k: int) -> None:
        """Start session k of `cols`: copy its rows and schedule those that do not wait."""
        lo = cols.bounds[k]
        hi = cols.bounds[k + 1]
        ints = cols.ints[lo * FIELDS : hi * FIELDS]
        times = cols.times[lo * TIMES : hi * TIMES]
        state = _Session(cols.session_id[k], ints, times)
        limit = self.max_requests
        closed = self.closed_loop
        for row in range(hi - lo):
            if limit is not None and self.scheduled >= limit:
                break
            self.scheduled += 1
            state.pending += 1
            # rows not yet loaded wait on nothing yet: a row dropped now leaves its later
            # children waiting (as they would on a request that never ends)
            state.loaded = row + 1
            if closed and ints[row * FIELDS + WAITS]:
                self._held += 1
            else:
                self._schedule(state, row, times[row * TIMES + ARRIVAL_TIME])

    # --- arriving ---

    def _schedule(self, state: _Session, row: int, time_s: float) -> None:
        if time_s >= self.horizon_s:
            self._drop(state, row)
            return
        self._waiting += 1
        self.env.call_at(time_s, self._due, Due(state, row, time_s))

    def _due(self, due: Due) -> None:
        """Row `due.row` arrives: its request is made now."""
        state = due.state
        # the row's fields in one call (compiled code reads an array's items one generic call each)
        row = _ROW.unpack_from(state.ints, due.row * (8 * FIELDS))
        sid = state.sid
        agent: int = row[AGENT]
        parent_agent: int = row[PARENT_AGENT]
        shared: int = row[SHARED_ID]
        req = Request(
            row[REQUEST_ID],
            sid,
            row[REQUEST_INDEX],
            agent,
            lineage_key(sid, agent),
            lineage_key(sid, parent_agent) if parent_agent >= 0 else None,
            shared_key(shared) if shared >= 0 else None,
            due.time_s,
            row[INPUT],
            row[OUTPUT],
            row[PREFIX],
            row[SHARED_TOKENS],
            row[IMAGE_TOKENS],
            row[IMAGE_COUNT],
        )
        req.due = due
        self._arrive(req)

    def _arrive(self, req: Request) -> None:
        self._waiting -= 1
        req.measured = req.arrival_s >= self.warmup_s
        self.cluster.dispatch(req)

    def _drop(self, state: _Session, row: int) -> None:
        """Row `row` will never arrive; neither will the loaded rows that wait on it, however long the
        chain (a loop: recursion would stop at Python's depth limit on a session of a thousand turns)."""
        ints = state.ints
        rows = [row]
        while rows:
            r = rows.pop()
            self.not_arrived += 1
            self.scheduled -= 1
            state.pending -= 1
            if self.closed_loop:
                child = ints[r * FIELDS + FIRST_CHILD]
                while 0 <= child < state.loaded:
                    self._held -= 1
                    rows.append(child)
                    child = ints[child * FIELDS + NEXT_SIBLING]
        self._session_check(state)

    def on_terminal(self, req: Request) -> None:
        """`req` completed or was rejected: its follow-ups arrive after their think time."""
        now = self.env.now_s
        due = req.due
        assert due is not None  # set at its arrival
        state = due.state
        if self.closed_loop:
            ints = state.ints
            times = state.times
            child = ints[due.row * FIELDS + FIRST_CHILD]
            while 0 <= child < state.loaded:
                self._held -= 1
                self._schedule(state, child, now + times[child * TIMES + THINK_TIME])
                child = ints[child * FIELDS + NEXT_SIBLING]
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
        client_lengths: ClientLengths | None,
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
        self.client_lengths = client_lengths  # the k-th request sent takes the k-th draw
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
        drawn = self.client_lengths
        if drawn is not None:  # max_requests is the draw's length (sim.config.workload)
            k = sess.sid * drawn.session_turns + sess.turns if drawn.session_turns else self._next_rid
            inp = drawn.input_tokens[k]
            out = drawn.output_tokens[k]
        else:
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
