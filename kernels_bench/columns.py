"""The columns of the measured tables: kernels_bench writes them (kernels_bench.report,
kernels_bench.production), the simulator reads them (sim.timing.tables, sim.timing.forward). One list per
table, imported by both sides, so a renamed or added column is changed once.

Standard library only: the CPU CI (no torch) and the simulator import it.
`read` says what the simulator does with a column; None = written for people (spread, derived rates, notes).
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Column:
    name: str
    read: str | None = None  # kernel tables: text | number | check | package; forward table: required | glue;
    # served step table: required (every step) | profile (the profiled points sim.timing.served fits)


# kernels_bench_results.csv and production_results.csv: one row per kernel x shape
KERNEL_COLUMNS: tuple[Column, ...] = (
    Column(
        "family", "text"
    ),  # indexer, topk, attention, kvquant, mhc, gemm_dense, gemm_grouped, pipeline, ceiling
    Column("kernel", "text"),  # what ran, e.g. indexer_decode, sparse_mla_decode, radix_topk, torch_topk
    Column("impl", "text"),  # triton / torch / cublas / eager
    Column("model", "text"),  # V4, V4.1 (sim.config.families labels) or "-"
    Column("layer_kind", "text"),  # CSA, HCA, SWA, Full-enc, Full-L20, Reindex, Reuse, projection name, ...
    Column("fmt", "text"),  # data format(s), e.g. fp8_584, fp8_528+nvfp4_288, bf16, fp8_rowwise
    Column("batch", "number"),  # decode sequences (query tokens for prefill attention)
    Column("context_tokens", "number"),  # L
    Column("chunk_tokens", "number"),  # T for prefill rows, 0 for decode
    Column("rows", "number"),  # rows / tokens processed (top-k rows, quantised rows, mHC tokens, GEMM M)
    Column("n", "number"),  # entries / keys / columns per row, or GEMM N
    Column("k", "number"),  # top-k k, or GEMM K
    Column("groups", "number"),  # experts for grouped GEMMs
    Column("median_us", "number"),
    Column("p10_us"),
    Column("p90_us"),
    Column("samples"),
    Column("flops", "number"),
    Column("bytes", "number"),
    Column("achieved_TFLOPs"),
    Column("achieved_GBps"),
    Column("compute_ceiling_TFLOPs", "number"),
    Column("frac_hbm"),  # achieved_GBps / 4200
    Column("frac_compute"),  # achieved_TFLOPs / compute ceiling
    Column(
        "floor_us", "number"
    ),  # max(bytes / 4.2 TB/s, flops / ceiling); pipelines: the sum of their floors
    Column("frac_of_ceiling"),  # floor_us / median_us: the fraction of the roofline reached
    Column("check_passed", "check"),  # True / False / "" (timing-only control)
    Column("max_abs_err"),
    Column("rel_err"),
    Column("timing_method"),
    Column("note"),
)

# appended by the production kernel runs (kernels_bench.production): optional for the reader
PRODUCTION_COLUMNS: tuple[Column, ...] = (
    Column("stack"),
    Column("package", "package"),
    Column("package_version", "package"),
)

# forward_pass_results.csv (kernels_bench.production.forward): one row per measured forward pass
FORWARD_COLUMNS: tuple[Column, ...] = (
    Column("model", "required"),
    Column("mode", "required"),
    Column("spec", "required"),
    Column("n_layers", "required"),
    Column("layer_kinds", "required"),
    Column("n_routed_experts", "required"),
    Column("experts_per_token", "required"),
    Column("batch", "required"),
    Column("context_tokens", "required"),
    Column("chunk_tokens", "required"),
    Column("measured_us_p50", "required"),
    Column("measured_us_p10"),
    Column("measured_us_p90"),
    Column("kernel_sum_us", "required"),
    Column("attention_us"),
    Column("indexer_us"),
    Column("mhc_us"),
    Column("dense_gemm_us"),
    Column("act_quant_us", "glue"),
    Column("moe_us"),
    Column("routing_us", "glue"),
    Column("other_us", "glue"),
    Column("ops_per_pass"),
    Column("output_finite"),
    Column("graph_vs_eager_rel"),
    Column("timing_method"),
    # the same pass run eagerly, op by op from Python, as an engine runs a step it has no CUDA graph for:
    # the GPU span per pass (launch gaps included) and the host time to issue it (forward.measure)
    Column("eager_us_p50"),
    Column("eager_host_us_p50"),
    Column("note"),
)


def names(columns: tuple[Column, ...], *read: str) -> tuple[str, ...]:
    """The names of `columns` in order; only those the simulator reads as one of `read`, when given."""
    return tuple(c.name for c in columns if not read or c.read in read)


def row(columns: tuple[Column, ...], **values: object) -> dict[str, object]:
    """One result row of a table: every column of `columns` in order, "" where not given. A name the table
    lacks is an error here, so a misspelt column fails where the row is made instead of vanishing from the
    CSV (the writers keep only the table's columns)."""
    unknown = set(values) - set(names(columns))
    if unknown:
        raise KeyError(f"unknown columns: {sorted(unknown)}")
    return {c.name: values.get(c.name, "") for c in columns}


# serve_step_times.csv (kernels_bench.serve.bench): one row per measured step of the served reduced model
# (wall clock around the engine's call, every step a CUDA graph), with, for the profiled points, the GPU
# time of one step by kernel category (kernels_bench.serve.breakdown; blank where not profiled)
SERVE_STEP_COLUMNS: tuple[Column, ...] = (
    Column("model"),
    Column("spec", "required"),
    Column("mode", "required"),  # decode | prefill | mixed
    Column("batch", "required"),  # decode sequences
    Column("context_tokens", "required"),  # KV tokens of each decode sequence
    Column("chunk_tokens", "required"),  # prefill chunk (0: none)
    Column("prefill_context_tokens", "required"),  # KV tokens before the chunk
    Column("graph_bucket", "profile"),  # rows of the CUDA graph replayed (decode rows + chunk, padded up)
    Column("wall_us_p50", "required"),
    Column("wall_us_p10"),
    Column("wall_us_p90"),
    Column("reps"),
    Column("kv_bytes_per_block"),
    Column("note"),
    # the step's rows and their graph bucket (padding = graph_bucket - rows)
    Column("rows"),
    # profiled points: GPU kernel time of one step (torch.profiler over graph replays), by category
    Column("gpu_busy_us", "profile"),  # sum of every kernel of the step
    Column("lm_head_embed_us"),  # the LM head GEMM (vocab x hidden, bf16) and the embedding gather
    Column("attention_us"),  # FlashMLA sparse decode (+ its combine / metadata kernels)
    Column("indexer_us"),  # the lightning indexer's score kernel and its top-512 selection
    Column("moe_gemm_us"),  # the routed experts' grouped FP8 GEMMs
    Column("dense_gemm_us"),  # every other GEMM (projections, compressors, shared expert, wo_a)
    Column("mhc_us"),  # TileKernels mHC boundaries
    Column("glue_us", "profile"),  # the rest: indexing, pooling, RoPE, quantise-on-write, routing, norms
    Column("kernels_per_step"),
)
