"""`timing:` and `spec_decode:` of a scenario: how step times are computed."""

from __future__ import annotations

from typing import Literal

from pydantic import Field, model_validator

from sim.config.base import StrictModel
from sim.config.errors import Problem, raise_problems
from sim.errors import InputError


class Efficiency(StrictModel):
    """Overrides of the hardware profile's `achievable` fractions (null = the profile's value)."""

    mfu_prefill: float | None = Field(None, gt=0, le=1, description="fraction of peak FLOP/s in prefill")
    mfu_decode: float | None = Field(None, gt=0, le=1, description="fraction of peak FLOP/s in decode")
    hbm_bw_frac: float | None = Field(None, gt=0, le=1, description="fraction of peak HBM bandwidth")
    scale_up_bw_frac: float | None = Field(None, gt=0, le=1, description="fraction of NVLink/IF bandwidth")
    scale_out_bw_frac: float | None = Field(None, gt=0, le=1, description="fraction of RDMA line rate")
    pcie_bw_frac: float | None = Field(None, gt=0, le=1, description="fraction of host-link bandwidth")
    ssd_bw_frac: float | None = Field(None, gt=0, le=1, description="fraction of NVMe datasheet bandwidth")


class Timing(StrictModel):
    model: Literal["auto", "roofline", "calibrated"] = Field(
        "auto", description="auto: measured kernel tables where they exist, roofline elsewhere"
    )
    kernels: Literal["production", "kernels_bench"] = Field(
        "production",
        description="kernel stack of the calibrated timing: production (FlashMLA, DeepGEMM, TileLang mHC as "
        "vLLM/SGLang run them, ours where production has none) or kernels_bench (the project's own kernels)",
    )  # sim.timing.stacks: the composition rules; `sim calibrate show h200` shows both
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


class SpecDecodeFamily(StrictModel):
    method: Literal["mtp", "dspark"] = Field(description="V4: multi-token prediction; V4.1: DSpark drafter")
    accepted_tokens_per_step: float = Field(
        ge=1, description="tokens emitted per verify step (incl. the bonus token)"
    )
    draft_tokens: int = Field(ge=1, description="tokens drafted per step")
    acceptance_is_assumption: bool = Field(True, description="true while no measured acceptance is known")

    @model_validator(mode="after")
    def _accept_at_most_drafted(self) -> SpecDecodeFamily:
        if self.accepted_tokens_per_step > 1 + self.draft_tokens:
            raise_problems(
                [
                    Problem(
                        "accepted_tokens_per_step",
                        f"cannot exceed 1 + draft_tokens ({1 + self.draft_tokens})",
                        self.accepted_tokens_per_step,
                        f"1 .. {1 + self.draft_tokens}",
                    )
                ]
            )
        return self


class SpecDecode(StrictModel):
    enabled: bool = Field(False, description="simulate speculative decoding for every model")
    v4: SpecDecodeFamily = Field(
        default_factory=lambda: SpecDecodeFamily(method="mtp", accepted_tokens_per_step=1.7, draft_tokens=1)
    )  # V4 ships one MTP layer (model.md §9 #1); 1.7 accepted tokens/step is an assumption [D]
    v41: SpecDecodeFamily = Field(
        default_factory=lambda: SpecDecodeFamily(
            method="dspark", accepted_tokens_per_step=2.5, draft_tokens=5
        )
    )  # DSpark drafts blocks of 5 (model.md §10 [A]); acceptance unknown (model.md §9 #14), 2.5 assumed [D]

    def for_family(self, family: str) -> SpecDecodeFamily:
        """The per-family block (`ModelRef.family` gives the family of a model)."""
        if family not in ("v4", "v41"):
            raise InputError("unknown model family", value=family, allowed=["v4", "v41"])
        return getattr(self, family)
