"""The generator: determinism, the committed sample, invariants over random specs (hypothesis),
templates and envelope files."""

from __future__ import annotations

import tempfile
from pathlib import Path

import numpy as np
import pyarrow.parquet as pq
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from sim.paths import project_root
from sim.workload.generator import generate_trace
from sim.workload.importers import import_trace
from sim.workload.io import read_trace_table, trace_info
from sim.workload.spec import load_spec, parse_spec

from .test_trace_importers import SERVEGEN

SAMPLE_SPEC = project_root() / "traces" / "agent_1M_sample.yaml"
SAMPLE = project_root() / "traces" / "agent_1M_sample.parquet"


def small_spec(**over) -> dict:
    spec = {
        "name": "small",
        "days": 0.05,
        "seed": 3,
        "max_context_tokens": 200_000,
        "max_output_tokens": 4_000,
        "arrivals": {"sessions_per_hour": 200, "envelope": {"kind": "diurnal", "amplitude": 0.0}},
        "sessions": {
            "kind": "parametric",
            "requests_per_session": {"lognormal": {"median": 20, "sigma": 0.8}},
            "turn_end_probability": {"constant": 0.2},
            "main": {
                "initial_context_tokens": {"lognormal": {"median": 5000, "sigma": 1.0}},
                "tool_result_tokens": {"lognormal": {"median": 3000, "sigma": 1.0}},
                "early": [{"up_to_tokens": 4000, "appended_tokens": [{"constant": 9000}]},
                          {"appended_tokens": [{"constant": 10}]}],
                "output_tokens": {"lognormal": {"median": 300, "sigma": 0.8}},
                "think_after_tool_s": {"lognormal": {"median": 5, "sigma": 0.5}},
            },
            "user_message_tokens": {"constant": 100},
            "think_after_end_turn_s": {"lognormal": {"median": 60, "sigma": 1.0}},
            "compaction": {"limit_tokens": {"choice": {"values": [60_000, 150_000]}}, "probability": 0.01,
                           "keep_fraction": {"constant": 0.2}},
            "cache_break_probability": 0.05,
            "subagents": {"probability": 0.05, "count": {"choice": {"values": [1, 3]}},
                          "requests": {"constant": 4}, "shared_prefix_tokens": 2000,
                          "loop": {"initial_context_tokens": {"constant": 1000},
                                   "tool_result_tokens": {"constant": 500},
                                   "output_tokens": {"constant": 100},
                                   "think_after_tool_s": {"constant": 1.0}}},
            "images": {"probability": 0.3, "count": {"constant": 2}, "tokens_per_image": 700},
            "reasoning_effort": {"choice": {"values": [10, 90]}},
        },
        "shared_prefix": {"tokens": 6000, "variants": 3},
        "tenants": {"count": 4},
    }  # fmt: skip
    for path, value in over.items():
        node = spec
        keys = path.split(".")
        for key in keys[:-1]:
            node = node[key]
        node[keys[-1]] = value
    return spec


def test_same_seed_same_bytes_different_seed_different_bytes(tmp_path):
    spec = parse_spec(small_spec())
    a, b, c = (tmp_path / f"{n}.parquet" for n in "abc")
    generate_trace(spec, a, seed=5)
    generate_trace(spec, b, seed=5)
    generate_trace(spec, c, seed=6)
    assert a.read_bytes() == b.read_bytes()
    assert a.read_bytes() != c.read_bytes()


def test_committed_sample_regenerates_identically(tmp_path):
    out = tmp_path / "sample.parquet"
    generate_trace(SAMPLE_SPEC, out)
    written_by = pq.ParquetFile(SAMPLE).metadata.created_by
    if written_by == pq.ParquetFile(out).metadata.created_by:
        assert out.read_bytes() == SAMPLE.read_bytes()
    else:  # another pyarrow writes its own version string and encodings: compare the content
        assert read_trace_table(out).equals(read_trace_table(SAMPLE))
    info = trace_info(SAMPLE)
    assert 150 <= info["sessions"] <= 400 and info["requests"] < 30_000
    assert SAMPLE.stat().st_size < 2_000_000
    assert pq.read_table(SAMPLE, columns=["input_tokens"]).column(0).to_numpy().max() > 900_000


def _check_invariants(t: dict[str, np.ndarray], cap: int) -> None:
    """What every generated trace satisfies beyond the file invariants (validate.py)."""
    assert (t["input_tokens"] + t["output_tokens"] <= cap).all()
    assert (t["prefix_tokens"] <= t["input_tokens"]).all()
    assert (t["shared_prefix_tokens"] <= t["input_tokens"]).all()
    pos = {rid: i for i, rid in enumerate(t["request_id"])}
    for i in np.flatnonzero(t["depends_on_request_id"] >= 0):
        d = pos[t["depends_on_request_id"][i]]
        assert t["session_id"][d] == t["session_id"][i] and d < i
        assert t["arrival_time_s"][d] < t["arrival_time_s"][i]  # causality: after the request it waits for
    for i in np.flatnonzero(t["prefix_parent_request_id"] >= 0):
        p = pos[t["prefix_parent_request_id"][i]]
        # appending: whole 64-token blocks of the parent's input (spec.PrefixReuse defaults)
        assert t["prefix_tokens"][i] == t["input_tokens"][p] // 64 * 64 > 0
        assert t["agent_id"][p] == t["agent_id"][i]
    first = np.concatenate([[True], t["session_id"][1:] != t["session_id"][:-1]])
    assert (t["arrival"][first] == "absolute").all() and (t["arrival"][~first] == "think").all()
    assert (t["arrival_time_s"][first] == t["session_start_s"][first]).all()


@settings(max_examples=12, deadline=None)
@given(
    seed=st.integers(0, 2**31),
    cap=st.sampled_from([40_000, 120_000, 1_000_000]),
    median=st.sampled_from([2, 30, 200]),
    tool=st.sampled_from([100, 5_000, 50_000]),
    subagent_p=st.sampled_from([0.0, 0.3]),
)
def test_generated_invariants(seed, cap, median, tool, subagent_p):
    spec = parse_spec(small_spec(**{
        "max_context_tokens": cap,
        "sessions.requests_per_session": {"lognormal": {"median": median, "sigma": 1.0}, "max": 400},
        "sessions.main.tool_result_tokens": {"lognormal": {"median": tool, "sigma": 1.5}},
        "sessions.subagents.probability": subagent_p,
        "arrivals.sessions_per_hour": 60,
    }))  # fmt: skip
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / "g.parquet"
        summary = generate_trace(spec, out, seed=seed)
        table = read_trace_table(out, columns=None)
    t = {
        name: table.column(name).to_numpy(zero_copy_only=False)
        for name in table.column_names
        if name != "block_hashes"
    }
    assert summary["requests"] == table.num_rows
    assert summary["sessions"] == len(np.unique(t["session_id"]))
    assert summary["top_level_requests"] == int((t["agent_id"] == 0).sum())
    if table.num_rows:
        _check_invariants(t, cap)
        assert table.column("block_hashes").null_count == table.num_rows
        assert ((t["session_start_s"] >= 0) & (t["session_start_s"] < spec.days * 86400)).all()


def test_features_show_up(tmp_path):
    """Sub-agents, compactions, cache breaks, images, tenants, early growth: each leaves its mark."""
    out = tmp_path / "g.parquet"
    generate_trace(parse_spec(small_spec()), out, days=0.2)
    table = read_trace_table(out)
    t = {n: table.column(n).to_numpy(zero_copy_only=False) for n in table.column_names if n != "block_hashes"}
    _check_invariants(t, 200_000)
    sub = t["agent_id"] > 0
    assert sub.any() and (t["shared_prefix_tokens"][sub] == 2000).all()
    assert set(t["tenant"]) <= {"t0", "t1", "t2", "t3"} and len(set(t["tenant"])) > 1
    assert set(t["reasoning_effort"]) == {10, 90}
    assert (t["image_tokens"] == 700 * t["image_count"]).all() and (t["image_count"] > 0).any()
    restart = (t["prefix_parent_request_id"] < 0) & (t["arrival"] == "think") & ~sub
    assert restart.any()  # compactions and cache breaks
    assert len(np.unique(t["shared_prefix_id"][~sub])) == 3
    # early growth: the main agent's second request appends 9,000 tokens when the session started
    # with at most 4,000 tokens beyond the 6,000-token prefix, else 10 (plus any images)
    pos = {rid: i for i, rid in enumerate(t["request_id"])}
    seen = {"small": 0, "large": 0}
    for i in np.flatnonzero(~sub & (t["prefix_parent_request_id"] >= 0)):
        p = pos[t["prefix_parent_request_id"][i]]
        if t["request_index"][p] != 0:
            continue
        appended = t["input_tokens"][i] - t["input_tokens"][p] - t["output_tokens"][p] - t["image_tokens"][i]
        small = t["input_tokens"][p] - t["image_tokens"][p] - 6000 <= 4000
        assert appended == (9000 if small else 10)
        seen["small" if small else "large"] += 1
    assert min(seen.values()) > 0


@pytest.mark.parametrize("name", ["agent_2w.yaml", "agent_1M_sample.yaml", "fleet_2w.yaml"])
def test_shipped_specs_generate(name, tmp_path):
    spec, _ = load_spec(project_root() / "traces" / name)
    summary = generate_trace(spec, tmp_path / "g.parquet", days=0.01)
    assert summary["sessions"] > 0 and summary["requests"] > summary["sessions"]


def test_concurrent_sessions_set_the_rate_from_a_pilot(tmp_path):
    spec = small_spec(
        **{"arrivals": {"concurrent_sessions": 50, "envelope": {"kind": "diurnal", "amplitude": 0.0}}}
    )
    summary = generate_trace(parse_spec(spec), tmp_path / "c.parquet", days=0.1)
    duration = summary["pilot_mean_session_duration_s"]
    assert summary["sessions_per_hour"] == pytest.approx(50 / duration * 3600)
    assert summary["sessions"] == pytest.approx(summary["sessions_per_hour"] * 2.4, rel=0.25)


def test_templates_resample_whole_sessions(tmp_path):
    source = tmp_path / "src.parquet"
    generate_trace(parse_spec(small_spec()), source, days=0.02)
    spec = parse_spec({"name": "tmpl", "days": 0.05, "arrivals": {"sessions_per_hour": 100},
                       "sessions": {"kind": "templates", "file": str(source)}})  # fmt: skip
    out = tmp_path / "t.parquet"
    generate_trace(spec, out, seed=2)
    src, gen = read_trace_table(source).to_pandas(), read_trace_table(out).to_pandas()
    by_template = {k: g for k, g in src.groupby("session_id")}
    for _, g in gen.groupby("session_id"):
        name = g["template"].iloc[0]
        tpl = by_template[int(name.split("#")[1])]
        assert g["input_tokens"].tolist() == tpl["input_tokens"].tolist()
        assert (g["think_time_s"].to_numpy() == tpl["think_time_s"].to_numpy()).all()
        # links keep their shape: offsets within the session are the template's
        offsets = np.where(
            g["depends_on_request_id"] >= 0, g["depends_on_request_id"] - g["request_id"].iloc[0], -1
        )
        tpl_offsets = np.where(
            tpl["depends_on_request_id"] >= 0, tpl["depends_on_request_id"] - tpl["request_id"].iloc[0], -1
        )
        assert (offsets == tpl_offsets).all()


def test_arrivals_follow_a_file_envelope(tmp_path):
    folder = tmp_path / "sg"
    for name, text in SERVEGEN.items():
        (folder / name).parent.mkdir(parents=True, exist_ok=True)
        (folder / name).write_text(text)
    import_trace("servegen", folder, tmp_path / "env.parquet", select="language/m-x")
    spec_path = tmp_path / "s.yaml"
    # the summed rate per 600 s window is 3, 2, 4 req/s: the shape 1, 2/3, 4/3 repeats every 30 min
    spec_path.write_text(
        "name: env\ndays: 1\narrivals:\n  sessions_per_hour: 600\n  envelope: {kind: file, file: env.parquet}\n"
        "sessions:\n  kind: parametric\n  requests_per_session: {constant: 1}\n  turn_end_probability: {constant: 1}\n"
        "  main:\n    initial_context_tokens: {constant: 100}\n    tool_result_tokens: {constant: 10}\n"
        "    output_tokens: {constant: 10}\n    think_after_tool_s: {constant: 1}\n"
        "  user_message_tokens: {constant: 10}\n  think_after_end_turn_s: {constant: 1}\n"
    )
    spec, base = load_spec(spec_path)
    assert base == tmp_path
    out = tmp_path / "g.parquet"
    generate_trace(spec_path, out)
    starts = read_trace_table(out, columns=["session_start_s"]).column(0).to_numpy()
    window = ((starts % 1800) // 600).astype(int)
    counts = np.bincount(window, minlength=3)
    assert len(starts) == pytest.approx(600 * 24, rel=0.05)
    assert counts / counts.sum() == pytest.approx(np.array([3, 2, 4]) / 9, abs=0.02)
