"""`timing:` and `spec_decode:` of a scenario: how step times are computed."""

from __future__ import annotations

from dataclasses import dataclass
from functools import partial
from typing import TYPE_CHECKING, Literal

from pydantic import Field, model_validator

from sim.config.base import StrictModel
from sim.config.errors import Problem, raise_problems
from sim.config.families import family, with_family_fields

if TYPE_CHECKING:
    from sim.model.acceptance import AcceptancePoint

# the workload kinds acceptance is measured on (sim/model/acceptance.yaml's header); the model layer reads its
# measurements (sim.model.acceptance), imported where used, since sim.model reads its specs through sim.config
WorkloadKind = Literal["coding", "coding_no_think", "math", "prose", "random_tokens", "repeated_text"]


class Efficiency(StrictModel):
    """Overrides of the hardware profile's `achievable` fractions (null = the profile's value)."""

    mfu_prefill: float | None = Field(None, gt=0, le=1, description="fraction of peak FLOP/s in prefill")
    mfu_decode: float | None = Field(None, gt=0, le=1, description="fraction of peak FLOP/s in decode")
    hbm_bw_frac: float | None = Field(None, gt=0, le=1, description="fraction of peak HBM bandwidth")
    scale_up_bw_frac: float | None = Field(None, gt=0, le=1, description="fraction of NVLink/IF bandwidth")
    scale_out_bw_frac: float | None = Field(None, gt=0, le=1, description="fraction of RDMA line rate")
    pcie_bw_frac: float | None = Field(None, gt=0, le=1, description="fraction of host-link bandwidth")
    ssd_bw_frac: float | None = Field(None, gt=0, le=1, description="fraction of NVMe datasheet bandwidth")


class Host(StrictModel):
    """The engine's CPU time around each step that the GPU waits for (sim.timing.host). The parts around a
    graphed step are zero by default: production engines prepare step n+1 while step n runs (SGLang's overlap
    scheduler, on by default since v0.4; TensorRT-LLM's overlap scheduler; vLLM V1 `--async-scheduling`),
    assumed to hide it fully [D]. An eager step's issue time is the engine's unless set (`eager_*`)."""

    step_s: float = Field(0.0, ge=0, description="in the step (its wall time): input preparation, copies, "
                          "graph launch and idle gaps, per step")  # fmt: skip
    per_sequence_s: float = Field(
        0.0, ge=0, description="in the step, per sequence (decode or prefill chunk)"
    )
    per_row_s: float = Field(0.0, ge=0, description="in the step, per token row the step's graph runs")
    gap_s: float = Field(0.0, ge=0, description="between steps (the scheduler's own time), per step")
    gap_per_sequence_s: float = Field(0.0, ge=0, description="between steps, per decoding sequence")
    gap_per_chunk_s: float = Field(
        0.0, ge=0, description="between steps, per prefill chunk of the next step (admission, prefix lookup)"
    )
    eager_step_s: float | None = Field(
        None, ge=0, description="a step holding prefill chunks runs eagerly (no CUDA graph) where the engine's "
        "prefill is not graphed (SGLang's for DeepSeek-V4) and lasts at least the host's time to issue it: this "
        "per step plus eager_per_layer_s per decoder layer (sim.timing.host); null = the engine's launches times "
        "the measured host time per launch (sim.config.engine_rules eager_prefill_launches), 0 = no floor",
    )  # fmt: skip
    eager_per_layer_s: float | None = Field(
        None, ge=0, description="an eager step's host issue time per decoder layer; null = the engine's"
    )
    decode_floor_s: float | None = Field(
        None, ge=0, description="a decode step (no prefill chunk) lasts at least the host's chain of the engine's "
        "speculative loop, which overlaps the GPU's work (calibrated timing; sim.timing.host); null = the engine's "
        "(sim.config.engine_rules spec_decode_host_chain_s: SGLang, DeepSeek-V4's MTP), 0 = no floor",
    )  # fmt: skip


class Timing(StrictModel):
    model: Literal["auto", "roofline", "calibrated"] = Field(
        "auto", description="auto: measured kernel tables where they exist, roofline elsewhere"
    )
    kernels: Literal["auto", "production", "kernels_bench", "aic"] = Field(
        "auto",
        description="kernel stack of the calibrated timing: aic (the engines' operators as NVIDIA AIConfigurator "
        "measured them on the GPU: dense GEMMs, routed experts, mHC; production for the rest; "
        "hwprofiles/engine_modules/aic_*.csv), production (the kernels alone: FlashMLA, DeepGEMM, TileLang mHC, "
        "measured on the H200 and carried to other GPUs, ours where production has none), kernels_bench (the "
        "project's own kernels); auto = aic where the scenario names its engine and AIConfigurator measured the "
        "GPU (H100, H200, B200, B300, GB200), production elsewhere",
    )  # sim.timing.stacks / sim.timing.aic: the composition rules; `sim calibrate show GPU` shows them
    engine_glue: Literal["modules", "none"] = Field(
        "modules",
        description="calibrated steps: what the pool's engine adds per layer and prompt row to sim's prefill "
        "attention side (norms, RoPE, quantisation, cache store and dequantisation, as separate passes), fitted "
        "against the engine's measured V4-Flash attention modules on that GPU (AIConfigurator's SGLang / vLLM "
        "context modules, hwprofiles/engine_modules/; sim/timing/engine_glue.py): modules = that term where "
        "measured (V4 and V4.1 pools with an engine named); none = sim's kernels alone",
    )
    forward_term: Literal["fused_glue", "measured", "served", "unfused_glue", "none"] = Field(
        "fused_glue",
        description="calibrated steps: what a real forward pass on the H200 took beyond the kernel sum "
        "(per layer and per layer-row, sim/timing/forward.py): fused_glue = less the pass's own activation "
        "quantisation, routing, norm and RoPE ops, which serving engines fuse [D]; measured = all of it; "
        "served = fitted on the served reduced model's step table (hwprofiles/h200/serve/serve_step_times.csv: "
        "its unfused glue; for that engine only); unfused_glue = that glue as a mechanism: its launches per layer x "
        "the launch floor + a time per layer and token row, from the served model's kernel profile "
        "(serve_step_kernels.csv; sim.timing.served); none = the kernel sum alone",
    )
    decode_layer_term: Literal["engine", "on", "off"] = Field(
        "engine",
        description="calibrated decode steps (no prefill chunk): whether they carry the forward term's per-layer "
        "part; engine = the pool's engine rule (sim.config.engine_rules decode_layer_term: off on SGLang, whose "
        "graphed decode runs none of that glue), on where no engine is named; on / off = a what-if",
    )
    power_limit: Literal["measured", "off"] = Field(
        "measured",
        description="calibrated steps holding prefill chunks: measured = their GPU work slows at the board's "
        "power limit as the hardware profile measures it, the board's heat carried from step to step "
        "(accelerator.sustained_compute_*; sim/timing/sustained.py; GPUs without a measurement unchanged); "
        "off = the kernel tables' burst times (a board that never reaches its limit: a what-if)",
    )
    graph_row_buckets: list[int] = Field(
        default_factory=list,
        description="CUDA-graph row buckets of the engine: a step's token rows per DP rank are padded up to the "
        "next bucket for its GEMMs, experts and mHC (rows above the last run unpadded); empty = no padding",
    )  # SGLang pads a batch to the next captured size (cuda_graph_runner replay_prepare); off by default [D]
    prefill_attention: Literal["prefill_kernels", "decode_kernel"] = Field(
        "prefill_kernels",
        description="how prefill rows attend: prefill_kernels = the sparse prefill kernels (production "
        "engines); decode_kernel = one query per row through the decode pipeline (the served reduced model)",
    )
    host: Host = Field(default_factory=Host)
    efficiency: Efficiency = Field(default_factory=Efficiency)
    kernel_overhead_s: float = Field(
        2e-6, ge=0, description="fixed cost per kernel launch inside a CUDA graph"
    )
    # kernels.md §1 [M]: ~1.5-3 µs per kernel
    comm_overlap_frac: float = Field(
        0.5, ge=0, le=1, description="share of EP/TP communication hidden behind compute"
    )  # a choice [D]; DeepSeek overlaps two micro-batches to hide most of it (hardware.md §9 S40)
    kernels_per_layer_step: int = Field(
        11, ge=0, description="kernel launches per layer per engine step (x kernel_overhead_s x layers)"
    )  # model.md §10 [A]: a V4.1 Reuse-mode layer runs 11 kernels in decode; V4 assumed alike [D]
    scale_out_latency_s: float = Field(
        10e-6,
        ge=0,
        description="one-way RDMA latency, software included (collectives beyond a node, KV transfers)",
    )  # a choice [D]; hardware profiles give only the scale-up latency

    @model_validator(mode="after")
    def _buckets_increase(self) -> Timing:
        b = self.graph_row_buckets
        if any(x < 1 for x in b) or any(y <= x for x, y in zip(b, b[1:], strict=False)):
            raise_problems(
                [
                    Problem(
                        "graph_row_buckets",
                        "buckets must be positive and strictly increasing",
                        b,
                        "e.g. [1, 2, 4, 8]",
                    )
                ]
            )
        return self


class SpecDecodeFamily(StrictModel):
    """Speculative decoding of one model family: who drafts, how many tokens, how many of them the
    target verifies per step (its query rows per sequence) and how many it keeps on average."""

    method: Literal["mtp", "dspark"] = Field(
        description="the drafter: mtp (V4-Flash's multi-token-prediction block) or dspark (the 3-block DSpark "
        "drafter of V4.1-Flash and V4-Flash-0731)"
    )
    accepted_tokens_per_step: float | None = Field(
        None,
        ge=1,
        description="mean tokens a sequence advances per verify step (accepted drafts + the bonus token); null = "
        "the measured point of this drafter, draft_tokens and spec_decode.workload_kind (sim/model/acceptance.yaml)",
    )
    draft_tokens: int = Field(
        ge=1,
        description="tokens the drafter proposes per step (its FLOPs are counted from the model arithmetic)",
    )
    verify_rows: int | None = Field(
        None,
        ge=2,
        description="query rows each decoding sequence puts through the target per step (null = 1 + draft_tokens); "
        "attention FLOPs, GEMM rows and communication scale with it, KV bytes read do not",
    )

    @property
    def rows_per_step(self) -> int:
        """Query rows per decoding sequence in the verify step."""
        return self.verify_rows if self.verify_rows is not None else 1 + self.draft_tokens

    @model_validator(mode="after")
    def _accept_at_most_verified(self) -> SpecDecodeFamily:
        problems = []
        if self.verify_rows is not None and self.verify_rows > 1 + self.draft_tokens:
            problems.append(
                Problem(
                    "verify_rows",
                    f"cannot exceed 1 + draft_tokens ({1 + self.draft_tokens})",
                    self.verify_rows,
                    f"2 .. {1 + self.draft_tokens}",
                )
            )
        elif self.accepted_tokens_per_step is not None and self.accepted_tokens_per_step > self.rows_per_step:
            problems.append(
                Problem(
                    "accepted_tokens_per_step",
                    f"cannot exceed the rows verified per step ({self.rows_per_step})",
                    self.accepted_tokens_per_step,
                    f"1 .. {self.rows_per_step}",
                )
            )
        raise_problems(problems)
        return self


@dataclass(frozen=True)
class SpecDecodeChoice:
    """What one model's engine does per decode step (1 row, 1 token, no drafter when disabled)."""

    method: str | None
    draft_tokens: int
    verify_rows: int
    accepted_tokens_per_step: float
    # where the acceptance comes from (_SpecDecodeSwitch.accepted); None when spec decoding is off
    acceptance_source: str | None


class _SpecDecodeSwitch(StrictModel):
    enabled: bool = Field(False, description="simulate speculative decoding for every model")
    workload_kind: WorkloadKind = Field(
        "coding",
        description="what the served text is like, for the measured acceptance (sim/model/acceptance.yaml): coding = "
        "SPEED-Bench coding with thinking on, the agent workloads' kind; repeated_text = SGLang bench_serving's "
        "`random` prompts (a question repeated to length, raw text)",
    )

    def for_family(self, key: str) -> SpecDecodeFamily:
        """The block of family `key` (`ModelRef.family` gives the family of a model)."""
        block: SpecDecodeFamily = getattr(self, family(key).key)
        return block

    def measured(self, family: str) -> AcceptancePoint | None:
        """The measured acceptance of `family`'s drafter at its draft length and `workload_kind`, or None."""
        from sim.model.acceptance import lookup

        fam = self.for_family(family)
        return lookup(family, fam.method, fam.draft_tokens, self.workload_kind)

    def accepted(self, family: str, accepted_override: float | None = None) -> tuple[float | None, str]:
        """(mean accepted tokens per step, where it comes from): the model's override, the family block's
        number, else the measured point; (None, why) when none applies."""
        fam = self.for_family(family)
        if accepted_override is not None:
            return accepted_override, "models[].accepted_tokens_per_step"
        if fam.accepted_tokens_per_step is not None:
            return fam.accepted_tokens_per_step, f"spec_decode.{family}.accepted_tokens_per_step"
        point = self.measured(family)
        if point is None:
            return (
                None,
                f"no measured acceptance for {fam.method} with {fam.draft_tokens} draft tokens on {self.workload_kind}",
            )
        return point.accepted, f"[{point.tag}] {point.source} (measured on {point.measured_on})"

    def choice(self, family: str, accepted_override: float | None = None) -> SpecDecodeChoice:
        """The engine's per-step behaviour for a model of `family` (`accepted_override`: the model's
        own `models[].accepted_tokens_per_step`); validation guarantees an acceptance when enabled."""
        if not self.enabled:
            return SpecDecodeChoice(None, 0, 1, 1.0, None)
        fam = self.for_family(family)
        accepted, source = self.accepted(family, accepted_override)
        assert accepted is not None, source  # sim.config.scenario refuses a scenario without one
        return SpecDecodeChoice(fam.method, fam.draft_tokens, fam.rows_per_step, accepted, source)


class SpecDecode(
    with_family_fields(
        _SpecDecodeSwitch,
        lambda f: (SpecDecodeFamily, Field(default_factory=partial(SpecDecodeFamily, **f.spec_decode))),
    )
):
    """The switch, then one drafter block per model family (`spec_decode.v4`, `spec_decode.v41`); their
    defaults, with sources, are in the family registry (sim.config.families)."""
