"""Engine profiles: what the serving engine named by `engine: {name, version}` (a scenario's, or a pool's
own) decides, each rule with the source it was read from and the engine versions it holds for.

A profile decides, per pool: how a colocated step combines prefill chunks with the running decodes
(`step_composition`; `dp_step_composition` where it differs on a colocated DP-attention pool without
speculative decoding), how DP-attention ranks share the prefill budget (`dp_prefill_budget`) and the
running-request cap (`dp_running_cap`), the KV block size, where its prefix cache keeps DeepSeek-V4's sliding
windows (`swa_checkpoints`), what a decode step costs beyond its kernels (`decode_layer_term`,
`spec_decode_host_chain_s`), how many rows a DSpark step verifies (`dspark_verify`: the whole block, which is
`spec_decode.<family>.verify_rows`'s default), and which speculative-decoding /
disaggregation / context-parallel combinations the engine starts at all. `sim run` (each model's summary `engine_refusal`) and `sim scenario check` say when the
named engine would refuse a deployment, and the deployment search (sim.sweep.space) prunes it; a
refusal names its source and the version it was read from. The simulator would still simulate a
refused deployment: its figures are then what the engine would serve if it allowed it. A scenario
that names no engine gets sim's generic defaults (`scheduler.step_composition` mixed,
`dp_prefill_budget` divided, `dp_running_cap` instance) and no engine's refusals.

`scheduler.step_composition` / `scheduler.dp_prefill_budget` / `scheduler.dp_running_cap`, when set,
override the profile for every pool (a what-if; the engine would not run that way). `sim scenario fields` lists the profiles.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Literal, NamedTuple

from pydantic import Field, model_validator

from sim.config.base import StrictModel
from sim.config.errors import Problem, raise_problems
from sim.config.families import family, model_family

if TYPE_CHECKING:
    from sim.config.scenario import Scenario

# The versions sim knows, oldest first, and what each was read from. SGLang's DeepSeek-V4.1 rules were
# read at main@006cbb66 (sgl-project/sglang, python/sglang/srt/arg_groups/deepseek_v4_hook.py); which
# release first ships that code is not identified [D], so the version is named by its commit.
VERSIONS: dict[str, tuple[str, ...]] = {
    "sglang": ("0.5.15", "0.5.16", "main@006cbb66"),
    "vllm": ("0.23.0", "0.26.0", "0.28.1"),
}
VERSION_SOURCES: dict[str, str] = {
    "sglang 0.5.15": "the SGLang cookbook's DeepSeek-V4 benchmark table (deepseek-v4-benchmarks.jsx) was measured on it",
    "sglang 0.5.16": "sglang PR #33083 (DeepSeek-V4-Flash-0731 recipe, test environment v0.5.16)",
    "sglang main@006cbb66": "sglang main at commit 006cbb66, deepseek_v4_hook.py read for issue 29",
    "vllm 0.23.0": "NVIDIA Dynamo 1.3.0's vllm-runtime image ships it (docs.nvidia.com/dynamo/v1.3.0 release "
    "artifacts and support matrix), the image of Dynamo's DeepSeek-V4 recipes",
    "vllm 0.26.0": "vllm issue #51758 (V4-Flash DSpark on vLLM 0.26.0)",
    "vllm 0.28.1": "vllm issue #56797 (V4.1-Flash DSpark on vLLM 0.28.1rc1)",
}


class Engine(StrictModel):
    """The serving engine of a scenario or pool, by name and version (VERSIONS lists those known)."""

    name: Literal["vllm", "sglang"] = Field(description="the serving engine whose rules apply")
    version: str | None = Field(
        None, description="one of the engine's known versions; null = the newest known"
    )

    @model_validator(mode="after")
    def _known_version(self) -> Engine:
        known = VERSIONS[self.name]
        if self.version is not None and self.version not in known:
            raise_problems([Problem("version", f"not a {self.name} version sim has rules for", self.version,
                                    ", ".join(known))])  # fmt: skip
        return self

    @property
    def resolved_version(self) -> str:
        return self.version or VERSIONS[self.name][-1]

    @property
    def label(self) -> str:
        return f"{self.name} {self.resolved_version}"

    def at_least(self, version: str) -> bool:
        known = VERSIONS[self.name]
        return known.index(self.resolved_version) >= known.index(version)


@dataclass(frozen=True)
class Rule:
    """One rule of one engine: `value` for the `versions` listed, read from `source`."""

    engine: str
    versions: tuple[str, ...]
    rule: str
    value: str
    source: str


_SG_OLD = ("0.5.15", "0.5.16")
_HOOK = "sglang python/sglang/srt/arg_groups/deepseek_v4_hook.py"
ZIGZAG_CP = Rule(
    "sglang",
    VERSIONS["sglang"],
    "refuses",
    "V4 prefill CP zigzag on GPUs",
    f"{_HOOK} validate_deepseek_v4_cp: 'DeepSeekV4 zigzag CP requires the NPU backend' (main@006cbb66)",
)
DSPARK_PD_DP1_CP1 = Rule(
    "sglang",
    _SG_OLD,
    "refuses",
    "V4.1 DSpark disaggregated unless every pool has DP 1 and CP off",
    f"{_HOOK} validate_deepseek_v41_features as sglang PR #38949 added DSpark PD: 'DeepSeek-V4.1 DSpark PD "
    "requires static verify, Mooncake, DP=1 and CP=1'; whether 0.5.15 / 0.5.16 serve V4.1 at all is not checked [D]",
)
DSPARK_PD_DCP1 = Rule(
    "sglang",
    ("main@006cbb66",),
    "refuses",
    "V4.1 DSpark disaggregated with CP on a decode pool or zigzag prefill CP (DP attention is accepted)",
    f"{_HOOK} validate_deepseek_v41_features at main@006cbb66: 'DSpark PD requires static verify, Mooncake, and "
    "DCP=1. Use CP=1 for DP attention, or interleave prefill CP with DP=1'; its test accepts DP prefill and decode",
)
_DSPARK_HOOK = "sglang python/sglang/srt/arg_groups/speculative_hook.py _handle_dspark"
# DSpark on DeepSeek-V4's own backbone (V4-Flash-0731's bundled head): SGLang's checks key on the V4 architecture
# and the checkpoint's dspark_* keys, not on V4.1 (read in the v0.5.16 wheel; main@006cbb66 taken to keep them [D])
V4_EAGLE_ONLY = Rule(
    "sglang",
    ("0.5.15",),
    "refuses",
    "speculative decoding on DeepSeek-V4 other than EAGLE (no DSpark before 0.5.16)",
    "sglang python/sglang/srt/arg_groups/deepseek_v4_hook.py (v0.5.15 wheel): 'Only EAGLE speculative algorithm is "
    "supported'; 0.5.15 has no DSpark code",
)
V4_DSPARK_DP = Rule(
    "sglang",
    ("0.5.16", "main@006cbb66"),
    "refuses",
    "V4 DSpark under DP attention with an all-to-all MoE backend (deepep, megamoe) or attention TP above 1 a rank",
    f"{_DSPARK_HOOK}: 'DSpark with dp attention only supports the built-in TP MoE (moe_a2a_backend='none')'; "
    "speculative/dspark_components/dspark_worker_v2.py: 'DSpark + dp attention with a DeepSeek-V4 (MoE) draft requires "
    "attn_tp == 1 (set --dp-size == --tp)' (v0.5.16 wheel)",
)
V4_DSPARK_CP = Rule(
    "sglang",
    ("0.5.16", "main@006cbb66"),
    "refuses",
    "V4 DSpark with prefill context parallelism",
    "sglang python/sglang/srt/models/deepseek_v4.py: NotImplementedError 'DSpark aux hidden-state capture is not "
    f"supported together with DeepSeek-V4 prefill context parallelism'; {_DSPARK_HOOK}: 'DSpark with dp attention "
    "does not support context parallel' (v0.5.16 wheel)",
)
# a rule value: the rule's number depends on the GPU and TP size (the table below)
PER_GPU_AND_TP = "per compute capability and TP size (VLLM_FAST_ALLREDUCE_MAX_MIB)"
# vLLM 0.34.0's largest TP all-reduce message before NCCL, MiB, per compute capability and TP size: the largest of
# its FlashInfer, custom and symmetric-memory tiers at that size (rule custom_allreduce_max_bytes). 10.3 has no
# custom or symmetric-memory table (custom keeps its 8 MiB, symmetric memory is off)
VLLM_FAST_ALLREDUCE_MAX_MIB: dict[str, dict[int, float]] = {
    # FlashInfer {2: 64, 4: 2, 8: 0.5}, custom <= 8, symmetric memory {2: 64, 4: 32, 6: 64, 8: 64}
    "9.0": {2: 64, 4: 32, 6: 64, 8: 64},
    # FlashInfer {2: 64, 4: 32, 8: 1}, custom <= 2, symmetric memory {2: 8, 4: 32, 6: 128, 8: 128}
    "10.0": {2: 64, 4: 32, 6: 128, 8: 128},
    # FlashInfer {2: 64, 4: 64, 8: 4}, custom 8
    "10.3": {2: 64, 4: 64, 6: 8, 8: 8},
}
VLLM_CUSTOM_ALLREDUCE_MAX_MIB = 8.0  # CustomAllreduce(max_size=8192 * 1024) where no table names the GPU / TP


class LayerShape(NamedTuple):
    """What of a decoder layer's attention side an eager step launches kernels for (from its LayerSpec)."""

    compressor: bool  # compresses its own KV (CSA, HCA)
    indexer: bool  # scores its own top-k (CSA; V4.1's CSA2 where it selects anew)
    compressed: bool  # attends compressed entries beside the window
    top_k: bool  # over a top-k selection of them (not all: HCA)


@dataclass(frozen=True)
class LaunchInventory:
    """What one GPU's host launches (kernels, copies, collectives) in an eager DeepSeek-V4 extend step: per
    decoder layer by what its attention side does and by the MoE path, plus once a step (rule
    `eager_prefill_launches`)."""

    projections: float  # q / kv side and output side of every layer
    compressor: float
    indexer: float
    window_attention: float  # the window's dequantisation and the sparse attention kernel
    compressed_region: float  # the compressed entries' dequantisation
    top_k_combine: float  # merging the top-k selection into the attention's index list
    attention_tp_allreduce: float  # wo_b's all-reduce, where attention runs TP over the instance's GPUs
    mhc: float  # both boundaries of a layer
    moe: Mapping[str, float]  # per layer, by the pool's moe_a2a (none: TP or EP experts without an exchange)
    per_step: float  # attention metadata, the prompt's embedding, the head, sampling

    def layer(self, shape: LayerShape, moe_a2a: str, attention_tp: int) -> float:
        return (
            self.projections
            + self.compressor * shape.compressor
            + self.indexer * shape.indexer
            + self.window_attention
            + self.compressed_region * shape.compressed
            + self.top_k_combine * (shape.compressed and shape.top_k)
            + (self.attention_tp_allreduce if attention_tp > 1 else 0.0)
            + self.mhc
            + self.moe.get(moe_a2a, self.moe["none"])
        )

    def describe(self) -> str:
        moe = " / ".join(f"{k} {v:g}" for k, v in self.moe.items())
        return (
            f"a layer: projections {self.projections:g}, compressor {self.compressor:g}, indexer {self.indexer:g}, "
            f"attention {self.window_attention:g} + {self.compressed_region:g} with compressed entries + "
            f"{self.top_k_combine:g} for a top-k, +{self.attention_tp_allreduce:g} under "
            f"attention TP, mHC {self.mhc:g}, MoE by moe_a2a {moe}; {self.per_step:g} a step"
        )


# SGLang v0.5.15's V4 extend path, counted launch by launch in the released wheel's code (CUDA defaults; the
# best of each low / best / high count in docs/carry/eager/sglang_v4_launches.md, every launch with its file and
# line) [B read, D where a library's internal launches are inferred; counted, not profiled]: per layer the
# projections 13 (fused wq_a + wkv, wq_b, wo_b: each a per-token-group quantisation and a DeepGEMM GEMM; q norm,
# the fused q norm / RoPE, the fused kv norm / RoPE / store, the inverse RoPE, wo_a's quantisation and
# fp8_einsum), mHC 6 (DeepGEMM's pre-norm GEMM and TileLang's pre at both boundaries, TileLang's post at both), a
# compressor 4, the C4 indexer 10, the sparse prefill attention 2 (window) + 1 (compressed region) + 1 (top-k
# combine), wo_b's all-reduce under attention TP; the MoE (router, top-k, shared expert included) 12 with Mega
# MoE, 16 TP (flashinfer_mxfp4 on Blackwell; Triton's fused MoE on the H200 one more), 28 with DeepEP normal and
# DeepGEMM's contiguous runner; once a step about 120 (extend metadata 47, the sparse prefill's lazy set-up in
# layers 0 / 2 / 3 48, embedding, mHC expand and head, final norm, logits, sampling)
SGLANG_V4_EXTEND_LAUNCHES = LaunchInventory(
    projections=13.0,
    compressor=4.0,
    indexer=10.0,
    window_attention=2.0,
    compressed_region=1.0,
    top_k_combine=1.0,
    attention_tp_allreduce=1.0,
    mhc=6.0,
    moe={"none": 16.0, "deepep": 28.0, "megamoe": 12.0},
    per_step=120.0,
)


# SGLang's speculative loop for DeepSeek-V4's MTP block (EAGLE), a decode step's host chain [D: estimated, not
# profiled; docs/engines_and_validation.md section 15]: the draft extend runs eagerly (about 130 launches at the
# measured 31.5 us a launch, 4.1 ms) and the host then prepares the next step after the verify it waits for, about
# 9-13 ms in all; the middle is taken. It overlaps the GPU's own work (section 18), so a step is the longer of the two.
SGLANG_V4_EAGLE_HOST_CHAIN_S = 0.011

RULES: tuple[Rule, ...] = (
    Rule(
        "vllm",
        VERSIONS["vllm"],
        "step_composition",
        "mixed",
        "vllm/v1/core/sched/scheduler.py Scheduler.schedule: RUNNING requests first, then WAITING ones under the "
        "rest of --max-num-batched-tokens, in one step",
    ),
    Rule(
        "sglang",
        VERSIONS["sglang"],
        "step_composition",
        "prefill_first",
        "sglang Scheduler.get_next_batch_to_run runs a new prefill batch first ('Run prefill first if possible') "
        "and the running batch waits, unless --enable-mixed-chunk (default False in server_args.py); with DP "
        "attention and speculative decoding prepare_mlp_sync_batch keeps every rank out of decode in that step",
    ),
    Rule(
        "sglang",
        VERSIONS["sglang"],
        "dp_step_composition",
        "rank_prefill_first",
        "colocated DP attention without speculative decoding: each DP rank runs its own Scheduler and picks its own "
        "batch by get_next_batch_to_run (prefill first, --enable-mixed-chunk default False in server_args.py), so "
        "a rank holding a chunk runs it while the others decode; prepare_mlp_sync_batch only gathers the ranks' "
        "batches for the MoE layers (sim/sched/batcher.py)",
    ),
    Rule(
        "vllm",
        VERSIONS["vllm"],
        "dp_prefill_budget",
        "per_rank",
        "vllm docs/serving/data_parallel_deployment.md: each DP rank is an engine core with its own scheduler "
        "and --max-num-batched-tokens",
    ),
    Rule(
        "sglang",
        VERSIONS["sglang"],
        "dp_prefill_budget",
        "divided",
        "sglang divides --chunked-prefill-size by the DP size for DP attention (sim/sched/batcher.py)",
    ),
    Rule(
        "sglang",
        VERSIONS["sglang"],
        "dp_running_cap",
        "per_rank",
        "sglang model_runner_kv_cache_mixin.py _resolve_max_num_reqs: 'Compute max concurrent requests (per dp "
        "worker)', --max-running-requests // dp_size; server_args.py _handle_load_balance_method: 'auto' is "
        "round_robin without PD and on a PD decode server (DataParallelController.round_robin_scheduler), so a "
        "request's rank is fixed as it arrives and it waits in that rank's queue (read in the v0.5.15 wheel)",
    ),
    Rule(
        "vllm",
        VERSIONS["vllm"],
        "dp_running_cap",
        "instance",
        "each DP rank is an engine core with its own --max-num-seqs (docs/serving/data_parallel_deployment.md), "
        "and vLLM's DP coordinator sends a request to a lightly loaded rank, modelled as one cap over the "
        "instance (the balancing is not re-read [D])",
    ),
    Rule(
        "vllm",
        VERSIONS["vllm"],
        "block_tokens",
        "256",
        "--block-size 256 in every NVIDIA Dynamo DeepSeek-V4 recipe (recipes/deepseek-v4/README.md: 'block size "
        "256'); model.md §5.2 [B]; cache.block_tokens' default",
    ),
    Rule(
        "sglang",
        VERSIONS["sglang"],
        "block_tokens",
        "256",
        "SGLang's 256-token pages for DeepSeek-V4 (--page-size 256 in the cookbook's ROCm cells; model.md §5.2 [B]); "
        "cache.block_tokens' default",
    ),
    Rule(
        "sglang",
        _SG_OLD,
        "swa_checkpoints",
        "every_block",
        "DeepSeek-V4's SWA radix cache (UnifiedRadixCache, FULL + SWA components) inserts the prompt at prefill "
        "with live windows on every page while SGLANG_OPT_UNIFIED_CACHE_FREE_OUT_OF_WINDOW_SLOTS is off (its "
        "default before #34653, 2026-08), and a match ends where its last page's window is live "
        "(SWAComponent.create_match_validator); nothing is re-run on NVIDIA (swa_reprefill_tail_tokens is "
        "ROCm-only) [B, read at main 0057abea and older environ.py copies]; the SWA pool "
        "(--swa-full-tokens-ratio 0.1 of the full pool for V4) evicting windows first is not modelled [D]",
    ),
    Rule(
        "sglang",
        ("main@006cbb66",),
        "swa_checkpoints",
        "sequence_ends",
        "sglang #34653 (2026-08) frees a prompt's out-of-window slots at prefill (common."
        "free_swa_out_of_window_slots), keeping the window before the prompt's end and before each chunk's end; "
        "decode frees generated tokens' windows only (maybe_evict_swa, floored at the prompt), the finished "
        "request keeps its sequence end's; a match whose window is gone shrinks to the deepest live one "
        "(SWAComponent.create_match_validator) [B, read at main 0057abea, taken to hold at 006cbb66]; chunk ends "
        "taken every chunk of the pool from where the last prefill began [D]; the SWA pool "
        "(--swa-full-tokens-ratio 0.1 of the full pool for V4) evicting windows first is not modelled [D]",
    ),
    Rule(
        "sglang",
        _SG_OLD,
        "swa_token_pool",
        "DeepSeek-V4: a running request holds its last prefill chunk (page-rounded) and its decode window in an SWA "
        "pool of 0.1 of the full pool's tokens; no prefill is admitted that the pool cannot hold",
        "arg_groups/overrides.py _deepseek_v4_overrides (swa_full_tokens_ratio 0.1, page_size 256); model_executor/"
        "pool_configurator.py DSV4PoolConfigurator (the full pool's bytes per token, the c128 states taken off first); "
        "mem_cache/swa_radix_cache.py insert and inc_lock_ref (SGLANG_OPT_SWA_SPLIT_LEAF_ON_INSERT off: a chunk's leaf "
        "locked whole); managers/schedule_batch.py maybe_evict_swa (SGLANG_SWA_EVICTION_INTERVAL 128); managers/"
        "schedule_policy.py PrefillAdder.rem_swa_tokens; read in the v0.5.15 wheel, 0.5.16 taken to be the same [D] "
        "(sim/sched/swa_pool.py; docs/engines_and_validation.md sections 25 and 28)",
    ),
    Rule(
        "vllm",
        ("0.23.0", "0.26.0"),
        "swa_checkpoints",
        "every_block",
        "vllm #42258 hashes the window blocks before every 256-token boundary and #43447 keeps them by default "
        "(VLLM_PREFIX_CACHE_RETENTION_INTERVAL unset: 'dense local checkpointing'; in 0.23.0's release notes); "
        "BlockPool.free_blocks leaves a slid-out block's hash until get_new_blocks reuses it, so a V4 hit at any "
        "boundary whose blocks are still in HBM reads its window (SlidingWindowManager.find_longest_cache_hit) and "
        "recomputes nothing [B]; 0.26.0 assumed to predate #52216 [D]",
    ),
    Rule(
        "vllm",
        ("0.28.1",),
        "swa_checkpoints",
        "prompt_ends",
        "vllm #52216 (merged 2026-08-17): prefix_cache_retention_interval defaults to 0, 'retains only semantic "
        "checkpoints, including the latest replay boundary and shared-prefix junctions': a V4 window is kept at "
        "each request's prompt end, and a hit elsewhere falls back to that boundary or to nothing (no replay "
        "path for V4; #56227's bounded replay is V4.1's) [B]; which release first ships #52216 is not verified [D]",
    ),
    Rule(
        "sglang",
        VERSIONS["sglang"],
        "max_running_requests",
        "256",
        f"{_HOOK} apply_deepseek_v4_defaults: max_running_requests 256 when unset (read at main@006cbb66); "
        "sim: scheduler.max_decode_batch, which also caps admission",
    ),
    Rule(
        "vllm",
        VERSIONS["vllm"],
        "max_running_requests",
        "1024 on GPUs of >= 70 GiB but A100 (256 below)",
        "vllm/engine/arg_utils.py EngineArgs.get_batch_defaults: max_num_seqs 1024 and max_num_batched_tokens 8192 "
        "(OpenAI server; 16384 for the LLM class) when --max-num-seqs / --max-num-batched-tokens are unset; listed, "
        "not applied: scheduler.max_decode_batch and prefill_budget_tokens keep sim's defaults, and which usage "
        "context Dynamo's vLLM worker runs under is not checked [D]",
    ),
    Rule(
        "sglang",
        VERSIONS["sglang"],
        "custom_allreduce_max_bytes",
        "8388608",
        "sglang srt/distributed/device_communicators/custom_all_reduce.py CustomAllreduce._MAX_CAR_SIZE = 8192 * "
        "1024 on NVIDIA (should_custom_ar: inp_size <= max_size); a larger TP all-reduce falls to NCCL "
        "(parallel_state.GroupCoordinator.all_reduce -> inplace_all_reduce); read in the v0.5.15 wheel, the later "
        "versions assumed the same [D]",
    ),
    Rule(
        "vllm",
        VERSIONS["vllm"],
        "custom_allreduce_max_bytes",
        PER_GPU_AND_TP,
        "vllm 0.34.0 CudaCommunicator.all_reduce (distributed/device_communicators/cuda_communicator.py) tries, in "
        "order, FlashInfer's all-reduce (VLLM_ALLREDUCE_USE_FLASHINFER default on, up to "
        "FI_ALLREDUCE_FUSION_MAX_SIZE_MB, compilation/passes/fusion/allreduce_rms_fusion.py), its custom all-reduce "
        "(8 MiB, capped by CUSTOM_ALL_REDUCE_MAX_SIZES), torch symmetric memory (VLLM_ALLREDUCE_USE_SYMM_MEM default "
        "on, SYMM_MEM_ALL_REDUCE_MAX_SIZES, all_reduce_utils.py), then NCCL; the rule is the largest message one of "
        "the first three takes. Read in 0.34.0, a later version than the ones sim knows, assumed the same for them [D]; "
        "the three are timed alike, at the profile's custom all-reduce fit [D]; FlashInfer assumed installed and its "
        "backend resolved [D]",
    ),
    Rule(
        "sglang",
        VERSIONS["sglang"],
        "prefill_cuda_graph",
        "off for DeepSeek-V4: every prefill step eager, on every DP rank of the step",
        "sglang server_args.py _disable_breakable_cudagraph_if_incompatible: 'DeepSeek-V4 (heavy capture-pool "
        "memory pressure)' sets the prefill graph backend to disabled unless --cuda-graph-backend-prefill is given "
        "(also DP attention and any MoE A2A backend); under DP attention can_cuda_graph is the minimum over the "
        "ranks (scheduler_components/dp_attn.py); read in the v0.5.15 wheel, the later versions assumed the same [D]",
    ),
    Rule(
        "sglang",
        VERSIONS["sglang"],
        "eager_prefill_launches",
        SGLANG_V4_EXTEND_LAUNCHES.describe(),
        "counted launch by launch in the v0.5.15 wheel's V4 extend path, every launch with its file and line "
        "(docs/carry/eager/sglang_v4_launches.md; SGLANG_V4_EXTEND_LAUNCHES; counted, not profiled [D])",
    ),
    Rule(
        "sglang",
        VERSIONS["sglang"],
        "deepep_expert_alignment_rows",
        "128",
        "srt/layers/moe/token_dispatcher/deepep.py: DeepEP normal dispatch with expert_alignment=128 where "
        "deep_gemm_wrapper.ENABLE_JIT_DEEPGEMM, so each expert's received rows come back rounded up to 128; "
        "moe_runner/deep_gemm.py pre_permute_deepep_normal_to_deep_gemm runs the contiguous grouped GEMMs over "
        "their sum (all_tokens), padding included; read in the v0.5.15 wheel, the later versions assumed the same "
        "[D]; a pool with moe_a2a deepep and table-timed experts, steps holding prefill (docs/engines_and_validation"
        ".md section 29)",
    ),
    Rule(
        "vllm",
        VERSIONS["vllm"],
        "prefill_cuda_graph",
        "breakable: prefill steps replay graphs around an eager attention region",
        "VLLM_USE_BREAKABLE_CUDAGRAPH on by default for DeepseekV4ForCausalLM (vllm issue #54677: with it off "
        "'every prefill-containing step runs eagerly'); vllm #51430 narrowed the eager region to the sparse "
        "indexer and forward_mqa; no eager floor is modelled for it [D]",
    ),
    Rule(
        "sglang",
        VERSIONS["sglang"],
        "decode_layer_term",
        "off: a decode step carries none of the forward-pass term's per-layer part",
        "AIConfigurator 0.12.0's SGLang 0.5.14 decode modules (silicon-measured, summed: 3.6-6.2 ms under sim's step "
        "with the part at TP 4 / 8 on the B200 and H200) and sglang PR #29538's single stream (V4-Flash on 8xB200, "
        "TP 8, 4.34 ms a step without speculation, sim 10.05 with the part): SGLang's graphed decode does not run the "
        "glue and gaps the part holds (docs/engines_and_validation.md section 16); prefill steps keep it [D]",
    ),
    Rule(
        "sglang",
        VERSIONS["sglang"],
        "spec_decode_host_chain_s",
        f"a decode step of DeepSeek-V4's MTP under EAGLE lasts at least {SGLANG_V4_EAGLE_HOST_CHAIN_S * 1e3:g} ms",
        "srt/speculative/eagle_worker_v2.py: the draft-extend graph's backend list omits the V4 attention backend "
        "(the draft extend runs eagerly, about 130 launches at the measured host time a launch); managers/"
        "overlap_utils.py: needs_cpu_seq_lens stays True for the V4 backend (the host waits for the verify before "
        "the next step); read in the v0.5.15 wheel; the chain's size estimated 9-13 ms, not profiled [D] "
        "(docs/engines_and_validation.md sections 15 and 18); V4.1's DSpark drafter is graphed: no floor [D]",
    ),
    Rule(
        "sglang",
        ("0.5.16", "main@006cbb66"),
        "dspark_verify",
        "static: every decoding sequence verifies its whole block, dspark_block_size + 1 rows",
        "sglang srt/environ.py SGLANG_RAGGED_VERIFY_MODE default 'static' (v0.5.16 wheel): no confidence head built, "
        "no verify planner (speculative/dspark_components/dspark_worker_v2.py); the cap-accept / compact prefixes "
        "are opt-in; main@006cbb66's DSpark PD rule 'requires static verify'; sim's spec_decode.<family>.verify_rows "
        "default (null = 1 + draft_tokens) (docs/engines_and_validation.md section 38)",
    ),
    Rule(
        "vllm",
        VERSIONS["vllm"],
        "dspark_verify",
        "the whole block unless --speculative-config sets enable_adaptive_verification (default false)",
        "vllm/config/speculative.py SpeculativeConfig.enable_adaptive_verification: bool = False, 'Currently only "
        "supported for method dspark' (read in the zyongye/vllm mirror at 91a893de, 2026-08-20; the versions "
        "sim knows taken the same [D]); InferenceX's V4.1 golden acceptance (3.51) was measured with it off "
        "(docs/engines_and_validation.md section 38)",
    ),
    ZIGZAG_CP,
    DSPARK_PD_DP1_CP1,
    DSPARK_PD_DCP1,
    V4_EAGLE_ONLY,
    V4_DSPARK_DP,
    V4_DSPARK_CP,
    Rule(
        "vllm",
        VERSIONS["vllm"],
        "refuses",
        "nothing sim can express",
        "no DSpark-with-disaggregation rule found in vLLM; the V4.1 disaggregated recipes reported to run DSpark on "
        "vLLM were not re-read [D]",
    ),
    Rule(
        "vllm",
        VERSIONS["vllm"],
        "reindex_scoring",
        "full_range unless --attention-config indexer_sparse_logits: true",
        "vllm PR #56254 (merged 2026-09-10): V4.1's consumer (Reindex) layers score the whole context with dense MQA "
        "logits and mask outside layer 20's candidates; AttentionConfig.indexer_sparse_logits opts in to DeepGEMM's "
        "sparse MQA logits over the candidate blocks (its tests call it 'the sparse-logits (compact consumer) "
        "opt-in'); the 0909 preview image 0.1.dev20904 has no such option (a third party's check); sim: "
        "cluster.pools[].reindex_scoring candidates where a recipe sets the flag",
    ),
    Rule(
        "sglang",
        ("main@006cbb66",),
        "reindex_scoring",
        "full_range on Hopper, candidates on Blackwell",
        "sglang PR #39671 (merged 2026-09-15, the dsv4.1 candidate indexer library): the Hopper decode and prefill "
        "paths select through mask helpers (dense scores, masked); Blackwell runs DeepGemmCandidateIndexer on "
        "DeepGEMM's paged sparse MQA logits, which has no SM90 kernel (DeepGEMM #432; kernels.md §3: Hopper servers "
        "'scored the whole history and masked out non-candidates, so Reindex cost as much as Full'); #38848's Hopper "
        "compact scoring (#38848, #39057) was closed unmerged and no Hopper candidate path has merged since (tracking "
        "issue #40574, opened 2026-09-21, lists Hopper decode / verify and prefill as not done); main@006cbb66 "
        "carries the V4.1 hook, which reached main with the dsv4.1 stack (maintainer, issue #40152, 2026-09-19), so "
        "it holds #39671 [inferred: the commit's date is not in the stored material]",
    ),
    Rule(
        "sglang",
        ("main@006cbb66",),
        "v41_prefill_indexer",
        "torch on Hopper, kernel on Blackwell",
        "sglang srt/layers/attention/deepseek_v4_backend.py `_low_ratio_index_topk` (the dsv4.1 stack, before "
        "#40217 of 2026-09-20): extend batches take DeepGEMM's fp8_fp4_mqa_logits only on SM100 or newer "
        "('DeepGEMM's fp8_fp4 mqa-logits kernels need SM100+; Hopper takes the torch indexer'), else "
        "`_low_ratio_index_topk_torch`: per request and layer the index keys dequantised to BF16 and the scores "
        "materialised as BF16 [rows, 32, lc] in 1 GiB row chunks, a top-512 over every visible position; tracking "
        "issue #40574 (2026-09-21): 'is Hopper's prefill indexer'; the Triton replacement #39086 closed unmerged; "
        "#41251 ('Optimize DeepSeek V4.1 Flash Hopper paths', merged 2026-10-03) changed Hopper's decode indexer, "
        "not this path; a fused score kernel sits behind the opt-in SGLANG_OPT_USE_FUSED_DSV41_INDEXER_SCORES, "
        "default not known (sim: prefill_indexer torch_fused_scores; section 53); the InferenceX dev-dsv41 images of 2026-09-18 ran this path "
        "(docs/engines_and_validation.md section 52); sim: cluster.pools[].prefill_indexer kernel for an engine "
        "with a fused Hopper path",
    ),
    Rule(
        "sglang",
        _SG_OLD,
        "megamoe_max_tokens_per_rank",
        "1024",
        "sglang srt/layers/moe/mega_moe.py should_use_mega_moe (the same in the 0.5.15, 0.5.15.post1 and 0.5.16 "
        "wheels): Mega MoE runs a step only while the most tokens a DP rank holds is at most "
        "SGLANG_OPT_DEEPGEMM_MEGA_MOE_NUM_MAX_TOKENS_PER_RANK (environ.py EnvInt(1024)); above it "
        "DeepseekV2MoE.forward takes forward_normal: create_moe_dispatcher's StandardDispatcher over the tokens DP "
        "attention gathers (layers/moe/fused_moe_triton/layer.py) and the FP8 method's MoE runner, auto resolving "
        "to Triton outside DeepEP (layers/quantization/fp8.py create_moe_runner); another SGLang version refuses the "
        "configuration at start (deepseek_v4_hook.py validate_deepseek_v4_mega_moe_token_budget: 'Otherwise MegaMoE "
        "falls back to the fused MoE path at runtime'); docs/engines_and_validation.md section 62",
    ),
)


def rules_for(engine: Engine, rule: str) -> Rule | None:
    """The rule `rule` of `engine` at its version, or None."""
    version = engine.resolved_version
    return next(
        (r for r in RULES if r.engine == engine.name and r.rule == rule and version in r.versions), None
    )


@dataclass(frozen=True)
class StepRules:
    """How one pool's engine makes its steps (sim.sched.batcher)."""

    step_composition: str  # mixed | prefill_first | rank_prefill_first (sim.sched.batcher)
    dp_prefill_budget: str  # divided | per_rank
    dp_running_cap: str  # per_rank | instance (sim.cluster.instance)


def pool_step_rules(
    engine: Engine | None, pool: Mapping[str, Any], spec_decode: bool, scheduler: Mapping[str, Any]
) -> StepRules:
    """The step rules of `pool` under `engine`; `scheduler` (the scenario's `scheduler`, as a mapping) set
    explicitly overrides them; no engine: sim's generic defaults (mixed, divided). A colocated DP-attention
    pool without speculative decoding takes the engine's `dp_step_composition` where it has one."""
    composition = scheduler.get("step_composition")
    if not composition and pool.get("role") == "colocated" and pool.get("dp", 1) > 1 and not spec_decode:
        composition = _engine_value(engine, "dp_step_composition")
    composition = composition or _engine_value(engine, "step_composition") or "mixed"
    budget = scheduler.get("dp_prefill_budget") or _engine_value(engine, "dp_prefill_budget") or "divided"
    cap = scheduler.get("dp_running_cap") or _engine_value(engine, "dp_running_cap") or "instance"
    return StepRules(composition, budget, cap)


def custom_allreduce_max_bytes(
    engine: Engine | None, compute_capability: str | None = None, tp: int = 1
) -> float:
    """The largest TP all-reduce message the engine runs before NCCL (in its custom, FlashInfer or symmetric-memory
    all-reduce) on a GPU of `compute_capability` at TP size `tp`; no engine, none known, or a vLLM rule on a GPU of
    unknown capability: every size."""
    value = _engine_value(engine, "custom_allreduce_max_bytes")
    if value is None:
        return float("inf")
    if value == PER_GPU_AND_TP:
        if compute_capability is None:
            return float("inf")
        table = VLLM_FAST_ALLREDUCE_MAX_MIB.get(compute_capability, {})
        return table.get(tp, VLLM_CUSTOM_ALLREDUCE_MAX_MIB) * 2**20
    return float(value)


def swa_checkpoints(engine: Engine | None) -> str | None:
    """Where `engine`'s prefix cache keeps DeepSeek-V4's sliding windows (sim.kvcache.lookup), or None with no
    engine named."""
    return _engine_value(engine, "swa_checkpoints")


def swa_token_pool(engine: Engine | None, model: str) -> bool:
    """Whether `engine` keeps `model`'s sliding windows in an SWA token pool that caps admission
    (sim.sched.swa_pool): SGLang 0.5.15 / 0.5.16 with DeepSeek-V4; no engine named: no."""
    return _engine_value(engine, "swa_token_pool") is not None and model_family(model) == "v4"


def eager_prefill_launches(
    engine: Engine | None, model: str, layers: Sequence[LayerShape], moe_a2a: str, attention_tp: int
) -> tuple[float, float] | None:
    """(launches once a step, launches over the decoder layers) of a prefill step that `engine` runs eagerly
    for `model`, whose decoder layers are `layers`; None where the engine graphs its prefill steps, the model
    is not DeepSeek-V4's family, or no engine is named."""
    graph = _engine_value(engine, "prefill_cuda_graph")
    if graph is None or not graph.startswith("off") or model_family(model) not in ("v4", "v41"):
        return None
    inv = SGLANG_V4_EXTEND_LAUNCHES
    return inv.per_step, sum(inv.layer(shape, moe_a2a, attention_tp) for shape in layers)


def reindex_full_range(engine: Engine | None, compute_capability: str | None, setting: str = "auto") -> bool:
    """Whether a pool scores V4.1's Reindex layers over every compressed position (then masks) rather than over
    layer 20's candidates only: `setting` (cluster.pools[].reindex_scoring) unless auto, else the engine's rule
    on a GPU of `compute_capability` (Hopper is 9.x); no engine named or no rule: candidates."""
    if setting != "auto":
        return setting == "full_range"
    value = _engine_value(engine, "reindex_scoring")
    if value is None:
        return False
    if value.startswith("full_range on Hopper"):
        return compute_capability is not None and compute_capability.startswith("9.")
    return value.startswith("full_range")


def prefill_indexer(
    engine: Engine | None, compute_capability: str | None, model: str, setting: str = "auto"
) -> str:
    """What runs `model`'s prefill index layers on a pool: `setting` (cluster.pools[].prefill_indexer) unless
    auto, else the engine's rule on a GPU of `compute_capability` (Hopper is 9.x): "torch" (SGLang's eager path,
    sim.timing.torch_indexer) or "kernel" (a fused kernel, sim's DeepGEMM tables). "torch_fused_scores" (the eager
    path with SGLang's opt-in fused score kernel) only where the pool sets it: the flag's default is not known. Only
    V4.1 has the torch path; no engine named or no rule: kernel."""
    if model not in family("v41").models:
        return "kernel"
    if setting != "auto":
        return setting
    value = _engine_value(engine, "v41_prefill_indexer")
    hopper = compute_capability is not None and compute_capability.startswith("9.")
    return "torch" if value is not None and value.startswith("torch on Hopper") and hopper else "kernel"


def megamoe_max_tokens_per_rank(engine: Engine | None, setting: int | None = None) -> int | None:
    """The most tokens a DP rank may hold for a Mega MoE pool's step to run Mega MoE: `setting`
    (cluster.pools[].megamoe_max_tokens_per_rank, the engine's env), else `engine`'s rule; None: no cap (no engine
    named, or none read)."""
    if setting is not None:
        return setting
    value = _engine_value(engine, "megamoe_max_tokens_per_rank")
    return int(value) if value is not None else None


def decode_layer_term(engine: Engine | None) -> bool:
    """Whether `engine`'s decode steps carry the forward-pass term's per-layer part (sim.timing.forward): yes
    unless its rule says off; no engine named: yes."""
    value = _engine_value(engine, "decode_layer_term")
    return value is None or not value.startswith("off")


def deepep_expert_alignment_rows(engine: Engine | None) -> int:
    """The rows each expert's segment is padded to a multiple of in `engine`'s DeepEP normal mode (DeepGEMM's
    contiguous layout), or 1 (no padding; no engine, or none read)."""
    value = _engine_value(engine, "deepep_expert_alignment_rows")
    return int(value) if value is not None else 1


def spec_decode_host_chain_s(engine: Engine | None, model: str, drafter: str | None) -> float:
    """The least a decode step of `model` lasts under `engine`'s speculative loop (its host chain), or 0:
    `drafter` is the drafter kind the step runs (None: speculative decoding off); the chain is EAGLE's on
    V4's MTP block, not DSpark's (V4-Flash-0731 runs DSpark on the same backbone)."""
    rule = _engine_value(engine, "spec_decode_host_chain_s")
    if drafter != "mtp" or model_family(model) != "v4" or rule is None:
        return 0.0
    return SGLANG_V4_EAGLE_HOST_CHAIN_S


def _engine_value(engine: Engine | None, rule: str) -> str | None:
    found = rules_for(engine, rule) if engine is not None else None
    return found.value if found is not None else None


def speculative_method(spec_decode: Mapping[str, Any], model: str) -> str | None:
    """The drafter a scenario's `spec_decode` (as a mapping) runs for `model` (its family block's `method`, else
    the family's default), or None with speculative decoding off."""
    if not spec_decode.get("enabled"):
        return None
    key = model_family(model)
    return (spec_decode.get(key) or {}).get("method") or family(key).spec_decode["method"]


def engine_refusal(
    model: str, pools: Sequence[Mapping[str, Any]], spec_method: str | None, engine: Engine | None
) -> str | None:
    """Why `engine` would refuse to serve `model` on `pools` (a scenario's `cluster.pools`, as mappings;
    a pool's own `engine` replaces `engine` for it) with the drafter `spec_method` (None: speculative decoding
    off), with the rule's source and version; or None."""
    reasons = []
    disaggregated = any(p["role"] != "colocated" for p in pools)
    fam = model_family(model)
    for pool in pools:
        eng = _pool_engine(pool, engine)
        if eng is None or eng.name != "sglang":
            continue
        cp = pool.get("prefill_context_parallel", "off")
        if cp == "zigzag":
            reasons.append(_refusal(eng, ZIGZAG_CP, pool))
        if fam == "v4" and spec_method is not None:
            reasons += [_refusal(eng, r, pool) for r in _v4_spec_refusals(eng, pool, spec_method)]
        if not (spec_method is not None and disaggregated and fam == "v41"):
            continue
        if not eng.at_least("main@006cbb66"):
            if pool.get("dp", 1) > 1 or cp != "off":
                reasons.append(_refusal(eng, DSPARK_PD_DP1_CP1, pool))
        elif cp != "off" and pool["role"] != "prefill":
            reasons.append(_refusal(eng, DSPARK_PD_DCP1, pool))
    return "; ".join(dict.fromkeys(reasons)) or None


def _v4_spec_refusals(engine: Engine, pool: Mapping[str, Any], spec_method: str) -> list[Rule]:
    """The rules of `engine` that refuse `pool` serving a DeepSeek-V4-family model with `spec_method`."""
    version = engine.resolved_version
    if spec_method != "dspark":
        return []
    if version in V4_EAGLE_ONLY.versions:
        return [V4_EAGLE_ONLY]
    found = []
    dp_attention = pool.get("dp", 1) > 1
    if dp_attention and (pool.get("moe_a2a", "link") != "link" or pool.get("tp", 1) > 1):
        found.append(V4_DSPARK_DP)
    if pool.get("prefill_context_parallel", "off") != "off":
        found.append(V4_DSPARK_CP)
    return [r for r in found if version in r.versions]


def _pool_engine(pool: Mapping[str, Any], engine: Engine | None) -> Engine | None:
    own = pool.get("engine")
    if own is None:
        return engine
    return own if isinstance(own, Engine) else Engine.model_validate(own)


def _refusal(engine: Engine, rule: Rule, pool: Mapping[str, Any]) -> str:
    return (f"{engine.label} would not start this deployment (pool {pool.get('name', '?')!r}): it refuses "
            f"{rule.value} [{rule.source}]")  # fmt: skip


def scenario_refusal(scn: Scenario, model: str) -> str | None:
    """`engine_refusal` of `model` on the scenario's own pools, drafter and engine."""
    method = speculative_method(scn.spec_decode.model_dump(), model)
    return engine_refusal(model, [p.model_dump() for p in scn.cluster.pools], method, scn.engine)


def profile_rows() -> list[dict[str, str]]:
    """Every rule as a row (engine, versions, rule, value, source) for `sim scenario fields`."""
    return [{"engine": r.engine, "versions": ", ".join(r.versions), "rule": r.rule, "value": r.value,
             "source": r.source} for r in RULES]  # fmt: skip
