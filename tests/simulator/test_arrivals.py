"""The trace replay's packed rows (sim.workload.arrivals.TraceColumns): what a request is made of when
it is due, and who waits on whom, resolved to row numbers of the request's own session."""

from __future__ import annotations

from sim.api import run_scenario
from sim.workload import arrivals as A
from sim.workload.rows import request_table
from sim.workload.validate import TraceValidator

from .helpers import scenario
from .traces import agent_trace

# Session 7: a main agent (rows 0, 1, 3) that launches sub-agent 1 (row 2) from row 1; rows 2 and 3
# both wait on row 1, so row 1 has two children in row order. Session 9: one absolute row and a row
# that waits on it with a prefix of it and a shared prompt.
ROWS = {
    "session_id": [7, 7, 7, 7, 9, 9],
    "session_start_s": [1.0, 1.0, 1.0, 1.0, 5.0, 5.0],
    "request_id": [10, 11, 12, 13, 20, 21],
    "request_index": [0, 1, 2, 3, 0, 1],
    "agent_id": [0, 0, 1, 0, 0, 0],
    "arrival": ["absolute", "think", "think", "think", "absolute", "think"],
    "arrival_time_s": [1.0, 2.0, 3.0, 4.0, 5.0, 6.0],
    "think_time_s": [0.0, 0.5, 0.25, 0.75, 0.0, 1.5],
    "depends_on_request_id": [-1, 10, 11, 11, -1, 20],
    "input_tokens": [100, 300, 50, 600, 80, 200],
    "output_tokens": [10, 20, 5, 30, 8, 9],
    "prefix_parent_request_id": [-1, 10, -1, 11, -1, 20],
    "prefix_tokens": [0, 110, 0, 320, 0, 88],
    "shared_prefix_id": [-1, -1, -1, -1, 3, 3],
    "shared_prefix_tokens": [0, 0, 0, 0, 40, 40],
    "image_count": [0, 0, 0, 1, 0, 0],
    "image_tokens": [0, 0, 0, 64, 0, 0],
}


def _packed() -> A.TraceColumns:
    table = request_table(len(ROWS["session_id"]), ROWS)
    TraceValidator("test").check(table)  # a valid trace, as every replayed one is
    return A.TraceColumns(table.select(list(A.COLUMNS)))


def _row(cols: A.TraceColumns, row: int) -> list[int]:
    return list(cols.ints[row * A.FIELDS : (row + 1) * A.FIELDS])


def test_sessions_and_their_starts():
    cols = _packed()
    assert cols.bounds == [0, 4, 6]
    assert cols.session_id == [7, 9]
    assert cols.session_start_s == [1.0, 5.0]


def test_request_fields_of_each_row():
    cols = _packed()
    sub = _row(cols, 2)
    assert sub[A.REQUEST_ID] == 12 and sub[A.REQUEST_INDEX] == 2 and sub[A.AGENT] == 1
    assert sub[A.PARENT_AGENT] == -1 and sub[A.PREFIX] == 0
    main = _row(cols, 3)
    assert (main[A.PARENT_AGENT], main[A.PREFIX]) == (0, 320)
    assert (main[A.INPUT], main[A.OUTPUT], main[A.IMAGE_TOKENS], main[A.IMAGE_COUNT]) == (600, 30, 64, 1)
    shared = _row(cols, 5)
    assert (shared[A.SHARED_ID], shared[A.SHARED_TOKENS], shared[A.PARENT_AGENT]) == (3, 40, 0)
    assert _row(cols, 0)[A.SHARED_ID] == -1
    times = list(cols.times)
    assert times[5 * A.TIMES + A.ARRIVAL_TIME] == 6.0 and times[5 * A.TIMES + A.THINK_TIME] == 1.5


def test_children_are_linked_in_row_order_within_their_session():
    cols = _packed()
    rows = [_row(cols, r) for r in range(6)]
    assert [r[A.WAITS] for r in rows] == [0, 1, 1, 1, 0, 1]
    # session 7: row 0 -> row 1 -> rows 2, 3; session 9 (rows numbered from its first): 0 -> 1
    assert [r[A.FIRST_CHILD] for r in rows] == [1, 2, -1, -1, 1, -1]
    assert [r[A.NEXT_SIBLING] for r in rows] == [-1, -1, 3, -1, -1, -1]


def test_a_session_copies_only_its_own_rows():
    cols = _packed()
    lo, hi = cols.bounds[1], cols.bounds[2]
    own = cols.ints[lo * A.FIELDS : hi * A.FIELDS]
    assert len(own) == 2 * A.FIELDS and own[A.REQUEST_ID] == 20


def test_a_long_chain_cut_by_the_horizon_never_arrives(tmp_path):
    """The first turn ends, its follow-up would arrive after the horizon: the 1,499 turns that wait on
    it, one after the other, are dropped with it (a chain deeper than Python's recursion limit)."""
    trace = agent_trace(tmp_path / "chain.parquet", sessions=1, turns=1500, first_input=100,
                        tool_tokens=(1, 2), output_tokens=(1, 2), think_s=3.0, shared_prefix_tokens=50)  # fmt: skip
    scn = scenario(tmp_path, trace, models=["deepseek-v4-flash"], workload={"horizon_s": 1.0})
    summary = run_scenario(scn).summary["models"]["deepseek-v4-flash"]
    assert summary["requests_arrived_incl_warmup"] == 1
    assert summary["requests_not_arrived"] == 1499
