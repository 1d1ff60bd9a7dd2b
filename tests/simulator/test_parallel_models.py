"""The models of a scenario simulated at once, one process each (`sim run --jobs`, sim.processes):
the same bytes as one after the other, progress from every model, a failure raised cleanly."""

from __future__ import annotations

import multiprocessing

import pytest

from sim.api import run_scenario
from sim.errors import InputError
from sim.processes import peak_rss_bytes, run_jobs

from .helpers import DISAGG, scenario
from .traces import agent_trace

MODELS = ["deepseek-v4-flash", "deepseek-v4.1-flash"]


def _bytes(folder):
    return {str(p.relative_to(folder)): p.read_bytes() for p in sorted(folder.rglob("*")) if p.is_file()}


def test_models_in_parallel_write_the_same_bytes_as_in_turn(tmp_path):
    trace = agent_trace(tmp_path / "t.parquet", sessions=8, turns=3)
    scn = scenario(tmp_path, trace, models=MODELS, pools=DISAGG)
    serial = run_scenario(scn, out_dir=tmp_path / "serial", jobs=1)
    seen = []
    parallel = run_scenario(
        scn, out_dir=tmp_path / "parallel", jobs=2, progress=lambda *args: seen.append(args[:3])
    )
    assert _bytes(tmp_path / "serial") == _bytes(tmp_path / "parallel")
    assert list(parallel.summary["models"]) == MODELS
    assert parallel.summary == serial.summary
    assert {(model, index) for model, index, _ in seen} == {(m, i) for i, m in enumerate(MODELS)}


def test_a_model_failing_in_its_process_raises_its_error_in_the_parent(tmp_path):
    trace = agent_trace(tmp_path / "t.parquet", sessions=4, turns=2)
    scn = scenario(tmp_path, trace, models=MODELS, workload={"warmup_s": 100_000})
    with pytest.raises(InputError, match="workload.warmup_s: no request .* nothing was measured"):
        run_scenario(scn, out_dir=tmp_path / "out", jobs=2)
    assert not (tmp_path / "out").exists()


def test_an_interrupt_stops_the_model_processes_and_leaves_nothing(tmp_path):
    trace = agent_trace(tmp_path / "t.parquet", sessions=8, turns=3)
    scn = scenario(tmp_path, trace, models=MODELS)

    def progress(*_args):
        raise KeyboardInterrupt  # what Ctrl-C or SIGTERM (sim.cli.signals) raises mid-run

    with pytest.raises(KeyboardInterrupt):
        run_scenario(scn, out_dir=tmp_path / "out", jobs=2, progress=progress)
    assert multiprocessing.active_children() == []
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted(["t.parquet", scn.source_file.rsplit("/", 1)[1]])


def _square(job, send):
    send(job)
    if job < 0:
        raise ValueError(f"negative {job}")
    return job * job


def test_run_jobs_returns_results_in_job_order_and_relays_messages():
    messages = []
    assert run_jobs(_square, [3, 1, 2], 2, lambda index, m: messages.append((index, m))) == [9, 1, 4]
    assert sorted(messages) == [(0, 3), (1, 1), (2, 2)]
    with pytest.raises(ValueError, match="negative -1"):
        run_jobs(_square, [2, -1], 2)


def _touch_mb(mb: int, send) -> int:
    block = bytearray(mb * 1_000_000)  # zero-filled: every page written, so resident
    return len(block)


def test_peak_rss_counts_the_largest_worker():
    assert run_jobs(_touch_mb, [150], 1) == [150_000_000]
    # the worker ended and was joined: its peak is its own (Python + 150 MB), not this process's
    assert peak_rss_bytes(include_self=False) > 150_000_000
    assert peak_rss_bytes() >= peak_rss_bytes(include_self=False)
