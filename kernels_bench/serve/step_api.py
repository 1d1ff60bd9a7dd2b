"""The contract between the serving engine (scheduler, block pool, replay) and the model that runs a step.

The engine (``kernels_bench.serve.engine``) decides each step's composition and hands a ``StepPlan`` to a
``StepFunction``; the step function runs it on the device (or a stand-in clock on the CPU) and returns when
the step is done. The engine times the call with a wall clock, so a step function must be synchronous (call
``torch.cuda.synchronize()`` before returning) and must do no work outside the call that the step needs.

Paged KV: the engine owns block ids ``0 .. num_blocks - 1``; each sequence's ``block_ids`` lists, in order,
the blocks holding its raw token positions ``[i * block_tokens, (i + 1) * block_tokens)``. Before a step the
engine has allocated every block the step writes into (``ceil((context_tokens + new_tokens) /
block_tokens)`` blocks). Blocks at the front of ``block_ids`` may be shared with other sequences (a reused
prefix); a step function only ever writes positions ``>= context_tokens``, which lie in blocks the sequence
owns alone. ``block_tokens`` is a multiple of 256 raw tokens so that a block boundary is also a boundary of
the CSA (ratio 4) and HCA (ratio 128) compressed rows and of any compressor state: a prefix reused up to a
block boundary needs no compressor carry-over.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol, runtime_checkable

BLOCK_ALIGN_TOKENS = 256  # lcm of the CSA (4) and HCA (128) ratios, rounded to a friendly power of two
TOKEN_ID_LIMIT = (
    32768  # the engine's made-up token ids lie in [0, TOKEN_ID_LIMIT): any vocabulary this big works
)


@dataclass(frozen=True)
class SeqWork:
    """One sequence's share of a step.

    ``context_tokens`` tokens are already in KV before this step; the step appends ``new_tokens`` (1 for a
    decode, a prefill chunk's length otherwise) whose ids are ``token_ids`` (``len(token_ids) ==
    new_tokens``). For a decode the token id is the one sampled by the previous step (the engine makes it
    up deterministically: outputs are not read back, so the step function need not sample).
    """

    seq_id: int
    block_ids: tuple[int, ...]
    context_tokens: int
    new_tokens: int
    token_ids: tuple[int, ...]

    def __post_init__(self) -> None:
        if self.context_tokens < 0 or self.new_tokens <= 0:
            raise ValueError(
                f"seq {self.seq_id}: context_tokens={self.context_tokens}, new_tokens={self.new_tokens}"
            )
        if len(self.token_ids) != self.new_tokens:
            raise ValueError(
                f"seq {self.seq_id}: {len(self.token_ids)} token ids for {self.new_tokens} new tokens"
            )

    @property
    def end_tokens(self) -> int:
        """Tokens in KV after this step."""
        return self.context_tokens + self.new_tokens


@dataclass(frozen=True)
class StepPlan:
    """One engine step: every decode (one token each) and every prefill chunk batched together.

    A mixed step has both; the step function runs them as one forward pass (or as it sees fit) and returns
    when all of it is done. Sequences ending their prefill in this step produce their first token here.
    """

    decode: tuple[SeqWork, ...]
    prefill: tuple[SeqWork, ...]

    @property
    def decode_batch(self) -> int:
        return len(self.decode)

    @property
    def prefill_tokens(self) -> int:
        return sum(s.new_tokens for s in self.prefill)

    @property
    def is_empty(self) -> bool:
        return not self.decode and not self.prefill


@runtime_checkable
class StepFunction(Protocol):
    """Runs a step synchronously. ``block_tokens`` is a multiple of ``BLOCK_ALIGN_TOKENS``; ``num_blocks`` is
    how many KV blocks the device holds (the engine's pool size).

    ``last_graph_bucket`` (optional attribute): the CUDA-graph batch bucket the last call replayed, or None
    when it ran eagerly; ``last_step_captured`` (optional): the last call captured its CUDA graph first.
    The engine records both per step when present.
    """

    @property
    def block_tokens(self) -> int: ...

    @property
    def num_blocks(self) -> int: ...

    def __call__(self, plan: StepPlan) -> None: ...


def check_step_function(fn: StepFunction) -> None:
    """Fail fast on a step function the engine cannot drive."""
    if fn.block_tokens <= 0 or fn.block_tokens % BLOCK_ALIGN_TOKENS:
        raise ValueError(
            f"block_tokens={fn.block_tokens}: must be a positive multiple of {BLOCK_ALIGN_TOKENS}"
        )
    if fn.num_blocks <= 0:
        raise ValueError(f"num_blocks={fn.num_blocks}: must be positive")
