"""The composed step checked against a real forward pass, and the term it measures (issue 11, item 3).

`hwprofiles/<gpu>/forward_pass_results.csv` (kernels_bench.production.forward) times V4-Flash
decoder stacks built from the production kernels with random weights, as one CUDA graph on one
GPU: one full CSA layer and a reduced-depth stack of the real layer kinds (SWA, CSA-4 with its
indexer and top-512, HCA-128), each with an MoE of the real expert shape but fewer resident
experts (as one GPU of an EP group holds them), decode at several batches and contexts and
prefill chunks. For each point the calibrated timing composes the same shapes: the model spec
reduced to those layers (`reduced_spec`: the spec's own layer definitions, every layer routed
by its router as in the measured pass, the resident experts, no LM head, which the pass does not
run), one GPU, the production kernel stack, no communication.

What the sum of kernels misses (launch gaps and graph replay between kernels, norms, RoPE,
routing, sort and combine, or what back-to-back replay saves against kernels timed alone)
becomes a stated term of the model: per step, `layers x (per_layer_s + per_layer_row_s x rows)`
with rows the token rows on the busiest GPU (decode: its sequences x verified rows; prefill:
its chunk tokens), divided by the attention-TP degree: the measured breakdown (columns
`moe_us`, `attention_us`, ...) puts almost all of the per-row part in the pass's grouped expert
GEMMs (3.3 ms measured vs 1.4 ms composed for a 4K chunk, one layer) and its attention, work
that TP ranks split as they split the kernels (sim.timing.calibrated). The two constants are fitted by least squares on the relative error of all
measured points (`fit_term`); `check` reports every point predicted with the term next to the
measurement, and the leave-one-out error (each point predicted by a term fitted without it),
which is the honest out-of-sample figure. The part of the term that the pass's own glue ops take
(activation quantisation, routing, norms, RoPE, SwiGLU, as separate ops; columns `act_quant_us`,
`routing_us`, `other_us`) is fitted alike and reported beside it. The pass runs them as separate
eager ops (tens of us per layer at batch 1); serving engines fuse them into neighbouring kernels
(per-token-group quantisation in the GEMM path, fused top-k routing, norms and RoPE in the
attention prologue; Mega-mHC folds RMSNorm into the mHC boundary, kernels.md §5.1; gLLM #264
cut a V4-Flash decode step from 38.3 to 22.7 ms by fusing such chains). So `timing.forward_term`
is `fused_glue` by default (the term less the pass's glue: what our kernel tables miss of the
pass's other kernels, and what back-to-back replay costs or saves; glue cost in the serving
engine assumed within the kernels, an assumption [D]), `measured` (the whole term, glue as the
pass ran it) or `none` (the kernel sum alone). The term is carried to other GPUs point by
point: the gaps between kernels are small (the pass's kernel sum is within 8 % of its time at
every point, column `kernel_sum_us`). On GPU X each measured pass is carried part by part, each by what
bounds it (issue 28, item 2; `carried_check`, `TERM_PARTS`):
- `launch`: the pass's time beyond its ops timed alone (measured - kernel_sum: launch gaps and graph
  replay between back-to-back ops; negative where neighbouring prefill ops overlap): host- and
  launch-bound, the same on every GPU;
- `glue`: the pass's own small glue ops (activation quantisation, routing, norms / RoPE / SwiGLU): tens of
  microseconds of tiny kernels far below either peak, carried as sim.timing.carry's rule 2b carries such
  kernels (by the SMs' issue rate, SM count x clock); dropped by `fused_glue`;
- `kernels_missed`: the rest of the pass's kernel time beyond our composed kernels (kernel_sum - glue -
  our kernels at the point): kernel work our tables do not time, carried by the ratio of our composed
  kernels on X to the H200's at the point [D].
The pass on X is our kernels there plus the three parts, and the term is fitted on X as on the H200; each
part is fitted alike (the fit is linear, so the parts add up to the term) and `calibrate show` prints the
split per GPU. Without a forward-pass table the term is zero and `calibrate show` says so.

TP ranks (issue 29, sixth sitting). A GPU of an attention-TP group runs its share of each layer: the split
projections / tp, the routed experts / expert TP (GPUs / EP), the replicated projections, attention (heads
padded to 64) and mHC whole (`GpuShare`). The per-layer part was charged whole on every such GPU, although
its `kernels_missed` part is kernel work that shrinks with the kernels. It is carried to the share by the same
rule as to another GPU: each pass's missed kernel work x (our kernels on one GPU of the share / on one GPU of
the whole layer) at its shapes, then fitted (`carried_check(..., share)`); its per-layer part is the TP GPU's
(H200, attention and expert TP 4: 133 -> ~80 us a layer). `launch` stays whole. The per-row part keeps its
m / tp split (sim.timing.calibrated `_row_term_s`), and a prefill-CP GPU keeps the share's per-layer part [D].
"""

from __future__ import annotations

import functools
import statistics
from dataclasses import dataclass, replace
from pathlib import Path
from typing import NamedTuple

from kernels_bench import columns
from sim import units
from sim.config.yamlio import parse_yaml
from sim.errors import InputError
from sim.paths import hwprofiles_dir
from sim.timing.carry import REFERENCE_GPU
from sim.timing.served import served_paths
from sim.timing.tables import KernelTables, gpu_key, parse_number, read_table

FORWARD_FILE = "forward_pass_results.csv"
FIT_STACK = "production"  # the measured passes run the production kernels
# kernels_bench.production.forward's layer labels -> the spec's attention kinds
KIND_LABELS = {"SWA": "swa", "CSA4": "csa", "HCA128": "hca"}
# the writer's columns (kernels_bench.columns): those every row needs, and the glue the measured pass runs as
# separate ops (optional): activation quantisation, routing (router, top-6, sort, gather, combine), other
# (norms, RoPE, SwiGLU, KV write)
REQUIRED = columns.names(columns.FORWARD_COLUMNS, "required")
GLUE_COLUMNS = columns.names(columns.FORWARD_COLUMNS, "glue")


@dataclass(frozen=True)
class ForwardPoint:
    """One measured forward pass (times in seconds)."""

    line: int
    model: str
    mode: str  # decode | prefill
    spec: str
    layer_kinds: tuple[str, ...]  # spec attention kinds, one per layer
    routed_experts: int
    top_k: int
    batch: int
    context_tokens: int
    chunk_tokens: int
    measured_s: float
    kernel_sum_s: float
    glue_s: float  # the pass's own activation quantisation, routing and other glue ops (0: not given)

    @property
    def rows(self) -> int:
        """Token rows through each layer: the batch in decode, the chunk in prefill."""
        return self.batch if self.mode == "decode" else self.chunk_tokens

    @property
    def label(self) -> str:
        return "layer" if len(self.layer_kinds) == 1 else f"{len(self.layer_kinds)} layers"


@dataclass(frozen=True)
class Term:
    """What a step costs beyond its kernels (see the module doc)."""

    per_layer_s: float
    per_layer_row_s: float
    points: int
    source: str


NO_TERM = Term(0.0, 0.0, 0, "no forward-pass measurement: the step is the sum of its kernels")


def forward_path(key: str) -> Path:
    return hwprofiles_dir() / key / FORWARD_FILE


def load_points(path: Path) -> tuple[tuple[tuple[str, str], ...], tuple[ForwardPoint, ...], int]:
    """(provenance, measured points, rows without a measurement) of a forward-pass table."""
    prov, start, reader = read_table(path, "forward-pass table")
    missing = [c for c in REQUIRED if c not in (reader.fieldnames or [])]
    if missing:
        raise InputError(
            "forward-pass table lacks required columns", file=str(path), where=f"column {missing[0]}"
        )
    points, skipped = [], 0
    for i, raw in enumerate(reader):
        line = start + 2 + i
        if not (raw.get("measured_us_p50") or "").strip():
            skipped += 1  # a point that failed on the GPU (its note says why)
            continue
        points.append(_point(raw, path, line))
    return tuple(prov), tuple(points), skipped


def _point(raw: dict, path: Path, line: int) -> ForwardPoint:
    def number(col: str) -> float:
        value = parse_number(raw, col, path, line)
        if value is None or value < 0:
            raise InputError(
                "must be a finite number >= 0",
                file=str(path),
                where=f"line {line}, column {col}",
                value=raw.get(col),
            )
        return value

    labels = [x for x in (raw.get("layer_kinds") or "").split(";") if x]
    bad = [x for x in labels if x not in KIND_LABELS]
    if bad or not labels:
        raise InputError(
            "unknown layer kind",
            file=str(path),
            where=f"line {line}, column layer_kinds",
            value=bad[0] if bad else "",
            allowed=sorted(KIND_LABELS),
        )
    mode = (raw.get("mode") or "").strip()
    if mode not in ("decode", "prefill"):
        raise InputError(
            "unknown mode",
            file=str(path),
            where=f"line {line}, column mode",
            value=mode,
            allowed=["decode", "prefill"],
        )
    return ForwardPoint(
        line=line,
        model=raw["model"].strip(),
        mode=mode,
        spec=raw["spec"].strip(),
        layer_kinds=tuple(KIND_LABELS[x] for x in labels),
        routed_experts=int(number("n_routed_experts")),
        top_k=int(number("experts_per_token")),
        batch=int(number("batch")),
        context_tokens=int(number("context_tokens")),
        chunk_tokens=int(number("chunk_tokens")),
        measured_s=number("measured_us_p50") * units.US,
        kernel_sum_s=number("kernel_sum_us") * units.US,
        glue_s=sum((number(c) for c in GLUE_COLUMNS if (raw.get(c) or "").strip()), 0.0) * units.US,
    )


@functools.cache
def reduced_spec(spec_name: str, kinds: tuple[str, ...], routed_experts: int, top_k: int):
    """The model spec reduced to the measured stack (module doc)."""
    from sim.model import spec as model_spec

    names = model_spec.model_names()
    if spec_name not in names:
        raise InputError(
            "unknown model spec in the forward-pass table", where="spec", value=spec_name, allowed=names
        )
    path = model_spec.SPECS_DIR / f"{spec_name}.yaml"
    raw = parse_yaml(path.read_text(), file=str(path))
    groups = []
    for i, kind in enumerate(kinds):
        same = [g for g in raw["layer_groups"] if g.get("attention") == kind]
        if not same:
            raise InputError(f"{spec_name} has no {kind} layer", where="layer_kinds", value=kind)
        routed = [g for g in same if g.get("mlp") == "moe"]
        group = dict((routed or same)[0])
        group.update(layers=i, mlp="moe")  # the measured pass routes every layer with its router
        groups.append(group)
    raw["layer_groups"] = groups
    raw["moe"] = {**raw["moe"], "routed_experts": routed_experts, "top_k": top_k}
    raw["vocab"] = 1  # the pass has no LM head
    raw.pop("published", None)
    return model_spec.parse_model(raw, file=f"{path} reduced to {len(kinds)} layers")


@functools.cache
def _arith(spec_name: str, kinds: tuple[str, ...], routed_experts: int, top_k: int):
    from sim.timing.arith import arith_of

    return arith_of(reduced_spec(spec_name, kinds, routed_experts, top_k))


class GpuShare(NamedTuple):
    """The share of a layer's work one GPU of an instance runs: its attention-TP degree (split projections,
    padded heads) and its expert-TP degree (each routed expert's slice); (1, 1): the whole layer."""

    attention_tp: int = 1
    expert_tp: int = 1

    @classmethod
    def of(cls, par) -> GpuShare:
        return cls(par.tp, max(par.gpus // par.ep, 1))


WHOLE_LAYER = GpuShare()


def kernels_s(point: ForwardPoint, tables: KernelTables, profile, share: GpuShare = WHOLE_LAYER) -> float:
    """The calibrated step of `point`'s shapes on one GPU of `profile` running `share` of each layer, without
    the term and without communication (the pass has none)."""
    from sim.config.timing import Timing
    from sim.timing.batch import DecodeTerms, PrefillChunk
    from sim.timing.calibrated import CalibratedTiming
    from sim.timing.factory import efficiency, hw_rates, profile_achievable
    from sim.timing.roofline import Parallelism

    arith = _arith(point.spec, point.layer_kinds, point.routed_experts, point.top_k)
    timing = Timing()
    rates = hw_rates(profile, timing.scale_out_latency_s)
    eff = efficiency(profile_achievable(profile), timing)
    # expert TP = GPUs / EP (sim.timing.calibrated `_experts`): one EP rank whose experts split `expert_tp` ways
    par = Parallelism(gpus=share.expert_tp, tp=share.attention_tp, ep=1, dp=1)
    cal = CalibratedTiming(arith, rates, par, eff, tables)
    if point.mode == "decode":
        step = cal.step_s(
            point.batch, DecodeTerms(context_tokens=float(point.context_tokens * point.batch)), ()
        )
        return step - cal.comm_s(point.batch, False)
    step = cal.step_s(0, DecodeTerms(), [PrefillChunk(point.chunk_tokens, point.context_tokens)])
    return step - cal.comm_s(point.chunk_tokens, True)


def fit_term(points: list[ForwardPoint], kernels: list[float]) -> tuple[float, float]:
    """(per layer, per layer and row) seconds minimising the squared relative error of
    kernels + layers x (a + b x rows) against the measurements; b = 0 when the rows do not vary."""
    return fit_layers_rows([FitPoint(len(p.layer_kinds), p.rows, p.measured_s) for p in points], kernels)


@dataclass(frozen=True)
class FitPoint:
    """What the term's fit reads of one measured step: its layers, the rows the term is charged on, its time."""

    layers: int
    rows: int
    measured_s: float


def fit_layers_rows(points: list[FitPoint], kernels: list[float]) -> tuple[float, float]:
    """`fit_term` over `FitPoint`s (least squares on the relative error)."""
    x1 = [p.layers / p.measured_s for p in points]
    x2 = [p.layers * p.rows / p.measured_s for p in points]
    y = [(p.measured_s - k) / p.measured_s for p, k in zip(points, kernels, strict=True)]
    s11 = sum(a * a for a in x1)
    s12 = sum(a * b for a, b in zip(x1, x2, strict=True))
    s22 = sum(b * b for b in x2)
    t1 = sum(a * c for a, c in zip(x1, y, strict=True))
    t2 = sum(b * c for b, c in zip(x2, y, strict=True))
    det = s11 * s22 - s12 * s12
    if not points:
        return 0.0, 0.0
    if abs(det) <= 1e-12 * max(s11 * s22, 1e-300):
        return t1 / s11, 0.0
    return (t1 * s22 - t2 * s12) / det, (s11 * t2 - s12 * t1) / det


@dataclass(frozen=True)
class ForwardCheck:
    """Predicted vs measured per point, and the fitted term."""

    path: Path
    provenance: tuple[tuple[str, str], ...]
    term: Term
    glue: Term  # the part of the term the pass's own glue ops take, fitted alike
    rows: tuple[dict, ...]
    skipped: int

    def summary(self) -> dict:
        errs = [abs(r["error"]) for r in self.rows]
        loo = [abs(r["loo_error"]) for r in self.rows]
        if not errs:
            return {"points": 0}
        return {
            "points": len(errs),
            "max_abs_error": max(errs),
            "median_abs_error": statistics.median(errs),
            "within_10pct": sum(e <= 0.10 for e in errs),
            "loo_max_abs_error": max(loo),
            "loo_median_abs_error": statistics.median(loo),
            "target": "every point within 10 %, median within 5 % (issue 11)",
            "target_met": max(errs) <= 0.10 and statistics.median(errs) <= 0.05,
        }


def check(path: Path, tables: KernelTables, profile) -> ForwardCheck:
    """Every measured point of `path` predicted by the calibrated timing over `tables`."""
    prov, points, skipped = load_points(path)
    pts = list(points)
    kern = [kernels_s(p, tables, profile) for p in pts]
    a, b = fit_term(pts, kern)
    term = Term(a, b, len(pts), f"fitted to {len(pts)} forward passes in {path.name} ({FIT_STACK} kernels)")
    ga, gb = fit_term(pts, [p.measured_s - p.glue_s for p in pts])  # fits layers x (a + b rows) to the glue
    glue = Term(ga, gb, len(pts), "the pass's activation quantisation, routing, norms / RoPE / SwiGLU ops")
    rows = []
    for i, (p, k) in enumerate(zip(pts, kern, strict=True)):
        n = len(p.layer_kinds)
        pred = k + n * (a + b * p.rows)
        others = pts[:i] + pts[i + 1 :]
        la, lb = fit_term(others, kern[:i] + kern[i + 1 :]) if others else (a, b)
        loo = k + n * (la + lb * p.rows)
        rows.append(
            {
                "stack": p.label,
                "mode": p.mode,
                "batch": p.batch,
                "context_tokens": p.context_tokens,
                "chunk_tokens": p.chunk_tokens,
                "measured_us": p.measured_s * 1e6,
                "measured_kernel_sum_us": p.kernel_sum_s * 1e6,
                "measured_glue_us": p.glue_s * 1e6,
                "predicted_kernels_us": k * 1e6,
                "predicted_us": pred * 1e6,
                "error": pred / p.measured_s - 1.0,
                "loo_error": loo / p.measured_s - 1.0,
            }
        )
    return ForwardCheck(path, prov, term, glue, tuple(rows), skipped)


@functools.lru_cache(maxsize=4)
def _reference_check(path: Path, _stamp: int) -> ForwardCheck:
    from sim.hardware import load_all_hw
    from sim.timing.stacks import load_stack

    profile = next(p for p in load_all_hw() if gpu_key(p) == REFERENCE_GPU)
    return check(path, load_stack(REFERENCE_GPU, FIT_STACK), profile)


def reference_check() -> ForwardCheck | None:
    """The check on the reference GPU (None without its forward-pass table)."""
    path = forward_path(REFERENCE_GPU)
    if not path.is_file():
        return None
    return _reference_check(path, path.stat().st_mtime_ns)


FORWARD_TERMS = ("fused_glue", "measured", "served", "unfused_glue", "none")


def forward_term(profile, which: str = "fused_glue", share: GpuShare = WHOLE_LAYER) -> Term:
    """The term for `profile`'s GPU (`timing.forward_term`): measured on the reference GPU, carried
    elsewhere (module doc); `fused_glue` leaves out the pass's own glue ops. On a GPU running a TP `share`
    of each layer, the per-layer part is carried to that share's kernels (`share_term`)."""
    term = _gpu_term(profile, which)
    if share == WHOLE_LAYER or term is NO_TERM:
        return term
    return share_term(profile, which, share, term)


def share_term(profile, which: str, share: GpuShare, term: Term) -> Term:
    """`term` (the GPU's, whole layers) with its per-layer part refitted to the passes carried to one GPU of a
    TP `share` (module doc, "TP ranks"); the per-row part stays the GPU's, split by the timing (m / tp)."""
    carried = carried_check(profile, which, share)
    return Term(
        carried.term.per_layer_s,
        term.per_layer_row_s,
        term.points,
        f"{term.source}; its per-layer part at attention TP {share.attention_tp} / expert TP "
        f"{share.expert_tp}: each pass's missed kernel work x our kernels on that GPU / on one GPU "
        f"(median {carried.ratio:.2f}) [D]",
    )


def _gpu_term(profile, which: str) -> Term:
    """The term for `profile`'s GPU running whole layers."""
    if which in ("served", "unfused_glue"):  # per model and engine settings: forward_term_of(ctx)
        raise ValueError(f"the {which} term needs the timing context: forward_term_of(ctx)")
    ref = reference_check()
    if ref is None or which == "none":
        return NO_TERM
    term = ref.term
    if which == "fused_glue":
        term = Term(
            term.per_layer_s - ref.glue.per_layer_s,
            term.per_layer_row_s - ref.glue.per_layer_row_s,
            term.points,
            f"{term.source}, less its glue ops (fused in a serving engine [D])",
        )
    if gpu_key(profile) == REFERENCE_GPU:
        return term
    carried = carried_check(profile, which)
    return Term(
        carried.term.per_layer_s,
        carried.term.per_layer_row_s,
        term.points,
        f"{term.source}; carried from {REFERENCE_GPU}: each pass x the ratio of our kernels on "
        f"{gpu_key(profile)} to the {REFERENCE_GPU}'s at its point (median {carried.ratio:.2f}) [D]",
    )


TERM_PARTS = ("launch", "glue", "kernels_missed")  # what bounds each part of the term (module doc)


@dataclass(frozen=True)
class CarriedCheck:
    """The reference GPU's passes carried to another GPU, the term fitted to them, and the term's parts."""

    term: Term
    ratio: float  # median over the points of our kernels on the GPU / on the reference GPU
    parts: tuple[tuple[str, Term], ...] = ()  # TERM_PARTS, each fitted like the term


def carried_check(profile, which: str = "fused_glue", share: GpuShare = WHOLE_LAYER) -> CarriedCheck:
    """The term on `profile`'s GPU running `share` of each layer: each reference pass (less its glue ops
    for `fused_glue`) times the ratio of our composed kernels there to the reference GPU's at its shapes,
    fitted like the reference term (module doc)."""
    from sim.timing.carry import tables_for

    ref = reference_check()
    if ref is None:
        return CarriedCheck(NO_TERM, 1.0)
    # memoised by the GPU's tables (one object per GPU's peaks: the profile's other fields do not enter
    # a one-GPU pass without communication), per term, share and reference table with its fitted terms
    tables = tables_for(profile, FIT_STACK)
    key = ("carried_forward_term", which, share, ref.path, ref.term, ref.glue)
    carried: CarriedCheck = tables.derived(key, lambda: _carry(ref, which, profile, tables, share))
    return carried


def pass_parts(p: ForwardPoint, kernels_ref_s: float, kernel_ratio: float, sm_ratio: float,
               which: str) -> dict[str, float]:  # fmt: skip
    """A measured pass's time beyond our kernels, split by what bounds it and carried to a GPU whose
    composed kernels take `kernel_ratio` and whose SMs issue `sm_ratio` x the reference GPU's (module doc)."""
    glue = 0.0 if which == "fused_glue" else p.glue_s
    return {
        "launch": p.measured_s - p.kernel_sum_s,
        "glue": glue / sm_ratio,
        "kernels_missed": (p.kernel_sum_s - p.glue_s - kernels_ref_s) * kernel_ratio,
    }


def _carry(ref: ForwardCheck, which: str, profile, tables: KernelTables, share: GpuShare) -> CarriedCheck:
    from sim.timing.carry import GpuPeaks

    sm_ratio = GpuPeaks.of(profile).sm_ratio
    points, kernels, ratios, parts = [], [], [], []
    for row, p in zip(ref.rows, load_points(ref.path)[1], strict=True):
        k_ref = row["predicted_kernels_us"] * 1e-6
        k_x = kernels_s(p, tables, profile, share)
        ratio = k_x / k_ref
        split = pass_parts(p, k_ref, ratio, sm_ratio, which)
        points.append(replace(p, measured_s=k_x + sum(split.values()), glue_s=0.0))
        kernels.append(k_x)
        ratios.append(ratio)
        parts.append(split)
    a, b = fit_term(points, kernels)
    source = f"fitted to {len(points)} forward passes carried from {REFERENCE_GPU} part by part"
    fitted = []
    for name in TERM_PARTS:  # each part alone, on the same points and weights: they add up to (a, b)
        pa, pb = fit_term(points, [pt.measured_s - sp[name] for pt, sp in zip(points, parts, strict=True)])
        fitted.append((name, Term(pa, pb, len(points), f"{name} part of the term")))
    return CarriedCheck(Term(a, b, len(points), source), statistics.median(ratios), tuple(fitted))


# --- the served engine's own term (timing.forward_term: served) ----------------------------------------

# the writer's columns every step row needs (kernels_bench.columns)
SERVE_REQUIRED = columns.names(columns.SERVE_STEP_COLUMNS, "required")


@dataclass(frozen=True)
class ServePoint:
    """One measured step of the served model: `batch` decodes at `context_tokens` plus one prefill chunk of
    `chunk_tokens` after `prefill_context_tokens` cached (0: none); wall time in seconds."""

    line: int
    spec: str
    mode: str  # decode | prefill | mixed
    batch: int
    context_tokens: int
    chunk_tokens: int
    prefill_context_tokens: int
    measured_s: float

    @property
    def rows(self) -> int:
        return self.batch + self.chunk_tokens


def load_serve_points(path: Path) -> tuple[tuple[tuple[str, str], ...], tuple[ServePoint, ...]]:
    """(provenance, measured points) of a served-model step table (points without a time are skipped)."""
    prov, start, reader = read_table(path, "served step table")
    missing = [c for c in SERVE_REQUIRED if c not in (reader.fieldnames or [])]
    if missing:
        raise InputError(
            "served step table lacks required columns", file=str(path), where=f"column {missing[0]}"
        )
    points = []
    for i, raw in enumerate(reader):
        line = start + 2 + i
        if not (raw.get("wall_us_p50") or "").strip():
            continue

        def number(col: str, raw: dict = raw, line: int = line) -> float:
            value = parse_number(raw, col, path, line)
            if value is None or value < 0:
                raise InputError("must be a finite number >= 0", file=str(path), where=f"line {line}, column {col}",
                                 value=raw.get(col))  # fmt: skip
            return value

        mode = (raw.get("mode") or "").strip()
        if mode not in ("decode", "prefill", "mixed"):
            raise InputError("unknown mode", file=str(path), where=f"line {line}, column mode", value=mode,
                             allowed=["decode", "prefill", "mixed"])  # fmt: skip
        points.append(ServePoint(line, raw["spec"].strip(), mode, int(number("batch")), int(number("context_tokens")),
                                 int(number("chunk_tokens")), int(number("prefill_context_tokens")),
                                 number("wall_us_p50") * units.US))  # fmt: skip
    if not points:
        raise InputError("no measured steps", file=str(path))
    return tuple(prov), tuple(points)


def serve_step_s(timing, point: ServePoint) -> float:
    """The timing's step of `point`'s composition (as the bench ran it: decodes at the point's context), without
    the scheduler's time before it (sim.timing.host: the bench times the step function alone)."""
    from sim.timing.batch import DecodeTerms, PrefillChunk

    terms = (
        timing.decode_seq_terms(point.context_tokens, 1).scaled(point.batch) if point.batch else DecodeTerms()
    )
    chunks = (
        [PrefillChunk(point.chunk_tokens, point.prefill_context_tokens, last_chunk=True)]
        if point.chunk_tokens
        else []
    )
    gap = timing.host.gap_before_s(point.batch, len(chunks)) if hasattr(timing, "host") else 0.0
    return timing.step_s(point.batch, terms, chunks) - gap


def served_check(path: Path, ctx) -> ForwardCheck:
    """The served model's term: each measured step of `path` against the calibrated timing of `ctx` without a
    term (its engine settings: LM head, graph row padding, prefill rows through the decode kernel), then
    layers x (a + b x padded rows) fitted as `fit_term` does, with the leave-one-out error per point."""
    from dataclasses import replace as dc_replace

    from sim.timing.calibrated import build_calibrated

    prov, points = load_serve_points(path)
    other = sorted({p.spec for p in points} - {ctx.model_name})
    if other:
        raise InputError("the served step table measures another model", file=str(path), where="column spec",
                         value=other[0], allowed=ctx.model_name)  # fmt: skip
    bare = build_calibrated(dc_replace(ctx, forward_term="none"))
    layers = ctx.arith.spec.n_layers
    kern = [serve_step_s(bare, p) for p in points]
    fits = [
        FitPoint(layers, -(-bare.padded_rows(p.rows) // ctx.par.dp) // ctx.par.tp, p.measured_s)
        for p in points
    ]
    a, b = fit_layers_rows(fits, kern)
    term = Term(a, b, len(points), f"fitted to {len(points)} steps of the served model in {path.name}")
    rows = []
    for i, (p, f, k) in enumerate(zip(points, fits, kern, strict=True)):
        pred = k + layers * (a + b * f.rows)
        la, lb = (
            fit_layers_rows(fits[:i] + fits[i + 1 :], kern[:i] + kern[i + 1 :]) if len(fits) > 1 else (a, b)
        )
        rows.append({"mode": p.mode, "batch": p.batch, "context_tokens": p.context_tokens,
                     "chunk_tokens": p.chunk_tokens, "prefill_context_tokens": p.prefill_context_tokens,
                     "measured_us": p.measured_s * 1e6, "predicted_kernels_us": k * 1e6, "predicted_us": pred * 1e6,
                     "error": pred / p.measured_s - 1.0,
                     "loo_error": (k + layers * (la + lb * f.rows)) / p.measured_s - 1.0})  # fmt: skip
    return ForwardCheck(path, prov, term, NO_TERM, tuple(rows), 0)


def served_term(ctx) -> ForwardCheck:
    """`served_check` on the context's GPU, memoised by its kernel tables (one fit per model and engine
    settings); on a GPU without its own served step table (hwprofiles/<gpu>/serve/), the reference GPU's term
    carried (`carried_served_check`); an InputError where neither has one."""
    from sim.timing.aic import stack_tables
    from sim.timing.tables import gpu_key

    key = gpu_key(ctx.hw_profile)
    path = served_paths(key, ctx.model_name)[0]
    if not path.is_file() and key != REFERENCE_GPU:
        return carried_served_check(ctx)
    if not path.is_file():
        raise InputError("no served-model step table for this GPU", file=str(path), where="timing.forward_term",
                         value="served", allowed="fused_glue, measured, none (served: GPUs with a served bench table)")  # fmt: skip
    tables = stack_tables(ctx.hw_profile, ctx.kernels)
    memo = ("served_forward_term", path, path.stat().st_mtime_ns, ctx.model_name, ctx.par, ctx.row_buckets,
            ctx.prefill_through_decode, ctx.host)  # fmt: skip
    check_: ForwardCheck = tables.derived(memo, lambda: served_check(path, ctx))
    return check_


def carried_served_check(ctx) -> ForwardCheck:
    """The reference GPU's served term on the context's GPU, part by part (issue 28): the served engine's unfused
    glue (sim.timing.served: its launches x floor, launch-bound, as they are; its time per row by the SMs' issue
    rate) and the rest of the term (the served model's kernels beyond ours and the graph's gaps: its MoE runs
    torch's grouped FP8 GEMM, which on the reference GPU takes 1.2-1.5x DeepGEMM's time at the same shapes, off
    both roofs) by the SMs' issue rate too, as rule 2b carries kernels off the roofs [D]. No points: nothing was
    measured on this GPU."""
    from sim.config.timing import Timing
    from sim.timing.carry import GpuPeaks
    from sim.timing.factory import efficiency, hw_rates, profile_achievable
    from sim.timing.served import served_engine
    from sim.timing.tables import resolve_gpu

    ref_profile = resolve_gpu(REFERENCE_GPU)[1]
    # the reference GPU's peaks and achievable fractions; the scenario's fixed costs as they are
    eff = replace(efficiency(profile_achievable(ref_profile), Timing()), step_overhead_s=ctx.eff.step_overhead_s,
                  comm_overlap_frac=ctx.eff.comm_overlap_frac)  # fmt: skip
    ref_ctx = replace(
        ctx, hw_profile=ref_profile, hw=hw_rates(ref_profile, ctx.hw.scale_out_latency_s), eff=eff
    )
    ref = served_term(ref_ctx)
    eng = served_engine(REFERENCE_GPU, ctx.model_name)
    sm_ratio = GpuPeaks.of(ctx.hw_profile).sm_ratio
    launch_s = eng.launches_per_step * eng.launch_floor_s / ctx.arith.spec.n_layers
    # the per-row part is glue and the rest alike, both by the SM rate
    term = Term(
        launch_s + (ref.term.per_layer_s - launch_s) / sm_ratio,
        ref.term.per_layer_row_s / sm_ratio,
        ref.term.points,
        f"{ref.term.source}; carried from {REFERENCE_GPU}: the glue launches x floor as they are, the rest x "
        f"{1 / sm_ratio:.3f} (SM issue rate) [D]",
    )
    return ForwardCheck(ref.path, ref.provenance, term, NO_TERM, (), 0)


def unfused_glue_term(ctx) -> Term:
    """The served engine's unfused glue as a term (sim.timing.served): per layer, its glue launches per layer x
    the launch floor; per layer and row, the glue time per graph row / layers. From the GPU's own profiled bench
    points (an InputError without them, sim.timing.served)."""
    from sim.timing.served import served_engine
    from sim.timing.tables import gpu_key

    eng = served_engine(gpu_key(ctx.hw_profile), ctx.model_name)
    layers = ctx.arith.spec.n_layers
    return Term(eng.launches_per_step * eng.launch_floor_s / layers, eng.glue_per_row_s / layers,
                len(eng.glue.points), f"the served model's unfused glue: {eng.source}")  # fmt: skip


def forward_term_of(ctx) -> Term:
    """The term of a timing context (`timing.forward_term`): the served engine's own fit or glue mechanism, or
    `forward_term`."""
    if ctx.forward_term == "served":
        return served_term(ctx).term
    if ctx.forward_term == "unfused_glue":
        return unfused_glue_term(ctx)
    return forward_term(ctx.hw_profile, ctx.forward_term, GpuShare.of(ctx.par))
