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


def draft_step_flops(spec: ModelSpec, draft_tokens: int | None = None) -> float:
    """FLOPs of one draft step of `draft_tokens` positions (null = the drafter's block size; drafting
    only: the target then verifies the block as a decode of up to draft_tokens + 1 rows). Per drafted position and block: the block's matmuls (attention projections,
    top-k routed + shared experts, router, mHC) + attention over its window; per position the LM head and
    the Markov head (rank 256). DSpark (V4.1, 5 positions x 3 blocks) ~15 GFLOP incl. 6.6 GFLOP of head;
    MTP (V4) ~1.65 GFLOP (model.md §6.3: approximate, [D] for DSpark's shared expert). 0 without drafter."""
    d = spec.drafter
    if d is None:
        return 0.0
    per_block = sum(b.active_elements for b in param_blocks(spec) if b.name.startswith("drafter0."))
    block = 2.0 * per_block + spec.attention.flops_per_key * d.window_tokens
    head = 2.0 * spec.vocab * spec.hidden + 2.0 * d.markov_rank * spec.vocab
    return (d.draft_tokens if draft_tokens is None else draft_tokens) * (d.blocks * block + head)
