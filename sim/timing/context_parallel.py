"""How the GPUs of one attention group share a prefill chunk: by attention head (tensor parallelism,
the default) or by token position (prefill context parallelism, CP). Pure arithmetic; the calibrated
timing (sim.timing.calibrated) composes a step from it.

Heads (CP off). Attention-TP GPUs split the sparse MLA's query heads, but the kernel runs 64 or 128
heads, so each pads its share up (`padded_head_share`): a V4 / V4.1 GPU (64 heads) runs the whole MLA
work of every prompt row at any TP. The lightning indexer is not split: its query projection and key scoring
are replicated on every TP GPU (vLLM `deepseek_v2.Indexer`: "no tensor parallel, just replicated";
SGLang's NSA indexer builds `wq_b` / `wk` as `ReplicatedLinear`), so each GPU scores every row of
the chunk against the whole compressed context. The decode pipeline is timed the same way already
(a TP rank is timed at its DP group's full batch, sim.timing.calibrated's module doc).

Rows (CP on). SGLang's DSA prefill context parallelism (`--enable-nsa-prefill-context-parallel`,
PR #12065, `layers/utils/cp_utils.py`) spreads the step's prompt rows over the attention group
instead: the CP size is the attention-TP size (`attn_cp_size`; docs/basic_usage/deepseek_v32.md
"CP_size reuses atten_tp_size"). Each GPU:
- runs attention, indexer scoring and top-k for its rows only, against the whole context (the KV
  and the indexer keys of the chunk are all-gathered over the group and written into every GPU's
  pool, `cp_allgather_and_save_kv_cache`; kv_len stays whole, only q_len drops);
- runs the dense projections with unsplit weights on its rows ("the weights of each TP are not
  split by TP for related gemm calculations (qkv, o_proj, etc.)", PR #12065), and mHC on its rows;
- sends its rows through the MoE (DeepEP over every GPU, as without CP).
At the end of the pass the hidden states are all-gathered once (`cp_all_gather_rerange_output`).
Split rules (`--nsa-prefill-cp-mode`):
- `round_robin` (round-robin-split): token i goes to GPU i mod cp, over the whole batch's tokens
  (`nsa_cp_round_robin_split_q_seqs`), decode rows of a mixed step included; every GPU gets an equal
  share of rows and of causal work. It requires attention DP off (SGLang asserts "For round-robin
  split mode, dp attention is not supported"). SGLang's DeepSeek-V4 cookbook recipe "Context-Parallel"
  (docs_new/cookbook/autoregressive/DeepSeek/DeepSeek-V4.mdx) is `--tp 4` without `--dp`, DeepEP,
  `--nsa-prefill-cp-mode round-robin-split --chunked-prefill-size 16384`; its other V4 recipes
  (low-latency, balanced, max-throughput, PD-disagg) leave CP off, so `off` is the default.
- `zigzag` (in-seq-split): each request's rows cut into 2 cp blocks, GPU r taking blocks r and
  2 cp - 1 - r (balanced causal work). It runs only on pure prefill steps whose every request has
  at least 2 cp new rows (`can_cp_split`: not in a MIXED step, `seq_len // (cp_size * 2) != 0`);
  other steps run by heads.
Assumptions [D]: the all-gathers are exposed (the attention waits for the gathered KV; SGLang's KV
gather is synchronous), the MoE all-to-all overlaps as elsewhere (`timing.comm_overlap_frac`); the
decode rows a round-robin step carries are spread like its prompt rows. CP inside the DP groups of
a DP-attention instance is refused (sim.config.cluster), as SGLang refuses it for DeepSeek-V4: its V4
CP runs only the interleave (round-robin) strategy and asserts dp_size == 1
(`arg_groups/deepseek_v4_hook.py`, `validate_deepseek_v4_cp`); the zigzag split with DP attention is
V3.2's (one request a step). A CP pool also runs V4.1's prefill without its decoder tail
(sim.timing.decoder_tail).
"""

from __future__ import annotations

from dataclasses import dataclass

from sim.timing.comm import allgather_s

CP_MODES = ("off", "round_robin", "zigzag")
KV_GATHERS_PER_LAYER = 1  # the layer's KV rows (`cp_allgather_and_save_kv_cache`)
INDEX_GATHERS_PER_LAYER = 1  # the indexer keys, on layers that score (`index_k`, cp_utils docstring)
HIDDEN_BYTES_PER_ELEM = 2.0  # BF16 hidden states gathered at the end of the pass


@dataclass(frozen=True)
class ContextParallel:
    """The prefill CP setting of one instance: `mode` (CP_MODES) over `ranks` GPUs (its attention group)."""

    mode: str
    ranks: int

    def __post_init__(self) -> None:
        if self.mode not in CP_MODES:
            raise ValueError(f"prefill context parallel mode {self.mode!r}, not one of {CP_MODES}")
        if self.mode != "off" and self.ranks < 2:
            raise ValueError(
                f"prefill context parallelism needs an attention group of 2+ GPUs, got {self.ranks}"
            )

    @property
    def on(self) -> bool:
        return self.mode != "off"

    def splits(self, decode_rows: int, chunk_new_tokens: list[int]) -> bool:
        """Whether a step with `decode_rows` decode rows and these chunks runs its rows by position."""
        if self.mode == "round_robin":
            return bool(chunk_new_tokens)
        if self.mode == "zigzag":
            least = 2 * self.ranks
            return decode_rows == 0 and bool(chunk_new_tokens) and min(chunk_new_tokens) >= least
        return False


def rank_rows(rows: int, ranks: int) -> int:
    """Rows on the most loaded GPU when `rows` rows are dealt over `ranks` GPUs (round-robin or zigzag)."""
    return -(-rows // ranks)


# FlashMLA's sparse kernels specialise the query heads a GPU runs for 64 and 128 only, so both engines
# pad a TP rank's heads up: SGLang 0.5.15 `srt/models/deepseek_v4.py` MQALayer.forward ("FlashMLA's fp8
# sparse decode kernel only specializes h_q for {64, 128}": `padded_num_heads = 64 if n_local_heads <= 64
# else n_heads`, for every forward mode, and the extend path hands the padded q to `flash_mla_sparse_fwd`,
# `deepseek_v4_backend._forward_prefill_sparse`); vLLM 0.34.0 `models/deepseek_v4/nvidia/flashmla.py`
# `get_padded_num_q_heads` (64 if heads <= 64 else 128; the layer's q buffer, prefill included).
FLASHMLA_HEAD_WIDTHS = (64, 128)


def padded_head_share(heads: int, tp: int) -> float:
    """The share of the model's sparse-MLA work one of `tp` attention-TP GPUs runs: its heads / tp padded
    up to the kernel's head width (FLASHMLA_HEAD_WIDTHS), over the model's heads. 1.0 for V4 and V4.1
    (64 heads) at any TP."""
    local = -(-heads // tp)
    run = next((w for w in FLASHMLA_HEAD_WIDTHS if local <= w), local)
    return min(run, heads) / heads


def heads_split_attention_s(mla_s: float, index_s: float, head_share: float) -> float:
    """One GPU's seconds for a chunk's attention split by heads: the sparse MLA at the GPU's padded share
    of the heads (`padded_head_share`), the replicated indexer whole (module doc)."""
    return mla_s * head_share + index_s


def cp_gather_s(
    kv_bytes: float,
    rows: int,
    *,
    ranks: int,
    hidden: int,
    layers: int,
    index_layers: int,
    bw_bytes_per_s: float,
    latency_s: float,
) -> float:
    """Seconds of a CP step's all-gathers: every layer's new KV rows (`kv_bytes` over all layers, the
    chunks' compressed, SWA and indexer-key bytes), one collective per layer and one more per scoring
    layer for the indexer keys, and the hidden states of the step's `rows` rows once at the end."""
    if ranks <= 1:
        return 0.0
    collectives = layers * KV_GATHERS_PER_LAYER + index_layers * INDEX_GATHERS_PER_LAYER
    kv = (
        allgather_s(kv_bytes, ranks, bw_bytes_per_s, 0.0) + collectives * latency_s if kv_bytes > 0.0 else 0.0
    )
    hidden_bytes = rows * hidden * HIDDEN_BYTES_PER_ELEM
    return kv + allgather_s(hidden_bytes, ranks, bw_bytes_per_s, latency_s)
