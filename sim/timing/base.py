"""The timing interface every implementation provides (sim.timing.roofline, sim.timing.calibrated).

The simulator asks only these questions, so an implementation plugs in without touching it:

- `step_s(batch_size, terms, prefill, heat_s)`: one engine step: `batch_size` decoding sequences whose
  summed per-sequence terms are `terms` (a `sim.timing.batch.DecodeTerms`), plus the prefill
  chunks of that step (`PrefillChunk`s; a prefill-only step has batch_size 0; a decode-only step
  has no chunks). `heat_s`, the board's heat when the step starts (sim.timing.sustained; the
  instance carries it from step to step), sets how a step holding chunks runs at the power limit;
  0 = a cool board.
- `rank_step_s(batch_size, terms, prefill)`: the same on an instance with DP attention whose ranks
  each compose their own step (sim.sched.batcher, rank_prefill_first): the ranks holding chunks run
  no decode rows, and the `batch_size` sequences decoding sit on the other ranks.
- `decode_seq_terms(context_tokens, steps)`: a sequence's additive terms when it joins a decode
  batch at `context_tokens`, with their growth per decode step over its next `steps` steps. An
  implementation fills the terms it reads (the roofline: attention+index FLOPs per row and KV
  bytes read; the calibrated model: the context, read through the measured attention curve at
  the batch's mean); the engine only adds them up, so a batch's terms are a running sum kept in
  O(1) per join or leave, and the hot path has no loops.
- `decode_span_s(batch_size, terms, steps)`: time of `steps` consecutive decode-only steps with
  fixed membership, the terms growing by their `*_growth` per step. This is what lets decode
  jump from one membership change to the next instead of paying an event per token.
- `decode_step_end(batch_size, terms, elapsed_s)`: where the step in progress `elapsed_s` into
  such a span ends, as (steps done by then, seconds from the span's start); a join interrupts a
  span there.
- `link_bw_bytes_per_s(kind, units)` / `link_latency_s(kind)` / `transfer_s(...)`: achievable
  rate of a transfer link made of `units` parallel lanes (GPUs' PCIe links, NICs, drives).

`SummedDecodeSpans` gives a correct default for the two span methods from `step_s` alone
(summing steps; linear interpolation for long spans), for implementations without a closed form.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Protocol, runtime_checkable

from sim.timing.batch import DecodeTerms, PrefillChunk
from sim.timing.sustained import PowerLimit

# Transfer links the cluster builds (each from `units` lanes of the hardware profile):
#   pcie_h2d / pcie_d2h : host DRAM <-> GPU, per instance (units = its GPUs)
#   ssd_read / ssd_write: the node's NVMe drives (units = nodes' drive sets, normally 1)
#   net                 : the node's RDMA NICs, scale-out (units = nodes)
#   nvlink              : GPU <-> GPU inside the scale-up domain (units = GPUs)
LINK_KINDS = ("pcie_h2d", "pcie_d2h", "ssd_read", "ssd_write", "net", "nvlink")


@runtime_checkable
class TimingModel(Protocol):
    name: str
    accepted_tokens_per_step: float  # tokens one sequence advances per decode step (spec decoding)
    verified_tokens_per_step: int  # rows one decoding sequence takes in a step (1 + drafted tokens)
    power_limit: PowerLimit | None  # the board's power limit, where measured (sim.timing.sustained)

    def decode_seq_terms(self, context_tokens: float, steps: int) -> DecodeTerms: ...

    def step_s(
        self, batch_size: int, terms: DecodeTerms, prefill: Sequence[PrefillChunk], heat_s: float = 0.0
    ) -> float: ...

    def rank_step_s(
        self, batch_size: int, terms: DecodeTerms, prefill: Sequence[PrefillChunk], heat_s: float = 0.0
    ) -> float: ...

    def decode_span_s(self, batch_size: int, terms: DecodeTerms, steps: int) -> float: ...

    def decode_step_end(self, batch_size: int, terms: DecodeTerms, elapsed_s: float) -> tuple[int, float]: ...

    def link_bw_bytes_per_s(self, kind: str, units: int) -> float: ...

    def link_latency_s(self, kind: str) -> float: ...

    def transfer_s(self, nbytes: float, kind: str, units: int) -> float: ...


class SummedDecodeSpans:
    """Mixin: span methods from the class's own `step_s` (put it first in the bases): exact sums
    up to `exact_steps` steps, beyond that the trapezoid rule over `samples` points (exact when
    the step time is linear in the terms)."""

    exact_steps = 64
    samples = 17

    def decode_span_s(self, batch_size: int, terms: DecodeTerms, steps: int) -> float:
        if steps <= 0:
            return 0.0
        if steps <= self.exact_steps:
            return sum(self.step_s(batch_size, terms.after(k), ()) for k in range(steps))
        n = self.samples - 1
        xs = [(steps - 1) * i / n for i in range(n + 1)]
        ys = [self.step_s(batch_size, terms.after(x), ()) for x in xs]
        # mean step time over [0, steps - 1] by trapezoids, times the number of steps
        return sum((ys[i] + ys[i + 1]) / 2 for i in range(n)) / n * steps

    def decode_step_end(self, batch_size: int, terms: DecodeTerms, elapsed_s: float) -> tuple[int, float]:
        done = steps_within(lambda k: self.decode_span_s(batch_size, terms, k), elapsed_s)
        return done + 1, self.decode_span_s(batch_size, terms, done + 1)


def steps_within(span_s, elapsed_s: float, hint: int = 1) -> int:
    """Largest k >= 0 with span_s(k) <= elapsed_s, for a strictly increasing `span_s` (exponential
    then binary search from `hint`, O(log k) calls)."""
    if elapsed_s <= 0.0:
        return 0
    lo, hi = 0, max(1, hint)
    while span_s(hi) <= elapsed_s:
        lo, hi = hi, hi * 2
    while hi - lo > 1:
        mid = (lo + hi) // 2
        if span_s(mid) <= elapsed_s:
            lo = mid
        else:
            hi = mid
    return lo
