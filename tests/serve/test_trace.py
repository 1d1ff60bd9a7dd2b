"""The replay trace of issue 14: reproducible from the public Weka file, scaled by its stated rules."""

from __future__ import annotations

import numpy as np
import pyarrow.parquet as pq

from kernels_bench.serve.trace import REPLAY_TRACE, WEKA_FILE, main
from sim.paths import project_root


def test_committed_trace_is_regenerated_byte_for_byte(public_traces, tmp_path) -> None:
    out = tmp_path / "replay.parquet"
    assert main(["--out", str(out), "--src", str(public_traces / WEKA_FILE)]) == 0
    assert out.read_bytes() == (project_root() / REPLAY_TRACE).read_bytes()


def test_scaling_rules_hold() -> None:
    t = pq.read_table(project_root() / REPLAY_TRACE).to_pandas()
    assert len(t) == 480 and t.session_id.nunique() == 48
    assert (t.groupby("session_id").size() == 10).all()
    assert (t.prefix_tokens <= t.input_tokens).all() and (t.output_tokens <= 2048).all()
    assert t.think_time_s.max() <= 30.0
    parents = t.set_index("request_id")
    has = t.prefix_parent_request_id >= 0
    # a prefix never reaches past its parent's input + output
    span = (
        parents.loc[t.prefix_parent_request_id[has], ["input_tokens", "output_tokens"]].sum(axis=1).to_numpy()
    )
    assert (t.prefix_tokens[has].to_numpy() <= span).all()
    assert np.allclose(t.groupby("session_id").session_start_s.first(), np.arange(48) * 0.1)


def test_bad_options_get_one_message(public_traces, tmp_path, capsys) -> None:
    src = str(public_traces / WEKA_FILE)
    assert main(["--out", str(tmp_path / "x.parquet"), "--src", src, "--context-scale", "2"]) == 2
    assert "context_scale" in capsys.readouterr().err
    assert main(["--out", str(tmp_path / "x.parquet"), "--src", str(tmp_path / "none.xz")]) == 2
    assert "Weka trace not found" in capsys.readouterr().err
    assert not (tmp_path / "x.parquet").exists()


def test_a_request_without_output_is_replayed_with_the_one_token_prefill_samples() -> None:
    """A Claude Code turn can log no output token (interrupted before it): the served engine needs at least
    one, so the scaled trace gives it one and keeps the request and its successors."""
    from kernels_bench.serve.trace import scale_session
    from sim.workload.rows import request_table

    session = request_table(3, {"session_id": 7, "session_start_s": 0.0, "request_id": np.arange(3),
                                "request_index": np.arange(3), "arrival": "think", "arrival_time_s": 0.0,
                                "input_tokens": np.array([1600, 3200, 4800]), "output_tokens": np.array([40, 0, 9000])})  # fmt: skip
    scaled = scale_session(session, 0, 0, 0.0, requests=3, context_scale=1 / 16, think_scale=0.1, think_cap_s=30.0,
                           output_cap=2048)  # fmt: skip
    assert scaled.column("output_tokens").to_pylist() == [40, 1, 2048]
    assert scaled.column("input_tokens").to_pylist() == [100, 200, 300]
