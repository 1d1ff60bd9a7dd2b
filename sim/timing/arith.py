"""Per-model arithmetic the timing needs, precomputed once per run from `sim.model` into tables
that answer in microseconds (the simulator asks them once or twice per request; `sim.model`'s
exact functions take 0.1-0.3 ms per call).

- Decode: attention + index FLOPs and KV bytes read per step of one sequence at context L
  (model.md §5.3, §6.1). Both are piecewise linear in L (sums of min(cap, L / ratio)); the table
  has a knot every 128 tokens up to 64K and is linear beyond the last cap (16,384), so linear
  interpolation reproduces `decode_cost` to rounding.
- Prefill: a chunk of n new tokens after c cached ones costs G(c + n) - G(c) (+ T(c + n) for the
  request's last chunk: the V4.1 decoder tail and the logits row), where G(P) is the cost of
  positions [0, P) on the every-token layers (`prefill_cost(P, 0, last_chunk=False)`; additive
  by construction, see its docstring). G is piecewise quadratic in P, T piecewise linear in
  the end position; both are interpolated quadratically between knots (model.md §6.2).
- Weights read per step: the non-routed matmul blocks and LM head once, routed experts by
  expected coverage E (1 - (1 - k/E)^rows) per MoE layer (model.md §7.2).
"""

from __future__ import annotations

import functools
from dataclasses import dataclass, field

import numpy as np

from sim import model as m
from sim.timing.interp import LinearTable, QuadraticTable, chunk_parts

_FINE_STEP = 128  # tokens between knots below _FINE_END
_FINE_END = 1 << 16
_MAX_TOKENS = 1 << 22  # 4M positions: beyond any 1M context + output


def _coarse() -> np.ndarray:
    return np.unique(np.geomspace(_FINE_END, _MAX_TOKENS, 97).astype(np.int64))


def _decode_grid() -> np.ndarray:
    """Knots for the piecewise-linear decode terms: every 128 tokens up to 64K (every cap is a
    multiple of 128), then geometric (the terms are linear there)."""
    fine = np.arange(0, _FINE_END + 1, _FINE_STEP, dtype=np.int64)
    return np.unique(np.concatenate([fine, _coarse()]))


def _prefill_grid() -> np.ndarray:
    """Knots for the piecewise-quadratic prefill sums: every 4 tokens below 512 (window and tail
    caps: 128 + speculative rows), every 64 up to 4K (top-512 caps at 512 to 2,048), every 256 up
    to 16K (the largest cap, 16,384 Reindex candidates), every 2,048 up to 64K, then geometric
    (quadratic there, interpolated exactly)."""
    small = np.arange(0, 512, 4, dtype=np.int64)
    low = np.arange(512, 4096, 64, dtype=np.int64)  # the V4.1 / V4 top-512 caps end at 512-2,048
    mid = np.arange(4096, 16384 + 1, 256, dtype=np.int64)
    upper = np.arange(16384, _FINE_END + 1, 2048, dtype=np.int64)
    return np.unique(np.concatenate([small, low, mid, upper, _coarse()]))


@dataclass(frozen=True)
class ModelArith:
    """Numbers and tables for one model (hardware-independent)."""

    name: str
    max_context_tokens: int
    hidden: int
    layers: int
    moe_layers: int
    routed_experts: int
    top_k: int
    expert_bytes: float  # one routed expert of one layer
    dense_flops_per_token: float  # GEMM FLOPs of one decoded row (2 x active params, LM head incl.)
    dense_weight_bytes: float  # non-routed matmul weights + LM head, read once per step
    draft_row_flops: float  # drafter FLOPs per row the target runs: prompt token or verify row
    engram_bytes_per_token: float
    weights_bytes: float
    engram_table_bytes: float
    decode_table: LinearTable = field(repr=False)  # L -> (attention+index FLOPs, KV bytes read)
    prefill_every: QuadraticTable = field(repr=False)  # P -> G(P): (dense, attn+index FLOPs, KV write bytes)
    prefill_tail: QuadraticTable = field(repr=False)  # end -> T(end): same components
    spec: object = field(repr=False, compare=False)
    prefill_mode: str = ""  # the prefill mode the tables were built for (sim.model.modes)
    # V4.1's Reindex layers scored over every compressed position, then masked (an engine's dense path,
    # sim.config.engine_rules reindex_scoring), not over layer 20's candidates only
    reindex_full_range: bool = False

    def decode_terms(self, context_tokens: float) -> tuple[float, float]:
        return self.decode_table.at(context_tokens)

    def prefill_parts(
        self, new_tokens: int, context_tokens: int, last_chunk: bool
    ) -> tuple[float, float, float]:
        """(GEMM FLOPs, attention+index FLOPs, KV bytes written) of one chunk."""
        return chunk_parts(self.prefill_every, self.prefill_tail, new_tokens, context_tokens, last_chunk)

    def draft_step_flops(self, draft_tokens: int) -> float:
        """Drafter FLOPs of one sequence's step drafting `draft_tokens` positions, beyond its row pass."""
        return m.draft_step_flops(self.spec, draft_tokens) if draft_tokens > 0 else 0.0

    def expert_bytes_touched(self, rows: int) -> float:
        """Routed-expert bytes a step of `rows` rows reads, all MoE layers (uniform routing)."""
        e, k = self.routed_experts, self.top_k
        return self.moe_layers * e * (1.0 - (1.0 - k / e) ** rows) * self.expert_bytes

    def vision_flops(self, image_tokens: int, image_count: int) -> float:
        """Vision tower FLOPs for `image_count` images totalling `image_tokens` tokens (equal sizes).
        A model without a vision tower (V4-Flash) pays only the prompt tokens: the same trace is
        replayed on both models, as if the client sent a text rendering of the same length."""
        if image_tokens <= 0 or image_count <= 0 or self.spec.vision is None:
            return 0.0
        per = min(-(-image_tokens // image_count), self.spec.vision.max_image_tokens)
        return image_count * m.vision_flops_per_image(self.spec, per)


def build_arith(
    model_name: str,
    *,
    prefill_mode: str | None = None,
    kv_layout: str | None = None,
    reindex_full_range: bool = False,
) -> ModelArith:
    """The tables of a model spec file, memoised (the planner builds the same model many times):
    `build_arith(name)` and `build_arith(name, prefill_mode=None, kv_layout=None)` are one entry."""
    return _build_arith(model_name, prefill_mode, kv_layout, reindex_full_range)


@functools.cache  # a pure function of the spec files, keyed positionally (above)
def _build_arith(
    model_name: str, prefill_mode: str | None, kv_layout: str | None, reindex_full_range: bool
) -> ModelArith:
    return arith_of(
        m.load_model(model_name),
        prefill_mode=prefill_mode,
        kv_layout=kv_layout,
        reindex_full_range=reindex_full_range,
    )


def arith_of(
    spec, *, prefill_mode: str | None = None, kv_layout: str | None = None, reindex_full_range: bool = False
) -> ModelArith:
    """The tables of one model spec (a spec file's, or a variant such as a reduced-depth stack)."""
    mode = m.resolve_prefill_mode(spec, prefill_mode)
    full = reindex_full_range
    xs = _decode_grid()
    dc = m.decode_cost(spec, xs, layout=kv_layout, reindex_full_range=full)
    decode_table = LinearTable(xs, [dc.attention_flops + dc.index_flops, dc.kv_read_bytes])
    xs = _prefill_grid()

    every = [
        m.prefill_cost(spec, int(p), 0, mode, last_chunk=False, layout=kv_layout, reindex_full_range=full)
        for p in xs
    ]
    g = [
        np.array([getattr(c, f) for c in every])
        for f in ("dense_flops", "attention_flops", "index_flops", "kv_write_bytes")
    ]
    prefill_every = QuadraticTable(xs, [g[0], g[1] + g[2], g[3]])
    tails = []
    for p in xs:
        p = int(p)
        if p == 0:
            tails.append((0.0, 0.0, 0.0))
            continue
        last = m.prefill_cost(
            spec, 1, p - 1, mode, last_chunk=True, layout=kv_layout, reindex_full_range=full
        )
        body = m.prefill_cost(
            spec, 1, p - 1, mode, last_chunk=False, layout=kv_layout, reindex_full_range=full
        )
        tails.append(
            (
                last.dense_flops - body.dense_flops,
                last.attention_flops + last.index_flops - body.attention_flops - body.index_flops,
                last.kv_write_bytes - body.kv_write_bytes,
            )
        )
    t = np.array(tails)
    prefill_tail = QuadraticTable(xs, [t[:, 0], t[:, 1], t[:, 2]])

    moe_layers = sum(1 for layer in spec.layers if layer.mlp != "dense")
    moe = spec.moe
    experts_one = (
        moe_layers
        * float(m.expected_experts_touched(moe.routed_experts, moe.top_k, 1))
        * m.expert_bytes(spec)
    )
    return ModelArith(
        name=spec.name,
        max_context_tokens=spec.max_context_tokens,
        hidden=spec.hidden,
        layers=len(spec.layers),
        moe_layers=moe_layers,
        routed_experts=moe.routed_experts,
        top_k=moe.top_k,
        expert_bytes=m.expert_bytes(spec),
        dense_flops_per_token=2.0 * m.active_params_decode(spec),  # model.md §6.1
        dense_weight_bytes=m.decode_weight_bytes_per_step(spec, 1) - experts_one,  # model.md §7.2
        draft_row_flops=m.draft_row_flops(spec),  # docs/engines_and_validation.md section 33
        engram_bytes_per_token=m.engram_gather_bytes_per_token(spec),  # model.md §6.3: 12.7 KB
        weights_bytes=m.weights_bytes(spec),
        engram_table_bytes=m.engram_table_bytes(spec),
        decode_table=decode_table,
        prefill_every=prefill_every,
        prefill_tail=prefill_tail,
        spec=spec,
        prefill_mode=mode,
        reindex_full_range=full,
    )
