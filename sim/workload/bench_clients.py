"""The request lengths a named benchmark client draws, reproduced draw for draw.

A published serving point was measured on one particular sample of request lengths: the client's
own, from its own seed. With few prompts the sample's mean is far from the nominal one (SGLang's
cookbook sends 32 prompts at concurrency 1 and 16: at bench_serving's default seed their mean
output is 570 tokens, not 512, and their median input 5,210, not 4,096), so the simulator replays
that sample instead of drawing its own.

`sglang_random_lengths` follows SGLang v0.5.15's `bench_serving --dataset-name random`:
`sglang/benchmark/serving.py` seeds numpy with `--seed` (default 42) before anything else draws,
then `compute_random_lens` (`sglang/benchmark/datasets/common.py`) draws the input lengths and
then the output lengths, each `np.random.randint(max(int(len * range_ratio), 1), len + 1,
size=num_prompts)`; the requests go out in that order (one asyncio task each, a semaphore of
`--max-concurrency` slots taken in order). `sample_random_requests` then shortens each text
prompt by the tokenizer's special tokens, which the server's tokenizer adds back (DeepSeek's BOS):
the server sees the drawn input length [D, a text round trip may move it by a token].

`trace_quantile_lengths` stands in for a trace replayed row by row (AIPerf's `mooncake_trace` dataset)
whose rows are not at hand, only its published quantiles (sim.config.workload `TraceQuantileDraw`):
lengths log-linear between the quantiles, inputs and outputs independent [D], the inputs sorted into
sessions of neighbouring lengths in a shuffled order, so a turn's context grows on its previous turn's.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import NamedTuple

import numpy as np


class ClientLengths(NamedTuple):
    """Input and output tokens of each request: in the order the client sends them, or with
    `session_turns` > 0 session by session (session s's turn t at index s * session_turns + t)."""

    input_tokens: tuple[int, ...]
    output_tokens: tuple[int, ...]
    session_turns: int = 0


def sglang_random_lengths(
    input_len_tokens: int, output_len_tokens: int, num_prompts: int, range_ratio: float, seed: int
) -> ClientLengths:
    """SGLang bench_serving's `random` dataset lengths (module doc): `--random-input-len`,
    `--random-output-len`, `--num-prompts`, `--random-range-ratio`, `--seed`."""
    state = np.random.RandomState(seed)  # the legacy generator np.random.seed drives

    def draw(full_tokens: int) -> tuple[int, ...]:
        low = max(int(full_tokens * range_ratio), 1)
        return tuple(int(n) for n in state.randint(low, full_tokens + 1, size=num_prompts))

    inputs = draw(input_len_tokens)
    return ClientLengths(inputs, draw(output_len_tokens))


def _inverse_cdf(points: Sequence[tuple[float, int]], u: np.ndarray) -> np.ndarray:
    """Lengths at uniform draws `u`, log-linear between the (quantile, tokens) points, rounded (>= 1). Not
    sim.workload.dists.Dist's `quantiles`: those sit at evenly spaced probabilities, where a publisher gives a
    median, a p90 and shares under round thresholds."""
    qs = np.array([q for q, _ in points], dtype=float)
    log_tokens = np.log(np.array([t for _, t in points], dtype=float))
    return np.maximum(1, np.rint(np.exp(np.interp(u, qs, log_tokens)))).astype(np.int64)


def trace_quantile_lengths(
    input_quantiles: Sequence[tuple[float, int]],
    output_quantiles: Sequence[tuple[float, int]],
    num_requests: int,
    session_turns: int,
    spare_sessions: int,
    seed: int,
) -> ClientLengths:
    """`num_requests` rows drawn from the quantiles (module doc), plus `spare_sessions` whole sessions:
    a closed loop of C slots ends with up to C sessions cut short, so it needs that many beyond the
    rows it sends. Session-major (`ClientLengths.session_turns`)."""
    turns = max(1, session_turns)
    sessions = -(-num_requests // turns) + spare_sessions
    rng = np.random.default_rng(seed)
    inputs = np.sort(_inverse_cdf(input_quantiles, rng.random(sessions * turns))).reshape(sessions, turns)
    outputs = _inverse_cdf(output_quantiles, rng.random(sessions * turns))
    inputs = inputs[rng.permutation(sessions)].reshape(-1)
    return ClientLengths(tuple(int(n) for n in inputs), tuple(int(n) for n in outputs), turns)
