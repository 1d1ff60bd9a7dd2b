"""A trace in parts (sim.workload.parts): the same rows as one file, split only where a session begins,
a part per day of session starts and at most N sessions; the readers take the folder as one trace."""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pytest
from typer.testing import CliRunner

from sim.cli import app
from sim.errors import InputError
from sim.paths import project_root
from sim.units import DAY_S
from sim.workload.generator import generate_trace
from sim.workload.io import iter_session_batches, read_trace_table, trace_info, trace_parts
from sim.workload.parts import TracePartsWriter
from sim.workload.stats import trace_stats

SPEC = project_root() / "traces" / "agent_1M_sample.yaml"


@pytest.fixture(scope="module")
def both(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("parts")
    generate_trace(SPEC, tmp / "one.parquet", days=1.5)
    generate_trace(SPEC, tmp / "parts", days=1.5, part_sessions=40)
    return tmp / "one.parquet", tmp / "parts"


def test_parts_hold_the_same_rows_split_at_sessions_and_days(both) -> None:
    one, folder = both
    parts = trace_parts(folder)
    assert len(parts) > 2 and [p.name for p in parts] == sorted(p.name for p in parts)
    whole = read_trace_table(one)
    joined = pa.concat_tables([read_trace_table(p) for p in parts])
    assert joined.equals(whole)
    seen: set[int] = set()
    for part in parts:
        t = read_trace_table(part)
        sessions = set(t.column("session_id").to_pylist())
        assert not sessions & seen and len(sessions) <= 40  # a session in one part only
        seen |= sessions
        days = np.unique((t.column("session_start_s").to_numpy() // DAY_S).astype(int))
        assert days.tolist() == [int(part.name.split("_")[1])]
    assert (
        trace_info(folder)["rows"]
        == whole.num_rows
        == sum(b.num_rows for b in iter_session_batches(folder, trusted=True))
    )


def test_stats_read_a_folder_as_one_trace(both) -> None:
    one, folder = both
    a, b = trace_stats(one), trace_stats(folder)
    assert a["requests"] == b["requests"] and a["sessions"] == b["sessions"]
    result = CliRunner().invoke(app, ["trace", "stats", str(folder), "--json"])
    assert result.exit_code == 0, result.output


def test_an_existing_folder_is_refused_and_nothing_is_left(tmp_path) -> None:
    (tmp_path / "p").mkdir()
    with pytest.raises(InputError, match="exists already"):
        TracePartsWriter(tmp_path / "p")
    with pytest.raises(RuntimeError), TracePartsWriter(tmp_path / "q"):
        raise RuntimeError("stop")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["p"]
