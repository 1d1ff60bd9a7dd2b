"""The base of every config model: frozen, strict, unknown keys rejected (style.md §6)."""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict


class StrictModel(BaseModel):
    """Frozen after validation; no type coercion (a string is never read as a number); no extra keys."""

    model_config = ConfigDict(frozen=True, strict=True, extra="forbid", validate_default=True)
