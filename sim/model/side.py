"""Side modules that cost time or memory outside the backbone arithmetic: Engram gathers, the vision
tower, and the speculative drafter (DSpark / MTP) (model.md §6.3, §8)."""

from __future__ import annotations

import math

from sim.errors import InputError

from .spec import ModelSpec
from .weights import param_blocks


def engram_gather_bytes_per_token(spec: ModelSpec) -> float:
    """Random-access table bytes gathered per token: layers x orders x heads rows x 264 B
    (V4.1: 2 x 24 x 264 = 12,672 B; model.md §6.3). 0 without Engram."""
    g = spec.engram
    if g is None:
        return 0.0
    row_bytes = g.row_dim * spec.weight_formats[g.table_dtype].bytes_per_element
    return len(g.layers) * g.rows_per_token_per_layer * row_bytes


def engram_flops_per_token(spec: ModelSpec) -> float:
    """The Engram projections (6,144 -> 25,600 in each Engram layer): 0.63 GFLOP per token for V4.1
    (model.md §6.3; hashing is integer-only). Already inside the dense FLOPs of decode and prefill."""
    g = spec.engram
    return 0.0 if g is None else 2.0 * len(g.layers) * g.projection.linear_elements


def vision_flops_per_image(spec: ModelSpec, image_tokens: int) -> float:
    """DeepSeek-ViT cost of one image of `image_tokens` backbone tokens (model.md §6.3, §8): patches =
    tokens x merge^2 (3x3 pixel unshuffle); linears 2 x patches x params; full bidirectional attention
    within the image, QK + PV = 4 x patches^2 x hidden per layer; aligner on the merged tokens.
    18.9 TFLOP at the 1,024-token cap. The image also costs `image_tokens` backbone prompt tokens."""
    v = spec.vision
    if v is None:
        if image_tokens == 0:
            return 0.0
        raise InputError(f"{spec.name} has no vision tower", where="image_tokens", value=image_tokens)
    if not 0 <= image_tokens <= v.max_image_tokens:
        raise InputError(
            "image_tokens out of range",
            where="image_tokens",
            value=image_tokens,
            allowed=f"0..{v.max_image_tokens}",
        )
    patches = image_tokens * v.merge**2
    layer_params = sum(math.prod(s) for s in v.layer_linears.values())
    linear = 2.0 * patches * (v.layers * layer_params + math.prod(v.patch_embed))
    attention = 4.0 * v.layers * patches**2 * v.hidden
    aligner = 2.0 * image_tokens * sum(math.prod(s) for s in v.aligner.values())
    return linear + attention + aligner


def _draft_block_flops(spec: ModelSpec) -> float:
    """One drafter block's pass over one row: its matmuls (attention projections, top-k routed + shared experts,
    router, mHC) and its attention over its window (model.md §6.3)."""
    d = spec.drafter
    assert d is not None
    per_block = sum(b.active_elements for b in param_blocks(spec) if b.name.startswith("drafter0."))
    return 2.0 * per_block + spec.attention.flops_per_key * d.window_tokens


def draft_row_flops(spec: ModelSpec) -> float:
    """FLOPs the drafter spends on each row the target runs (a prompt token or a verify row), keeping its own
    cache (docs/engines_and_validation.md section 33). MTP runs its block over the row (SGLang's EAGLE draft
    extend after a prefill and after each verify, vLLM's proposer over every scheduled token): 0.587 GFLOP for
    V4-Flash. DSpark projects the row's target features into each block's KV (SGLang dflash_worker_v2:
    `main_proj`, then each block's `wkv`): 0.173 GFLOP for V4.1-Flash. 0 without drafter."""
    d = spec.drafter
    if d is None:
        return 0.0
    if d.kind == "mtp":
        return _draft_block_flops(spec)
    linears = d.extra.linears if d.extra is not None else {}
    if "main_proj" not in linears or "wkv" not in spec.attention.linears:
        raise InputError(
            f"{spec.name}: a DSpark drafter's row pass needs its context projection and the blocks' KV projection",
            where="drafter.extra.linears.main_proj, attention.linears.wkv",
            value=sorted(linears),
            allowed="both present",
        )
    return 2.0 * (math.prod(linears["main_proj"]) + d.blocks * math.prod(spec.attention.linears["wkv"]))


def draft_step_flops(spec: ModelSpec, draft_tokens: int | None = None) -> float:
    """FLOPs of drafting `draft_tokens` positions for one sequence (null = the drafter's block size), beyond its
    row pass over the rows the target runs (`draft_row_flops`); the target then verifies the block as a decode
    of up to draft_tokens + 1 rows. MTP: a head per position and a block pass for every position after the
    first, whose hidden state the row pass over the last verified row gives (SGLang's draft loop runs
    `speculative_num_steps - 1` passes): 1.06 GFLOP for V4's one position. DSpark: the block of positions
    through its blocks, a head and the rank-256 Markov head per position: ~15 GFLOP for V4.1's 5 x 3 blocks,
    6.6 of it heads (model.md §6.3: approximate, [D] for DSpark's shared expert). 0 without drafter."""
    d = spec.drafter
    if d is None:
        return 0.0
    k = d.draft_tokens if draft_tokens is None else draft_tokens
    head = 2.0 * spec.vocab * spec.hidden + 2.0 * d.markov_rank * spec.vocab
    block = _draft_block_flops(spec)
    if d.kind == "mtp":
        return k * head + max(k - 1, 0) * block
    return k * (d.blocks * block + head)
