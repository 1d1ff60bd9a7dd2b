"""Calibrated timing: step times composed from kernel times measured on the GPU itself
(`hwprofiles/<gpu>/kernels_bench_results.csv`, see sim.timing.tables), the roofline for the rest.

A decode step of `batch` sequences on one instance (GPUs run their kernels one after another,
so a step is a sum of kernel times on the busiest GPU):
- attention side, per layer by kind (V4: SWA x 2, CSA x 21, HCA x 20; V4.1: SWA x 2, Full-enc
  x 3, Full-L20 x 1, Reindex x 4, Reuse x 30; model.md §4): the measured `decode_layer`
  pipeline (indexer scoring + top-k + sparse MLA) at (sequences per DP group, mean context). A
  speculative verify step of s_q rows per sequence reads the stack's `decode_layer_spec` pipeline
  at its s_q (sim.timing.stacks rule 5: the production verify kernels, each sequence's index keys
  read once for its rows where the kernel takes them so) at the sequences; a stack without one for
  that s_q times the rows as that many sequences (the kernels_bench stack, an upper bound).
  V4.1's two SWA-only layers use V4's SWA kernel (584- instead of
  528-B rows; kernels.md §9 says it barely matters). Attention-TP ranks split the heads but each
  still dequantises every KV entry and reads every index key of its sequences (kernels.md §3.1:
  the kernel is dequant-bound), so a rank is timed at its DP group's full-head batch;
- GEMMs: every layer's dense projections (FP8, the faster of block- and row-scaled at each M) at
  M = rows per DP group (/ TP), `wo_a` as its grouped bmm, the shared expert and router, the
  routed experts as FP8 grouped GEMMs at (the busiest EP rank's touched experts, tokens per touched
  expert) under uniform routing (kernels.md §6.2; sim/timing/experts.py), indexer query and compressor projections where the
  layer has them. GEMM work the tables lack (Engram and index-weight projections, HCA and
  layer-20 compressors) is added at the same measured seconds per FLOP, i.e. the measured time is
  scaled by (total - LM head) / covered GEMM FLOPs per token; the drafter's FLOPs (speculative
  decoding: its drafting and its pass over every row the target runs, prompt tokens included,
  docs/engines_and_validation.md section 33) likewise;
- the LM head (vocab x hidden, BF16; model.md §2, 1.06 GB for V4) on the rows that need logits
  (each decode row, the last row of each prefill chunk; SGLang's logits processor keeps the last
  token of each extend) on the roofline: its weights read once at the profile's HBM fraction,
  or its FLOPs at the decode MFU when more [C]; vocab-parallel over the attention-TP ranks as
  the dense projections;
- CUDA-graph row padding (`timing.graph_row_buckets`, an engine setting): a step replays the
  graph of the smallest captured row count >= its rows per DP rank (SGLang's cuda_graph_runner
  `replay_prepare`: `capture_bs[bisect_left(capture_bs, raw_bs)]`), so its GEMMs, experts, mHC
  and the forward-pass term run on the padded rows; attention runs on the real rows (padding
  rows have no context); rows above the last bucket run unpadded (eager). Empty: no padding;
- mHC: two sublayer boundaries per layer, the faster of the fused and unfused kernels;
- communication (EP all-to-all, TP all-reduce, Engram gathers): the roofline's terms, with no
  per-step launch overhead (the measured kernels are CUDA-graph replays, launch cost included);
- the engine's host time around the step (`timing.host`, sim.timing.host): zero where the engine
  overlaps its scheduling with the GPU (production engines), else the CPU time in the step (input
  preparation, graph launch) and the scheduler's time before it, per step, sequence, row and chunk;
  a decode step lasts at least the host's chain of the engine's speculative loop (`decode_floor_s`:
  SGLang's EAGLE on V4's MTP), and where the engine's graphed decode runs none of the glue the
  forward-pass term's per-layer part holds (`timing.decode_layer_term`: SGLang), decode steps shed
  that part (sim.config.engine_rules; docs/engines_and_validation.md section 18).

Decode terms. The engine adds per-sequence terms; this model reads only `context_tokens`, so a
batch's step reads the attention tables at its mean context. The tables are interpolated
linearly in the context (affine in L, sim.timing.tables), so this equals the mean of the
sequences' own times wherever their contexts share one segment of the grid; across segments the
error is the bend at the knots, an over-estimate: 64 sequences per GPU, half at 8K and half at
1M, attention side +1.5 % (V4) / +2.5 % (V4.1), whole step +0.6 % / +0.4 %; half at 8K and
half at 128K, +2.4 % / +2.1 % and +0.4 % / +0.2 % (tests/timing checks <= 5 %). Within a
span, the mean context grows by the accepted tokens per step, so a span is a closed-form sum
over the pieces of that piecewise-linear curve (`Curve.sum_along`), exact against summed steps.

Prefill rows through the decode kernel (`timing.prefill_attention: decode_kernel`, an engine
setting; the served reduced model of issue 14 does it, kernels_bench/serve/model.py): every
prefill row is one query of the `decode_layer` pipeline at its own position, so a step's
attention is the pipeline at (decode rows + chunk rows, their mean attended context); past the
pipeline's measured batches its two kernels grow along their own measured curves and its top-k
and glue stay at their last measured value (sim.timing.rows_attention).

Prefill (chunks of a step): GEMMs, experts and mHC as above at the step's rows, per class of
layers: those on every prompt token see the decode rows plus every chunk's tokens, V4.1's decoder
layers (CED, the model's default prefill mode) only the decode rows plus the last 128 rows of
each request finishing its prompt (model.md §6.2), on pools whose engine runs that tail; with DP
attention or prefill CP they see every prompt token (full40, sim.timing.decoder_tail). Attention + indexer: the chunk's FLOPs (model
arithmetic) at the measured seconds per FLOP of the prefill kernels at this chunk size and
context (sparse MLA prefill and indexer prefill, weighted by the layers that run them on every
prompt token), i.e. roofline FLOPs x measured efficiency at the chunk's size; attention-TP GPUs
split the sparse MLA by heads but pad their share to the kernel's 64 heads (all of it for V4 / V4.1),
and each runs the whole indexer (it is replicated in vLLM and SGLang, sim.timing.context_parallel);
the engine's glue on each prompt row (sim.timing.engine_glue); vision on the roofline. Where the engine
runs V4.1's prefill index layers in eager torch (SGLang on Hopper, `prefill_indexer: torch` or
`torch_fused_scores`), their index FLOPs leave that rate and each layer is timed as that path's table over the
request's rows and visible positions (sim.timing.torch_indexer); the sparse MLA keeps its own rate. Where the
engine pads each expert's rows for DeepGEMM's contiguous layout (SGLang's DeepEP normal mode), the
routed experts of a step holding prefill run at the padded rows (sim.timing.experts).

DP attention (dp > 1): a request lives on one DP rank (`PrefillChunk.rank`, placed by the engine,
sim.cluster.instance), so its chunk's attention, dense projections, mHC and forward-pass term run
on that rank's GPUs alone, beside the rank's share of the decode rows, while the routed experts
(EP over every rank) process every rank's rows. The ranks synchronise at each MoE layer's
dispatch and combine, so a mixed step lasts as long as its slowest rank, plus the experts and the
all-to-all (vLLM, data_parallel_deployment.md: "expert layers across all ranks are required to
synchronize during every forward pass"; TensorRT-LLM's ADP balance blog: "the iteration time is
dominated by the slowest rank"). A 2K or 4K chunk on one rank of a DP8 H200 or B200 instance beside
64-256 decoding sequences adds 5.5-6.3x (V4) and 3.2-4.5x (V4.1, whose decoder tail runs on 128 rows
only) the time an even spread over the ranks would; chunks on every rank cost what the even
spread does (tests/timing/test_dp_ranks.py). Where each rank picks its own batch (SGLang without
speculative decoding, `rank_step_s`), a rank holding chunks runs no decode rows and the decoding
sequences are spread over the other ranks.

Prefill context parallelism (`cluster.pools[].prefill_context_parallel`, an engine setting; dp = 1):
a step's rows go over the attention group's GPUs by position instead of by head, as
sim.timing.context_parallel describes (`_cp_step_s`).

Other GPUs: the same composition over the H200's tables carried to them by the per-op-class
rules of sim.timing.carry (separate compute and bandwidth fractions per kernel, native formats,
published anchors); `timing.model: auto` picks it wherever the H200 tables exist.
"""

from __future__ import annotations

import math
from bisect import bisect_left
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, replace
from typing import Any, NamedTuple

from sim.config.families import model_labels
from sim.errors import InputError
from sim.model.modes import on_every_prompt_token
from sim.model.weights import head_bytes
from sim.timing.batch import DecodeTerms, PrefillChunk
from sim.timing.carry import GpuPeaks, tables_available
from sim.timing.comm import COMBINE_BYTES_PER_ELEM, allgather_s
from sim.timing.context_parallel import (
    ContextParallel,
    cp_gather_s,
    heads_split_attention_s,
    padded_head_share,
    rank_rows,
)
from sim.timing.engine_glue import AttentionSideParts, EngineGlue
from sim.timing.experts import busiest_rank, contiguous_rows_per_expert, grouped_s
from sim.timing.host import NO_HOST, HostCosts
from sim.timing.interp import (
    LINEAR,
    LOGLOG,
    Curve,
    Grid,
    GridPair,
    chunk_attention_flops,
    chunk_parts,
    span_end,
    span_s,
)
from sim.timing.megamoe import MegaMoe, layer_s, rank_work
from sim.timing.memo import IndexMemo
from sim.timing.moe_module import MoeModule
from sim.timing.roofline import Efficiency, HwRates, Parallelism, RooflineTiming
from sim.timing.rows_attention import PipelineRows, pipeline_rows
from sim.timing.stacks import SPEC_PIPELINE, rows_per_sequence
from sim.timing.sustained import PowerLimit, power_limit_of
from sim.timing.tables import (
    KernelRow,
    KernelTables,
    best_of,
    curve_of,
    grid_of,
)
from sim.timing.torch_indexer import IndexLayer, TorchIndexer, chunk_index_flops, index_layers

# Table `model` column per model spec: its family's label (sim.config.families; kernels_bench/shapes.py MODELS).
MODEL_KEYS: dict[str, str] = model_labels()
DENSE_FORMATS = ("fp8_blockwise", "fp8_rowwise")  # kernels.md §6.2: checkpoint projections are FP8
# kernels.md §6.1: the SM90 grouped GEMMs are FP8 (DeepGEMM's 1x128 / 128x128 blockwise in the
# production stack, CUTLASS rowwise in kernels_bench's); no MXFP4 kernel on Hopper was measured, so
# experts stream FP8 weights on the H200 (about 2x the MXFP4 bytes the checkpoint stores); GPUs with
# native FP4 get these rows carried at MXFP4 bytes and FP4 rates (sim.timing.carry rule 4).
# The first format a table has is used.
EXPERT_FORMATS = ("fp8_blockwise", "fp8_rowwise")
MHC_KERNELS = ("mhc_fused", "mhc_unfused")  # the eager chain is a strawman (kernels.md §9)
MHC_BOUNDARIES_PER_LAYER = 2  # kernels.md §2: mHC pre / post around each of the two sublayers


def pipeline_kind(layer, reindex_full_range: bool = False) -> str:
    """The `decode_layer` pipeline (table `layer_kind`) that times one layer's attention side. A Reindex layer
    whose engine scores every compressed position before masking (`reindex_full_range`) runs layer 20's work:
    scoring all L positions, a top-k over them and the same sparse attention, so the Full-L20 pipeline times it
    (kernels.md §3: 'Reindex cost as much as Full')."""
    kind = layer.attention
    if kind in ("swa", "csa", "hca"):
        return kind.upper()
    if kind == "csa2":
        if layer.selection == "full" or (layer.selection == "reindex" and reindex_full_range):
            return "Full-enc" if layer.ratio == 2 else "Full-L20"
        return {"reindex": "Reindex", "reuse": "Reuse"}[layer.selection]
    raise InputError(
        "no measured attention pipeline for this layer kind", where=f"layer {layer.index}", value=kind
    )


# Dense projections every attention-TP GPU runs whole, in both engines sim models (the others are split: wq_b by
# heads, wo_a by output group, wo_b by rows with an all-reduce, the shared expert by its intermediate): the fused
# wq_a + wkv (the single KV latent cannot split, model.md "Parallelism facts"), the compressors, the whole
# indexer and the router. Read in SGLang v0.5.15 (srt/models/deepseek_v4.py MQALayer: wqkv_a replicated,
# wq_b ColumnParallel, wo_a ColumnParallel by group, wo_b RowParallel; srt/layers/attention/dsv4/compressor.py;
# indexer.py `n_local_heads = n_heads`) and vLLM 0.34.0 (vllm/models/deepseek_v4/attention.py: the fused
# wq_a + wkv `disable_tp=True`, the indexer's wq_b and weights_proj ReplicatedLinear; compressor.py
# `disable_tp=True`; the gate a ReplicatedLinear). DeepSeek's reference code shards the index heads instead.
TP_REPLICATED = frozenset({"wq_a", "wkv", "compressor_csa", "compressor_r2", "index_q", "router"})
# the dense projections of a layer's attention side (between its two mHC boundaries), wo_a apart
ATTENTION_SIDE = frozenset({"wq_a", "wq_b", "wkv", "wo_b", "index_q", "compressor_csa", "compressor_r2"})


def layer_projections(layer) -> tuple[str, ...]:
    """Dense projections (table `layer_kind`) one decode layer runs (model.md §4, kernels.md §6.2)."""
    names = ["wq_a", "wq_b", "wkv", "wo_b"]
    if layer.mlp != "dense":
        names += ["shared_gate_up", "shared_down"]
    if layer.mlp == "moe":  # hash-routed layers have no router GEMM
        names.append("router")
    if layer.has_index_query:
        names.append("index_q")
    compressor = {"csa": "compressor_csa", "pool2": "compressor_r2"}.get(layer.compressor or "")
    if compressor:  # HCA's and layer 20's compressors are not in the tables: covered by FLOPs
        names.append(compressor)
    return tuple(names)


def _shape(row: KernelRow, column: str) -> float:
    """A shape column the row's kernel must have (an InputError naming it when the table lacks it)."""
    value = getattr(row, column)
    if value is None:
        raise InputError(f"kernel row lacks {column}", where=f"{row.kernel} {row.model} {row.layer_kind}")
    return float(value)


def _gemm_flops_per_token(row: KernelRow, groups: float = 1.0) -> float:
    """FLOPs per token row of a GEMM row's shape (N x K, through `groups` blocks)."""
    return 2.0 * _shape(row, "n") * _shape(row, "k") * groups


@dataclass(frozen=True)
class LayerClass:
    """Layers that run on the same rows in prefill (all of them on every prompt token, or V4.1's
    decoder layers only on the request's tail; model.md §6.2); in decode all run on every row."""

    dense: tuple[tuple[tuple[Curve, ...], int], ...]  # (curves over M of a projection set, layers)
    names: tuple[tuple[str, ...], ...]  # each set's projection names (table `layer_kind`), as `dense`
    layers: int
    moe_layers: int


@dataclass(frozen=True)
class ModelTables:
    """The interpolated tables one model's composition reads (built once per timing)."""

    pipelines: dict[str, tuple[Grid, int]]  # layer kind -> (context x batch grid, layers of that kind)
    # verify-step pipelines: rows per sequence -> layer kind -> (context x sequences grid, layers)
    spec_pipelines: dict[int, dict[str, tuple[Grid, int]]]
    every: LayerClass  # layers on every prompt token
    tail: LayerClass  # layers on the decoder tail only (none outside V4.1's CED / engine modes)
    tail_tokens: int  # prompt rows the tail layers see in a request's last chunk (0: no tail class)
    wo_a: Curve  # over M tokens
    moe_gate_up: Grid  # groups x tokens per expert
    moe_down: Grid
    mhc: Curve  # one boundary, over tokens
    covered_flops_per_token: float  # GEMM FLOPs the tables time, all layers
    mla_prefill: Curve  # chunk -> time, and its FLOPs
    mla_prefill_flops: Curve
    index_prefill: Grid  # chunk x end position -> time, and its FLOPs
    index_prefill_flops: Grid
    prefill_attn_layers: int  # layers running sparse MLA on every prompt token
    prefill_index_layers: int  # layers scoring on every prompt token


def model_tables(tables: KernelTables, spec, mode: str, reindex_full_range: bool = False) -> ModelTables:
    """Select and interpolate the rows one model needs in prefill `mode` (sim.model.modes), its Reindex layers
    timed as `pipeline_kind` says; an InputError when a kernel is missing."""
    key = MODEL_KEYS.get(spec.name)
    if key is None:
        raise InputError(
            "no measured kernel tables for this model (use timing.model: roofline)",
            file=str(tables.path),
            value=spec.name,
            allowed=sorted(MODEL_KEYS),
        )
    path = tables.path
    kinds = Counter(pipeline_kind(layer, reindex_full_range) for layer in spec.layers)
    pipelines = {}
    by_s_q: dict[int, dict[str, tuple[Grid, int]]] = {}
    for kind, count in sorted(kinds.items()):
        model = "V4" if kind == "SWA" else key  # V4.1 SWA-only layers: V4's SWA kernel (module doc)
        rows = tables.need(
            f"{kind} decode pipeline", family="pipeline", kernel="decode_layer", model=model, layer_kind=kind
        )
        pipelines[kind] = (
            grid_of(rows, "context_tokens", "batch", outer_mode=LINEAR, inner_mode=LOGLOG, path=path),
            count,
        )
        spec_rows = tables.select(family="pipeline", kernel=SPEC_PIPELINE, model=model, layer_kind=kind)
        for s_q in sorted({rows_per_sequence(r) for r in spec_rows}):
            mine = [r for r in spec_rows if rows_per_sequence(r) == s_q]
            grid = grid_of(mine, "context_tokens", "batch", outer_mode=LINEAR, inner_mode=LOGLOG, path=path)
            by_s_q.setdefault(s_q, {})[kind] = (grid, count)
    # a verify step reads its s_q's pipelines only where every kind of the model has one
    spec_pipelines = {s_q: p for s_q, p in by_s_q.items() if p.keys() == pipelines.keys()}

    proj_rows: dict[str, list[KernelRow]] = {}

    def dense_rows(name: str) -> list[KernelRow]:
        if name not in proj_rows:
            found = [
                r
                for fmt in DENSE_FORMATS
                for r in tables.select(family="gemm_dense", model=key, layer_kind=name, fmt=fmt)
            ]
            if not found:
                tables.need(f"projection {name}", family="gemm_dense", model=key, layer_kind=name)
            proj_rows[name] = best_of(found, "rows")
        return proj_rows[name]

    every = {
        layer.index: on_every_prompt_token(spec, layer.index, "attention", mode) for layer in spec.layers
    }

    def layer_class(on_every: bool) -> LayerClass:
        mine = [layer for layer in spec.layers if every[layer.index] == on_every]
        sets = sorted(Counter(layer_projections(layer) for layer in mine).items())
        return LayerClass(
            dense=tuple(
                (tuple(curve_of(dense_rows(n), "rows", path=path) for n in names), count)
                for names, count in sets
            ),
            names=tuple(names for names, _count in sets),
            layers=len(mine),
            moe_layers=sum(1 for layer in mine if layer.mlp != "dense"),
        )

    sets = Counter(layer_projections(layer) for layer in spec.layers)

    def grouped(what: str, kernel: str) -> list[KernelRow]:
        for fmt in EXPERT_FORMATS:
            found = tables.select(family="gemm_grouped", kernel=kernel, model=key, fmt=fmt)
            if found:
                return found
        return tables.need(what, family="gemm_grouped", kernel=kernel, model=key, fmt=EXPERT_FORMATS[-1])

    wo_a_rows = grouped("wo_a", "proj_wo_a")
    gate_up = grouped("MoE gate_up", "moe_gate_up")
    down = grouped("MoE down", "moe_down")
    moe_layers = sum(1 for layer in spec.layers if layer.mlp != "dense")
    tail = layer_class(False)
    mhc_rows = [r for kernel in MHC_KERNELS for r in tables.select(family="mhc", kernel=kernel, model=key)]
    if not mhc_rows:
        tables.need("mHC", family="mhc", model=key)

    # float sums start at 0.0 (the same values as from 0): the compiled core keeps ints and floats apart
    covered = sum(
        (
            count * sum((_gemm_flops_per_token(dense_rows(n)[0]) for n in names), 0.0)
            for names, count in sets.items()
        ),
        0.0,
    )
    covered += spec.n_layers * _gemm_flops_per_token(
        wo_a_rows[0], _shape(wo_a_rows[0], "groups")
    )  # every token, all groups
    covered += (
        moe_layers * spec.moe.top_k * (_gemm_flops_per_token(gate_up[0]) + _gemm_flops_per_token(down[0]))
    )

    mla = tables.need("sparse MLA prefill", family="attention", kernel="sparse_mla_prefill", model=key)
    idx = tables.need("indexer prefill", family="indexer", kernel="indexer_prefill", model=key)

    def end(r: KernelRow) -> float:
        return _shape(r, "context_tokens") + _shape(r, "chunk_tokens")

    return ModelTables(
        pipelines=pipelines,
        spec_pipelines=spec_pipelines,
        every=layer_class(True),
        tail=tail,
        tail_tokens=spec.ced.tail_tokens if tail.layers and spec.ced else 0,
        wo_a=curve_of(wo_a_rows, "batch", path=path),
        moe_gate_up=grid_of(gate_up, "groups", "batch", outer_mode=LOGLOG, path=path),
        moe_down=grid_of(down, "groups", "batch", outer_mode=LOGLOG, path=path),
        mhc=curve_of(best_of(mhc_rows, "rows"), "rows", path=path),
        covered_flops_per_token=covered,
        mla_prefill=curve_of(mla, "chunk_tokens", path=path),
        mla_prefill_flops=curve_of(mla, "chunk_tokens", value=lambda r: r.flops, path=path),
        index_prefill=grid_of(idx, "chunk_tokens", end, outer_mode=LOGLOG, inner_mode=LINEAR, path=path),
        index_prefill_flops=grid_of(
            idx, "chunk_tokens", end, outer_mode=LOGLOG, inner_mode=LINEAR, value=lambda r: r.flops, path=path
        ),
        prefill_attn_layers=sum(
            1
            for layer in spec.layers
            if layer.ratio and on_every_prompt_token(spec, layer.index, "attention", mode)
        ),
        prefill_index_layers=sum(
            1
            for layer in spec.layers
            if layer.has_index_query and on_every_prompt_token(spec, layer.index, "index_query", mode)
        ),
    )


class PassParts(NamedTuple):
    """Seconds of a step's non-attention kernels on the busiest GPU, by kind (module doc)."""

    dense_gemm_s: float
    moe_gemm_s: float  # the routed experts
    mhc_s: float
    forward_term_s: float


class _RankLoad:
    """What one DP rank holds in a mixed step (`CalibratedTiming._dp_mixed_s`): its every-token, tail
    and logits rows, its chunks' attention seconds and its rows' summed attended context. One per
    rank, reused from step to step: valid while `stamp` is the step's (no lists built per step)."""

    __slots__ = ("stamp", "rows", "tail", "logits", "attn", "row_context")

    def __init__(self) -> None:
        self.stamp = 0
        self.rows = self.tail = self.logits = 0
        self.attn = self.row_context = 0.0

    def start(self, stamp: int, decode_rows: int, row_context: float) -> None:
        """A step's first chunk on this rank, beside its share of `decode_rows` decode rows."""
        self.stamp = stamp
        self.rows = self.tail = self.logits = decode_rows
        self.attn = 0.0
        self.row_context = row_context


class CalibratedTiming(RooflineTiming):
    """`TimingModel` from measured kernel tables (see the module doc); links, communication and
    the parts the tables lack come from the roofline it extends."""

    name = "calibrated"

    def __init__(
        self,
        arith: Any,
        hw: HwRates,
        par: Parallelism,
        eff: Efficiency,
        tables: KernelTables,
        *,
        accepted_tokens_per_step: float = 1.0,
        draft_tokens: int = 0,
        verify_rows: int = 0,
        engram_in_dram: bool = False,
        vision_on_instance: bool = True,
        layer_overhead_s: float = 0.0,
        layer_row_overhead_s: float = 0.0,
        row_buckets: tuple[int, ...] = (),
        prefill_through_decode: bool = False,
        prefill_cp: str = "off",
        host: HostCosts = NO_HOST,
        engine_glue: EngineGlue | None = None,
        megamoe: MegaMoe | None = None,
        megamoe_fallback: MoeModule | None = None,
        megamoe_cap_rows: int = 0,
        moe_module: MoeModule | None = None,
        power_limit: PowerLimit | None = None,
        decode_layer_term: bool = True,
        expert_alignment_rows: int = 1,
        torch_indexer: TorchIndexer | None = None,
    ) -> None:
        # RooflineTiming's keywords are spelled out, not forwarded as **kwargs: mypyc (2.4.1)
        # passes a forwarded **kwargs to the compiled base constructor as one positional dict
        # ("float object expected; got dict"). The measured kernels include their launch
        # costs: no separate per-step overhead.
        super().__init__(
            arith,
            hw,
            par,
            replace(eff, step_overhead_s=0.0),
            accepted_tokens_per_step=accepted_tokens_per_step,
            draft_tokens=draft_tokens,
            verify_rows=verify_rows,
            engram_in_dram=engram_in_dram,
            vision_on_instance=vision_on_instance,
        )
        self.tables = tables
        # what a step costs beyond the sum of its kernels, per layer and per layer and row on the
        # busiest GPU: measured against a real forward pass (sim.timing.forward)
        self.layer_overhead_s = layer_overhead_s
        self.layer_row_overhead_s = layer_row_overhead_s
        self.row_buckets: tuple[int, ...] = tuple(sorted(row_buckets))
        self.prefill_through_decode = prefill_through_decode
        # prefill context parallelism over the attention group's GPUs (sim.timing.context_parallel)
        self.cp = ContextParallel(prefill_cp, par.tp)
        self._cp_on = self.cp.on and not prefill_through_decode
        self.host = host
        self._host_on = host.enabled
        # the least a step with chunks lasts, run eagerly: the target's layers and, with an MTP drafter, its block,
        # which extends the same prompt in the step (sim.timing.host); DSpark only injects the prompt's target rows
        # into its blocks' KV, a handful of launches, not a block pass (docs/engines_and_validation.md section 40)
        drafter = arith.spec.drafter
        draft_layers = 0
        if drafter is not None and drafter.kind == "mtp" and draft_tokens > 0:
            draft_layers = drafter.blocks
        self._eager_floor_s = host.eager_floor_s(arith.layers + draft_layers)
        spec = arith.spec
        # keyed by the layer structure too: a reduced-depth variant (sim.timing.forward) keeps the name
        shape = (
            spec.name,
            spec.moe.routed_experts,
            tuple((x.attention, x.mlp, x.ratio) for x in spec.layers),
        )
        mode = arith.prefill_mode or spec.default_prefill_mode
        full = arith.reindex_full_range
        self.mt: ModelTables = tables.derived(
            ("model_tables", shape, mode, full), lambda: model_tables(tables, spec, mode, full)
        )
        # V4.1's prefill index layers as SGLang's torch path on Hopper runs them, in place of their index FLOPs at
        # the indexer tables' rate (sim.timing.torch_indexer)
        self.torch_indexer = torch_indexer
        self._torch_layers: tuple[IndexLayer, ...] = (
            index_layers(spec, mode, full) if torch_indexer is not None else ()
        )
        self._index_unit_flops: int = spec.index.flops_per_position if spec.index is not None else 0
        # a decode step without the term's per-layer part where the engine's graphed decode runs none of its glue
        # (timing.decode_layer_term): the part is the same at every row count, so the pass sheds it whole
        self._decode_cut_s: float = (
            0.0 if decode_layer_term else (self.mt.every.layers + self.mt.tail.layers) * layer_overhead_s
        )
        # the least a decode step lasts: the host's chain in the engine's speculative loop (sim.timing.host)
        self._decode_floor_s: float = host.decode_floor_s
        # prefill rows through the decode kernel: each pipeline with its kernels past its measured batches
        self._rows_pipelines: tuple[tuple[PipelineRows, int], ...] = ()
        if prefill_through_decode:
            key = MODEL_KEYS[spec.name]
            self._rows_pipelines = tuple(
                (pipeline_rows(tables, key, kind, g), n) for kind, (g, n) in sorted(self.mt.pipelines.items())
            )
        self._f_total: float = arith.dense_flops_per_token  # typed: unboxed on the hot path
        # the LM head on the roofline (module doc), per GPU: vocab-parallel over the attention-TP ranks
        self._head_flops: float = 2.0 * spec.vocab * spec.hidden
        self._head_read_s: float = head_bytes(spec) / par.tp / self._hbm_rate
        self._head_rate: float = hw.bf16_flops_per_s * eff.mfu_decode * par.tp
        # the tables' GEMMs scaled to the work they lack, the LM head apart
        self._gemm_scale: float = (self._f_total - self._head_flops) / self.mt.covered_flops_per_token
        # the drafter's FLOPs per decode row (its drafting and its pass over the row) and per prompt token (its
        # pass), run at the measured seconds per FLOP of the pass (docs/engines_and_validation.md section 33)
        verify = self.verified_tokens_per_step
        draft_per_row = self._draft_flops / verify + self._draft_row_flops
        self._draft_share: float = draft_per_row / self._f_total
        self._row_draft_share: float = self._draft_row_flops / self._f_total
        # per class of layers (every-token, decoder tail), by rows (sim.timing.memo)
        self._class_every, self._class_tail = IndexMemo(), IndexMemo()
        self._rank_every, self._rank_tail = IndexMemo(), IndexMemo()
        self._experts_every, self._experts_tail = IndexMemo(), IndexMemo()
        self._gemm_mhc_cache: tuple[dict[int, tuple[float, float]], dict[int, tuple[float, float]]] = ({}, {})
        self._cp_rank_cache: tuple[dict[int, float], dict[int, float]] = ({}, {})
        # a mixed step's per-rank loads (`_dp_mixed_s`), reused from step to step
        self._rank_loads = [_RankLoad() for _ in range(par.dp)]
        self._rank_stamp = 0
        self._mla_s, self._mla_flops = IndexMemo(), IndexMemo()
        # the indexer prefill's times and FLOPs, read together (the same rows)
        self._index_prefill = GridPair(self.mt.index_prefill, self.mt.index_prefill_flops)
        self._fixed_memo = IndexMemo()
        self._attn_cache: list[Curve | None] = []  # by batch size (a list: no boxing and hashing per lookup)
        # the share of a chunk's sparse MLA one attention-TP GPU runs, its heads padded (context_parallel)
        self.spec_heads: int = spec.attention.heads
        self._head_share: float = padded_head_share(self.spec_heads, par.tp)
        # the engine's glue per prompt row on a GPU, through the every-token and the tail layers; under
        # prefill CP a GPU runs its rows with whole weights (sim.timing.engine_glue)
        self.engine_glue = engine_glue
        row_s = engine_glue.per_layer_row_s(par.tp) if engine_glue is not None else 0.0
        whole_row_s = engine_glue.per_layer_row_s(1) if engine_glue is not None else 0.0
        self._glue_every_s: float = row_s * self.mt.every.layers
        self._glue_tail_s: float = row_s * self.mt.tail.layers
        self._glue_cp_every_s: float = whole_row_s * self.mt.every.layers
        self._glue_cp_tail_s: float = whole_row_s * self.mt.tail.layers
        # a `moe_a2a: megamoe` pool on Blackwell: the routed experts as DeepGEMM's Mega MoE measured (sim.timing.megamoe)
        self.megamoe = megamoe
        # the engine's MoE in a Mega MoE pool's steps whose most-loaded rank holds more than `megamoe_cap_rows` rows
        # (SGLang's should_use_mega_moe: Triton's fused MoE over the DP-gathered rows, sim.timing.engine_moe); None:
        # every step runs Mega MoE
        self.megamoe_fallback = megamoe_fallback
        self._megamoe_cap_rows: int = megamoe_cap_rows
        # the measured module of the MoE runner the pool's engine runs (Marlin's, sim.timing.marlin; the others,
        # sim.timing.engine_moe)
        self.moe_module = moe_module
        # a step holding prefill chunks runs its GPU compute at the board's power limit (sim.timing.sustained)
        self.power_limit = power_limit
        self._expert_weights: int = spec.moe.expert_elements if spec.moe is not None else 0
        # in steps holding prefill the engine pads each expert's rows to this multiple (DeepEP normal into
        # DeepGEMM's contiguous layout, sim.timing.experts); a measured module (Mega MoE, an engine runner's) has its own layout
        self._align_rows: int = expert_alignment_rows if megamoe is None and moe_module is None else 1
        self._aligned_every, self._aligned_tail = IndexMemo(), IndexMemo()

    # --- building blocks, memoised by integer rows / batch / chunk size ---

    def _gemm_mhc(self, every: bool, m: int) -> tuple[float, float]:
        """(dense GEMMs scaled for the work the tables lack, mHC) seconds of one class of layers on a GPU
        of an attention-TP group at `m` rows per DP group: the split projections / tp, the replicated ones
        whole; memoised by m, which takes far fewer values than the rows."""
        cache = self._gemm_mhc_cache[0 if every else 1]
        v = cache.get(m)
        if v is None:
            split, whole = self._dense_parts(every, m)
            layers = self.mt.every.layers if every else self.mt.tail.layers
            v = (split / self.par.tp + whole, layers * MHC_BOUNDARIES_PER_LAYER * self.mt.mhc.at(m))
            cache[m] = v
        return v

    def _dense_parts(self, every: bool, m: int, only: frozenset[str] | None = None) -> tuple[float, float]:
        """(projections attention TP splits, projections it replicates) seconds of one class of layers at
        `m` rows with whole weights, scaled for the work the tables lack (`only`: those projections and
        wo_a). wo_a splits by output group."""
        mt = self.mt
        cls = mt.every if every else mt.tail
        split, whole = cls.layers * mt.wo_a.at(m), 0.0
        for (curves, count), names in zip(cls.dense, cls.names, strict=True):
            for c, name in zip(curves, names, strict=True):
                if only is not None and name not in only:
                    continue
                if name in TP_REPLICATED:
                    whole += count * c.at(m)
                else:
                    split += count * c.at(m)
        return split * self._gemm_scale, whole * self._gemm_scale

    def _experts(self, rows: int, align: int = 1) -> float:
        """Seconds of one MoE layer's routed experts over `rows` token rows on the GPU the step waits for: the
        measured grouped GEMMs over the busiest EP rank's touched experts, extrapolated below the fewest
        measured experts (sim.timing.experts), or the measured module that replaces them (Mega MoE, an engine runner's),
        split over the expert-TP GPUs. The same in both classes of layers
        (`_experts_s` memoises it). `align` > 1: each expert's rows padded to a multiple of it
        (`_aligned_extra_s`)."""
        mt, par = self.mt, self.par
        # expert TP = GPUs / EP (sim/config/cluster.py): each GPU holds 1/expert_tp of its EP
        # rank's experts and runs every row routed to them on that slice, timed as the full
        # grouped GEMM / expert_tp, as the dense projections are / TP
        expert_tp = par.gpus / par.ep
        if self.megamoe is not None:
            flops, weight_bytes = rank_work(
                self.arith.routed_experts, self.arith.top_k, self._expert_weights, float(rows), par.ep
            )
            return layer_s(self.megamoe, flops, weight_bytes) / expert_tp
        rank = busiest_rank(self.arith.routed_experts, self.arith.top_k, float(rows), par.ep)
        if self.moe_module is not None:
            # the module's split over expert-TP GPUs at its measured efficiency (sim.timing.moe_module TpSplit)
            return self.moe_module.tp_layer_s(
                rank.experts, rank.rows_per_expert, self._expert_weights, expert_tp
            )
        per_expert = rank.rows_per_expert
        if align > 1:
            per_expert = contiguous_rows_per_expert(
                rows * self.arith.top_k / self.arith.routed_experts, align
            )
        return (
            grouped_s(mt.moe_gate_up, rank.experts, per_expert)
            + grouped_s(mt.moe_down, rank.experts, per_expert)
        ) / expert_tp

    def _class_parts(self, every: bool, rows: int) -> PassParts:
        """The parts of `rows` token rows through one class of layers on the busiest GPU, the rows
        spread evenly over the DP groups; the GEMMs scaled up for the work the tables lack (module doc)."""
        mt = self.mt
        cls = mt.every if every else mt.tail
        if rows <= 0 or cls.layers == 0:
            return PassParts(0.0, 0.0, 0.0, 0.0)
        m = math.ceil(rows / self.par.dp)  # the straggler's DP group
        dense, mhc, overhead = self._rank_parts(every, m)
        return PassParts(dense, self._experts_s(every, rows), mhc, overhead)

    def pass_parts(self, rows: int) -> PassParts:
        """The parts of `rows` token rows (padded already) through every class of layers."""
        e, t = self._class_parts(True, rows), self._class_parts(False, rows)
        return PassParts(
            e.dense_gemm_s + t.dense_gemm_s, e.moe_gemm_s + t.moe_gemm_s, e.mhc_s + t.mhc_s,
            e.forward_term_s + t.forward_term_s,
        )  # fmt: skip

    def _rank_parts(self, every: bool, m: int) -> tuple[float, float, float]:
        """(dense GEMMs, mHC, forward-pass term) seconds of one class of layers on a GPU of a DP
        group (rank) holding `m` token rows: the work each DP rank does on its own rows."""
        cls = self.mt.every if every else self.mt.tail
        if m <= 0 or cls.layers == 0:
            return 0.0, 0.0, 0.0
        dense, mhc = self._gemm_mhc(every, m)
        return dense, mhc, cls.layers * self.layer_overhead_s + self._row_term_s(every, m)

    def _rank_s(self, every: bool, m: int) -> float:
        """Dense GEMMs, mHC and the forward-pass term's per-layer part of one class of layers on a GPU of
        a DP rank holding `m` token rows (its own work in a mixed step), memoised by (class, m). The
        term's per-row part is not in it: that is mostly the pass's expert GEMMs (sim.timing.forward),
        which EP spreads over every rank (`_row_term_s`)."""
        memo = self._rank_every if every else self._rank_tail
        v = memo.get(m)
        if v != v:  # NaN: not stored yet
            cls = self.mt.every if every else self.mt.tail
            if m <= 0 or cls.layers == 0:
                v = 0.0
            else:
                dense, mhc = self._gemm_mhc(every, m)
                v = dense + mhc + cls.layers * self.layer_overhead_s
            memo.put(m, v)
        return v

    def _row_term_s(self, every: bool, m: int) -> float:
        """The forward-pass term's per-row part of one class of layers on a GPU whose DP rank holds `m`
        token rows. It is kernel work the tables under-predict (the measured pass's MoE and attention,
        sim.timing.forward), so a GPU pays it for its share of the rows' work: TP ranks split the DP
        group's GEMM, expert and attention-head work (m / tp), as its kernels are split."""
        cls = self.mt.every if every else self.mt.tail
        return cls.layers * self.layer_row_overhead_s * m / self.par.tp if m > 0 else 0.0

    def _experts_s(self, every: bool, rows: int) -> float:
        """Seconds of one class of layers' routed experts over `rows` token rows of the whole
        instance on one GPU (EP spans every DP rank: each GPU's experts see all ranks' rows)."""
        memo = self._experts_every if every else self._experts_tail
        v = memo.get(rows)
        if v != v:  # NaN: not stored yet
            cls = self.mt.every if every else self.mt.tail
            if rows <= 0 or cls.moe_layers == 0:
                v = 0.0
            else:
                # a measured module (Mega MoE, an engine runner's) is the whole routed-expert op: not scaled to the tables'
                # missing work
                scale = 1.0 if self.megamoe is not None or self.moe_module is not None else self._gemm_scale
                v = cls.moe_layers * self._experts(rows) * scale
            memo.put(rows, v)
        return v

    def _megamoe_fallback_s(self, every_rows: int, tail_rows: int) -> float:
        """Seconds of a step's routed experts off Mega MoE (`megamoe_fallback`): each MoE layer runs the fallback
        module over the busiest EP rank's share of every rank's rows, split over expert TP, after a gather of the
        step's BF16 hidden states over the DP ranks and before a reduce-scatter of the same bytes (the standard
        dispatcher under DP attention, timed as two ring collectives over the scale-up link [D])."""
        module, a, par = self.megamoe_fallback, self.arith, self.par
        if module is None:
            return 0.0
        expert_tp = par.gpus / par.ep
        total = 0.0
        for rows, layers in ((every_rows, self.mt.every.moe_layers), (tail_rows, self.mt.tail.moe_layers)):
            if rows <= 0 or layers == 0:
                continue
            rank = busiest_rank(a.routed_experts, a.top_k, float(rows), par.ep)
            experts = module.tp_layer_s(rank.experts, rank.rows_per_expert, self._expert_weights, expert_tp)
            exchange = allgather_s(rows * a.hidden * 2.0, par.dp, self._comm_bw, self._comm_lat)
            total += layers * (experts + 2.0 * exchange)
        return total

    def _aligned_extra_s(self, every_rows: int, tail_rows: int) -> float:
        """Seconds a step holding prefill adds to its routed experts where the engine pads each expert's rows to
        `_align_rows` (SGLang's DeepEP normal mode, sim.timing.experts): over the every-token and the tail layers
        at their rows; 0 without padding."""
        if self._align_rows <= 1:
            return 0.0
        return self._aligned_class_s(True, every_rows) + self._aligned_class_s(False, tail_rows)

    def _aligned_class_s(self, every: bool, rows: int) -> float:
        """`_aligned_extra_s` of one class of layers, memoised by rows."""
        memo = self._aligned_every if every else self._aligned_tail
        v = memo.get(rows)
        if v != v:  # NaN: not stored yet
            cls = self.mt.every if every else self.mt.tail
            v = 0.0
            if rows > 0 and cls.moe_layers:
                padded = cls.moe_layers * self._experts(rows, self._align_rows) * self._gemm_scale
                v = max(0.0, padded - self._experts_s(every, rows))
            memo.put(rows, v)
        return v

    def _class_s(self, every: bool, rows: int) -> float:
        """Sum of `_class_parts`, memoised by (class, rows)."""
        memo = self._class_every if every else self._class_tail
        v = memo.get(rows)
        if v != v:  # NaN: not stored yet
            v = sum(self._class_parts(every, rows), 0.0)
            memo.put(rows, v)
        return v

    def _pass_s(self, every_rows: int, tail_rows: int) -> float:
        """Seconds of the non-attention kernels of a step whose every-token layers see `every_rows`
        rows and whose decoder-tail layers see `tail_rows` (equal in decode), padded to the graph."""
        return self._class_s(True, self.padded_rows(every_rows)) + self._class_s(
            False, self.padded_rows(tail_rows)
        )

    def padded_rows(self, rows: int) -> int:
        """The rows a step of `rows` token rows runs through its GEMMs: per DP rank, the smallest CUDA-graph
        row bucket that holds them (unpadded above the last bucket or without buckets; module doc)."""
        buckets = self.row_buckets
        if not buckets or rows <= 0:
            return rows
        dp = self.par.dp
        per_rank = -(-rows // dp)
        if per_rank > buckets[-1]:
            return rows
        return buckets[bisect_left(buckets, per_rank)] * dp

    def head_s(self, rows: int) -> float:
        """The LM head over `rows` rows needing logits on the busiest GPU (module doc)."""
        return self._head_rank_s(-(-rows // self.par.dp)) if rows > 0 else 0.0

    def _draft_chunk_s(self, rank_rows: int, rows: int) -> float:
        """The drafter's pass over a step's `rows` prompt tokens, `rank_rows` of them on its busiest DP rank
        (docs/engines_and_validation.md section 33): its FLOP share of the target's work on those tokens, the
        dense part on the rank's GPUs, the experts over every EP rank."""
        share = self._row_draft_share
        if rows <= 0 or share == 0.0:
            return 0.0
        if self.par.dp == 1:
            return share * self._pass_s(rows, rows)
        spread = -(-rows // self.par.dp)
        own = self._rank_s(True, rank_rows) + self._rank_s(False, rank_rows)
        own += self._row_term_s(True, spread) + self._row_term_s(False, spread)
        return share * (own + self._experts_s(True, rows) + self._experts_s(False, rows))

    def _head_rank_s(self, m: int) -> float:
        """The LM head on a GPU of a DP rank with `m` rows needing logits."""
        compute_s = m * self._head_flops / self._head_rate
        return compute_s if compute_s > self._head_read_s else self._head_read_s  # max(), unboxed

    def _rows_attention_s(self, rows: int, mean_context_tokens: float) -> float:
        """The `decode_layer` pipelines of every layer over `rows` query rows at their mean attended context
        (prefill rows through the decode kernel, module doc)."""
        b = -(-rows // self.par.dp)
        return sum((n * p.at(mean_context_tokens, b) for p, n in self._rows_pipelines), 0.0)

    def _attn_curve(self, batch_size: int) -> Curve:
        """Summed attention-side time of a decode step over the mean context (piecewise linear)."""
        cache = self._attn_cache
        if batch_size < len(cache):
            v = cache[batch_size]
            if v is not None:
                return v
        else:
            cache.extend([None] * (batch_size + 1 - len(cache)))
        verify = self.verified_tokens_per_step
        spec = self.mt.spec_pipelines.get(verify) if verify > 1 else None
        # a verify step: its own pipelines at the sequences, else the plain ones at every row
        b = math.ceil(batch_size / self.par.dp) * (1 if spec else verify)
        grids = (spec or self.mt.pipelines).values()
        knots = sorted({x for grid, _n in grids for x in grid.outer})
        v = Curve(tuple(knots), tuple(sum((n * g.at(x, b) for g, n in grids), 0.0) for x in knots), LINEAR)
        cache[batch_size] = v
        return v

    def _fixed(self, batch_size: int) -> float:
        """Seconds of a decode step of `batch_size` sequences that do not depend on their contexts."""
        v = self._fixed_memo.get(batch_size)
        if v != v:  # NaN: not stored yet
            rows = batch_size * self.verified_tokens_per_step
            v = (self._pass_s(rows, rows) - self._decode_cut_s) * (1.0 + self._draft_share)
            v += self._comm_s(rows) + self.head_s(rows)
            if self._host_on:
                v += self._host_s(batch_size, 0, rows)
            self._fixed_memo.put(batch_size, v)
        return v

    def _heads_attention_s(self, attn_flops: float, new_tokens: int, context_tokens: int) -> float:
        """Seconds of a chunk's attention + indexer (`attn_flops`) on a GPU of an attention group whose
        TP GPUs split it by heads: the measured sparse MLA prefill at the GPU's padded share of the heads
        (all of it for V4 / V4.1), the replicated indexer whole (sim.timing.context_parallel)."""
        share = self._head_share
        if share == 1.0:
            return attn_flops * self.prefill_attention_s_per_flop(new_tokens, context_tokens)
        ni = self.mt.prefill_index_layers
        mla_s, mla_flops = self._mla_prefill(new_tokens)
        index_s, index_flops = self._index_prefill.at(new_tokens, context_tokens + new_tokens)
        flops = mla_flops + ni * index_flops
        return attn_flops * heads_split_attention_s(mla_s, ni * index_s, share) / flops

    def _chunk_attention_s(
        self, new_tokens: int, context_tokens: int, last_chunk: bool, tail_rows: int
    ) -> float:
        """Seconds of a chunk's attention + indexer on a GPU of its attention group (`_heads_attention_s`); where
        the engine runs V4.1's prefill indexer in torch, its index FLOPs are timed as that path instead."""
        attn_flops = chunk_attention_flops(
            self._prefill_every, self._prefill_tail, new_tokens, context_tokens, last_chunk
        )
        path = self.torch_indexer
        if path is None:
            return self._heads_attention_s(attn_flops, new_tokens, context_tokens)
        rest = self._without_index_flops(attn_flops, new_tokens, context_tokens, tail_rows)
        mla_s, mla_flops = self._mla_prefill(new_tokens)
        mla = rest * heads_split_attention_s(mla_s, 0.0, self._head_share) / mla_flops
        return mla + path.chunk_s(self._torch_layers, new_tokens, tail_rows, context_tokens + new_tokens)

    def _without_index_flops(
        self, attn_flops: float, new_tokens: int, context_tokens: int, tail_rows: int
    ) -> float:
        """A chunk's attention FLOPs less its index FLOPs, which the torch path's table times instead."""
        index = chunk_index_flops(
            self._torch_layers, self._index_unit_flops, new_tokens, context_tokens, tail_rows
        )
        return attn_flops - index

    def _tail_rows(self, new_tokens: int, context_tokens: int, last_chunk: bool) -> int:
        """Rows of a chunk the decoder tail runs on (the request's last rows, in its last chunk; model.md §6.2)."""
        tail_tokens = self.mt.tail_tokens
        return min(context_tokens + new_tokens, tail_tokens) if last_chunk and tail_tokens else 0

    def _host_s(self, decode_sequences: int, chunks: int, rows: int) -> float:
        """The engine's host time around a step (`timing.host`): the rows its busiest DP rank's graph runs."""
        return self.host.step_total_s(decode_sequences, chunks, -(-self.padded_rows(rows) // self.par.dp))

    def prefill_attention_s_per_flop(self, new_tokens: int, context_tokens: int) -> float:
        """Measured seconds per attention + indexer FLOP of a prefill chunk on one GPU."""
        ni = self.mt.prefill_index_layers
        mla_s, mla_flops = self._mla_prefill(new_tokens)
        index_s, index_flops = self._index_prefill.at(new_tokens, context_tokens + new_tokens)
        t = mla_s + ni * index_s
        f = mla_flops + ni * index_flops
        return t / f

    def _mla_prefill(self, new_tokens: int) -> tuple[float, float]:
        """(seconds, FLOPs) of the sparse MLA prefill layers for a chunk of `new_tokens`, memoised
        (chunk sizes repeat and are bounded by the step's token budget)."""
        v = self._mla_s.get(new_tokens)
        if v == v:  # stored (NaN: not yet)
            return v, self._mla_flops.get(new_tokens)
        mt = self.mt
        na = mt.prefill_attn_layers
        v, flops = na * mt.mla_prefill.at(new_tokens), na * mt.mla_prefill_flops.at(new_tokens)
        self._mla_s.put(new_tokens, v)
        self._mla_flops.put(new_tokens, flops)
        return v, flops

    def attention_side_parts(self, tokens: int) -> AttentionSideParts:
        """The composed attention side of one `tokens`-token chunk at context 0 through every layer (its
        attention and indexer as `_heads_attention_s` takes them, the attention projections and wo_a as
        `_dense_parts`), whole, for the engine glue's fit (sim.timing.engine_glue)."""
        attn_flops = chunk_attention_flops(self._prefill_every, self._prefill_tail, tokens, 0, True)
        ni = self.mt.prefill_index_layers
        mla_s, mla_flops = self._mla_prefill(tokens)
        index_s, index_flops = self._index_prefill.at(tokens, tokens)
        per_flop = attn_flops / (mla_flops + ni * index_flops)
        split, whole = self._dense_parts(True, tokens, ATTENTION_SIDE)
        return AttentionSideParts(mla_s * per_flop, ni * index_s * per_flop, whole, split)

    def _glue_s(self, new_tokens: int, tail_rows: int) -> float:
        """The engine glue of a chunk's rows on a GPU of its attention group (sim.timing.engine_glue)."""
        return new_tokens * self._glue_every_s + tail_rows * self._glue_tail_s

    # --- the interface ---

    def decode_seq_terms(self, context_tokens: float, steps: int) -> DecodeTerms:
        return DecodeTerms(
            context_tokens=float(context_tokens), context_tokens_growth=self.accepted_tokens_per_step
        )

    def step_s(
        self, batch_size: int, terms: DecodeTerms, prefill: Sequence[PrefillChunk], heat_s: float = 0.0
    ) -> float:
        if not prefill:
            if not batch_size:
                return 0.0
            v = self._fixed(batch_size) + self._attn_curve(batch_size).at(terms.context_tokens / batch_size)
            floor = self._decode_floor_s
            return v if v > floor else floor
        v = self._chunk_step_s(batch_size, terms, prefill, heat_s)
        floor = self._eager_floor_s  # a step with chunks runs eagerly (sim.timing.host)
        return v if v > floor else floor

    def _chunk_step_s(
        self, batch_size: int, terms: DecodeTerms, prefill: Sequence[PrefillChunk], heat_s: float = 0.0
    ) -> float:
        """`step_s` of a step holding prefill chunks, as its kernels run (no eager floor), from the board's
        heat `heat_s` (sim.timing.sustained)."""
        if self.par.dp > 1:  # decode rows on every rank (`rank_step_s`: not on those holding chunks)
            host = self._mixed_host_s(batch_size, prefill)
            return self._dp_mixed_s(batch_size, terms, prefill, True, heat_s) + host
        a, tail_tokens = self.arith, self.mt.tail_tokens
        decode_rows = batch_size * self.verified_tokens_per_step
        if self._cp_on and self.cp.splits(decode_rows, [chunk.new_tokens for chunk in prefill]):
            host = self._mixed_host_s(batch_size, prefill)
            return self._cp_step_s(batch_size, terms, prefill, heat_s) + host
        every_rows = tail_rows = decode_rows
        through_decode = self.prefill_through_decode
        attn = 0.0
        if batch_size and not through_decode:
            attn = self._attn_curve(batch_size).at(terms.context_tokens / batch_size)
        # rows x their attended context, for prefill rows through the decode kernel (module doc)
        row_context = terms.context_tokens * self.verified_tokens_per_step
        for chunk in prefill:
            new, ctx, last = chunk.new_tokens, chunk.context_tokens, chunk.last_chunk
            tail = self._tail_rows(new, ctx, last)
            if through_decode:
                row_context += new * (ctx + (new + 1) / 2.0)
            else:
                attn += self._chunk_attention_s(new, ctx, last, tail)
            if chunk.image_tokens and self.vision_on_instance:
                attn += a.vision_flops(chunk.image_tokens, chunk.image_count) / self._attn_rate_prefill
            every_rows += new
            tail_rows += tail
            attn += self._glue_s(new, tail)
        if every_rows == 0:
            return 0.0
        if through_decode:
            attn += self._rows_attention_s(every_rows, row_context / every_rows)
        if not tail_tokens:
            tail_rows = every_rows
        drafter = self._draft_share * self._pass_s(decode_rows, decode_rows) if decode_rows else 0.0
        chunk_rows = every_rows - decode_rows
        drafter += self._draft_chunk_s(chunk_rows, chunk_rows)
        head = self.head_s(decode_rows + len(prefill))
        host = self._mixed_host_s(batch_size, prefill)
        padding = self._aligned_extra_s(every_rows, tail_rows)
        off_mega = (
            0.0  # over Mega MoE's cap (every GPU of the attention group holds the step's rows): the fallback
        )
        if self.megamoe_fallback is not None and every_rows > self._megamoe_cap_rows:
            off_mega = self._megamoe_fallback_s(every_rows, tail_rows) - (
                self._experts_s(True, every_rows) + self._experts_s(False, tail_rows)
            )
        gpu = self._pass_s(every_rows, tail_rows) + padding + off_mega + drafter + attn + head
        return self._at_power_limit(gpu, heat_s) + self._comm_s(every_rows, True) + host

    def _at_power_limit(self, gpu_s: float, heat_s: float) -> float:
        """`gpu_s` of a step's GPU work at burst clocks as it runs from the board's heat `heat_s` at its power
        limit (sim.timing.sustained); as measured where the GPU has no power limit measured."""
        limit = self.power_limit
        return gpu_s if limit is None else limit.run_s(gpu_s, heat_s)

    def rank_step_s(
        self, batch_size: int, terms: DecodeTerms, prefill: Sequence[PrefillChunk], heat_s: float = 0.0
    ) -> float:
        """`step_s` where the DP ranks holding chunks run no decode rows (`_dp_mixed_s`)."""
        if self.par.dp == 1 or not prefill:
            return self.step_s(batch_size, terms, prefill, heat_s)
        host = self._mixed_host_s(batch_size, prefill)
        v = self._dp_mixed_s(batch_size, terms, prefill, False, heat_s) + host
        floor = self._eager_floor_s  # every rank runs eagerly when one prefills (sim.timing.host)
        return v if v > floor else floor

    def _mixed_host_s(self, batch_size: int, prefill: Sequence[PrefillChunk]) -> float:
        """`_host_s` of a step with prefill chunks: its decode rows and every chunk's new tokens."""
        if not self._host_on:
            return 0.0
        rows = batch_size * self.verified_tokens_per_step + sum(c.new_tokens for c in prefill)
        return self._host_s(batch_size, len(prefill), rows)

    def _cp_step_s(
        self, batch_size: int, terms: DecodeTerms, prefill: Sequence[PrefillChunk], heat_s: float = 0.0
    ) -> float:
        """A step whose rows go over the attention group's GPUs by position (prefill context
        parallelism, sim.timing.context_parallel): each GPU runs attention and indexer for its share
        of every chunk's rows against the whole context, at the measured efficiency of a chunk of that
        share ending where the chunk ends; its dense projections (unsplit weights), mHC and forward-pass
        term on its share of all the step's rows; the routed experts over every row as without CP;
        then the all-gathers of the chunks' KV and of the hidden states. CUDA-graph padding does not
        apply (prefill steps run eager)."""
        a, tail_tokens, g = self.arith, self.mt.tail_tokens, self.cp.ranks
        decode_rows = batch_size * self.verified_tokens_per_step
        every_rows = tail_rows = decode_rows
        attn = 0.0
        if batch_size:  # the decode rows dealt over the GPUs too, each GPU's share at full heads [D]
            attn = self._attn_curve(rank_rows(batch_size, g)).at(terms.context_tokens / batch_size)
        kv_bytes = 0.0
        for chunk in prefill:
            new, ctx, last = chunk.new_tokens, chunk.context_tokens, chunk.last_chunk
            _dense, attn_flops, kv = chunk_parts(self._prefill_every, self._prefill_tail, new, ctx, last)
            share = rank_rows(new, g)
            tail = self._tail_rows(new, ctx, last)
            path = self.torch_indexer
            if path is None:
                attn += attn_flops / g * self.prefill_attention_s_per_flop(share, ctx + new - share)
            else:  # the GPU's rows of every index layer against the whole context (sim.timing.torch_indexer)
                mla_s, mla_flops = self._mla_prefill(share)
                attn += self._without_index_flops(attn_flops, new, ctx, tail) / g * mla_s / mla_flops
                attn += path.chunk_s(self._torch_layers, share, rank_rows(tail, g), ctx + new)
            kv_bytes += kv
            if chunk.image_tokens and self.vision_on_instance:
                attn += a.vision_flops(chunk.image_tokens, chunk.image_count) / self._attn_rate_prefill
            every_rows += new
            tail_rows += tail
            # the glue of the GPU's share of the rows, with whole weights
            attn += share * self._glue_cp_every_s + rank_rows(tail, g) * self._glue_cp_tail_s
        if not tail_tokens:
            tail_rows = every_rows
        rank = self._cp_rank_s(True, rank_rows(every_rows, g)) + self._cp_rank_s(
            False, rank_rows(tail_rows, g)
        )
        experts = self._experts_s(True, every_rows) + self._experts_s(False, tail_rows)
        experts += self._aligned_extra_s(every_rows, tail_rows)
        drafter = self._draft_share * self._pass_s(decode_rows, decode_rows) if decode_rows else 0.0
        # its pass over the chunks' rows, split over the GPUs as theirs are
        if self._row_draft_share and every_rows > decode_rows:
            drafter += self._row_draft_share * (rank + experts) * (every_rows - decode_rows) / every_rows
        head = self.head_s(decode_rows + len(prefill))
        gpu = attn + rank + experts + drafter + head
        return self._at_power_limit(gpu, heat_s) + self._cp_comm_s(every_rows, kv_bytes)

    def _cp_rank_s(self, every: bool, m: int) -> float:
        """Dense projections with unsplit weights, mHC and forward-pass term of one class of layers on
        a GPU holding `m` of a CP step's rows, memoised by (class, m)."""
        cache = self._cp_rank_cache[0 if every else 1]
        v = cache.get(m)
        if v is None:
            cls = self.mt.every if every else self.mt.tail
            if m <= 0 or cls.layers == 0:
                v = 0.0
            else:
                split, whole = self._dense_parts(every, m)  # every GPU runs the whole weights on its rows
                mhc = self._gemm_mhc(every, m)[1]
                # the term's per-row part of m whole rows: a rank's m x tp rows split over its tp GPUs
                v = (
                    split
                    + whole
                    + mhc
                    + cls.layers * self.layer_overhead_s
                    + self._row_term_s(every, m * self.par.tp)
                )
            cache[m] = v
        return v

    def _cp_comm_s(self, rows: int, kv_bytes: float) -> float:
        """Communication of a CP step of `rows` rows writing `kv_bytes` of KV: the MoE's all-to-all
        (DeepEP over the EP ranks, overlapped as `_comm_s`; with experts TP-split instead, ep = 1, an
        all-gather and a reduce-scatter of the rows' hidden states around every MoE layer), and the
        exposed CP all-gathers (sim.timing.context_parallel.cp_gather_s); no attention all-reduce."""
        a, p, g = self.arith, self.par, self.cp.ranks
        if p.ep > 1:
            moe = self._ep_alltoall_s(rows, True)
        else:
            hidden_bytes = rows * a.hidden * COMBINE_BYTES_PER_ELEM
            moe = a.moe_layers * 2.0 * allgather_s(hidden_bytes, g, self._comm_bw, self._comm_lat)
            moe *= 1.0 - self.eff.comm_overlap_frac
        v = moe + cp_gather_s(
            kv_bytes,
            rows,
            ranks=g,
            hidden=a.hidden,
            layers=a.layers,
            index_layers=self.mt.prefill_index_layers,
            bw_bytes_per_s=self._comm_bw,
            latency_s=self._comm_lat,
        )
        if self.engram_in_dram:
            v += rows * a.engram_bytes_per_token / self._pcie_rate
        return v + self.eff.step_overhead_s

    def _dp_mixed_s(
        self,
        batch_size: int,
        terms: DecodeTerms,
        prefill: Sequence[PrefillChunk],
        decode_on_chunk_ranks: bool,
        heat_s: float = 0.0,
    ) -> float:
        """A step with prefill chunks on an instance with DP attention. Each chunk runs on its
        request's DP rank (`PrefillChunk.rank`): that rank's GPUs compute its attention, dense
        projections, mHC, the forward-pass term's per-layer part and logits on its decode rows plus
        its chunks' rows, while the routed experts (EP over every rank) and the term's per-row part
        (mostly expert work, sim.timing.forward) go with the rows of all ranks spread evenly. The ranks meet at
        every MoE layer's dispatch and combine, so the step lasts as long as its slowest rank's own
        work, plus the experts and the communication (the all-to-all waits for the rank sending the
        most rows). Decode rows are spread evenly over the ranks (each holds ceil(rows / dp), as in a
        decode step) [D]: the engine's round-robin placement balances sequence counts, not their
        contexts. Every layer has the same slowest rank, so the sum over layers of the per-layer
        slowest rank is taken as the slowest rank's sum (the layers' prefill/decode mixes differ
        little). With CUDA-graph buckets every rank replays the graph of the most-loaded rank's rows.
        Not `decode_on_chunk_ranks` (each rank picks its own batch: a rank holding chunks does not
        decode, sim.sched.batcher): the `batch_size` sequences decoding are those of the ranks without
        chunks, spread evenly over them [D], and their attention is part of those ranks' own work."""
        a, tail_tokens, dp = self.arith, self.mt.tail_tokens, self.par.dp
        verify = self.verified_tokens_per_step
        decode_rows = batch_size * verify
        # the decode rows of a rank holding chunks. ceil: the straggler's, as in a decode step
        chunk_share = -(-decode_rows // dp) if decode_on_chunk_ranks else 0
        through_decode = self.prefill_through_decode
        # rows x their attended context per rank, for prefill rows through the decode kernel
        context0 = terms.context_tokens * verify / dp if through_decode and decode_on_chunk_ranks else 0.0
        # the ranks holding chunks, each with its loads (`_RankLoad`, reused: stamped with this step)
        loads = self._rank_loads
        stamp = self._rank_stamp = self._rank_stamp + 1
        loaded = 0  # ranks holding chunks
        every_rows = tail_rows = decode_rows
        most = most_tail = chunk_share  # the most-loaded rank's rows
        most_new = 0  # the most prompt tokens on one rank
        for chunk in prefill:
            r = chunk.rank
            if not 0 <= r < dp:
                raise ValueError(f"prefill chunk on DP rank {r}, outside the instance's {dp} ranks")
            load = loads[r]
            if load.stamp != stamp:
                load.start(stamp, chunk_share, context0)
                loaded += 1
            new, ctx, last = chunk.new_tokens, chunk.context_tokens, chunk.last_chunk
            tail = self._tail_rows(new, ctx, last)
            if through_decode:
                load.row_context += new * (ctx + (new + 1) / 2.0)
            else:
                load.attn += self._chunk_attention_s(new, ctx, last, tail)  # on the rank's TP GPUs
            load.attn += self._glue_s(new, tail)
            if chunk.image_tokens and self.vision_on_instance:  # on the rank's GPUs: 1 / dp of the rate
                load.attn += (
                    a.vision_flops(chunk.image_tokens, chunk.image_count) * dp / self._attn_rate_prefill
                )
            rows = load.rows + new
            load.rows = rows
            if rows > most:
                most = rows
            if rows - chunk_share > most_new:
                most_new = rows - chunk_share
            load.logits += 1
            every_rows += new
            if tail:
                rows = load.tail + tail
                load.tail = rows
                if rows > most_tail:
                    most_tail = rows
                tail_rows += tail
        if every_rows == 0:
            return 0.0
        prompt_rows = every_rows - decode_rows
        # a rank without chunks: its decode rows, their attended context and (not through the decode
        # kernel) their attention; with decode on every rank that attention is the same on all of them
        share, free_context, free_attn, decode_attn = chunk_share, context0, 0.0, 0.0
        if decode_on_chunk_ranks:
            if not through_decode and batch_size:
                decode_attn = self._attn_curve(batch_size).at(terms.context_tokens / batch_size)
        elif batch_size:
            free = dp - loaded
            if free == 0:
                raise ValueError(
                    f"{batch_size} sequences decode beside chunks on every one of the {dp} DP ranks"
                )
            share = -(-decode_rows // free)
            if share > most:
                most = share
            if share > most_tail:
                most_tail = share
            if through_decode:
                free_context = terms.context_tokens * verify / free
            else:  # the curve of a decode step whose every rank holds this rank's sequences
                free_attn = self._attn_curve(-(-batch_size // free) * dp).at(
                    terms.context_tokens / batch_size
                )
        if not tail_tokens:
            tail_rows, most_tail = every_rows, most
        # one graph for every rank (the most-loaded rank's rows), or eager (0: each rank its own rows)
        padded = self.padded_rows(most * dp) // dp
        if padded == most:
            padded = 0
        else:
            every_rows = padded * dp
        padded_tail = self.padded_rows(most_tail * dp) // dp
        if padded_tail == most_tail:
            padded_tail = 0
        else:
            tail_rows = padded_tail * dp
        # the slowest rank: each rank holding a chunk, and one without (they all hold the same rows)
        slowest = -1.0
        for r in range(dp):
            load = loads[r]
            if load.stamp == stamp:
                rows = load.rows
                tail = load.tail if tail_tokens else rows
                v = self._rank_load_s(
                    load.attn, rows, load.row_context, tail, load.logits, padded, padded_tail
                )
                if v > slowest:
                    slowest = v
        if loaded < dp:
            v = self._rank_load_s(free_attn, share, free_context, share, share, padded, padded_tail)
            if v > slowest:
                slowest = v
        # the term's per-row part goes with the experts: every rank's rows spread over the ranks
        slowest += self._row_term_s(True, -(-every_rows // dp)) + self._row_term_s(False, -(-tail_rows // dp))
        if self.megamoe_fallback is not None and most > self._megamoe_cap_rows:  # over Mega MoE's cap
            experts = self._megamoe_fallback_s(every_rows, tail_rows)
        else:
            experts = self._experts_s(True, every_rows) + self._experts_s(False, tail_rows)
            experts += self._aligned_extra_s(every_rows, tail_rows)
        drafter = self._draft_share * self._pass_s(decode_rows, decode_rows) if decode_rows else 0.0
        drafter += self._draft_chunk_s(most_new, prompt_rows)
        # EP all-to-all and TP all-reduces as if every rank held the most-loaded rank's rows
        gpu = decode_attn + slowest + experts + drafter
        return self._at_power_limit(gpu, heat_s) + self._comm_s(most * dp, True)

    def _rank_load_s(
        self,
        attn: float,
        rows: int,
        row_context: float,
        tail: int,
        logits: int,
        padded: int,
        padded_tail: int,
    ) -> float:
        """One DP rank's own work in a mixed step (`_dp_mixed_s`): `attn` seconds of its chunks'
        attention, its `rows` every-token rows (their summed attended context `row_context`, for
        prefill rows through the decode kernel), `tail` decoder-tail rows and `logits` rows needing
        logits; `padded` / `padded_tail`: the rows of the step's graph (0: eager, its own rows)."""
        if self.prefill_through_decode and rows:
            attn += self._rows_attention_s(rows * self.par.dp, row_context / rows)
        return (
            attn
            + self._rank_s(True, padded if padded else rows)
            + self._rank_s(False, padded_tail if padded_tail else tail)
            + self._head_rank_s(logits)
        )

    def decode_span_s(self, batch_size: int, terms: DecodeTerms, steps: int) -> float:
        if steps <= 0:
            return 0.0
        curve = self._attn_curve(batch_size)
        mean_ctx, growth = terms.context_tokens / batch_size, terms.context_tokens_growth / batch_size
        return span_s(curve, self._fixed(batch_size), mean_ctx, growth, steps, self._decode_floor_s)

    def decode_step_end(self, batch_size: int, terms: DecodeTerms, elapsed_s: float) -> tuple[int, float]:
        curve = self._attn_curve(batch_size)
        mean_ctx, growth = terms.context_tokens / batch_size, terms.context_tokens_growth / batch_size
        return span_end(curve, self._fixed(batch_size), mean_ctx, growth, elapsed_s, self._decode_floor_s)

    def decode_breakdown(self, batch_size: int, context_tokens: float) -> dict[str, float]:
        """Seconds per component of a decode step at one context (for `sim calibrate show`)."""
        rows = batch_size * self.verified_tokens_per_step
        parts = self.pass_parts(self.padded_rows(rows))
        work = 1.0 + self._draft_share
        parts_s = {
            "attention_s": self._attn_curve(batch_size).at(context_tokens),
            "dense_gemm_s": parts.dense_gemm_s * work,
            "moe_gemm_s": parts.moe_gemm_s * work,
            "mhc_s": parts.mhc_s * work,
            "forward_term_s": (parts.forward_term_s - self._decode_cut_s) * work,
            "lm_head_s": self.head_s(rows),
            "comm_s": self._comm_s(rows),
        }
        # the GPU waits for the host's chain where it is the longer (the decode floor, sim.timing.host)
        parts_s["host_wait_s"] = max(0.0, self._decode_floor_s - sum(parts_s.values()))
        return parts_s


def build_calibrated(ctx) -> CalibratedTiming:
    """The factory's builder: the tables of the context's GPU and kernel stack, measured on it or
    carried from the H200 (sim.timing.carry), and the term a real forward pass measured beyond
    the kernels (sim.timing.forward); the `aic` stack from AIConfigurator's measurements (sim.timing.aic)."""
    from sim.timing.aic import stack_tables
    from sim.timing.forward import forward_term_of

    tables = stack_tables(ctx.hw_profile, ctx.kernels, ctx.expert_activations)
    term = forward_term_of(ctx)
    megamoe = None
    if ctx.par.moe_a2a == "megamoe" and GpuPeaks.of(ctx.hw_profile).blackwell:
        from sim.timing.megamoe import published

        megamoe = published()
    moe_module = _moe_module(ctx)
    megamoe_fallback = None
    if megamoe is not None and ctx.megamoe_cap_rows > 0:
        from sim.timing import engine_moe

        moe = ctx.arith.spec.moe
        megamoe_fallback = engine_moe.for_model(
            "triton_fp8", ctx.hw_profile, moe.expert_elements, moe.routed_experts, moe.top_k
        )
    torch_indexer = None
    # any but the kernel is one of the torch path's variants (sim.timing.torch_indexer.VARIANTS)
    if ctx.prefill_indexer != "kernel":
        from sim.timing import torch_indexer as ti

        torch_indexer = ti.for_gpu(ctx.hw_profile, ctx.prefill_indexer)
    glue = None
    if ctx.engine and ctx.engine_glue == "modules" and MODEL_KEYS.get(ctx.model_name) in GLUE_MODELS:
        glue = tables.derived(("engine_glue", ctx.engine), lambda: _fit_engine_glue(ctx, tables))
    return CalibratedTiming(
        ctx.arith,
        ctx.hw,
        ctx.par,
        ctx.eff,
        tables,
        accepted_tokens_per_step=ctx.accepted_tokens_per_step,
        draft_tokens=ctx.draft_tokens,
        verify_rows=ctx.verify_rows,
        engram_in_dram=ctx.engram_in_dram,
        vision_on_instance=ctx.vision_on_instance,
        layer_overhead_s=term.per_layer_s,
        layer_row_overhead_s=term.per_layer_row_s,
        row_buckets=ctx.row_buckets,
        prefill_through_decode=ctx.prefill_through_decode,
        prefill_cp=ctx.prefill_cp,
        host=ctx.host,
        engine_glue=glue,
        megamoe=megamoe,
        megamoe_fallback=megamoe_fallback,
        megamoe_cap_rows=ctx.megamoe_cap_rows,
        moe_module=moe_module,
        power_limit=power_limit_of(ctx.hw_profile) if ctx.power_limit else None,
        decode_layer_term=ctx.decode_layer_term,
        expert_alignment_rows=ctx.expert_alignment_rows,
        torch_indexer=torch_indexer,
    )


def _moe_module(ctx) -> MoeModule | None:
    """The measured module of the pool's MoE runner (`ctx.moe_runner`, resolved by sim.cluster.build
    pool_expert_format): Marlin's (sim.timing.marlin) or one of sim.timing.engine_moe's; None: the kernel tables (or
    Mega MoE). An InputError where the runner does not run the experts' format on the GPU."""
    from sim.timing import engine_moe

    moe, runner = ctx.arith.spec.moe, ctx.moe_runner
    if moe is None or not runner:
        return None
    needs = engine_moe.runner_misfit(runner, ctx.expert_activations, GpuPeaks.of(ctx.hw_profile).native_fp4)
    if needs is not None:
        raise InputError(
            f"the MoE runner {runner} runs {needs}",
            where="cluster.pools[].moe_runner",
            value=f"{runner} with {ctx.expert_activations} experts on {ctx.hw_profile.gpu}",
            allowed=f"auto, or {runner} with {needs}",
        )
    if runner == "marlin":
        from sim.timing.marlin import for_gpu

        return for_gpu(ctx.hw_profile)
    return engine_moe.for_model(runner, ctx.hw_profile, moe.expert_elements, moe.routed_experts, moe.top_k)


# models whose layers the engine's measured V4-Flash modules speak for (V4.1 by assumption, engine_glue doc)
GLUE_MODELS = frozenset({"V4", "V4.1"})
GLUE_REFERENCE_MODEL = "deepseek-v4-flash"  # the model AIConfigurator's modules measure


def _fit_engine_glue(ctx, tables: KernelTables) -> EngineGlue | None:
    """The engine glue of the context's engine on its GPU, fitted against V4-Flash's composition on the same
    tables (one GPU, no TP: `AttentionSideParts` carry the TP split)."""
    from sim.timing.arith import build_arith
    from sim.timing.engine_glue import engine_glue
    from sim.timing.tables import gpu_key

    arith = build_arith(GLUE_REFERENCE_MODEL)
    one = Parallelism(gpus=1, tp=1, ep=1, dp=1)
    reference = CalibratedTiming(arith, ctx.hw, one, ctx.eff, tables)
    heads = reference.spec_heads
    return engine_glue(
        gpu_key(ctx.hw_profile),
        ctx.engine,
        reference.attention_side_parts,
        lambda tp: padded_head_share(heads, tp),
    )


def _register() -> None:
    from sim.timing.factory import register_timing_model

    register_timing_model("calibrated", build_calibrated, tables_available, lambda model: model in MODEL_KEYS)


_register()
