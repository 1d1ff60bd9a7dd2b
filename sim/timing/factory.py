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
from dataclasses import dataclass
from typing import Any

from sim.errors import InputError
from sim.timing.base import TimingModel
from sim.timing.host import NO_HOST, HostCosts
from sim.timing.roofline import Efficiency, HwRates, Parallelism, RooflineTiming

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
    row_buckets: tuple[int, ...] = ()  # CUDA-graph row buckets (timing.graph_row_buckets; empty: no padding)
    prefill_through_decode: bool = (
        False  # prefill rows attend through the decode kernel (timing.prefill_attention)
    )
    verify_rows: int = 0  # query rows per decoding sequence per step; 0 = 1 + draft_tokens
    prefill_cp: str = "off"  # prefill context parallelism of the pool (sim.timing.context_parallel)
    host: HostCosts = NO_HOST  # the engine's host time around a step (timing.host; sim.timing.host)


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
