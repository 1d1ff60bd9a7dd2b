"""Kernel stacks: which measured kernels a calibrated step is composed of (`timing.kernels`).

- `kernels_bench`: the project's own kernels (`hwprofiles/<gpu>/kernels_bench_results.csv`).
- `production` (the default): the kernels vLLM / SGLang run (FlashMLA, DeepSeek's TileLang mHC,
  DeepGEMM, cuBLAS), measured on the same GPU by kernels_bench's production stack
  (`hwprofiles/<gpu>/production_results.csv`, same columns plus `stack`, `package`,
  `package_version`), composed with ours by four rules:
  1. an operation (family, kernel, model, layer kind; for mHC the boundary, fused or not) that the
     production table times replaces ours at every shape and format;
  2. an operation it lacks keeps our rows, flagged `kernels_bench` (no production kernel);
  3. V4.1 attention-side operations that production has no Hopper kernel for (the CSA2 formats,
     FP8-528 / NVFP4-288 KV and MXFP4 index keys, are SM100-only in FlashMLA and DeepGEMM,
     kernels.md §3.1) are our kernel scaled by the measured production / ours ratio of the same
     kernel at V4's CSA shape (the nearest V4 shape: top-640 sparse decode, FP8 index keys) at the
     same batch or chunk and context, flagged `derived`; likewise V4's SWA sparse decode when
     production lacks it;
  4. the decode-layer pipelines (indexer + top-k + sparse MLA, which kernels_bench times as one
     unit) are recomposed at each of their measured (context, batch) points: our pipeline time,
     minus our sparse MLA decode and indexer times at that point, plus the production (or
     derived) ones; top-k and the glue between them stay ours (flagged in the note).
  5. speculative verify steps (B sequences of s_q = rows / batch query rows each): a
     `decode_layer_spec` pipeline per kind and s_q that the production table times verify kernels
     for (`*_spec` rows): our pipeline at B·s_q rows (top-k and glue run per row), minus our sparse
     MLA decode and indexer at B·s_q (past our pipeline's measured batches this rest is held at
     its last measured batch, as sim.timing.rows_attention holds it), plus the production verify
     kernels at B sequences of s_q rows (vLLM's calls: FlashMLA with s_q rows, `fp8_paged_mqa_logits` with next_n = s_q where
     the SM90 kernel takes it, next_n <= 2; above that the rows as sequences of one row, SGLang's
     call, the only one that runs), V4.1's derived as in rule 3 from V4 CSA's verify row over our
     row at B·s_q. The rows keep the pipeline row's FLOPs and bytes times s_q and 1 (index keys
     read once a sequence) for carrying to other GPUs [D]. Without them a verify step reads the
     plain pipeline at B·s_q sequences (sim.timing.calibrated).
Where the production table times one kernel of an operation with several libraries, the one the
engines run on SM90 is kept (`PREFERRED_IMPLS`: DeepGEMM's FP8 GEMMs and MQA logits, which SGLang and
vLLM call on Hopper, over the cuBLASLt blockwise rows measured before DeepGEMM was built; the verify
rows' native next_n / s_q calls over their `_expanded` controls, SGLang's one-row-per-sequence calls,
which stand in where no native row exists).
A GPU without a production table gets the kernels_bench rows under the production name, every
operation flagged as such (`calibrate show` says so).
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Iterable
from dataclasses import dataclass, replace
from pathlib import Path
from typing import NamedTuple

from sim.errors import InputError
from sim.paths import hwprofiles_dir
from sim.timing.interp import LINEAR, LOGLOG, Curve, Grid
from sim.timing.tables import TABLE_FILE, KernelRow, KernelTables, load_tables

STACKS = ("production", "kernels_bench")
DEFAULT_STACK = "production"
PRODUCTION_FILE = "production_results.csv"
# the operation whose measured production / ours ratio stands in where production has no kernel
REFERENCE_SHAPE = ("V4", "CSA")
# pipeline components that production may replace: (family, kernel), and the layer kind of the
# component per pipeline kind (V4.1's compressed layers all run the CSA2 sparse MLA kernel)
PIPELINE_COMPONENTS = (("attention", "sparse_mla_decode"), ("indexer", "indexer_decode"))
SPEC_SUFFIX = "_spec"  # verify-step rows of a pipeline component: kernel + SPEC_SUFFIX, rows = batch x s_q
SPEC_PIPELINE = "decode_layer_spec"


def rows_per_sequence(row: KernelRow) -> int:
    """s_q of a verify-step row (kernel `*_spec`, rows = sequences x s_q); 1 for any other row."""
    if not row.kernel.endswith(SPEC_SUFFIX):
        return 1
    return round((row.rows or row.batch or 1.0) / (row.batch or 1.0))


# libraries preferred, in order, where the production table times the same kernel with several
# (kernels_bench/production/deepgemm.py: SGLang's and vLLM's SM90 FP8 GEMM and indexer kernels;
# families.fam_attention_spec: FlashMLA's s_q rows over the expanded control)
PREFERRED_IMPLS = ("deepgemm", "flashmla", "deepgemm_expanded")


@dataclass(frozen=True)
class Source:
    """Where one operation's rows in a stack come from."""

    family: str
    kernel: str
    model: str
    layer_kind: str
    origin: str  # production | kernels_bench | derived
    impl: str
    note: str


class Op(NamedTuple):
    """One operation of a kernel stack, the key its rows are grouped and swapped by."""

    family: str
    kernel: str  # "boundary" for the mHC rows
    model: str
    layer_kind: str

    def at_reference(self) -> Op:
        """The same kernel at the reference shape (V4 CSA), whose production / ours ratio rule 3 carries."""
        return self._replace(model=REFERENCE_SHAPE[0], layer_kind=REFERENCE_SHAPE[1])

    def verify(self) -> Op:
        """The same operation in a speculative verify step (its `_spec` kernel, rule 5)."""
        return self._replace(kernel=self.kernel + SPEC_SUFFIX)


@dataclass(frozen=True)
class Part:
    """A component of our measured pipeline swapped for production's (rules 4 and 5)."""

    op: Op
    ours: OpTimes  # our rows of it
    # rule 4: production / ours at (context, size); rule 5: its seconds in a verify step at (context, sequences)
    swapped: Callable[[float, float], float]
    origin: str  # production | derived


def op_of(row: KernelRow) -> Op:
    return Op(row.family, "boundary" if row.family == "mhc" else row.kernel, row.model, row.layer_kind)


def _component(cfam: str, ckernel: str, pipeline: Op) -> Op:
    """Component (cfam, ckernel) of a decode pipeline: its sparse MLA at the model's attention kind."""
    kind = _mla_kind(pipeline.model, pipeline.layer_kind) if cfam == "attention" else pipeline.layer_kind
    return Op(cfam, ckernel, pipeline.model, kind)


def _size(row: KernelRow) -> float:
    """The size axis of an attention-side row: the chunk for prefill rows, else the batch."""
    return float(row.chunk_tokens or row.batch or 1.0)


class OpTimes:
    """Seconds of one operation at (context, size) from its rows (the fastest row per point):
    context linear, size log-log (sim.timing.tables' rules); one context = no context axis."""

    def __init__(self, rows: Iterable[KernelRow]) -> None:
        best: dict[tuple[float, float], float] = {}
        for r in rows:
            key = (float(r.context_tokens or 0.0), _size(r))
            best[key] = min(best.get(key, r.median_s), r.median_s)
        by_context: dict[float, dict[float, float]] = {}
        for (ctx, size), t in best.items():
            by_context.setdefault(ctx, {})[size] = t
        self.contexts = tuple(sorted(by_context))
        curves = tuple(
            Curve(tuple(sorted(pts)), tuple(pts[s] for s in sorted(pts)), LOGLOG)
            for pts in (by_context[c] for c in self.contexts)
        )
        self._grid = Grid(self.contexts, curves, LINEAR)

    def at(self, context: float, size: float) -> float:
        return self._grid.at(context, size)

    def nearest_context(self, context: float) -> float:
        return min(self.contexts, key=lambda c: abs(c - context))


def _by_op(rows: Iterable[KernelRow]) -> dict[Op, list[KernelRow]]:
    out: dict[Op, list[KernelRow]] = {}
    for r in rows:
        out.setdefault(op_of(r), []).append(r)
    return out


def preferred(rows: list[KernelRow]) -> list[KernelRow]:
    """Per kernel (and rows per sequence), the rows of the first `PREFERRED_IMPLS` library that has
    any, else all of them."""
    by_kernel: dict[tuple[str, int], list[KernelRow]] = {}
    for r in rows:
        by_kernel.setdefault((r.kernel, rows_per_sequence(r)), []).append(r)
    out: list[KernelRow] = []
    for krows in by_kernel.values():
        impls = {r.impl for r in krows}
        keep = next((i for i in PREFERRED_IMPLS if i in impls), None)
        out.extend(r for r in krows if keep is None or r.impl == keep)
    return out


def _describe(rows: list[KernelRow]) -> tuple[str, str]:
    impls = sorted({r.impl for r in rows})
    packages = sorted({r.package for r in rows if r.package})
    return "/".join(impls), ", ".join(packages)


def _mla_kind(model: str, pipeline_kind: str) -> str:
    return pipeline_kind if model == "V4" else "CSA2"


def compose_production(ours: KernelTables, prod: KernelTables | None) -> KernelTables:
    """The production stack from our table and the production table (rules in the module doc)."""
    if prod is None:
        sources = tuple(
            Source(*op, "kernels_bench", _describe(rows)[0], "no production table for this GPU")
            for op, rows in sorted(_by_op(ours.rows).items())
        )
        return replace(ours, stack="production", sources=sources)
    mine = _by_op(ours.rows)
    theirs = {op: preferred(rows) for op, rows in _by_op(prod.rows).items()}
    times: dict[tuple[str, Op], OpTimes] = {}

    def op_times(side: str, op: Op) -> OpTimes:
        if (side, op) not in times:
            times[side, op] = OpTimes((theirs if side == "production" else mine)[op])
        return times[side, op]

    def ratio(ref: Op) -> Callable[[float, float], float]:
        """production / ours of `ref` at the same size and the production context nearest to the
        asked one (exact where production measured that context)."""
        p, o = op_times("production", ref), op_times("ours", ref)

        def f(context: float, size: float) -> float:
            c = p.nearest_context(context)
            return p.at(c, size) / o.at(c, size)

        return f

    def swap(op: Op) -> tuple[Callable[[float, float], float], str] | None:
        """(production / ours ratio for `op`, its origin), or None when neither production nor
        the reference shape has it (rules 1 and 3)."""
        if op in theirs and op in mine:
            return ratio(op), "production"
        ref = op.at_reference()
        if op not in theirs and ref in theirs and ref in mine and op in mine:
            return ratio(ref), "derived"
        return None

    rows: list[KernelRow] = []
    sources: list[Source] = []
    derivable = {*PIPELINE_COMPONENTS, ("attention", "sparse_mla_prefill"), ("indexer", "indexer_prefill")}
    derived_note = f"derived: ours x production/ours of the same kernel at {'/'.join(REFERENCE_SHAPE)}"
    for op in sorted(set(mine) | set(theirs)):
        if op.family == "pipeline":
            continue
        if op in theirs:  # rule 1
            rows.extend(theirs[op])
            impl, package = _describe(theirs[op])
            sources.append(Source(*op, "production", impl, package))
            continue
        found = swap(op) if (op.family, op.kernel) in derivable else None
        if found is None:  # rule 2
            rows.extend(mine[op])
            sources.append(Source(*op, "kernels_bench", _describe(mine[op])[0], "no production kernel"))
            continue
        scale = found[0]  # rule 3
        for r in mine[op]:
            f = scale(float(r.context_tokens or 0.0), _size(r))
            rows.append(replace(r, median_s=r.median_s * f, impl="derived", package=derived_note))
        sources.append(Source(*op, "derived", "derived", derived_note))
    for op, prows in sorted(mine.items()):  # rule 4
        if op.family != "pipeline":
            continue
        parts = []
        for cfam, ckernel in PIPELINE_COMPONENTS:
            cop = _component(cfam, ckernel, op)
            found = swap(cop)
            if found is not None:
                parts.append(Part(cop, op_times("ours", cop), *found))
        if not parts:
            rows.extend(prows)
            sources.append(Source(*op, "kernels_bench", _describe(prows)[0], "no production component"))
            continue
        for r in prows:
            ctx, size = float(r.context_tokens or 0.0), _size(r)
            old = [part.ours.at(ctx, size) for part in parts]
            new = [t * part.swapped(ctx, size) for t, part in zip(old, parts, strict=True)]
            t = max(r.median_s - sum(old) + sum(new), sum(new))
            rows.append(replace(r, median_s=t, impl="derived", package="recomposed pipeline"))
        names = ", ".join(f"{part.op.kernel} {part.op.layer_kind} ({part.origin})" for part in parts)
        note = f"ours with {names} swapped in; top-k and glue ours"
        sources.append(Source(*op, "derived", "derived", note))
    spec_rows, spec_sources = _spec_pipelines(mine, theirs, op_times)
    rows.extend(spec_rows)
    sources.extend(spec_sources)
    return KernelTables(
        path=prod.path,
        provenance=prod.provenance,
        rows=tuple(rows),
        dropped=prod.dropped,
        stack="production",
        sources=tuple(sources),
    )


def _spec_pipelines(
    mine: dict[Op, list[KernelRow]],
    theirs: dict[Op, list[KernelRow]],
    op_times: Callable[[str, Op], OpTimes],
) -> tuple[list[KernelRow], list[Source]]:
    """Rule 5: a `decode_layer_spec` pipeline per (model, kind, rows per sequence s_q) at each of our
    pipeline's measured (context, sequences) points, where the production table has verify rows for
    its sparse MLA (directly or through V4 CSA's, rule 3)."""
    spec_times: dict[tuple[Op, int], OpTimes] = {}

    def spec_op(op: Op, s_q: int) -> OpTimes | None:
        if (op, s_q) not in spec_times:
            rows = [r for r in theirs.get(op, []) if rows_per_sequence(r) == s_q]
            if not rows:
                return None
            spec_times[op, s_q] = OpTimes(rows)
        return spec_times[op, s_q]

    def component(cop: Op, s_q: int) -> tuple[Callable[[float, float], float], str] | None:
        """Seconds of component `cop` in a verify step at (context, sequences), and its origin."""
        sop = cop.verify()
        direct = spec_op(sop, s_q)
        if direct is not None:
            return (lambda c, b: direct.at(direct.nearest_context(c), b)), "production"
        ref = cop.at_reference()
        sref = spec_op(sop.at_reference(), s_q)
        if sref is None or ref not in mine or cop not in mine:
            return None
        ours, ours_ref = op_times("ours", cop), op_times("ours", ref)

        def derived(c: float, b: float) -> float:
            cr = sref.nearest_context(c)
            return ours.at(c, b * s_q) * sref.at(cr, b) / ours_ref.at(cr, b * s_q)

        return derived, "derived"

    s_qs = sorted(
        {rows_per_sequence(r) for op, rs in theirs.items() if op.kernel.endswith(SPEC_SUFFIX) for r in rs}
    )
    rows: list[KernelRow] = []
    sources: list[Source] = []
    for op, prows in sorted(mine.items()):
        if op.family != "pipeline":
            continue
        notes = []
        for s_q in s_qs:
            parts = []
            for cfam, ckernel in PIPELINE_COMPONENTS:
                cop = _component(cfam, ckernel, op)
                if cop not in mine:
                    continue
                found = component(cop, s_q)
                if found is None:
                    parts = []
                    break
                parts.append(Part(cop, op_times("ours", cop), *found))
            if not any(part.op.family == "attention" for part in parts):
                continue  # no verify-step sparse MLA: the step keeps the plain pipeline (rule 5)
            pipe = op_times("ours", op)
            b_max: dict[float, float] = {}  # the largest measured batch per context
            for r in prows:
                ctx = float(r.context_tokens or 0.0)
                b_max[ctx] = max(b_max.get(ctx, 0.0), _size(r))
            for r in prows:
                ctx, b = float(r.context_tokens or 0.0), _size(r)
                # top-k and glue at B x s_q rows; past the measured batches held at the last one (launch-
                # bound, as sim.timing.rows_attention holds them)
                m = min(b * s_q, b_max[ctx])
                rest = max(0.0, pipe.at(ctx, m) - sum(part.ours.at(ctx, m) for part in parts))
                t = rest + sum(part.swapped(ctx, b) for part in parts)
                rows.append(
                    replace(
                        r,
                        kernel=SPEC_PIPELINE,
                        rows=b * s_q,
                        flops=r.flops * s_q,
                        median_s=t,
                        impl="derived",
                        package="recomposed verify pipeline",
                    )
                )
            names = ", ".join(
                f"{part.op.verify().kernel} {part.op.layer_kind} ({part.origin})" for part in parts
            )
            notes.append(f"s_q {s_q}: {names}")
        if notes:
            note = "; ".join(notes) + " at B sequences swapped into ours at B x s_q rows; top-k and glue ours"
            sources.append(
                Source("pipeline", SPEC_PIPELINE, op.model, op.layer_kind, "derived", "derived", note)
            )
    return rows, sources


def production_path(key: str) -> Path:
    return hwprofiles_dir() / key / PRODUCTION_FILE


def load_stack(key: str, stack: str) -> KernelTables:
    """The tables of GPU `key` for one kernel stack (`kernels_bench` or `production`)."""
    if stack not in STACKS:
        raise InputError("unknown kernel stack", where="timing.kernels", value=stack, allowed=list(STACKS))
    ours = load_tables(hwprofiles_dir() / key / TABLE_FILE)
    if stack == "kernels_bench":
        return ours
    path = production_path(key)
    prod = load_tables(path) if path.is_file() else None
    return _composed(ours, prod)


@functools.lru_cache(maxsize=8)
def _composed(ours: KernelTables, prod: KernelTables | None) -> KernelTables:
    # the loaded tables are cached per file and modification time, so this is too
    return compose_production(ours, prod)
