"""The deployment search of `sim sweep --gpus N`: every way to serve with N GPUs, aggregated or split
into prefill and decode pools, each swept for its frontier, and the best of each kind at the target.

A disaggregated deployment wins only with a prefill:decode ratio matched to the workload's demand (a
prefill GPU-second per request against a decode GPU-second per request at the TPOT target) and a decode
pool large enough to batch; published ones choose both (SGLang's 3 prefill : 9 decode nodes for
DeepSeek-V3; NVIDIA Dynamo's recipes). So the search enumerates, for N GPUs:
- aggregated: N / g colocated instances of each colocated layout (g its GPUs);
- disaggregated: P GPUs of prefill instances and N - P of decode instances, for every P that both
  layouts divide, each prefill layout with each decode layout.
A layout is an instance shape (`LAYOUTS`): `tp4` (4 GPUs, TP4 / EP4: the Dynamo recipes' workers),
`tp8` (8 GPUs, TP8 / EP8), `dp8` (8 GPUs, DP-attention 8 / EP8: SGLang's in-node DP + EP), `wide`
(all of the role's GPUs as one instance with DP attention and EP across nodes, when they are at least
two whole nodes: SGLang's large-EP serving), `cp4` / `cp8` (TP4 / TP8 with round-robin prefill context
parallelism, SGLang's DeepSeek-V4 "Context-Parallel" recipe; decode as tp4 / tp8; prefill and
colocated roles only, sim.timing.context_parallel). A deployment whose weights leave no KV room is listed as
pruned, not simulated, and so is one the template's engine refuses to start (`engine:`, sim.config.engine_rules:
e.g. SGLang before main@006cbb66 serves V4.1 with DSpark disaggregated only on DP 1 / CP 1 pools; the pruned
row carries the rule's source and version; no engine named: nothing is refused). The scheduler's limits are per instance (`max_decode_batch`,
`prefill_budget_tokens`); engines with DP attention schedule per DP group, so a `wide` instance of n
nodes gets n times the template's limits (`scheduler_overrides`: the template's per-node limits kept,
an assumption [D]). Each remaining deployment runs `run_sweep` at the given concurrencies, or
with `--auto` at concurrencies from GPUs / 2 doubling until TPOT passes the target, TTFT p90 the
scenario's SLO TTFT, a request is rejected, or the throughput stops growing (a prefill-bound deployment
never brings TPOT up to the target: its queue and TTFT grow instead), then two more inside the bracket.
A deployment's figure (`operating_point`) is the most output tokens/s per GPU with TPOT at the
target and TTFT p90 within the SLO: the interpolated crossing, else the best point run meeting both;
the best deployment per model and kind is the one with the highest figure. TPOT is the runs' p50 (the
convention of the Dynamo recipes' floor pick), or their p90 / p99 with `--at-tpot-percentile`: the
same milliseconds as a tail target, met at a lower load.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from sim.config.engine_rules import Engine, engine_refusal, pool_step_rules, speculative_method
from sim.errors import InputError
from sim.model import load_model, resolve_prefill_mode
from sim.plan.backend import SimBackend
from sim.plan.overrides import apply_overrides
from sim.sweep.points import at_tpot, floor_pick, tpot_key, unbracketed_reason
from sim.sweep.runner import SweepResult, floor_keys, model_names, run_sweep
from sim.timing.decoder_tail import TAIL_SETTINGS, pool_prefill_mode


@dataclass(frozen=True)
class Layout:
    """One instance shape: GPUs and attention TP / DP and expert EP over them (`wide`: gpus = 0,
    the role's GPUs)."""

    name: str
    gpus: int
    tp: int
    dp: int
    prefill_cp: str = "off"  # cluster.pools[].prefill_context_parallel

    def pool(
        self, name: str, role: str, role_gpus: int, gpus_per_node: int, decoder_tail: str = "auto"
    ) -> dict[str, Any] | None:
        """The pool of `role_gpus` GPUs in this shape, None where the shape does not divide them;
        `decoder_tail`: its `prefill_decoder_tail` where it prefills (sim.timing.decoder_tail)."""
        g = self.gpus or role_gpus
        if g <= 0 or role_gpus % g or (not self.gpus and (g < 2 * gpus_per_node or g % gpus_per_node)):
            return None
        tp = self.tp if self.gpus else 1
        # instances of up to a node are packed onto nodes; larger ones span whole nodes
        size = {"instances": role_gpus // g} if g <= gpus_per_node else {"nodes": role_gpus // gpus_per_node}
        pool = {"name": name, "role": role, **size, "gpus_per_instance": g, "tp": tp, "ep": g, "dp": g // tp}
        if self.prefill_cp != "off" and role != "decode":
            pool["prefill_context_parallel"] = self.prefill_cp
        if decoder_tail != "auto" and role != "decode":
            pool["prefill_decoder_tail"] = decoder_tail
        return pool


LAYOUTS = {
    "tp4": Layout("tp4", 4, 4, 1),
    "tp8": Layout("tp8", 8, 8, 1),
    "dp8": Layout("dp8", 8, 1, 8),
    "wide": Layout("wide", 0, 1, 0),
    "cp4": Layout("cp4", 4, 4, 1, "round_robin"),
    "cp8": Layout("cp8", 8, 8, 1, "round_robin"),
}
DEFAULT_LAYOUTS = {
    "prefill": ("tp4", "dp8", "cp4", "cp8"),
    "decode": ("tp4", "dp8", "wide"),
    "colocated": ("tp4", "dp8", "wide", "cp4"),
}


@dataclass(frozen=True)
class Deployment:
    """One way to serve with the GPUs: its pools (a scenario's `cluster.pools`)."""

    label: str  # e.g. "agg dp8x4", "P8 tp4x2 : D24 wide"
    kind: str  # aggregated | disaggregated
    prefill_gpus: int  # 0 when aggregated
    pools: tuple[dict[str, Any], ...]

    def scheduler_overrides(self, template: dict[str, Any], gpus_per_node: int) -> dict[str, Any]:
        """The template's scheduler limits x the nodes of the widest instance that uses each (module doc)."""
        from sim.config.scheduler import Scheduler

        sch = Scheduler.model_validate(template.get("scheduler") or {})

        def nodes(roles: tuple[str, ...]) -> int:
            return max(
                [p["gpus_per_instance"] // gpus_per_node for p in self.pools if p["role"] in roles] + [1]
            )

        out: dict[str, Any] = {}
        if (n := nodes(("decode", "colocated"))) > 1:
            out["scheduler.max_decode_batch"] = sch.max_decode_batch * n
        if (n := nodes(("prefill", "colocated"))) > 1:
            out["scheduler.prefill_budget_tokens"] = sch.prefill_budget_tokens * n
        return out


def prefill_modes(dep: Deployment, template: dict[str, Any], model: str) -> dict[str, str]:
    """The prefill mode each prefilling pool of `dep` runs `model` in (the model's, or without V4.1's
    decoder tail where the layout's engine cannot run it: sim.timing.decoder_tail)."""
    ref = next(m for m in template.get("models", []) if (m if isinstance(m, str) else m["name"]) == model)
    spec = load_model(model)
    mode = resolve_prefill_mode(spec, None if isinstance(ref, str) else ref.get("prefill_mode"))
    return {
        p["name"]: pool_prefill_mode(
            spec,
            mode,
            setting=p.get("prefill_decoder_tail", "auto"),
            dp=p["dp"],
            prefill_cp=p.get("prefill_context_parallel", "off"),
        )
        for p in dep.pools
        if p["role"] != "decode"
    }


def parse_layouts(text: str | None, role: str) -> tuple[str, ...]:
    """A comma-separated layout list for one role (None: the defaults); an InputError names a bad one."""
    if text is None:
        return DEFAULT_LAYOUTS[role]
    names = tuple(x.strip() for x in text.split(",") if x.strip())
    bad = [x for x in names if x not in LAYOUTS]
    if bad or not names:
        raise InputError("unknown layout", where=f"--{role}-layouts", value=bad[0] if bad else text,
                         allowed=", ".join(LAYOUTS))  # fmt: skip
    return names


def deployments(
    gpus: int,
    gpus_per_node: int,
    *,
    prefill: tuple[str, ...] = DEFAULT_LAYOUTS["prefill"],
    decode: tuple[str, ...] = DEFAULT_LAYOUTS["decode"],
    colocated: tuple[str, ...] = DEFAULT_LAYOUTS["colocated"],
    decoder_tail: str = "auto",
) -> list[Deployment]:
    """Every aggregated and disaggregated deployment of `gpus` GPUs over the layouts (module doc), the
    prefilling pools with `prefill_decoder_tail: decoder_tail` (auto: left to the pool's layout)."""
    if decoder_tail not in TAIL_SETTINGS:
        raise InputError("unknown decoder-tail setting", where="--decoder-tail", value=decoder_tail,
                         allowed=", ".join(TAIL_SETTINGS))  # fmt: skip
    out = []
    for name in colocated:
        pool = LAYOUTS[name].pool("worker", "colocated", gpus, gpus_per_node, decoder_tail)
        if pool is not None:
            out.append(
                Deployment(f"agg {name}x{gpus // pool['gpus_per_instance']}", "aggregated", 0, (pool,))
            )
    for pname in prefill:
        for dname in decode:
            for p_gpus in range(1, gpus):
                p = LAYOUTS[pname].pool("prefill", "prefill", p_gpus, gpus_per_node, decoder_tail)
                d = LAYOUTS[dname].pool("decode", "decode", gpus - p_gpus, gpus_per_node)
                if p is None or d is None:
                    continue
                label = (f"P{p_gpus} {pname}x{p_gpus // p['gpus_per_instance']} : "
                         f"D{gpus - p_gpus} {dname}x{(gpus - p_gpus) // d['gpus_per_instance']}")  # fmt: skip
                out.append(Deployment(label, "disaggregated", p_gpus, (p, d)))
    if not out:
        raise InputError(f"no layout divides {gpus} GPUs", where="--gpus", value=gpus,
                         allowed="a multiple of 4 (tp4) or 8 (tp8, dp8)")  # fmt: skip
    return out


@dataclass
class SpaceResult:
    """Each deployment's points per model (or why it was pruned) and the best per model and kind."""

    gpus: int
    target_tpot_s: float
    ttft_limit_s: float
    rows: list[dict[str, Any]]  # one per deployment and model
    sweeps: dict[str, SweepResult]  # deployment label -> its points (all rounds)
    step_composition: str  # how the template's engine (or scheduler) composes aggregated steps
    tpot_percentile: str = "p50"  # the runs' TPOT percentile the target is read on

    def best(self, model: str, kind: str) -> dict[str, Any] | None:
        ok = [
            r for r in self.rows if r["model"] == model and r["kind"] == kind and r["tok_s_gpu"] is not None
        ]
        return max(ok, key=lambda r: r["tok_s_gpu"]) if ok else None

    def to_json(self) -> dict[str, Any]:
        models = sorted({r["model"] for r in self.rows})
        return {
            "format": "sim.sweep.space/v1",
            "gpus": self.gpus,
            "at_tpot_ms": self.target_tpot_s * 1e3,
            "at_tpot_percentile": self.tpot_percentile,
            "ttft_p90_limit_s": self.ttft_limit_s,
            "step_composition": self.step_composition,
            "deployments": self.rows,
            "best": {m: {k: self.best(m, k) for k in ("aggregated", "disaggregated")} for m in models},
        }


def operating_point(
    points: list[dict[str, Any]], target_s: float, ttft_limit_s: float, percentile: str = "p50"
) -> dict[str, Any] | None:
    """The most output tokens/s per GPU with TPOT (`percentile`) at the target and TTFT p90 within the limit: the
    interpolated crossing of the target where both points around it keep TTFT p90 within the limit,
    else the best point run meeting both (a prefill-bound deployment never brings TPOT up to the
    target: its throughput stops growing while its queue, and TTFT, do)."""
    ok = [p for p in points if (p.get("ttft_p90_s") or 0.0) <= ttft_limit_s]
    best = floor_pick(ok, target_s, percentile)
    cross = at_tpot(points, target_s, percentile=percentile)
    if cross is not None:
        around = [p for p in points if p["concurrency"] in cross["between_concurrency"]]
        better = (
            best is None
            or (cross["output_tokens_per_s_per_gpu"] or 0.0) >= best["output_tokens_per_s_per_gpu"]
        )
        if better and all(p in ok for p in around):
            return {**cross, "how": "interpolated"}
    return None if best is None else {**best, "how": "best point run"}


def _row(dep: Deployment, model: str, points: list[dict[str, Any]] | None, pruned: str | None,
         target_s: float, ttft_limit_s: float, percentile: str) -> dict[str, Any]:  # fmt: skip
    row: dict[str, Any] = {"deployment": dep.label, "kind": dep.kind, "prefill_gpus": dep.prefill_gpus,
                           "model": model, "pools": list(dep.pools), "pruned": pruned,
                           "tok_s_gpu": None, "how": None, "concurrency": None, "ttft_p50_s": None,
                           "loads": {}, "note": None}  # fmt: skip
    if not points:
        return row
    point = operating_point(points, target_s, ttft_limit_s, percentile)
    if point is None:
        row["note"] = unbracketed_reason(points, target_s, percentile)
        return row
    row.update(tok_s_gpu=point.get("output_tokens_per_s_per_gpu"), how=point["how"],
               concurrency=point.get("concurrency"), ttft_p50_s=point.get("ttft_p50_s"))  # fmt: skip
    near = min(points, key=lambda p: abs(p["concurrency"] - (point.get("concurrency") or 0)))
    row["loads"] = {p["name"]: p.get("load") for p in near.get("pools", [])}
    return row


# --auto in the deployment search: concurrencies from GPUS / 2, doubling, AUTO_ROUND at a time, until
# TPOT passes the target, TTFT p90 the limit, a request is rejected or the throughput stops
# growing (PLATEAU: the last doubling gained less than this share); then REFINE inside the bracket
AUTO_ROUND = 3
AUTO_ROUNDS = 4
PLATEAU = 0.05
REFINE = 2


def _done(points: list[dict[str, Any]], target_s: float, ttft_limit_s: float, percentile: str) -> bool:
    pts = sorted(points, key=lambda p: p["concurrency"])
    top = pts[-1]
    if (top.get(tpot_key(percentile)) or 0.0) >= target_s or (top.get("ttft_p90_s") or 0.0) > ttft_limit_s:
        return True
    if top.get("requests_rejected"):
        return True
    if len(pts) >= 2:
        a, b = (
            pts[-2].get("output_tokens_per_s_per_gpu") or 0.0,
            top.get("output_tokens_per_s_per_gpu") or 0.0,
        )
        return b < a * (1.0 + PLATEAU)
    return False


def _sweep(scenario: dict[str, Any], models: list[str], gpus: int, concurrencies: list[int] | None,
           target_s: float, ttft_limit_s: float, percentile: str, **run: Any) -> SweepResult:  # fmt: skip
    """One deployment's points for each model: the given concurrencies, or the search above."""
    if concurrencies is not None:
        return run_sweep(scenario, concurrencies=concurrencies, target_tpot_s=target_s, models=models,
                         percentile=percentile, **run)  # fmt: skip
    points: dict[str, dict[int, dict[str, Any]]] = {m: {} for m in models}
    result = None

    def add(levels: dict[str, list[int]]) -> None:
        nonlocal result
        for model, cs in levels.items():
            if cs:
                result = run_sweep(scenario, concurrencies=cs, target_tpot_s=target_s, models=[model],
                                   percentile=percentile, **run)  # fmt: skip
                for p in result.models[model]["points"]:
                    points[model][p["concurrency"]] = p

    nxt = {m: max(1, gpus // 2) for m in models}
    active = set(models)
    for _ in range(AUTO_ROUNDS):
        if not active:
            break
        levels = {}
        for m in sorted(active):
            levels[m] = [nxt[m] * 2**i for i in range(AUTO_ROUND)]
            nxt[m] *= 2**AUTO_ROUND
        add(levels)
        active = {
            m for m in active if not _done(list(points[m].values()), target_s, ttft_limit_s, percentile)
        }
    refine = {}
    for m in models:
        cross = at_tpot(list(points[m].values()), target_s, ("concurrency",), percentile)
        if cross is not None:
            lo, hi = cross["between_concurrency"]
            inside = {lo + round((hi - lo) * k / (REFINE + 1)) for k in range(1, REFINE + 1)}
            refine[m] = sorted(c for c in inside if c not in points[m])
    add(refine)
    models_out = {}
    for m in models:
        pts = [points[m][c] for c in sorted(points[m])]
        cross, best = at_tpot(pts, target_s, percentile=percentile), floor_pick(pts, target_s, percentile)
        models_out[m] = {"points": pts, "at_tpot": cross,
                         "floor_pick": None if best is None else {k: best.get(k) for k in floor_keys(percentile)},
                         "note": None if cross is not None else unbracketed_reason(pts, target_s, percentile)}  # fmt: skip
    return SweepResult(str(scenario.get("name", "")), target_s, models_out, {}, percentile)


def run_space(
    template: dict[str, Any],
    deps: list[Deployment],
    *,
    gpus: int,
    gpus_per_node: int,
    concurrencies: list[int] | None,
    target_tpot_s: float,
    ttft_limit_s: float,
    workers: int,
    ray: str | None = None,
    seed: int | None = None,
    progress: Callable[[str], None] | None = None,
    tpot_percentile: str = "p50",
) -> SpaceResult:
    """Sweep every deployment of `deps` for every model of the template (module doc)."""
    from sim.config.scheduler import Scheduler

    backend = SimBackend()
    engine = Engine.model_validate(template["engine"]) if template.get("engine") else None
    rows, sweeps = [], {}
    for dep in deps:
        limits = dep.scheduler_overrides(template, gpus_per_node)
        scenario = apply_overrides(template, {"cluster.pools": [dict(p) for p in dep.pools], **limits})
        runnable, pruned = [], {}
        for model in model_names(template):
            doc = apply_overrides(scenario, backend.model_overrides(scenario, model))
            reason = backend.inspect(doc, model, file=f"deployment {dep.label}").prune_reason
            method = speculative_method(template.get("spec_decode") or {}, model)
            reason = reason or engine_refusal(model, dep.pools, method, engine)
            if reason:
                pruned[model] = reason
            else:
                runnable.append(model)
        if progress is not None:
            progress(dep.label)
        result = None
        if runnable:
            result = _sweep(scenario, runnable, gpus, concurrencies, target_tpot_s, ttft_limit_s,
                            tpot_percentile, workers=workers, ray=ray, seed=seed)  # fmt: skip
            sweeps[dep.label] = result
        for model in model_names(template):
            data = result.models.get(model) if result is not None else None
            row = _row(dep, model, data["points"] if data else None, pruned.get(model), target_tpot_s,
                       ttft_limit_s, tpot_percentile)  # fmt: skip
            rows.append({**row, "prefill_modes": prefill_modes(dep, template, model), "scheduler": limits})
    sch = Scheduler.model_validate(template.get("scheduler") or {}).model_dump()
    spec_on = bool((template.get("spec_decode") or {}).get("enabled"))
    composition = pool_step_rules(engine, {"role": "colocated", "dp": 1}, spec_on, sch).step_composition
    return SpaceResult(gpus, target_tpot_s, ttft_limit_s, rows, sweeps, composition, tpot_percentile)
