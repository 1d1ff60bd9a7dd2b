"""`sim trace stats` on a hand-made trace whose statistics are known exactly."""

from __future__ import annotations

import json

import numpy as np
import pyarrow as pa
import pytest
from typer.testing import CliRunner

from sim.cli import app
from sim.workload.io import TraceWriter
from sim.workload.rows import list_array, request_table
from sim.workload.stats import trace_stats

from .test_trace_importers import SERVEGEN


def tiny_trace(path, with_blocks: bool = False):
    """Session 0 (starts at 0 s): main requests 0, 1, 3 and a sub-agent request 2.
    Session 1 (starts at 100 s): requests 4, 5. Both use shared prefix 7 (1,000 tokens)."""
    cols = {
        "session_id": [0, 0, 0, 0, 1, 1],
        "session_start_s": [0.0] * 4 + [100.0] * 2,
        "source": "test",
        "request_id": [0, 1, 2, 3, 4, 5],
        "request_index": [0, 1, 2, 3, 0, 1],
        "agent_id": [0, 0, 1, 0, 0, 0],
        "arrival": pa.array(["absolute", "think", "think", "think", "absolute", "think"]),
        "arrival_time_s": [0.0, 10.0, 20.0, 130.0, 100.0, 200.0],
        "think_time_s": [0.0, 5.0, 1.0, 100.0, 0.0, 50.0],
        "depends_on_request_id": [-1, 0, 1, 1, -1, 4],
        "input_tokens": [2000, 3000, 1500, 4000, 2000, 2600],
        "output_tokens": [100, 200, 50, 300, 100, 100],
        "prefix_parent_request_id": [-1, 0, -1, 1, -1, 4],
        "prefix_tokens": [0, 2100, 0, 3200, 0, 2100],
        "shared_prefix_id": [7, 7, -1, 7, 7, 7],
        "shared_prefix_tokens": [1000, 1000, 0, 1000, 1000, 1000],
        "stop_reason": pa.array(["tool_use", "end_turn", "end_turn", "end_turn", "tool_use", None]),
        "image_count": [0, 0, 0, 1, 0, 0],
        "image_tokens": [0, 0, 0, 500, 0, 0],
    }
    if with_blocks:  # 1,000-token blocks: session 1 repeats session 0's first block
        blocks = [[1, 2], [1, 2, 3], [9], [1, 2, 3, 4], [1, 5], [1, 5, 6]]
        lengths = [len(b) for b in blocks]
        cols["block_size_tokens"] = 1000
        cols["block_hashes"] = list_array(np.concatenate([[0], np.cumsum(lengths)]), np.concatenate(blocks))
    with TraceWriter(path) as writer:
        writer.write(request_table(6, cols))
    return path


def test_counts_reuse_and_think_times(tmp_path):
    stats = trace_stats(tiny_trace(tmp_path / "t.parquet"))
    assert (stats["sessions"], stats["requests"], stats["top_level_requests"]) == (2, 6, 5)
    assert (stats["subagents"], stats["subagent_requests"]) == (1, 1)
    assert stats["span_s"] == 200.0
    total_in = 2000 + 3000 + 1500 + 4000 + 2000 + 2600
    reuse = stats["prefix_reuse"]["tokens"]
    assert reuse["within_session"] == pytest.approx((2100 + 3200 + 2100) / total_in)
    # session 1's first request finds the shared prefix that session 0 used first
    assert reuse["cross_session"] == pytest.approx(1000 / total_in)
    assert stats["prefix_reuse"]["blocks"] is None
    # think times by the stop reason of the request waited for
    think = stats["think_time_s"]
    assert think["after_tool_use"]["count"] == 2 and think["after_tool_use"]["max"] == 50.0
    assert think["after_end_turn"]["count"] == 2 and think["after_end_turn"]["max"] == 100.0
    top = stats["percentiles"]["top_level"]
    assert top["input_tokens"]["max"] == 4000 and top["input_tokens"]["count"] == 5
    assert top["new_tokens"]["min"] == 500  # request 5: 2,600 - 2,100 (its shared prefix lies in the parent)
    assert stats["session"]["requests"]["max"] == 4 and stats["session"]["duration_s"]["max"] == 130.0
    assert stats["session"]["user_turns"]["max"] == 2  # request 3 follows an end_turn
    assert stats["tokens_per_day"] == {"day": [0], "input_tokens": [total_in], "output_tokens": [850]}
    assert stats["images"] == {"requests_with_images": 1, "images": 1, "image_tokens": 500}
    assert stats["stop_reasons"]["(none)"] == 1 and stats["arrival_rules"] == {"absolute": 2, "think": 4}
    assert sum(stats["rates"]["requests_per_s"]) * stats["rates"]["bin_s"] == pytest.approx(6, rel=1e-3)


def test_block_reuse_within_and_across_sessions(tmp_path):
    stats = trace_stats(tiny_trace(tmp_path / "b.parquet", with_blocks=True))
    blocks = stats["prefix_reuse"]["blocks"]
    # 15 blocks, 7 distinct; seen before in the same session: 1,2 ; 1,2,3 (session 0), 1,5 (session 1)
    assert (blocks["total"], blocks["distinct"]) == (15, 7)
    assert blocks["within_session"] == pytest.approx(7 / 15)
    assert blocks["cross_session"] == pytest.approx(1 / 15)  # block 1 in session 1
    assert blocks["reused"] == pytest.approx(8 / 15)
    assert trace_stats(tmp_path / "b.parquet", blocks=False)["prefix_reuse"]["blocks"] is None


def test_cli_json_and_html(tmp_path):
    path = tiny_trace(tmp_path / "t.parquet")
    page = tmp_path / "stats.html"
    result = CliRunner().invoke(app, ["trace", "stats", str(path), "--json", "--html", str(page)])
    assert result.exit_code == 0, result.output
    assert json.loads(result.output)["requests"] == 6
    text = page.read_text()
    assert "trace-stats" in text and "Arrivals over time" in text
    assert 'src="https://cdn.plot.ly' not in text and len(text) > 1_000_000  # plotly.js inline: works offline
    result = CliRunner().invoke(app, ["trace", "stats", str(path)])
    assert result.exit_code == 0 and "top-level requests" in result.output


def test_envelope_stats(tmp_path):
    folder = tmp_path / "sg"
    for name, text in SERVEGEN.items():
        (folder / name).parent.mkdir(parents=True, exist_ok=True)
        (folder / name).write_text(text)
    env = tmp_path / "env.parquet"
    assert (
        CliRunner().invoke(app, ["trace", "import", "servegen", str(folder), "-o", str(env)]).exit_code == 0
    )
    result = CliRunner().invoke(app, ["trace", "stats", str(env), "--json"])
    stats = json.loads(result.output)
    assert stats["clients"] == 3 and stats["groups"]["reason/r"]["rate_mean_per_s"] == 5.0
