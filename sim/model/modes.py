"""Prefill execution modes: which weight blocks run on every prompt token and which only on the
decoder tail (model.md §6.2).

- "full" (V4, references) and "full40" (V4.1, DeepSeek's reference generate.py): every layer, every token.
- "ced" (V4.1 production): encoder layers 0-19 plus layer 20's source projection (compressor + index-key
  projection) on every token; layers 20-39 otherwise only on the request's last tail rows.
- "engine" (vLLM / ATOM / SGLang): layers 0-20 on every token, 21-39 on the tail.
"""

from __future__ import annotations

from sim.errors import InputError

from .spec import ModelSpec

# Blocks of the decoder's KV-source layer that CED runs on every prompt token (model.md §6.2 [A, S2]).
SOURCE_PROJECTION_BLOCKS = ("compressor", "index_keys")


def resolve_prefill_mode(spec: ModelSpec, mode: str | None) -> str:
    """The mode to use (None: the model's default); a mode the model lacks is an InputError."""
    if mode is None:
        return spec.default_prefill_mode
    if mode not in spec.prefill_modes:
        raise InputError(
            f"unknown prefill mode for {spec.name}", where="mode", value=mode, allowed=spec.prefill_modes
        )
    return mode


def on_every_prompt_token(spec: ModelSpec, layer: int, block: str, mode: str) -> bool:
    """True if the block runs on every prompt token in `mode`; False if only on the decoder tail."""
    if mode in ("full", "full40") or spec.ced is None:
        return True
    source = spec.ced.decoder_source_layer
    if mode == "engine":
        return layer <= source
    return layer < source or (layer == source and block in SOURCE_PROJECTION_BLOCKS)
