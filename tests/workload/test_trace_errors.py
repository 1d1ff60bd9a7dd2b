"""Bad input: a clear error naming the file, the line or row and the field; no output file left.

GIVEN a broken input, WHEN it is imported, read or generated from, THEN InputError names where
the problem is and the output folder holds nothing new (writers use a temporary file + rename).
"""

from __future__ import annotations

import gzip
import json
import lzma
import subprocess
import sys

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from sim.errors import InputError
from sim.workload.generator import generate_trace
from sim.workload.importers import import_trace
from sim.workload.io import read_trace_table
from sim.workload.rows import request_table
from sim.workload.spec import load_spec

from .test_trace_importers import _mooncake_lines, weka_session


def _fails(tmp_path, call, *fragments):
    """Run call(out); expect an InputError containing every fragment and no new file in tmp_path."""
    before = set(tmp_path.iterdir())
    out = tmp_path / "out.parquet"
    with pytest.raises(InputError) as err:
        call(out)
    text = str(err.value)
    for fragment in fragments:
        assert fragment in text, f"{fragment!r} not in {text!r}"
    assert set(tmp_path.iterdir()) == before, "an output or temporary file was left behind"
    return text


def test_truncated_gzip(tmp_path):
    src = tmp_path / "m.jsonl.gz"
    data = gzip.compress((_mooncake_lines() * 200).encode())
    src.write_bytes(data[: len(data) // 2])
    _fails(tmp_path, lambda out: import_trace("mooncake", src, out), str(src), "line ", "truncated")


def test_truncated_xz(tmp_path):
    src = tmp_path / "w.jsonl.xz"
    data = lzma.compress((json.dumps(weka_session()) + "\n").encode() * 50)
    src.write_bytes(data[: len(data) - 40])
    _fails(tmp_path, lambda out: import_trace("weka", src, out), str(src), "line ", "truncated")


def test_garbage(tmp_path):
    src = tmp_path / "junk.jsonl"
    src.write_bytes(bytes(np.random.default_rng(0).integers(0, 256, 4000, dtype=np.uint8)))
    _fails(tmp_path, lambda out: import_trace("weka", src, out), str(src), "line 1", "not valid JSON")
    pq_src = tmp_path / "junk.parquet"
    pq_src.write_bytes(b"PAR1 this is not parquet")
    _fails(tmp_path, lambda out: read_trace_table(pq_src), str(pq_src), "not a readable Parquet file")


def test_wrong_columns(tmp_path):
    src = tmp_path / "a.csv"
    src.write_text("time,prompt,completion\n2023-11-16 18:15:46.68,374,44\n")
    _fails(tmp_path, lambda out: import_trace("azure", src, out), str(src), "line 1", "wrong columns",
           "TIMESTAMP,ContextTokens,GeneratedTokens")  # fmt: skip
    table = request_table(
        1,
        {
            "session_id": 0,
            "session_start_s": 0.0,
            "request_id": 0,
            "request_index": 0,
            "arrival": "absolute",
            "arrival_time_s": 0.0,
            "input_tokens": 5,
            "output_tokens": 1,
        },
    )
    pq_src = tmp_path / "t.parquet"
    pq.write_table(table.drop_columns(["output_tokens"]), pq_src)
    _fails(
        tmp_path, lambda out: read_trace_table(pq_src), str(pq_src), "column output_tokens", "missing column"
    )
    column = table.schema.get_field_index("input_tokens")
    pq.write_table(table.set_column(column, "input_tokens", pa.array(["five"])), pq_src)
    _fails(tmp_path, lambda out: read_trace_table(pq_src), "column input_tokens", "wrong column type")


def test_negative_tokens(tmp_path):
    session = weka_session()
    session["requests"][2]["out"] = -2
    src = tmp_path / "w.jsonl"
    src.write_text(json.dumps(session) + "\n")
    _fails(tmp_path, lambda out: import_trace("weka", src, out), str(src), "line 1", "field requests[2].out",
           "negative count (got -2)")  # fmt: skip
    # in a Parquet trace: the row and the column
    rows = request_table(2, {"session_id": [0, 0], "session_start_s": 0.0, "request_id": [0, 1],
                             "request_index": [0, 1], "arrival": "absolute", "arrival_time_s": [0.0, 1.0],
                             "input_tokens": [5, 6], "output_tokens": [1, -3]})  # fmt: skip
    pq_src = tmp_path / "neg.parquet"
    pq.write_table(rows, pq_src)
    _fails(
        tmp_path, lambda out: read_trace_table(pq_src), str(pq_src), "row 1, column output_tokens", "negative"
    )


def test_time_going_backwards(tmp_path):
    src = tmp_path / "m.jsonl"
    lines = _mooncake_lines().splitlines()
    lines[2], lines[3] = lines[3], lines[2]
    src.write_text("\n".join(lines) + "\n")
    _fails(tmp_path, lambda out: import_trace("mooncake", src, out), str(src), "line 4", "field timestamp",
           "time going backwards")  # fmt: skip
    csv_src = tmp_path / "a.csv"
    csv_src.write_text(
        "TIMESTAMP,ContextTokens,GeneratedTokens\n2023-11-16 18:15:50.0,1,1\n2023-11-16 18:15:46.0,1,1\n"
    )
    _fails(
        tmp_path, lambda out: import_trace("azure", csv_src, out), "line 3", "field TIMESTAMP", "backwards"
    )


def test_unknown_format_and_missing_file(tmp_path):
    src = tmp_path / "x.jsonl"
    src.write_text("{}\n")
    _fails(
        tmp_path,
        lambda out: import_trace("sharegpt", src, out),
        "FORMAT",
        "unknown trace format",
        "weka, mooncake",
    )
    missing = tmp_path / "nope.jsonl"
    _fails(tmp_path, lambda out: import_trace("weka", missing, out), str(missing), "file not found")
    _fails(tmp_path, lambda out: generate_trace(tmp_path / "nope.yaml", out), "nope.yaml", "not found")


def test_bad_spec_fields(tmp_path):
    spec = tmp_path / "s.yaml"
    spec.write_text("name: x\ndays: -1\narrivals: {sessions_per_hour: 10, burst: 2}\n"
                    "sessions: {kind: parametric, requests_per_session: {lognormal: {median: 5}}}\n")  # fmt: skip
    text = _fails(tmp_path, lambda out: generate_trace(spec, out), str(spec), "days:", "arrivals.burst",
                  "sessions.parametric.requests_per_session.lognormal.sigma")  # fmt: skip
    assert "greater than 0" in text and "Extra inputs" in text
    spec.write_text("name: [unclosed\n")
    _fails(tmp_path, lambda out: load_spec(spec), str(spec), "line ", "not valid YAML")


def test_cli_prints_one_line_and_exits_2(tmp_path):
    src = tmp_path / "m.jsonl"
    src.write_text('{"timestamp": 0, "input_length": -4, "output_length": 1, "hash_ids": []}\n')
    out = tmp_path / "o.parquet"
    code = "from sim.cli import main; main()"
    proc = subprocess.run([sys.executable, "-c", code, "trace", "import", "mooncake", str(src), "-o", str(out)],
                          capture_output=True, text=True)  # fmt: skip
    assert proc.returncode == 2
    assert f"{src}: line 1, field input_length: negative count (got -4)" in proc.stderr
    assert "Traceback" not in proc.stderr
    assert not out.exists() and sorted(p.name for p in tmp_path.iterdir()) == ["m.jsonl"]
