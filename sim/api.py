"""`run_scenario`: what the CLI, the tests and the planner call to simulate a scenario.

Each model of the scenario runs on the same cluster and the same trace in its own event loop
(sim.cluster.events): one after the other, or (`jobs` > 1) at the same time in separate processes
(`sim.processes`), which write the same bytes. Outputs (when `out_dir` is given):

    out_dir/summary.json                      {"scenario": {...inputs}, "seed", "models": {name: summary}}
    out_dir/<model>/requests.parquet          sim.metrics.schema.REQUEST_SCHEMA
    out_dir/<model>/timeseries/<pool>.parquet sim.metrics.schema.POOL_SCHEMA
    out_dir/<model>/timeseries/_cluster.parquet

The run is written into a fresh folder beside `out_dir` and swapped in whole when every model has
run (`sim.outputs`): an interrupted or failed run leaves `out_dir` as it was. A non-empty `out_dir`
is refused unless `force`. Every file carries the run id (summary.json `run_id`, each Parquet file's
metadata `sim.run_id`), which `sim report` checks: a hash of what the run was asked (the validated
scenario, the seed, the bytes of the trace or generator spec, the sim version), so the same inputs
give the same id and the same bytes.

Before any model runs, `sim.preflight` checks what the schema cannot (weights in HBM, the whole
trace, the measured window, time-series memory), the same checks as `sim scenario check`.
"""

from __future__ import annotations

import gc
import hashlib
import json
import os
import tempfile
from collections.abc import Callable
from dataclasses import dataclass, field, fields
from pathlib import Path

from sim.capacity.run import SearchStep, search_block
from sim.cluster.build import build_simulation
from sim.cluster.simpy_loop import SimPyLoop
from sim.config.engine_rules import scenario_refusal
from sim.config.errors import validate_or_raise
from sim.config.scenario import Scenario, load_scenario
from sim.config.workload import Benchmark, TraceQuantileDraw
from sim.errors import InputError
from sim.extensions import event_loop_of, load_extensions, start_extensions
from sim.metrics.invariants import check_run
from sim.metrics.schema import RUN_FORMAT
from sim.metrics.summarize import SessionStats, summarize_model
from sim.outputs import probe_output_dir, staged_output_dir
from sim.preflight import preflight
from sim.processes import run_jobs
from sim.rng import RngStreams
from sim.timing.arith import build_arith
from sim.workload.arrivals import Arrivals, BenchmarkArrivals, iter_trace_columns
from sim.workload.bench_clients import ClientLengths, sglang_random_lengths, trace_quantile_lengths
from sim.workload.io import arrow_without_pandas, trace_info

# progress(model_name, model_index, models, simulated_s, requests_ended, requests_expected)
Progress = Callable[[str, int, int, float, int, int], None]
# search_progress(step): a point of a model's capacity search (sim.capacity.run)
SearchProgress = Callable[[SearchStep], None]


@dataclass
class RunResult:
    scenario: str
    seed: int
    summary: dict
    out_dir: Path | None
    files: list[Path] = field(default_factory=list)


def _api_price(family: str):
    """The family's latest DeepSeek API list price at peak hours (None if the data is missing)."""
    try:
        from sim.hardware import api_price_table
    except ImportError:  # pragma: no cover - the price data ships with sim.hardware
        return None
    rows = [r for r in api_price_table() if r.family == family]
    return rows[0] if rows else None


def _trace_path(scn: Scenario, seed: int, workdir: Path) -> Path | None:
    """The trace to replay (generated into `workdir` from a spec); None for a benchmark client."""
    w = scn.workload
    if w.benchmark is not None:
        return None
    if w.trace is not None:
        return Path(w.trace)
    from sim.workload.generator import generate_trace

    out = workdir / "generated_trace.parquet"
    generate_trace(w.generator, out, seed=seed, days=w.days)
    return out


def run_id(scn: Scenario, seed: int) -> str:
    """The id every output file of a run carries: a hash of the run's inputs (module doc)."""
    from sim import __version__

    h = hashlib.sha256()
    h.update(
        json.dumps([RUN_FORMAT, __version__, seed, scn.model_dump(mode="json")], sort_keys=True).encode()
    )
    source = scn.workload.source_path  # None for a benchmark client: the scenario says it all
    if source is not None:
        with open(source, "rb") as f:
            h.update(hashlib.file_digest(f, "sha256").digest())
    return h.hexdigest()[:16]


def run_scenario(
    scenario: Scenario | str | os.PathLike,
    seed: int | None = None,
    out_dir: str | os.PathLike | None = None,
    progress: Progress | None = None,
    *,
    force: bool = False,
    jobs: int = 1,
    loop: str | None = None,
    search_progress: SearchProgress | None = None,
    capacity: bool = True,
) -> RunResult:
    """Simulate every model of `scenario` (module doc); `jobs` > 1 simulates up to that many models
    at once, each in its own process, with the same outputs byte for byte as one after the other.
    `loop` (`native` | `simpy`) overrides the scenario's `event_loop` (sim.config.extensions). Each model's
    process then runs its capacity search (sim.capacity), whose points `search_progress` hears of, unless
    the scenario says `capacity: off` or the caller `capacity=False` (the deployment search and the planner,
    which run loads of their own)."""
    if not capacity:
        scenario = scenario if isinstance(scenario, Scenario) else load_scenario(scenario)
        scenario = scenario.model_copy(
            update={"capacity": scenario.capacity.model_copy(update={"enabled": False})}
        )
    scn = scenario if isinstance(scenario, Scenario) else load_scenario(scenario)
    seed = scn.seed if seed is None else seed
    if seed < 0:
        raise InputError("must be >= 0", where="seed", value=seed, allowed="an integer >= 0")
    loop = event_loop_of(scn, loop)
    load_extensions(scn)  # a bad entry fails here, before any output folder is touched
    target = probe_output_dir(Path(out_dir), force=force) if out_dir is not None else None
    workload = preflight(scn)
    rid = run_id(scn, seed)
    result = {
        "format": RUN_FORMAT,
        "run_id": rid,
        "scenario": scn.model_dump(mode="json"),  # all of it: the outputs (and the page) stand alone
        "seed": seed,
        "seed_affects": workload.seed_affects,
        "models": {},
    }
    if target is None:
        _run_models(scn, seed, None, rid, _deliver(progress, search_progress), result["models"], jobs, loop)
        return RunResult(scenario=scn.name, seed=seed, summary=result, out_dir=None)
    with staged_output_dir(target, run_id=rid, command="sim run") as stage:
        written = _run_models(
            scn, seed, stage, rid, _deliver(progress, search_progress), result["models"], jobs, loop
        )
        (stage / "summary.json").write_text(json.dumps(result, indent=2, sort_keys=False) + "\n")
        written.append(stage / "summary.json")
    files = [target.path / path.relative_to(stage) for path in written]
    return RunResult(scenario=scn.name, seed=seed, summary=result, out_dir=target.path, files=files)


def _deliver(
    progress: Progress | None, search_progress: SearchProgress | None
) -> Callable[[object], None] | None:
    """One receiver for a worker's messages: a run's progress tuple, or a search step."""
    if progress is None and search_progress is None:
        return None

    def deliver(message) -> None:
        if isinstance(message, SearchStep):
            if search_progress is not None:
                search_progress(message)
        elif progress is not None:
            progress(*message)

    return deliver


def _require_measured(scn: Scenario, model: str, summary: dict) -> None:
    """A run whose window measured no request answers nothing: an error, not a summary of zeros."""
    if summary["requests_arrived"] == 0:
        raise InputError(
            f"no request of {model} arrived after the warm-up (all {summary['requests_arrived_incl_warmup']:,} "
            "arrived before it): nothing was measured",
            file=scn.source_file,
            where="workload.warmup_s",
            value=scn.workload.warmup_s,
            allowed="a warm-up that ends before the last arrival",
        )


@dataclass(frozen=True)
class ModelRun:
    """One model of a scenario to simulate: everything its process needs (picklable)."""

    scn: Scenario
    index: int  # in scn.models
    trace: Path | None
    seed: int
    out: Path | None
    run_id: str
    expected: int  # requests the progress bar expects
    loop: str  # the event loop: native | simpy

    def __str__(self) -> str:
        return self.scn.models[self.index].name

    def __reduce__(self):
        """Pickled with the scenario as its validated document (its hardware profiles do not
        pickle); validating it again in the worker gives the same scenario."""
        doc = self.scn.model_dump(mode="json")
        rest = tuple(getattr(self, f.name) for f in fields(self) if f.name != "scn")
        return _unpickle_model_run, (doc, self.scn.source_file, *rest)


def _unpickle_model_run(doc: dict, file: str | None, *rest) -> ModelRun:
    scn = validate_or_raise(Scenario, doc, file=file or "scenario")
    scn._file = file
    return ModelRun(scn, *rest)


def _run_models(
    scn: Scenario,
    seed: int,
    out: Path | None,
    rid: str,
    deliver: Callable[[object], None] | None,
    models: dict,
    jobs: int,
    loop: str,
) -> list[Path]:
    """Every model, `jobs` at a time in their own processes (one: in turn, in this process); each
    summary into `models` in the scenario's order; the files written."""
    files: list[Path] = []
    with tempfile.TemporaryDirectory(prefix="sim-run-") as tmp:
        trace = _trace_path(scn, seed, Path(tmp))
        expected = _expected_requests(scn, trace)
        runs = [
            ModelRun(scn.for_model(ref.name), index, trace, seed, out, rid, expected, loop)
            for index, ref in enumerate(scn.models)
        ]
        if min(jobs, len(runs)) <= 1:
            send = deliver
            outcomes = []
            for run in runs:
                outcomes.append(_model_job(run, send))
                _require_measured(scn, str(run), outcomes[-1][0])  # before the next model runs
        else:
            on_message = (lambda _index, message: deliver(message)) if deliver is not None else None
            outcomes = run_jobs(_model_job_alone, runs, min(jobs, len(runs)), on_message)
            for run, (summary, _written) in zip(runs, outcomes, strict=True):
                _require_measured(scn, str(run), summary)
        for run, (summary, written) in zip(runs, outcomes, strict=True):
            models[str(run)] = summary
            files += written
    return files


def _expected_requests(scn: Scenario, trace: Path | None) -> int:
    """Requests the progress bar expects: the trace's rows, or for a benchmark its cap (when it has
    one, else what a horizon of its load would bring at one request per concurrency slot a second,
    a rough guess that only scales the bar)."""
    w = scn.workload
    if trace is not None:
        rows = int(trace_info(trace)["rows"])
        return rows if w.max_requests is None else min(rows, w.max_requests)
    if w.max_requests is not None:
        return w.max_requests
    b = w.benchmark
    rate = b.request_rate_per_s if b.request_rate_per_s is not None else float(b.concurrency or 1)
    return max(1, int(rate * (w.horizon_s or 0.0)))


def _arrivals(scn: Scenario, trace: Path | None, seed: int, sim, sessions: SessionStats, finish) -> Arrivals:
    """The trace replay, or the benchmark client of `workload.benchmark` (sim.workload.arrivals)."""
    w = scn.workload
    common = dict(
        warmup_s=w.warmup_s,
        horizon_s=w.horizon_s,
        max_requests=w.max_requests,
        on_session=sessions.on_session,
        on_idle=finish,
    )
    if trace is not None:
        # validated once: by the preflight (a trace file) or by the writer (a generated one)
        columns = iter_trace_columns(trace, trusted=True)
        return Arrivals(sim.env, columns, sim.cluster, closed_loop=w.replay == "closed_loop", **common)
    b = w.benchmark
    return BenchmarkArrivals(
        sim.env,
        sim.cluster,
        isl_tokens=b.isl_tokens,
        osl_tokens=b.osl_tokens,
        prefix_reuse_frac=b.prefix_reuse_frac,
        concurrency=b.concurrency or 0,
        request_rate_per_s=b.request_rate_per_s or 0.0,
        think_s=b.think_s,
        length_jitter_frac=b.length_jitter_frac,
        turns_per_session=b.turns_per_session,
        client_lengths=_client_lengths(b, w.max_requests),
        rng=RngStreams(seed).get("benchmark"),
        **common,
    )


def _client_lengths(b: Benchmark, prompts: int | None) -> ClientLengths | None:
    """The named client's own draws (`benchmark.lengths_drawn_by`), one per prompt it sends."""
    draw = b.lengths_drawn_by
    if draw is None or prompts is None:  # the config requires max_requests with a draw
        return None
    if isinstance(draw, TraceQuantileDraw):  # a closed loop: up to C sessions end cut short
        return trace_quantile_lengths([(p.q, p.tokens) for p in draw.input_quantiles],
                                      [(p.q, p.tokens) for p in draw.output_quantiles],
                                      prompts, b.turns_per_session, b.concurrency or 0, draw.seed)  # fmt: skip
    return sglang_random_lengths(b.isl_tokens, b.osl_tokens, prompts, draw.range_ratio, draw.seed)


def _model_job_alone(run: ModelRun, send: Callable[[tuple], None] | None) -> tuple[dict, list[Path]]:
    """`_model_job` in a worker process of its own, which never needs pandas (sim.workload.io)."""
    with arrow_without_pandas():
        return _model_job(run, send)


def _model_job(run: ModelRun, send: Callable[[object], None] | None) -> tuple[dict, list[Path]]:
    """Simulate one model, then search its capacity (sim.capacity.run): (its summary, the files
    written); `send` gets the progress tuples and search steps."""
    hook = None
    if send is not None:

        def hook(now: float, ended: int) -> None:
            send((str(run), run.index, len(run.scn.models), now, ended, run.expected))

    summary, written = _simulate(run, hook)

    def simulate(at: Scenario, trace: Path | None, progress: Callable[[int, int], None]) -> dict:
        expected = _expected_requests(at, trace)
        point = ModelRun(at, run.index, trace, run.seed, None, run.run_id, expected, run.loop)
        return _simulate(point, lambda _now, ended: progress(ended, expected))[0]

    block = search_block(run.scn, str(run), run.index, run.seed, run.trace, simulate, send, summary)
    summary["capacity"].update(block)
    return summary, written


def _simulate(run: ModelRun, hook: Callable[[float, int], None] | None) -> tuple[dict, list[Path]]:
    """One simulation of one model: (its summary, the files written); `hook(now, ended)` hears of it."""
    scn, ref, trace, seed, out, rid = (
        run.scn,
        run.scn.models[run.index],
        run.trace,
        run.seed,
        run.out,
        run.run_id,
    )
    arith = build_arith(ref.name, prefill_mode=ref.prefill_mode, kv_layout=ref.kv_layout)
    env = SimPyLoop() if run.loop == "simpy" else None
    sim = build_simulation(scn, ref, arith, out_dir=out, progress=hook, run_id=rid, env=env)
    w = scn.workload
    sessions = SessionStats(w.warmup_s, w.horizon_s)
    env = sim.env
    done = env.signal()

    def finish() -> None:
        if not done.triggered:
            done.succeed("drained")

    arrivals = _arrivals(scn, trace, seed, sim, sessions, finish)

    def watchdog():
        step = scn.outputs.timeseries_interval_s
        while not arrivals.loaded_all:
            yield env.timeout(step)
        yield env.timeout(w.drain_limit_s)
        if not done.triggered:
            done.succeed("drain_limit")

    arrivals.start()
    sim.sampler.start()
    env.process(watchdog())
    extensions = start_extensions(scn, sim, seed) if scn.extensions else None
    gc_was_enabled = gc.isenabled()
    # The run makes millions of short-lived objects and almost no reference cycles: the cyclic
    # collector would only cost time (reference counting still frees everything).
    gc.disable()
    try:
        env.run(until=done)
        drain_limited = done.value == "drain_limit"
        if drain_limited:
            for req in list(sim.cluster.live.values()):
                sim.cluster.reject(req, "unfinished_at_end")
        sim.sampler.sample()
        sim.recorder.close()
    except BaseException:
        sim.recorder.abort()
        raise
    finally:
        if gc_was_enabled:
            gc.enable()
    check_run(sim, drain_limited=drain_limited)
    written: list[Path] = []
    if out is not None:
        if sim.recorder.out_path is not None:
            written.append(sim.recorder.out_path)
        written += sim.sampler.write(out / ref.name / "timeseries", rid)
    summary = summarize_model(
        sim,
        sessions=sessions,
        warmup_s=w.warmup_s,
        horizon_s=w.horizon_s,
        api_prices=_api_price(sim.family),
        not_arrived=arrivals.not_arrived,
        drain_limited=drain_limited,
        ttft_slo_s=scn.slo.ttft_s,
        tpot_slo_s=scn.slo.tpot_s,
    )
    summary["engine_refusal"] = scenario_refusal(scn, ref.name)
    if extensions is not None:
        summary["extensions"] = extensions.summary(summary)
    return summary, written
