"""What the engine tells a timing model about a step, as named values (compiled: sim/native.py).

`DecodeTerms`: the additive timing terms of decoding sequences, of one sequence when it joins a
decode batch (`TimingModel.decode_seq_terms`) or summed over the batch (the engine's running
sum, sim.cluster.instance). Each term comes with its growth per decode step. A timing model fills
the terms it reads and leaves the others at 0; the engine only adds them up, so a join or a leave
is O(1) whatever the model (style.md §6: pure arithmetic, no loops on the hot path):
- roofline: `attn_row_flops` (attention + indexer FLOPs of one verified row) and `kv_read_bytes`
  (KV bytes a step reads);
- calibrated: `context_tokens` (the attention tables are read at the batch's mean context).

`PrefillChunk`: one request's share of an engine step's prefill rows, on the DP-attention rank that
holds the request (`rank`; 0 on an instance without DP attention).
"""

from __future__ import annotations


class DecodeTerms:
    """Timing terms of decoding sequences and their growth per decode step (`*_growth`)."""

    __slots__ = (
        "attn_row_flops",
        "kv_read_bytes",
        "context_tokens",
        "attn_row_flops_growth",
        "kv_read_bytes_growth",
        "context_tokens_growth",
    )

    def __init__(
        self,
        attn_row_flops: float = 0.0,
        kv_read_bytes: float = 0.0,
        context_tokens: float = 0.0,
        attn_row_flops_growth: float = 0.0,
        kv_read_bytes_growth: float = 0.0,
        context_tokens_growth: float = 0.0,
    ) -> None:
        self.attn_row_flops = attn_row_flops
        self.kv_read_bytes = kv_read_bytes
        self.context_tokens = context_tokens
        self.attn_row_flops_growth = attn_row_flops_growth
        self.kv_read_bytes_growth = kv_read_bytes_growth
        self.context_tokens_growth = context_tokens_growth

    def __repr__(self) -> str:
        fields = ", ".join(f"{name}={getattr(self, name)!r}" for name in self.__slots__)
        return f"DecodeTerms({fields})"

    def copy(self) -> DecodeTerms:
        return DecodeTerms(
            self.attn_row_flops,
            self.kv_read_bytes,
            self.context_tokens,
            self.attn_row_flops_growth,
            self.kv_read_bytes_growth,
            self.context_tokens_growth,
        )

    def scaled(self, sequences: float) -> DecodeTerms:
        """The sum over `sequences` sequences with these terms."""
        return DecodeTerms(
            self.attn_row_flops * sequences,
            self.kv_read_bytes * sequences,
            self.context_tokens * sequences,
            self.attn_row_flops_growth * sequences,
            self.kv_read_bytes_growth * sequences,
            self.context_tokens_growth * sequences,
        )

    def after(self, steps: float) -> DecodeTerms:
        """These terms `steps` decode steps later (a fractional `steps` interpolates)."""
        return DecodeTerms(
            self.attn_row_flops + self.attn_row_flops_growth * steps,
            self.kv_read_bytes + self.kv_read_bytes_growth * steps,
            self.context_tokens + self.context_tokens_growth * steps,
            self.attn_row_flops_growth,
            self.kv_read_bytes_growth,
            self.context_tokens_growth,
        )

    # --- in place, for the engine's running sum ---

    def set(self, other: DecodeTerms) -> None:
        self.attn_row_flops = other.attn_row_flops
        self.kv_read_bytes = other.kv_read_bytes
        self.context_tokens = other.context_tokens
        self.attn_row_flops_growth = other.attn_row_flops_growth
        self.kv_read_bytes_growth = other.kv_read_bytes_growth
        self.context_tokens_growth = other.context_tokens_growth

    def clear(self) -> None:
        self.attn_row_flops = self.kv_read_bytes = self.context_tokens = 0.0
        self.attn_row_flops_growth = self.kv_read_bytes_growth = self.context_tokens_growth = 0.0

    def add(self, other: DecodeTerms) -> None:
        self.attn_row_flops += other.attn_row_flops
        self.kv_read_bytes += other.kv_read_bytes
        self.context_tokens += other.context_tokens
        self.attn_row_flops_growth += other.attn_row_flops_growth
        self.kv_read_bytes_growth += other.kv_read_bytes_growth
        self.context_tokens_growth += other.context_tokens_growth

    def remove(self, other: DecodeTerms, steps: int) -> None:
        """Take out a member that joined `steps` decode steps ago (its terms have grown since)."""
        self.attn_row_flops -= other.attn_row_flops + other.attn_row_flops_growth * steps
        self.kv_read_bytes -= other.kv_read_bytes + other.kv_read_bytes_growth * steps
        self.context_tokens -= other.context_tokens + other.context_tokens_growth * steps
        self.attn_row_flops_growth -= other.attn_row_flops_growth
        self.kv_read_bytes_growth -= other.kv_read_bytes_growth
        self.context_tokens_growth -= other.context_tokens_growth

    def advance(self, steps: int) -> None:
        """`steps` decode steps later."""
        self.attn_row_flops += self.attn_row_flops_growth * steps
        self.kv_read_bytes += self.kv_read_bytes_growth * steps
        self.context_tokens += self.context_tokens_growth * steps


class PrefillChunk:
    """`new_tokens` prompt tokens of one request computed in a step, after `context_tokens` already
    in its KV. `last_chunk` marks the request's final chunk (V4.1's decoder tail and the logits row
    run there); images (`image_tokens` from `image_count` images) go through the vision tower with
    the first chunk. `rank`: the DP-attention rank the request lives on (its attention, dense
    projections and KV are there; sim.timing.calibrated times a step at its slowest rank)."""

    __slots__ = ("new_tokens", "context_tokens", "last_chunk", "image_tokens", "image_count", "rank")

    def __init__(
        self,
        new_tokens: int,
        context_tokens: int,
        *,
        last_chunk: bool = False,
        image_tokens: int = 0,
        image_count: int = 0,
        rank: int = 0,
    ) -> None:
        self.new_tokens = new_tokens
        self.context_tokens = context_tokens
        self.last_chunk = last_chunk
        self.image_tokens = image_tokens
        self.image_count = image_count
        self.rank = rank

    def __repr__(self) -> str:
        return (
            f"PrefillChunk({self.new_tokens}, {self.context_tokens}, last_chunk={self.last_chunk}, "
            f"image_tokens={self.image_tokens}, image_count={self.image_count}, rank={self.rank})"
        )
