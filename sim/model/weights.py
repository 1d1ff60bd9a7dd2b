"""Weights: the parameter inventory of a spec (one block per component and layer), bytes on disk by dtype
and by model.md §7.1 group, active parameters, and the weight bytes a step touches (model.md §7).

Element counts are products of the linear shapes in the spec; bytes apply the spec's storage rule per
dtype (e.g. MXFP4 0.53125 B, FP8 with 32x32 ue8m0 blocks 1.000977 B). Norms and biases are ignored.
"""

from __future__ import annotations

import math
from collections import Counter
from dataclasses import dataclass

import numpy as np

from .modes import on_every_prompt_token, resolve_prefill_mode
from .spec import ModelSpec


@dataclass(frozen=True)
class ParamBlock:
    """One group of weights. `active_elements` are the matmul elements one token uses (routed experts:
    top_k of them; lookups such as embeddings and tables: 0)."""

    name: str
    part: str  # backbone | embedding | head | drafter | vision
    layer: int | None
    dtype: str
    elements: int
    active_elements: int
    experts: int = 0  # routed blocks only: experts in the block and experts per token
    top_k: int = 0


def param_blocks(spec: ModelSpec) -> tuple[ParamBlock, ...]:
    """The full inventory: backbone layers in order (Engram tables with their layer), then embedding, head,
    drafter, vision."""
    return spec.memo("param_blocks", _build_blocks)


def _build_blocks(spec: ModelSpec) -> tuple[ParamBlock, ...]:
    blocks: list[ParamBlock] = []
    for layer in spec.layers:
        blocks += _layer_blocks(spec, layer.index)
    table = spec.vocab * spec.hidden
    blocks.append(ParamBlock("embedding", "embedding", None, spec.embedding_dtype, table, 0))
    blocks.append(ParamBlock("head", "head", None, spec.head_dtype, table, table))
    if spec.drafter:
        blocks += _drafter_blocks(spec)
    if spec.vision:
        v = spec.vision
        per_layer = sum(math.prod(s) for s in v.layer_linears.values())
        n = v.layers * per_layer + math.prod(v.patch_embed) + sum(math.prod(s) for s in v.aligner.values())
        blocks.append(ParamBlock("vision", "vision", None, v.dtype, n, 0))
    return tuple(blocks)


def _moe_blocks(spec: ModelSpec, part: str, layer: int | None, experts: int, top_k: int, shared: int):
    m = spec.moe
    e = m.expert_elements
    return [
        ParamBlock("shared_expert", part, layer, m.shared_dtype, shared * e, shared * e),
        ParamBlock("routed_experts", part, layer, m.expert_dtype, experts * e, top_k * e, experts, top_k),
        ParamBlock("router", part, layer, m.router_dtype, spec.hidden * experts, spec.hidden * experts),
    ]


def _layer_blocks(spec: ModelSpec, i: int) -> list[ParamBlock]:
    layer = spec.layers[i]
    a = spec.attention.linear_elements
    out = [ParamBlock("attention", "backbone", i, spec.attention.dtype, a, a)]
    if layer.mlp == "dense":
        d = spec.dense_mlp.linear_elements
        out.append(ParamBlock("dense_mlp", "backbone", i, spec.dense_mlp.dtype, d, d))
    else:
        m = spec.moe
        out += _moe_blocks(spec, "backbone", i, m.routed_experts, m.top_k, m.shared_experts)
        if layer.mlp == "moe_hash":  # token id -> experts table (model.md §2)
            out.append(ParamBlock("hash_table", "backbone", i, m.hash_table_dtype, spec.vocab * m.top_k, 0))
    if spec.mhc:
        out.append(
            ParamBlock("mhc", "backbone", i, spec.mhc.dtype, spec.mhc.elements, spec.mhc.linear_elements)
        )
    if layer.compressor:
        c = spec.compressors[layer.compressor]
        out.append(ParamBlock("compressor", "backbone", i, c.dtype, c.elements, c.linear_elements))
    if layer.has_index_query:
        for name, comp in (("index_query", spec.index.query), ("index_weights", spec.index.weights)):
            out.append(ParamBlock(name, "backbone", i, comp.dtype, comp.elements, comp.linear_elements))
    if layer.owns_index_keys:
        k = spec.index.keys
        out.append(ParamBlock("index_keys", "backbone", i, k.dtype, k.elements, k.linear_elements))
    if spec.engram and i in spec.engram.layers:
        g = spec.engram
        p = g.projection
        out.append(ParamBlock("engram_projection", "backbone", i, p.dtype, p.elements, p.linear_elements))
        rows = g.table_rows[g.layers.index(i)]
        out.append(ParamBlock("engram_table", "backbone", i, g.table_dtype, rows * g.row_dim, 0))
    return out


def _drafter_blocks(spec: ModelSpec) -> list[ParamBlock]:
    """Drafter blocks: backbone-shaped attention and mHC with their own MoE (DSpark 128 x top-3, §8)."""
    d = spec.drafter
    a = spec.attention.linear_elements
    out = []
    for b in range(d.blocks):
        name = f"drafter{b}"
        out.append(ParamBlock(f"{name}.attention", "drafter", None, spec.attention.dtype, a, a))
        moe = _moe_blocks(spec, "drafter", None, d.routed_experts, d.top_k, d.shared_experts)
        out += [ParamBlock(f"{name}.{m.name}", *_tail(m)) for m in moe]
        if spec.mhc:
            out.append(
                ParamBlock(
                    f"{name}.mhc",
                    "drafter",
                    None,
                    spec.mhc.dtype,
                    spec.mhc.elements,
                    spec.mhc.linear_elements,
                )
            )
    if d.extra:
        x = d.extra
        out.append(ParamBlock("drafter.extra", "drafter", None, x.dtype, x.elements, x.linear_elements))
    return out


def _tail(b: ParamBlock) -> tuple:
    return (b.part, b.layer, b.dtype, b.elements, b.active_elements, b.experts, b.top_k)


def block_bytes(spec: ModelSpec, b: ParamBlock) -> float:
    return b.elements * spec.weight_formats[b.dtype].bytes_per_element


def expert_bytes(spec: ModelSpec) -> float:
    """Bytes of one routed expert (V4.1 18.80 MB, V4 13.37 MB; model.md §7.1)."""
    if spec.moe is None:
        return 0.0
    return spec.moe.expert_elements * spec.weight_formats[spec.moe.expert_dtype].bytes_per_element


def weights_bytes(spec: ModelSpec) -> float:
    """All weights on disk, derived (V4.1 510.36 GB, V4 160.17 GB; model.md §7.1)."""
    return sum(block_bytes(spec, b) for b in param_blocks(spec))


def weights_bytes_by_dtype(spec: ModelSpec) -> dict[str, float]:
    out: dict[str, float] = {}
    for b in param_blocks(spec):
        out[b.dtype] = out.get(b.dtype, 0.0) + block_bytes(spec, b)
    return out


def _group(b: ParamBlock) -> str:
    if b.name.endswith("routed_experts"):
        return "drafter_routed_experts" if b.part == "drafter" else "routed_experts"
    if b.name == "engram_table":
        return "engram_tables"
    if b.part == "vision":
        return "vision"
    return f"other_{b.dtype}"


def weights_bytes_by_group(spec: ModelSpec) -> dict[str, float]:
    """Groups as in model.md §7.1: routed experts, drafter experts, Engram tables, vision, then the rest by
    dtype (V4's FP32 row holds both its compressors and mHC)."""
    out: dict[str, float] = {}
    for b in param_blocks(spec):
        out[_group(b)] = out.get(_group(b), 0.0) + block_bytes(spec, b)
    return out


def engram_table_bytes(spec: ModelSpec) -> float:
    """Engram n-gram tables (V4.1 202.76 GB, §7.1); 0 for models without Engram."""
    return weights_bytes_by_group(spec).get("engram_tables", 0.0)


def total_params(spec: ModelSpec) -> float:
    return float(sum(b.elements for b in param_blocks(spec)))


@dataclass(frozen=True)
class RowClass:
    """The backbone matmul blocks that run on the same rows: in decode all of them; in a prefill mode
    either those on every prompt token or those on the decoder tail only."""

    active_elements: int
    dense_bytes: float  # non-routed blocks, read once if the class runs any row
    routed: tuple[tuple[int, int, float, int], ...]  # (experts, top_k, bytes per expert, MoE layers alike)

    def touched_bytes(self, rows):
        """Weight bytes read for `rows` rows (int or array): routed experts by expected coverage."""
        rows = np.asarray(rows, dtype=np.float64)
        out = np.where(rows > 0, self.dense_bytes, 0.0)
        for experts, top_k, nbytes, layers in self.routed:
            out = out + layers * expected_experts_touched(experts, top_k, rows) * nbytes
        return out


def row_classes(spec: ModelSpec, mode: str) -> dict[bool, RowClass]:
    """{True: blocks on every prompt token, False: decoder-tail blocks} for a resolved prefill mode."""
    return spec.memo(f"row_classes:{mode}", lambda s: _build_row_classes(s, mode))


def _build_row_classes(spec: ModelSpec, mode: str) -> dict[bool, RowClass]:
    out = {}
    for every in (True, False):
        mine = [
            b
            for b in param_blocks(spec)
            if b.part == "backbone"
            and b.active_elements
            and on_every_prompt_token(spec, b.layer, b.name, mode) == every
        ]
        dense = sum(block_bytes(spec, b) for b in mine if not b.experts)
        routed = Counter((b.experts, b.top_k, block_bytes(spec, b) / b.experts) for b in mine if b.experts)
        rows = tuple((*k, n) for k, n in routed.items())
        out[every] = RowClass(sum(b.active_elements for b in mine), dense, rows)
    return out


def head_bytes(spec: ModelSpec) -> float:
    return spec.vocab * spec.hidden * spec.weight_formats[spec.head_dtype].bytes_per_element


def active_params_decode(spec: ModelSpec) -> float:
    """Matmul parameters per decoded token, LM head and Engram projections included, drafter excluded
    (V4 13.27B, V4.1 16.13B; model.md §1)."""
    classes = row_classes(spec, spec.default_prefill_mode)
    return float(sum(c.active_elements for c in classes.values()) + spec.vocab * spec.hidden)


def active_params_prefill(spec: ModelSpec, mode: str | None = None) -> float:
    """Matmul parameters per prompt token in `mode`, no LM head (V4.1 CED 7.90B, full-40 15.47B; V4 12.74B)."""
    return float(row_classes(spec, resolve_prefill_mode(spec, mode))[True].active_elements)


def expected_experts_touched(experts: int, top_k: int, rows):
    """Expected distinct experts per layer when `rows` tokens each pick top_k of `experts`, routing assumed
    uniform and independent across tokens: E * (1 - (1 - k/E)^rows). rows = 1 gives k."""
    rows = np.asarray(rows, dtype=np.float64)
    return experts * (1.0 - (1.0 - top_k / experts) ** rows)


def decode_weight_bytes_per_step(spec: ModelSpec, batch_size):
    """Weights read by one decode step of `batch_size` sequences (int or array; model.md §7.2: V4.1 13.0 GB,
    V4 11.8 GB at batch 1): every backbone matmul block once, routed experts E(1 - (1 - k/E)^B) per MoE
    layer, plus the LM head. Lookups (embedding rows, 12.7 KB/token of Engram rows, hash tables) and the
    drafter are not included."""
    classes = row_classes(spec, spec.default_prefill_mode)
    out = sum(c.touched_bytes(batch_size) for c in classes.values()) + head_bytes(spec)
    return float(out) if np.ndim(out) == 0 else out
