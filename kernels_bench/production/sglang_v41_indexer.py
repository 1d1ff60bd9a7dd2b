"""SGLang's DeepSeek-V4.1 prefill indexer on Hopper, as that engine runs it: eager torch, timed per index layer
(issue 29, docs/engines_and_validation.md section 52).

On SM90 SGLang has no fused kernel for V4.1's prefill indexer: DeepGEMM's `fp8_fp4_mqa_logits` needs SM100, so the
backend's dispatch sends every extend / prefill index layer to its torch path (`_low_ratio_index_topk_torch` in
`srt/layers/attention/deepseek_v4_backend.py`; tracking issue sgl-project/sglang#40574: "is Hopper's prefill
indexer"; the Triton replacement #39086 was closed unmerged). That path is what this module re-implements, op for
op, from its published op list (sim reads no engine code; nothing here is copied):

per index layer, per request of the step (a host-synchronising Python loop):
  1. the request's visible compressed index keys (`lc` = the newest row's visible count) gathered from the
     paged pool (64-slot pages, 64 payload + 4 scale bytes a slot) and dequantised from MXFP4 to BF16 through a
     value table, every layer, nothing cached;
  2. its rows in chunks of `SCORE_BUDGET_BYTES / (heads x lc x 2)`: the BF16 einsum q . k materialised as
     [rows, heads, lc], relu, times the head weights, the head sum, to FP32; the causal mask over all `lc`
     columns; layer 20 (the candidate source) the block max over 8, a top-2048 of blocks and a bool position
     mask; layers 24-36 (Reindex, consumers) that mask applied to their full-width scores; the top-512, its
     sort and the index writes.

The einsum runs on the tensor cores; the rest streams [rows, heads, lc] tensors through HBM several times, so
the layer is bound by memory, O(rows x lc), with no benefit from the candidate set. What the query projection
costs (`wq_b`, the index-query GEMM) sim charges elsewhere, so it is not timed here.

Timing: eager, as the engine runs it (its `.item()` / `.tolist()` calls synchronise the host every request and
layer, so the path cannot be captured in a CUDA graph); wall time between two device synchronisations, the
median of repeated calls on random data, after a check against an FP32 reference.

    python3 -m kernels_bench.production.sglang_v41_indexer --out DIR [--commit SHA] [--budget-s S]
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path
from typing import NamedTuple

import torch
import torch.nn.functional as F

SCORE_BUDGET_BYTES = (
    1 << 30
)  # SGLang's cap on one BF16 [rows, heads, lc] score chunk (`_TORCH_INDEXER_SCORE_BUDGET_BYTES`)
PAGE_SLOTS = 64  # index-key pool page (payload bytes of its slots, then their scales)
PAYLOAD_BYTES = 64  # 128 FP4 values
SCALE_BYTES = 4  # one UE8M0 exponent per 32 values
FP4_E2M1 = (0.0, 0.5, 1.0, 1.5, 2.0, 3.0, 4.0, 6.0, -0.0, -0.5, -1.0, -1.5, -2.0, -3.0, -4.0, -6.0)
ROLES = ("plain", "source", "consumer")  # layers 2/8/14 (ratio 2); layer 20; layers 24/28/32/36 (Reindex)
COLUMNS = (
    "role", "rows", "lc", "chunks", "time_us", "dequant_us", "scores_us", "model_us", "samples", "check", "note",
)  # fmt: skip
# the measured grid: rows of one request on one GPU in a step (a chunk, or a prefill-CP rank's share of it) and
# the visible compressed keys of its newest row (ratio 1: the context; ratio 2: half of it)
ROWS = (16, 128, 512, 2048, 4096, 8192)
LCS = (2048, 8192, 32768, 131072, 262144, 524288, 1048576)


class Geometry(NamedTuple):
    """V4.1-Flash's indexer as SGLang configures it (model.md §3; the engine's test config)."""

    heads: int = 32
    head_dim: int = 128
    topk: int = 512
    block: int = 8  # candidate block size
    topk_blocks: int = 2048  # candidate blocks the source layer keeps
    score_budget_bytes: int = SCORE_BUDGET_BYTES


V41 = Geometry()


class Request(NamedTuple):
    """One request's rows in a step, on one GPU."""

    q: torch.Tensor  # [rows, heads, head_dim] bf16 (FP4-rounded by the engine, held in BF16)
    weights: torch.Tensor  # [rows, heads] bf16
    lens: torch.Tensor  # [rows] int64: visible compressed keys of each row (the newest row's is lc)
    slots: torch.Tensor  # [lc] int64: pool slot of each visible compressed position


class Pool(NamedTuple):
    """The index-key pool: pages of PAGE_SLOTS slots, payload bytes then scale bytes."""

    pages: torch.Tensor  # [n_pages, PAGE_SLOTS * (PAYLOAD_BYTES + SCALE_BYTES)] uint8
    table: torch.Tensor  # [16] float32, the E2M1 values


def make_pool(slots: int, device: str, gen: torch.Generator) -> Pool:
    n_pages = -(-slots // PAGE_SLOTS)
    pages = torch.randint(
        0, 256, (n_pages, PAGE_SLOTS * (PAYLOAD_BYTES + SCALE_BYTES)), generator=gen, dtype=torch.uint8
    )
    # scales near 2^0 so that scores stay in a range where BF16 ranks them like FP32
    base = PAGE_SLOTS * PAYLOAD_BYTES
    pages[:, base:] = torch.randint(
        124, 130, (n_pages, PAGE_SLOTS * SCALE_BYTES), generator=gen, dtype=torch.uint8
    )
    return Pool(pages.to(device), torch.tensor(FP4_E2M1, dtype=torch.float32, device=device))


def make_request(
    rows: int, lc: int, g: Geometry, device: str, gen: torch.Generator, slot_base: int = 0
) -> Request:
    """`rows` rows whose newest sees `lc` compressed keys (the others a few fewer: causal), on pages laid out in a
    shuffled order as a long-lived pool has them."""
    q = (torch.randn(rows, g.heads, g.head_dim, generator=gen) * 0.5).to(torch.bfloat16)
    w = (torch.rand(rows, g.heads, generator=gen) * g.heads**-0.5).to(torch.bfloat16)
    lens = (lc - torch.arange(rows - 1, -1, -1)).clamp_min(1).to(torch.int64)
    n_pages = -(-lc // PAGE_SLOTS)
    order = torch.randperm(n_pages, generator=gen)
    slots = (order[torch.arange(lc) // PAGE_SLOTS] * PAGE_SLOTS + torch.arange(lc) % PAGE_SLOTS) + slot_base
    return Request(q.to(device), w.to(device), lens.to(device), slots.to(device))


def dequant_keys(pool: Pool, slots: torch.Tensor, head_dim: int) -> torch.Tensor:
    """BF16 [lc, head_dim] keys of `slots`: the byte gather from the paged pool, the nibble split, the value-table
    lookup, the per-32 power-of-two scales (the engine's `get_index_k_dequant`)."""
    page, off = slots // PAGE_SLOTS, slots % PAGE_SLOTS
    cols = off[:, None] * PAYLOAD_BYTES + torch.arange(PAYLOAD_BYTES, device=slots.device)
    payload = pool.pages[page[:, None], cols]  # [lc, 64] uint8
    scols = (
        PAGE_SLOTS * PAYLOAD_BYTES
        + off[:, None] * SCALE_BYTES
        + torch.arange(SCALE_BYTES, device=slots.device)
    )
    scale = pool.pages[page[:, None], scols]  # [lc, 4] uint8
    codes = torch.stack((payload & 0xF, payload >> 4), dim=-1).reshape(len(slots), head_dim)
    values = pool.table[codes.long()]
    mult = torch.exp2(scale.float() - 127.0).repeat_interleave(head_dim // SCALE_BYTES, dim=1)
    return (values * mult).to(torch.bfloat16)


def scores(q: torch.Tensor, k: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
    """FP32 [rows, lc]: sum over heads of w . relu(q . k), BF16 up to the head sum (each step its own kernel)."""
    s = torch.einsum("rhd,nd->rhn", q, k)
    return (s.relu() * w.unsqueeze(-1)).sum(dim=1).float()


def fused_scores_torch(q: torch.Tensor, k: torch.Tensor, w: torch.Tensor, lens: torch.Tensor) -> torch.Tensor:
    """What the fused score kernel computes (FP32 accumulation, causal positions at -inf), in torch: its stand-in
    where Triton is absent, and its check."""
    s = torch.einsum("rhd,nd->rhn", q.float(), k.float()).relu()
    s = (s * w.float().unsqueeze(-1)).sum(dim=1)
    return s.masked_fill(torch.arange(k.shape[0], device=s.device)[None, :] >= lens[:, None], -torch.inf)


def fused_scorer(device: torch.device):
    """The fused score kernel for tensors on the GPU (Triton), its torch stand-in for tensors elsewhere."""
    if device.type == "cuda":
        from kernels_bench.production.fused_index_scores import fused_scores

        return fused_scores
    return fused_scores_torch


def rows_per_chunk(g: Geometry, lc: int, fused: bool) -> int:
    """Rows a score chunk holds under the engine's budget: BF16 [rows, heads, lc] on the torch path; FP32
    [rows, lc] at a quarter of the budget with the fused kernel (16 B a row and position, its source's rule)."""
    return max(1, g.score_budget_bytes // (lc * 16 if fused else g.heads * lc * 2))


def block_mask(s: torch.Tensor, lens: torch.Tensor, g: Geometry) -> torch.Tensor:
    """The candidate source's bool [rows, lc] mask: per row the `topk_blocks` blocks of `block` positions with the
    highest block max (the newest block always kept), spread back to positions."""
    rows, lc = s.shape
    pad = -lc % g.block
    b = F.pad(s, (0, pad), value=-torch.inf).unflatten(-1, (-1, g.block)).amax(-1)
    newest = ((lens - 1) // g.block).clamp_max(b.shape[1] - 1)
    b.scatter_(1, newest[:, None], torch.inf)
    keep = b.topk(min(g.topk_blocks, b.shape[1]), dim=-1).indices
    m = torch.zeros_like(b, dtype=torch.bool).scatter_(1, keep, True)
    return m.repeat_interleave(g.block, dim=1)[:, :lc]


class LayerOut(NamedTuple):
    page_indices: torch.Tensor  # [rows, topk] int32 pool slots, -1 past a row's reach
    raw_indices: torch.Tensor  # [rows, topk] int32 compressed positions, -1 past a row's reach
    mask: torch.Tensor | None  # the source layer's [rows, lc] candidate mask


def index_layer(
    pool: Pool, req: Request, role: str, g: Geometry, consume: torch.Tensor | None = None, fused: bool = False
) -> LayerOut:
    """One index layer over one request's rows, as the engine's torch path runs it (module doc); `fused`: its
    scores from the fused score kernel (the engine's opt-in flag), the rest unchanged."""
    rows = req.q.shape[0]
    lc = int(req.lens.max().item())  # the engine's host synchronisation per request and layer
    keys = dequant_keys(pool, req.slots[:lc], g.head_dim)
    j = torch.arange(lc, device=keys.device)
    k = min(g.topk, lc)
    page_idx = torch.full((rows, g.topk), -1, dtype=torch.int32, device=keys.device)
    raw_idx = torch.full_like(page_idx, -1)
    masks = []
    step = rows_per_chunk(g, lc, fused)
    scorer = fused_scorer(req.q.device) if fused else None
    for start in range(0, rows, step):
        sl = slice(start, min(rows, start + step))
        lens = req.lens[sl]
        if scorer is not None:
            s = scorer(req.q[sl], keys, req.weights[sl], lens)
        else:
            s = scores(req.q[sl], keys, req.weights[sl])
            s = s.masked_fill(j[None, :] >= lens[:, None], -torch.inf)
        if role == "source":
            masks.append(block_mask(s, lens, g))
        elif role == "consumer":
            assert consume is not None
            s = s.masked_fill(~consume[sl, :lc], -torch.inf)
        top = s.topk(k, dim=-1, sorted=False)
        idx = top.indices
        if role == "consumer":  # picks the mask removed (-inf) are dropped
            idx = idx.masked_fill(torch.isneginf(top.values), lc)
        idx = idx.sort(dim=-1).values
        reach = idx < lens[:, None]
        page_idx[sl, :k] = torch.where(reach, req.slots[idx.clamp_max(lc - 1)], -1).to(torch.int32)
        raw_idx[sl, :k] = torch.where(reach, idx, -1).to(torch.int32)
    return LayerOut(page_idx, raw_idx, torch.cat(masks) if masks else None)


def score_chunks(
    pool: Pool, req: Request, g: Geometry, keep: bool = False, fused: bool = False
) -> torch.Tensor | None:
    """The scoring alone of one layer over one request's rows (the keys' dequantisation, then per row chunk the
    einsum, relu, weights, head sum, cast and causal mask): the part of the layer that a fused score kernel
    replaces, timed so that the rest (top-k, sort, index writes, the candidate masks) is known by difference.
    `keep`: return the FP32 [rows, lc] scores (for the check; timing keeps none, as the layer keeps one chunk)."""
    lc = int(req.lens.max().item())
    keys = dequant_keys(pool, req.slots[:lc], g.head_dim)
    j = torch.arange(lc, device=keys.device)
    step = rows_per_chunk(g, lc, fused)
    scorer = fused_scorer(req.q.device) if fused else None
    kept = []
    for start in range(0, req.q.shape[0], step):
        sl = slice(start, min(req.q.shape[0], start + step))
        if scorer is not None:
            s = scorer(req.q[sl], keys, req.weights[sl], req.lens[sl])
        else:
            s = scores(req.q[sl], keys, req.weights[sl]).masked_fill(
                j[None, :] >= req.lens[sl, None], -torch.inf
            )
        if keep:
            kept.append(s)
    return torch.cat(kept) if keep else None


def reference_scores(pool: Pool, req: Request, g: Geometry) -> torch.Tensor:
    """FP32 [rows, lc] scores of the same keys and queries, for the check (causal positions -inf)."""
    lc = int(req.lens.max().item())
    return fused_scores_torch(req.q, dequant_keys(pool, req.slots[:lc], g.head_dim), req.weights, req.lens)


def check(pool: Pool, req: Request, role: str, g: Geometry, out: LayerOut, consume=None) -> float:
    """The share of valid picks whose FP32 score is at least the row's k-th best FP32 score (over the positions the
    layer may pick) less a BF16 tolerance; 1.0 when the path selects what FP32 would, up to rounding."""
    s = reference_scores(pool, req, g)
    if role == "consumer":
        s = s.masked_fill(~consume[:, : s.shape[1]], -torch.inf)
    k = min(g.topk, s.shape[1])
    kth = s.topk(k, dim=-1).values[:, -1:]
    tol = 2e-2 * s.masked_fill(torch.isinf(s), 0.0).abs().amax(dim=-1, keepdim=True) + 1e-6
    raw = out.raw_indices[:, :k].long()
    valid = raw >= 0
    picked = torch.gather(s, 1, raw.clamp_min(0))
    ok = (picked >= torch.where(torch.isinf(kth), picked, kth - tol)) & valid
    expected = torch.isfinite(s).sum(dim=1).clamp_max(k)
    if not torch.equal(valid.sum(dim=1), expected):
        return 0.0
    return float(ok.sum()) / max(1, int(valid.sum()))


# The path's HBM traffic, an estimate from its op list (each op its own kernel; bytes per row and visible position):
# the BF16 score write (2 x heads), relu and the weight product (read + write each), the head sum (read, BF16
# write), the FP32 cast, the causal mask (a bool compare and the fill), the top-512 (a radix select: several reads)
SCORE_BYTES_PER_HEAD = 2 + 4 + 4 + 2  # einsum write, relu read+write, weights read+write, head-sum read
ROW_POSITION_BYTES = 2 + 6 + 10 + 20  # head-sum write, FP32 cast, mask, top-k
ROLE_BYTES = {"plain": 0, "source": 16, "consumer": 11}  # the block mask; the candidate mask's fill
DEQUANT_BYTES_PER_POSITION = (
    6144  # int64 gather indices, nibble split, int64 codes, FP32 values and scales, BF16
)
LAUNCHES_PER_CHUNK = 16
LAUNCH_S = 10e-6  # eager issue per op (docs/carry/eager: about 5-12 us an op on the VMs measured)
REQUEST_SYNC_S = 100e-6  # the .item() / .nonzero() synchronisations and the dequantisation's launches


def model_us(role: str, rows: int, lc: int, bw_Bps: float, g: Geometry = V41) -> float:
    """The path's time (us) from its HBM traffic at `bw_Bps` plus its launches: the estimate sim's prediction
    used before the measurement (docs/engines_and_validation.md section 52)."""
    chunks = -(-rows // rows_per_chunk(g, lc, fused=False))
    per_position = g.heads * SCORE_BYTES_PER_HEAD + ROW_POSITION_BYTES + ROLE_BYTES[role]
    traffic = rows * lc * per_position + lc * DEQUANT_BYTES_PER_POSITION
    return (traffic / bw_Bps + chunks * LAUNCHES_PER_CHUNK * LAUNCH_S + REQUEST_SYNC_S) * 1e6


def time_layer_us(fn, samples: int, max_s: float) -> tuple[float, int]:
    """Median wall time (us) of `fn` between two device synchronisations."""
    out = []
    t_end = time.perf_counter() + max_s
    while len(out) < samples and (len(out) < 2 or time.perf_counter() < t_end):
        torch.cuda.synchronize()
        t = time.perf_counter()
        fn()
        torch.cuda.synchronize()
        out.append((time.perf_counter() - t) * 1e6)
    return statistics.median(out), len(out)


def measure(
    rows: int,
    lc: int,
    g: Geometry,
    device: str,
    gen: torch.Generator,
    verify: bool,
    bw_Bps: float,
    fused: bool = False,
) -> list[dict]:
    """The three roles at one (rows, lc): plain, source, and a consumer of that source's mask; `fused`: with the
    fused score kernel (its scores checked against their FP32 stand-in first)."""
    pool = make_pool(lc, device, gen)
    req = make_request(rows, lc, g, device, gen)
    chunks = -(-rows // rows_per_chunk(g, lc, fused))
    out = []
    note = ""
    if fused and verify:
        got = score_chunks(pool, req, g, keep=True, fused=True)
        want = reference_scores(pool, req, g)
        finite = torch.isfinite(want)
        err = float((got[finite] - want[finite]).abs().max() / want[finite].abs().max().clamp_min(1e-30))
        if not torch.equal(finite, torch.isfinite(got)) or err > 1e-2:
            raise AssertionError(f"fused scores differ from their FP32 stand-in (relative {err:.2e})")
        note = f"fused scores within {err:.1e} of FP32"
        del got, want
    src = index_layer(pool, req, "source", g, fused=fused)  # warm-up and the consumers' mask
    dequant_us, _ = time_layer_us(lambda: dequant_keys(pool, req.slots, g.head_dim), samples=5, max_s=1.0)
    scores_us, _ = time_layer_us(lambda: score_chunks(pool, req, g, fused=fused), samples=5, max_s=2.0)
    for role in ROLES:
        consume = src.mask if role == "consumer" else None
        res = index_layer(pool, req, role, g, consume, fused=fused)
        ok = check(pool, req, role, g, res, consume) if verify else float("nan")
        t_us, n = time_layer_us(
            lambda r=role, c=consume: index_layer(pool, req, r, g, c, fused=fused), samples=7, max_s=4.0
        )
        est = (
            "" if fused else round(model_us(role, rows, lc, bw_Bps, g), 1)
        )  # the estimate is the torch path's
        out.append(dict(role=role, rows=rows, lc=lc, chunks=chunks, time_us=round(t_us, 1),
                        dequant_us=round(dequant_us, 1), scores_us=round(scores_us, 1), model_us=est,
                        samples=n, check=round(ok, 4), note=note))  # fmt: skip
    return out


def copy_bandwidth_Bps(gib: int = 2) -> float:
    """HBM bandwidth of a device-to-device copy of `gib` GiB, read and write counted (the estimate's rate)."""
    src = torch.empty(gib << 30, dtype=torch.uint8, device="cuda")
    dst = torch.empty_like(src)
    t_us, _ = time_layer_us(lambda: dst.copy_(src), samples=9, max_s=2.0)
    return 2 * src.numel() / (t_us * 1e-6)


def provenance(commit: str | None) -> dict:
    from kernels_bench import report
    from kernels_bench.production.host_issue import cpu_model

    prov = report.provenance(commit)
    prov["gpu"] = torch.cuda.get_device_name()
    prov["cpu_model"] = cpu_model()
    prov["what"] = (
        "SGLang's V4.1 Hopper prefill indexer (the torch path, re-implemented from its op list), one index layer "
        "over one request's rows, eager wall time, median"
    )
    return prov


def read_points(path: Path) -> dict[tuple[str, int, int], dict]:
    """The rows of a table this module wrote, by (role, rows, lc); rows that failed (no role or time) left out."""
    import csv

    with path.open() as f:
        rows = csv.DictReader(line for line in f if not line.startswith("#"))
        return {(r["role"], int(r["rows"]), int(r["lc"])): r for r in rows if r["role"] and r["time_us"]}


def derive(out: Path, tbps: float, commit: str | None, scale_by: Path | None = None) -> int:
    """The measured grid's points from the traffic estimate (`model_us`) at `tbps` TB/s, marked derived: what sim
    reads for a GPU until the path is measured there. `scale_by`: a table measured on another Hopper GPU; each
    point's estimate is then multiplied by that GPU's measured / estimated time at the same point (its own
    `model_us`, at its own copy bandwidth), carrying what the estimate misses (the kernels' distance from copy
    bandwidth, the launches, the host) on the assumption that it is the same fraction on both GPUs."""
    from kernels_bench import report
    from kernels_bench.production.host_issue import write_csv

    out.mkdir(parents=True, exist_ok=True)
    prov = report.provenance(commit)
    measured = read_points(scale_by) if scale_by is not None else {}
    carried = (
        f", scaled point by point by the measured / estimated time of {scale_by.name}" if scale_by else ""
    )
    prov["what"] = (
        f"DERIVED, not measured: the traffic estimate of SGLang's V4.1 Hopper prefill indexer (model_us) at {tbps} "
        f"TB/s{carried}, one index layer over one request's rows"
    )
    rows = []
    for lc in LCS:
        for r in ROWS:
            for role in ROLES:
                est = model_us(role, r, lc, tbps * 1e12)
                row = dict(role=role, rows=r, lc=lc, chunks=-(-r // rows_per_chunk(V41, lc, fused=False)),
                           time_us=round(est, 1), model_us=round(est, 1), samples=0, note=f"derived at {tbps} TB/s")  # fmt: skip
                m = measured.get((role, r, lc))
                if scale_by is not None and m is None:
                    row.update(time_us="", note=f"no point in {scale_by.name} to scale by")
                elif m is not None:
                    scale = est / float(m["model_us"])
                    row.update(time_us=round(float(m["time_us"]) * scale, 1), note=f"carried x{scale:.3f}")
                    for col in ("dequant_us", "scores_us"):
                        if m.get(col):
                            row[col] = round(float(m[col]) * scale, 1)
                rows.append(row)
    write_csv(out / "sglang_v41_indexer.csv", COLUMNS, rows, prov)
    return 0


def read_copy_GBps(path: Path) -> float:
    """The copy bandwidth a measured table's provenance records (`# copy_GBps: ...`)."""
    for line in path.read_text().splitlines():
        if line.startswith("# copy_GBps:"):
            return float(line.partition(":")[2])
    raise ValueError(f"{path} records no copy_GBps")


def carry_fused(out: Path, tbps: float, commit: str | None, measured_path: Path) -> int:
    """The fused variant's table for another Hopper GPU from one measured on a first, marked derived: each point's
    fused scoring (`scores_us`: tensor-core bound, the same SMs and clocks) kept, the rest of the layer (the keys'
    dequantisation, top-k, sort, writes, masks: memory-bound) scaled by the two GPUs' copy bandwidths."""
    from kernels_bench import report
    from kernels_bench.production.host_issue import write_csv

    out.mkdir(parents=True, exist_ok=True)
    ratio = read_copy_GBps(measured_path) / (tbps * 1e3)
    prov = report.provenance(commit)
    prov["what"] = (
        f"DERIVED, not measured: {measured_path.name} carried to a GPU of {tbps} TB/s, its fused scoring kept and "
        f"the rest scaled by the copy bandwidths (x{ratio:.3f}), one index layer over one request's rows"
    )
    rows = []
    for (role, r, lc), m in read_points(measured_path).items():
        score_us = min(
            float(m["scores_us"]), float(m["time_us"])
        )  # two timings: the part never exceeds the whole
        rest_us = float(m["time_us"]) - score_us
        rows.append(dict(role=role, rows=r, lc=lc, chunks=m["chunks"], time_us=round(score_us + rest_us * ratio, 1),
                         dequant_us=round(float(m["dequant_us"]) * ratio, 1), scores_us=round(score_us, 1),
                         samples=0, note=f"carried: scoring kept, rest x{ratio:.3f}"))  # fmt: skip
    write_csv(out / "sglang_v41_indexer_fused.csv", COLUMNS, rows, prov)
    return 0


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(
        prog="kernels_bench.production.sglang_v41_indexer", description=__doc__.splitlines()[0]
    )
    ap.add_argument("--out", required=True, type=Path)
    ap.add_argument("--commit", default=None)
    ap.add_argument("--budget-s", type=float, default=300.0)
    ap.add_argument(
        "--derive-TBps",
        type=float,
        default=None,
        help="write the traffic estimate at this HBM bandwidth instead of measuring (no GPU; marked derived)",
    )
    ap.add_argument(
        "--scale-by",
        type=Path,
        default=None,
        help="with --derive-TBps: scale each estimate by this measured table's measured / estimated time there "
        "(--variant fused: carry this measured fused table, its scoring kept, the rest scaled by bandwidth)",
    )
    ap.add_argument(
        "--variant",
        choices=("torch", "fused"),
        default="torch",
        help="torch: the engine's default path; fused: its scores from the fused score kernel (the opt-in flag)",
    )
    args = ap.parse_args(argv)
    if args.derive_TBps is not None and args.variant == "fused":
        if args.scale_by is None:
            print(
                "error: --variant fused --derive-TBps needs --scale-by, a measured fused table",
                file=sys.stderr,
            )
            return 2
        return carry_fused(args.out, args.derive_TBps, args.commit, args.scale_by)
    if args.derive_TBps is not None:
        return derive(args.out, args.derive_TBps, args.commit, args.scale_by)
    if not torch.cuda.is_available():
        print("error: CUDA is not available (the indexer timing runs on the GPU machine)", file=sys.stderr)
        return 2
    from kernels_bench.production.host_issue import write_csv

    args.out.mkdir(parents=True, exist_ok=True)
    prov = provenance(args.commit)
    bw = copy_bandwidth_Bps()
    prov["copy_GBps"] = round(bw / 1e9, 1)
    g = Geometry()
    gen = torch.Generator().manual_seed(0)
    rows_out: list[dict] = []
    t0 = time.monotonic()
    fused = args.variant == "fused"
    path = args.out / ("sglang_v41_indexer_fused.csv" if fused else "sglang_v41_indexer.csv")
    if fused:
        prov["what"] += "; scores from the fused score kernel (kernels_bench.production.fused_index_scores)"
    for lc in LCS:
        for rows in ROWS:
            if time.monotonic() - t0 > args.budget_s:
                print(f"budget exhausted before rows {rows} lc {lc}", flush=True)
                break
            verify = (
                rows * lc <= 512 * 131072
            )  # the FP32 reference holds [rows, heads, lc] in FP32 (8.6 GB here)
            try:
                new = measure(rows, lc, g, "cuda", gen, verify, bw, fused)
            except Exception as e:  # noqa: BLE001 - a point that fails is reported, never silent
                new = [dict(role="", rows=rows, lc=lc, note=f"{type(e).__name__}: {e}"[:200])]
            torch.cuda.empty_cache()
            for r in new:
                print(json.dumps(r), flush=True)
            rows_out += new
            write_csv(path, COLUMNS, rows_out, prov)
    prov["elapsed_s"] = round(time.monotonic() - t0, 1)
    write_csv(path, COLUMNS, rows_out, prov)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
