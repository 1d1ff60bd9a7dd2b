"""The checks `sim scenario check` and `sim run` share, done before anything is simulated.

The schema (`sim.config`) checks each field and the fields of one file together; the preflight
checks what needs the model specs and the workload's contents as well:
- every model's weights fit in the HBM of an instance of every pool (`sim.cluster.build.hbm_budget`);
- every model's routed-expert format can be timed on every pool's GPU (`sim.timing.marlin`: W4A16);
- the trace reads and passes the trace invariants in full (`sim.workload.validate`, the same reader
  the run uses), with times within `MAX_DURATION_S`; a generator spec loads;
- the measured window holds something: in open-loop replay, `workload.warmup_s` before the last
  arrival (closed loop, the run learns arrival times as it goes and refuses afterwards);
- the time series fit in memory: samples x (pools + 1) rows at most MAX_SAMPLE_ROWS.

`preflight` raises one InputError with a line per problem (file, field, value, what is allowed),
or returns what the run needs to know of its workload.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from sim import units
from sim.config.base import MAX_DURATION_S
from sim.config.errors import problem_line
from sim.config.scenario import Scenario
from sim.errors import InputError

# A bound of ours [D]: a time-series row costs about 1.2 KB in memory until the run ends (measured:
# 130,585 samples of one pool and the cluster took 310 MB), so 1M rows is about 1.2 GB.
MAX_SAMPLE_ROWS = 1_000_000
DAY_S = 86_400.0


@dataclass(frozen=True)
class Workload:
    """What the preflight learnt of the workload."""

    requests: int | None  # rows the run replays (None: a generator, known once generated)
    last_arrival_s: float | None  # when the last replayed request arrives, as laid out in the trace
    # (closed loop: with the source's or the generator's service times, not yet the simulated ones);
    # a benchmark: its horizon_s, None when only max_requests ends it
    seed_affects: str  # what the seed changes, in words


def preflight(scn: Scenario) -> Workload:
    """Every problem of `scn` that the schema cannot see, at once (module doc), each line naming the
    scenario file."""
    problems: list[str] = []
    problems += _hbm_problems(scn)
    problems += _expert_format_problems(scn)
    problems += _moe_runner_problems(scn)
    workload, trace_problems = _workload(scn)
    problems += trace_problems
    if workload is not None:
        problems += _window_problems(scn, workload)
    if problems:
        raise InputError.many(problems, file=scn.source_file)
    assert workload is not None
    return workload


def _expert_format_problems(scn: Scenario) -> list[str]:
    """A model's `expert_activations` that no pool's GPU can time (sim.timing.marlin: W4A16 is measured on the
    H200 and the H100 and carried to GPUs with native FP4)."""
    from sim.timing.carry import GpuPeaks
    from sim.timing.marlin import ALLOWED, REFUSAL, measured_on

    lines = []
    for k, ref in enumerate(scn.models):
        if ref.expert_activations != "bf16":
            continue
        for pool in scn.for_model(ref.name).cluster.pools:
            hw = scn.pool_profile(pool)
            if not GpuPeaks.of(hw).native_fp4 and not measured_on(hw):
                where = f"models[{k}].expert_activations"
                lines.append(
                    problem_line(where, f"{REFUSAL} (pool '{pool.name}')", f"bf16 on {hw.gpu}", ALLOWED)
                )
    return lines


def _moe_runner_problems(scn: Scenario) -> list[str]:
    """A pool's `moe_runner` that does not run its models' experts on its GPU, or has no rows there
    (sim.timing.engine_moe)."""
    from sim.cluster.build import pool_expert_format
    from sim.model import load_model
    from sim.timing import engine_moe
    from sim.timing.carry import GpuPeaks

    lines = []
    for ref in scn.models:
        spec = load_model(ref.name)
        one = scn.for_model(ref.name)
        where = "cluster.pools" if ref.pools is None else f"models[{scn.models.index(ref)}].pools"
        for i, pool in enumerate(one.cluster.pools):
            if pool.moe_runner == "auto" or spec.moe is None:
                continue
            hw = scn.pool_profile(pool)
            activations = pool_expert_format(one, spec, hw, pool).activations
            needs = engine_moe.runner_misfit(pool.moe_runner, activations, GpuPeaks.of(hw).native_fp4)
            if (
                needs is None
                and pool.moe_runner in engine_moe.RUNNERS
                and not engine_moe.available_on(pool.moe_runner, hw)
            ):
                needs = f"a GPU it has measured rows for ({engine_moe.RUNNERS[pool.moe_runner].what})"
            if needs is not None:
                lines.append(
                    problem_line(f"{where}[{i}].moe_runner", f"the MoE runner runs {needs} (model {ref.name})",
                                 f"{pool.moe_runner} with {activations} experts on {hw.gpu}", "auto, or a runner that fits")
                )  # fmt: skip
    return lines


def _hbm_problems(scn: Scenario) -> list[str]:
    from sim.cluster.build import hbm_budget
    from sim.model import load_model

    lines = []
    for ref in scn.models:
        spec = load_model(ref.name)
        where = "cluster.pools" if ref.pools is None else f"models[{scn.models.index(ref)}].pools"
        for i, pool in enumerate(scn.for_model(ref.name).cluster.pools):
            budget = hbm_budget(scn, pool, spec, engram_in_hbm=scn.cluster.engram_placement == "hbm")
            if budget.kv_bytes > 0:
                continue
            hw = scn.pool_profile(pool)
            lines.append(
                problem_line(
                    f"{where}[{i}].gpus_per_instance",
                    f"{ref.name} weights ({budget.weights_bytes / units.GB:,.0f} GB per instance) leave no HBM "
                    f"for KV in pool '{pool.name}' ({pool.gpus_per_instance} x {hw.id} GPUs: "
                    f"{budget.usable_bytes / units.GB:,.0f} GB after the "
                    f"{scn.cluster.activation_reserve_frac:.0%} activation reserve)",
                    pool.gpus_per_instance,
                    "more GPUs per instance, a larger ep"
                    + (", or cluster.engram_placement: host_dram" if _has_engram(spec) else ""),
                )
            )
    return lines


def _has_engram(spec) -> bool:
    from sim.model import weights_bytes_by_group

    return weights_bytes_by_group(spec).get("engram_tables", 0.0) > 0


def _workload(scn: Scenario) -> tuple[Workload | None, list[str]]:
    w = scn.workload
    if w.benchmark is not None:
        return Workload(w.max_requests, w.horizon_s, _benchmark_seed(w.benchmark)), []
    if w.generator is not None:
        from sim.workload.spec import load_spec

        try:
            spec, _ = load_spec(w.generator)
        except InputError as err:
            return None, [f"workload.generator: {line}" for line in err.lines]
        days = w.days if w.days is not None else spec.days
        return Workload(None, days * DAY_S, "the generated trace (sessions, arrivals, tokens)"), []
    if Path(w.trace).is_dir():
        if scn.cluster.cells is None:
            return None, [f"workload.trace: {w.trace} is a trace in parts (a folder), which a fleet replays: "
                          "give cluster.cells, or a trace file"]  # fmt: skip
        # a fleet's parts are checked as they are split into cell traces (sim.fleet.split)
        return Workload(None, None, "nothing: the scenario replays a trace"), []
    try:
        requests, last_arrival_s = _scan_trace(Path(w.trace), w.max_requests)
    except InputError as err:
        return None, [f"workload.trace: {line}" for line in err.lines]
    nothing = "nothing: the scenario replays a trace file and the simulator draws no random numbers"
    return Workload(requests, last_arrival_s, nothing), []


def _benchmark_seed(b) -> str:
    drawn = []
    if b.lengths_drawn_by is not None:
        c = b.lengths_drawn_by
        drawn_by = (f"request lengths: {c.client}'s own draws (its seed {c.seed}, not the scenario's)"
                    if c.client != "trace_quantiles" else
                    f"request lengths: drawn from the trace's quantiles (seed {c.seed}, not the scenario's)")  # fmt: skip
        if b.request_rate_per_s is None:
            return "nothing from the scenario's seed; " + drawn_by
        return "the benchmark client's Poisson arrival times; " + drawn_by
    if b.length_jitter_frac > 0:
        drawn.append("request lengths (length_jitter_frac)")
    if b.request_rate_per_s is not None:
        drawn.append("Poisson arrival times")
    if not drawn:
        return "nothing: a closed-loop benchmark without length jitter draws no random numbers"
    return "the benchmark client's " + " and ".join(drawn)


def _scan_trace(path: Path, max_requests: int | None) -> tuple[int, float]:
    """Read the whole trace through the validating reader the run uses; (requests replayed, last
    arrival among them as laid out in the file), with every time checked against MAX_DURATION_S.
    The run replays the first `max_requests` rows in file order."""
    from sim.workload.io import iter_session_batches

    columns = ["session_start_s", "arrival_time_s", "think_time_s"]
    rows = 0
    last_arrival_s = 0.0
    for table in iter_session_batches(path, columns=columns):
        for name in columns:
            values = table.column(name).to_numpy()
            big = np.flatnonzero(values > MAX_DURATION_S)
            if big.size:
                raise InputError(
                    "longer than sim simulates (one year)",
                    file=str(path),
                    where=f"row {rows + int(big[0])}, column {name}",
                    value=float(values[big[0]]),
                    allowed=f"<= {MAX_DURATION_S:,} s",
                )
        replayed = (
            table.num_rows if max_requests is None else max(0, min(table.num_rows, max_requests - rows))
        )
        if replayed:
            last_arrival_s = max(
                last_arrival_s, float(table.column("arrival_time_s").to_numpy()[:replayed].max())
            )
        rows += table.num_rows
    if rows == 0:
        raise InputError("the trace holds no requests", file=str(path))
    return (rows if max_requests is None else min(rows, max_requests)), last_arrival_s


def _window_problems(scn: Scenario, workload: Workload) -> list[str]:
    w = scn.workload
    lines = []
    # Open loop, every arrival time is known now; closed loop, the run decides them (the run itself
    # then refuses a window that measured nothing: sim.api).
    last_s = workload.last_arrival_s
    if (
        last_s is not None and w.trace is not None and w.replay == "open_loop" and w.warmup_s > last_s
    ):  # measured: >= warmup
        lines.append(
            problem_line(
                "workload.warmup_s",
                f"after the last arrival the run replays ({last_s:,.0f} s): nothing would be measured",
                w.warmup_s,
                f"<= {last_s:,.0f}",
            )
        )
    span_s = w.horizon_s if w.horizon_s is not None else last_s
    if span_s is None:
        return lines
    interval_s = scn.outputs.timeseries_interval_s
    series = (
        max(len(scn.for_model(m.name).cluster.pools) for m in scn.models) + 1
    )  # per pool, one cluster-wide
    rows = math.ceil(span_s / interval_s) * series
    if rows > MAX_SAMPLE_ROWS:
        least = span_s * series / MAX_SAMPLE_ROWS
        lines.append(
            problem_line(
                "outputs.timeseries_interval_s",
                f"{rows:,} time-series rows over the {span_s:,.0f} s the run covers ({series} series); "
                f"the limit is {MAX_SAMPLE_ROWS:,} (about 1.2 GB of memory)",
                interval_s,
                f">= {least:.3g}",
            )
        )
    return lines
