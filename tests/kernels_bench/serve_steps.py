"""Helpers of the served minis' CPU tests (V4 and V4.1): tiny shapes, token streams, step works, runs of steps."""

from __future__ import annotations

from dataclasses import replace

import torch

from kernels_bench.production import forward as fw
from kernels_bench.serve.step_api import SeqWork, StepPlan


def tiny_dims(**extra) -> fw.Dims:
    """The minis' layer shapes cut down for the CPU: the real structure (heads, LoRA ranks, indexer, experts)
    at widths a float64 reference runs in milliseconds. FlashMLA needs 64 heads (the GPU tests); the
    reference any. `extra`: a mini's own fields (e.g. the V4 compressors' widths)."""
    return replace(fw.Dims(), heads=4, hidden=256, q_lora=256, o_lora=128, index_heads=8, topk=16, window=8,
                   experts=8, inter=128, shared_inter=256, **extra)  # fmt: skip


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
