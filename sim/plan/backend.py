"""The real simulator behind the plan: scenario validation, the pre-simulation look at a candidate
(GPUs, $/hour, does the model fit), and the worker function that runs `sim.api.run_scenario`.

Early stop: `run_scenario` offers no hook that sees SLO violations during a run (its progress
callback gets only the simulated time and the count of ended requests), so a candidate is never
cut short inside the simulator; the search stops early instead (`sim.plan.search`: no node count
is simulated once the answer for it is implied, nor one dearer than a feasible answer found).
"""

from __future__ import annotations

import hashlib
import json
import tempfile
import time
from pathlib import Path
from typing import Any

from sim import units
from sim.config.errors import validate_or_raise
from sim.config.scenario import Scenario
from sim.config.yamlio import read_yaml_mapping
from sim.errors import InputError
from sim.paths import hwprofiles_dir
from sim.plan.space import EvalTask, Inspection, PoolUnit
from sim.plan.steady import WorkloadRate, decode_capacity, workload_rate

_PATH_FIELDS = ("trace", "generator")  # workload paths, relative to the scenario file
_RESULT_FILES = (".py", ".yaml", ".yml", ".json", ".csv", ".parquet")  # code and data a result depends on
_NOT_RESULT_PACKAGES = ("plan", "cli", "report")  # parts of sim that never change a simulation
# What a worker sends back (see `evaluate`), in the fingerprint: a ledger written by workers that sent
# less is not resumed from.
RESULT_FORMAT = "summary+decode_tokens_per_s"


def code_fingerprint() -> str:
    """Hash of the simulator's code and data: the `sim` package (less plan/, cli/, report/) and the
    hardware profiles, and what a worker sends back (RESULT_FORMAT). Two runs with equal
    fingerprints, scenario and seed give equal results."""
    package, profiles = Path(__file__).resolve().parents[1], hwprofiles_dir()  # sim/plan/backend.py -> sim/
    files = [
        (path.relative_to(package.parent).as_posix(), path)
        for path in package.rglob("*")
        if path.relative_to(package).parts[0] not in _NOT_RESULT_PACKAGES
    ]
    files += [(path.relative_to(profiles.parent).as_posix(), path) for path in profiles.rglob("*")]
    digest = hashlib.blake2b(RESULT_FORMAT.encode(), digest_size=16)
    for name, path in sorted(files):
        if path.is_file() and path.suffix in _RESULT_FILES:
            digest.update(name.encode())
            digest.update(path.read_bytes())
    return digest.hexdigest()


def evaluate(task: EvalTask) -> dict[str, Any]:
    """Worker side: simulate one candidate; the model's summary travels back, with its decode pools'
    tokens per second at the SLO batch (sim.plan.steady.decode_capacity, asked of the same built
    cluster model). A worker whose simulator differs from the driver's (another version on a Ray
    node) refuses to run."""
    from sim.api import run_scenario

    started = time.perf_counter()
    here = SimBackend().fingerprint(task.scenario)
    if here != task.fingerprint:
        raise RuntimeError(
            f"candidate {task.key}: this worker's simulator or input files differ from the driver's "
            f"(fingerprint {here} != {task.fingerprint}); install the same sim and files on every node"
        )
    scenario = validate_or_raise(Scenario, task.scenario, file=f"candidate {task.key}")
    result = run_scenario(scenario, task.seed, out_dir=None, capacity=False)
    summary = result.summary["models"][task.model]
    capacity = summary.get("capacity") or {}
    context_tokens = capacity.get("context_tokens_mean") or 0.0
    decode = (
        decode_capacity(built_cluster(scenario, task.model), context_tokens, scenario.slo.tpot_s)
        if context_tokens
        else {}
    )
    return {"summary": summary, "decode_tokens_per_s": decode, "wall_s": time.perf_counter() - started}


def built_cluster(scenario: Scenario, model: str) -> Any:
    """The cluster model `run_scenario` simulated for `model`, built again (nothing runs)."""
    from sim.cluster.build import build_simulation
    from sim.timing.arith import build_arith

    ref = next(m for m in scenario.models if m.name == model)
    arith = build_arith(ref.name, prefill_mode=ref.prefill_mode, kv_layout=ref.kv_layout)
    return build_simulation(scenario, ref, arith, out_dir=None)


class SimBackend:
    """`sim.plan.runner.Backend` over the scenario schema and `sim.api.run_scenario`."""

    evaluate = staticmethod(evaluate)

    def __init__(self) -> None:
        self._hashes: dict[str, str] = {}  # per plan: code and each input file are read once
        self._rates: dict[str, WorkloadRate | None] = {}  # per workload section and seed

    def fingerprint(self, scenario: dict[str, Any]) -> str:
        """Simulator code and data, and the content of the workload file the scenario names
        (a generator spec's own referenced files are not followed)."""
        if "code" not in self._hashes:
            self._hashes["code"] = code_fingerprint()
        parts = [self._hashes["code"]]
        for name in _PATH_FIELDS:
            path = scenario.get("workload", {}).get(name)
            if path is not None:
                if path not in self._hashes:
                    self._hashes[path] = hashlib.blake2b(Path(path).read_bytes(), digest_size=16).hexdigest()
                parts.append(self._hashes[path])
        return hashlib.blake2b("|".join(parts).encode(), digest_size=16).hexdigest()

    def workload_rate(self, scenario: dict[str, Any], seed: int) -> WorkloadRate | None:
        """Tasks, requests and output tokens per hour of the workload the scenario replays
        (sim.plan.steady), from its trace, or from the trace its generator makes with `seed` (as
        `sim run` makes it); None for a benchmark client, whose sessions come as fast as the
        cluster serves them."""
        workload = scenario.get("workload", {})
        cache_key = json.dumps([workload, seed], sort_keys=True, default=str)
        if cache_key not in self._rates:
            w = validate_or_raise(Scenario, scenario, file="plan candidate").workload
            if w.trace is not None:
                self._rates[cache_key] = workload_rate(w.trace, w.warmup_s, w.horizon_s)
            elif w.generator is not None:
                from sim.workload.generator import generate_trace

                with tempfile.TemporaryDirectory(prefix="sim-plan-") as tmp:
                    trace = Path(tmp) / "generated_trace.parquet"
                    generate_trace(w.generator, trace, seed=seed, days=w.days)
                    self._rates[cache_key] = workload_rate(trace, w.warmup_s, w.horizon_s)
            else:
                self._rates[cache_key] = None
        return self._rates[cache_key]

    def load_template(self, path: Path) -> dict[str, Any]:
        """The template document with its workload paths made absolute, so that every candidate
        (and the scenario files written for reproduction) can live in any folder."""
        return self.load_template_and_scenario(path)[0]

    def load_template_and_scenario(self, path: Path) -> tuple[dict[str, Any], Scenario]:
        """`load_template` and the scenario it validated (the file is read once)."""
        document = read_yaml_mapping(path)
        scenario = validate_or_raise(
            Scenario, document, file=str(path), context={"base_dir": path.parent.resolve()}
        )
        scenario._file = str(path)
        workload = dict(document["workload"])
        for name in _PATH_FIELDS:
            if workload.get(name) is not None:
                workload[name] = getattr(scenario.workload, name)  # absolute after validation
        return {**document, "workload": workload}, scenario

    def model_overrides(self, template: dict[str, Any], model: str) -> dict[str, Any]:
        """Serve only `model`, keeping the template's engine options for it when it lists them, but not
        its own pools (`models[].pools`): a candidate's deployment is the cluster's pools, which the plan
        or the deployment search sets."""
        listed = [
            m if isinstance(m, str) else {k: v for k, v in m.items() if k != "pools"}
            for m in template.get("models", [])
            if (m if isinstance(m, str) else m.get("name")) == model
        ]
        return {"models": listed or [model]}

    def node_steps(self, scenario: dict[str, Any]) -> dict[str, int]:
        """Nodes one instance spans, per pool, read from the raw document (it cannot be validated
        before its node counts are legal); a pool it cannot read gets 1 and validation reports it."""
        from sim.hardware import load_hw

        steps: dict[str, int] = {}
        for pool in scenario.get("cluster", {}).get("pools", []):
            try:
                hw = load_hw(pool.get("hardware") or scenario["hardware"])
                steps[pool["name"]] = max(1, int(pool["gpus_per_instance"]) // hw.gpus_per_node)
            except (InputError, KeyError, TypeError, ValueError):
                continue
        return steps

    def inspect(self, scenario: dict[str, Any], model: str, *, file: str) -> Inspection:
        """Validate; per pool GPUs per node, $/node-hour (the simulator's `pool_node_cost`) and node
        step; prune a model whose weights leave no HBM for KV (sim.cluster.build refuses to build it)."""
        from sim.cluster.build import hbm_budget
        from sim.model import load_model

        scn = validate_or_raise(Scenario, scenario, file=file)
        spec = load_model(model)
        pools: dict[str, PoolUnit] = {}
        reasons = []
        for pool in scn.cluster.pools:
            hw = scn.pool_profile(pool)
            pools[pool.name] = PoolUnit(
                nodes=scn.pool_layout(pool).nodes,
                gpus_per_node=hw.gpus_per_node,
                usd_per_node_hour=scn.pool_node_cost(pool).total_usd_per_hour,
                nodes_per_instance=max(1, pool.gpus_per_instance // hw.gpus_per_node),
            )
            budget = hbm_budget(scn, pool, spec, engram_in_hbm=scn.cluster.engram_placement == "hbm")
            if budget.kv_bytes <= 0:
                reasons.append(
                    f"{model} weights ({budget.weights_bytes / units.GB:.0f} GB per instance) fill the "
                    f"{budget.usable_bytes / units.GB:.0f} GB of HBM of a {pool.gpus_per_instance}-GPU "
                    f"{hw.id} instance in pool {pool.name}"
                )
        return Inspection(pools, "; ".join(reasons) or None)
