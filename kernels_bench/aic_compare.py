"""sim's kernel times at the shapes of AIConfigurator's measured B200 / H200 / H100 operator tables (issue 28,
item 4a): a second blind check of the carry (the H100: a third, its predictions committed on their own before
AIC's H100 times were read), in two stages.

    python3 -m kernels_bench.aic_compare predict --out docs/carry/aic/predicted [--aic-data DIR]
    python3 -m kernels_bench.aic_compare compare --predicted docs/carry/aic/predicted --out docs/carry/aic
    python3 -m kernels_bench.aic_compare modules --out hwprofiles/engine_modules/dsv4_prefill_attention_modules.csv

`predict` reads ONLY the shape columns of AIConfigurator's tables (`_shapes` refuses a time column) and
writes, per GPU, backend and op class, sim's prediction at each shape: on the B200 the H200's production
stack carried by sim.timing.carry (`tables_for`: the carried stack where no B200 tables exist), on the
H200 its measured production tables, interpolated as the calibrated timing interpolates them. It is
committed before `compare` reads AIConfigurator's `latency` column (milliseconds) and writes the
op-by-op errors (sim / AIC - 1).

What each AIConfigurator table is compared with (V4-Flash shapes only; AIConfigurator 0.12 has no V4.1):
- gemm (`gemm_perf`): the V4 projection of the same (N, K) (wq_a, wkv, wo_b, index_q, compressor_csa,
  shared_gate_up / down, router; wq_b's 32768 x 1024 is not in AIC's grid) at M = AIC's m: sim's one
  curve per projection (the faster of its FP8 formats, sim.timing.calibrated), against each of AIC's
  formats (fp8_block, fp8 per-tensor, nvfp4, bfloat16) as its own class;
- moe (`moe_perf`, balanced routing): one MoE layer's routed experts for num_tokens tokens over
  moe_ep_size EP ranks and moe_tp_size expert-TP ranks, sim.timing.calibrated `_experts` (uniform routing,
  the touched experts' grouped gate_up + down GEMMs; routed experts MXFP4 on the B200, carry rule 4);
- mhc (`mhc_module_perf`, hidden 4096): AIC's pre + post modules at num_tokens against one sim boundary
  (the fused post+pre of one sublayer boundary, kernels.md §2);
- attention module, decode (`dsv4_{csa,hca}_generation_module_perf`, gemm_type fp8_block): one layer's
  attention side at batch_size sequences of context `step` on one of tp_size ranks: sim's `decode_layer`
  pipeline of that kind (indexer + top-k + sparse MLA; a TP rank runs the whole batch, heads split
  but the KV read whole) plus the layer's attention projections (wq_a, wq_b, wkv, wo_a, wo_b; CSA adds
  index_q and the compressor) at M = batch, the split ones / tp and the replicated ones whole
  (`TP_REPLICATED`, since issue 29's fifth sitting; the committed decode predictions are from before it, each
  file's header names its commit). sim's forward-pass term (glue) is not included;
- attention module, prefill (`dsv4_{csa,hca}_context_module_perf`, gemm_type fp8_block, one sequence, no
  prefix (`step` 0), `predict --classes attention_prefill_csa,attention_prefill_hca`): one layer's attention
  side for an `isl`-token chunk on one of tp_size ranks: sim's sparse MLA prefill at the rank's heads padded to
  FlashMLA's 64 (all of it for V4, since issue 29's sixth sitting; / tp before) and, for CSA, the whole
  indexer prefill (sim.timing.calibrated `_heads_attention_s`), plus the layer's attention projections and wo_a
  at M = isl, the split ones / tp and the replicated ones whole (`TP_REPLICATED`). AIC's module is everything
  between the two mHC boundaries but the norm (its `sdk/models/deepseek_v4.py` composes a layer from it); it
  counts the 2 SWA layers as HCA. Added after AIC's figures had been read (docs/engines_and_validation.md
  section 11): not blind;
- indexer (`dsv4_paged_mqa_logits_module_perf`): the production indexer_decode (DeepGEMM MQA logits) at
  (context, batch); sparse MLA (`dsv4_hca_attn_module_perf`, local heads 64): FlashMLA's HCA sparse decode;
- all-reduce (`custom_allreduce_perf`, BF16, message_size elements): sim's ring all-reduce of one call
  (3 us + 2 (p-1)/p bytes at the profile's NVLink rate; a step exposes 1 - comm_overlap_frac of it);
- moe_a2a (`moe_a2a_perf`, DeepEP, hidden 4096 top-6): sim's dispatch (FP8) / combine (BF16) all-to-all
  of num_tokens rows per rank.
`modules` extracts AIC's measured V4-Flash prefill attention modules (every GPU and engine it has) into the
table sim.timing.engine_glue fits the engine glue on.
Rows outside sim's measured grid (M > 8192, a context or batch beyond the pipelines' grid) are
flagged `in_sim_grid = False` (extrapolated) and left out of the summary with the reason.
"""

from __future__ import annotations

import argparse
import csv
import statistics
import subprocess
import sys
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

from sim.timing.carry import REFERENCE_GPU

GPUS = (
    "b200",
    "h200",
    "h100",
)  # h100: a third check of the carry, predicted before AIC's H100 times were read
BACKENDS = {"vllm": "0.24.0", "sglang": "0.5.14"}
TIME_COLUMNS = ("latency", "transmit_us", "notify_us", "power", "power_limit")
MODEL = "deepseek-v4-flash"
KEY = "V4"


def _shapes(path: Path, columns: list[str]) -> list[dict]:
    """The named shape columns of one AIConfigurator table, never a time column."""
    import pyarrow.parquet as pq

    bad = [c for c in columns if c in TIME_COLUMNS]
    if bad:
        raise ValueError(f"predict reads shape columns only, not {bad}")
    return pq.read_table(path, columns=columns).to_pylist()


@dataclass(frozen=True)
class Table:
    """One AIConfigurator table and how its rows map to sim's operations."""

    op_class: str
    op: str  # folder under systems/data/<system>
    file: str
    columns: tuple[str, ...]  # shape columns read
    keep: Callable[[dict], bool]
    key: tuple[str, ...]  # columns identifying one comparison point (AIC rows summed over the rest)


def _gemm_keep(r: dict) -> bool:
    return r["gemm_dtype"] in ("fp8_block", "fp8", "nvfp4", "bfloat16")


def _attn_keep(r: dict) -> bool:
    return "V4-Flash" in str(r["model"]) and r["gemm_type"] == "fp8_block" and r["isl"] == 1


def _prefill_keep(r: dict) -> bool:
    return "V4-Flash" in str(r["model"]) and r["gemm_type"] == "fp8_block" and r["batch_size"] == 1 and r["step"] == 0


TABLES = (
    Table("gemm", "gemm", "gemm_perf.parquet", ("kernel_source", "gemm_dtype", "m", "n", "k"), _gemm_keep,
          ("kernel_source", "gemm_dtype", "m", "n", "k")),
    Table("moe", "moe", "moe_perf.parquet",
          ("kernel_source", "moe_dtype", "num_tokens", "hidden_size", "inter_size", "topk", "num_experts",
           "moe_tp_size", "moe_ep_size", "distribution"),
          lambda r: (r["hidden_size"], r["inter_size"], r["topk"], r["num_experts"], r["distribution"])
          == (4096, 2048, 6, 256, "balanced"),
          ("kernel_source", "moe_dtype", "num_tokens", "moe_tp_size", "moe_ep_size")),
    Table("mhc", "mhc", "mhc_module_perf.parquet", ("op_name", "kernel_source", "num_tokens", "hidden_size"),
          lambda r: r["hidden_size"] == 4096, ("num_tokens",)),
    Table("attention_decode_csa", "sparse_attention", "dsv4_csa_generation_module_perf.parquet",
          ("model", "gemm_type", "num_heads", "batch_size", "isl", "tp_size", "step"), _attn_keep,
          ("num_heads", "tp_size", "batch_size", "step")),
    Table("attention_decode_hca", "sparse_attention", "dsv4_hca_generation_module_perf.parquet",
          ("model", "gemm_type", "num_heads", "batch_size", "isl", "tp_size", "step"), _attn_keep,
          ("num_heads", "tp_size", "batch_size", "step")),
    Table("attention_prefill_csa", "sparse_attention", "dsv4_csa_context_module_perf.parquet",
          ("model", "gemm_type", "num_heads", "batch_size", "isl", "tp_size", "step"), _prefill_keep,
          ("num_heads", "tp_size", "isl")),
    Table("attention_prefill_hca", "sparse_attention", "dsv4_hca_context_module_perf.parquet",
          ("model", "gemm_type", "num_heads", "batch_size", "isl", "tp_size", "step"), _prefill_keep,
          ("num_heads", "tp_size", "isl")),
    Table("indexer_decode", "sparse_attention", "dsv4_paged_mqa_logits_module_perf.parquet",
          ("model", "kernel_source", "batch_size", "isl", "step"),
          lambda r: "V4-Flash" in str(r["model"]) and r["isl"] == 1, ("kernel_source", "batch_size", "step")),
    Table("sparse_mla_decode_hca", "sparse_attention", "dsv4_hca_attn_module_perf.parquet",
          ("model", "kernel_source", "local_num_heads", "batch_size", "isl", "step"),
          lambda r: "V4-Flash" in str(r["model"]) and r["isl"] == 1 and r["local_num_heads"] == 64,
          ("kernel_source", "batch_size", "step")),
    Table("allreduce", "comm", "custom_allreduce_perf.parquet",
          ("kernel_source", "allreduce_dtype", "num_gpus", "message_size"),
          lambda r: r["allreduce_dtype"] == "bfloat16", ("kernel_source", "num_gpus", "message_size")),
    Table("moe_a2a", "comm", "moe_a2a_perf.parquet",
          ("comm_backend", "phase", "ep_size", "node_num", "hidden_size", "topk", "num_experts", "num_tokens"),
          lambda r: (r["hidden_size"], r["topk"], r["num_experts"], r["node_num"]) == (4096, 6, 256, 1),
          ("comm_backend", "phase", "ep_size", "num_tokens")),
)  # fmt: skip


class SimSide:
    """sim's kernel times on one GPU, read the way the calibrated timing reads them."""

    def __init__(self, gpu: str, expert_activations: str = "fp8") -> None:
        from sim.model.spec import load_model
        from sim.timing.calibrated import DENSE_FORMATS, model_tables
        from sim.timing.carry import carried, tables_for
        from sim.timing.stacks import OpTimes
        from sim.timing.tables import best_of, curve_of, resolve_gpu

        _, self.profile = resolve_gpu(gpu)
        self.gpu = gpu
        self.carried = carried(self.profile)
        t = tables_for(self.profile, "production", expert_activations)
        self.tables = t
        self.spec = load_model(MODEL)
        self.mt = model_tables(t, self.spec, self.spec.default_prefill_mode)
        self.dense = {}
        for r in t.select(family="gemm_dense", model=KEY):
            if r.layer_kind in self.dense:
                continue
            rows = [x for f in DENSE_FORMATS for x in t.select(family="gemm_dense", model=KEY,
                                                                 layer_kind=r.layer_kind, fmt=f)]  # fmt: skip
            self.dense[r.layer_kind] = (curve_of(best_of(rows, "rows"), "rows", path=t.path), r.n, r.k)
        self.by_nk = {(int(n), int(k)): name for name, (_c, n, k) in self.dense.items()}
        self.indexer = OpTimes(
            t.select(family="indexer", kernel="indexer_decode", model=KEY, layer_kind="CSA")
        )
        self.mla_hca = OpTimes(t.select(family="attention", kernel="sparse_mla_decode", model=KEY,
                                        layer_kind="HCA"))  # fmt: skip
        p = self.profile
        self.link_bytes_per_s = p.scale_up_bw_per_gpu_bytes_per_s * p.achievable.scale_up_bw_frac.value
        self.link_latency_s = p.scale_up_latency_s
        self.max_rows = max(r.rows or 0 for r in t.select(family="gemm_dense", model=KEY))

    def source(self) -> str:
        how = "the H200's production stack carried by sim.timing.carry" if self.carried else "measured tables"
        path = Path(self.tables.path).resolve().relative_to(Path.cwd().resolve())
        return f"{how} (production stack), {path}"

    # --- one op class each; returns (seconds, in sim's measured grid) ---

    def gemm(self, r: dict) -> tuple[float, bool] | None:
        name = self.by_nk.get((int(r["n"]), int(r["k"])))
        if name is None:
            return None
        return self.dense[name][0].at(float(r["m"])), r["m"] <= self.max_rows

    def moe(self, r: dict) -> tuple[float, bool]:
        # sim.timing.calibrated CalibratedTiming._experts, with the EP / expert-TP of the AIC row
        from sim.timing.experts import busiest_rank, grouped_s

        rank = busiest_rank(self.spec.moe.routed_experts, self.spec.moe.top_k, float(r["num_tokens"]),
                            int(r["moe_ep_size"]))  # fmt: skip
        t = grouped_s(self.mt.moe_gate_up, *rank) + grouped_s(self.mt.moe_down, *rank)
        inner = self.mt.moe_gate_up.inner[0].xs
        return t / r["moe_tp_size"], rank.rows_per_expert <= inner[-1]

    def mhc(self, r: dict) -> tuple[float, bool]:
        return self.mt.mhc.at(float(r["num_tokens"])), r["num_tokens"] <= self.max_rows

    def attention(self, kind: str, r: dict) -> tuple[float, bool]:
        grid, _n = self.mt.pipelines[kind]
        ctx, b, tp = float(r["step"]), float(r["batch_size"]), float(r["tp_size"])
        batches = grid.inner[0].xs
        inside = grid.outer[0] <= ctx <= grid.outer[-1] and b <= batches[-1]
        return grid.at(ctx, b) + self._projections_s(kind, b, int(tp)), inside

    def attention_prefill(self, kind: str, r: dict) -> tuple[float, bool]:
        from sim.timing.context_parallel import heads_split_attention_s, padded_head_share

        tokens, tp = float(r["isl"]), int(r["tp_size"])
        mla = self.mt.mla_prefill.at(tokens)
        index = self.mt.index_prefill.at(tokens, tokens) if kind == "CSA" else 0.0
        chunks = self.mt.mla_prefill.xs
        share = padded_head_share(self.spec.attention.heads, tp)
        attn = heads_split_attention_s(mla, index, share) + self._projections_s(kind, tokens, tp)
        return attn, chunks[0] <= tokens <= chunks[-1] and tokens <= self.max_rows

    def _projections_s(self, kind: str, m: float, tp: int) -> float:
        """One layer's attention projections and wo_a at M = m on one of `tp` ranks: the ones attention TP
        splits / tp, the replicated ones whole (sim.timing.calibrated `TP_REPLICATED`)."""
        from sim.timing.calibrated import ATTENTION_SIDE, TP_REPLICATED

        names = [n for n in self._layer_projections(kind) if n in ATTENTION_SIDE]
        split = self.mt.wo_a.at(m) + sum(self.dense[n][0].at(m) for n in names if n not in TP_REPLICATED)
        whole = sum(self.dense[n][0].at(m) for n in names if n in TP_REPLICATED)
        return split / tp + whole

    def _layer_projections(self, kind: str) -> tuple[str, ...]:
        from sim.timing.calibrated import layer_projections, pipeline_kind

        layer = next(x for x in self.spec.layers if pipeline_kind(x) == kind)
        return layer_projections(layer)

    def indexer_decode(self, r: dict) -> tuple[float, bool]:
        ctx = float(r["step"])
        c = self.indexer.contexts
        return self.indexer.at(ctx, float(r["batch_size"])), c[0] <= ctx <= c[-1]

    def sparse_mla_decode_hca(self, r: dict) -> tuple[float, bool]:
        ctx = float(r["step"])
        c = self.mla_hca.contexts
        return self.mla_hca.at(ctx, float(r["batch_size"])), c[0] <= ctx <= c[-1]

    def allreduce(self, r: dict) -> tuple[float, bool]:
        from sim.timing.comm import allreduce_s

        nbytes = 2.0 * r["message_size"]  # BF16 elements
        return allreduce_s(nbytes, int(r["num_gpus"]), self.link_bytes_per_s, self.link_latency_s), True

    def moe_a2a(self, r: dict) -> tuple[float, bool]:
        from sim.timing.comm import COMBINE_BYTES_PER_ELEM, DISPATCH_BYTES_PER_ELEM, alltoall_s

        per = DISPATCH_BYTES_PER_ELEM if r["phase"] == "dispatch" else COMBINE_BYTES_PER_ELEM
        nbytes = float(r["num_tokens"]) * r["topk"] * r["hidden_size"] * per
        return alltoall_s(nbytes, int(r["ep_size"]), self.link_bytes_per_s, self.link_latency_s), True

    def predict(self, op_class: str, r: dict) -> tuple[float, bool] | None:
        if op_class.startswith("attention_decode_"):
            return self.attention(op_class.rsplit("_", 1)[1].upper(), r)
        if op_class.startswith("attention_prefill_"):
            return self.attention_prefill(op_class.rsplit("_", 1)[1].upper(), r)
        return getattr(self, op_class)(r)


def _table_paths(aic, gpu: str) -> Iterator[tuple[str, str, Table, Path]]:
    system = aic.system(gpu)
    if system is None:
        return
    for backend, version in BACKENDS.items():
        for t in TABLES:
            path = system / t.op / backend / version / t.file
            if path.is_file():
                yield backend, version, t, path


def _points(rows: list[dict], t: Table) -> dict[tuple, dict]:
    """One comparison point per key (its first row's shape; AIC rows sharing a key are summed later)."""
    out: dict[tuple, dict] = {}
    for r in rows:
        if t.keep(r):
            out.setdefault(tuple(r[c] for c in t.key), r)
    return out


def _header(f, items: dict) -> None:
    for k, v in items.items():
        f.write(f"# {k}: {v}\n")


def _commit() -> str:
    return subprocess.run(
        ["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True
    ).stdout.strip()


W4A4_MOE_DTYPES = ("nvfp4",)  # AIC moe formats whose activations are FP4 too (sim.timing.carry rule 4)


def predict(aic, out: Path, classes: frozenset[str] | None = None, gpus: tuple[str, ...] = GPUS) -> list[Path]:
    """sim's prediction at each AIC shape, one CSV per GPU, backend and op class (`classes`: those only); an
    AIC MoE row of a W4A4 format is predicted with the experts' activations in FP4, every other in FP8."""
    written = []
    out.mkdir(parents=True, exist_ok=True)
    for gpu in gpus:
        side = SimSide(gpu)
        # the experts' FP4-activation tables only where MoE rows are predicted
        side_w4a4 = SimSide(gpu, "fp4") if classes is None or "moe" in classes else side
        for backend, version, t, path in _table_paths(aic, gpu):
            if classes is not None and t.op_class not in classes:
                continue
            points = _points(_shapes(path, list(t.columns)), t)
            rows = []
            for key, r in sorted(points.items(), key=lambda kv: tuple(str(x).zfill(12) for x in kv[0])):
                w4a4 = t.op_class == "moe" and r["moe_dtype"] in W4A4_MOE_DTYPES
                got = (side_w4a4 if w4a4 else side).predict(t.op_class, r)
                if got is None:
                    continue
                seconds, inside = got
                row = dict(zip(t.key, key, strict=True))
                if t.op_class == "gemm":
                    row["sim_op"] = side.by_nk[(int(r["n"]), int(r["k"]))]
                row["sim_us"] = round(seconds * 1e6, 4)
                row["in_sim_grid"] = inside
                rows.append(row)
            if not rows:
                continue
            dest = out / f"{gpu}_{backend}_{t.op_class}.csv"
            with dest.open("w", newline="") as f:
                _header(f, {"what": f"sim's prediction at AIConfigurator's {gpu} {backend} {version} "
                                    f"{t.op}/{t.file} shapes (kernels_bench.aic_compare predict)",
                            "aic": aic.describe(), "aic_columns_read": ", ".join(t.columns),
                            "sim": side.source(), "commit": _commit()})  # fmt: skip
                w = csv.DictWriter(f, fieldnames=list(rows[0]))
                w.writeheader()
                w.writerows(rows)
            written.append(dest)
    return written


# an AIC GEMM table is an artifact where its FP8-block rows at small M (<= 128) take more than this many times
# the same shapes in BF16 (issue 28 leads: vLLM's ~180 us on the B200; checked per GPU and backend)
ARTIFACT_RATIO = 3.0
ARTIFACT_NOTE = "AIC fp8_block GEMM rows flat at small M (> 3x BF16's time): a table artifact, left out"
US_TABLES = ("moe_a2a",)  # AIC's latency column is milliseconds, except these tables' (transmit_us beside it)


def _read_predicted(path: Path) -> list[dict]:
    with path.open() as f:
        return list(csv.DictReader(line for line in f if not line.startswith("#")))


def _aic_times(path: Path, t: Table) -> dict[tuple, list[float]]:
    """AIC's latency in us per comparison key: its rows sharing a key (mHC's pre and post)."""
    import pyarrow.parquet as pq

    rows = pq.read_table(path, columns=[*t.columns, "latency"]).to_pylist()
    scale = 1.0 if t.op_class in US_TABLES else 1e3
    out: dict[tuple, list[float]] = {}
    for r in rows:
        if t.keep(r):
            out.setdefault(tuple(str(r[c]) for c in t.key), []).append(float(r["latency"]) * scale)
    return out


def _aic_us(t: Table, times: list[float]) -> float | None:
    if t.op_class == "mhc":  # one boundary: pre + post, both measured at these tokens
        return sum(times) if len(times) == 2 else None
    return statistics.median(times)


def _artifact(times: dict[tuple, list[float]]) -> float:
    """Median over small-M shapes of AIC's fp8_block / bfloat16 time (gemm key: source, dtype, m, n, k)."""
    bf16 = {(k[2], k[3], k[4]): statistics.median(v) for k, v in times.items() if k[1] == "bfloat16"}
    ratios = [statistics.median(v) / bf16[k[2:]] for k, v in times.items()
              if k[1] == "fp8_block" and int(k[2]) <= 128 and k[2:] in bf16]  # fmt: skip
    return statistics.median(ratios) if ratios else 0.0


def _moe_split(row: dict) -> str:
    """The MoE rows' parallelism: none, expert TP (weights split, every rank all tokens) or EP."""
    tp, ep = int(row["moe_tp_size"]), int(row["moe_ep_size"])
    return "tp1 ep1" if tp == ep == 1 else ("expert-TP" if ep == 1 else "EP")


def _variant(op_class: str, row: dict) -> str:
    """What the summary groups a row by within its op class: AIC's format, kernel or EP size."""
    if op_class == "moe":
        return f"{row['moe_dtype']} {_moe_split(row)}"
    if op_class == "moe_a2a":
        return f"{row['comm_backend']} {row['phase']}"
    if op_class == "gemm":
        return row["gemm_dtype"]
    if op_class == "allreduce":
        return row["kernel_source"].rsplit("_", 1)[-1] + (
            " <=1M elems" if int(row["message_size"]) <= 2**20 else " >1M"
        )
    return ""


def _stats(errs: list[tuple[float, str]]) -> dict:
    """Median, median |.| and worst of the unflagged errors (of all when every one is flagged)."""
    used = [e for e, f in errs if not f]
    pool = used or [e for e, _f in errs]
    flags = sorted({f for _e, f in errs if f})
    return {"points": len(errs), "in_summary": len(used),
            "median_error": round(statistics.median(pool), 4),
            "median_abs_error": round(statistics.median(abs(e) for e in pool), 4),
            "worst_error": round(max(pool, key=abs), 4),
            "excluded": "; ".join(f"{sum(1 for _e, x in errs if x == f)} {f}" for f in flags)}  # fmt: skip


def _write_csv(path: Path, rows: list[dict], header: dict) -> None:
    if not rows:
        return
    with path.open("w", newline="") as f:
        _header(f, header)
        w = csv.DictWriter(f, fieldnames=list(rows[0]))
        w.writeheader()
        w.writerows(rows)


def compare(aic, predicted: Path, out: Path) -> list[dict]:
    """AIC's times beside the committed predictions: one CSV per predicted file, the summary per op class,
    the carry's B200 / H200 ratio against AIC's, and where AIC's attention grids stop."""
    by_class = {t.op_class: t for t in TABLES}
    (out / "compare").mkdir(parents=True, exist_ok=True)
    groups: dict[tuple, list[tuple[float, str]]] = {}
    # (backend, class, shape) -> gpu -> [(variant, sim, aic, flag)]: MoE pairs the B200's formats with the H200's
    pairs: dict[tuple, dict[str, list[tuple[str, float, float, str]]]] = {}
    head = {"aic": aic.describe(), "commit": _commit()}
    for path in sorted(predicted.glob("*.csv")):
        gpu, backend, op_class = path.stem.split("_", 2)
        t = by_class[op_class]
        times = _aic_times(aic.system(gpu) / t.op / backend / BACKENDS[backend] / t.file, t)
        artifact = op_class == "gemm" and _artifact(times) > ARTIFACT_RATIO
        rows = []
        for r in _read_predicted(path):
            key = tuple(r[c] for c in t.key)
            got = times.get(key)
            aic_us = _aic_us(t, got) if got else None
            if aic_us is None or aic_us <= 0:
                continue
            sim_us = float(r["sim_us"])
            flag = "beyond_sim_grid" if r["in_sim_grid"] != "True" else ""
            if artifact and r["gemm_dtype"] == "fp8_block":
                flag = "aic_table_artifact"
            err = sim_us / aic_us - 1.0
            rows.append({**r, "aic_us": round(aic_us, 4), "error": round(err, 4), "flag": flag})
            variant = _variant(op_class, r)
            groups.setdefault((gpu, op_class, variant, backend), []).append((err, flag))
            shape = key[2:] if op_class == "moe" else key  # moe key: kernel_source, moe_dtype, shape...
            pairs.setdefault((backend, op_class, shape), {}).setdefault(gpu, []).append(
                (variant, sim_us, aic_us, flag)
            )
        if rows:
            _write_csv(out / "compare" / path.name, rows,
                       {"what": f"sim (committed blind in {predicted}) vs AIConfigurator's measured latency",
                        **head, "error": "sim_us / aic_us - 1"})  # fmt: skip
    summary = [{"gpu": g, "op_class": c, "aic_variant": v, "backend": b, **_stats(errs),
                "note": ARTIFACT_NOTE if "aic_table_artifact" in _stats(errs)["excluded"] else ""}
               for (g, c, v, b), errs in sorted(groups.items())]  # fmt: skip
    _write_csv(out / "summary.csv", summary,
               {"what": "sim / AIC - 1 per GPU, op class, AIC format and backend", **head,
                "summary": "rows inside sim's measured grid and not flagged; a group with none summarises "
                           "its flagged rows (in_summary 0)"})  # fmt: skip
    ratio: dict[tuple, list[tuple[float, str]]] = {}
    for (backend, op_class, _shape), by_gpu in pairs.items():
        for gpu in sorted(by_gpu):
            if gpu == REFERENCE_GPU:
                continue
            for vx, sx, ax, fx in by_gpu.get(gpu, []):
                if op_class == "moe" and vx.startswith("fp8_block") and _native_fp4(gpu):
                    continue  # sim's experts there are MXFP4 (carry rule 4): its ratio is not AIC's FP8 / FP8 one
                for vh, sh, ah, fh in by_gpu.get(REFERENCE_GPU, []):
                    variant = vx if vx == vh else f"{gpu} {vx} / {REFERENCE_GPU} {vh}"
                    ratio.setdefault((gpu, op_class, variant, backend), []).append(
                        ((sx / sh) / (ax / ah) - 1.0, fx or fh)
                    )
    carry = [
        {"gpu": g, "op_class": c, "aic_variant": v, "backend": b, **_stats(errs)}
        for (g, c, v, b), errs in sorted(ratio.items())
    ]
    _write_csv(out / "carry_ratio.csv", carry,
               {"what": "the carry's GPU / H200 time ratio against AIC's at the same shape and backend: "
                        "(sim_gpu / sim_h200) / (aic_gpu / aic_h200) - 1", **head})  # fmt: skip
    _write_csv(
        out / "aic_grid.csv", _grid_extent(aic), {"what": "where AIC's decode attention grids stop", **head}
    )
    return summary


def _native_fp4(gpu: str) -> bool:
    """Whether sim runs `gpu`'s routed experts in MXFP4 (an FP4 peak in its profile; carry rule 4)."""
    from sim.timing.carry import GpuPeaks
    from sim.timing.tables import resolve_gpu

    profile = resolve_gpu(gpu)[1]
    return profile is not None and GpuPeaks.of(profile).native_fp4


def _grid_extent(aic) -> list[dict]:
    """Per decode attention table, backend, GPU, TP and batch: the largest context (step) AIC measured."""
    out = []
    for gpu in GPUS:
        for backend, _version, t, path in _table_paths(aic, gpu):
            if not t.op_class.startswith(("attention_decode", "indexer", "sparse_mla")):
                continue
            top: dict[tuple, int] = {}
            for r in _shapes(path, list(t.columns)):
                if t.keep(r):
                    k = (int(r.get("tp_size", 1)), int(r["batch_size"]))
                    top[k] = max(top.get(k, 0), int(r["step"]))
            for (tp, b), step in sorted(top.items()):
                out.append({"gpu": gpu, "backend": backend, "table": t.file, "tp_size": tp, "batch_size": b,
                            "max_context": step})  # fmt: skip
    return out


MODULE_KINDS = {"CSA": "dsv4_csa_context_module_perf.parquet", "HCA": "dsv4_hca_context_module_perf.parquet"}
MODULE_COLUMNS = ("gpu", "engine", "engine_version", "layer_kind", "tp", "heads", "isl", "latency_us", "samples")


def export_modules(aic, out: Path) -> list[dict]:
    """AIC's measured V4-Flash prefill attention modules (`dsv4_{csa,hca}_context_module`, fp8_block, one
    sequence, no prefix), the median latency per (GPU, engine, layer kind, TP, isl), every GPU sim knows
    (sim.timing.aic_data.SYSTEMS), written as one CSV with its source: the measured engine modules the
    calibrated timing's engine glue reads (sim.timing.engine_glue)."""
    import pyarrow.parquet as pq

    from sim.timing.aic_data import SYSTEMS

    rows = []
    for gpu in sorted(SYSTEMS):
        system = aic.system(gpu)
        if system is None:
            continue
        for engine, version in sorted(BACKENDS.items()):
            for kind, name in sorted(MODULE_KINDS.items()):
                path = system / "sparse_attention" / engine / version / name
                if not path.is_file():
                    continue
                cols = ["model", "gemm_type", "num_heads", "batch_size", "isl", "tp_size", "step", "latency"]
                times: dict[tuple[int, int, int], list[float]] = {}
                for r in pq.read_table(path, columns=cols).to_pylist():
                    if _prefill_keep(r):
                        key = (int(r["tp_size"]), int(r["num_heads"]), int(r["isl"]))
                        times.setdefault(key, []).append(float(r["latency"]) * 1e3)  # ms -> us
                for (tp, heads, isl), v in sorted(times.items()):
                    rows.append({"gpu": gpu, "engine": engine, "engine_version": version, "layer_kind": kind,
                                 "tp": tp, "heads": heads, "isl": isl,
                                 "latency_us": f"{statistics.median(v):.4g}", "samples": len(v)})  # fmt: skip
    out.parent.mkdir(parents=True, exist_ok=True)
    with out.open("w") as f:
        _header(f, {
            "what": "one V4-Flash layer's attention side at prefill as the engine runs it (AIC's "
                    "dsv4_{csa,hca}_context_module: everything between the two mHC boundaries but the norm), "
                    "gemm_type fp8_block, fp8_e4m3 KV, batch 1, no prefix (step 0); median of AIC's rows per point",
            "source": f"{aic.describe()}, <gpu system>/sparse_attention/<engine>/<version>/<file>; "
                      "measured by NVIDIA on each GPU with the named engine's layer",
            "license": "Apache-2.0 (AIConfigurator, NVIDIA); rows extracted unchanged but for the median",
            "written_by": "python3 -m kernels_bench.aic_compare modules --out <this file>",
        })  # fmt: skip
        w = csv.DictWriter(f, fieldnames=list(MODULE_COLUMNS), lineterminator="\n")
        w.writeheader()
        w.writerows(rows)
    return rows


def main(argv=None) -> int:
    from sim.errors import InputError
    from sim.timing.aic_data import SYSTEMS, find_aic

    ap = argparse.ArgumentParser(prog="kernels_bench.aic_compare", description=__doc__.splitlines()[0])
    sub = ap.add_subparsers(dest="cmd", required=True)
    p = sub.add_parser("predict", help="sim's predictions at AIC's shapes (shape columns only)")
    p.add_argument("--out", type=Path, required=True)
    p.add_argument(
        "--aic-data", help="aiconfigurator_core/systems/data (default: $SIM_AIC_DATA or installed)"
    )
    p.add_argument("--classes", help="comma-separated op classes to predict (default: all)")
    p.add_argument("--gpus", help=f"comma-separated GPU keys (default: {','.join(GPUS)}; also b300, gb200)")
    c = sub.add_parser("compare", help="AIC's measured times beside the committed predictions")
    c.add_argument("--predicted", type=Path, required=True)
    c.add_argument("--out", type=Path, required=True)
    c.add_argument("--aic-data", help="as for predict")
    m = sub.add_parser("modules", help="export AIC's measured prefill attention modules for sim.timing.engine_glue")
    m.add_argument("--out", type=Path, required=True)
    m.add_argument("--aic-data", help="as for predict")
    args = ap.parse_args(argv)
    try:
        aic = find_aic(args.aic_data)
    except InputError as e:
        print(e, file=sys.stderr)
        return 2
    if args.cmd == "modules":
        rows = export_modules(aic, args.out)
        print(f"wrote {len(rows)} rows to {args.out}")
    elif args.cmd == "predict":
        known = {t.op_class for t in TABLES}
        classes = None if not args.classes else frozenset(x.strip() for x in args.classes.split(","))
        if classes is not None and not classes <= known:
            print(f"error: --classes {args.classes}: unknown op class {sorted(classes - known)[0]!r}; allowed: "
                  f"{', '.join(sorted(known))}", file=sys.stderr)  # fmt: skip
            return 2
        gpus = GPUS if not args.gpus else tuple(x.strip() for x in args.gpus.split(","))
        unknown = [g for g in gpus if g not in SYSTEMS]
        if unknown:
            print(f"error: --gpus {args.gpus}: no AIConfigurator system for {unknown[0]!r}; allowed: "
                  f"{', '.join(SYSTEMS)}", file=sys.stderr)  # fmt: skip
            return 2
        for path in predict(aic, args.out, classes, gpus):
            print(f"wrote {path}")
    else:
        for row in compare(aic, args.predicted, args.out):
            print(row)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
