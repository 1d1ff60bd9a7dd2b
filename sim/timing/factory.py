"""The one place that picks a timing implementation.

`timing.model` in a scenario is `auto`, `roofline` or `calibrated`. `auto` takes `calibrated`
when a calibrated implementation is registered AND it says it has tables for the hardware
(its own check: measured on that GPU, or the H200's carried to it) and the model, else `roofline`. A
calibrated implementation plugs in by calling `register_timing_model("calibrated", build,
has_tables)` at import of its module; `build(ctx)` receives the same `TimingContext` as the
roofline and returns a `TimingModel`.
The registry is per process and filled only by imports, never at run time (no mutable state
that a run could change).
"""

from __future__ import annotations

import importlib
from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import Any

from sim import units
from sim.errors import InputError
from sim.timing.base import TimingModel
from sim.timing.host import NO_HOST, HostCosts
from sim.timing.roofline import A2aCall, DeepEpCosts, Efficiency, HwRates, Parallelism, RooflineTiming

# Modules that register implementations when imported (the calibrated one lands with the
# kernel-benchmark issue; a missing module just means "not registered").
_PROVIDERS = ("sim.timing.calibrated",)


@dataclass(frozen=True)
class TimingContext:
    """Everything an implementation needs to time one instance type of one model."""

    model_name: str
    arith: Any  # sim.timing.arith.ModelArith
    hw_profile: Any  # sim.hardware.HwProfile (for implementations that read their own tables)
    hw: HwRates
    par: Parallelism
    eff: Efficiency
    accepted_tokens_per_step: float
    draft_tokens: int
    engram_in_dram: bool
    vision_on_instance: bool
    kernels: str = "production"  # kernel stack of the calibrated timing (sim.timing.stacks)
    forward_term: str = (
        "fused_glue"  # fused_glue | measured | served | unfused_glue | none (sim.timing.forward)
    )
    decode_layer_term: bool = True  # decode steps carry the term's per-layer part (timing.decode_layer_term)
    row_buckets: tuple[int, ...] = ()  # CUDA-graph row buckets (timing.graph_row_buckets; empty: no padding)
    prefill_through_decode: bool = (
        False  # prefill rows attend through the decode kernel (timing.prefill_attention)
    )
    verify_rows: int = 0  # query rows per decoding sequence per step; 0 = 1 + draft_tokens
    prefill_cp: str = "off"  # prefill context parallelism of the pool (sim.timing.context_parallel)
    host: HostCosts = NO_HOST  # the engine's host time around a step (timing.host; sim.timing.host)
    engine: str = ""  # the pool's serving engine by name ("": none named)
    # the engine's prefill attention glue (timing.engine_glue; sim.timing.engine_glue)
    engine_glue: str = "modules"
    expert_activations: str = "fp8"  # the routed experts' activation format (sim.timing.carry rule 4)
    power_limit: bool = True  # chunk steps at the board's measured power limit (timing.power_limit)
    # the rows each expert's segment is padded to a multiple of in steps with prefill (DeepEP normal into
    # DeepGEMM's contiguous layout, sim.config.engine_rules); 1: none
    expert_alignment_rows: int = 1
    # what runs V4.1's prefill index layers: kernel (the indexer tables) | torch | torch_fused_scores
    # (sim.timing.torch_indexer.VARIANTS)
    prefill_indexer: str = "kernel"
    # the engine's MoE runner whose measured module times the experts, resolved (sim.cluster.build
    # pool_expert_format): marlin | flashinfer_cutlass | flashinfer_trtllm; "": the kernel tables or Mega MoE
    moe_runner: str = ""
    # a Mega MoE pool's steps run Mega MoE only while no DP rank holds more rows (0: no cap; engine_rules
    # megamoe_max_tokens_per_rank); above it, the engine's Triton fallback (sim.timing.engine_moe triton_fp8)
    megamoe_cap_rows: int = 0

    @classmethod
    def of_instance(
        cls,
        model_name: str,
        arith: Any,
        hw_profile: Any,
        par: Parallelism,
        timing: Any,
        achievable: dict[str, Any] | None = None,
        **fields: Any,
    ) -> TimingContext:
        """The context of one instance type, built as a run builds it for a pool: the profile's peak rates,
        its achievable fractions (`achievable`: with a scenario's overrides) and the `timing` block's fixed
        costs per layer; without speculative decoding, with Engram in HBM and the vision encoder on the
        instance unless `fields` (any other field, by name) say otherwise."""
        eff = efficiency(profile_achievable(hw_profile) if achievable is None else achievable, timing)
        eff = replace(eff, step_overhead_s=eff.step_overhead_s * arith.layers)
        base: dict[str, Any] = dict(
            accepted_tokens_per_step=1.0, draft_tokens=0, engram_in_dram=False, vision_on_instance=True
        )
        rates = hw_rates(hw_profile, timing.scale_out_latency_s)
        return cls(model_name, arith, hw_profile, rates, par, eff, **{**base, **fields})


@dataclass(frozen=True)
class _Entry:
    build: Callable[[TimingContext], TimingModel]
    has_tables: Callable[[Any], bool]
    # the models it has tables for (None: every model); `auto` takes the roofline for the others
    covers: Callable[[str], bool] | None = None


def _build_roofline(ctx: TimingContext) -> TimingModel:
    return RooflineTiming(
        ctx.arith,
        ctx.hw,
        ctx.par,
        ctx.eff,
        accepted_tokens_per_step=ctx.accepted_tokens_per_step,
        draft_tokens=ctx.draft_tokens,
        verify_rows=ctx.verify_rows,
        engram_in_dram=ctx.engram_in_dram,
        vision_on_instance=ctx.vision_on_instance,
    )


_REGISTRY: dict[str, _Entry] = {"roofline": _Entry(_build_roofline, lambda _hw: True)}


def profile_achievable(hw_profile: Any) -> dict[str, Any]:
    """A hardware profile's achievable fractions by name (sim.hardware), without a scenario's overrides."""
    return {k: getattr(hw_profile.achievable, k).value for k in type(hw_profile.achievable).model_fields}


def hw_rates(hw, scale_out_latency_s: float) -> HwRates:
    """The peak rates the timing models read from a hardware profile (sim.hardware), per GPU and node."""
    return HwRates(
        gpus_per_node=hw.gpus_per_node,
        scale_up_domain_gpus=hw.scale_up_domain_gpus,
        fp8_flops_per_s=hw.peak_flops_per_s("fp8"),
        bf16_flops_per_s=hw.peak_flops_per_s("bf16"),
        hbm_bw_bytes_per_s=hw.hbm_bw_bytes_per_s,
        scale_up_bw_bytes_per_s=hw.scale_up_bw_per_gpu_bytes_per_s,
        scale_up_latency_s=hw.scale_up.latency_us.value * units.US,
        allreduce_latency_s=(hw.scale_up.allreduce_latency_us or hw.scale_up.latency_us).value * units.US,
        allreduce_bw_bytes_per_s=(
            hw.scale_up.allreduce_bus_GBps.value * units.GB if hw.scale_up.allreduce_bus_GBps else 0.0
        ),
        scale_out_bw_per_gpu_bytes_per_s=hw.scale_out_bw_per_gpu_bytes_per_s,
        scale_out_bw_per_node_bytes_per_s=hw.scale_out_bw_per_node_bytes_per_s,
        scale_out_latency_s=scale_out_latency_s,
        pcie_bw_per_gpu_bytes_per_s=hw.pcie_bw_per_gpu_bytes_per_s,
        ssd_read_bytes_per_s=hw.ssd_read_bytes_per_s,
        ssd_write_bytes_per_s=hw.ssd_write_bytes_per_s,
        deepep=deepep_costs(hw.scale_up.deepep),
        allreduce_nccl_latency_s=(
            hw.scale_up.allreduce_nccl_latency_us.value * units.US
            if hw.scale_up.allreduce_nccl_latency_us
            else 0.0
        ),
        allreduce_nccl_bw_bytes_per_s=(
            hw.scale_up.allreduce_nccl_bus_GBps.value * units.GB
            if hw.scale_up.allreduce_nccl_bus_GBps
            else 0.0
        ),
    )


def deepep_costs(measured: Any) -> DeepEpCosts | None:
    """A profile's `scale_up.deepep` block (sim.hardware.schema.DeepEp) in seconds; None where not measured."""
    if measured is None:
        return None

    def call(kernel: Any, what: str) -> A2aCall:
        return A2aCall(
            getattr(kernel, f"{what}_us").value * units.US,
            getattr(kernel, f"{what}_us_per_token").value * units.US,
        )

    ll, normal, sweep = measured.low_latency, measured.normal, measured.normal_sms
    return DeepEpCosts(
        call(ll, "dispatch"),
        call(ll, "combine"),
        call(normal, "dispatch"),
        call(normal, "combine"),
        measured_ep_gpus=measured.measured_ep_gpus.value,
        measured_sms=sweep.measured_sms.value,
        dispatch_sm_frac=sweep.dispatch_sm_frac.value,
        combine_sm_frac=sweep.combine_sm_frac.value,
    )


def efficiency(achievable: dict, timing) -> Efficiency:
    """The pool's achievable fractions (profile, with the scenario's overrides) and the
    scenario's fixed costs (`timing` block)."""
    mfu_prefill = achievable["mfu_prefill"]
    # a null decode MFU in the profile means "bandwidth-bound": compute at the prefill MFU
    mfu_decode = achievable["mfu_decode"] if achievable["mfu_decode"] is not None else mfu_prefill
    return Efficiency(
        mfu_prefill=mfu_prefill,
        mfu_decode=mfu_decode,
        hbm_bw_frac=achievable["hbm_bw_frac"],
        scale_up_bw_frac=achievable["scale_up_bw_frac"],
        scale_out_bw_frac=achievable["scale_out_bw_frac"],
        pcie_bw_frac=achievable["pcie_bw_frac"],
        ssd_bw_frac=achievable["ssd_bw_frac"],
        step_overhead_s=timing.kernel_overhead_s * timing.kernels_per_layer_step,  # x layers: see below
        comm_overlap_frac=timing.comm_overlap_frac,
    )


def register_timing_model(
    name: str,
    build: Callable[[TimingContext], TimingModel],
    has_tables: Callable[[Any], bool],
    covers: Callable[[str], bool] | None = None,
) -> None:
    """Register an implementation (call at import time of the implementing module)."""
    _REGISTRY[name] = _Entry(build, has_tables, covers)


def _load_providers() -> None:
    for module in _PROVIDERS:
        try:
            importlib.import_module(module)
        except ModuleNotFoundError as err:
            if err.name != module:
                raise


def available_timing_models() -> list[str]:
    _load_providers()
    return sorted(_REGISTRY)


def resolve_timing_name(requested: str, hw_profile: Any, model_name: str | None = None) -> str:
    """`auto` -> `calibrated` when registered and it has tables for this hardware (and model, when
    given), else `roofline`."""
    _load_providers()
    if requested == "auto":
        entry = _REGISTRY.get("calibrated")
        if entry is None or not entry.has_tables(hw_profile):
            return "roofline"
        covered = model_name is None or entry.covers is None or entry.covers(model_name)
        return "calibrated" if covered else "roofline"
    if requested not in _REGISTRY:
        raise InputError(
            "timing model not available",
            where="timing.model",
            value=requested,
            allowed=["auto", *sorted(_REGISTRY)],
        )
    if not _REGISTRY[requested].has_tables(hw_profile):
        raise InputError(
            f"no {requested} tables for this hardware",
            where="timing.model",
            value=requested,
            allowed="auto, roofline",
        )
    return requested


def make_timing(requested: str, ctx: TimingContext) -> TimingModel:
    """Build the timing model a scenario asks for (see the module doc for `auto`)."""
    return _REGISTRY[resolve_timing_name(requested, ctx.hw_profile, ctx.model_name)].build(ctx)
