"""KV-cache bytes: global (compressed + index) KV per token, SWA rings and compressor state per sequence,
and what persisting a session costs (model.md §5).

Only KV-owning layers store global KV: per token, main_row / ratio plus index_row / ratio when the layer
owns index keys (model.md §5.1). Window rings and compressor partial-group state are fixed per sequence.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from sim.errors import InputError

from .spec import ModelSpec

PERSIST_POLICIES = ("global_kv", "global_kv_plus_swa", "global_kv_plus_swa_plus_compressor")
# what an engine's prefix cache keeps of the sliding-window rows (`cache.swa_prefix_rows`, `swa_prefix_state`)
SWA_PREFIX_ROWS = ("window", "every_token")


@dataclass(frozen=True)
class LayerKvBytes:
    """Per-layer row of the KV table: global bytes stored per token and the SWA ring per sequence."""

    layer: int
    attention: str
    ratio: int
    main_bytes_per_token: float
    index_bytes_per_token: float
    swa_bytes_per_sequence: float

    @property
    def total_bytes_per_token(self) -> float:
        return self.main_bytes_per_token + self.index_bytes_per_token


def global_kv_bytes_per_token_by_layer(spec: ModelSpec, layout: str | None = None) -> list[LayerKvBytes]:
    lay = spec.layout(layout)
    rows = []
    for layer in spec.layers:
        main = lay.main_row_bytes / layer.ratio if layer.owns_kv else 0.0
        # one index key per compressed position (V4's index compressor shares its CSA ratio, §4.1)
        index = lay.index_row_bytes / layer.ratio if layer.owns_index_keys else 0.0
        swa = float(layer.window_tokens * lay.swa_row_bytes)
        rows.append(LayerKvBytes(layer.index, layer.attention, layer.ratio, main, index, swa))
    return rows


def global_kv_bytes_per_token_by_component(spec: ModelSpec, layout: str | None = None) -> dict[str, float]:
    rows = global_kv_bytes_per_token_by_layer(spec, layout)
    return {
        "main": sum(r.main_bytes_per_token for r in rows),
        "index": sum(r.index_bytes_per_token for r in rows),
    }


def global_kv_bytes_per_token(spec: ModelSpec, layout: str | None = None) -> float:
    """Bytes of global KV per context token (V4.1 890, V4 3,514.25; model.md §5.1)."""
    return sum(global_kv_bytes_per_token_by_component(spec, layout).values())


def swa_bytes_per_sequence(spec: ModelSpec, layout: str | None = None) -> float:
    """Window rings of the backbone layers, fixed per sequence (drafter rings excluded; model.md §5.2)."""
    return sum(r.swa_bytes_per_sequence for r in global_kv_bytes_per_token_by_layer(spec, layout))


def swa_window_tokens(spec: ModelSpec) -> int:
    """The sliding window every backbone layer keeps (model.md §1: 128 in V4 and V4.1)."""
    return max((layer.window_tokens for layer in spec.layers), default=0)


def swa_rebuild_tokens(spec: ModelSpec, block_tokens: int) -> int:
    """Tokens re-run to rebuild every layer's window exactly when a hit's window state is gone: the
    last layer's window depends on one more window per windowed layer below it, so the receptive
    field is W + (N - 1) W, block aligned (SGLang's V4 SWA recompute, sgl-project/sglang#31713:
    align_up(align_up(W, page) + (N - 1) W, page)) [B]. V4-Flash, 43 layers, 256-token blocks: 5,632."""
    window = swa_window_tokens(spec)
    windowed = sum(1 for layer in spec.layers if layer.window_tokens > 0)
    if not window:
        return 0

    def up(tokens: int) -> int:
        return -(-tokens // block_tokens) * block_tokens

    return up(up(window) + (windowed - 1) * window)


def swa_rows_bytes_per_token(spec: ModelSpec, layout: str | None = None) -> float:
    """Raw window rows of one token in every windowed layer (kept per token by `every_token` engines)."""
    lay = spec.layout(layout)
    return float(sum(lay.swa_row_bytes for layer in spec.layers if layer.window_tokens > 0))


@dataclass(frozen=True)
class SwaPrefixState:
    """What an engine's prefix cache keeps of the sliding-window KV, as the numbers the KV store reads.

    - `window` (the default): each layer keeps a ring of the last window per running sequence, and a
      finished sequence leaves the blocks overlapping its last window; out-of-window rows are freed.
      That is what production engines do for sliding-window models: SGLang's SWA radix cache caches only
      the last `sliding_window_size` tokens of a finished request and evicts older SWA slots during
      decode (sgl-project/sglang#17220), a node whose SWA rows are gone is a "tombstone" (#26218), and a
      DeepSeek-V4 hit whose trailing window is gone either falls back to a shorter match or, opt-in,
      recomputes the window's receptive field (#28058, #31713: `SGLANG_OPT_SWA_RECOMPUTE_WINDOW`, off by
      default); vLLM's hybrid KV cache manager reserves sliding-window slots only for the last window
      and a hit needs those (docs.vllm.ai design/hybrid_kv_cache_manager), DeepSeek-V4.1 replays the
      window (vllm-project/vllm#56227) [B]. A hit whose window is gone re-runs `rebuild_tokens`.
    - `every_token`: every token's raw window row stays in its KV block in every windowed layer (the
      served reduced model of issue 14, kernels_bench/serve/model.py): the window at any block boundary
      is in KV, so a hit recomputes nothing (`rebuild_tokens` 0), at the cost of the rows per token
      (V4-Flash: 43 x 584 B = 25 KB per token beside 3.5 KB of global KV, why no engine does it for
      the full model)."""

    rows_bytes_per_token: float  # raw window rows stored with every cached token (every_token)
    ring_bytes_per_sequence: float  # the window ring of a running or cached sequence (window)
    rebuild_tokens: int  # cached tokens re-run when a hit's window is gone (0: it never is)

    @property
    def every_token(self) -> bool:
        return self.rows_bytes_per_token > 0.0


def swa_prefix_state(
    spec: ModelSpec, rows: str, block_tokens: int, layout: str | None = None
) -> SwaPrefixState:
    """The `SwaPrefixState` of an engine keeping `rows` (one of SWA_PREFIX_ROWS) of the windowed layers."""
    if rows not in SWA_PREFIX_ROWS:
        raise InputError("unknown SWA prefix rows", where="cache.swa_prefix_rows", value=rows,
                         allowed=list(SWA_PREFIX_ROWS))  # fmt: skip
    if rows == "every_token":
        return SwaPrefixState(swa_rows_bytes_per_token(spec, layout), 0.0, 0)
    return SwaPrefixState(0.0, swa_bytes_per_sequence(spec, layout), swa_rebuild_tokens(spec, block_tokens))


def compressor_state_bytes_per_sequence(spec: ModelSpec) -> float:
    """FP32 pooling state of the pending partial group, KV and score buffers, per owner (model.md §5.2):
    V4 21 x 80 KiB + 20 x 512 KiB = 12.2 MB; V4.1 3 x 8 KiB = 24.6 KB."""
    per_element = spec.compressor_state_bytes_per_element
    total = 0
    for layer in spec.layers:
        if layer.compressor is not None:
            c = spec.compressors[layer.compressor]
            total += 2 * c.state_rows * c.state_width * per_element
        if layer.owns_index_keys and spec.index is not None:
            k = spec.index.keys
            total += 2 * k.state_rows * k.state_width * per_element
    return float(total)


def persistent_bytes(spec: ModelSpec, context_tokens, policy: str, layout: str | None = None):
    """Bytes to persist the prefix of a session of `context_tokens` tokens (int or numpy array):
    global KV per token, plus the SWA rings (and compressor state) as a fixed per-sequence cost when the
    policy keeps them. V4.1 persists global KV only (model.md §5.2); what V4 persists is unknown [D]."""
    if policy not in PERSIST_POLICIES:
        raise InputError("unknown persistence policy", where="policy", value=policy, allowed=PERSIST_POLICIES)
    tokens = np.asarray(context_tokens, dtype=np.float64)
    if np.any(tokens < 0):
        raise InputError("context_tokens must be >= 0", where="context_tokens", value=context_tokens)
    fixed = 0.0
    if policy != "global_kv":
        fixed += swa_bytes_per_sequence(spec, layout)
    if policy == "global_kv_plus_swa_plus_compressor":
        fixed += compressor_state_bytes_per_sequence(spec)
    out = tokens * global_kv_bytes_per_token(spec, layout) + np.where(tokens > 0, fixed, 0.0)
    return float(out) if out.ndim == 0 else out
