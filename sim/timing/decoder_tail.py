"""Which prefill mode a pool's engine runs: whether V4.1's decoder layers see only each request's
last rows (the decoder tail of CED, "decoder SWA bounded replay", model.md §6.2) or every prompt
token, given the pool's attention layout. Pure; sim.cluster.build applies it per pool.

V4.1 halves its prefill work by running the decoder layers (20/21-39) on each request's last 128
rows only (model.md §6.2, §10 [A]). No engine runs that tail on an instance with DP attention:
- SGLang (`arg_groups/deepseek_v4_hook.py`, `validate_deepseek_v41_features`) refuses
  `--enable-decoder-swa-bounded-replay` together with DP attention ("input_ids_global is a DP-wide
  gather, not a per-local-token tensor, so the tail slice does not apply to it"), and its DeepSeek-V4
  prefill context parallelism turns DP attention on (`validate_deepseek_v4_cp` resolves
  `enable_dp_attention=True`, attention CP size tp / dp), so a CP pool cannot run the tail either;
- vLLM's decoder-side replay is not merged (vllm#58132 open, after #56752 was closed; its DP4
  accuracy runs say it would allow DP once it lands); vLLM#57281 describes main as running layers
  21-39 on the full prompt.
So by default (`cluster.pools[].prefill_decoder_tail: auto`) a pool with DP attention (dp > 1) or
prefill CP runs the model's mode without a tail (V4.1: `full40`, every layer on every prompt token),
and a pool of plain attention TP keeps the model's mode (V4.1: `ced`, SGLang's flag on). `on` keeps
the tail everywhere (an engine that lifts the restriction, e.g. vLLM once #58132 lands with DP);
`off` drops it everywhere (vLLM main today). Models without a decoder tail (V4) are unchanged.
"""

from __future__ import annotations

from sim.model.modes import on_every_prompt_token

TAIL_SETTINGS = ("auto", "on", "off")


def has_decoder_tail(spec, mode: str) -> bool:
    """Whether some layer of `spec` runs only on the decoder tail in prefill `mode`."""
    return any(not on_every_prompt_token(spec, layer.index, "attention", mode) for layer in spec.layers)


def tail_allowed(setting: str, *, dp: int, prefill_cp: str) -> bool:
    """Whether a pool's engine runs the decoder tail (module doc): `auto` on plain attention TP only."""
    if setting not in TAIL_SETTINGS:
        raise ValueError(f"prefill_decoder_tail {setting!r}, not one of {TAIL_SETTINGS}")
    if setting == "auto":
        return dp == 1 and prefill_cp == "off"
    return setting == "on"


def pool_prefill_mode(spec, mode: str, *, setting: str, dp: int, prefill_cp: str) -> str:
    """The prefill mode a pool runs: the model's `mode`, or, where the pool's engine cannot run its
    decoder tail, the model's mode with every layer on every prompt token."""
    if not has_decoder_tail(spec, mode) or tail_allowed(setting, dp=dp, prefill_cp=prefill_cp):
        return mode
    full = [m for m in spec.prefill_modes if not has_decoder_tail(spec, m)]
    if not full:  # a spec that lists only tail modes has no way to run without one
        raise ValueError(f"{spec.name} lists no prefill mode without a decoder tail: {spec.prefill_modes}")
    return full[0]
