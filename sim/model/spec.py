"""Model specs as data: one YAML file per model in `specs/`, loaded into frozen, strict pydantic models.

A YAML file may describe its layers compactly (`layer_groups`, each naming a set of layers such as
"2-42/2"); loading expands them into the explicit per-layer table `ModelSpec.layers` and checks that the
cross-layer references (KV source, index-key source, reused selection) are consistent. A later checkpoint of a
model names it as `base:` and gives only the top-level sections it changes; each replaces the base's section
whole (no merging inside a section), so what the file holds is exactly what differs.
Every constant in the YAML files cites its section of model.md (shared/reference/model.md).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from pathlib import Path
from typing import Literal, TypeVar

from pydantic import BaseModel, ConfigDict, Field, PrivateAttr, ValidationError, model_validator

from sim.config.yamlio import parse_yaml
from sim.errors import InputError

SPECS_DIR = Path(__file__).resolve().parent / "specs"

T = TypeVar("T")
AttentionKind = Literal["swa", "csa", "hca", "csa2", "dense", "dsa"]
Selection = Literal["none", "full", "reindex", "reuse"]
PrefillMode = Literal["full", "ced", "engine", "full40"]


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True, strict=True)


class WeightFormat(_Strict):
    """Storage rule of one weight dtype: `value_bits` per element plus `scale_bytes` per `block_elements`."""

    value_bits: int = Field(gt=0)
    scale_bytes: int = Field(default=0, ge=0)
    block_elements: int = Field(default=1, gt=0)

    @property
    def bytes_per_element(self) -> float:
        return self.value_bits / 8 + self.scale_bytes / self.block_elements


class Component(_Strict):
    """A group of weights stored in one dtype: `linears` are matmuls ([in, out] or [in, out, groups] for a
    block-diagonal one; elements = product), `tables` are lookups (no FLOPs)."""

    dtype: str
    linears: dict[str, list[int]] = Field(default_factory=dict)
    tables: dict[str, list[int]] = Field(default_factory=dict)

    @property
    def linear_elements(self) -> int:
        return sum(math.prod(s) for s in self.linears.values())

    @property
    def table_elements(self) -> int:
        return sum(math.prod(s) for s in self.tables.values())

    @property
    def elements(self) -> int:
        return self.linear_elements + self.table_elements


class Compressor(Component):
    """Per-owner-layer compressor; `state_rows` x `state_width` is each of its two FP32 pooling buffers
    (KV and score) kept per sequence for the pending partial group (0 for a plain projection)."""

    kind: Literal["overlap", "pool", "projection"]
    state_rows: int = Field(ge=0)
    state_width: int = Field(ge=0)


class Attention(Component):
    heads: int = Field(gt=0)
    qk_head_dim: int = Field(gt=0)
    v_head_dim: int = Field(gt=0)

    @property
    def flops_per_key(self) -> int:
        """QK plus PV for one attended key and one query, 2 FLOPs per MAC (model.md §6)."""
        return 2 * self.heads * (self.qk_head_dim + self.v_head_dim)


class IndexKeys(Component):
    state_rows: int = Field(default=0, ge=0)
    state_width: int = Field(default=0, ge=0)


class Candidates(_Strict):
    """Hierarchical indexer: the source layer keeps `blocks_kept` blocks of `block_tokens` positions;
    Reindex layers score only inside them (model.md §3)."""

    source_layer: int = Field(ge=0)
    blocks_kept: int = Field(gt=0)
    block_tokens: int = Field(gt=0)

    @property
    def max_tokens(self) -> int:
        return self.blocks_kept * self.block_tokens


class Index(_Strict):
    heads: int = Field(gt=0)
    head_dim: int = Field(gt=0)
    query: Component
    weights: Component
    keys: IndexKeys
    candidates: Candidates | None = None

    @property
    def flops_per_position(self) -> int:
        """Index scoring per scored compressed position: 2 x heads x head_dim (model.md §6)."""
        return 2 * self.heads * self.head_dim


class Moe(_Strict):
    routed_experts: int = Field(gt=0)
    shared_experts: int = Field(ge=0)
    top_k: int = Field(gt=0)
    expert_dtype: str
    shared_dtype: str
    router_dtype: str
    expert_linears: dict[str, list[int]]
    hash_table_dtype: str | None = None
    # an FP8 checkpoint of the routed experts, which GPUs without FP4 MMAs serve (its source); None: none published
    fp8_checkpoint: str | None = None

    @property
    def expert_elements(self) -> int:
        return sum(math.prod(s) for s in self.expert_linears.values())


class Mhc(Component):
    copies: int = Field(gt=0)
    sinkhorn_iterations: int = Field(gt=0)
    single_pass: bool


class Engram(_Strict):
    layers: list[int]
    ngram_orders: list[int]
    heads: int = Field(gt=0)
    row_dim: int = Field(gt=0)
    table_rows: list[int]  # one table per Engram layer
    table_dtype: str
    projection: Component

    @property
    def rows_per_token_per_layer(self) -> int:
        return len(self.ngram_orders) * self.heads


class Drafter(_Strict):
    """Speculative drafter: DSpark (V4.1, block of `draft_tokens`) or MTP (V4, one token)."""

    kind: Literal["dspark", "mtp"]
    blocks: int = Field(gt=0)
    draft_tokens: int = Field(gt=0)
    window_tokens: int = Field(ge=0)
    routed_experts: int = Field(gt=0)
    top_k: int = Field(gt=0)
    shared_experts: int = Field(ge=0)
    extra: Component | None = None
    markov_rank: int = Field(default=0, ge=0)
    target_layers: list[int] = Field(default_factory=list)


class Vision(_Strict):
    layers: int = Field(gt=0)
    hidden: int = Field(gt=0)
    heads: int = Field(gt=0)
    patch: int = Field(gt=0)
    merge: int = Field(gt=0)
    max_image_tokens: int = Field(gt=0)
    dtype: str
    layer_linears: dict[str, list[int]]
    patch_embed: list[int]
    aligner: dict[str, list[int]]


class Ced(_Strict):
    """Causal encoder-decoder split of V4.1 (model.md §3, §6.2)."""

    encoder_layers: int = Field(gt=0)  # layers 0 .. encoder_layers-1
    decoder_source_layer: int = Field(ge=0)  # its compressor + index-key projection run on every prompt token
    tail_tokens: int = Field(gt=0)  # decoder SWA bounded replay


class KvLayout(_Strict):
    """Byte layout of each cache row, as named components that sum to the row size."""

    description: str
    main_row: dict[str, int]
    swa_row: dict[str, int] = Field(default_factory=dict)
    index_row: dict[str, int] = Field(default_factory=dict)

    @property
    def main_row_bytes(self) -> int:
        return sum(self.main_row.values())

    @property
    def swa_row_bytes(self) -> int:
        return sum(self.swa_row.values())

    @property
    def index_row_bytes(self) -> int:
        return sum(self.index_row.values())


class Published(_Strict):
    """Figures published by DeepSeek or read by third parties, shown next to the derived ones."""

    weights_bytes: float | None = None
    total_params: float | None = None
    active_params_decode: float | None = None
    active_params_prefill: float | None = None
    global_kv_bytes_per_token: float | None = None


class LayerSpec(_Strict):
    """One backbone layer, explicit. `kv_source` / `index_source` / `selection_source` are layer indices."""

    index: int = Field(ge=0)
    attention: AttentionKind
    window_tokens: int = Field(ge=0)
    ratio: int = Field(ge=0)  # compression ratio of the global KV it reads; 0 = none (SWA only)
    top_k: int | None = Field(default=None, gt=0)  # None: attends every compressed entry
    selection: Selection = "none"
    kv_source: int | None = None
    index_source: int | None = None
    selection_source: int | None = None
    compressor: str | None = None
    mlp: Literal["moe", "moe_hash", "dense"]

    @property
    def owns_kv(self) -> bool:
        return self.kv_source == self.index

    @property
    def owns_index_keys(self) -> bool:
        return self.index_source == self.index

    @property
    def has_index_query(self) -> bool:
        return self.selection in ("full", "reindex")


class LayerGroup(_Strict):
    """YAML shorthand: `layers` ("a-b", "a-b/step", an int, or a list of those) share the other fields;
    a source given as "self" means each layer itself."""

    layers: int | str | list[int | str]
    attention: AttentionKind
    window_tokens: int = 0
    ratio: int = 0
    top_k: int | None = None
    selection: Selection = "none"
    kv_source: int | Literal["self"] | None = None
    index_source: int | Literal["self"] | None = None
    selection_source: int | Literal["self"] | None = None
    compressor: str | None = None
    mlp: Literal["moe", "moe_hash", "dense"]


class ModelSpec(_Strict):
    name: str
    display_name: str
    reference_only: bool
    notes: str = ""
    hidden: int = Field(gt=0)
    vocab: int = Field(gt=0)
    max_context_tokens: int = Field(gt=0)
    weight_formats: dict[str, WeightFormat]
    kv_layouts: dict[str, KvLayout]
    default_kv_layout: str
    compressor_state_bytes_per_element: int = Field(default=4, gt=0)
    attention: Attention
    index: Index | None = None
    compressors: dict[str, Compressor] = Field(default_factory=dict)
    moe: Moe | None = None
    dense_mlp: Component | None = None
    mhc: Mhc | None = None
    embedding_dtype: str
    head_dtype: str
    engram: Engram | None = None
    drafter: Drafter | None = None
    vision: Vision | None = None
    ced: Ced | None = None
    prefill_modes: list[PrefillMode]
    published: Published = Published()
    layers: list[LayerSpec]
    _memo: dict[str, object] = PrivateAttr(default_factory=dict)

    def memo(self, key: str, build: Callable[[ModelSpec], T]) -> T:
        """Derived tables computed once per spec (the spec is frozen, so they never go stale)."""
        if key not in self._memo:
            self._memo[key] = build(self)
        return self._memo[key]  # type: ignore[return-value]

    @model_validator(mode="after")
    def _consistent(self) -> ModelSpec:
        problems = list(_check(self))
        if problems:
            raise ValueError("; ".join(problems))
        return self

    @property
    def n_layers(self) -> int:
        return len(self.layers)

    @property
    def default_prefill_mode(self) -> str:
        return self.prefill_modes[0]

    def layout(self, name: str | None) -> KvLayout:
        """The named KV layout (None: the model's native one); an unknown name is an InputError."""
        key = self.default_kv_layout if name is None else name
        if key not in self.kv_layouts:
            raise InputError(
                f"unknown KV layout for {self.name}",
                where="layout",
                value=name,
                allowed=list(self.kv_layouts),
            )
        return self.kv_layouts[key]

    def layer_half(self, i: int) -> str:
        """'encoder' / 'decoder' for a CED model, '' otherwise."""
        if self.ced is None:
            return ""
        return "encoder" if i < self.ced.encoder_layers else "decoder"


def _check(spec: ModelSpec):
    """Cross-field rules; yields one message per problem."""
    dtypes = set(spec.weight_formats)
    used = [spec.attention.dtype, spec.embedding_dtype, spec.head_dtype]
    used += [c.dtype for c in spec.compressors.values()]
    if spec.index:
        used += [spec.index.query.dtype, spec.index.weights.dtype, spec.index.keys.dtype]
    if spec.moe:
        used += [spec.moe.expert_dtype, spec.moe.shared_dtype, spec.moe.router_dtype]
        used += [spec.moe.hash_table_dtype] if spec.moe.hash_table_dtype else []
    if spec.dense_mlp:
        used.append(spec.dense_mlp.dtype)
    if spec.mhc:
        used.append(spec.mhc.dtype)
    if spec.engram:
        used += [spec.engram.table_dtype, spec.engram.projection.dtype]
    if spec.drafter and spec.drafter.extra:
        used.append(spec.drafter.extra.dtype)
    if spec.vision:
        used.append(spec.vision.dtype)
    for d in used:
        if d not in dtypes:
            yield f"dtype {d!r} has no entry in weight_formats"
    if spec.default_kv_layout not in spec.kv_layouts:
        yield f"default_kv_layout {spec.default_kv_layout!r} is not in kv_layouts"
    if [layer.index for layer in spec.layers] != list(range(len(spec.layers))):
        yield "layers must cover 0..n-1 exactly once"
        return
    for layer in spec.layers:
        yield from (f"layer {layer.index}: {m}" for m in _check_layer(spec, layer))
    if spec.engram and len(spec.engram.layers) != len(spec.engram.table_rows):
        yield "engram: one table_rows entry per Engram layer"
    if spec.ced:
        if "ced" not in spec.prefill_modes:
            yield "a model with a ced section lists 'ced' in prefill_modes"
        if spec.ced.decoder_source_layer != spec.ced.encoder_layers:
            yield "ced.decoder_source_layer must be the first decoder layer"
    elif set(spec.prefill_modes) != {"full"}:
        yield "a model without a ced section has the single prefill mode 'full'"


def _check_layer(spec: ModelSpec, layer: LayerSpec):
    n = len(spec.layers)
    if layer.ratio > 0:
        src = layer.kv_source
        if src is None or not 0 <= src <= layer.index:
            yield "ratio > 0 needs a kv_source at or before the layer"
        elif spec.layers[src].kv_source != src or spec.layers[src].ratio != layer.ratio:
            yield f"kv_source {src} does not own KV of ratio {layer.ratio}"
    elif layer.kv_source is not None or layer.selection != "none":
        yield "a layer without global KV (ratio 0) has no kv_source or selection"
    if layer.window_tokens > 0 and not all(lay.swa_row for lay in spec.kv_layouts.values()):
        yield "a windowed layer needs swa_row in every KV layout"
    if layer.compressor is not None and layer.compressor not in spec.compressors:
        yield f"unknown compressor {layer.compressor!r}"
    if layer.owns_kv and layer.ratio > 1 and layer.compressor is None:
        yield "a layer owning KV of ratio > 1 needs a compressor"
    if layer.has_index_query:
        if spec.index is None or layer.top_k is None:
            yield "a scoring layer needs the model's index section and a top_k"
        src = layer.index_source
        if src is None or not 0 <= src < n or spec.layers[src].index_source != src:
            yield "index_source must name a layer that owns index keys"
        if layer.selection == "reindex" and (spec.index is None or spec.index.candidates is None):
            yield "reindex needs index.candidates"
    elif layer.selection == "reuse":
        src = layer.selection_source
        if src is None or not 0 <= src < layer.index or not spec.layers[src].has_index_query:
            yield "reuse needs a selection_source that scores"
    elif layer.top_k is not None:
        yield "top_k without a selection"
    if layer.mlp.startswith("moe") and spec.moe is None or layer.mlp == "dense" and spec.dense_mlp is None:
        yield f"mlp {layer.mlp!r} needs the matching moe / dense_mlp section"


def _expand_indices(spec: int | str | list[int | str]) -> list[int]:
    items = spec if isinstance(spec, list) else [spec]
    out: list[int] = []
    for item in items:
        if isinstance(item, int):
            out.append(item)
            continue
        body, _, step = item.partition("/")
        lo, _, hi = body.partition("-")
        out.extend(range(int(lo), int(hi or lo) + 1, int(step or 1)))
    return out


def _expand_layers(groups: list[LayerGroup]) -> list[dict]:
    """Layer groups -> one dict per layer (sorted by index); duplicates are caught by the spec check."""
    rows = []
    for g in groups:
        fields = g.model_dump(exclude={"layers"})
        for i in _expand_indices(g.layers):
            row = {k: (i if v == "self" else v) for k, v in fields.items()}
            rows.append({"index": i, **row})
    return sorted(rows, key=lambda r: r["index"])


def model_names() -> list[str]:
    """Names of the models with a spec file, sorted."""
    return sorted(p.stem for p in SPECS_DIR.glob("*.yaml"))


def load_model(name: str) -> ModelSpec:
    """Load and validate `specs/<name>.yaml`; an unknown name or an invalid file is an InputError."""
    names = model_names()
    if name not in names:
        raise InputError("unknown model", where="model", value=name, allowed=names)
    path = SPECS_DIR / f"{name}.yaml"
    raw = _with_base(parse_yaml(path.read_text(), file=str(path)), str(path), names)
    return parse_model(raw, file=str(path))


def _with_base(raw: object, file: str, names: list[str]) -> object:
    """A spec naming `base:` as the base's sections with its own replacing them whole; one level only (a base
    is a complete spec), so a file never depends on a chain."""
    if not isinstance(raw, dict) or "base" not in raw:
        return raw
    base = raw["base"]
    if base not in names:
        raise InputError("unknown base model", file=file, where="base", value=base, allowed=names)
    base_path = SPECS_DIR / f"{base}.yaml"
    base_raw = parse_yaml(base_path.read_text(), file=str(base_path))
    if not isinstance(base_raw, dict) or "base" in base_raw:
        raise InputError("a base must be a complete spec, not one with a base of its own", file=file,
                         where="base", value=base, allowed="a spec without `base:`")  # fmt: skip
    return {**base_raw, **{k: v for k, v in raw.items() if k != "base"}}


def parse_model(raw: object, *, file: str | None = None) -> ModelSpec:
    """Validate a spec already read from YAML (tests build modified specs through this)."""
    if not isinstance(raw, dict) or "layer_groups" not in raw:
        raise InputError("a model spec is a mapping with layer_groups", file=file)
    body = {k: v for k, v in raw.items() if k != "layer_groups"}
    try:
        groups = [LayerGroup.model_validate(g) for g in raw["layer_groups"]]
        return ModelSpec.model_validate({**body, "layers": _expand_layers(groups)})
    except ValidationError as err:
        lines = [f"{'.'.join(str(p) for p in e['loc']) or 'spec'}: {e['msg']}" for e in err.errors()]
        raise InputError.many(lines, file=file) from None
