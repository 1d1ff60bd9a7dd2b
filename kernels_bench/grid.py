"""The benchmark grid (kernels.md §8, trimmed to one ~10-minute GPU call) and its smoke subset."""

from __future__ import annotations

from dataclasses import dataclass, field

K = 1024


@dataclass(frozen=True)
class Grid:
    batches: tuple[int, ...] = (1, 8, 32, 64, 128)
    contexts: tuple[int, ...] = (8 * K, 32 * K, 128 * K, 512 * K, 1024 * K)
    max_batch_context: int = 64 * K * K  # kernels.md §8: skip B·L > 64M tokens of per-sequence caches
    indexer_kinds: tuple[tuple[str, str], ...] = (
        ("V4", "CSA"),
        ("V4.1", "Full-enc"),
        ("V4.1", "Full-L20"),
        ("V4.1", "Reindex"),
    )
    prefill_chunks: tuple[int, ...] = (2048, 8192)
    prefill_prev: tuple[int, ...] = (0, 128 * K, 1024 * K)
    prefill_max_logits_bytes: float = 9e9
    topk_rows: tuple[int, ...] = (1, 8, 64, 256, 2048)
    topk_cols: tuple[int, ...] = (16 * K, 64 * K, 256 * K, 1024 * K)
    topk_max_elems: int = 512 * K * K
    attn_batches: tuple[int, ...] = (1, 8, 32, 64, 128, 256, 512)
    attn_fmt_batches: tuple[int, ...] = (8, 64, 128, 512)
    attn_prefill_chunks: tuple[int, ...] = (512, 2048, 8192)
    quant_rows: tuple[int, ...] = (64, 4096, 64 * K, 1024 * K)
    dequant_rows: tuple[int, ...] = (64 * K, 1024 * K)
    mhc_tokens: tuple[int, ...] = (1, 8, 32, 128, 512, 2048, 4096, 8192, 32768)
    mhc_eager_tokens: tuple[int, ...] = (1, 512, 4096)
    dense_m: tuple[int, ...] = (1, 8, 32, 128, 512, 2048, 8192)
    grouped_groups: tuple[int, ...] = (6, 32, 128, 0)  # 0 = all experts of the model
    grouped_m: tuple[int, ...] = (1, 8, 32, 128, 512, 2048)
    grouped_max_rows: int = 64 * K
    pipeline_batches: tuple[int, ...] = (1, 8, 32, 64, 128)
    pipeline_kinds: tuple[tuple[str, str], ...] = (
        ("V4", "SWA"),
        ("V4", "CSA"),
        ("V4", "HCA"),
        ("V4.1", "Full-enc"),
        ("V4.1", "Full-L20"),
        ("V4.1", "Reindex"),
        ("V4.1", "Reuse"),
    )
    tuning: bool = True  # a short sweep of kernel configurations before the grid (defaults: tuned_h200.json)
    # most important first: a run cut short by its time budget loses the GEMM tail, not the targets
    families: tuple[str, ...] = field(
        default=(
            "ceiling",
            "attention",
            "indexer",
            "topk",
            "kvquant",
            "mhc",
            "pipeline",
            "indexer_prefill",
            "gemm_grouped",
            "gemm_dense",
        )
    )


FULL = Grid()

SMOKE = Grid(
    batches=(1, 64),
    contexts=(32 * K, 1024 * K),
    prefill_chunks=(2048,),
    prefill_prev=(128 * K,),
    topk_rows=(1, 64),
    topk_cols=(64 * K, 1024 * K),
    attn_batches=(1, 64, 128),
    attn_fmt_batches=(64,),
    attn_prefill_chunks=(2048,),
    quant_rows=(64, 1024 * K),
    dequant_rows=(1024 * K,),
    mhc_tokens=(1, 4096),
    mhc_eager_tokens=(1,),
    dense_m=(8, 2048),
    grouped_groups=(32,),
    grouped_m=(8, 512),
    pipeline_batches=(64,),
    tuning=True,
)

# Tiny shapes for a CPU dry run through the Triton interpreter (checks the script end to end, no timings).
DRY = Grid(
    batches=(2,),
    contexts=(8 * K,),
    indexer_kinds=(("V4", "CSA"), ("V4.1", "Reindex")),
    prefill_chunks=(),
    prefill_prev=(),
    topk_rows=(2,),
    topk_cols=(4 * K,),
    attn_batches=(2,),
    attn_fmt_batches=(2,),
    attn_prefill_chunks=(),
    quant_rows=(64,),
    dequant_rows=(64,),
    mhc_tokens=(16,),
    mhc_eager_tokens=(),
    dense_m=(),
    grouped_groups=(),
    grouped_m=(),
    pipeline_batches=(2,),
    pipeline_kinds=(("V4", "CSA"), ("V4.1", "Reindex")),
    families=("indexer", "topk", "attention", "kvquant", "mhc", "pipeline"),
    tuning=False,
)

PRESETS = {"full": FULL, "smoke": SMOKE, "dry": DRY}
