"""Closed-loop replay of a canonical trace (sim.workload.schema, read with pyarrow only) through the engine.

Arrival rule, as ``sim`` replays it (sim/workload/arrivals.py): an ``absolute`` row arrives at
``arrival_time_s``; a ``think`` row arrives ``think_time_s * think_scale`` after the end (completion or
rejection) of ``depends_on_request_id``, in wall-clock time (a dependency missing from the file counts as
absolute). A request that arrives while a step runs is seen by the scheduler when that step ends, as in a
real server; its ``arrival_s`` is when it was sent.

Token ids are made up, deterministically, so that the engine's block hashes see exactly the prefix sharing
the trace states: position ``p`` of a request's prompt repeats its prefix parent's token at ``p`` when
``p < prefix_tokens``, else the cross-session prompt ``shared_prefix_id``'s token when
``p < shared_prefix_tokens``, else a fresh id drawn from (request id, position); its generated tokens are
fresh ids too. So a hit in the engine is a hit the trace (and ``sim``) also counts, up to block rounding.
"""

from __future__ import annotations

import heapq
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from kernels_bench.serve.engine import Engine, EngineRequest
from kernels_bench.serve.step_api import TOKEN_ID_LIMIT

TRACE_COLUMNS = (
    "session_id",
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
)
_FRESH, _OUTPUT, _SHARED = 1, 2, 3  # seed tags of the three id streams


class TraceError(ValueError):
    """The trace file cannot be replayed (the message names the file and what is wrong)."""


@dataclass(frozen=True)
class TraceRow:
    session_id: int
    request_id: int
    request_index: int
    agent_id: int
    absolute: bool
    arrival_time_s: float
    think_time_s: float
    depends_on_request_id: int
    input_tokens: int
    output_tokens: int
    prefix_parent_request_id: int
    prefix_tokens: int
    shared_prefix_id: int
    shared_prefix_tokens: int


def read_trace(path: str | Path) -> list[TraceRow]:
    """The rows of a canonical trace Parquet file, in file order."""
    import pyarrow.parquet as pq

    path = Path(path)
    if not path.is_file():
        raise TraceError(f"{path}: no such trace file")
    try:
        table = pq.read_table(path)
    except Exception as e:  # noqa: BLE001 - any unreadable file gets one message
        raise TraceError(f"{path}: not a readable Parquet file ({type(e).__name__}: {e})") from e
    missing = [c for c in TRACE_COLUMNS if c not in table.column_names]
    if missing:
        raise TraceError(f"{path}: missing trace columns {missing} (a sim.trace/v1 file has them)")
    cols = {c: table.column(c).to_pylist() for c in TRACE_COLUMNS}
    rows = [
        TraceRow(
            session_id=cols["session_id"][i],
            request_id=cols["request_id"][i],
            request_index=cols["request_index"][i],
            agent_id=cols["agent_id"][i],
            absolute=cols["arrival"][i] != "think",
            arrival_time_s=cols["arrival_time_s"][i],
            think_time_s=cols["think_time_s"][i],
            depends_on_request_id=cols["depends_on_request_id"][i],
            input_tokens=cols["input_tokens"][i],
            output_tokens=cols["output_tokens"][i],
            prefix_parent_request_id=cols["prefix_parent_request_id"][i],
            prefix_tokens=cols["prefix_tokens"][i],
            shared_prefix_id=cols["shared_prefix_id"][i],
            shared_prefix_tokens=cols["shared_prefix_tokens"][i],
        )
        for i in range(table.num_rows)
    ]
    for r in rows:
        if r.input_tokens < 1 or r.output_tokens < 1:
            raise TraceError(f"{path}: request {r.request_id}: input_tokens={r.input_tokens}, "
                             f"output_tokens={r.output_tokens}; both must be >= 1")  # fmt: skip
    return rows


def _fresh(tag: int, key: int, start: int, n: int) -> np.ndarray:
    """Ids ``start .. start + n - 1`` of the stream (tag, key): position-addressed, so any slice of a stream
    equals the same slice drawn whole."""
    seed = _mix64(tag * 0x9E3779B97F4A7C15 ^ _mix64(key % 2**64))
    pos = np.arange(start, start + n, dtype=np.uint64)
    with np.errstate(over="ignore"):  # splitmix64 of (seed, position): stable across numpy versions
        x = pos * np.uint64(0x9E3779B97F4A7C15) + np.uint64(seed)
        x = (x ^ (x >> np.uint64(30))) * np.uint64(0xBF58476D1CE4E5B9)
        x = (x ^ (x >> np.uint64(27))) * np.uint64(0x94D049BB133111EB)
        x = x ^ (x >> np.uint64(31))
    return (x % np.uint64(TOKEN_ID_LIMIT)).astype(np.int64)


def _mix64(x: int) -> int:
    x = (x + 0x9E3779B97F4A7C15) % 2**64
    x = ((x ^ (x >> 30)) * 0xBF58476D1CE4E5B9) % 2**64
    x = ((x ^ (x >> 27)) * 0x94D049BB133111EB) % 2**64
    return x ^ (x >> 31)


def token_ids(rows: list[TraceRow]) -> dict[int, tuple[np.ndarray, np.ndarray]]:
    """request id -> (prompt ids, generated ids), by the rule in the module docstring."""
    out: dict[int, tuple[np.ndarray, np.ndarray]] = {}
    for r in rows:  # a prefix parent comes earlier in its session, hence earlier in the file
        ids = _fresh(_FRESH, r.request_id, 0, r.input_tokens)
        shared = min(r.shared_prefix_tokens, r.input_tokens) if r.shared_prefix_id >= 0 else 0
        if shared:
            ids[:shared] = _fresh(_SHARED, r.shared_prefix_id, 0, shared)
        parent = out.get(r.prefix_parent_request_id)
        if parent is not None and r.prefix_tokens > 0:
            full = np.concatenate(parent)
            n = min(r.prefix_tokens, len(full), r.input_tokens)
            ids[:n] = full[:n]
        out[r.request_id] = (ids, _fresh(_OUTPUT, r.request_id, r.input_tokens, r.output_tokens))
    return out


class WallClock:
    """Seconds since construction (perf_counter); sleeping really sleeps."""

    def __init__(self) -> None:
        self._t0 = time.perf_counter()

    def now(self) -> float:
        return time.perf_counter() - self._t0

    def sleep_until(self, t_s: float) -> None:
        dt = t_s - self.now()
        if dt > 0:
            time.sleep(dt)


class FakeClock:
    """A clock that moves only when told (a stand-in step function advances it by the step's cost)."""

    def __init__(self) -> None:
        self.t_s = 0.0

    def now(self) -> float:
        return self.t_s

    def advance(self, dt_s: float) -> None:
        if dt_s < 0:
            raise ValueError(f"cannot go back in time ({dt_s} s)")
        self.t_s += dt_s

    def sleep_until(self, t_s: float) -> None:
        self.t_s = max(self.t_s, t_s)


@dataclass
class ReplayStats:
    arrived: int = 0
    idle_s: float = 0.0  # time with nothing to run (waiting for arrivals)


def replay(
    rows: list[TraceRow],
    engine: Engine,
    clock: WallClock | FakeClock,
    think_scale: float = 1.0,
    on_progress: Callable[[int, int], None] | None = None,
) -> ReplayStats:
    """Run the whole trace closed-loop; every request ends (completed or rejected) in ``engine.done``."""
    if think_scale < 0:
        raise ValueError(f"think_scale={think_scale}: must be >= 0")
    ids = token_ids(rows)
    known = {r.request_id for r in rows}
    dependents: dict[int, list[TraceRow]] = {}
    heap: list[tuple[float, int, TraceRow]] = []
    for r in rows:
        if r.absolute or r.depends_on_request_id not in known:
            heapq.heappush(heap, (r.arrival_time_s, r.request_id, r))
        else:
            dependents.setdefault(r.depends_on_request_id, []).append(r)
    stats = ReplayStats()
    seen = 0
    while heap or engine.busy:
        now = clock.now()
        while heap and heap[0][0] <= now:
            t_s, _, r = heapq.heappop(heap)
            prompt, generated = ids[r.request_id]
            engine.add(EngineRequest(r.request_id, r.session_id, t_s, prompt, r.output_tokens, generated))
            stats.arrived += 1
        if engine.busy:
            before = len(engine.steps)
            engine.step()
            if len(engine.steps) == before:  # nothing could be planned: only an arrival can change that
                if not heap:
                    raise RuntimeError("the engine holds requests it cannot schedule and none will arrive")
                stats.idle_s += max(0.0, heap[0][0] - clock.now())
                clock.sleep_until(heap[0][0])
        elif heap:
            stats.idle_s += max(0.0, heap[0][0] - now)
            clock.sleep_until(heap[0][0])
        for out in engine.done[seen:]:
            for r in dependents.pop(out.request.request_id, ()):
                heapq.heappush(heap, (out.finish_s + r.think_time_s * think_scale, r.request_id, r))
        if on_progress is not None and len(engine.done) != seen:
            on_progress(len(engine.done), len(rows))
        seen = len(engine.done)
    return stats
