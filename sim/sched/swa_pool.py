"""SGLang's sliding-window (SWA) token pool for DeepSeek-V4, and what a running request holds in it (issue 29,
fifteenth sitting; docs/engines_and_validation.md section 25). Pure arithmetic, read at build time.

SGLang serves V4's sliding windows from a pool of their own beside the full (compressed) pool
(`DeepSeekV4TokenToKVPool`, a `BaseSWAKVPool`), sized as a share of the full pool's tokens:
`swa_full_tokens_ratio`, 0.1 for V4 unless set (arg_groups/overrides.py `_deepseek_v4_overrides`). The full pool's
tokens are the GPU's KV memory, less the c128 compressor states of the request slots, over SGLang's bytes per full
token (model_executor/pool_configurator.py `DSV4PoolConfigurator`): the SWA rows at the ratio, the c4 rows at 1/4
and the c128 rows at 1/128 of a token, the indexer keys at 1/4, the c4 compressor and indexer states of the SWA
pages' rings, all inflated by (L + 1) / L when a draft model runs beside the target.

What a running request holds there. Its prompt is inserted into the radix tree as one leaf per prefill chunk
(mem_cache/swa_radix_cache.py `insert`; `SGLANG_OPT_SWA_SPLIT_LEAF_ON_INSERT` off by default), and its lock
(`inc_lock_ref`) protects the SWA slots of the nodes from its last one up until the window is covered: the whole
of its last chunk, page-rounded (a prompt the step's budget split holds only its second part). Its decode tokens
beyond the window are freed a page at a time every `SGLANG_SWA_EVICTION_INTERVAL` (128) steps
(managers/schedule_batch.py `maybe_evict_swa`), so it also holds the window, up to that interval and part of a
page. A new prefill is admitted only while the pool's free and evictable tokens cover it
(managers/schedule_policy.py `PrefillAdder.budget_state`, `rem_swa_tokens`); the earlier chunks of a long prompt
are evictable once inserted. With a cold cache and one-chunk prompts (the SGLang cookbook's random 8K / 1K runs
at `--chunked-prefill-size` 8192) each running request holds its whole prompt: on a GPU with little memory left
for KV the pool, not `--max-running-requests`, caps the running batch.

The KV memory per GPU is SGLang's own: its `mem_fraction_static` rule (server_args.py, `sglang_mem_fraction_static`)
of the GPU's memory, less the weights on the GPU (docs/engines_and_validation.md section 28).

Read in the v0.5.15 wheel. [D]: the decode graphs' max batch is SGLang's default (512 at TP >= 4) where a launch set
it lower; a request's hold is taken at admission for its whole life (SGLang allocates
a chunk's slots as it prefills); a request is admitted against a whole last chunk and gives back the difference
when its prefill ends on a shorter one.
"""

from __future__ import annotations

from dataclasses import dataclass

from sim.model.kv import swa_window_tokens

SWA_FULL_TOKENS_RATIO = 0.1  # _deepseek_v4_overrides: swa_full_tokens_ratio for V4 unless set
PAGE_TOKENS = 256  # _deepseek_v4_overrides: page_size 256 (128 on some backends; 256 on CUDA)
EVICTION_INTERVAL_STEPS = 128  # environ.py SGLANG_SWA_EVICTION_INTERVAL
STATE_BYTES = 4  # environ.py SGLANG_DSV4_COMPRESS_STATE_DTYPE float32
INDEX_SCALE_BLOCK = 128  # pool_configurator.py: an FP32 scale per 128 index-key values
MIB = 2**20


def sglang_decode_graph_max_bs(gpu_mem_mib: float, tp_size: int) -> int:
    """server_args.py _handle_gpu_memory_settings: the decode CUDA graphs' default max batch on GPUs of 60 GiB or
    more (256 below TP 4 under 160 GiB, else 512)."""
    return 256 if gpu_mem_mib < 160 * 1024 and tp_size < 4 else 512


def sglang_mem_fraction_static(
    gpu_mem_mib: float,
    *,
    chunked_prefill_tokens: int,
    tp_size: int,
    dp_size: int,
    dp_attention: bool,
    deepep: bool,
) -> float:
    """server_args.py (v0.5.15): the share of a GPU's memory SGLang keeps for weights and KV when none is given
    (no PP; no prefill graphs, off for V4; a server that prefills and decodes)."""
    max_bs = sglang_decode_graph_max_bs(gpu_mem_mib, tp_size)
    reserved = 512 + max(chunked_prefill_tokens, 2048) * 1.5 + max_bs * 2 + tp_size / 8 * 1024
    if dp_attention:
        reserved += max_bs * dp_size * 3
        if max_bs > 300:
            reserved += max_bs * dp_size * 1.5
    if gpu_mem_mib > 60 * 1024:
        reserved = max(reserved, 10 * 1024)
    if deepep:
        reserved += 2 * 1024
    return round((gpu_mem_mib - reserved) / gpu_mem_mib, 3)


def c4_ring_size(speculative: bool) -> int:
    """deepseek_v4_memory_pool.py get_compress_state_ring_size for ratio 4."""
    return 16 if speculative else 8


def c128_ring_size(speculative: bool) -> int:
    """The same for ratio 128 (the offline c128 state; SGLANG_OPT_USE_ONLINE_COMPRESS off)."""
    return 256 if speculative else 128


@dataclass(frozen=True)
class V4PoolShape:
    """The model's numbers SGLang's V4 pool sizing reads (from the model spec)."""

    kv_row_bytes: int  # a main / window row: nope values + RoPE values x 2 + scales (584 for V4)
    index_head_dim: int
    attn_head_dim: int
    c4_layers: int
    c128_layers: int
    layers: int
    window_tokens: int

    @classmethod
    def of(cls, spec) -> V4PoolShape:
        row = spec.kv_layouts[spec.default_kv_layout].main_row
        kv_row = sum(int(v) for v in row.values())
        ratios = [layer.ratio for layer in spec.layers if layer.attention in ("csa", "hca")]
        return cls(
            kv_row_bytes=kv_row,
            index_head_dim=spec.index.head_dim,
            attn_head_dim=spec.attention.qk_head_dim,
            c4_layers=sum(1 for r in ratios if r == 4),
            c128_layers=sum(1 for r in ratios if r == 128),
            layers=len(spec.layers),
            window_tokens=swa_window_tokens(spec),
        )


def bytes_per_full_token(
    shape: V4PoolShape, *, speculative: bool, swa_ratio: float = SWA_FULL_TOKENS_RATIO
) -> float:
    """SGLang's bytes per full-pool token (DSV4PoolConfigurator._get_bytes_per_full_token, module doc)."""
    kv, c4, c128 = shape.kv_row_bytes, shape.c4_layers, shape.c128_layers
    index = shape.index_head_dim + shape.index_head_dim // INDEX_SCALE_BLOCK * 4
    c4_state = 2 * 2 * shape.attn_head_dim * STATE_BYTES
    c4_index_state = 2 * 2 * shape.index_head_dim * STATE_BYTES
    ring_share = c4_ring_size(speculative) / shape.window_tokens
    per_token = (
        swa_ratio * kv * shape.layers
        + kv * c4 / 4
        + kv * c128 / 128
        + index * c4 / 4
        + swa_ratio * ring_share * (c4_state + c4_index_state) * c4
    )
    if speculative:  # the draft model's layer: tokens = memory / (bytes x (L + 1) / L)
        per_token *= (shape.layers + 1) / shape.layers
    return per_token


def c128_state_bytes(shape: V4PoolShape, *, speculative: bool, running_per_rank: int) -> int:
    """The c128 compressor states of the request slots (DSV4PoolConfigurator._get_c128_state_fixed_bytes), taken
    off the memory before the pool is sized."""
    if shape.c128_layers == 0:
        return 0
    ring = c128_ring_size(speculative)
    rows = (running_per_rank + 1) * ring + ring + 1
    rows = -(-rows // 128) * 128
    return rows * 2 * shape.attn_head_dim * STATE_BYTES * shape.c128_layers


@dataclass(frozen=True)
class SwaPool:
    """One DP rank's SWA pool: its tokens, its page, the window, and what a decoding request holds beyond the
    leaf its lock protects."""

    tokens: int
    page_tokens: int
    window_tokens: int
    decode_tokens: int

    def held_tokens(self, last_chunk_tokens: int) -> int:
        """What a request holds once prefilled: the leaf of its last chunk, page-rounded (the lock walks on up
        to the window when that leaf is shorter), and its decode tokens."""
        last = last_chunk_tokens if last_chunk_tokens > self.window_tokens else self.window_tokens
        page = self.page_tokens
        return -(-last // page) * page + self.decode_tokens

    def admission_tokens(self, prompt_tokens: int, chunk_tokens: int) -> int:
        """What a request is admitted against: its hold if its prompt's last chunk were a whole chunk (given back
        at the end of its prefill where its last chunk is shorter)."""
        return self.held_tokens(prompt_tokens if prompt_tokens < chunk_tokens else chunk_tokens)


def sglang_v4_swa_pool(spec, *, kv_bytes_per_gpu: float, speculative: bool, running_per_rank: int) -> SwaPool:
    """The SWA pool of one DP rank of an SGLang V4 server whose GPUs each have `kv_bytes_per_gpu` for KV (a rank's
    attention-TP GPUs hold the same KV, so one GPU's memory sizes the rank's pool)."""
    shape = V4PoolShape.of(spec)
    left = kv_bytes_per_gpu - c128_state_bytes(
        shape, speculative=speculative, running_per_rank=running_per_rank
    )
    full = int(max(left, 0.0) / bytes_per_full_token(shape, speculative=speculative))
    full = full // PAGE_TOKENS * PAGE_TOKENS
    swa = int(full * SWA_FULL_TOKENS_RATIO) // PAGE_TOKENS * PAGE_TOKENS
    # the window and up to an interval of decode tokens, freed a page at a time: half a page more on average [D]
    decode = shape.window_tokens + EVICTION_INTERVAL_STEPS + PAGE_TOKENS // 2
    return SwaPool(
        tokens=swa, page_tokens=PAGE_TOKENS, window_tokens=shape.window_tokens, decode_tokens=decode
    )
