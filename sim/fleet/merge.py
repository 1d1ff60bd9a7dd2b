"""The fleet's summary from its cells' outputs, exactly.

Sums (requests, tokens, tasks, GPUs, $/h) add up. Percentiles are never averaged: TTFT, TPOT and E2E
percentiles (and the mean TTFT and the SLO attainment) are computed over the merged values of every
cell, read back from the cells' request logs in cell order, one metric at a time, with the same
function a one-cell run uses (sim.metrics.summarize.percentiles): the fleet's p99 is the p99 of all
its requests. Memory: 8 B per measured completed request of one model for one metric (0.83 GB at
103M requests: docs/fleet.md); past a few hundred million a mergeable sketch with a stated error
bound would take its place.

Fleet answers:
- cost per task: the cells' cluster $ over their windows / the tasks the cells completed;
- spread: per cell, its requests, p99s and bottleneck load; the hottest cell (highest bottleneck load)
  against the mean over cells;
- cells needed at the SLO at the peak hour: the fleet's peak hour is the hour (of the measured window)
  with the most arrivals over all cells; a cell's load that hour is the largest over its pools of
  the pool's load (prefill: busy fraction; decode: mean decode batch / the SLO batch of its capacity
  block, sim.metrics.capacity; colocated: the larger of the two, where the busy fraction counts decode
  time too, so it overstates), from the time series. The fleet needs at least
  ceil(sum of the cells' loads) cells at that hour: a linear packing of its work into cells run at
  load 1, a lower bound (queueing passes the SLO before a pool is fully loaded; `sim run` without
  cells searches that limit for one cell).
"""

from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np
import pyarrow.compute as pc
import pyarrow.parquet as pq

from sim import units
from sim.metrics.slo import slo_met
from sim.metrics.summarize import percentiles

SUMS = ("requests_arrived", "requests_completed", "requests_rejected", "requests_arrived_incl_warmup",
        "requests_not_arrived", "input_tokens", "output_tokens", "tasks_completed", "gpus",
        "cluster_usd_per_hour")  # fmt: skip
RATES = ("output_tokens_per_s", "input_tokens_per_s")  # each cell's over its own window: they add


def _metric(table, name: str, slo_ttft_s: float, slo_tpot_s: float) -> tuple[np.ndarray, int]:
    """One metric's values of a cell's measured completed requests (as sim.metrics.recorder keeps
    them) and, for TTFT, how many of them met the SLO."""
    measured = table.column("measured").to_numpy()
    # compared in Arrow: a numpy array of the status strings would be a Python object per request
    completed = pc.equal(table.column("status"), "completed").to_numpy(zero_copy_only=False) & measured
    out = table.column("output_tokens").to_numpy()
    values = table.column(name).to_numpy(zero_copy_only=False)
    if name == "tpot_s":
        return values[completed & (out > 1)], 0
    met = 0
    if name == "ttft_s":
        tpot = table.column("tpot_s").to_numpy(zero_copy_only=False)
        met = int((completed & slo_met(values, tpot, out, slo_ttft_s, slo_tpot_s)).sum())
    return values[completed], met


def _batches(log: Path, columns: list[str]):
    pf = pq.ParquetFile(log)
    for group in range(pf.metadata.num_row_groups):
        yield pf.read_row_group(group, columns=columns, use_threads=False)


def merged_latency(logs: list[Path], completed: int, slo_ttft_s: float, slo_tpot_s: float) -> dict:
    """Percentiles of TTFT, TPOT and E2E over every cell's values, the mean TTFT and the requests
    that met the SLO (module doc). `completed`: the measured completed requests of all cells, the
    most values a metric has: one array of that size is filled cell by cell (its pages become
    resident as they are written) and partitioned in place, so no value is ever held twice."""
    out: dict = {}
    columns = ["measured", "status", "output_tokens", "ttft_s", "tpot_s", "e2e_s"]
    for name in ("ttft_s", "tpot_s", "e2e_s"):
        values, filled, met = np.empty(completed), 0, 0
        for log in logs:
            # a row group at a time: Arrow's allocator keeps what it once held, so a whole cell's
            # table read at once would stay resident beside the values
            for batch in _batches(log, columns if name == "ttft_s" else [*columns[:3], name]):
                got, n = _metric(batch, name, slo_ttft_s, slo_tpot_s)
                values[filled : filled + len(got)] = got
                filled += len(got)
                met += n
        merged = values[:filled]
        stem = name.removesuffix("_s")
        if name != "e2e_s":  # the means before the partition (sim.metrics.summarize)
            out[f"{stem}_mean_s"] = float(np.mean(merged)) if len(merged) else None
        if name == "ttft_s":
            out["slo_met"] = met
        out |= {f"{stem}_{p}_s": v for p, v in percentiles(merged).items()}
        del merged, values
    return out


def peak_hour_cells(cell_dirs: list[Path], model: str, capacities: list[dict], warmup_s: float) -> dict:
    """The fleet's peak hour and the cells it needs there (module doc)."""
    arrivals: list[np.ndarray] = []
    loads: list[np.ndarray] = []
    for cell_dir, capacity in zip(cell_dirs, capacities, strict=True):
        ts = cell_dir / model / "timeseries"
        c = pq.read_table(ts / "_cluster.parquet", columns=["t_s", "arrived"])
        t = c.column("t_s").to_numpy()
        hour = _hour(t)
        arrivals.append(np.bincount(hour, weights=np.diff(c.column("arrived").to_numpy(), prepend=0)))
        load = np.zeros(0)
        for pool in capacity["pools"]:
            p = pq.read_table(
                ts / f"{pool['name']}.parquet", columns=["t_s", "utilization", "decode_batch_mean"]
            )
            ph = _hour(p.column("t_s").to_numpy())
            busy = p.column("utilization").to_numpy()
            slo_batch = pool.get("slo_batch") or 0
            batch = p.column("decode_batch_mean").to_numpy() / slo_batch if slo_batch else np.zeros(len(ph))
            sample = {"prefill": busy, "decode": batch}.get(pool["role"], np.maximum(busy, batch))
            pool_load = np.bincount(ph, weights=sample) / np.maximum(np.bincount(ph), 1)
            load = _padded_max(load, pool_load)
        loads.append(load)
    hours = max(len(a) for a in arrivals)
    fleet = sum(_pad(a, hours) for a in arrivals)
    first = int(warmup_s // units.HOUR_S)
    if hours <= first:
        return {"peak_hour": None, "cells_needed_at_peak": None}
    peak = first + int(np.argmax(fleet[first:]))
    at_peak = np.array([_pad(load, hours)[peak] for load in loads])
    return {
        "peak_hour": peak,
        "peak_hour_arrivals": int(fleet[peak]),
        "mean_hour_arrivals": float(np.mean(fleet[first:])),
        "cell_load_at_peak_max": float(at_peak.max()),
        "cell_load_at_peak_mean": float(at_peak.mean()),
        "cells_needed_at_peak": math.ceil(float(at_peak.sum()) - 1e-9),
    }


def _hour(t_s: np.ndarray) -> np.ndarray:
    """The hour each sample falls in (a sample is stamped at its interval's end)."""
    return np.maximum(np.ceil(t_s / units.HOUR_S).astype(np.int64) - 1, 0)


def _pad(a: np.ndarray, n: int) -> np.ndarray:
    return np.concatenate([a, np.zeros(n - len(a))]) if len(a) < n else a


def _padded_max(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    n = max(len(a), len(b))
    return np.maximum(_pad(a, n), _pad(b, n))


def merge_model(model: str, cell_dirs: list[Path], cells: list[dict], *, warmup_s: float,
                slo_ttft_s: float, slo_tpot_s: float) -> dict:  # fmt: skip
    """One model's fleet summary from its cells' summaries (`cells`, cell order) and outputs."""
    out: dict = {"model": model, "cells": len(cells)}
    for key in SUMS:
        out[key] = sum(c[key] for c in cells)
    for key in RATES:
        out[key] = sum(c[key] or 0.0 for c in cells)
    reasons: dict[str, int] = {}
    for c in cells:
        for reason, n in c["rejected_by_reason"].items():
            reasons[reason] = reasons.get(reason, 0) + n
    out["rejected_by_reason"] = dict(sorted(reasons.items()))
    logs = [d / model / "requests.parquet" for d in cell_dirs]
    latency = merged_latency(logs, out["requests_completed"], slo_ttft_s, slo_tpot_s)
    met = latency.pop("slo_met")
    out |= latency
    out["slo_attainment"] = met / out["requests_arrived"] if out["requests_arrived"] else None
    out["output_tokens_per_s_per_gpu"] = out["output_tokens_per_s"] / out["gpus"] if out["gpus"] else None
    window_usd = sum(c["cluster_usd_per_hour"] * c["window_s"] / units.HOUR_S for c in cells)
    out["cost_per_task_usd"] = window_usd / out["tasks_completed"] if out["tasks_completed"] else None
    spread = [
        {
            "cell": k,
            "requests_arrived": c["requests_arrived"],
            "ttft_p99_s": c["ttft_p99_s"],
            "tpot_p99_s": c["tpot_p99_s"],
            "bottleneck_load": c["capacity"]["bottleneck_load"],
            "cost_per_task_usd": c["cost_per_task_usd"],
        }
        for k, c in enumerate(cells)
    ]
    out["per_cell"] = spread
    out["spread"] = _spread(spread)
    out["peak"] = peak_hour_cells(cell_dirs, model, [c["capacity"] for c in cells], warmup_s)
    return out


def _spread(rows: list[dict]) -> dict:
    """The hottest cell (highest bottleneck load) against the mean over cells."""
    loads = [r["bottleneck_load"] for r in rows if r["bottleneck_load"] is not None]
    arrived = [r["requests_arrived"] for r in rows]
    hottest = max(range(len(rows)), key=lambda k: rows[k]["bottleneck_load"] or 0.0)
    mean_load = sum(loads) / len(loads) if loads else None
    mean_arrived = sum(arrived) / len(arrived)
    return {
        "hottest_cell": hottest,
        "hottest_load": rows[hottest]["bottleneck_load"],
        "mean_load": mean_load,
        "hottest_over_mean_load": rows[hottest]["bottleneck_load"] / mean_load if mean_load else None,
        "max_over_mean_requests": max(arrived) / mean_arrived if mean_arrived else None,
    }


def read_cell_summary(cell_dir: Path) -> dict:
    return json.loads((cell_dir / "summary.json").read_text())
