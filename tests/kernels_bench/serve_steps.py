"""Helpers of the served minis' CPU tests (V4 and V4.1): token streams, step works, runs of steps."""

from __future__ import annotations

import torch

from kernels_bench.serve.step_api import SeqWork, StepPlan


def tokens(seed: int, n: int, vocab: int) -> list[int]:
    g = torch.Generator().manual_seed(seed)
    return torch.randint(0, vocab, (n,), generator=g).tolist()


def work(seq_id, blocks, ctx, toks):
    return SeqWork(seq_id, tuple(blocks), ctx, len(toks), tuple(toks))


def run_steps(model, steps):
    """steps: list of (decode works, prefill works) -> {(seq_id, step index): logits}."""
    out = {}
    for i, (dec, pre) in enumerate(steps):
        logits = model.step(StepPlan(tuple(dec), tuple(pre)))
        for w, lg in zip(list(dec) + list(pre), logits, strict=True):
            out[(w.seq_id, i)] = lg
    return out


def rel(a, b):
    return ((a - b).norm() / b.norm()).item()
