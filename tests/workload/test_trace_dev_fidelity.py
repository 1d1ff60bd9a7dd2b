"""Issue 15 on the Weka dev file of ../shared (skipped where absent): the imported trace and its
statistics say what the raw sessions say.

GIVEN weka_cc_traces_v8_dev (530 sessions) imported, WHEN described or compared with the raw JSON,
THEN user turns, percentiles, shared prompts, sub-agent times and kept fields match the source.
"""

from __future__ import annotations

import numpy as np
import pyarrow.parquet as pq
import pytest

from sim.workload.stats import trace_stats


@pytest.fixture(scope="module")
def dev_stats(weka_trace):
    return trace_stats(weka_trace, blocks=False)


@pytest.fixture(scope="module")
def dev_rows(weka_trace):
    columns = ["session_id", "agent_id", "input_tokens", "output_tokens", "arrival_time_s", "stop_reason"]
    return pq.read_table(weka_trace, columns=columns).to_pandas()


def test_user_turns_count_every_stop_but_tool_use(dev_stats, dev_rows):
    """Defect 5: after a request with no stop reason the next input is a user message, so a turn
    ends at any stop other than tool_use (as `fit` counts): 10.70 turns per session, not 4.45
    (the issue's 10.75 counted slightly differently; the definition is sim.workload.turns)."""
    main = dev_rows[dev_rows.agent_id == 0]
    ends = main.stop_reason.fillna("") != "tool_use"
    last = ~main.session_id.duplicated(keep="last")
    expected = 1 + (ends & ~last).groupby(main.session_id).sum()
    turns = dev_stats["session"]["user_turns"]
    assert turns["mean"] == pytest.approx(expected.mean()) and turns["mean"] == pytest.approx(10.70, abs=0.01)
    assert turns["max"] == expected.max()


def test_percentiles_are_numpy_linear(dev_stats, dev_rows):
    """Defect 6: the documented method (numpy's default, linear) within the histogram's half bin."""
    by_session = dev_rows.groupby("session_id")
    exact = {
        ("session", "requests"): by_session.size().to_numpy(),
        ("session", "duration_s"): (
            by_session.arrival_time_s.max() - by_session.arrival_time_s.min()
        ).to_numpy(),
    }
    top = dev_rows[dev_rows.agent_id == 0]
    exact[("top_level", "output_tokens")] = top.output_tokens.to_numpy()
    for (scope, name), values in exact.items():
        got = (dev_stats["session"] if scope == "session" else dev_stats["percentiles"]["top_level"])[name]
        for q in (10, 50, 90, 99):
            want = np.percentile(values, q)
            assert got[f"p{q}"] == pytest.approx(want, rel=0.0013), (scope, name, q)


def _raw_sessions(path, ids):
    """The raw JSON of the named sessions (only those lines are parsed)."""
    import json
    import lzma

    out = {}
    with lzma.open(path, "rt") as f:
        for line in f:
            sid = line[8:18]  # '{"id":"trace_NNNN"'
            if sid in ids:
                out[sid] = json.loads(line)
    return out


def _raw_requests(session):
    for r in session["requests"]:
        if r.get("type") == "subagent":
            yield from _raw_requests(r)
        else:
            yield r


def test_shared_prompts_do_not_merge_distinct_blocks(weka_trace, public_traces):
    """Defect 3: only an agent's first request maps its tool + system prompt onto shared ids, so the
    imported distinct blocks of each session equal the raw ones (sessions the old remap changed)."""
    ids = {"trace_0049", "trace_0054", "trace_0300", "trace_0002", "trace_0003"}
    raw = _raw_sessions(public_traces / "weka_claude_code" / "weka_cc_traces_v8_dev.jsonl.xz", ids)
    t = pq.read_table(weka_trace, columns=["template", "block_hashes", "model", "shared_prefix_id"])
    t = t.to_pandas()
    for sid, session in raw.items():
        raw_distinct = len({h for r in _raw_requests(session) for h in r["hash_ids"]})
        rows = t[t.template == sid]
        assert len({h for hs in rows.block_hashes for h in hs}) == raw_distinct, sid
    # trace_0300 starts with a Haiku call; its Opus requests with their own prompt share nothing
    # under Haiku's key, and those repeating Haiku's prompt are keyed with their own model
    rows = t[t.template == "trace_0300"]
    haiku_key = rows.shared_prefix_id.iloc[0]
    opus = rows[rows.model.str.contains("opus")]
    assert (opus.shared_prefix_id != haiku_key).all()


def test_subagents_are_not_timed_after_the_session(weka_trace):
    """Defect 7: trace_0004's two sub-agents were recorded 143,000 s after the session's last
    request (a 122 h session); they now start when their launching request ended."""
    from sim.workload.io import trace_info

    assert trace_info(weka_trace)["subagents_retimed"] == 2
    t = pq.read_table(weka_trace, columns=["template", "agent_id", "arrival_time_s"]).to_pandas()
    s = t[t.template == "trace_0004"]
    main_end = s[s.agent_id == 0].arrival_time_s.max()
    assert s.arrival_time_s.max() < main_end + 3600  # was main_end + 143,000 s
    assert trace_info(weka_trace)["last_arrival_s"] < 300_000  # was 440,251 s


def test_session_start_choice_spreads_the_burst(public_traces, tmp_path):
    """Defect 8: the sessions no longer all start at 0 s when asked (the default stays 0 s)."""
    from sim.workload.importers import import_trace

    src = public_traces / "weka_claude_code" / "weka_cc_traces_v8_dev.jsonl.xz"
    out = tmp_path / "poisson.parquet"
    import_trace("weka", src, out, session_start="poisson:20", seed=1)
    t = pq.read_table(out, columns=["session_id", "session_start_s"]).to_pandas()
    starts = t.groupby("session_id").session_start_s.first()
    assert starts.iloc[0] == 0.0 and starts.is_monotonic_increasing
    assert 529 / 20 * 0.8 < starts.iloc[-1] / 3600 < 529 / 20 * 1.2  # 530 sessions at 20 an hour


def test_request_model_is_kept(weka_trace):
    """Defect 9: the request's model is a column (Haiku calls are not Opus calls)."""
    t = pq.read_table(weka_trace, columns=["agent_id", "model", "agent_async"]).to_pandas()
    counts = t[t.agent_id == 0].model.value_counts()
    assert counts["claude-opus-4-5-20251101"] == 17_004 and counts["claude-haiku-4-5-20251001"] == 155
    assert t.model.notna().all() and not t.agent_async.any()  # the dev file's sub-agents are all joined
