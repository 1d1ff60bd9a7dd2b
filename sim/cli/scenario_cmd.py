"""`sim scenario check FILE`: validate a scenario and summarise it, or list every problem."""

from __future__ import annotations

import json
import re
import typing
from pathlib import Path
from typing import Annotated

import typer
from pydantic import BaseModel
from rich.console import Console
from rich.markup import escape
from rich.table import Table

from sim.cluster.build import (
    engine_eager_floor,
    pool_expert_format,
    pool_host_costs,
    pool_index_record,
    pool_kernel_stack,
)
from sim.config import Scenario, load_scenario
from sim.config.cluster import Pool
from sim.config.engine_rules import profile_rows, scenario_refusal
from sim.errors import InputError
from sim.extensions import load_extensions
from sim.hardware import load_hw
from sim.model import load_model
from sim.preflight import preflight

scenario_app = typer.Typer(help="Scenario files: validate and summarise.", no_args_is_help=True)


def register(app: typer.Typer) -> None:
    """Add this module's commands to the top-level app."""
    app.add_typer(scenario_app, name="scenario")


def _pool_summary(scn: Scenario, pool: Pool) -> dict:
    hw = scn.pool_profile(pool)
    cost = scn.pool_node_cost(pool)
    layout = scn.pool_layout(pool)
    return {
        "name": pool.name,
        "role": pool.role,
        "hardware": hw.id,
        "nodes": layout.nodes,
        "gpus": layout.gpus,
        "instances": layout.instances,
        "gpus_per_instance": pool.gpus_per_instance,
        "tp": pool.tp,
        "ep": pool.ep,
        "dp": pool.dp,
        "pricing_term": cost.term,
        "usd_per_node_hour": cost.total_usd_per_hour,
    }


def _eager_floors(scn: Scenario, model: str) -> list[dict]:
    """Each pool of `model` that prefills with a floor on its steps (sim.timing.host): the floor without a
    drafter's blocks, and where the engine's count sets it (`set_by`), its launches and the host time a launch."""
    one = scn.for_model(model)
    spec = load_model(model)
    out = []
    for pool in one.cluster.pools:
        if pool.role == "decode":  # a disaggregated decode pool runs no prefill step
            continue
        floor_s = pool_host_costs(one, pool, spec).eager_floor_s(len(spec.layers))
        if floor_s <= 0.0:
            continue
        host = one.timing.host
        engine = engine_eager_floor(one.pool_engine(pool), pool, spec)
        by_engine = engine is not None and host.eager_step_s is None and host.eager_per_layer_s is None
        out.append({
            "pool": pool.name,
            "floor_s": floor_s,
            "set_by": "engine" if by_engine else "timing.host",
            "launches_per_step": engine.step_launches + engine.layer_launches if by_engine else None,
            "host_s_per_launch": engine.eager_step_s / engine.step_launches if by_engine else None,
        })  # fmt: skip
    return out


def _index_paths(scn: Scenario, model: str) -> list[dict]:
    """For a model with Reindex layers (V4.1), what each of its pools' engines runs for the index layers on its
    GPU (sim.cluster.build.pool_index_record)."""
    spec = load_model(model)
    one = scn.for_model(model)
    out = []
    for pool in one.cluster.pools:
        record = pool_index_record(one, pool, load_hw(one.pool_hardware(pool)), spec)
        if record is None:
            return []
        out.append({"pool": pool.name, **record})
    return out


EXPERT_RUNS = {
    "fp8": "at the FP8 MMA rate (W4A8 on FP4 GPUs, FP8 grouped GEMMs elsewhere)",
    "fp4": "W4A4 at the FP4 rate",
    "bf16": "W4A16 (a measured module on GPUs without FP4 MMAs, the BF16 rate on others)",
}
RUNNER_MODULES = {
    "marlin": "Marlin's measured module (sim/timing/marlin.py)",
    "flashinfer_cutlass": "FlashInfer's SM90 CUTLASS module, measured on the H100, the H200 taking its rows [D] "
    "(sim/timing/engine_moe.py)",
    "flashinfer_trtllm": "FlashInfer's TRT-LLM-gen MXFP4 module as AIConfigurator measured it in SGLang "
    "(sim/timing/engine_moe.py)",
}


def _expert_formats(scn: Scenario, model: str) -> list[dict]:
    """How each of the model's pools runs and holds its routed experts on its GPU (sim.cluster.build
    pool_expert_format): the setting, or the stock deployment where it is unset."""
    spec = load_model(model)
    if spec.moe is None:
        return []
    one = scn.for_model(model)
    out = []
    for pool in one.cluster.pools:
        fmt = pool_expert_format(one, spec, load_hw(one.pool_hardware(pool)), pool)
        out.append({"pool": pool.name, "expert_activations": fmt.activations,
                    "set_by": "scenario" if fmt.set_by_scenario else "stock",
                    "held_in": "fp8" if fmt.held_in_fp8 else spec.moe.expert_dtype,
                    "moe_runner": fmt.module})  # fmt: skip
    return out


STACK_WHAT = {
    "aic": "the engine's dense GEMMs, routed experts and mHC as AIConfigurator 0.12.0 measured them on the GPU, "
    "the production stack for the rest (sim/timing/aic.py)",
    "production": "the kernels timed alone on the H200, carried to other GPUs (sim/timing/stacks.py, carry.py)",
    "kernels_bench": "the project's own kernels (sim/timing/stacks.py)",
}


def _kernel_stacks(scn: Scenario) -> list[dict]:
    """The kernel stack each pool's calibrated timing reads (sim.cluster.build.pool_kernel_stack)."""
    return [
        {
            "pool": p.name,
            "stack": pool_kernel_stack(scn, p, load_hw(scn.pool_hardware(p))),
            "setting": scn.timing.kernels,
        }
        for p in scn.cluster.pools
    ]


def _summary(scn: Scenario) -> dict:
    pools = [_pool_summary(scn, p) for p in scn.cluster.pools]
    w = scn.workload
    return {
        "name": scn.name,
        "seed": scn.seed,
        "models": [
            {
                "name": m.name,
                "family": m.family,
                "prefill_mode": m.prefill_mode,
                "kv_layout": m.kv_layout,
                "engine_refusal": scenario_refusal(scn.for_model(m.name), m.name),
                "eager_prefill": _eager_floors(scn, m.name),
                "index_paths": _index_paths(scn, m.name),
                "experts": _expert_formats(scn, m.name),
                "pools": None if m.pools is None else [_pool_summary(scn, p) for p in m.pools],
            }
            for m in scn.models
        ],
        "hardware": scn.hardware,
        "pools": pools,
        "kernels": _kernel_stacks(scn),
        "workload": {
            "source": "trace" if w.trace else "generator" if w.generator else "benchmark",
            "path": str(w.source_path) if w.source_path is not None else None,
            "replay": w.replay
            if w.benchmark is None
            else "closed_loop"
            if w.benchmark.concurrency
            else "open_loop",
            "warmup_s": w.warmup_s,
            "horizon_s": w.horizon_s,
        },
    }


@scenario_app.command("check")
def check_cmd(
    file: Annotated[Path, typer.Argument(help="Scenario YAML.")],
    as_json: Annotated[
        bool, typer.Option("--json", help="Print JSON only: {valid, errors | summary}.")
    ] = False,
) -> None:
    """Exit 0 with a short summary when FILE is valid; otherwise one line per problem and exit 2.
    Runs the same preflight as `sim run` (weights in HBM, the whole trace, the measured window)."""
    try:
        scn = load_scenario(file)
        workload = preflight(scn)
        load_extensions(scn)  # as `sim run` does before it starts
    except InputError as err:
        if as_json:
            typer.echo(json.dumps({"valid": False, "file": str(file), "errors": err.lines}, indent=2))
            raise typer.Exit(2) from None
        raise
    summary = _summary(scn)
    summary["workload"].update(
        requests=workload.requests, last_arrival_s=workload.last_arrival_s, seed_affects=workload.seed_affects
    )
    if as_json:
        typer.echo(json.dumps({"valid": True, "file": str(file), "summary": summary}, indent=2))
        return
    console = Console(highlight=False, soft_wrap=True)
    console.print(f"[green]ok[/] {file}: scenario '{scn.name}', seed {scn.seed}", markup=True)
    console.print(f"  models:   {', '.join(f'{m.name} ({m.family})' for m in scn.models)}", markup=False)
    own = [(f"{m['name']} ", m["pools"]) for m in summary["models"] if m["pools"] is not None]
    for owner, pools in [("", summary["pools"]), *own]:
        for p in pools:
            console.print(
                f"  {owner}pool {p['name']}: {p['role']}, {p['nodes']} x {p['hardware']} nodes, {p['instances']} "
                f"instances of {p['gpus_per_instance']} GPUs (tp {p['tp']}, ep {p['ep']}, dp {p['dp']}), "
                f"${p['usd_per_node_hour']:.2f}/node-h ({p['pricing_term']})",
                markup=False,
            )
    wl = summary["workload"]
    horizon = "end of input" if wl["horizon_s"] is None else f"{wl['horizon_s']:g} s"
    requests = "" if wl["requests"] is None else f"{wl['requests']:,} requests, "
    last = "" if wl["last_arrival_s"] is None else f"last arrival {wl['last_arrival_s']:,.0f} s, "
    console.print(
        f"  workload: {wl['source']} {wl['path'] or ''}, {wl['replay']}, {requests}{last}"
        f"warmup {wl['warmup_s']:g} s, horizon {horizon}",
        markup=False,
    )
    console.print(f"  seed {scn.seed} affects {wl['seed_affects']}", markup=False)
    if scn.extensions:
        uses = ", ".join(e.use for e in scn.extensions)
        console.print(f"  extensions (SimPy loop): {uses}", markup=False)
    for k in summary["kernels"]:
        console.print(
            f"  kernels: pool {k['pool']}: {k['stack']}, {STACK_WHAT[k['stack']]} (timing.kernels {k['setting']})",
            markup=False,
        )
    for m in summary["models"]:
        for f in m["eager_prefill"]:
            how = (
                f"its engine's {f['launches_per_step']:,.0f} launches x {f['host_s_per_launch'] * 1e6:.1f} us"
                if f["set_by"] == "engine"
                else "set by timing.host"
            )
            console.print(
                f"  eager prefill: {m['name']} pool {f['pool']}: a prefill step lasts at least "
                f"{f['floor_s'] * 1e3:.1f} ms, the host's time to issue it ({how}; sim.timing.host)",
                markup=False,
            )
        for e in m["experts"]:
            console.print(
                f"  experts: {m['name']} pool {e['pool']}: {e['expert_activations']}, "
                f"{EXPERT_RUNS[e['expert_activations']]}"
                + (f", on {RUNNER_MODULES[e['moe_runner']]}" if e["moe_runner"] else "")
                + f", held in {e['held_in']} in HBM "
                f"({'models[].expert_activations' if e['set_by'] == 'scenario' else 'the stock deployment'}; "
                "sim.cluster.build.expert_activations_on)",
                markup=False,
            )
        for p in m["index_paths"]:
            indexer = ""
            if p["prefill_indexer"] is not None:
                indexer = f"prefill indexer {p['prefill_indexer']}"
                if p["indexer_table"]:
                    how = "carried [D]" if p["indexer_table_derived"] else "measured"
                    indexer += f", its table {how}: {p['indexer_table']}"
                indexer += "; "
            console.print(
                f"  index layers: {m['name']} pool {p['pool']}: {indexer}Reindex scoring {p['reindex_scoring']} "
                "(sim.config.engine_rules; cluster.pools[].prefill_indexer, reindex_scoring)",
                markup=False,
            )
        if m["engine_refusal"]:
            console.print(
                f"  note: {m['name']}: {m['engine_refusal']} (sim.config.engine_rules)", markup=False
            )


def _field_rows(model: type[BaseModel], prefix: str = "", defaults: BaseModel | None = None):
    """(path, type, default, description) of every scenario field, nested models expanded;
    `defaults` is the default instance of `model` when its parent field has one."""
    for name, info in model.model_fields.items():
        path = f"{prefix}{info.alias or name}"
        if defaults is not None:
            default = getattr(defaults, name)
        elif info.is_required():
            default = None
        else:
            default = info.get_default(call_default_factory=True)
        if _is_model(info.annotation):
            yield from _field_rows(info.annotation, f"{path}.", default)
            continue
        shown = "(required)" if default is None and info.is_required() else repr(default)
        yield path, _type_name(info.annotation), shown, info.description or ""
        many = typing.get_origin(info.annotation) in (
            list,
            dict,
        )  # a list or dict of blocks, or an optional one
        for sub in typing.get_args(info.annotation):
            if _is_model(sub):
                yield from _field_rows(sub, f"{path}[]." if many else f"{path}.")


def _is_model(tp) -> bool:
    return isinstance(tp, type) and issubclass(tp, BaseModel)


def _type_name(tp) -> str:
    text = getattr(tp, "__name__", None) if not typing.get_args(tp) else None
    return text or re.sub(r"\b(?:[a-z_]\w*\.)+(\w+)", r"\1", str(tp))  # typing.X, sim.config.a.B -> X, B


@scenario_app.command("fields")
def fields_cmd(
    as_json: Annotated[bool, typer.Option("--json", help="Print JSON only.")] = False,
) -> None:
    """Every scenario field: path, type, default and meaning (units are in the names)."""
    rows = list(_field_rows(Scenario))
    if as_json:  # the engine profiles' rules follow the fields, one row each
        rows += [(f"engine rule: {r['engine']} {r['versions']}: {r['rule']}", "rule", r["value"], r["source"])
                 for r in profile_rows()]  # fmt: skip
        typer.echo(json.dumps([dict(zip(("field", "type", "default", "description"), r, strict=True)) for r in rows],
                              indent=2))  # fmt: skip
        return
    table = Table(title="Scenario fields (sim/config/*.py); units are in the names")
    for col in ("field", "type", "default", "description"):
        table.add_column(col, overflow="fold")
    for row in rows:
        table.add_row(*(escape(c) for c in row))
    profiles = Table(title="Engine profiles (engine: {name, version}; sim/config/engine_rules.py)")
    for col in ("engine", "versions", "rule", "value", "source"):
        profiles.add_column(col, overflow="fold")
    for r in profile_rows():
        profiles.add_row(*(escape(r[c]) for c in ("engine", "versions", "rule", "value", "source")))
    console = Console()
    console = console if console.is_terminal else Console(width=220)
    console.print(table)
    console.print(profiles)
