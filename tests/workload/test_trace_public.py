"""The public traces of ../shared: import counts and the statistics their README states.

GIVEN the files in ../shared/traces/public (skipped where absent), WHEN imported and described,
THEN the counts are exact and the README's statistics are reproduced within 1 %.
"""

from __future__ import annotations

import json

import numpy as np
import pyarrow.parquet as pq
from typer.testing import CliRunner

from sim.cli import app
from sim.workload.importers import import_trace
from sim.workload.io import iter_sessions, trace_info
from sim.workload.stats import trace_stats


def _close(value: float, expected: float, rel: float = 0.01) -> bool:
    return abs(value - expected) <= rel * abs(expected)


def test_weka_import_counts(weka_trace):
    info = trace_info(weka_trace)
    assert info["sessions"] == 530  # README §3: this folder holds 530 sessions
    assert info["top_level_requests"] == 36_348
    assert info["requests"] == 36_348 + 456  # plus the requests of 43 sub-agents
    t = pq.read_table(weka_trace, columns=["agent_id", "session_id"])
    subagents = {
        (s, a) for s, a in zip(t["session_id"].to_pylist(), t["agent_id"].to_pylist(), strict=True) if a
    }
    assert len(subagents) == 43


def test_weka_stats_json_reproduces_the_readme(weka_trace):
    result = CliRunner().invoke(app, ["trace", "stats", str(weka_trace), "--json", "--no-blocks"])
    assert result.exit_code == 0, result.output
    stats = json.loads(result.output)
    assert (stats["sessions"], stats["top_level_requests"]) == (530, 36_348)
    top = stats["percentiles"]["top_level"]
    assert _close(top["input_tokens"]["p50"], 103_518)  # README §3: "input p50 103,518"
    assert _close(top["output_tokens"]["p50"], 214)  # "output p50 214"
    assert _close(top["think_time_s"]["p50"], 10)  # "think p50 10 s"
    assert top["input_tokens"]["max"] == 894_371  # the largest context in the trace
    assert stats["prefix_reuse"]["tokens"]["within_session"] > 0.95  # README: 96.3 % of blocks


def test_weka_sessions_are_closed_loop_with_subagent_joins(weka_trace):
    """Each sub-agent waits for the request that launched it; the main agent's next request
    waits for the sub-agent that ended last (trace_0003: one Explore sub-agent after request 0)."""
    columns = ["agent_id", "request_id", "depends_on_request_id"]
    session = next(s for s in iter_sessions(weka_trace, columns=columns) if (s.column("agent_id") > 0).any())
    agent = session.column("agent_id")
    ids = session.column("request_id")
    dep = session.column("depends_on_request_id")
    sub_rows = np.flatnonzero(agent == 1)
    first_sub, last_sub = sub_rows[0], sub_rows[-1]
    assert agent[np.searchsorted(ids, dep[first_sub])] == 0  # launched by a main-agent request
    after = [i for i in range(len(ids)) if agent[i] == 0 and dep[i] == ids[last_sub]]
    assert after, "the main agent's next request waits for the sub-agent"


def test_mooncake_conversation_counts_and_block_reuse(mooncake_trace):
    result = CliRunner().invoke(app, ["trace", "stats", str(mooncake_trace), "--json"])
    assert result.exit_code == 0, result.output
    stats = json.loads(result.output)
    assert stats["requests"] == 12_031
    blocks = stats["prefix_reuse"]["blocks"]
    assert (blocks["total"], blocks["distinct"]) == (288_500, 182_790)  # README §1
    assert _close(blocks["reused"], 0.366)  # "36.6 % of all 288,500 blocks were already seen"
    assert _close(stats["sessions"], 8_081)  # inferred chains (README §6)
    top = stats["percentiles"]["top_level"]
    assert _close(top["input_tokens"]["p50"], 6_909) and _close(top["output_tokens"]["p50"], 350)


def test_azure_conv_import(public_traces, tmp_path):
    out = tmp_path / "azure.parquet"
    summary = import_trace("azure", public_traces / "azure_llm_2023" / "AzureLLMInferenceTrace_conv.csv", out)
    assert summary["requests"] == summary["sessions"] == 19_366  # README §2
    stats = trace_stats(out)
    assert _close(stats["percentiles"]["all"]["input_tokens"]["p50"], 1_020)
    assert _close(stats["percentiles"]["all"]["output_tokens"]["p50"], 129)
    assert _close(stats["span_s"], 58.4 * 60, rel=0.01)


def test_servegen_envelope(public_traces, tmp_path):
    out = tmp_path / "r1.parquet"
    src = public_traces / "alibaba_servegen" / "servegen_client_rate_traces.tar.xz"
    summary = import_trace("servegen", src, out, select="reason/deepseek-r1")
    group = summary["groups"]["reason/deepseek-r1"]
    assert (summary["clients"], group["clients"], group["span_s"]) == (73, 73, 86_400.0)  # README §4
    assert _close(group["rate_mean_per_s"], 16.0) and _close(group["rate_max_per_s"], 42.5)
    assert _close(group["rate_min_per_s"], 4.3) and _close(group["peak_to_mean"], 2.66)
