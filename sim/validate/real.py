"""`sim validate --real RUN_DIR`: a real serving run (kernels_bench.serve: the engine replaying a trace on a
GPU) against the simulator on the same trace, model and engine settings.

What is compared:
- requests: the run's trace (RUN_DIR/trace.parquet, think times times the run's think scale) replayed
  closed-loop by `sim run` on one colocated instance of one GPU of the run's machine (tp = ep = dp = 1;
  the GPU named in the run's provenance, `hardware_of`, and that GPU's own tables) with the run's
  engine settings (`engine_settings`): scheduler (prefill_budget_tokens, chunk_tokens,
  max_decode_batch), what its prefix cache keeps of the sliding window (`cache.swa_prefix_rows`: the
  engine reuses whole blocks and the served model keeps every token's raw window row in them, so a hit
  recomputes nothing: `every_token`), its CUDA-graph row buckets (`timing.graph_row_buckets`, the step
  function's `row_buckets`), prefill rows through the decode kernel (`timing.prefill_attention`), its
  synchronous loop's host time (`timing.host`, sim.timing.host: in the step, fitted on the bench's profiled
  points, sim.timing.served; between steps, the scheduler's gaps measured on the *other* committed runs,
  sim.validate.real_gaps: leave-one-run-out), the served model's glue as a forward-pass term
  (`timing.forward_term: served`, fitted on the GPU's bench table hwprofiles/<gpu>/serve/serve_step_times.csv on
  top of that host time, measured outside the run; `unfused_glue`, the same glue as launches x launch floor
  + time per row from the kernel profile, is reported beside it), and its KV capacity:
  HBM for KV = num_blocks x block_tokens x the model's KV bytes per token (global KV + the raw window
  rows the engine keeps) + one per-sequence state (compressor groups; the SWA ring too where the engine
  keeps only the window) for every agent of the trace (session x agent), set as
  `cache.tiers.hbm.capacity_gb_per_node` (KV per node, the instance's GPU taking its share); HBM is the
  only cache tier (the engine has no host tier) and keeps finished turns until evicted (no TTL), as the
  engine's LRU pool does. Why the states: sim charges each running or cached sequence its state beside
  its tokens, while the engine keeps states in separate slots and its blocks hold tokens only; room for
  every agent's state [D: a closed-loop agent holds one sequence or cached context at a time] leaves sim
  the engine's token capacity. Provenance fields override each engine setting where the run records
  it (`engine.swa_prefix_rows`, `step_function.row_buckets`, `step_function.prefill_attention`).
  Not modelled: CUDA-graph captures on first use of a bucket during a run (a property of the run; the step
  table lists them), the served graphs' padding of every row's indexer keys to the graph's 8K context
  bucket (reading the whole pipeline at the bucket over-predicts the profiled mixed and 32K prefill points'
  attention by 11-12 %, against -5 / +1 % at the rows' mean context: FlashMLA skips the padded entries, so
  only the indexer pays, and sim's decode pipeline is not split into its kernels; sim also sees a decode
  batch's mean context only), and host work per block-table entry.
  TTFT, TPOT, E2E (mean, p50, p90,
  p99 over completed requests) and throughput (output tokens / makespan) of both; error =
  (simulated - measured) / measured.
- steps: each measured step's time predicted from its recorded composition (decode contexts, prefill
  chunks) with the timing model `sim run` uses (`TimingModel.step_s`); the distribution of
  (predicted - measured) / measured, overall and by kind (decode only, prefill only, mixed).

Step errors are also reported with the glue as a mechanism (`unfused_glue`), with the production default
term (`fused_glue`) and with none (these two with production's hidden host time), so the part the served
term accounts for stays visible. Nothing is tuned on the run: the error is a measurement. Where the engine and sim's colocated instance schedule
differently (kernels_bench/serve/engine.py lists it), the request metrics include that difference; the
step metrics do not (they use the engine's own schedule).
"""

from __future__ import annotations

import functools
import json
import math
import re
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import yaml

from sim import units
from sim.errors import InputError
from sim.timing.batch import DecodeTerms, PrefillChunk
from sim.timing.carry import REFERENCE_GPU
from sim.validate.real_gaps import NO_GAPS, GapFit, fit_gaps, held_out_gaps

REQUESTS = "requests.parquet"
STEPS = "steps.parquet"
TRACE = "trace.parquet"
PROVENANCE = "provenance.json"

REQUEST_COLUMNS = ("request_id", "status", "arrival_s", "first_token_s", "finish_s", "ttft_s", "tpot_s", "e2e_s",
                   "input_tokens", "output_tokens", "hit_tokens")  # fmt: skip
STEP_COLUMNS = ("start_s", "wall_s", "decode_context_tokens", "prefill_context_tokens", "prefill_new_tokens",
                "prefill_last_chunk")  # fmt: skip
ENGINE_KEYS = ("prefill_budget_tokens", "chunk_tokens", "max_decode_batch", "block_tokens", "num_blocks")
LATENCIES = ("ttft_s", "tpot_s", "e2e_s")
STATS = ("mean", "p50", "p90", "p99")
STEP_KINDS = ("all", "decode", "prefill", "mixed")
# kernels_bench.serve: the engine reuses whole KV blocks and the served model keeps every token's raw window
# row in them (kernels_bench/serve/model.py), so a prefix hit recomputes nothing; prefill rows attend through
# FlashMLA's sparse decode kernel (its only path)
SERVED_SWA_PREFIX_ROWS = "every_token"
SERVED_PREFILL_ATTENTION = "decode_kernel"
# the served model's glue as a term fitted on the bench table (sim.timing.forward.served_check), on top of its
# host time (sim.timing.served); measured outside the run
SERVED_FORWARD_TERM = "served"
SERVED_TERMS = ("served", "unfused_glue")  # the served engine's own (with its host time)
# step errors reported beside it: the glue as a mechanism (launches x floor + time per row, from the kernel
# profile; sim.timing.served), the production default and none (these two with production's host time: hidden)
ALTERNATIVE_TERMS = ("unfused_glue", "fused_glue", "none")


@dataclass
class RealRun:
    folder: Path
    requests: pa.Table
    steps: pa.Table
    provenance: dict[str, Any]

    @property
    def engine(self) -> dict[str, Any]:
        return self.provenance["engine"]

    @functools.cached_property
    def hardware(self) -> str:
        """The hardware profile of the run's GPU (`hardware_of`)."""
        return hardware_of(self.provenance, str(self.folder / PROVENANCE))

    @functools.cached_property
    def gpu_key(self) -> str:
        from sim.hardware import load_hw
        from sim.timing.tables import gpu_key

        return gpu_key(load_hw(self.hardware))

    @property
    def think_scale(self) -> float:
        return float(self.provenance.get("trace", {}).get("think_scale", 1.0))

    def engine_settings(self) -> dict[str, Any]:
        """The engine's settings sim takes (module doc): the run's provenance where it records them."""
        step = self.provenance.get("step_function") or {}
        return {
            "swa_prefix_rows": self.engine.get("swa_prefix_rows", SERVED_SWA_PREFIX_ROWS),
            "graph_row_buckets": [int(b) for b in step.get("row_buckets") or []],
            "prefill_attention": step.get("prefill_attention", SERVED_PREFILL_ATTENTION),
        }


def hardware_of(provenance: dict[str, Any], where: str) -> str:
    """The hardware profile of the GPU the run measured on (its provenance's `gpu_name`, e.g. "NVIDIA H100 80GB
    HBM3"): the profile whose `gpu` (H100, H200, ...) is a word of that name; the first such profile by id, since
    the twin takes one GPU of it and a GPU's tables are per GPU, not per node build. A run that names no GPU (a
    CPU stand-in, kernels_bench.serve.standin) is taken as the reference GPU's."""
    from sim.hardware import load_all_hw
    from sim.timing.tables import gpu_key

    machine = provenance.get("machine") or (provenance.get("step_function") or {}).get("provenance") or {}
    name = str(machine.get("gpu_name") or "")
    if not name:
        return sorted(p.id for p in load_all_hw() if gpu_key(p) == REFERENCE_GPU)[0]
    matches = sorted(
        p.id for p in load_all_hw() if re.search(rf"\b{re.escape(str(p.gpu))}\b", name, re.IGNORECASE)
    )
    if not matches:
        raise InputError("the run's GPU has no hardware profile", file=where, where="machine.gpu_name", value=name,
                         allowed=sorted({str(p.gpu) for p in load_all_hw()}))  # fmt: skip
    return matches[0]


def _read_parquet(path: Path, columns: tuple[str, ...]) -> pa.Table:
    if not path.is_file():
        raise InputError("missing file of the run directory", file=str(path),
                         allowed="a folder written by python3 -m kernels_bench.serve.run")  # fmt: skip
    try:
        table = pq.read_table(path)
    except Exception as e:  # noqa: BLE001 - any unreadable file gets one message
        raise InputError(f"not a readable Parquet file ({type(e).__name__})", file=str(path)) from e
    missing = [c for c in columns if c not in table.column_names]
    if missing:
        raise InputError("missing columns", file=str(path), value=missing, allowed=f"columns {list(columns)}")
    if table.num_rows == 0:
        raise InputError("no rows", file=str(path))
    return table


def load_run(folder: Path) -> RealRun:
    """The run directory, checked (one InputError naming the file and what is wrong)."""
    if not folder.is_dir():
        raise InputError("run directory not found", file=str(folder),
                         allowed="a folder written by python3 -m kernels_bench.serve.run")  # fmt: skip
    prov_path = folder / PROVENANCE
    if not prov_path.is_file():
        raise InputError("missing file of the run directory", file=str(prov_path))
    try:
        prov = json.loads(prov_path.read_text())
    except json.JSONDecodeError as e:
        raise InputError(f"not valid JSON: {e.msg}", file=str(prov_path), where=f"line {e.lineno}") from e
    engine = prov.get("engine") if isinstance(prov, dict) else None
    if not isinstance(engine, dict):
        raise InputError("no engine settings", file=str(prov_path), where="engine", allowed=list(ENGINE_KEYS))
    for key in ENGINE_KEYS:
        value = engine.get(key)
        if not isinstance(value, int) or isinstance(value, bool) or value <= 0:
            raise InputError("bad engine setting", file=str(prov_path), where=f"engine.{key}", value=value,
                             allowed="a positive integer")  # fmt: skip
    if not (folder / TRACE).is_file():
        raise InputError("missing file of the run directory", file=str(folder / TRACE))
    return RealRun(folder, _read_parquet(folder / REQUESTS, REQUEST_COLUMNS), _read_parquet(folder / STEPS, STEP_COLUMNS),
                   prov)  # fmt: skip


# --- the simulated twin ---------------------------------------------------------------------------------


def _scenario(
    run: RealRun,
    model: str,
    trace: Path,
    kv_gb_per_node: float | None,
    forward_term: str = SERVED_FORWARD_TERM,
    host: dict[str, float] | None = None,
) -> dict[str, Any]:
    e, s = run.engine, run.engine_settings()
    hbm: dict[str, Any] = {"ttl_s": 3e7}  # about a year: cached turns stay until evicted
    if kv_gb_per_node is not None:
        hbm["capacity_gb_per_node"] = kv_gb_per_node
    return {
        "name": "real-run",
        "seed": 0,
        "models": [model],
        "hardware": run.hardware,
        "cluster": {
            "pools": [{"name": "engine", "role": "colocated", "instances": 1, "gpus_per_instance": 1}]
        },
        "cache": {
            "block_tokens": e["block_tokens"],
            "swa_prefix_rows": s["swa_prefix_rows"],
            "tiers": {"hbm": hbm, "dram": {"enabled": False}, "ssd": {"enabled": False}},
        },
        "timing": {
            "model": "calibrated",
            "forward_term": forward_term,
            "graph_row_buckets": s["graph_row_buckets"],
            "prefill_attention": s["prefill_attention"],
            "host": host or {},
        },
        "scheduler": {
            "prefill_budget_tokens": e["prefill_budget_tokens"],
            "chunk_tokens": e["chunk_tokens"],
            "max_decode_batch": e["max_decode_batch"],
        },
        "workload": {"trace": str(trace), "replay": "closed_loop"},
    }


def _load(data: dict[str, Any], folder: Path):
    from sim.config.scenario import load_scenario

    path = folder / "scenario.yaml"
    path.write_text(yaml.safe_dump(data, sort_keys=False))
    return load_scenario(path)


def _scaled_trace(run: RealRun, folder: Path) -> Path:
    """The run's trace with think times times the run's think scale (what the engine waited)."""
    src = run.folder / TRACE
    if run.think_scale == 1.0:
        return src.resolve()
    t = pq.read_table(src)
    i = t.schema.get_field_index("think_time_s")
    scaled = pa.compute.multiply(t.column(i), run.think_scale)
    out = folder / "trace_scaled.parquet"
    pq.write_table(t.set_column(i, t.schema.field(i), scaled), out)
    return out


def reference_runs() -> list[Path]:
    """The committed run folders of the reference GPU (hwprofiles/h200/serve/run_*)."""
    from sim.paths import hwprofiles_dir

    return sorted(p for p in (hwprofiles_dir() / REFERENCE_GPU / "serve").glob("run_*") if p.is_dir())


def engine_host(run: RealRun, model: str) -> tuple[dict[str, float], GapFit]:
    """The served engine's host time (`timing.host`): in the step from `model`'s profiled bench points
    (sim.timing.served), between steps from the other committed runs (sim.validate.real_gaps)."""
    from sim.timing.served import served_engine

    inside = served_engine(run.gpu_key, model).host
    gaps = held_out_gaps(run.folder)
    if gaps is NO_GAPS and run.gpu_key != REFERENCE_GPU:
        # the first run on a GPU, with no other beside it: the gaps of the reference GPU's committed runs (the
        # scheduler's host-side time between steps, taken as the same on another GPU's machine [D])
        gaps = fit_gaps(reference_runs())
    host = {"step_s": inside.step_s, "per_sequence_s": inside.per_sequence_s, "per_row_s": inside.per_row_s,
            "gap_s": gaps.gap_s, "gap_per_sequence_s": gaps.gap_per_sequence_s, "gap_per_chunk_s": gaps.gap_per_chunk_s}  # fmt: skip
    return {k: max(0.0, v) for k, v in host.items()}, gaps


@dataclass
class Twin:
    requests: pa.Table
    timing: Any
    kv_bytes: float
    summary: dict[str, Any] = field(default_factory=dict)  # sim's summary of the twin run
    alternatives: dict[str, Any] = field(default_factory=dict)  # forward term -> the timing with it instead
    host: dict[str, float] = field(default_factory=dict)  # the twin's timing.host
    gaps: GapFit = NO_GAPS  # where its time between steps was measured


def simulate(run: RealRun, model: str) -> Twin:
    """Run `sim` on the run's trace with its settings; its request log and the timing model used."""
    from sim.api import run_scenario
    from sim.cluster.build import build_simulation
    from sim.timing.arith import build_arith

    host, gaps = engine_host(run, model)
    with tempfile.TemporaryDirectory(prefix="sim-real-") as tmp:
        folder = Path(tmp)
        trace = _scaled_trace(run, folder)
        first = _load(_scenario(run, model, trace, None, host=host), folder)
        ref = first.models[0]
        arith = build_arith(ref.name, prefill_mode=ref.prefill_mode, kv_layout=ref.kv_layout)
        built = build_simulation(first, ref, arith, out_dir=None)
        policy, pool = built.policy, built.pools[0]
        e = run.engine
        t = pq.read_table(trace, columns=["session_id", "agent_id"])
        agents = len(
            set(zip(t.column("session_id").to_pylist(), t.column("agent_id").to_pylist(), strict=True))
        )
        kv_bytes = (e["num_blocks"] * e["block_tokens"] * policy.global_kv_bytes_per_token
                    + agents * policy.seq_state_bytes)  # fmt: skip
        if kv_bytes > pool.kv_bytes_per_instance:
            raise InputError(
                f"the run's KV ({kv_bytes / 1e9:.1f} GB) does not fit beside {model}'s weights "
                f"({pool.weights_bytes_per_instance / 1e9:.1f} GB) on one GPU of {run.hardware} "
                f"({pool.kv_bytes_per_instance / 1e9:.1f} GB left for KV)",
                where="--model", value=model, allowed="the model the run served (provenance.json `model`)",
            )  # fmt: skip
        gpus_per_node = first.pool_profile(first.cluster.pools[0]).gpus_per_node
        kv_gb = kv_bytes * gpus_per_node / units.GB
        scn = _load(_scenario(run, model, trace, kv_gb, host=host), folder)
        result = run_scenario(scn, out_dir=folder / "sim", capacity=False)  # its checks (preflight) apply
        requests = pq.read_table(folder / "sim" / ref.name / "requests.parquet")
        timing = build_simulation(scn, ref, arith, out_dir=None).instances[0].timing
        alternatives = {}
        for term in ALTERNATIVE_TERMS:
            alt_host = (
                host if term in SERVED_TERMS else None
            )  # the production terms: production's host (none)
            alt = _load(_scenario(run, model, trace, kv_gb, term, alt_host), folder)
            alternatives[term] = build_simulation(alt, ref, arith, out_dir=None).instances[0].timing
    return Twin(requests, timing, kv_bytes, result.summary["models"][ref.name], alternatives, host, gaps)


# --- the comparison -------------------------------------------------------------------------------------


def _stats(values: np.ndarray) -> dict[str, float]:
    v = values[np.isfinite(values)]
    if len(v) == 0:
        return {s: math.nan for s in STATS}
    return {"mean": float(v.mean()), "p50": float(np.percentile(v, 50)), "p90": float(np.percentile(v, 90)),
            "p99": float(np.percentile(v, 99))}  # fmt: skip


def _completed(t: pa.Table) -> dict[str, np.ndarray]:
    mask = np.asarray(t.column("status").to_pylist()) == "completed"
    cols = ("arrival_s", "finish_s", "output_tokens", "input_tokens", "hit_tokens", *LATENCIES)
    return {c: t.column(c).to_numpy(zero_copy_only=False).astype(np.float64)[mask] for c in cols}


def _throughput(c: dict[str, np.ndarray]) -> float:
    span = c["finish_s"].max() - c["arrival_s"].min() if len(c["finish_s"]) else 0.0
    return float(c["output_tokens"].sum() / span) if span > 0 else math.nan


def _err(sim: float, real: float) -> float | None:
    if not (math.isfinite(sim) and math.isfinite(real)) or real == 0:
        return None
    return (sim - real) / real


@dataclass
class MetricRow:
    metric: str
    stat: str
    measured: float
    simulated: float

    @property
    def error_frac(self) -> float | None:
        return _err(self.simulated, self.measured)

    def to_json(self) -> dict[str, Any]:
        return {"metric": self.metric, "stat": self.stat, "measured": self.measured, "simulated": self.simulated,
                "error_frac": self.error_frac}  # fmt: skip


def request_metrics(real: pa.Table, sim: pa.Table) -> list[MetricRow]:
    r, s = _completed(real), _completed(sim)
    rows = []
    for m in LATENCIES:
        rs, ss = _stats(r[m]), _stats(s[m])
        rows += [MetricRow(m, k, rs[k], ss[k]) for k in STATS]
    rows.append(MetricRow("output_tokens_per_s", "makespan", _throughput(r), _throughput(s)))
    rows.append(MetricRow("prefix_hit_frac", "of input tokens", float(r["hit_tokens"].sum() / max(r["input_tokens"].sum(), 1)),
                          float(s["hit_tokens"].sum() / max(s["input_tokens"].sum(), 1))))  # fmt: skip
    rows.append(MetricRow("completed", "requests", float(len(r["e2e_s"])), float(len(s["e2e_s"]))))
    return rows


def step_kinds(steps: pa.Table) -> np.ndarray:
    d = np.array([len(x) for x in steps.column("decode_context_tokens").to_pylist()])
    p = np.array([len(x) for x in steps.column("prefill_new_tokens").to_pylist()])
    return np.where(p == 0, "decode", np.where(d == 0, "prefill", "mixed"))


def predict_steps(steps: pa.Table, timing: Any) -> np.ndarray:
    """Each step's time by sim's timing model, from the step's recorded composition. A decode at engine
    context c attends c + 1 tokens (its own new one): sim's decode terms at c + 1, as a sequence joining
    sim's batch after its prefill of c tokens is charged (sim/cluster/instance.py `_join`)."""
    dec = steps.column("decode_context_tokens").to_pylist()
    pctx = steps.column("prefill_context_tokens").to_pylist()
    pnew = steps.column("prefill_new_tokens").to_pylist()
    plast = steps.column("prefill_last_chunk").to_pylist()
    terms: dict[int, DecodeTerms] = {}
    out = np.empty(len(dec))
    for i, ctxs in enumerate(dec):
        total = DecodeTerms()
        for c in ctxs:
            t = terms.get(c)
            if t is None:
                t = terms[c] = timing.decode_seq_terms(c + 1, 1)
            total.add(t)
        parts = [
            PrefillChunk(n, c, last_chunk=bool(last))
            for n, c, last in zip(pnew[i], pctx[i], plast[i], strict=True)
        ]
        # the engine's step records exclude the scheduler's time before the step (sim.timing.host)
        gap = timing.host.gap_before_s(len(ctxs), len(parts)) if hasattr(timing, "host") else 0.0
        out[i] = timing.step_s(len(ctxs), total, parts) - gap
    return out


def step_errors(
    measured: np.ndarray, predicted: np.ndarray, kinds: np.ndarray
) -> dict[str, dict[str, float]]:
    out = {}
    for kind in STEP_KINDS:
        m = np.ones(len(kinds), bool) if kind == "all" else kinds == kind
        if not m.any():
            continue
        e = (predicted[m] - measured[m]) / measured[m]
        out[kind] = {
            "steps": int(m.sum()),
            "measured_s_total": float(measured[m].sum()),
            "predicted_s_total": float(predicted[m].sum()),
            "median_error_frac": float(np.median(e)),
            "median_abs_error_frac": float(np.median(np.abs(e))),
            "p10_error_frac": float(np.percentile(e, 10)),
            "p90_error_frac": float(np.percentile(e, 90)),
            "total_error_frac": float(predicted[m].sum() / measured[m].sum() - 1.0),
        }
    return out


@dataclass
class RealReport:
    run_dir: str
    model: str
    settings: dict[str, Any]
    metrics: list[MetricRow]
    steps: dict[str, dict[str, float]]
    steps_by_term: dict[str, dict[str, dict[str, float]]]  # the step errors with other forward terms
    measured_step_s: np.ndarray
    predicted_step_s: np.ndarray
    step_kind: np.ndarray
    decode_batch: np.ndarray
    latencies: dict[str, dict[str, np.ndarray]]  # measured / simulated -> metric -> values

    def to_json(self) -> dict[str, Any]:
        return {
            "format": "sim.validate.real/v1",
            "run_dir": self.run_dir,
            "model": self.model,
            "settings": self.settings,
            "metrics": [m.to_json() for m in self.metrics],
            "steps": self.steps,
            "steps_by_term": self.steps_by_term,
        }


def validate_real(run_dir: Path, model: str | None = None) -> RealReport:
    run = load_run(run_dir)
    name = model or run.provenance.get("model")
    if not name:
        raise InputError("the run does not name its model", file=str(run_dir / PROVENANCE), where="model",
                         allowed="a model name there, or --model NAME")  # fmt: skip
    from sim.model import model_names

    if name not in model_names():
        raise InputError("unknown model", where="--model" if model else "provenance.json model", value=name,
                         allowed=sorted(model_names()))  # fmt: skip
    twin = simulate(run, name)
    measured = run.steps.column("wall_s").to_numpy().astype(np.float64)
    predicted = predict_steps(run.steps, twin.timing)
    kinds = step_kinds(run.steps)
    engine = run.engine_settings()
    settings = {**run.engine, "think_scale": run.think_scale, "hardware": f"1 GPU of {run.hardware}",
                "hbm_kv_bytes": twin.kv_bytes,
                "timing": getattr(twin.timing, "name", type(twin.timing).__name__),
                "forward_term": SERVED_FORWARD_TERM,
                "forward_term_per_layer_s": twin.timing.layer_overhead_s,
                "forward_term_per_layer_row_s": twin.timing.layer_row_overhead_s,
                "host": twin.host, "gaps_held_out": twin.gaps.to_json(),
                "gaps_of_this_run": fit_gaps([run.folder]).to_json(),
                "swa_prefix_rows": engine["swa_prefix_rows"], "prefill_attention": engine["prefill_attention"],
                "graph_row_buckets": len(engine["graph_row_buckets"])}  # fmt: skip
    r, s = _completed(run.requests), _completed(twin.requests)
    return RealReport(
        run_dir=str(run_dir),
        model=name,
        settings=settings,
        metrics=request_metrics(run.requests, twin.requests),
        steps=step_errors(measured, predicted, kinds),
        steps_by_term={
            t: step_errors(measured, predict_steps(run.steps, tm), kinds)
            for t, tm in twin.alternatives.items()
        },
        measured_step_s=measured,
        predicted_step_s=predicted,
        step_kind=kinds,
        decode_batch=np.array([len(x) for x in run.steps.column("decode_context_tokens").to_pylist()]),
        latencies={"measured": {m: r[m] for m in LATENCIES}, "simulated": {m: s[m] for m in LATENCIES}},
    )
