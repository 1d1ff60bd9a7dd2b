"""The run directory an engine replay writes (read by ``sim validate --real``):

RUN_DIR/requests.parquet  one row per request, in sim's request-log columns (sim/metrics/schema.py
                          REQUEST_SCHEMA, same names, types and order; a test keeps them equal), then the
                          engine's own: ``preemptions``
RUN_DIR/steps.parquet     one row per engine step (STEP_SCHEMA): when it ran, its wall time, the decode
                          batch and the CUDA-graph bucket the step function reports, and each sequence's
                          context (list columns) so that a step can be predicted again from its composition
RUN_DIR/trace.parquet     the replayed trace, copied (the run is self-contained)
RUN_DIR/provenance.json   engine settings, trace (file, sha256, think scale), step function, machine (GPU,
                          driver, CUDA, torch, packages), commit (as passed to the run: a device copy's own
                          git is not the code's), date, totals, summary (latency percentiles, step times,
                          batch range, hits and misses, evictions, in-run graph captures)

Times are seconds on the engine's clock from the start of the replay. Only pyarrow and the standard library
are used (the GPU machine has no ``sim`` installed).
"""

from __future__ import annotations

import datetime as _dt
import hashlib
import json
import math
import os
import platform
import shutil
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq

from kernels_bench.serve.engine import Engine, Outcome
from kernels_bench.serve.replay import ReplayStats, TraceRow

RUN_FORMAT = "kernels_bench.serve.run/v1"
ENGINE_POOL = "engine"  # the pool name in the request log: one colocated instance
PROVENANCE_JSON = "provenance.json"
REQUESTS_PARQUET = "requests.parquet"
STEPS_PARQUET = "steps.parquet"
TRACE_PARQUET = "trace.parquet"

_f64, _i32, _str, _bool = pa.float64(), pa.int32(), pa.string(), pa.bool_()
REQUEST_SCHEMA = pa.schema(
    [
        pa.field("request_id", pa.int64(), nullable=False),
        pa.field("session_id", pa.int64(), nullable=False),
        pa.field("request_index", _i32, nullable=False),
        pa.field("agent_id", _i32, nullable=False),
        pa.field("status", _str, nullable=False),
        pa.field("reject_reason", _str),
        pa.field("measured", _bool, nullable=False),
        pa.field("arrival_s", _f64, nullable=False),
        pa.field("admitted_s", _f64),
        pa.field("load_start_s", _f64),
        pa.field("load_end_s", _f64),
        pa.field("prefill_start_s", _f64),
        pa.field("first_token_s", _f64),
        pa.field("kv_transfer_start_s", _f64),
        pa.field("kv_transfer_end_s", _f64),
        pa.field("decode_start_s", _f64),
        pa.field("finish_s", _f64, nullable=False),
        pa.field("ttft_s", _f64),
        pa.field("tpot_s", _f64),
        pa.field("e2e_s", _f64),
        pa.field("input_tokens", _i32, nullable=False),
        pa.field("output_tokens", _i32, nullable=False),
        pa.field("prefix_tokens", _i32, nullable=False),
        pa.field("hit_tokens", _i32, nullable=False),
        pa.field("hbm_hit_tokens", _i32, nullable=False),
        pa.field("computed_tokens", _i32, nullable=False),
        pa.field("replay_tokens", _i32, nullable=False),
        pa.field("image_tokens", _i32, nullable=False),
        pa.field("prefix_source", _str, nullable=False),
        pa.field("shared_prefix_hit", _bool, nullable=False),
        pa.field("swa_source", _str),
        pa.field("load_bytes", _f64, nullable=False),
        pa.field("swa_load_bytes", _f64, nullable=False),
        pa.field("kv_transfer_bytes", _f64, nullable=False),
        pa.field("prefill_pool", _str),
        pa.field("prefill_instance", _i32, nullable=False),
        pa.field("decode_pool", _str),
        pa.field("decode_instance", _i32, nullable=False),
        # the engine's own
        pa.field("preemptions", _i32, nullable=False),  # recompute preemptions this request suffered
    ],
    metadata={"format": RUN_FORMAT},
)

_list_i32 = pa.list_(_i32)
STEP_SCHEMA = pa.schema(
    [
        pa.field("step", pa.int64(), nullable=False),
        pa.field("start_s", _f64, nullable=False),
        pa.field("end_s", _f64, nullable=False),
        pa.field("wall_s", _f64, nullable=False),  # the step function's call, timed around it
        pa.field("gap_s", _f64, nullable=False),  # since the previous step's end: scheduling, or idle
        pa.field("decode_batch", _i32, nullable=False),
        pa.field("graph_bucket", _i32),  # CUDA-graph batch size replayed; null: eager or not reported
        pa.field("graph_captured", _bool),  # the step captured its graph first; null: not reported
        pa.field("prefill_seqs", _i32, nullable=False),
        pa.field("prefill_tokens", _i32, nullable=False),
        pa.field("decode_context_tokens", _list_i32, nullable=False),  # KV tokens before the step, per decode
        pa.field("prefill_context_tokens", _list_i32, nullable=False),  # per prefill chunk
        pa.field("prefill_new_tokens", _list_i32, nullable=False),  # chunk lengths
        pa.field("prefill_last_chunk", pa.list_(_bool), nullable=False),  # the chunk ends its prompt
        pa.field("waiting", _i32, nullable=False),  # queued, not admitted, when the step was planned
        pa.field("running", _i32, nullable=False),
        pa.field("used_blocks", _i32, nullable=False),  # KV blocks referenced after the step
        pa.field("cached_free_blocks", _i32, nullable=False),  # unreferenced blocks still holding a prefix
    ],
    metadata={"format": RUN_FORMAT},
)


def _nan_to_none(x: float) -> float | None:
    return None if math.isnan(x) else x


def request_row(out: Outcome, row: TraceRow) -> dict:
    completed = out.status == "completed"
    first = out.first_token_s if completed else math.nan
    n_out = row.output_tokens
    tpot = (out.finish_s - first) / (n_out - 1) if completed and n_out > 1 else math.nan
    return {
        "request_id": row.request_id,
        "session_id": row.session_id,
        "request_index": row.request_index,
        "agent_id": row.agent_id,
        "status": out.status,
        "reject_reason": out.reject_reason,
        "measured": True,
        "arrival_s": out.request.arrival_s,
        "admitted_s": _nan_to_none(out.admitted_s),
        "load_start_s": None,
        "load_end_s": None,
        "prefill_start_s": _nan_to_none(out.prefill_start_s),
        "first_token_s": _nan_to_none(first),
        "kv_transfer_start_s": None,
        "kv_transfer_end_s": None,
        "decode_start_s": _nan_to_none(first) if n_out > 1 else None,
        "finish_s": out.finish_s,
        "ttft_s": _nan_to_none(first - out.request.arrival_s),
        "tpot_s": _nan_to_none(tpot),
        "e2e_s": out.finish_s - out.request.arrival_s if completed else None,
        "input_tokens": row.input_tokens,
        "output_tokens": n_out,
        "prefix_tokens": row.prefix_tokens,
        "hit_tokens": out.hit_tokens,
        "hbm_hit_tokens": out.hit_tokens,
        "computed_tokens": out.computed_tokens,
        "replay_tokens": 0,
        "image_tokens": 0,
        "prefix_source": "hbm" if out.hit_tokens else "none",
        "shared_prefix_hit": out.shared_hit,
        "swa_source": None,
        "load_bytes": 0.0,
        "swa_load_bytes": 0.0,
        "kv_transfer_bytes": 0.0,
        "prefill_pool": ENGINE_POOL,
        "prefill_instance": 0,
        "decode_pool": ENGINE_POOL if n_out > 1 and completed else None,
        "decode_instance": 0 if n_out > 1 and completed else -1,
        "preemptions": out.preemptions,
    }


def requests_table(engine: Engine, rows: list[TraceRow]) -> pa.Table:
    by_id = {r.request_id: r for r in rows}
    outs = sorted(engine.done, key=lambda o: o.request.request_id)
    return pa.Table.from_pylist(
        [request_row(o, by_id[o.request.request_id]) for o in outs], schema=REQUEST_SCHEMA
    )


def steps_table(engine: Engine) -> pa.Table:
    out = []
    prev_end = 0.0
    for s in engine.steps:
        out.append(
            {
                "step": s.index,
                "start_s": s.start_s,
                "end_s": s.end_s,
                "wall_s": s.wall_s,
                "gap_s": s.start_s - prev_end,
                "decode_batch": len(s.decode_context_tokens),
                "graph_bucket": s.graph_bucket,
                "graph_captured": s.graph_captured,
                "prefill_seqs": len(s.prefill_new_tokens),
                "prefill_tokens": sum(s.prefill_new_tokens),
                "decode_context_tokens": s.decode_context_tokens,
                "prefill_context_tokens": s.prefill_context_tokens,
                "prefill_new_tokens": s.prefill_new_tokens,
                "prefill_last_chunk": s.prefill_last_chunk,
                "waiting": s.waiting,
                "running": s.running,
                "used_blocks": s.used_blocks,
                "cached_free_blocks": s.cached_free_blocks,
            }
        )
        prev_end = s.end_s
    return pa.Table.from_pylist(out, schema=STEP_SCHEMA)


def _sha256(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


def machine(commit: str | None = None) -> dict:
    """Host, Python and package versions; GPU, driver and CUDA when torch sees one; the code's commit
    (``commit`` when given: the device copy's own git is not the code's)."""
    import numpy

    info: dict = {"python": platform.python_version(), "numpy": numpy.__version__, "pyarrow": pa.__version__}
    try:
        from kernels_bench.report import provenance

        info.update(provenance(commit))
    except ImportError:  # no torch: a CPU stand-in run
        info["hostname"] = platform.node()
    return info


def _pct(values: list[float]) -> dict:
    """p50 / p90 / p99 and the mean (seconds), nearest-rank on the sorted values; empty: {}."""
    if not values:
        return {}
    v = sorted(values)

    def q(p: float) -> float:
        return v[min(len(v) - 1, max(0, math.ceil(p * len(v)) - 1))]

    return {"mean": sum(v) / len(v), "p50": q(0.5), "p90": q(0.9), "p99": q(0.99)}


def run_summary(req: pa.Table, steps: pa.Table, engine: Engine) -> dict:
    """The numbers a run is judged by: latencies, step times, batch range, prefix hits and misses, evictions,
    preemptions and graph captures during the run."""
    r = req.to_pydict()
    done = [i for i, st in enumerate(r["status"]) if st == "completed"]

    def col(name: str) -> list[float]:
        return [r[name][i] for i in done if r[name][i] is not None]

    s = steps.to_pydict()
    batch = s["decode_batch"]
    prefill = [i for i, t in enumerate(s["prefill_tokens"]) if t > 0]
    decode_only = [i for i, t in enumerate(s["prefill_tokens"]) if t == 0]
    bt = engine.block_tokens

    def short_of_prefix(i: int) -> bool:  # hit fewer whole blocks than the trace's prefix holds
        expected = min(r["prefix_tokens"][i], r["input_tokens"][i] - 1) // bt * bt
        return r["hit_tokens"][i] < expected

    return {
        "requests": req.num_rows,
        "completed": len(done),
        "steps": steps.num_rows,
        "ttft_s": _pct(col("ttft_s")),
        "tpot_s": _pct(col("tpot_s")),
        "e2e_s": _pct(col("e2e_s")),
        "step_wall_s": {
            "decode_only": _pct([s["wall_s"][i] for i in decode_only]),
            "with_prefill": _pct([s["wall_s"][i] for i in prefill]),
        },
        "decode_batch_min": min((b for b in batch if b > 0), default=0),
        "decode_batch_max": max(batch, default=0),
        "requests_with_hit": sum(1 for i in done if r["hit_tokens"][i] > 0),
        "requests_without_hit": sum(1 for i in done if r["hit_tokens"][i] == 0),
        "requests_short_of_prefix": sum(1 for i in done if short_of_prefix(i)),
        "hit_tokens": sum(r["hit_tokens"][i] for i in done),
        "computed_tokens": sum(r["computed_tokens"][i] for i in done),
        "evicted_blocks": engine.pool.stats.evicted_blocks,
        "preemptions": engine.preemptions,
        "steps_with_graph_capture": sum(1 for c in s["graph_captured"] if c),
    }


def write_run(
    run_dir: Path,
    engine: Engine,
    rows: list[TraceRow],
    trace_path: Path,
    think_scale: float,
    stats: ReplayStats,
    clock: str,
    extra: dict | None = None,
    commit: str | None = None,
) -> dict:
    """Write the run directory (files replaced atomically; the folder is created); returns the run's
    summary (``run_summary``, also in the provenance). ``commit``: the code's commit, recorded as given."""
    run_dir.mkdir(parents=True, exist_ok=True)
    req = requests_table(engine, rows)
    steps = steps_table(engine)
    for name, table in ((REQUESTS_PARQUET, req), (STEPS_PARQUET, steps)):
        tmp = run_dir / (name + ".tmp")
        pq.write_table(table, tmp)
        os.replace(tmp, run_dir / name)
    if trace_path.resolve() != (run_dir / TRACE_PARQUET).resolve():
        shutil.copyfile(trace_path, run_dir / (TRACE_PARQUET + ".tmp"))
        os.replace(run_dir / (TRACE_PARQUET + ".tmp"), run_dir / TRACE_PARQUET)
    summary = run_summary(req, steps, engine)
    machine_info = machine(commit)
    fn = engine.fn
    describe = getattr(fn, "describe", None)
    completed = sum(1 for o in engine.done if o.status == "completed")
    doc = {
        "format": RUN_FORMAT,
        "date_utc": _dt.datetime.now(_dt.UTC).strftime("%Y-%m-%dT%H:%M:%SZ"),
        "clock": clock,
        "engine": {
            "prefill_budget_tokens": engine.cfg.prefill_budget_tokens,
            "chunk_tokens": engine.cfg.chunk_tokens,
            "max_decode_batch": engine.cfg.max_decode_batch,
            "prefix_caching": engine.cfg.prefix_caching,
            "block_tokens": engine.block_tokens,
            "num_blocks": engine.pool.num_blocks,
        },
        "model": getattr(fn, "model_name", None),
        "step_function": describe() if callable(describe) else type(fn).__name__,
        "trace": {
            "file": str(trace_path),
            "sha256": _sha256(trace_path),
            "rows": len(rows),
            "sessions": len({r.session_id for r in rows}),
            "think_scale": think_scale,
        },
        "totals": {
            "requests": len(engine.done),
            "completed": completed,
            "rejected": len(engine.done) - completed,
            "steps": len(engine.steps),
            "preemptions": engine.preemptions,
            "hit_blocks": engine.pool.stats.hit_blocks,
            "evicted_blocks": engine.pool.stats.evicted_blocks,
            "max_decode_batch_seen": max((len(s.decode_context_tokens) for s in engine.steps), default=0),
            "duration_s": max((o.finish_s for o in engine.done), default=0.0),
            "idle_s": stats.idle_s,
        },
        "summary": summary,
        "commit": machine_info.get("commit", commit or "unknown"),
        "machine": machine_info,
        **(extra or {}),
    }
    tmp = run_dir / (PROVENANCE_JSON + ".tmp")
    tmp.write_text(json.dumps(doc, indent=2, default=str) + "\n")
    os.replace(tmp, run_dir / PROVENANCE_JSON)
    return summary
