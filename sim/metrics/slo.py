"""Whether a request met the SLO: the one rule the run's recorder and a fleet's merge both apply."""

from __future__ import annotations

import numpy as np


def slo_met(ttft_s: np.ndarray, tpot_s: np.ndarray, output_tokens: np.ndarray, slo_ttft_s: float,
            slo_tpot_s: float) -> np.ndarray:  # fmt: skip
    """Per request: its TTFT within the SLO and, when it made more than one token, its TPOT too (a one-token
    request has no TPOT). NaN latencies (requests that did not complete) compare False."""
    with np.errstate(invalid="ignore"):
        return (ttft_s <= slo_ttft_s) & ((output_tokens <= 1) | (tpot_s <= slo_tpot_s))
