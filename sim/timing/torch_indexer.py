"""V4.1's prefill indexer as SGLang runs it on Hopper: eager torch, timed as that path (issue 29,
docs/engines_and_validation.md section 52).

SGLang has no fused kernel for V4.1's prefill index layers on SM90 (DeepGEMM's `fp8_fp4_mqa_logits` needs SM100):
each of them runs its torch path (sglang#40574: "`_low_ratio_index_topk_torch` ... is Hopper's prefill indexer";
the Triton replacement #39086 closed unmerged). Per index layer and per request of the step it dequantises the
request's visible index keys to BF16, materialises the BF16 scores [rows, 32 heads, lc] in row chunks of 1 GiB,
reduces the heads, masks, and takes a top-512 over all `lc` columns; layer 20 also builds its candidate-block
mask; the Reindex layers score the full width before applying it. So its time is O(rows x lc), bound by HBM, and
unlike the DeepGEMM kernel sim's tables time (`indexer_prefill`) it is not a FLOP rate: sim charges these layers
the path's own time instead of their index FLOPs.

**Measured on the H100, carried to the H200** (hwprofiles/engine_modules/sglang_v41_torch_indexer_<gpu>.csv): one
index layer over one request's rows on one GPU by role (plain: layers 2/8/14; source: layer 20; consumer: the
Reindex layers 24-36), rows (16-8,192) and `lc`, the visible compressed keys of the newest row (2,048-1M). The
path is re-implemented and timed eagerly by `python3 -m kernels_bench.production.sglang_v41_indexer --out DIR`
(checked against an FP32 reference first). The H100's table is that measurement (1.36-1.47x its HBM-traffic
estimate at 128K positions and more, up to 4.6x where launches and host synchronisations dominate). No H200 was to
be had, so the H200's is the traffic estimate at its measured copy bandwidth (4.23 TB/s, its profile's K1) times
the H100's measured / estimated ratio at each point (`--derive-TBps 4.23 --scale-by` the H100 table), marked
DERIVED [D]: what the estimate misses is taken to be the same share on both Hopper GPUs. Between points the time
is interpolated geometrically in both; beyond the most rows it grows proportionally (the row chunks are
independent).

**With the fused score kernel** (`torch_fused_scores`: SGLang's opt-in `SGLANG_OPT_USE_FUSED_DSV41_INDEXER_SCORES`,
whose default is not known; docs/engines_and_validation.md section 53): the same path with each row chunk's scores
from one Triton kernel (relu, weights, head sum and mask in registers, FP32 [rows, lc] written), re-implemented and
timed by the same benchmark (`--variant fused`) on the H100; on the H200 its scoring is kept (tensor-core bound)
and the rest scaled by the copy bandwidths [D]. 5-8x faster than the default path at 32K positions and more.

Which rows a layer runs on: every prompt row of the chunk for the layers on every prompt token; the decoder tail's
rows for the decoder layers where the pool runs the tail (sim.timing.decoder_tail); under prefill context
parallelism a GPU's share of the rows against the whole context. Every attention-TP GPU runs the whole indexer
(SGLang replicates it). `lc` = the chunk's end over the layer's index-key ratio.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass
from pathlib import Path
from typing import NamedTuple

from sim.errors import InputError
from sim.model.cost import reached_positions
from sim.model.modes import on_every_prompt_token
from sim.paths import project_root
from sim.timing.interp import LOGLOG, Curve, Grid
from sim.timing.tables import gpu_key, read_table

TABLE_GPUS = ("h200", "h100")  # gpu_key of the GPUs the path has a table for
# the engine's default path, and the same path with SGLang's opt-in fused score kernel
# (SGLANG_OPT_USE_FUSED_DSV41_INDEXER_SCORES; docs/engines_and_validation.md section 53)
VARIANTS: dict[str, str] = {
    "torch": "sglang_v41_torch_indexer",
    "torch_fused_scores": "sglang_v41_torch_fused_indexer",
}
POINTS_FILES: dict[tuple[str, str], tuple[str, ...]] = {
    (variant, gpu): ("hwprofiles", "engine_modules", f"{stem}_{gpu}.csv")
    for variant, stem in VARIANTS.items()
    for gpu in TABLE_GPUS
}
ROLES = ("plain", "source", "consumer")


class IndexLayer(NamedTuple):
    """`layers` prefill index layers alike as the torch path runs them."""

    role: str  # plain | source (the candidate source) | consumer (a Reindex layer)
    ratio: int  # compression ratio of the index keys it scores
    every_token: bool  # on every prompt row (else on the decoder tail only)
    cap: int | None  # positions a row scores in sim's FLOP arithmetic (None: the full range)
    layers: int = 1


def index_layers(spec, mode: str, reindex_full_range: bool) -> tuple[IndexLayer, ...]:
    """The prefill index layers of `spec` in prefill `mode`, alike ones counted together (a step times each kind
    once), with the cap its FLOP arithmetic gives each (sim.model.cost: a Reindex layer scores at most the
    candidates unless `reindex_full_range`)."""
    cands = spec.index.candidates if spec.index is not None else None
    source = cands.source_layer if cands is not None else None
    counts: dict[IndexLayer, int] = {}
    for layer in spec.layers:
        if not layer.has_index_query:
            continue
        reindex = layer.selection == "reindex"
        role = "consumer" if reindex else "source" if layer.index == source else "plain"
        cap = cands.max_tokens if reindex and cands is not None and not reindex_full_range else None
        every = on_every_prompt_token(spec, layer.index, "attention", mode)
        kind = IndexLayer(role, spec.layers[layer.index_source].ratio, every, cap)
        counts[kind] = counts.get(kind, 0) + 1
    return tuple(kind._replace(layers=n) for kind, n in counts.items())


def chunk_index_flops(
    layers: tuple[IndexLayer, ...],
    flops_per_position: int,
    new_tokens: int,
    context_tokens: int,
    tail_rows: int,
) -> float:
    """The index FLOPs sim's arithmetic gives a chunk of `new_tokens` after `context_tokens` through `layers`
    (the every-token layers on the chunk's rows, the others on its last `tail_rows` rows), the part the torch
    path's own time replaces (sim.model.cost.prefill_cost, the same sums)."""
    end = context_tokens + new_tokens
    total = 0
    for layer in layers:
        start = context_tokens if layer.every_token else end - tail_rows
        if start < end:
            total += layer.layers * reached_positions(start, end, layer.ratio, layer.cap)
    return float(total * flops_per_position)


@dataclass(frozen=True)
class TorchIndexer:
    """The path's table (module doc): seconds of one index layer over one request's rows, by role."""

    by_role: dict[str, Grid]  # role -> (outer: lc, inner: rows), both geometric

    def layer_s(self, role: str, rows: float, lc: float) -> float:
        if rows <= 0.0:
            return 0.0
        return self.by_role[role].at(max(lc, 1.0), rows)

    def chunk_s(
        self, layers: tuple[IndexLayer, ...], rows: float, tail_rows: float, end_tokens: int
    ) -> float:
        """Seconds of one request's index layers on a GPU holding `rows` of its chunk's rows (and `tail_rows`
        of its decoder tail) whose newest row sees `end_tokens` tokens."""
        total = 0.0
        for layer in layers:
            n = rows if layer.every_token else tail_rows
            if n > 0.0:
                total += layer.layers * self.layer_s(layer.role, n, end_tokens // layer.ratio)
        return total


class IndexerPoint(NamedTuple):
    role: str
    rows: int
    lc: int
    seconds: float


def build(points: list[IndexerPoint]) -> TorchIndexer:
    """The path of its points: per role, a grid over lc of curves over rows."""
    by_role: dict[str, Grid] = {}
    for role in ROLES:
        mine = [p for p in points if p.role == role]
        if not mine:
            raise ValueError(f"no point of role {role!r}")
        lcs = sorted({p.lc for p in mine})
        curves = []
        for lc in lcs:
            col = sorted((p for p in mine if p.lc == lc), key=lambda p: p.rows)
            curves.append(Curve(tuple(float(p.rows) for p in col), tuple(p.seconds for p in col), LOGLOG))
        by_role[role] = Grid(tuple(float(x) for x in lcs), tuple(curves), LOGLOG)
    return TorchIndexer(by_role)


def load_points(path: Path | None = None, gpu: str = "h200", variant: str = "torch") -> list[IndexerPoint]:
    """The rows of `path`, else of `gpu`'s committed file of `variant` (rows that failed carry no time)."""
    path = path or project_root().joinpath(*POINTS_FILES[(variant, gpu)])
    rows = read_table(path, "SGLang's V4.1 prefill indexer table")[2]
    return [
        IndexerPoint(r["role"], int(r["rows"]), int(r["lc"]), float(r["time_us"]) * 1e-6)
        for r in rows
        if r["role"] and r["time_us"]
    ]


def table_is_derived(variant: str, gpu: str) -> bool:
    """Whether `gpu`'s committed table of `variant` is carried or estimated (its provenance says DERIVED) rather
    than measured on that GPU."""
    provenance = dict(
        read_table(project_root().joinpath(*POINTS_FILES[(variant, gpu)]), "an indexer table")[0]
    )
    return provenance.get("what", "").startswith("DERIVED")


@functools.cache
def committed(gpu: str, variant: str = "torch") -> TorchIndexer:
    """The path of `gpu`'s committed table of `variant`, built once per GPU and variant."""
    return build(load_points(gpu=gpu, variant=variant))


REFUSAL = "SGLang's V4.1 torch prefill indexer has a table for the H200 and the H100 only"
ALLOWED = "kernel (sim's DeepGEMM indexer tables), or torch / torch_fused_scores on an H200 or an H100"


def for_gpu(profile, variant: str = "torch") -> TorchIndexer:
    """The path's table of `variant` for `profile`'s GPU; an InputError for a GPU it has none for."""
    key = gpu_key(profile)
    if (variant, key) not in POINTS_FILES:
        raise InputError(
            REFUSAL,
            where="cluster.pools[].prefill_indexer",
            value=f"{variant} on {profile.gpu}",
            allowed=ALLOWED,
        )
    return committed(key, variant)
