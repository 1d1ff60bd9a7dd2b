"""The run summary of one model, from the recorder's sums and arrays, the sampler's tier
integrals, the store's counters and the cluster's costs (no re-reading of the outputs).

Measured requests are those that arrived at or after the warm-up.
Per GPU and per user (the axes serving benchmarks publish): output tokens/s over the window per GPU
of the cluster, and 1 / TPOT p50. Capacity (utilisation, headroom, sessions per node at the SLO):
sim.metrics.capacity. The measured window runs
from the warm-up to the horizon (or, without one, to the last measured completion); throughput,
tasks per hour and costs are over that window. A task is a session; it counts when all its
requests completed and its first one arrived in the window.

Costs: cluster $/h x window / completed tasks. Per 1M tokens, the cluster's cost is split
between input (prefill) and output (decode): by pool role when disaggregated, by the engines'
busy-time share of prefill vs decode work when colocated. The DeepSeek API list price of the
model's family is shown beside it (hardware.md §4), with what the API would bill for the same
tokens (hits at the hit price, misses at the miss price).
"""

from __future__ import annotations

import math

import numpy as np

from sim import units
from sim.metrics.capacity import capacity_block

PERCENTILES = {"p50": 50, "p90": 90, "p99": 99}


def percentiles(values: np.ndarray) -> dict[str, float | None]:
    """PERCENTILES of `values`, which are partitioned in place (no copy of an array that holds
    8 B per measured request); read whatever depends on their order first."""
    if not len(values):
        return dict.fromkeys(PERCENTILES)
    qs = np.percentile(values, list(PERCENTILES.values()), overwrite_input=True)
    return {name: float(v) for name, v in zip(PERCENTILES, qs, strict=True)}


def _div(a: float, b: float):
    return a / b if b else None


class SessionStats:
    """Sessions ended during the run (sim.workload.arrivals reports each once)."""

    def __init__(self, warmup_s: float, window_end_s: float | None) -> None:
        self.warmup_s = warmup_s
        self.window_end_s = window_end_s
        self.ended = 0
        self.completed_in_window = 0
        self.context_tokens: list[int] = []
        self.in_window_s = 0.0  # summed time ended sessions spent inside the window

    def on_session(
        self, sid: int, first_s: float, last_s: float, count: int, rejected: int, max_ctx: int
    ) -> None:
        self.ended += 1
        end = last_s if self.window_end_s is None else min(last_s, self.window_end_s)
        self.in_window_s += max(0.0, end - max(first_s, self.warmup_s))
        if (
            first_s >= self.warmup_s
            and not rejected
            and (self.window_end_s is None or last_s <= self.window_end_s)
        ):
            self.completed_in_window += 1
            self.context_tokens.append(max_ctx)


def summarize_model(
    sim,
    *,
    sessions: SessionStats,
    warmup_s: float,
    horizon_s: float | None,
    api_prices,
    not_arrived: int,
    drain_limited: bool,
    ttft_slo_s: float,
    tpot_slo_s: float,
) -> dict:
    rec, t = sim.recorder, sim.recorder.totals
    cl, store, policy, sampler = sim.cluster, sim.store, sim.policy, sim.sampler
    end = horizon_s if horizon_s is not None else max(t.last_finish_s, warmup_s)
    window_s = max(end - warmup_s, 0.0)
    hours = window_s / units.HOUR_S

    out: dict = {
        "model": sim.arith.name,
        "family": sim.family,
        "requests_arrived": t.arrived,
        "requests_completed": t.completed,
        "requests_rejected": t.rejected,
        "rejected_by_reason": dict(sorted(t.reasons.items())),
        "requests_arrived_incl_warmup": cl.arrived,
        "requests_not_arrived": not_arrived,
        "drain_limited": drain_limited,
        "warmup_s": warmup_s,
        "window_s": window_s,
    }
    # means before the partitions below (SGLang's bench_serving publishes means)
    ttft_mean_s = float(np.mean(rec.ttft)) if len(rec.ttft) else None
    tpot_mean_s = float(np.mean(rec.tpot)) if len(rec.tpot) else None
    out |= {f"ttft_{name}_s": v for name, v in percentiles(rec.ttft).items()}
    out["ttft_mean_s"] = ttft_mean_s
    out |= {f"tpot_{name}_s": v for name, v in percentiles(rec.tpot).items()}
    out["tpot_mean_s"] = tpot_mean_s
    out |= {f"e2e_{name}_s": v for name, v in percentiles(rec.e2e).items()}
    out["output_tokens_per_s"] = _div(t.output_tokens, window_s)
    out["input_tokens_per_s"] = _div(t.input_tokens, window_s)
    gpus = sum(p.gpus for p in sim.pools)
    out["gpus"] = gpus
    # the serving-benchmark axes: system output tokens/s per GPU, and what one user sees (1 / TPOT p50)
    out["output_tokens_per_s_per_gpu"] = _div(t.output_tokens, window_s * gpus)
    out["tokens_per_s_per_user"] = _div(1.0, out["tpot_p50_s"]) if out["tpot_p50_s"] else None
    out["input_tokens"] = t.input_tokens
    out["output_tokens"] = t.output_tokens
    out["tasks_completed"] = sessions.completed_in_window
    out["tasks_per_hour"] = _div(sessions.completed_in_window, hours)
    out["slo_attainment"] = _div(t.slo_met, t.arrived)

    # cache: hits (share of input tokens), bytes moved, SWA handling
    hits = sum(t.hit_tokens.values())
    out["prefix_hit_rate"] = _div(hits, t.input_tokens)
    names = sim.tier_names  # the configured chain, HBM first, enabled or not (a disabled tier reports 0)
    lower = names[1:]
    for tier in names:
        out[f"hit_rate_{tier}"] = _div(t.hit_tokens[tier], t.input_tokens)
        out[f"hit_tokens_{tier}"] = t.hit_tokens[tier]
    out["recomputed_tokens"] = t.computed_tokens
    out["replayed_tokens"] = t.replay_tokens
    out["swa_pool_hits"] = t.swa_pool
    out["swa_replays"] = t.swa_replay
    for tier in lower:
        out[f"bytes_loaded_{tier}"] = t.load_bytes[tier]
    out["bytes_loaded_swa_pool"] = t.swa_load_bytes
    out["bytes_kv_transfer"] = t.kv_transfer_bytes
    c = store.counters
    for tier in lower:
        out[f"bytes_written_{tier}"] = c.written_bytes.get(tier, 0.0)
    out["bytes_written_swa_pool"] = c.written_bytes["swa_pool"]
    out["retention_violation_bytes"] = c.retention_violation_bytes

    # occupancy per tier: capacity, exact peak of any one unit, sampled peak and time mean of the total
    occupancy = {}
    for name in (*names, "swa_pool"):
        units_ = store.units_of(name)
        cap = sum(u.capacity_bytes for u in units_)
        unit_frac = max(
            (u.peak_bytes / u.capacity_bytes for u in units_ if u.capacity_bytes > 0), default=0.0
        )
        mean = _div(sampler.tier_area[name], sampler.sampled_s)
        occupancy[name] = {
            "capacity_bytes": cap,
            "peak_bytes": sampler.tier_peak[name],
            "mean_bytes": mean,
            "peak_unit_frac": unit_frac,
        }
        out[f"{name}_peak_bytes"] = sampler.tier_peak[name]
        out[f"{name}_mean_bytes"] = mean
    out["tiers"] = occupancy

    # per-session KV from the model arithmetic (mean over completed sessions' final context)
    ctx = np.array(sessions.context_tokens, dtype=np.float64)
    bpt = policy.global_kv_bytes_per_token
    out["kv_bytes_per_token"] = bpt
    out["seq_state_bytes"] = policy.seq_state_bytes
    out["persisted_state_bytes"] = policy.persisted_state_bytes
    out["session_context_tokens_mean"] = float(ctx.mean()) if ctx.size else None
    out["session_kv_bytes_mean"] = float(ctx.mean() * bpt + policy.seq_state_bytes) if ctx.size else None
    out["session_ssd_bytes_mean"] = float(policy.persist_bytes(ctx.mean())) if ctx.size else None
    out["session_kv_bytes_at_1m_tokens"] = 1_048_576 * bpt + policy.seq_state_bytes
    out["session_ssd_bytes_at_1m_tokens"] = policy.persist_bytes(1_048_576)
    out["ssd_bytes_written_per_session"] = _div(c.written_bytes.get("ssd", 0.0), sessions.ended)  # 0: no SSD tier

    # cost
    usd_h = sim.usd_per_hour
    window_usd = usd_h * hours
    out["cluster_usd_per_hour"] = usd_h
    out["cost_per_task_usd"] = _div(window_usd, sessions.completed_in_window)
    input_share = _input_cost_share(sim)
    out["input_cost_share"] = input_share
    out["usd_per_mtok_input"] = _div(window_usd * input_share, t.input_tokens / 1e6)
    out["usd_per_mtok_output"] = _div(window_usd * (1.0 - input_share), t.output_tokens / 1e6)
    out["usd_per_mtok_total"] = _div(window_usd, (t.input_tokens + t.output_tokens) / 1e6)
    if api_prices is not None:
        miss = t.input_tokens - hits
        bill = (
            hits * api_prices.cache_hit_usd_per_mtok
            + miss * api_prices.cache_miss_usd_per_mtok
            + t.output_tokens * api_prices.output_usd_per_mtok
        ) / 1e6
        out["api"] = {
            "api_model": api_prices.api_model,
            "tier": api_prices.tier,
            "valid_from_utc": api_prices.valid_from_utc,
            "cache_hit_usd_per_mtok": api_prices.cache_hit_usd_per_mtok,
            "cache_miss_usd_per_mtok": api_prices.cache_miss_usd_per_mtok,
            "output_usd_per_mtok": api_prices.output_usd_per_mtok,
            "src": list(api_prices.src),
            "bill_usd": bill,
            "bill_usd_per_task": _div(bill, sessions.completed_in_window),
            "cluster_cost_over_bill": _div(window_usd, bill),
        }
    else:
        out["api"] = None

    # Little's law over the whole run (all requests, warm-up included)
    run_s = sim.env.now_s
    out["little"] = {
        "mean_in_system": _div(cl.requests_in_system_area(), run_s),
        "arrival_rate_per_s": _div(cl.arrived, run_s),
        "mean_time_in_system_s": _div(rec.all_sojourn_s, rec.all_count),
    }
    out["pools"] = [
        {
            "name": p.name,
            "role": p.role,
            "hardware": p.hw_id,
            "nodes": p.nodes,
            "gpus": p.gpus,
            "instances": p.instances,
            "gpus_per_instance": p.gpus_per_instance,
            "weights_bytes_per_instance": p.weights_bytes_per_instance,
            "kv_bytes_per_instance": p.kv_bytes_per_instance,
            "usd_per_hour": p.usd_per_hour,
            "timing_model": p.timing,
            "index_paths": p.index_paths,
        }
        for p in sim.pools
    ]
    context = (t.input_tokens + t.output_tokens / 2) / t.completed if t.completed else 0.0
    out["capacity"] = capacity_block(
        sim,
        start_s=warmup_s,
        end_s=end,
        context_tokens=context,
        tpot_slo_s=tpot_slo_s,
        sessions_in_progress=_div(sessions.in_window_s, window_s),
        slo_p99_met=_p99_met(out, ttft_slo_s, tpot_slo_s),
    )
    out["spec_decode"] = sim.extra["spec_decode"]
    out["engram_in_host_dram"] = sim.extra["engram_in_dram"]
    return _clean(out)


def _p99_met(out: dict, ttft_slo_s: float, tpot_slo_s: float) -> bool:
    """The run's p99 TTFT and TPOT within the SLO (no measured request: not met)."""
    ttft, tpot = out["ttft_p99_s"], out["tpot_p99_s"]
    return ttft is not None and tpot is not None and ttft <= ttft_slo_s and tpot <= tpot_slo_s


def _input_cost_share(sim) -> float:
    """Share of the cluster's cost attributed to input tokens (see the module doc)."""
    prefill_usd = sum(p.usd_per_hour for p in sim.pools if p.role == "prefill")
    decode_usd = sum(p.usd_per_hour for p in sim.pools if p.role == "decode")
    if prefill_usd + decode_usd > 0:
        return prefill_usd / (
            prefill_usd + decode_usd + sum(p.usd_per_hour for p in sim.pools if p.role == "colocated")
        )
    pre = sum(i.prefill_busy_s for i in sim.instances)
    busy = sum(i.busy_s for i in sim.instances)
    return pre / busy if busy > 0 else 0.5


def _clean(obj):
    """JSON-safe: NaN/inf become null, numpy scalars plain floats."""
    if isinstance(obj, dict):
        return {k: _clean(v) for k, v in obj.items()}
    if isinstance(obj, list | tuple):
        return [_clean(v) for v in obj]
    if isinstance(obj, float | np.floating):
        v = float(obj)
        return v if math.isfinite(v) else None
    if isinstance(obj, np.integer):
        return int(obj)
    return obj
