"""Plain-data summaries of a model (and of two models side by side) for `sim model show / compare`:
dicts of numbers only, so the CLI prints them as JSON or as tables without doing arithmetic itself."""

from __future__ import annotations

from dataclasses import asdict

from .cost import decode_cost, keys_attended_per_layer, prefill_cost
from .kv import (
    PERSIST_POLICIES,
    compressor_state_bytes_per_sequence,
    global_kv_bytes_per_token,
    global_kv_bytes_per_token_by_component,
    global_kv_bytes_per_token_by_layer,
    persistent_bytes,
    swa_bytes_per_sequence,
)
from .side import (
    draft_row_flops,
    draft_step_flops,
    engram_flops_per_token,
    engram_gather_bytes_per_token,
    vision_flops_per_image,
)
from .spec import ModelSpec
from .weights import (
    active_params_decode,
    active_params_prefill,
    decode_weight_bytes_per_step,
    engram_table_bytes,
    expert_bytes,
    total_params,
    weights_bytes,
    weights_bytes_by_dtype,
    weights_bytes_by_group,
)

K = 1024
M = 1024 * 1024
COMPARE_CONTEXTS = (8 * K, 128 * K, M)  # model.md's "8K / 128K / 1M" are powers of two (§6)


def has_reindex(spec: ModelSpec) -> bool:
    return any(layer.selection == "reindex" for layer in spec.layers)


def layer_rows(spec: ModelSpec, context_tokens: int, layout: str | None = None) -> list[dict]:
    """The explicit per-layer table with KV bytes and keys attended at `context_tokens`."""
    kv = global_kv_bytes_per_token_by_layer(spec, layout)
    keys = keys_attended_per_layer(spec, context_tokens)
    engram = set(spec.engram.layers) if spec.engram else set()
    rows = []
    for layer, k, n in zip(spec.layers, kv, keys, strict=True):
        rows.append(
            {
                **layer.model_dump(),
                "half": spec.layer_half(layer.index),
                "engram": layer.index in engram,
                "main_bytes_per_token": k.main_bytes_per_token,
                "index_bytes_per_token": k.index_bytes_per_token,
                "swa_bytes_per_sequence": k.swa_bytes_per_sequence,
                "keys_attended": n,
            }
        )
    return rows


def at_context(spec: ModelSpec, context_tokens: int, layout: str | None = None) -> dict:
    """Decode, prefill (cold prompt, each mode) and session figures at one context length."""
    out = {
        "context_tokens": context_tokens,
        "beyond_max_context": context_tokens > spec.max_context_tokens,
        "decode": asdict(decode_cost(spec, context_tokens, layout=layout)),
        "prefill": {
            m: asdict(prefill_cost(spec, context_tokens, 0, m, layout=layout)) for m in spec.prefill_modes
        },
        "session_bytes": {p: persistent_bytes(spec, context_tokens, p, layout) for p in PERSIST_POLICIES},
    }
    if has_reindex(spec):
        out["decode_reindex_full_range"] = asdict(
            decode_cost(spec, context_tokens, layout=layout, reindex_full_range=True)
        )
    return out


def model_summary(spec: ModelSpec, context_tokens: int, layout: str | None = None) -> dict:
    layout_name = layout or spec.default_kv_layout
    spec.layout(layout)  # an unknown layout is an InputError before any work
    return {
        "model": spec.name,
        "display_name": spec.display_name,
        "reference_only": spec.reference_only,
        "notes": spec.notes,
        "layout": layout_name,
        "layouts": {n: lay.description for n, lay in spec.kv_layouts.items()},
        "max_context_tokens": spec.max_context_tokens,
        "prefill_modes": list(spec.prefill_modes),
        "global_kv_bytes_per_token": global_kv_bytes_per_token(spec, layout),
        "global_kv_bytes_per_token_by_component": global_kv_bytes_per_token_by_component(spec, layout),
        "global_kv_bytes_per_token_by_layout": {
            n: global_kv_bytes_per_token(spec, n) for n in spec.kv_layouts
        },
        "swa_bytes_per_sequence": swa_bytes_per_sequence(spec, layout),
        "compressor_state_bytes_per_sequence": compressor_state_bytes_per_sequence(spec),
        "weights_bytes": weights_bytes(spec),
        "weights_bytes_by_dtype": weights_bytes_by_dtype(spec),
        "weights_bytes_by_group": weights_bytes_by_group(spec),
        "engram_table_bytes": engram_table_bytes(spec),
        "expert_bytes": expert_bytes(spec),
        "total_params": total_params(spec),
        "active_params_decode": active_params_decode(spec),
        "active_params_prefill": active_params_prefill(spec),
        "active_params_prefill_by_mode": {m: active_params_prefill(spec, m) for m in spec.prefill_modes},
        "decode_weight_bytes_batch_1": decode_weight_bytes_per_step(spec, 1),
        "published": spec.published.model_dump(exclude_none=True),
        "side": {
            "engram_gather_bytes_per_token": engram_gather_bytes_per_token(spec),
            "engram_flops_per_token": engram_flops_per_token(spec),
            "draft_step_flops": draft_step_flops(spec),
            "draft_row_flops": draft_row_flops(spec),
            "vision_flops_per_max_image": vision_flops_per_image(spec, spec.vision.max_image_tokens)
            if spec.vision
            else 0.0,
        },
        "at_context": at_context(spec, context_tokens, layout),
        "layers": layer_rows(spec, context_tokens, layout),
    }


def compare_rows(a: ModelSpec, b: ModelSpec, contexts: tuple[int, ...] = COMPARE_CONTEXTS) -> list[dict]:
    """Metric rows {metric, unit, a, b, ratio b/a}; both models in their native layout and default mode."""
    rows: list[tuple[str, str, float, float]] = []

    def add(metric: str, unit: str, fn) -> None:
        rows.append((metric, unit, float(fn(a)), float(fn(b))))

    add("global KV per token", "B/token", global_kv_bytes_per_token)
    add("global KV of a 1M-token session", "B", lambda s: persistent_bytes(s, M, "global_kv"))
    add("SWA rings per sequence", "B", swa_bytes_per_sequence)
    add("compressor state per sequence", "B", compressor_state_bytes_per_sequence)
    add("weights on disk", "B", weights_bytes)
    add("Engram tables", "B", engram_table_bytes)
    add("total params", "params", total_params)
    add("active params, decode", "params", active_params_decode)
    add("active params, prefill (default mode)", "params", active_params_prefill)
    add("decode weight bytes per step, batch 1", "B", lambda s: decode_weight_bytes_per_step(s, 1))
    for L in contexts:
        tag = _ctx(L)
        add(f"decode FLOP/token @ {tag}", "FLOP", lambda s, L=L: decode_cost(s, L).total_flops)
        add(f"decode KV read/step @ {tag}", "B", lambda s, L=L: decode_cost(s, L).kv_read_bytes)
        add(f"prefill FLOP, cold {tag} prompt", "FLOP", lambda s, L=L: prefill_cost(s, L, 0).total_flops)
        add(
            f"session bytes (KV + SWA) @ {tag}",
            "B",
            lambda s, L=L: persistent_bytes(s, L, "global_kv_plus_swa"),
        )
    return [
        {"metric": m, "unit": u, "a": x, "b": y, "ratio_b_over_a": (y / x) if x else None}
        for m, u, x, y in rows
    ]


def _ctx(tokens: int) -> str:
    if tokens % M == 0:
        return f"{tokens // M}M"
    if tokens % K == 0:
        return f"{tokens // K}K"
    return str(tokens)
