"""Steady-state cost per task: what a candidate costs per task when the workload runs on for ever,
whatever the simulated window's edges.

Why not the run's figure: `sim run` reports cluster $/h x measured window / tasks completed in the
window (sim.metrics.summarize), and the window runs from the warm-up to the last completion. On a
workload shorter than its sessions (plan_agent: 6 minutes of session starts, sessions of ~12
requests that last 5 to 50 minutes) that window is mostly the drain after the last start, and its
length is set by the slowest sessions: a cluster with slower decode pays for a longer drain, so
two clusters at the same $/hour serving the same tasks differed by 2x per task.

Method (`METHOD`): tasks arrive at the workload's rate (`WorkloadRate`: sessions starting per hour
after the warm-up, read from the trace the candidates replay, the same for every candidate). A
cluster that keeps up completes them at that rate, so its cost per task is $/h / tasks per hour.
Whether it keeps up is judged from the load each pool would carry at that rate (`steady_state`):

- prefill: the pool's busy fraction in the run (sim.metrics.capacity) scaled from the request rate
  the window served to the workload's: busy x workload requests per hour / (requests_arrived /
  window_s). Busy time is work, so this holds as long as the work per request does.
- decode: output tokens per second the workload needs / the tokens per second the pool emits at its
  SLO batch (`decode_capacity`: per instance, the largest batch meeting the TPOT SLO at the run's
  mean context, sim.metrics.capacity.slo_batch, times the tokens per step over that step's time).
  Not the run's mean batch scaled: a larger batch steps slower, so the batch grows faster than the
  load and the scaled batch under-states it (measured: 0.89 scaled where the decode pool of V4.1 on
  2 B200 nodes saturated in a one-hour run at the plan's rate).
- colocated: the larger of the two (its busy fraction counts decode steps too: high).

A pool at steady load rho > 1 cannot keep up: its queue grows for as long as tasks arrive and it
completes at most 1/rho of them, so the cost per task is $/h x max(1, rho) / tasks per hour
(sim.metrics.capacity.steady_cost_per_task_usd, the formula `sim run`'s capacity search prices its
sustained rate with, so the two agree for the same deployment at the same rate): a
candidate that cannot keep up is never reported as cheap (and the plan's `max_steady_load` makes it
infeasible). No figure depends on where the window cuts sessions: the rate is the workload's, the
loads are work per request and capacities.

Checked against one-hour runs of plan_agent's workload (30 min warm-up, loads measured over the
second half hour) for five candidates: estimate -> measured prefill busy / decode batch of 256:
V4 B200 tp4 p3d3 prefill 0.66 -> 0.655, decode 0.69 -> batch 133; V4.1 B200 tp4 p2d3 decode 0.92
-> batch 206, every SLO met; V4.1 B200 tp4 p2d2 decode 1.37 -> batch pinned at 256, TPOT p99 0.25 s;
V4 H200 tp4 p2d2 prefill 2.19 -> busy 0.97, TTFT p50 149 s (a growing queue).

Error (stated, not corrected): prefill packs more tokens per step at higher load (rho_prefill a
little high); the requests in flight at the warm-up add work to the window without being counted
(rho a little high); the decode capacity is taken at the run's mean context and for one instance
of the pool (all alike). The latency constraints are still those the run measured, at the load its
window reached, which on a short workload is below the steady load.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from sim import units
from sim.metrics.capacity import SERVING_ROLES, slo_batch, steady_cost_per_task_usd
from sim.workload.io import read_trace_table

METHOD = "steady state: cluster $/h x max(1, steady load) / task arrivals per hour (sim.plan.steady)"


@dataclass(frozen=True)
class WorkloadRate:
    """How fast a workload brings tasks (sessions), their requests and output tokens, after its warm-up."""

    tasks_per_hour: float
    requests_per_hour: float
    output_tokens_per_hour: float


@dataclass(frozen=True)
class SteadyState:
    """One candidate at its workload's rate."""

    load: float | None  # the busiest pool's steady load (None: a pool's load unmeasured)
    bottleneck: str | None  # that pool's name
    cost_per_task_usd: float | None


def workload_rate(trace: str | Path, warmup_s: float, horizon_s: float | None) -> WorkloadRate | None:
    """Sessions starting in [warmup_s, horizon_s) per hour: (n - 1) over the time from the first of
    them to the last (exact for even starts, the usual estimate for Poisson ones, and blind to where
    the warm-up or the trace's end falls between two starts); requests and output tokens per hour:
    that rate x their means per session. None when fewer than two sessions start there or all at
    once (a burst has no rate)."""
    table = read_trace_table(trace, columns=["session_id", "session_start_s", "output_tokens"])
    starts = table.column("session_start_s").to_numpy()
    measured = (starts >= warmup_s) & (starts < (np.inf if horizon_s is None else horizon_s))
    sessions, first_rows = np.unique(table.column("session_id").to_numpy()[measured], return_index=True)
    session_starts = starts[measured][first_rows]
    span_s = float(session_starts.max() - session_starts.min()) if len(sessions) else 0.0
    if len(sessions) < 2 or span_s <= 0:
        return None
    tasks_per_hour = (len(sessions) - 1) / span_s * units.HOUR_S
    output_tokens = float(table.column("output_tokens").to_numpy()[measured].sum())
    per_task = tasks_per_hour / len(sessions)
    return WorkloadRate(tasks_per_hour, per_task * int(measured.sum()), per_task * output_tokens)


def decode_capacity(sim: Any, context_tokens: float, tpot_slo_s: float) -> dict[str, float]:
    """Per decode or colocated pool of a built simulation (sim.cluster.build), the output tokens per
    second its instances emit at their SLO batch (module doc); 0 where no batch meets the SLO."""
    capacity: dict[str, float] = {}
    for pool in sim.pools:
        if pool.role not in SERVING_ROLES:
            continue
        members = [inst for inst in sim.instances if inst.pool == pool.name]
        inst = members[0]
        batch = slo_batch(inst, context_tokens, tpot_slo_s)
        if batch == 0:
            capacity[pool.name] = 0.0
            continue
        timing = inst.timing
        step_s = timing.step_s(batch, timing.decode_seq_terms(context_tokens, 1).scaled(batch), ())
        capacity[pool.name] = len(members) * batch * timing.accepted_tokens_per_step / step_s
    return capacity


def steady_state(
    summary: dict[str, Any], rate: WorkloadRate, decode_tokens_per_s: dict[str, float]
) -> SteadyState:
    """The candidate's steady load and cost per task (module doc) from its model's run summary and
    its pools' decode capacity (`decode_capacity`)."""
    served_per_hour = _div(summary.get("requests_arrived"), summary.get("window_s", 0.0) / units.HOUR_S)
    needed_tokens_per_s = rate.output_tokens_per_hour / units.HOUR_S
    loads: dict[str, float | None] = {}
    for pool in (summary.get("capacity") or {}).get("pools") or []:
        name, role, busy = pool["name"], pool.get("role"), pool.get("busy")
        prefill = decode = None
        if busy is not None and served_per_hour:
            prefill = busy * rate.requests_per_hour / served_per_hour
        tokens_per_s = decode_tokens_per_s.get(name)
        if tokens_per_s is not None:
            decode = needed_tokens_per_s / tokens_per_s if tokens_per_s > 0 else math.inf
        if role == "prefill":
            loads[name] = prefill
        elif role == "decode":
            loads[name] = decode
        else:  # colocated: prefill and decode work compete for the same engines
            loads[name] = None if prefill is None or decode is None else max(prefill, decode)
    if not loads or any(v is None for v in loads.values()):
        return SteadyState(None, None, None)
    bottleneck = max(loads, key=lambda name: (loads[name], name))
    load = loads[bottleneck]
    return SteadyState(
        load, bottleneck, steady_cost_per_task_usd(summary["cluster_usd_per_hour"], rate.tasks_per_hour, load)
    )


def _div(a: float | None, b: float) -> float | None:
    return None if a is None or not b else a / b
