"""Deployments the serving engine would refuse to start, read on a scenario's pools: `sim run` says so
in each model's summary (`engine_refusal`) and the deployment search (sim.sweep.space) prunes them.
The simulator would still simulate such a deployment; its figures are then what the engine would
serve if it allowed it."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

from sim.config.families import model_family

if TYPE_CHECKING:
    from sim.config.scenario import Scenario

DSPARK_PD_REFUSAL = (
    "SGLang would not start this deployment: it serves V4.1 with DSpark (speculative decoding) "
    "disaggregated only on pools with attention DP 1 and prefill CP off"
)


def engine_refusal(model: str, pools: Sequence[Mapping[str, Any]], spec_decode: bool) -> str | None:
    """Why SGLang would refuse to serve `model` on `pools` (a scenario's `cluster.pools`, as mappings),
    or None. SGLang's `validate_deepseek_v41_features` (python/sglang/srt/arg_groups/deepseek_v4_hook.py)
    raises "DeepSeek-V4.1 DSpark PD requires static verify, Mooncake, DP=1 and CP=1" for a
    disaggregated server with speculative decoding unless dp_size is 1, DP attention off and the
    attention / prefill CP sizes 1, and it admits no other drafter for V4.1; so with spec_decode on, a
    V4.1 deployment split into prefill and decode pools runs only with plain attention TP on both
    sides."""
    disaggregated = any(p["role"] != "colocated" for p in pools)
    if not (spec_decode and disaggregated and model_family(model) == "v41"):
        return None
    if any(p.get("dp", 1) > 1 or p.get("prefill_context_parallel", "off") != "off" for p in pools):
        return DSPARK_PD_REFUSAL
    return None


def scenario_refusal(scn: Scenario, model: str) -> str | None:
    """`engine_refusal` of `model` on the scenario's own pools and speculative-decoding switch."""
    return engine_refusal(model, [p.model_dump() for p in scn.cluster.pools], scn.spec_decode.enabled)
