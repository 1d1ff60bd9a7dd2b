"""The engine's scheduling on the CPU: a stand-in step function advances a fake clock by an affine cost."""

from __future__ import annotations

import json
from dataclasses import dataclass, field

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from serve_traces import session_trace, writer

from kernels_bench.serve.engine import Engine, EngineConfig, EngineRequest
from kernels_bench.serve.records import REQUEST_SCHEMA, requests_table, steps_table, write_run
from kernels_bench.serve.replay import FakeClock, read_trace, replay, token_ids
from kernels_bench.serve.standin import AffineCost, StandinStepFunction
from sim.metrics.schema import REQUEST_SCHEMA as SIM_REQUEST_SCHEMA


@pytest.fixture
def write_trace(tmp_path):
    return writer(tmp_path)


def _engine(budget=1024, chunk=512, max_batch=64, num_blocks=256, prefix=True, cost=None):
    clock = FakeClock()
    fn = StandinStepFunction(block_tokens=256, num_blocks=num_blocks, clock=clock, keep_plans=True,
                             cost=cost or AffineCost())  # fmt: skip
    return Engine(fn, EngineConfig(budget, chunk, max_batch, None, prefix), clock.now), clock, fn


def _run(table, write_trace, **kw):
    rows = read_trace(write_trace(table))
    engine, clock, fn = _engine(**kw)
    stats = replay(rows, engine, clock)
    return rows, engine, fn, stats


def _req(rid: int, n_in: int, n_out: int, session: int = 0) -> EngineRequest:
    return EngineRequest(rid, session, 0.0, np.arange(n_in) + 1000 * rid, n_out, np.arange(n_out))


def test_budget_decode_first_and_chunking() -> None:
    engine, _, fn = _engine(budget=1024, chunk=512)
    engine.add(_req(0, 1300, 3))
    engine.add(_req(1, 700, 2))
    while engine.busy:
        engine.step()
    shapes = [([w.seq_id for w in p.decode], [(w.seq_id, w.context_tokens, w.new_tokens) for w in p.prefill])
              for p in fn.plans]  # fmt: skip
    assert shapes == [
        ([], [(0, 0, 512), (1, 0, 512)]),
        ([], [(0, 512, 512), (1, 512, 188)]),  # request 1's prompt ends: first token
        ([1], [(0, 1024, 276)]),  # decode first, then the rest of request 0 (1 + 276 <= 1024)
        ([0], []),  # request 1 finished (2 tokens)
        ([0], []),
    ]
    assert all(p.decode_batch + p.prefill_tokens <= 1024 for p in fn.plans)
    assert [s.prefill_last_chunk for s in engine.steps] == [[False, False], [False, True], [True], [], []]
    assert [o.request.request_id for o in engine.done] == [1, 0]
    assert all(o.computed_tokens == o.request.input_tokens for o in engine.done)


def test_max_batch_caps_running_sequences() -> None:
    engine, _, fn = _engine(budget=4096, chunk=512, max_batch=2)
    for rid in range(4):
        engine.add(_req(rid, 100, 5))
    while engine.busy:
        engine.step()
    assert max(p.decode_batch + len(p.prefill) for p in fn.plans) == 2
    assert len(engine.done) == 4


def test_prefix_hits_across_turns(write_trace) -> None:
    rows, engine, _, _ = _run(session_trace(2, 3, first_in=600, growth=300), write_trace)
    t = requests_table(engine, rows).to_pydict()
    # turn k repeats turn k-1's input (600 + 300 (k-1) tokens): whole 256-token blocks of it are hits
    assert t["hit_tokens"] == [0, 512, 768, 0, 512, 768]
    assert t["prefix_source"] == ["none", "hbm", "hbm", "none", "hbm", "hbm"]
    assert t["computed_tokens"] == [600, 900 - 512, 1200 - 768] * 2
    assert all(s == "completed" for s in t["status"])


def test_shared_prompt_hits_across_sessions(write_trace) -> None:
    rows, engine, _, _ = _run(session_trace(2, 1, first_in=600, shared=512, stagger_s=1.0), write_trace)
    t = requests_table(engine, rows).to_pydict()
    assert t["hit_tokens"] == [0, 512] and t["shared_prefix_hit"] == [False, True]


def test_eviction_when_the_pool_is_full(write_trace) -> None:
    # 6 sessions x 2 turns of 1,000-2,000 tokens in 16 blocks: the first turns' cached blocks are
    # evicted (LRU) to admit later sessions, so all second turns but the first miss their prefix
    table = session_trace(6, 2, first_in=1000, growth=1000, think_s=0.05, stagger_s=0.05)
    rows, engine, _, _ = _run(table, write_trace, num_blocks=16, budget=2048, chunk=1024)
    t = requests_table(engine, rows).to_pydict()
    second = [h for h, i in zip(t["hit_tokens"], t["request_index"], strict=True) if i == 1]
    assert engine.pool.stats.evicted_blocks > 0
    assert second == [768, 0, 0, 0, 0, 0]
    assert all(s == "completed" for s in t["status"])


def test_preemption_recomputes_and_completes(write_trace) -> None:
    # 4 sequences of 700 tokens decoding 300 tokens each in 12 blocks: decode blocks run out
    table = session_trace(4, 1, first_in=700, out=300, stagger_s=0.0)
    rows, engine, _, _ = _run(table, write_trace, num_blocks=12, budget=4096, chunk=1024)
    t = requests_table(engine, rows).to_pydict()
    assert engine.preemptions > 0 and sum(t["preemptions"]) == engine.preemptions
    assert all(s == "completed" for s in t["status"])
    assert max(t["computed_tokens"]) > 700  # recomputed after preemption
    assert engine.pool.used_blocks == 0  # every block given back


def test_oversized_prompt_is_rejected_and_its_successor_still_arrives(write_trace) -> None:
    table = session_trace(1, 2, first_in=5000, growth=-4900)
    rows, engine, _, _ = _run(table, write_trace, num_blocks=8)
    t = requests_table(engine, rows).to_pydict()
    assert t["status"] == ["rejected", "completed"] and t["reject_reason"] == ["kv_exceeds_hbm", None]


def test_closed_loop_think_time_from_the_previous_end(write_trace) -> None:
    rows, engine, _, _ = _run(session_trace(1, 3, think_s=2.5), write_trace)
    t = requests_table(engine, rows).to_pydict()
    for k in (1, 2):
        assert t["arrival_s"][k] == pytest.approx(t["finish_s"][k - 1] + 2.5)
    rows2 = read_trace(rows and write_trace(session_trace(1, 3, think_s=2.5), "b.parquet"))
    engine2, clock2, _ = _engine()
    replay(rows2, engine2, clock2, think_scale=0.1)
    t2 = requests_table(engine2, rows2).to_pydict()
    assert t2["arrival_s"][1] == pytest.approx(t2["finish_s"][0] + 0.25)


def test_step_times_and_latencies_follow_the_clock(write_trace) -> None:
    cost = AffineCost(base_s=0.01, decode_s=0.0, decode_ctx_s=0.0, prefill_token_s=0.0, prefill_attn_s=0.0)
    rows, engine, _, _ = _run(session_trace(1, 1, first_in=300, out=5), write_trace, cost=cost)
    t = requests_table(engine, rows).to_pydict()
    steps = steps_table(engine).to_pydict()
    assert steps["wall_s"] == pytest.approx([0.01] * 5)  # one prefill step, four decodes
    assert t["ttft_s"] == pytest.approx([0.01]) and t["tpot_s"] == pytest.approx([0.01])
    assert t["e2e_s"] == pytest.approx([0.05])
    assert steps["decode_context_tokens"][1:] == [[300], [301], [302], [303]]
    assert steps["prefill_last_chunk"] == [[True], [], [], [], []]


def test_schedule_is_deterministic(write_trace, tmp_path) -> None:
    table = session_trace(5, 4, first_in=900, growth=400, out=20, think_s=0.3, stagger_s=0.05)
    outs = []
    for k in range(2):
        rows, engine, _, stats = _run(table, write_trace, num_blocks=40)
        d = tmp_path / f"run{k}"
        write_run(d, engine, rows, tmp_path / "trace.parquet", 1.0, stats, "fake")
        outs.append((pq.read_table(d / "requests.parquet"), pq.read_table(d / "steps.parquet")))
    assert outs[0][0].equals(outs[1][0]) and outs[0][1].equals(outs[1][1])


def test_token_ids_share_exactly_the_stated_prefix(write_trace) -> None:
    rows = read_trace(write_trace(session_trace(2, 2, first_in=600, growth=300, shared=100)))
    ids = token_ids(rows)
    (p0, o0), (p1, _), (p2, _) = ids[0], ids[1], ids[2]
    assert np.array_equal(p1[:600], p0) and not np.array_equal(p1[600:], o0[:300])
    assert np.array_equal(p2[:100], p0[:100]) and (p2[100:600] != p0[100:600]).mean() > 0.99


def test_request_log_has_sims_columns() -> None:
    engine_fields = [(f.name, f.type, f.nullable) for f in REQUEST_SCHEMA]
    sim_fields = [(f.name, f.type, f.nullable) for f in SIM_REQUEST_SCHEMA]
    assert engine_fields[: len(sim_fields)] == sim_fields
    assert isinstance(REQUEST_SCHEMA.field("preemptions").type, pa.DataType)


def test_run_cli_writes_a_run_directory(write_trace, tmp_path, capsys) -> None:
    from kernels_bench.serve.run import main

    trace = write_trace(session_trace(3, 2))
    assert (
        main(["--trace", str(trace), "--out", str(tmp_path / "run"), "--budget", "1024", "--chunk", "512"])
        == 0
    )
    names = sorted(p.name for p in (tmp_path / "run").iterdir())
    assert names == ["provenance.json", "requests.parquet", "steps.parquet", "trace.parquet"]
    assert pq.read_table(tmp_path / "run" / "requests.parquet").num_rows == 6
    assert main(["--trace", str(trace), "--out", str(tmp_path / "run"), "--model", "some-spec"]) == 0
    prov = json.loads((tmp_path / "run" / "provenance.json").read_text())
    assert prov["model"] == "some-spec" and prov["engine"]["num_blocks"] == 512 and prov["clock"] == "fake"
    assert main(["--trace", str(tmp_path / "nope.parquet"), "--out", str(tmp_path / "r2")]) == 2
    assert "nope.parquet: no such trace file" in capsys.readouterr().err
    assert not (tmp_path / "r2").exists()


@dataclass
class _Warmed(StandinStepFunction):
    """A stand-in that 'captures a graph' the first time it sees a row count, unless warmed up first."""

    seen: set[int] = field(default_factory=set)
    warm_calls: list[tuple[int, int]] = field(default_factory=list)
    last_step_captured: bool = False

    def warm_up(self, context_tokens: int, max_rows: int) -> None:
        self.warm_calls.append((context_tokens, max_rows))
        self.seen.update(range(1, max_rows + 1))

    def __call__(self, plan) -> None:
        rows = plan.decode_batch + plan.prefill_tokens
        self.last_step_captured = rows not in self.seen
        self.seen.add(rows)
        super().__call__(plan)


def test_in_run_captures_are_recorded_per_step_and_counted(write_trace, tmp_path) -> None:
    rows = read_trace(write_trace(session_trace(2, 2)))
    clock = FakeClock()
    fn = _Warmed(num_blocks=64, clock=clock)
    engine = Engine(fn, EngineConfig(1024, 512, 8), clock.now)
    stats = replay(rows, engine, clock)
    summary = write_run(tmp_path / "run", engine, rows, tmp_path / "trace.parquet", 1.0, stats, "fake")
    captured = pq.read_table(tmp_path / "run" / "steps.parquet").column("graph_captured").to_pylist()
    assert captured[0] is True and summary["steps_with_graph_capture"] == sum(captured) > 0


def test_run_pre_captures_for_the_trace_and_records_the_commit(write_trace, tmp_path, monkeypatch) -> None:
    from kernels_bench.serve import run

    made: list[_Warmed] = []

    def build(spec, pairs, clock):
        made.append(_Warmed(clock=clock))
        return made[-1]

    monkeypatch.setattr(run, "build_step", build)
    monkeypatch.delenv("KB_COMMIT", raising=False)
    trace = write_trace(session_trace(3, 2, first_in=600, growth=300, out=8))
    out = tmp_path / "run"
    assert run.main(["--trace", str(trace), "--out", str(out), "--budget", "1024", "--chunk", "512",
                     "--commit", "abc1234+dirty"]) == 0  # fmt: skip
    assert made[0].warm_calls == [(900 + 8, 1024)]  # the longest input + output, the budget
    prov = json.loads((out / "provenance.json").read_text())
    assert prov["commit"] == "abc1234+dirty" and "--commit abc1234+dirty" in prov["command"]
    s = prov["summary"]
    assert s["steps_with_graph_capture"] == 0 and s["completed"] == 6 and s["requests_with_hit"] == 3
    assert s["requests_without_hit"] == 3 and s["decode_batch_min"] >= 1
    assert s["ttft_s"]["p50"] <= s["ttft_s"]["p90"] <= s["ttft_s"]["p99"]
