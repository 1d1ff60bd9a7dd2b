"""Small synthetic run folders, written with the simulator's own Parquet schemas (sim.metrics.schema), for
unit tests of the figure builders. The values are made up and only shaped like a run; the page of a real
simulated run is tested in test_report_e2e.py."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from sim.metrics.schema import CLUSTER_SCHEMA, POOL_SCHEMA, REQUEST_SCHEMA, RUN_FORMAT, stamped
from sim.rng import RngStreams

V4, V41 = "deepseek-v4-flash", "deepseek-v4.1-flash"
SOURCES = np.array(["hbm", "dram", "ssd", "none"])


def _write(path: Path, columns: dict, schema: pa.Schema, run_id: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    pq.write_table(pa.table({n: columns[n] for n in schema.names}, schema=stamped(schema, run_id)), path)


def request_columns(rng: np.random.Generator, n: int, span_s: float, slow: float, warmup_s: float) -> dict:
    arrival = np.sort(rng.uniform(0.0, span_s, n))
    rejected = rng.random(n) < 0.02
    ttft = rng.lognormal(np.log(0.5 * slow), 0.8, n)
    out = rng.integers(1, 800, n).astype(np.int32)
    tpot_step = rng.lognormal(np.log(0.02 * slow), 0.3, n)
    first = np.where(rejected, np.nan, arrival + ttft)
    finish = np.where(rejected, arrival, first + tpot_step * np.maximum(out - 1, 0))
    inp = rng.integers(1000, 60000, n).astype(np.int32)
    source = SOURCES[rng.choice(4, n, p=[0.6, 0.2, 0.1, 0.1])]
    hit = np.where(source == "none", 0, (inp * rng.uniform(0.5, 0.95, n)).astype(np.int32))
    nan = np.full(n, np.nan)
    return dict(
        request_id=np.arange(n, dtype=np.int64), session_id=rng.integers(0, max(1, n // 8), n),
        request_index=np.zeros(n, np.int32), agent_id=np.zeros(n, np.int32),
        status=np.where(rejected, "rejected", "completed"), reject_reason=np.where(rejected, "queue_full", None),
        measured=arrival >= warmup_s, arrival_s=arrival, admitted_s=arrival, load_start_s=nan, load_end_s=nan,
        prefill_start_s=arrival, first_token_s=first, kv_transfer_start_s=nan, kv_transfer_end_s=nan,
        decode_start_s=first, finish_s=finish, ttft_s=first - arrival,
        tpot_s=np.where(out > 1, (finish - first) / np.maximum(out - 1, 1), np.nan), e2e_s=finish - arrival,
        input_tokens=inp, output_tokens=out, prefix_tokens=hit, hit_tokens=hit.astype(np.int32),
        hbm_hit_tokens=np.where(source == "hbm", hit, 0).astype(np.int32),
        computed_tokens=(inp - hit).astype(np.int32), replay_tokens=np.zeros(n, np.int32),
        image_tokens=np.zeros(n, np.int32), prefix_source=source, shared_prefix_hit=np.zeros(n, bool),
        swa_source=np.full(n, None), load_bytes=np.zeros(n), swa_load_bytes=np.zeros(n),
        kv_transfer_bytes=np.zeros(n), prefill_pool=np.full(n, "prefill"), prefill_instance=np.zeros(n, np.int32),
        decode_pool=np.full(n, "decode"), decode_instance=np.zeros(n, np.int32),
    )  # fmt: skip


def pool_columns(rng: np.random.Generator, t: np.ndarray, scale: float) -> dict:
    wave = 1.0 + 0.5 * np.sin(2 * np.pi * t / 86400.0)
    n = t.size
    rate = lambda peak: peak * wave * rng.uniform(0.5, 1.0, n)  # noqa: E731
    return dict(
        t_s=t, instances=np.full(n, 2, np.int32), utilization=np.clip(0.6 * wave, 0, 1),
        decode_batch_mean=30 * wave, running_seqs=(60 * wave).astype(np.int32),
        queue_len=rng.poisson(3 * wave * scale).astype(np.int32), prefill_tokens_queued=np.zeros(n, np.int64),
        hbm_kv_capacity_bytes=np.full(n, 400e9), hbm_reserved_bytes=60e9 * wave * scale,
        hbm_cached_bytes=np.full(n, 100e9), dram_kv_bytes=400e9 * wave * scale,
        dram_kv_capacity_bytes=np.full(n, 1.5e12), swa_pool_bytes=np.zeros(n),
        pcie_h2d_bytes_per_s=rate(20e9), pcie_d2h_bytes_per_s=rate(10e9), ssd_read_bytes_per_s=rate(3e9),
        ssd_write_bytes_per_s=rate(1e9), net_out_bytes_per_s=rate(5e9), net_in_bytes_per_s=rate(5e9),
    )  # fmt: skip


def cluster_columns(pools: list[dict], t: np.ndarray, v41: bool) -> dict:
    n = t.size
    hbm = sum(p["hbm_reserved_bytes"] + p["hbm_cached_bytes"] for p in pools)
    return dict(
        t_s=t, arrived=np.arange(n, dtype=np.int64) * 10, completed=np.arange(n, dtype=np.int64) * 9,
        rejected=np.zeros(n, np.int64), in_flight=np.full(n, 10, np.int64), ssd_kv_bytes=2e12 * t / t.max(),
        ssd_kv_capacity_bytes=np.full(n, 8e12), hbm_kv_bytes=hbm, dram_kv_bytes=sum(p["dram_kv_bytes"] for p in pools),
        swa_pool_bytes=np.full(n, 20e9 if v41 else 0.0),
    )  # fmt: skip


def model_summary(cols: dict, span_s: float, slow: float, v41: bool, warmup_s: float) -> dict:
    """Shaped like sim.metrics.summarize.summarize_model's output (a subset of its keys)."""
    done = cols["status"] == "completed"
    q = lambda key, p: float(np.nanquantile(cols[key][done], p))  # noqa: E731
    inp = float(cols["input_tokens"][done].sum())
    hit = lambda src: float(cols["hit_tokens"][done & (cols["prefix_source"] == src)].sum())  # noqa: E731
    tasks_per_hour = 120.0 / slow
    bpt = 890.0 if v41 else 3514.25
    return {
        "model": V41 if v41 else V4, "family": "v41" if v41 else "v4", "warmup_s": warmup_s,
        "window_s": span_s - warmup_s, "requests_arrived": int(cols["arrival_s"].size),
        "requests_completed": int(done.sum()), "requests_rejected": int((~done).sum()),
        "ttft_p50_s": q("ttft_s", 0.5), "ttft_p90_s": q("ttft_s", 0.9), "ttft_p99_s": q("ttft_s", 0.99),
        "tpot_p50_s": q("tpot_s", 0.5), "tpot_p99_s": q("tpot_s", 0.99), "e2e_p50_s": q("e2e_s", 0.5),
        "output_tokens_per_s": float(cols["output_tokens"][done].sum() / span_s), "input_tokens_per_s": inp / span_s,
        "tasks_per_hour": tasks_per_hour, "slo_attainment": 0.97 if v41 else 0.87,
        "prefix_hit_rate": (hit("hbm") + hit("dram") + hit("ssd")) / inp,
        "hit_rate_hbm": hit("hbm") / inp, "hit_rate_dram": hit("dram") / inp, "hit_rate_ssd": hit("ssd") / inp,
        "bytes_loaded_dram": 4e12 * slow, "bytes_loaded_ssd": 1e12 * slow, "bytes_loaded_swa_pool": 1e11 if v41 else 0.0,
        "bytes_kv_transfer": 9e12 * slow, "bytes_written_dram": 5e12 * slow, "bytes_written_ssd": 2e12 * slow,
        "kv_bytes_per_token": bpt, "session_kv_bytes_mean": 60000 * bpt, "session_kv_bytes_at_1m_tokens": 1048576 * bpt,
        "session_ssd_bytes_mean": 60000 * bpt / 2,
        "cluster_usd_per_hour": 400.0, "cost_per_task_usd": 400.0 / tasks_per_hour,
        "usd_per_mtok_input": 0.05 * slow, "usd_per_mtok_output": 0.9 * slow,
        "api": {"api_model": "deepseek-flash" if v41 else "deepseek-v4-flash", "tier": "peak",
                "valid_from_utc": "2026-09-10T00:00", "cache_hit_usd_per_mtok": 0.006, "cache_miss_usd_per_mtok": 0.30,
                "output_usd_per_mtok": 1.20, "src": ["S84"], "bill_usd": 1000.0, "bill_usd_per_task": 2.5 * slow,
                "cluster_cost_over_bill": 1.3},
        "pools": [
            {"name": "prefill", "role": "prefill", "hardware": "nvidia-h200-hgx8", "nodes": 2, "gpus": 16,
             "instances": 2, "kv_bytes_per_instance": 500e9, "usd_per_hour": 150.0},
            {"name": "decode", "role": "decode", "hardware": "nvidia-h200-hgx8", "nodes": 4, "gpus": 32,
             "instances": 4, "kv_bytes_per_instance": 500e9, "usd_per_hour": 250.0},
        ],
    }  # fmt: skip


def write_run(
    root: Path,
    *,
    n_requests: int = 3000,
    span_s: float = 6 * 3600.0,
    dt_s: float = 60.0,
    models: tuple[str, ...] = (V4, V41),
    seed: int = 0,
    warmup_s: float = 600.0,
) -> Path:
    """A run folder in the layout of `sim run --out`: summary.json, requests and time series per model."""
    streams = RngStreams(seed)
    run_id = f"synth-{seed}"
    summary = {"format": RUN_FORMAT, "run_id": run_id, "scenario": root.name, "seed": seed, "models": {}}
    t = np.arange(dt_s, span_s + dt_s / 2, dt_s)
    for model in models:
        rng = streams.get(model)
        v41 = "4.1" in model
        slow = 1.0 if v41 else 1.6
        cols = request_columns(rng, n_requests, span_s, slow, warmup_s)
        _write(root / model / "requests.parquet", cols, REQUEST_SCHEMA, run_id)
        pools = [pool_columns(rng, t, slow) for _ in ("prefill", "decode")]
        for name, p in zip(("prefill", "decode"), pools, strict=True):
            _write(root / model / "timeseries" / f"{name}.parquet", p, POOL_SCHEMA, run_id)
        _write(
            root / model / "timeseries" / "_cluster.parquet",
            cluster_columns(pools, t, v41),
            CLUSTER_SCHEMA,
            run_id,
        )
        summary["models"][model] = model_summary(cols, span_s, slow, v41, warmup_s)
    (root / "summary.json").write_text(json.dumps(summary, indent=1))
    return root
