"""`sim calibrate show GPU`: the measured kernel tables of one GPU, their efficiency against the
roofline, and the step times the calibrated timing composes from them next to the roofline's."""

from __future__ import annotations

import json
from typing import Annotated

import typer
from rich.console import Console
from rich.table import Table

from sim.config.families import servable_models
from sim.errors import InputError

JsonFlag = Annotated[bool, typer.Option("--json", help="Print JSON only (every usable row).")]
AllFlag = Annotated[bool, typer.Option("--all", help="List every usable row, not only the key shapes.")]

calibrate_app = typer.Typer(
    help="Measured kernel tables (hwprofiles/<gpu>/kernels_bench_results.csv) and the calibrated timing.",
    no_args_is_help=True,
)

K = 1024
# Key shapes shown per family (all rows with --all / --json): {column: allowed values}
KEY_SHAPES = {
    "ceiling": {},
    "pipeline": {"batch": (1, 64), "context_tokens": (131072, 1048576)},
    "attention": {"batch": (1, 64), "context_tokens": (0, 131072), "chunk_tokens": (0, 512, 8192)},
    "indexer": {"batch": (1, 64), "context_tokens": (0, 131072, 1048576)},
    "topk": {"batch": (1, 64), "n": (65536, 1048576)},
    "kvquant": {"rows": (64, 65536)},
    "mhc": {"rows": (1, 128, 4096)},
    "gemm_dense": {"layer_kind": ("wq_b", "wo_b", "shared_gate_up"), "rows": (1, 128, 2048)},
    "gemm_grouped": {"groups": (8, 32), "batch": (1, 32, 512)},
}
DECODE_POINTS = tuple((b, L) for b in (8, 64, 512, 2048) for L in (8 * K, 128 * K, 1024 * K))  # per instance
PREFILL_POINTS = tuple((t, L) for t in (512, 2048, 8192) for L in (0, 128 * K))
MODELS = tuple(servable_models())
STEP_COLUMNS = ("calibrated ms", "kernels_bench ms", "roofline ms", "ratio")


def register(app: typer.Typer) -> None:
    """Add the `sim calibrate` group to the top-level app."""
    from sim.cli import calibrate_tiers

    calibrate_tiers.register(calibrate_app)
    app.add_typer(calibrate_app, name="calibrate")


INDEXER_LCS = (32768, 262144, 1048576)  # the visible positions `calibrate show` reads the indexer path at


def _console() -> Console:
    console = Console()
    return console if console.is_terminal else Console(width=200)


def _carried_row_json(r, ref) -> dict:
    """A carried row: its time on this GPU next to the reference GPU's, and the rule's split."""
    from sim.timing.carry import op_class, work_of

    work = work_of(ref)
    return {
        "family": r.family,
        "kernel": r.kernel,
        "model": r.model,
        "layer_kind": r.layer_kind,
        "fmt": r.fmt,
        "shape": {c: getattr(r, c) for c in SHAPE_COLUMNS if getattr(r, c) is not None},
        "median_us": r.median_s * 1e6,
        "reference_us": ref.median_s * 1e6,
        "op_class": op_class(r),
        "bound": "compute" if work.compute_bound else "bandwidth",
        "latency_us": work.latency_s * 1e6,
        "compute_frac": work.compute_frac,
        "bandwidth_frac": work.bandwidth_frac,
        "source": r.package,
    }


def _row_json(r) -> dict:
    shape = {
        c: getattr(r, c)
        for c in ("batch", "context_tokens", "chunk_tokens", "rows", "n", "k", "groups")
        if getattr(r, c) is not None
    }
    return {
        "family": r.family,
        "kernel": r.kernel,
        "impl": r.impl,
        "model": r.model,
        "layer_kind": r.layer_kind,
        "fmt": r.fmt,
        "shape": shape,
        "median_us": r.median_s * 1e6,
        "floor_us": r.floor_s * 1e6,
        "efficiency": r.efficiency,
        "achieved_TFLOPs": r.flops / r.median_s / 1e12,
        "achieved_TBps": r.bytes / r.median_s / 1e12,
    }


def _is_key_shape(r) -> bool:
    want = KEY_SHAPES.get(r.family)
    if want is None:
        return False
    return all(getattr(r, col) is None or getattr(r, col) in values for col, values in want.items())


def _families(rows) -> list[dict]:
    out = {}
    for r in rows:
        out.setdefault(r.family, []).append(r.efficiency)
    return [
        {
            "family": fam,
            "rows": len(effs),
            "efficiency_min": min(effs),
            "efficiency_median": sorted(effs)[len(effs) // 2],
            "efficiency_max": max(effs),
        }
        for fam, effs in out.items()
    ]


def _contexts(profile, model: str, stack: str = "production"):
    """TimingContext of one 8-GPU instance (TP 1, EP = DP = GPUs per node) with one kernel stack,
    built as a run builds it."""
    from sim.config.timing import Timing
    from sim.timing.arith import build_arith
    from sim.timing.factory import TimingContext
    from sim.timing.roofline import Parallelism

    g = profile.gpus_per_node
    par = Parallelism(gpus=g, tp=1, ep=g, dp=g)
    return TimingContext.of_instance(model, build_arith(model), profile, par, Timing(), kernels=stack)


def _composed(profile, stack: str) -> dict:
    """Decode and prefill steps of one kernel stack at the fixed points, next to the roofline."""
    from sim.timing.batch import DecodeTerms, PrefillChunk
    from sim.timing.calibrated import build_calibrated
    from sim.timing.factory import make_timing

    decode, prefill = [], []
    for model in MODELS:
        ctx = _contexts(profile, model, stack)
        cal = build_calibrated(ctx)
        roof = make_timing("roofline", ctx)
        for batch, context in DECODE_POINTS:
            c, r = cal.decode_seq_terms(context, 1), roof.decode_seq_terms(context, 1)
            cal_s = cal.step_s(batch, c.scaled(batch), ())
            roof_s = roof.step_s(batch, r.scaled(batch), ())
            parts = {
                k.removesuffix("_s") + "_ms": v * 1e3 for k, v in cal.decode_breakdown(batch, context).items()
            }
            decode.append(
                {
                    "model": model,
                    "batch": batch,
                    "context_tokens": context,
                    "calibrated_ms": cal_s * 1e3,
                    "roofline_ms": roof_s * 1e3,
                    "ratio": cal_s / roof_s,
                    "calibrated_parts": parts,
                }
            )
        for chunk, context in PREFILL_POINTS:
            part = [PrefillChunk(chunk, context, last_chunk=True)]
            cal_s, roof_s = cal.step_s(0, DecodeTerms(), part), roof.step_s(0, DecodeTerms(), part)
            prefill.append(
                {
                    "model": model,
                    "chunk_tokens": chunk,
                    "context_tokens": context,
                    "calibrated_ms": cal_s * 1e3,
                    "roofline_ms": roof_s * 1e3,
                    "ratio": cal_s / roof_s,
                }
            )
    g = profile.gpus_per_node
    return {
        "instance": {"hardware": profile.id, "gpus": g, "tp": 1, "ep": g, "dp": g},
        "decode": decode,
        "prefill": prefill,
    }


SHAPE_COLUMNS = ("batch", "context_tokens", "chunk_tokens", "rows", "n", "k", "groups")


def _side_by_side(ours, prod, every_row: bool) -> list[dict]:
    """Rows of the production stack that are not ours, each next to our fastest row of the same
    operation and shape (any format or variant; None where we did not time that shape)."""
    from sim.timing.stacks import op_of

    def key(r) -> tuple:
        return (op_of(r), *(getattr(r, c) for c in SHAPE_COLUMNS if c != "batch"))

    mine: dict[tuple, float] = {}
    for r in ours.rows:
        mine[key(r)] = min(mine.get(key(r), r.median_s), r.median_s)
    own_rows = set(ours.rows)
    out = []
    for r in prod.rows:
        if r in own_rows or not (every_row or _is_key_shape(r)):
            continue
        own = mine.get(key(r))
        out.append(
            {
                "family": r.family,
                "kernel": r.kernel,
                "model": r.model,
                "layer_kind": r.layer_kind,
                "fmt": r.fmt,
                "shape": {c: getattr(r, c) for c in SHAPE_COLUMNS if getattr(r, c) is not None},
                "production_impl": r.impl,
                "production_source": r.package,
                "production_us": r.median_s * 1e6,
                "kernels_bench_us": own * 1e6 if own else None,
                "speedup": own / r.median_s if own else None,
            }
        )
    return out


def _stacks(key: str, profile, every_row: bool) -> dict:
    """Both kernel stacks: where each operation's rows come from, and their composed steps."""
    from dataclasses import asdict

    from sim.timing.carry import tables_for
    from sim.timing.stacks import STACKS, load_stack

    def tables(stack: str):
        return load_stack(key, stack) if profile is None else tables_for(profile, stack)

    out = {}
    for stack in STACKS:
        t = tables(stack)
        out[stack] = {
            "file": str(t.path),
            "provenance": dict(t.provenance),
            "sources": [asdict(s) for s in t.sources],
            "composed": _composed(profile, stack) if profile is not None else None,
        }
    out["production"]["kernels"] = _side_by_side(tables("kernels_bench"), tables("production"), every_row)
    return out


def _table(title: str, columns: tuple[str, ...], left: tuple[str, ...] | None = None) -> Table:
    """A rich table with `columns`: those in `left` (all when None) left-aligned, the rest right."""
    table = Table(title=title)
    for col in columns:
        table.add_column(col, justify="left" if left is None or col in left else "right")
    return table


def _tokens(x: float) -> str:
    x = int(x)
    if x >= K * K and x % (K * K) == 0:
        return f"{x // (K * K)}M"
    if x >= K and x % K == 0:
        return f"{x // K}K"
    return str(x)


def _shape_text(shape: dict) -> str:
    names = {
        "batch": "B",
        "context_tokens": "L",
        "chunk_tokens": "T",
        "rows": "M",
        "n": "N",
        "k": "K",
        "groups": "G",
    }
    return " ".join(f"{names[c]}={_tokens(v)}" for c, v in shape.items() if v or c == "batch")


@calibrate_app.command("show")
def show_cmd(
    gpu: Annotated[str, typer.Argument(help="GPU key (h200, b200, ...) or a hardware profile id")],
    as_json: JsonFlag = False,
    all_rows: AllFlag = False,
) -> None:
    """The kernel tables of GPU (measured on it, or the H200's carried to it by the per-op-class
    rules): times, efficiency, both kernel stacks side by side, and the composed decode and
    prefill step times, calibrated vs roofline."""
    from sim.timing.carry import REFERENCE_GPU, carried, efficiency_curves, tables_for
    from sim.timing.stacks import DEFAULT_STACK, STACKS, load_stack
    from sim.timing.tables import load_tables, resolve_gpu, table_path

    key, profile = resolve_gpu(gpu)
    every = as_json or all_rows
    stacks = _stacks(key, profile, every)
    data = {"gpu": key, "default_stack": DEFAULT_STACK, "carried_from": None}
    if profile is None or not carried(profile):
        tables = load_tables(table_path(key))
        data.update(
            file=str(tables.path),
            provenance=dict(tables.provenance),
            rows_used=len(tables.rows),
            rows_dropped=tables.dropped,
            families=_families(tables.rows),
            kernels=[_row_json(r) for r in tables.rows if every or _is_key_shape(r)],
        )
    else:
        tables, ref = tables_for(profile, DEFAULT_STACK), load_stack(REFERENCE_GPU, DEFAULT_STACK)
        data.update(
            carried_from=REFERENCE_GPU,
            rule="sim/timing/carry.py (module doc): latency floor + the H200 row's compute and bandwidth "
            "fractions of peak, at this GPU's peaks and native formats, bounded by published anchors",
            peaks=_peaks(profile),
            anchors=_anchors(profile),
            file=str(ref.path),
            provenance=dict(ref.provenance),
            rows_used=len(tables.rows),
            rows_dropped=ref.dropped,
            kernels=[
                _carried_row_json(r, h)
                for r, h in zip(tables.rows, _reference_rows(ref, tables), strict=True)
                if every or _is_key_shape(r)
            ],
        )
    data.update(
        forward_check=_forward(profile),
        stacks=stacks,
        composed=stacks[DEFAULT_STACK]["composed"],
        efficiency_curves={s: efficiency_curves(load_stack(REFERENCE_GPU, s)) for s in STACKS},
        aic=_aic_section(profile, every),
        engine_glue=_engine_glue(profile),
        experts=_experts(profile),
        power_limit=_power_limit(profile),
        prefill_indexer=_prefill_indexer(profile),
    )
    if as_json:
        typer.echo(json.dumps(data, indent=2))
        return
    _print(data)


def _aic_section(profile, every_row: bool) -> dict:
    """The `aic` stack (sim.timing.aic) beside the default one: which operations AIConfigurator's
    measurements replace, the replaced rows (carry / measured here vs AIC) and the composed decode steps
    of both; `available: False` with the reason when AIConfigurator is not installed or lacks the GPU."""
    from sim.timing.aic import COVERAGE, aic_tables
    from sim.timing.carry import tables_for
    from sim.timing.stacks import DEFAULT_STACK

    if profile is None:
        return {"available": False, "reason": "no hardware profile for this GPU"}
    try:
        aic = aic_tables(profile)
    except InputError as e:
        return {"available": False, "reason": str(e)}
    base = tables_for(profile, DEFAULT_STACK)
    rows = [
        {"family": a.family, "kernel": a.kernel, "model": a.model, "layer_kind": a.layer_kind,
         "shape": {c: getattr(a, c) for c in SHAPE_COLUMNS if getattr(a, c) is not None},
         f"{DEFAULT_STACK}_us": b.median_s * 1e6, "aic_us": a.median_s * 1e6, "ratio": a.median_s / b.median_s,
         "source": a.package}
        for a, b in zip(aic.rows, base.rows, strict=True)
        if a.impl == "aic" and (every_row or _is_key_shape(a))
    ]  # fmt: skip
    return {
        "available": True,
        "coverage": [{"operation": op, "source": src} for op, src in COVERAGE],
        "rows": rows,
        "composed": _composed(profile, "aic"),
    }


def _experts(profile) -> dict:
    """How this GPU's routed experts are timed: the MMA rate by the activations' format (sim.timing.carry rule 4),
    on NVIDIA Blackwell DeepGEMM's Mega MoE as measured for `moe_a2a: megamoe` pools (sim.timing.megamoe), on the
    H200 and the H100 Marlin's measured W4A16 module (sim.timing.marlin), and the engine MoE runners with measured
    rows on the GPU (sim.timing.engine_moe)."""
    from sim.timing.carry import GpuPeaks

    if profile is None:
        return {
            "native_fp4": False,
            "megamoe": None,
            "marlin": None,
            "engine_runners": {},
            "text": ["experts: this GPU's measured tables"],
        }
    peaks = GpuPeaks.of(profile)
    if not peaks.native_fp4:
        text = [
            "routed experts at the FP8 rate (expert_activations: fp8): FP8 weights and activations, held in FP8 (no "
            "FP4 peak in its profile); unset, each model's stock deployment (sim.cluster.build.expert_activations_on)"
        ]
        marlin = _marlin(profile, text)
        return {"native_fp4": False, "megamoe": None, "marlin": marlin, "engine_runners": _engine_runners(profile, text),
                "text": text}  # fmt: skip
    text = [
        f"routed experts: MXFP4 weights; W4A8 (the stock deployment, models[].expert_activations: fp8) at the FP8 MMA rate "
        f"({peaks.fp8_flops_per_s / 1e12:,.0f} TFLOP/s peak), W4A4 (expert_activations: fp4, an NVFP4 checkpoint) at "
        f"the FP4 rate ({peaks.fp4_flops_per_s / 1e12:,.0f}), W4A16 (expert_activations: bf16) at the BF16 rate "
        f"({peaks.bf16_flops_per_s / 1e12:,.0f}) (sim/timing/carry.py rule 4)"
    ]
    megamoe = None
    if peaks.blackwell:
        from sim.timing.megamoe import POINTS_FILE, published

        m = published()
        megamoe = {**m._asdict(), "points_file": "/".join(POINTS_FILE)}
        text.append(
            f"moe_a2a: megamoe pools: DeepGEMM's Mega MoE as measured, per MoE layer on the busiest EP rank "
            f"{m.floor_s * 1e6:.1f} us + sqrt((FLOPs / {m.flops_per_s / 1e15:.2f} PFLOP/s)^2 + (MXFP4 weight bytes / "
            f"{m.weight_bytes_per_s / 1e12:.2f} TB/s)^2), fitted to {m.points} published points ({'/'.join(POINTS_FILE)}, "
            f"rms {m.rms_error * 100:.1f} %; sim/timing/megamoe.py)"
        )
    runners = _engine_runners(profile, text)
    return {"native_fp4": True, "megamoe": megamoe, "marlin": None, "engine_runners": runners, "text": text}


def _power_limit(profile) -> dict:
    """How steps holding prefill chunks run at this GPU's power limit (sim.timing.sustained)."""
    from sim.timing.sustained import power_limit_of

    limit = None if profile is None else power_limit_of(profile)
    if limit is None:
        text = "steps holding prefill chunks: at the tables' burst times (no sustained slowdown measured for this GPU)"
        return {"sustained_compute_slowdown_x": 1.0, "text": text}
    acc = profile.accelerator
    fields = (acc.sustained_compute_slowdown_x, acc.sustained_compute_delay_s, acc.sustained_compute_onset_s,
              acc.sustained_recovery_x)  # fmt: skip
    src = dict.fromkeys(s for f in fields if f is not None for s in f.src)
    text = (
        f"steps holding prefill chunks: their GPU work {limit.slowdown_x:.3f}x the burst times once the board draws "
        f"its power limit, none of it before {limit.delay_s:.3f} s of compute, all from {limit.onset_s:.3f} s; each "
        f"second without compute sheds {limit.recovery_x:g} s of it (hardware profile, sources {', '.join(src)}; "
        "sim/timing/sustained.py)"
    )
    return {"sustained_compute_slowdown_x": limit.slowdown_x, "sustained_compute_delay_s": limit.delay_s,
            "sustained_compute_onset_s": limit.onset_s, "sustained_recovery_x": limit.recovery_x, "text": text}  # fmt: skip


def _marlin(profile, text: list[str]) -> dict | None:
    """On a GPU Marlin's module was measured on, how `expert_activations: bf16` times the experts
    (sim.timing.marlin); appends its line to `text`."""
    from sim.timing.marlin import POINTS_FILES, load_points, measured, measured_on
    from sim.timing.tables import gpu_key

    if not measured_on(profile):
        return None
    gpu = gpu_key(profile)
    m, points, points_file = measured(gpu), load_points(gpu=gpu), "/".join(POINTS_FILES[gpu])
    text.append(
        f"W4A16 (models[].expert_activations: bf16, vLLM --moe-backend marlin): vLLM's Marlin MXFP4 module as "
        f"AIConfigurator measured it here ({len(points)} rows, {points_file}), above its "
        f"{m.floor_s * 1e6:.0f} us floor, carried to the model's experts by their weights at equal rows per expert, "
        f"geometric between {min(m.per_weight.outer):g} and {m.max_experts:g} local experts"
        + (
            f"; under expert TP at SGLang's measured split, TP {', '.join(f'{t:g}' for t in m.tp_split.efficiency.outer)}"
            if m.tp_split is not None
            else ""
        )
        + " (sim/timing/marlin.py)"
    )
    return {"floor_us": m.floor_s * 1e6, "points": len(points), "points_file": points_file,
            "local_experts": list(m.per_weight.outer)}  # fmt: skip


def _engine_runners(profile, text: list[str]) -> dict:
    """For each engine MoE runner with rows on this GPU (measured there or carried), how `cluster.pools[].moe_runner`
    times the experts on it (sim.timing.engine_moe); appends a line each to `text`."""
    from sim.timing import engine_moe as em
    from sim.timing.tables import gpu_key

    out = {}
    for runner, r in em.RUNNERS.items():
        gpu = em.rows_gpu(runner, gpu_key(profile))
        if gpu is None:
            continue
        points = em.load_points(runner, gpu)
        shapes = sorted({(p.hidden, p.intermediate, p.experts, p.top_k) for p in points})
        m = em.module(runner, gpu, shapes[0])
        points_file = "/".join(em.points_file(runner, gpu))
        carried = em.is_carried(runner, profile)
        where = (
            f"the {gpu.upper()}'s rows ({points_file}) [D]" if carried else f"measured here ({points_file})"
        )
        how = f"cluster.pools[].moe_runner: {runner}" if runner in em.POOL_RUNNERS else "Mega MoE's fallback"
        text.append(
            f"{r.what} ({how}): {where}, {len(points)} EP rows at "
            + ", ".join(f"{h:,} x {i:,}, {e} experts, top-{k}" for h, i, e, k in shapes)
            + f", above the file's {m.floor_s * 1e6:.1f} us floor, one row an expert held from the next measured point"
            + (f"; under expert TP at the measured TP {', '.join(f'{t:g}' for t in m.tp_split.efficiency.outer)}"
               if m.tp_split is not None else "")
            + " (sim/timing/engine_moe.py)"
        )  # fmt: skip
        out[runner] = {"floor_us": m.floor_s * 1e6, "points": len(points), "points_file": points_file,
                       "carried": carried, "shapes": [list(s) for s in shapes]}  # fmt: skip
    return out


def _prefill_indexer(profile) -> dict | None:
    """On a GPU SGLang's V4.1 torch prefill indexer has tables for, each variant's table (measured here or carried,
    its provenance line) and one layer's time at a 4,096-row chunk (sim.timing.torch_indexer)."""
    from sim.timing import torch_indexer as ti
    from sim.timing.tables import gpu_key

    gpu = gpu_key(profile) if profile is not None else None
    if gpu not in ti.TABLE_GPUS:
        return None
    variants, text = [], []
    for variant in ti.VARIANTS:
        rel = "/".join(ti.POINTS_FILES[(variant, gpu)])
        table = ti.committed(gpu, variant)
        layer_ms = {
            f"{lc // 1024}K": {role: table.layer_s(role, 4096, lc) * 1e3 for role in ti.ROLES}
            for lc in INDEXER_LCS
        }
        derived = ti.table_is_derived(variant, gpu)
        variants.append(
            {"variant": variant, "file": rel, "derived": derived, "layer_ms_at_4096_rows": layer_ms}
        )
        at = ", ".join(f"{k} {v['plain']:.1f}" for k, v in layer_ms.items())
        text.append(
            f"V4.1 prefill indexer as SGLang runs it on Hopper (cluster.pools[].prefill_indexer: {variant}): "
            f"{'derived [D], ' if derived else 'measured, '}{rel}; one plain index layer over 4,096 rows at "
            f"{at} ms by visible positions (sim/timing/torch_indexer.py; docs/engines_and_validation.md "
            "sections 52-53)"
        )
    return {"variants": variants, "text": text}


def _engine_glue(profile) -> list[dict]:
    """Per engine, the glue its measured attention modules add to this GPU's prefill attention side
    (sim.timing.engine_glue), or why none."""
    from dataclasses import asdict, replace

    from sim.timing.factory import make_timing

    if profile is None:
        return []
    out = []
    for engine in ("sglang", "vllm"):
        ctx = replace(_contexts(profile, "deepseek-v4-flash"), engine=engine)
        glue = getattr(make_timing("calibrated", ctx), "engine_glue", None)
        if glue is None:
            out.append({"engine": engine, "glue": None, "text": f"{engine}: no measured modules on this GPU"})
        else:
            out.append({"engine": engine, "glue": asdict(glue), "text": glue.describe()})
    return out


def _forward(profile) -> dict:
    """The forward-pass check (reference GPU) and the term this GPU's steps carry."""
    from dataclasses import asdict

    from sim.config.timing import Timing
    from sim.timing.forward import forward_term, reference_check

    ref = reference_check()
    term = forward_term(profile, Timing().forward_term) if profile is not None else None
    if ref is None:
        return {"file": None, "term": asdict(term) if term else None, "summary": None, "points": []}
    return {
        "term_parts": _term_parts(profile),
        "file": str(ref.path),
        "provenance": dict(ref.provenance),
        "term": asdict(term) if term else asdict(ref.term),
        "reference_term": asdict(ref.term),
        "glue_term": asdict(ref.glue),
        "summary": ref.summary(),
        "points_without_measurement": ref.skipped,
        "points": list(ref.rows),
    }


def _term_parts(profile) -> list[dict]:
    """The forward-pass term on this GPU split by what bounds each part (sim.timing.forward TERM_PARTS), for
    the `measured` term and the default `fused_glue` one."""
    from sim.timing.forward import carried_check

    if profile is None:
        return []
    out = []
    for which in ("measured", "fused_glue"):
        for name, t in carried_check(profile, which).parts:
            out.append(
                {
                    "term": which,
                    "part": name,
                    "per_layer_s": t.per_layer_s,
                    "per_layer_row_s": t.per_layer_row_s,
                }
            )
    return out


def _reference_rows(ref, carried_tables) -> list:
    """The reference row each carried row came from (carry_tables keeps non-pipeline rows first)."""
    order = [r for r in ref.rows if r.family != "pipeline"] + [r for r in ref.rows if r.family == "pipeline"]
    if len(order) != len(carried_tables.rows):
        raise AssertionError("carried tables out of step with the reference rows")
    return order


def _peaks(profile) -> dict:
    """The datasheet peaks the rule uses, as the profile gives them (its sources: `sim hw show`)."""
    from sim.timing.carry import GpuPeaks

    acc = profile.accelerator
    return {
        "profile": profile.id,
        "hbm_bw_TBps": acc.hbm_bw_TBps.value,
        **{f"{d}_tflops": getattr(acc.dense_tflops, d).value for d in ("bf16", "fp8", "fp4")},
        # rule 3b: its large GEMMs' measured fraction of the FP8 peak over the H200's
        "gemm_frac": GpuPeaks.of(profile).gemm_frac,
        "src": f"hwprofiles/{profile.id}.yaml accelerator (sim hw show {profile.id})",
    }


def _anchors(profile) -> list[dict]:
    from dataclasses import asdict

    from sim.timing.carry import ANCHORS, GpuPeaks

    applied = GpuPeaks.of(profile).blackwell
    return [{**asdict(a), "applied": applied} for a in ANCHORS]


def _print(data: dict) -> None:
    console = _console()
    if data["carried_from"]:
        _print_carried(console, data)
    else:
        _print_measured(console, data)
    _print_forward(console, data["forward_check"])
    for g in data["engine_glue"]:
        console.print(
            f"Engine glue on prefill rows (timing.engine_glue, sim/timing/engine_glue.py): {g['text']}"
        )
    for line in data["experts"]["text"]:
        console.print(line)
    console.print(data["power_limit"]["text"])
    for line in (data["prefill_indexer"] or {}).get("text", []):
        console.print(line)
    _print_curves(console, data)
    _print_stacks(console, data)
    comp = data["composed"]
    if comp is None:
        return
    other = data["stacks"]["kernels_bench"]["composed"]
    inst = comp["instance"]
    where = f"{inst['hardware']}, {inst['gpus']} GPUs, TP {inst['tp']} / EP {inst['ep']} / DP {inst['dp']}"
    dec = _table(
        f"Decode step, calibrated ({data['default_stack']} stack, parts) vs kernels_bench vs roofline ({where})",
        ("model", "batch", "context", *STEP_COLUMNS, "attention", "dense GEMM", "MoE", "mHC", "term", "comm"),
        left=("model",),
    )
    for d, o in zip(comp["decode"], other["decode"], strict=True):
        p = d["calibrated_parts"]
        dec.add_row(
            d["model"],
            str(d["batch"]),
            _tokens(d["context_tokens"]),
            f"{d['calibrated_ms']:.2f}",
            f"{o['calibrated_ms']:.2f}",
            f"{d['roofline_ms']:.2f}",
            f"{d['ratio']:.2f}",
            *(
                f"{p[k]:.2f}"
                for k in (
                    "attention_ms",
                    "dense_gemm_ms",
                    "moe_gemm_ms",
                    "mhc_ms",
                    "forward_term_ms",
                    "comm_ms",
                )
            ),
        )
    console.print(dec)
    pre = _table(
        f"Prefill chunk (one request, last chunk), calibrated vs kernels_bench vs roofline ({where})",
        ("model", "chunk", "context before", *STEP_COLUMNS),
        left=("model",),
    )
    for d, o in zip(comp["prefill"], other["prefill"], strict=True):
        pre.add_row(
            d["model"],
            _tokens(d["chunk_tokens"]),
            _tokens(d["context_tokens"]),
            f"{d['calibrated_ms']:.2f}",
            f"{o['calibrated_ms']:.2f}",
            f"{d['roofline_ms']:.2f}",
            f"{d['ratio']:.2f}",
        )
    console.print(pre)
    _print_aic(console, data)


def _print_aic(console: Console, data: dict) -> None:
    aic = data["aic"]
    if not aic["available"]:
        console.print(f"The engines' operators (timing.kernels: aic): not available: {aic['reason']}")
        return
    cov = _table("The engines' operators (timing.kernels: aic; auto where the scenario names its engine): "
                 "where each operation comes from",
                 ("operation", "source"), left=("operation", "source"))  # fmt: skip
    for c in aic["coverage"]:
        cov.add_row(c["operation"], c["source"])
    console.print(cov)
    stack = data["default_stack"]
    side = _table(f"{stack} ({'carried' if data['carried_from'] else 'measured'}) vs AIConfigurator, replaced rows",
                  ("kernel", "model", "layer kind", "shape", f"{stack} us", "aic us", "aic / " + stack),
                  left=("kernel", "model", "layer kind", "shape"))  # fmt: skip
    for r in aic["rows"]:
        side.add_row(r["kernel"], r["model"], r["layer_kind"], _shape_text(r["shape"]), f"{r[stack + '_us']:.1f}",
                     f"{r['aic_us']:.1f}", f"{r['ratio']:.2f}")  # fmt: skip
    console.print(side)
    dec = _table(f"Decode step: {stack} vs aic stack (ms)", ("model", "batch", "context", stack, "aic", "aic / " + stack),
                 left=("model",))  # fmt: skip
    for d, a in zip(data["composed"]["decode"], aic["composed"]["decode"], strict=True):
        dec.add_row(d["model"], str(d["batch"]), _tokens(d["context_tokens"]), f"{d['calibrated_ms']:.2f}",
                    f"{a['calibrated_ms']:.2f}", f"{a['calibrated_ms'] / d['calibrated_ms']:.2f}")  # fmt: skip
    console.print(dec)


def _print_stacks(console: Console, data: dict) -> None:
    """Where the production stack's operations come from, and its kernels next to ours."""
    prod = data["stacks"]["production"]
    src = _table(
        f"Production stack: where each operation comes from ({prod['file']})",
        ("family", "kernel", "model", "kind", "origin", "impl", "note"),
        left=None,
    )
    for s in prod["sources"]:
        if s["origin"] != "kernels_bench" or s["family"] in (
            "attention",
            "mhc",
            "gemm_dense",
            "gemm_grouped",
        ):
            src.add_row(
                s["family"], s["kernel"], s["model"], s["layer_kind"], s["origin"], s["impl"], s["note"]
            )
    console.print(src)
    if not prod["kernels"]:
        return
    text = ("family", "kernel", "model", "kind", "shape", "production")
    side = _table(
        "Production kernels next to ours at key shapes (--all for every row)",
        (*text, "production µs", "ours µs", "speed-up"),
        left=text,
    )
    for r in prod["kernels"]:
        own = r["kernels_bench_us"]
        side.add_row(
            r["family"],
            r["kernel"],
            r["model"],
            r["layer_kind"],
            _shape_text(r["shape"]),
            r["production_impl"],
            f"{r['production_us']:,.1f}",
            "—" if own is None else f"{own:,.1f}",
            "—" if own is None else f"{r['speedup']:.2f}x",
        )
    console.print(side)


def _print_measured(console: Console, data: dict) -> None:
    prov = data["provenance"]
    console.print(
        f"[bold]{data['gpu']}[/] kernel tables: {data['file']}\n"
        f"measured {prov.get('date_utc', '?')} on {prov.get('gpu_name', '?')}, torch {prov.get('torch', '?')}, "
        f"triton {prov.get('triton', '?')}; {data['rows_used']} rows used, {data['rows_dropped']} without a "
        "passed check dropped. Floors: kernels.md §1 ceilings (4.2 TB/s, 790 BF16, 1440 FP8 TFLOP/s)."
    )
    fam = _table(
        "Efficiency = roofline floor / measured, per family (all rows)",
        ("family", "rows", "min", "median", "max"),
        left=("family",),
    )
    for f in data["families"]:
        fam.add_row(
            f["family"],
            str(f["rows"]),
            *(f"{f[k]:.1%}" for k in ("efficiency_min", "efficiency_median", "efficiency_max")),
        )
    console.print(fam)
    text = ("family", "kernel", "model", "kind", "fmt", "shape")
    numeric = ("measured µs", "floor µs", "eff.", "TFLOP/s", "TB/s")
    rows = _table("Kernels at key shapes (--all for every row)", (*text, *numeric), left=text)
    for r in data["kernels"]:
        rows.add_row(
            r["family"],
            r["kernel"],
            r["model"],
            r["layer_kind"],
            r["fmt"],
            _shape_text(r["shape"]),
            f"{r['median_us']:,.1f}",
            f"{r['floor_us']:,.2f}",
            f"{r['efficiency']:.1%}",
            f"{r['achieved_TFLOPs']:,.1f}",
            f"{r['achieved_TBps']:,.2f}",
        )
    console.print(rows)


def _print_carried(console: Console, data: dict) -> None:
    peaks = data["peaks"]
    console.print(
        f"[bold]{data['gpu']}[/]: no kernel tables measured on this GPU; the {data['carried_from']} tables "
        f"({data['file']}) carried to it by {data['rule']}.\n"
        f"Peaks ({peaks['src']}): HBM {peaks['hbm_bw_TBps']} TB/s, BF16 {peaks['bf16_tflops']}, "
        f"FP8 {peaks['fp8_tflops']}, FP4 {peaks['fp4_tflops']} TFLOP/s; GEMMs at {peaks['gemm_frac']:.3f}x the "
        "H200's fraction of the FP8 peak (accelerator.gemm_fp8_peak_frac, measured; rule 3b)."
    )
    anchors = _table(
        "Published anchors (bound the carried sparse MLA kernels on Blackwell)",
        ("anchor", "kernel", "value", "applied", "source"),
        left=None,
    )
    for a in data["anchors"]:
        value = f"{a['value'] / 1e12:,.0f} TFLOP/s" if a["unit"] == "FLOP/s" else f"{a['value'] * 1e6:.1f} µs"
        anchors.add_row(a["name"], a["applies_to"], value, "yes" if a["applied"] else "no", a["source"])
    console.print(anchors)
    text = ("family", "kernel", "model", "kind", "shape", "class", "bound")
    numeric = ("comp.", "bw.", "h200 µs", "here µs")
    rows = _table(
        f"Kernels at key shapes, {data['default_stack']} stack (--all for every row)",
        (*text, *numeric),
        left=text,
    )
    for r in data["kernels"]:
        rows.add_row(
            r["family"],
            r["kernel"],
            r["model"],
            r["layer_kind"],
            _shape_text(r["shape"]),
            r["op_class"] or "-",
            r["bound"],
            f"{r['compute_frac']:.1%}",
            f"{r['bandwidth_frac']:.1%}",
            f"{r['reference_us']:,.1f}",
            f"{r['median_us']:,.1f}",
        )
    console.print(rows)


def _print_curves(console: Console, data: dict) -> None:
    """Per op class: median compute / bandwidth fraction of peak over rows (H200, both stacks)."""
    curves = _table(
        "H200 efficiency per op class (fractions of datasheet peaks, latency floor removed; "
        "sim/timing/carry.py): compute-bound rows / bandwidth-bound rows",
        ("stack", "op class", "rows", "compute frac", "n", "bandwidth frac", "n"),
        left=("stack", "op class"),
    )
    for stack, points in data["efficiency_curves"].items():
        for p in points:
            if p["rows"] not in (1, 8, 64, 512, 4096):
                continue
            curves.add_row(
                stack,
                p["op_class"],
                f"{p['rows']:g}",
                "-" if p["compute_frac"] is None else f"{p['compute_frac']:.1%}",
                str(p["compute_bound_rows"]),
                "-" if p["bandwidth_frac"] is None else f"{p['bandwidth_frac']:.1%}",
                str(p["bandwidth_bound_rows"]),
            )
    console.print(curves)


def _print_forward(console: Console, fwd: dict) -> None:
    """Predicted vs measured forward passes, and the term the steps carry."""

    def us(t: dict) -> str:
        return f"{t['per_layer_s'] * 1e6:+.2f} µs per layer {t['per_layer_row_s'] * 1e9:+.3f} ns per layer and row"

    term = fwd["term"]
    if term is not None:
        console.print(
            f"Forward-pass term in this GPU's steps (timing.forward_term default): {us(term)}; {term['source']}"
        )
    parts = fwd.get("term_parts") or []
    if parts:
        bounds = {"launch": "launch / host: the same on every GPU", "glue": "small glue kernels: SM issue rate",
                  "kernels_missed": "kernel work our tables miss: our kernels' ratio"}  # fmt: skip
        split = _table("The term on this GPU by what bounds each part (sim/timing/forward.py TERM_PARTS)",
                       ("term", "part", "bound by", "µs per layer", "ns per layer and row"), left=("term", "part", "bound by"))  # fmt: skip
        for p in parts:
            split.add_row(p["term"], p["part"], bounds[p["part"]], f"{p['per_layer_s'] * 1e6:+.1f}",
                          f"{p['per_layer_row_s'] * 1e9:+.1f}")  # fmt: skip
        console.print(split)
    if not fwd["points"]:
        return
    ref, glue = fwd["reference_term"], fwd["glue_term"]
    console.print(
        f"Measured on the H200 (sim/timing/forward.py): {us(ref)}; of which the pass's glue ops "
        f"({glue['source']}): {us(glue)}. timing.forward_term: measured keeps the glue, none drops the term."
    )
    cols = (
        "stack",
        "mode",
        "batch",
        "context",
        "chunk",
        "measured µs",
        "kernel sum µs",
        "glue µs",
        "kernels µs",
    )
    table = _table(
        f"Real forward pass vs the composed step, one GPU, production kernels ({fwd['file']}): "
        "predicted = kernels + term; leave-one-out: the term fitted without that point",
        (*cols, "predicted µs", "error", "leave-one-out"),
        left=("stack", "mode"),
    )
    for r in fwd["points"]:
        table.add_row(
            r["stack"],
            r["mode"],
            str(r["batch"]),
            _tokens(r["context_tokens"]),
            _tokens(r["chunk_tokens"]),
            f"{r['measured_us']:,.1f}",
            f"{r['measured_kernel_sum_us']:,.1f}",
            f"{r['measured_glue_us']:,.1f}",
            f"{r['predicted_kernels_us']:,.1f}",
            f"{r['predicted_us']:,.1f}",
            f"{r['error']:+.1%}",
            f"{r['loo_error']:+.1%}",
        )
    console.print(table)
    s = fwd["summary"]
    console.print(
        f"{s['points']} points: max |error| {s['max_abs_error']:.1%}, median {s['median_abs_error']:.1%}, "
        f"{s['within_10pct']} within 10 %; leave-one-out max {s['loo_max_abs_error']:.1%}, median "
        f"{s['loo_median_abs_error']:.1%}. Target ({s['target']}): {'met' if s['target_met'] else 'NOT met'}."
    )
