"""Model arithmetic, as pure functions of a spec loaded from `specs/<name>.yaml` (model.md is the source).

spec = load_model("deepseek-v4.1-flash")
global_kv_bytes_per_token(spec)             # 890.0
decode_cost(spec, np.array([4096, 1 << 20])).total_flops
prefill_cost(spec, new_tokens=8192, cached_tokens=0, mode="ced").total_flops
"""

from .cost import DecodeCost, PrefillCost, decode_cost, keys_attended_per_layer, prefill_cost
from .kv import (
    PERSIST_POLICIES,
    LayerKvBytes,
    SwaPrefixState,
    compressor_state_bytes_per_sequence,
    global_kv_bytes_per_token,
    global_kv_bytes_per_token_by_component,
    global_kv_bytes_per_token_by_layer,
    persistent_bytes,
    swa_bytes_per_sequence,
    swa_prefix_state,
    swa_rebuild_tokens,
    swa_window_tokens,
)
from .modes import resolve_prefill_mode
from .side import (
    draft_row_flops,
    draft_step_flops,
    engram_flops_per_token,
    engram_gather_bytes_per_token,
    vision_flops_per_image,
)
from .spec import LayerSpec, ModelSpec, load_model, model_names, parse_model
from .weights import (
    active_params_decode,
    active_params_prefill,
    decode_weight_bytes_per_step,
    engram_table_bytes,
    expected_experts_touched,
    expert_bytes,
    total_params,
    weights_bytes,
    weights_bytes_by_dtype,
    weights_bytes_by_group,
)

__all__ = [
    "PERSIST_POLICIES",
    "DecodeCost",
    "LayerKvBytes",
    "LayerSpec",
    "ModelSpec",
    "PrefillCost",
    "SwaPrefixState",
    "active_params_decode",
    "active_params_prefill",
    "compressor_state_bytes_per_sequence",
    "decode_cost",
    "decode_weight_bytes_per_step",
    "draft_row_flops",
    "draft_step_flops",
    "engram_flops_per_token",
    "engram_gather_bytes_per_token",
    "engram_table_bytes",
    "expected_experts_touched",
    "expert_bytes",
    "global_kv_bytes_per_token",
    "global_kv_bytes_per_token_by_component",
    "global_kv_bytes_per_token_by_layer",
    "keys_attended_per_layer",
    "load_model",
    "model_names",
    "parse_model",
    "persistent_bytes",
    "prefill_cost",
    "resolve_prefill_mode",
    "swa_bytes_per_sequence",
    "swa_prefix_state",
    "swa_rebuild_tokens",
    "swa_window_tokens",
    "total_params",
    "vision_flops_per_image",
    "weights_bytes",
    "weights_bytes_by_dtype",
    "weights_bytes_by_group",
]
