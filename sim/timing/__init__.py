"""How long things take: one interface (`base.TimingModel`) for prefill and mixed steps, decode
spans and transfers; two implementations, `roofline` and `calibrated` (measured kernel tables),
and `factory.make_timing` the one place that picks one (`timing.model: auto | roofline | calibrated`)."""

from sim.timing.base import LINK_KINDS, TimingModel
from sim.timing.batch import DecodeTerms, PrefillChunk
from sim.timing.factory import available_timing_models, make_timing, register_timing_model

__all__ = [
    "LINK_KINDS",
    "DecodeTerms",
    "PrefillChunk",
    "TimingModel",
    "available_timing_models",
    "make_timing",
    "register_timing_model",
]
