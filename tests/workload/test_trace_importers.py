"""Each importer on tiny hand-written inputs (no ../shared needed): exact rows out."""

from __future__ import annotations

import gzip
import io
import json
import lzma
import tarfile

import numpy as np
import pytest

from sim.workload.ids import SHARED_BLOCK_BIT
from sim.workload.importers import import_trace
from sim.workload.importers.servegen import read_envelope, summarize
from sim.workload.io import read_trace_table


def _req(t, n_in, n_out, ids, stop="tool_use", think=None, api=1.0, **extra):
    r = {"t": t, "type": "n", "model": "m1", "in": n_in, "out": n_out, "hash_ids": ids, "input_types": ["tool_result"],
         "stop": stop, "api_time": api, **extra}  # fmt: skip
    if think is not None:
        r["think_time"] = think
    return r


def weka_session(sid="trace_0001"):
    """Main agent: 3 requests (appending), one sub-agent launched after the first (2 requests),
    block size 4 tokens, a 2-block tool + system prompt."""
    sub = {"t": 9.0, "type": "subagent", "agent_id": "agent_1", "subagent_type": "Explore", "duration_ms": 6000,
           "tool_tokens": 4, "system_tokens": 0, "status": "completed",
           "requests": [_req(0.0, 8, 2, [100, 101], think=0.0), _req(3.0, 12, 1, [100, 101, 102], stop="end_turn", think=1.0)]}  # fmt: skip
    return {
        "id": sid, "models": ["m1"], "block_size": 4, "hash_id_scope": "local", "tool_tokens": 6, "system_tokens": 2,
        "requests": [
            _req(0.0, 12, 3, [1, 2, 3], think=0.0),
            sub,
            _req(12.0, 16, 2, [1, 2, 3, 4], think=11.0),
            _req(40.0, 21, 5, [1, 2, 3, 4, 5], stop="end_turn", think=20.0),
        ],
    }  # fmt: skip


def test_weka_session_layout(tmp_path):
    src = tmp_path / "w.jsonl.xz"
    src.write_bytes(lzma.compress((json.dumps(weka_session()) + "\n").encode()))
    out = tmp_path / "w.parquet"
    summary = import_trace("weka", src, out)
    assert (summary["sessions"], summary["requests"], summary["top_level_requests"]) == (1, 5, 3)
    t = read_trace_table(out).to_pydict()
    # arrival order: main 0 at 0 s, sub-agent at 3 s and 6 s (it started at 9 - 6 = 3 s), main at 12 s, 40 s
    assert t["agent_id"] == [0, 1, 1, 0, 0]
    assert t["arrival_time_s"] == [0.0, 3.0, 6.0, 12.0, 40.0]
    assert t["arrival"] == ["absolute", "think", "think", "think", "think"]
    # the sub-agent waits for main request 0 (ended at 1 s): 2 s; the main agent then waits for
    # the sub-agent's last request (ended at 7 s): 5 s; then the recorded think time
    assert t["depends_on_request_id"] == [-1, 0, 1, 2, 3]
    assert t["think_time_s"] == [0.0, 2.0, 1.0, 5.0, 20.0]
    assert t["template"] == ["trace_0001"] * 5
    assert t["stop_reason"] == ["tool_use", "tool_use", "end_turn", "tool_use", "end_turn"]
    # prefixes: longest common block prefix with an earlier request, 4 tokens a block
    assert t["prefix_parent_request_id"] == [-1, -1, 1, 0, 3]
    assert t["prefix_tokens"] == [0, 0, 8, 12, 16]
    # tool + system prompt: (6 + 2) // 4 = 2 blocks for the main agent, 4 // 4 = 1 for the sub-agent
    assert t["shared_prefix_tokens"] == [8, 4, 4, 8, 8]
    blocks = t["block_hashes"]
    assert all(b >= SHARED_BLOCK_BIT for b in blocks[0][:2]) and blocks[0][2] < SHARED_BLOCK_BIT
    assert blocks[3][:3] == blocks[0] and blocks[4][:4] == blocks[3]  # chains stay chains
    assert t["block_size_tokens"] == [4] * 5


def test_weka_shared_prefix_is_shared_across_sessions(tmp_path):
    src = tmp_path / "w.jsonl"
    src.write_text(
        json.dumps(weka_session("trace_0001")) + "\n" + json.dumps(weka_session("trace_0002")) + "\n"
    )
    t = (
        read_trace_table(tmp_path / "w.parquet")
        if import_trace("weka", src, tmp_path / "w.parquet")
        else None
    )
    first = [
        b
        for b, i in zip(t["block_hashes"].to_pylist(), t["request_index"].to_pylist(), strict=True)
        if i == 0
    ]
    assert first[0][:2] == first[1][:2]  # same model, same prompt blocks
    assert first[0][2] != first[1][2]  # the rest is per session
    assert t["session_id"].to_pylist() == [0] * 5 + [1] * 5
    assert t["request_id"].to_pylist() == list(range(10))


def _mooncake_lines():
    # block 0 starts every prompt; user A: 0,1,2 -> 0,1,2,4 -> 0,1,2,4,6; user B: 0,3
    rows = [
        (0, 1200, 10, [0, 1, 2]),
        (1000, 600, 20, [0, 3]),
        (3000, 1700, 30, [0, 1, 2, 4]),
        (6000, 2100, 40, [0, 1, 2, 4, 6]),
    ]
    return "".join(json.dumps({"timestamp": t, "input_length": i, "output_length": o, "hash_ids": h}) + "\n"
                   for t, i, o, h in rows)  # fmt: skip


def test_mooncake_sessions_and_prefixes(tmp_path):
    src = tmp_path / "m.jsonl.gz"
    src.write_bytes(gzip.compress(_mooncake_lines().encode()))
    out = tmp_path / "m.parquet"
    assert import_trace("mooncake", src, out)["sessions"] == 2
    t = read_trace_table(out).to_pydict()
    assert t["session_id"] == [0, 0, 0, 1]  # A's three turns, then B
    assert t["arrival_time_s"] == [0.0, 3.0, 6.0, 1.0]
    assert t["session_start_s"] == [0.0, 0.0, 0.0, 1.0]
    assert t["arrival"] == ["absolute"] * 4
    # B's full-block prefix [0] is a prefix of A's later turns too, but A's is deeper
    assert t["prefix_parent_request_id"] == [-1, 0, 1, -1]
    assert t["prefix_tokens"] == [0, 1200, 1700, 0]  # min(common blocks x 512, both inputs)
    assert t["shared_prefix_tokens"] == [512] * 4  # block 0: used by both sessions
    assert len(set(t["shared_prefix_id"])) == 1
    assert t["block_hashes"][1] == [0, 1, 2, 4]


def test_azure_rows(tmp_path):
    src = tmp_path / "a.csv"
    src.write_text("TIMESTAMP,ContextTokens,GeneratedTokens\n"
                   "2023-11-16 18:15:46.6805900,374,44\n2023-11-16 18:15:50.9951690,396,109\n")  # fmt: skip
    out = tmp_path / "a.parquet"
    assert import_trace("azure", src, out)["sessions"] == 2
    t = read_trace_table(out).to_pydict()
    assert t["input_tokens"] == [374, 396] and t["output_tokens"] == [44, 109]
    assert t["arrival_time_s"][0] == 0.0 and t["arrival_time_s"][1] == pytest.approx(4.314579)
    assert t["session_id"] == [0, 1] and t["request_index"] == [0, 0]


SERVEGEN = {
    "language/m-x/chunk-0-trace.csv": "0,1.0,1.1,Gamma,0.5,2.0\n600,0,0,,0,0\n1200,3.0,2.0,Weibull,0.4,0.4\n",
    "language/m-x/chunk-2-trace.csv": "0,2.0,1.0,Gamma,1,1\n600,2.0,1.0,Gamma,1,1\n1200,1.0,1.0,Gamma,1,1\n",
    "reason/r/chunk-1-trace.csv": "0,5,1,Gamma,1,1\n",
}


def test_servegen_envelope_from_tar_and_folder(tmp_path):
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w:xz") as tar:
        for name, text in SERVEGEN.items():
            info = tarfile.TarInfo(name)
            info.size = len(text)
            tar.addfile(info, io.BytesIO(text.encode()))
    src = tmp_path / "sg.tar.xz"
    src.write_bytes(buf.getvalue())
    table = read_envelope(src, select="language/m-x")
    assert table.column("client").to_pylist() == ["language/m-x/0"] * 3 + ["language/m-x/2"] * 3
    summary = summarize(table)["groups"]["language/m-x"]
    assert summary["clients"] == 2 and summary["span_s"] == 1800.0
    assert (summary["rate_min_per_s"], summary["rate_max_per_s"]) == (2.0, 4.0)
    assert summary["rate_mean_per_s"] == pytest.approx(3.0)
    folder = tmp_path / "data"
    for name, text in SERVEGEN.items():
        (folder / name).parent.mkdir(parents=True, exist_ok=True)
        (folder / name).write_text(text)
    assert read_envelope(folder).num_rows == 7
    out = tmp_path / "env.parquet"
    assert import_trace("servegen", folder, out, select="reason")["clients"] == 1
    assert np.isclose(
        read_envelope(folder / "reason/r/chunk-1-trace.csv").column("rate_per_s").to_numpy(), 5
    ).all()


def _import_one(tmp_path, session, **options):
    src = tmp_path / "one.jsonl"
    src.write_text(json.dumps(session) + "\n")
    summary = import_trace("weka", src, tmp_path / "one.parquet", **options)
    return summary, read_trace_table(tmp_path / "one.parquet").to_pydict()


def test_weka_async_subagent_is_kept_and_not_waited_for(tmp_path):
    """The parent's next request (12 s) comes before the sub-agent's last one (15 s): not waited for."""
    session = weka_session()
    session["requests"][1]["t"] = 20.0  # ran 17 s until 20 s: started at 3 s
    session["requests"][1]["duration_ms"] = 17_000
    session["requests"][1]["requests"][1]["t"] = 12.0  # its second request at 3 + 12 = 15 s
    summary, t = _import_one(tmp_path, session)
    assert t["agent_async"] == [a == 1 for a in t["agent_id"]]
    main_next = t["request_id"][t["arrival_time_s"].index(12.0)]
    assert t["depends_on_request_id"][t["request_id"].index(main_next)] == 0  # the main agent's own request
    assert summary["subagents_async"] == 1
    assert t["model"] == ["m1"] * 5


def test_weka_subagent_time_contradicting_its_launch_is_repaired_and_counted(tmp_path):
    session = weka_session()
    session["requests"][1]["t"] = 9_000.0  # ends 9,000 s after the session start: started at 8,994 s
    summary, t = _import_one(tmp_path, session)
    assert summary["subagents_retimed"] == 1
    sub = [s for s, a in zip(t["arrival_time_s"], t["agent_id"], strict=True) if a == 1]
    assert sub[0] == pytest.approx(1.0)  # at the end of the request that launched it (0 s + 1 s)


def test_weka_head_blocks_are_shared_from_an_agents_first_request_only(tmp_path):
    """A later request starting with new blocks (compaction, /clear, a model switch) keeps them
    to itself; a request of another model starting with the shared prompt is keyed with its model."""
    session = weka_session()
    session["requests"][2] = _req(12.0, 16, 2, [7, 8, 9, 10], think=11.0, model="m2")  # new head, m2
    session["requests"][3] = _req(40.0, 21, 5, [1, 2, 3, 4, 5], stop="end_turn", think=20.0, model="m2")
    _, t = _import_one(tmp_path, session)
    rows = {i: k for k, i in enumerate(t["request_index"])}
    new_head, back = rows[3], rows[4]  # in arrival order: main 0, sub 1, sub 2, main 3, main 4
    assert t["shared_prefix_id"][new_head] == -1 and t["shared_prefix_tokens"][new_head] == 0
    assert all(b < SHARED_BLOCK_BIT for b in t["block_hashes"][new_head])
    assert t["shared_prefix_tokens"][back] == 8
    assert t["shared_prefix_id"][back] not in (-1, t["shared_prefix_id"][0])  # m1's prompt, served by m2
    assert t["model"][back] == "m2"


@pytest.mark.parametrize("rule", ["poisson:60", "spread:2"])
def test_weka_session_starts(tmp_path, rule):
    src = tmp_path / "w.jsonl"
    src.write_text("".join(json.dumps(weka_session(f"trace_{i:04d}")) + "\n" for i in range(50)))
    import_trace("weka", src, tmp_path / "a.parquet", session_start=rule, seed=3)
    import_trace("weka", src, tmp_path / "b.parquet", session_start=rule, seed=3)
    assert (tmp_path / "a.parquet").read_bytes() == (tmp_path / "b.parquet").read_bytes()
    t = read_trace_table(tmp_path / "a.parquet").to_pandas()
    starts = t.groupby("session_id").session_start_s.first().to_numpy()
    assert (np.diff(starts) >= 0).all() and len(set(starts)) == 50
    rel = t.arrival_time_s - t.session_start_s
    assert np.allclose(rel, [0.0, 3.0, 6.0, 12.0, 40.0] * 50, atol=1e-6)  # each session's own timeline
    if rule == "spread:2":
        assert starts.max() < 7200
    else:  # 60 an hour: a minute apart on average, the first at 0 s
        assert starts[0] == 0.0 and 30 < np.diff(starts).mean() < 90


@pytest.mark.parametrize("rule", ["poisson", "poisson:-1", "spread:x", "burst:3"])
def test_weka_session_start_rule_errors_name_the_option(tmp_path, rule):
    from sim.errors import InputError

    src = tmp_path / "w.jsonl"
    src.write_text(json.dumps(weka_session()) + "\n")
    with pytest.raises(InputError, match="session start") as err:
        import_trace("weka", src, tmp_path / "a.parquet", session_start=rule)
    assert "--session-start" in str(err.value) and not (tmp_path / "a.parquet").exists()
