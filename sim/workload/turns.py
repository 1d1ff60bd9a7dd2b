"""What ends a user turn: one definition for `sim trace stats` and `sim trace fit`."""

from __future__ import annotations

import numpy as np

TOOL_USE = "tool_use"


def ends_turn(stop_reason: np.ndarray) -> np.ndarray:
    """A main-agent request hands back to the human unless it stopped for a tool call: after
    `end_turn`, `max_tokens` or no stop reason the next input is a user message (Weka dev trace:
    941 of the 950 requests without a stop reason are followed by one)."""
    return np.asarray(stop_reason, dtype=object) != TOOL_USE
