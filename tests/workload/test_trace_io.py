"""Reading and writing canonical traces: streaming sessions, metadata, atomic writes."""

from __future__ import annotations

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from sim.errors import InputError
from sim.workload.generator import generate_trace
from sim.workload.io import TraceWriter, iter_session_batches, iter_sessions, read_trace_table, trace_info
from sim.workload.rows import request_table
from sim.workload.spec import parse_spec

from .test_trace_generator import small_spec
from .test_trace_stats import tiny_trace


def test_iter_sessions_keeps_sessions_whole_across_batches(tmp_path):
    path = tmp_path / "g.parquet"
    generate_trace(parse_spec(small_spec()), path, days=0.01)
    whole = read_trace_table(path, columns=["session_id", "request_id"]).to_pydict()
    assert len(set(whole["session_id"])) > 3
    for batch_rows in (3, 50, 100_000):
        sessions = list(iter_sessions(path, batch_rows=batch_rows, columns=["request_id"]))
        assert [s.session_id for s in sessions] == sorted(set(whole["session_id"]))
        assert [r for s in sessions for r in s.column("request_id").tolist()] == whole["request_id"]
        assert all(
            s.requests.column_names == ["session_id", "session_start_s", "request_id"] for s in sessions
        )
    first = next(iter_sessions(path))
    assert first.tenant in {"t0", "t1", "t2", "t3"} and first.source == "gen:small"
    assert first.records()[0]["request_index"] == 0


def test_a_trusted_read_gives_the_same_columns_and_skips_only_the_checks(tmp_path):
    """A run replays its trace after the preflight checked it whole (sim.api): the replay reads the
    same values without checking the invariants a second time."""
    path = tmp_path / "g.parquet"
    generate_trace(parse_spec(small_spec()), path, days=0.01)
    columns = ["request_id", "input_tokens", "arrival_time_s"]
    checked = [t.to_pydict() for t in iter_session_batches(path, 50, columns)]
    trusted = [t.to_pydict() for t in iter_session_batches(path, 50, columns, trusted=True)]
    assert trusted == checked and len(checked) > 1
    bad = tmp_path / "bad.parquet"
    table = pq.read_table(path)
    pq.write_table(table.set_column(table.schema.get_field_index("input_tokens"), "input_tokens",
                                    pa.array([-1] * table.num_rows, pa.int32())), bad)  # fmt: skip
    with pytest.raises(InputError, match="input_tokens"):
        list(iter_session_batches(bad, 50, columns))
    assert sum(t.num_rows for t in iter_session_batches(bad, 50, columns, trusted=True)) == table.num_rows


def test_trace_info_from_metadata_and_without(tmp_path):
    path = tiny_trace(tmp_path / "t.parquet")
    info = trace_info(path)
    assert (info["rows"], info["sessions"], info["requests"], info["top_level_requests"]) == (6, 2, 6, 5)
    assert (info["first_arrival_s"], info["last_arrival_s"], info["duration_s"]) == (0.0, 200.0, 200.0)
    plain = tmp_path / "plain.parquet"
    pq.write_table(pq.read_table(path), plain)  # no sim.summary: counted from three columns
    assert {k: trace_info(plain)[k] for k in ("sessions", "requests", "top_level_requests")} == {
        "sessions": 2, "requests": 6, "top_level_requests": 5}  # fmt: skip


def test_writer_leaves_nothing_when_a_batch_is_invalid(tmp_path):
    out = tmp_path / "w.parquet"
    good = request_table(1, {"session_id": 0, "session_start_s": 0.0, "request_id": 0, "request_index": 0,
                             "arrival": "absolute", "arrival_time_s": 0.0, "input_tokens": 5, "output_tokens": 1})  # fmt: skip
    bad = request_table(1, {"session_id": 0, "session_start_s": 0.0, "request_id": 1, "request_index": 1,
                            "arrival": "think", "arrival_time_s": 1.0, "depends_on_request_id": 7,
                            "input_tokens": 5, "output_tokens": 1})  # fmt: skip
    with pytest.raises(Exception, match="row 1, column depends_on_request_id"), TraceWriter(out) as writer:
        writer.write(good)
        writer.write(bad)
    assert list(tmp_path.iterdir()) == []
