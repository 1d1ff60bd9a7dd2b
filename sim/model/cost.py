"""Decode and prefill cost: FLOPs split dense / attention / index, KV bytes read or written, weight bytes
(model.md §5.3, §6.1, §6.2).

A token at position p (p tokens before it) costs what a decode step at context L = p costs, minus the LM
head. Every attention-side quantity of a layer has the form min(cap, floor(L / r)):
- window keys: r = 1, cap = window (SWA 128);
- compressed keys attended: r = ratio, cap = top_k (none for HCA and dense attention);
- index positions scored: r = ratio of the index-key owner, cap = none for a Full indexer, the candidate
  set (2,048 blocks x 8 = 16,384) for a Reindex layer unless it scores the full range (model.md §6.1).
Sums of these over a chunk of positions use closed forms, so a 1M-token prefill costs no more than a
short one to evaluate.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from sim.errors import InputError

from .modes import on_every_prompt_token, resolve_prefill_mode
from .spec import ModelSpec
from .weights import active_params_decode, head_bytes, row_classes

Num = float | np.ndarray


@dataclass(frozen=True)
class DecodeCost:
    """One decode step of one sequence at context L (floats, or arrays shaped like the contexts).
    Weights are shared by the batch: see decode_weight_bytes_per_step."""

    dense_flops: Num
    attention_flops: Num
    index_flops: Num
    total_flops: Num
    kv_read_bytes: Num  # swa + compressed + index
    swa_read_bytes: Num
    compressed_read_bytes: Num
    index_read_bytes: Num
    keys_attended: Num  # summed over layers
    positions_scored: Num  # summed over layers


@dataclass(frozen=True)
class PrefillCost:
    """One prefill chunk of `new_tokens` after `cached_tokens` (floats)."""

    dense_flops: float
    attention_flops: float
    index_flops: float
    total_flops: float
    kv_write_bytes: float  # global KV (main + index rows) completed by this chunk
    swa_write_bytes: float  # window-ring rows left by this chunk (at most window per layer)
    weight_bytes: float  # weights touched once per chunk, routed experts by expected coverage
    every_token_rows: int  # rows through the every-token layers (new tokens + SWA replay)
    tail_rows: int  # rows through the tail-only layers (V4.1 decoder bounded replay)


@dataclass(frozen=True)
class _Term:
    """`layers` layers each contribute min(cap, floor(L / ratio)) keys or positions."""

    category: str  # window | compressed | index
    ratio: int
    cap: int | None
    layers: int
    every_token: bool  # prefill: on every prompt token (else decoder tail only)


def _terms(spec: ModelSpec, mode: str, reindex_full_range: bool) -> tuple[_Term, ...]:
    key = f"terms:{mode}:{reindex_full_range}"
    return spec.memo(key, lambda s: _build_terms(s, mode, reindex_full_range))


def _build_terms(spec: ModelSpec, mode: str, reindex_full_range: bool) -> tuple[_Term, ...]:
    counts: dict[tuple, int] = {}
    for layer in spec.layers:
        every = on_every_prompt_token(spec, layer.index, "attention", mode)
        found = []
        if layer.window_tokens:
            found.append(("window", 1, layer.window_tokens))
        if layer.ratio:
            found.append(("compressed", layer.ratio, layer.top_k))
        if layer.has_index_query:
            capped = layer.selection == "reindex" and not reindex_full_range
            cap = spec.index.candidates.max_tokens if capped else None
            found.append(("index", spec.layers[layer.index_source].ratio, cap))
        for t in found:
            counts[(*t, every)] = counts.get((*t, every), 0) + 1
    return tuple(_Term(c, r, cap, n, every) for (c, r, cap, every), n in counts.items())


def _kv_owners(spec: ModelSpec) -> tuple[tuple[int, int, int], ...]:
    """(ratio, layers owning main rows, layers owning index keys) for each ratio with owners."""

    def build(s: ModelSpec):
        counts: dict[int, list[int]] = {}
        for layer in s.layers:
            if layer.owns_kv or layer.owns_index_keys:
                c = counts.setdefault(layer.ratio, [0, 0])
                c[0] += layer.owns_kv
                c[1] += layer.owns_index_keys
        return tuple((r, m, i) for r, (m, i) in counts.items())

    return spec.memo("kv_owners", build)


def _value(L: np.ndarray, ratio: int, cap: int | None) -> np.ndarray:
    v = L // ratio
    return v if cap is None else np.minimum(v, cap)


def _prefix_sum(n: int, ratio: int, cap: int | None) -> int:
    """sum_{p=0}^{n-1} min(cap, floor(p / ratio)), exact in integers."""
    m = n if cap is None else min(n, cap * ratio)
    q, rem = divmod(m, ratio)
    below = ratio * q * (q - 1) // 2 + rem * q
    return below + (0 if cap is None else (n - m) * cap)


def reached_positions(a: int, b: int, ratio: int, cap: int | None) -> int:
    """Keys or positions rows a .. b-1 reach in one layer: sum of min(cap, floor(p / ratio)), exact."""
    return _prefix_sum(b, ratio, cap) - _prefix_sum(a, ratio, cap)


def _row_bytes(spec: ModelSpec, layout: str | None) -> dict[str, int]:
    lay = spec.layout(layout)
    return {"window": lay.swa_row_bytes, "compressed": lay.main_row_bytes, "index": lay.index_row_bytes}


def _unit_flops(spec: ModelSpec, category: str) -> int:
    return spec.index.flops_per_position if category == "index" else spec.attention.flops_per_key


def _contexts(context_tokens) -> np.ndarray:
    L = np.asarray(context_tokens)
    if L.dtype.kind not in "iu" or np.any(L < 0):
        raise InputError("context_tokens must be integers >= 0", where="context_tokens", value=context_tokens)
    return L.astype(np.int64)


def decode_cost(
    spec: ModelSpec, context_tokens, *, layout: str | None = None, reindex_full_range: bool = False
) -> DecodeCost:
    """Cost of decoding one token at context L (int or numpy int array, elementwise; model.md §6.1, §5.3).
    `reindex_full_range`: Reindex layers score every position before masking (SGLang, §6.1 last column).
    Every layer runs on decode rows, so verifying k drafted tokens costs decode_cost at L, L+1, ..., L+k
    (not prefill_cost, whose CED modes would run the decoder on a 128-row tail)."""
    L = _contexts(context_tokens)
    rows = _row_bytes(spec, layout)
    by_cat = {c: np.zeros(L.shape) for c in ("window", "compressed", "index")}
    flops = {c: np.zeros(L.shape) for c in by_cat}
    for t in _terms(spec, spec.default_prefill_mode, reindex_full_range):
        v = t.layers * _value(L, t.ratio, t.cap).astype(np.float64)
        by_cat[t.category] = by_cat[t.category] + v
        flops[t.category] = flops[t.category] + v * _unit_flops(spec, t.category)
    dense = np.full(L.shape, 2.0 * active_params_decode(spec))  # V4 26.54 G, V4.1 32.26 G (§6.1)
    attention = flops["window"] + flops["compressed"]
    reads = {c: by_cat[c] * rows[c] for c in by_cat}
    out = DecodeCost(
        dense_flops=dense,
        attention_flops=attention,
        index_flops=flops["index"],
        total_flops=dense + attention + flops["index"],
        kv_read_bytes=reads["window"] + reads["compressed"] + reads["index"],
        swa_read_bytes=reads["window"],
        compressed_read_bytes=reads["compressed"],
        index_read_bytes=reads["index"],
        keys_attended=by_cat["window"] + by_cat["compressed"],
        positions_scored=by_cat["index"],
    )
    if L.ndim == 0:
        return DecodeCost(**{k: float(v) for k, v in out.__dict__.items()})
    return out


def keys_attended_per_layer(spec: ModelSpec, context_tokens: int) -> list[int]:
    """Keys one query attends in each layer at context L (window + selected or all compressed entries)."""
    L = int(_contexts(context_tokens))
    out = []
    for layer in spec.layers:
        keys = min(L, layer.window_tokens)
        if layer.ratio:
            keys += int(_value(np.int64(L), layer.ratio, layer.top_k))
        out.append(keys)
    return out


def prefill_cost(
    spec: ModelSpec,
    new_tokens: int,
    cached_tokens: int = 0,
    mode: str | None = None,
    *,
    last_chunk: bool = True,
    speculative_tokens: int = 0,
    swa_replay_tokens: int = 0,
    layout: str | None = None,
    reindex_full_range: bool = False,
) -> PrefillCost:
    """Cost of prefilling `new_tokens` positions after `cached_tokens` already cached (model.md §6.2).

    Rows: every-token layers run on the new tokens plus `swa_replay_tokens` cached ones re-run to rebuild
    the window rings after an SWA-cache miss (encoder SWA bounded replay: min(cached, 128)). Tail-only
    layers (V4.1 "ced" / "engine" decoder) run, per request, on the last min(cached + new, 128 +
    speculative_tokens) positions - the decoder SWA bounded replay. A chunked prompt pays the tail once,
    in its last chunk (`last_chunk=True`, which also computes the one row of logits); earlier chunks pass
    last_chunk=False. So in "full" modes chunks add up exactly: cost(T1 after P, not last) + cost(T2 after
    P+T1) == cost(T1+T2 after P).
    """
    mode = resolve_prefill_mode(spec, mode)
    for name, v in (("new_tokens", new_tokens), ("cached_tokens", cached_tokens)):
        if not isinstance(v, int | np.integer) or v < 0:
            raise InputError(f"{name} must be an integer >= 0", where=name, value=v)
    if not 0 <= swa_replay_tokens <= cached_tokens or speculative_tokens < 0:
        raise InputError(
            "swa_replay_tokens must be in [0, cached_tokens] and speculative_tokens >= 0",
            where="swa_replay_tokens",
            value=swa_replay_tokens,
        )
    end = cached_tokens + new_tokens
    start = cached_tokens - swa_replay_tokens
    tail_len = spec.ced.tail_tokens if spec.ced else 0
    tail = (
        min(end, tail_len + speculative_tokens)
        if last_chunk and spec.ced and mode in ("ced", "engine")
        else 0
    )
    every_rows = end - start

    def span(every: bool) -> tuple[int, int]:
        return (start, end) if every else (end - tail, end)

    rows = _row_bytes(spec, layout)
    attention = index = 0.0
    for t in _terms(spec, mode, reindex_full_range):
        a, b = span(t.every_token)
        n = t.layers * reached_positions(a, b, t.ratio, t.cap)
        if t.category == "index":
            index += n * _unit_flops(spec, "index")
        else:
            attention += n * _unit_flops(spec, t.category)

    classes = row_classes(spec, mode)
    head_rows = 1 if last_chunk else 0  # one row of logits per request
    dense = 2.0 * (
        classes[True].active_elements * every_rows
        + classes[False].active_elements * tail
        + spec.vocab * spec.hidden * head_rows
    )
    weight_bytes = classes[True].touched_bytes(every_rows) + classes[False].touched_bytes(tail)
    kv_write = 0.0
    for ratio, owned_main, owned_index in _kv_owners(spec):
        completed = end // ratio - cached_tokens // ratio
        kv_write += completed * (owned_main * rows["compressed"] + owned_index * rows["index"])
    swa_write = sum(
        t.layers * min(span(t.every_token)[1] - span(t.every_token)[0], t.cap) * rows["window"]
        for t in _terms(spec, mode, reindex_full_range)
        if t.category == "window"
    )
    return PrefillCost(
        dense_flops=dense,
        attention_flops=attention,
        index_flops=index,
        total_flops=dense + attention + index,
        kv_write_bytes=float(kv_write),
        swa_write_bytes=float(swa_write),
        weight_bytes=float(weight_bytes + head_bytes(spec) * head_rows),
        every_token_rows=every_rows,
        tail_rows=tail,
    )
