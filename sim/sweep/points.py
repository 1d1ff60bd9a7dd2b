"""One sweep point (a scenario at one concurrency for one model) and the interpolation between them.

A worker gets a `SweepTask` (a resolved scenario document) and hands back the model's run summary;
`point_record` keeps what the table, page and JSON show. `at_tpot` interpolates linearly between the
two concurrencies whose TPOT brackets the target (the first crossing, in increasing concurrency). The
TPOT read is the runs' p50 by default (the serving benchmarks' convention: tokens/s per user = 1 / TPOT
p50), or their p90 / p99 (`percentile`): a stricter target for the same milliseconds, met at a lower load.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Any

from sim.metrics.capacity import POINT_KEYS

# what each point shows (all summary keys of sim.metrics.summarize)


TPOT_PERCENTILES = ("p50", "p90", "p99")


def tpot_key(percentile: str) -> str:
    """The summary key of the runs' TPOT at `percentile` (one of TPOT_PERCENTILES)."""
    if percentile not in TPOT_PERCENTILES:
        raise ValueError(f"TPOT percentile {percentile!r} not in {TPOT_PERCENTILES}")
    return f"tpot_{percentile}_s"


@dataclass(frozen=True)
class SweepTask:
    key: str
    model: str
    concurrency: int
    scenario: dict[str, Any]
    seed: int


def evaluate(task: SweepTask) -> dict[str, Any]:
    """Worker side (picklable): simulate one point; only the model's summary travels back."""
    from sim.api import run_scenario
    from sim.config.errors import validate_or_raise
    from sim.config.scenario import Scenario

    started = time.perf_counter()
    scenario = validate_or_raise(Scenario, task.scenario, file=f"sweep point {task.key}")
    result = run_scenario(scenario, task.seed, out_dir=None, capacity=False)
    return {"summary": result.summary["models"][task.model], "wall_s": time.perf_counter() - started}


def point_record(concurrency: int, summary: dict[str, Any], wall_s: float) -> dict[str, Any]:
    """The point as the sweep reports it: concurrency, POINT_KEYS, per-pool busy and load."""
    record: dict[str, Any] = {"concurrency": concurrency}
    record.update({key: summary.get(key) for key in POINT_KEYS})
    capacity = summary.get("capacity") or {}
    record["pools"] = [
        {k: p.get(k) for k in ("name", "role", "busy", "decode_batch_mean", "slo_batch", "load")}
        for p in capacity.get("pools", [])
    ]
    record["wall_s"] = wall_s
    return record


def at_tpot(
    points: list[dict[str, Any]], target_s: float, keys: tuple[str, ...] = (), percentile: str = "p50"
) -> dict[str, Any] | None:
    """The operating point where TPOT (`percentile`) equals `target_s`, interpolated linearly in TPOT
    between the two points (by concurrency) that bracket it; `keys` (default: the throughput and TTFT
    keys, and with a p90 / p99 target the TPOT p50 and tokens/s per user there) are interpolated
    alike. None, with the reason, when no pair brackets the target."""
    key_t = tpot_key(percentile)
    if percentile == "p50":
        at = {"tpot_p50_s": target_s, "tokens_per_s_per_user": 1.0 / target_s}
        default_keys: tuple[str, ...] = ()
    else:  # what a user sees there (1 / TPOT p50) is read between the points, not set by the target
        at = {key_t: target_s}
        default_keys = ("tpot_p50_s", "tokens_per_s_per_user")
    keys = keys or (
        "concurrency",
        "output_tokens_per_s_per_gpu",
        "output_tokens_per_s",
        "ttft_p50_s",
        *default_keys,
    )
    pts = sorted((p for p in points if p.get(key_t) is not None), key=lambda p: p["concurrency"])
    if not pts:
        return None
    for a, b in zip(pts, pts[1:], strict=False):
        ta, tb = a[key_t], b[key_t]
        if (ta - target_s) * (tb - target_s) <= 0 and ta != tb:
            f = (target_s - ta) / (tb - ta)
            out: dict[str, Any] = dict(at)
            for key in keys:
                va, vb = a.get(key), b.get(key)
                out[key] = None if va is None or vb is None else va + f * (vb - va)
            out["between_concurrency"] = [a["concurrency"], b["concurrency"]]
            return out
    for p in pts:  # a point exactly on target with no neighbour across it
        if p[key_t] == target_s:
            return {**{key: p.get(key) for key in keys}, **at, "between_concurrency": [p["concurrency"]] * 2}
    return None


def floor_pick(
    points: list[dict[str, Any]],
    target_s: float,
    percentile: str = "p50",
    max_ttft_p50_s: float | None = None,
) -> dict[str, Any] | None:
    """The point with the most output tokens/s per GPU among those whose TPOT (`percentile`) meets
    `target_s` (the "floor-pick" of the NVIDIA Dynamo recipes: best tok/s/GPU at user p50 >= 1 /
    target), and whose TTFT p50 is under `max_ttft_p50_s` where given (their V4.1 recipes' second
    gate). It answers where TPOT never reaches the target (a prefill-bound cluster) and the
    interpolation can't."""
    key_t = tpot_key(percentile)
    ok = [p for p in points if p.get(key_t) is not None and p[key_t] <= target_s
          and p.get("output_tokens_per_s_per_gpu") is not None
          and (max_ttft_p50_s is None or (p.get("ttft_p50_s") is not None and p["ttft_p50_s"] < max_ttft_p50_s))]  # fmt: skip
    return max(ok, key=lambda p: (p["output_tokens_per_s_per_gpu"], -p["concurrency"])) if ok else None


def unbracketed_reason(points: list[dict[str, Any]], target_s: float, percentile: str = "p50") -> str:
    """Why `at_tpot` found no point: every TPOT under the target, or every one over it."""
    key_t = tpot_key(percentile)
    tpots = [p[key_t] for p in points if p.get(key_t) is not None]
    if not tpots:
        return "no point completed a measured request"
    if max(tpots) < target_s:
        return f"TPOT {percentile} stays under {target_s * 1e3:g} ms up to the highest concurrency run (raise it)"
    return f"TPOT {percentile} is over {target_s * 1e3:g} ms already at the lowest concurrency run"
