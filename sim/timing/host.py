"""The engine's CPU time around a step that the GPU waits for (`timing.host`, sim.config.timing.Host).

A synchronous engine loop runs, for every step: its scheduler (pick the batch, admit and place prefill chunks,
look up prefixes, allocate blocks), then the step function (build the step's index arrays on the host, copy
them to the GPU, launch the CUDA graph, wait for it), then it applies the outcome. Two parts of that are CPU
time the GPU does not overlap:

- **in the step** (`in_step_s`): input preparation, copies and the graph launch before the GPU starts, and
  the GPU's idle gaps inside it; the step's wall time (what an engine's step records time) includes it. It
  is a constant plus a part per sequence of the step (its rows of the index arrays, its block-table row)
  and per token row;
- **between steps** (`gap_s`): the scheduler's own time, plus a part per decoding sequence (its bookkeeping)
  and per prefill chunk of the next step (admission, prefix lookup, block allocation). Not in the step's
  wall time, but in every token's latency.

Production engines hide both behind the GPU: SGLang's overlap scheduler (on by default since v0.4, the
"zero-overhead batch scheduler"; `--disable-overlap-schedule` turns it off) and TensorRT-LLM's overlap
scheduler (on by default) prepare step n+1 while step n runs; vLLM V1 does the same with
`--async-scheduling` (vllm#27679). So the production default is zero [D: fully hidden]. The served reduced
model of issue 14 (kernels_bench/serve) runs a synchronous loop: its values come from its measurements
(sim.timing.served).

A third part is a floor, not a sum: a step the engine runs **eagerly** (no CUDA graph: SGLang's V4 prefill
steps, and under DP attention every rank of a step in which one prefills; docs/engines_and_validation.md section
9) is issued op by op from Python, and lasts at least the host's time to issue it (`eager_floor_s`: per step
plus per layer). Measured on the production V4 pass (docs/carry/eager): the eager pass takes
max(graph time, host issue time), the host hidden once the GPU is busier (a 4,096-token chunk: +4 %). Its
size is the step's launches (the engine's, sim.config.engine_rules `eager_prefill_launches`) times the host's
time per launch (`HOST_S_PER_LAUNCH`, measured: docs/carry/eager/README.md).

A decode step has a floor of its own where the engine's speculative loop keeps the host busy (`decode_floor_s`:
SGLang's EAGLE on DeepSeek-V4's MTP runs its draft extend eagerly and waits for each verify before preparing the
next step, sim.config.engine_rules `spec_decode_host_chain_s`). The overlap scheduler issues that chain while the
GPU runs, so the step lasts max(its GPU time, the chain): the chain binds at one or a few requests, the GPU above
(docs/engines_and_validation.md section 18).
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class HostCosts:
    """Seconds of host time per step (see the module doc); all zero: hidden behind the GPU."""

    step_s: float = 0.0  # in the step, per step
    per_sequence_s: float = 0.0  # in the step, per sequence (decode or prefill chunk)
    per_row_s: float = 0.0  # in the step, per token row the graph runs (padded)
    gap_s: float = 0.0  # between steps, per step
    gap_per_sequence_s: float = 0.0  # between steps, per decoding sequence
    gap_per_chunk_s: float = 0.0  # between steps, per prefill chunk of the next step
    eager_step_s: float = 0.0  # an eager step's host issue time: per step
    eager_per_layer_s: float = 0.0  # and per decoder layer it runs
    decode_floor_s: float = 0.0  # the least a decode step lasts: the host's chain in a speculative loop

    @property
    def enabled(self) -> bool:
        return any(
            (self.step_s, self.per_sequence_s, self.per_row_s, self.gap_s, self.gap_per_sequence_s,
             self.gap_per_chunk_s)
        )  # fmt: skip

    def in_step_s(self, sequences: int, rows: int) -> float:
        """Host time inside a step of `sequences` sequences and `rows` token rows (its wall time includes it)."""
        return self.step_s + self.per_sequence_s * sequences + self.per_row_s * rows

    def gap_before_s(self, decode_sequences: int, chunks: int) -> float:
        """The scheduler's time before a step of `decode_sequences` decodes and `chunks` prefill chunks."""
        return self.gap_s + self.gap_per_sequence_s * decode_sequences + self.gap_per_chunk_s * chunks

    def eager_floor_s(self, layers: int) -> float:
        """The least an eager step of `layers` decoder layers lasts: the host's time to issue it."""
        return self.eager_step_s + self.eager_per_layer_s * layers

    def step_total_s(self, decode_sequences: int, chunks: int, rows: int) -> float:
        """Both parts: what a step adds to the engine's clock beyond its GPU work."""
        return self.in_step_s(decode_sequences + chunks, rows) + self.gap_before_s(decode_sequences, chunks)


NO_HOST = HostCosts()

# The host's time per launch of an eager V4 pass: the production pass (5 layers: SWA, CSA, HCA, CSA, HCA) issued
# eagerly at a 512-token prefill, its host issue time over its 844 launches (kernels_bench.production.host_issue;
# docs/carry/eager/README.md "Host time per launch: measured" and "More machines"), on five H100 machines' hosts
# of the same declared CPU, each machine's first run: 21,001.5 / 38,789.9 / 21,235.7 / 32,150.8 / 19,792.1 us
# (24.9 / 46.0 / 25.2 / 38.1 / 23.5 us a launch; docs/carry/eager/host_issue/ and machine2-5/). Their mean stands
# for every machine's host [D]: hosts differ by this much at least (and one machine's repeat by 1.5x once), and
# which ones the published deployments ran on is not stated. A mean over the pass's mix of launches; SGLang's
# layer calls relatively more of the costly ones (mHC's TileLang calls, FlashMLA) [D] (docs/engines_and_validation.md §14)
HOST_S_PER_LAUNCH = (21_001.5e-6 + 38_789.9e-6 + 21_235.7e-6 + 32_150.8e-6 + 19_792.1e-6) / 5 / 844


def eager_issue_s(
    step_launches: float, layer_launches: float, layers: int, s_per_launch: float = HOST_S_PER_LAUNCH
) -> tuple[float, float]:
    """(eager_step_s, eager_per_layer_s) of a step issuing `step_launches` once and `layer_launches` over its
    `layers` decoder layers (their mean a layer, which the floor also charges the drafter's layers)."""
    return step_launches * s_per_launch, layer_launches / layers * s_per_launch
