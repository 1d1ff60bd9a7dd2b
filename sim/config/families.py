"""Model families: the key under which per-model policy blocks (`cache.v4`, `spec_decode.v41`) and
DeepSeek API prices are filed. One place, so that a new model is added once."""

from __future__ import annotations

from typing import Literal

from sim.errors import InputError

Family = Literal["v4", "v41"]

_FAMILY_OF_MODEL: dict[str, Family] = {
    "deepseek-v4-flash": "v4",
    "deepseek-v4.1-flash": "v41",
}


def family_names() -> list[str]:
    return sorted(set(_FAMILY_OF_MODEL.values()))


def servable_models() -> list[str]:
    """Models a scenario may simulate: those with a family (the others are reference-only)."""
    return list(_FAMILY_OF_MODEL)


def model_family(model_name: str) -> Family:
    """`v4` or `v41` for a servable model; an InputError naming the servable models otherwise."""
    if model_name not in _FAMILY_OF_MODEL:
        raise InputError(
            "no policy family for model", where="models", value=model_name, allowed=servable_models()
        )
    return _FAMILY_OF_MODEL[model_name]
