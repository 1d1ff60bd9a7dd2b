"""A reduced DeepSeek-V4-Flash served for real: the real layer types and byte layouts, fewer layers and experts.

Issue 14 item 1. Five decoder layers mixing the full model's kinds (SWA, CSA ratio 4 with the lightning
indexer and top-512, HCA ratio 128; ``sim/model/specs/deepseek-v4-flash-mini.yaml``), each with its mHC
boundaries and an MoE of the real expert shape (32 routed experts, top-6, as one GPU of an EP8 node sees,
plus one shared expert), the real embedding and LM head, random weights (``forward.make_layer_weights``).

Serving, unlike ``kernels_bench.production.forward``:

* **Paged KV** shared by all sequences. The engine owns blocks of ``block_tokens`` raw tokens (a multiple
  of 256) and hands each sequence's block ids; block ``b`` owns, in every layer, raw (window) rows
  ``b·block_tokens ..``, compressed rows ``b·block_tokens/ratio ..`` and (CSA) FP8 index keys at the same
  numbers (``paged.RowPool``: FP8-584 rows in FlashMLA's MODEL1 layout). Raw rows of every token are kept in
  the block (the window of any position, in particular at a reused prefix's end, is then in KV) [D].
* **Per-sequence contexts** in one batch: every row carries its position and its sequence's block-table
  row; window indices, visible compressed entries (CSA ``(pos+1)//4`` keys scored and top-512 selected, HCA
  all ``(pos+1)//128``) and write destinations are computed from them on the device.
* **Compressors** pool each group of ``ratio`` tokens with a per-channel softmax over the group (the
  gate), then norm, RoPE and quantise-on-write to the compressed row (and, CSA, the index key). A group
  that spans steps keeps its partial pool in a per-sequence state slot as one (log-sum-exp, mean) pair per
  channel, merged exactly with the next tokens; a reused prefix ends on a block boundary, so no state
  crosses sequences. The overlapping halves of V4's CSA compressor are not modelled (the GEMM keeps its
  full width) [D].
* **Mixed steps**: decode rows and prefill chunk rows in one forward pass, every row alike: GEMMs, mHC and
  MoE over all rows, and each row's attention with FlashMLA's sparse decode kernel straight from the FP8
  pools (one query per row) and its indexer scores through its block table. Prefill rows thus do not use
  FlashMLA's sparse prefill kernel (which needs a bf16 gather of dynamic size) [D].
* **CUDA graphs for every step**: a step replays the graph captured for its (row bucket, context bucket),
  padded like vLLM (padding rows have position -1 and write to scratch rows); the graphs share one memory
  pool. Eager steps launch ~1,800 kernels from Python (40 ms of host time for a 512-token chunk on the
  H200, 10 ms of GPU work), which no serving engine pays.

``ServedModel.step(plan)`` runs one ``step_api.StepPlan`` and returns the sampled token of every sequence
(logits of the last row of its work); ``ServedModel`` is the engine's ``StepFunction``.
"""

from __future__ import annotations

import math
import time
from collections import OrderedDict
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import torch

from kernels_bench import formats
from kernels_bench.production import forward as fw
from kernels_bench.production import mhc_tk
from kernels_bench.serve import paged
from kernels_bench.serve.paged import paged_rows

KINDS = ("SWA", "CSA", "HCA", "CSA", "HCA")  # the forward-pass "reduced" stack (forward.STACKS)
SPEC = "deepseek-v4-flash-mini"
# rows of a step's CUDA graph (decode rows and prefill chunk rows alike), padded up like vLLM
ROW_BUCKETS = (
    *(1, 2, 4, 8, 16, 24, 32, 48, 64, 80, 96, 112, 128, 160, 192, 224, 256, 320, 384, 448, 512),
    *(640, 768, 896, 1024, 1280, 1536, 1792, 2048, 2112, 2560, 3072, 3584, 4096, 4160),
    *(5120, 6144, 7168, 8192),
)  # 2112, 4160: chunks of 2048 plus 64 decodes


def graph_row_buckets(max_rows: int) -> list[int]:
    """The row buckets a step of at most ``max_rows`` rows can replay: every bucket up to the first one that
    holds ``max_rows`` (all of them when none does)."""
    top = next((b for b in ROW_BUCKETS if b >= max_rows), ROW_BUCKETS[-1])
    return [b for b in ROW_BUCKETS if b <= top]


MAX_SEQS_PER_STEP = 128  # sequences per graphed step (a step with more runs eagerly)
CONTEXT_BUCKET_TOKENS = 8192  # graphs are captured per multiple of this (indexer keys, HCA entries)
INDEX_KEY_FMT = "fp8_132"  # V4's FP8 index keys (the fp8_index layout of the spec)


@dataclass(frozen=True)
class ServeConfig:
    dims: fw.Dims = field(default_factory=fw.Dims)
    kinds: tuple[str, ...] = KINDS
    vocab: int = 129280  # deepseek-v4-flash.yaml
    block_tokens: int = 256
    state_slots: int = 512  # sequences with a compressor state at once (least recently used recycled)
    rope_base: float = 10000.0
    seed: int = 0

    def __post_init__(self) -> None:
        if self.block_tokens <= 0 or self.block_tokens % 256:
            raise ValueError(f"block_tokens={self.block_tokens}: must be a positive multiple of 256")
        bad = [k for k in self.kinds if k not in fw.RATIO]
        if bad:
            raise ValueError(f"layer kinds {bad}: allowed {sorted(fw.RATIO)}")

    def per_block(self, kind: str) -> int:
        """Compressed entries of a ``kind`` layer per engine block."""
        return self.block_tokens // fw.RATIO[kind]


def kv_bytes_per_block(cfg: ServeConfig) -> int:
    """HBM bytes one engine block occupies over all layers: raw rows, compressed rows (MODEL1 pages: 585 B
    a row with the page padding) and FP8 index keys (132 B)."""
    row = paged.RowPool.row_bytes_with_padding()
    total = 0
    for kind in cfg.kinds:
        total += cfg.block_tokens * row
        if kind != "SWA":
            total += cfg.per_block(kind) * row
        if kind == "CSA":
            total += cfg.per_block(kind) * formats.ROW_BYTES[INDEX_KEY_FMT]
    return int(math.ceil(total))


# ---- one step's rows ---------------------------------------------------------------------------------------


@dataclass
class StepRows:
    """The rows of one forward pass (device tensors unless noted): each sequence's new tokens in order,
    decodes and prefill chunks alike; graph padding rows have position -1."""

    n: int  # rows (tokens, plus graph padding)
    m: int  # GEMM rows (n padded for the kernels)
    pos: torch.Tensor  # [n] int64 absolute position, -1 = padding
    seq: torch.Tensor  # [n] int64 row of bt
    start: torch.Tensor  # [n] int64 tokens of the row's sequence in KV before the step
    end: torch.Tensor  # [n] int64 ... after the step
    slot: torch.Tensor  # [n] int64 compressor-state slot (the dummy slot for padding)
    tokens: torch.Tensor  # [n] int64
    bt: torch.Tensor  # [S, NB] int64 block tables
    out_rows: torch.Tensor  # [k] rows whose next token is sampled (each sequence's last row)
    n_keys: int  # CSA keys scored per row (host; >= every row's visible count)
    hca_width: int  # HCA entries per row (host)
    ctx_tokens: int  # tokens every row's keys fit in (host): the graph's context bucket, or the step's max


# ---- the model -----------------------------------------------------------------------------------------------


class LayerKv:
    """One layer's pools: raw rows, compressed rows, index keys (CSA) and compressor states."""

    def __init__(self, kind: str, cfg: ServeConfig, num_blocks: int, state_dtype, device):
        self.kind, self.ratio = kind, fw.RATIO[kind]
        self.raw = paged.RowPool(num_blocks * cfg.block_tokens, device)
        self.comp = self.keys = None
        self.state: dict[str, tuple[torch.Tensor, torch.Tensor]] = {}
        slots = cfg.state_slots + 1  # + the dummy slot of padding rows
        d = cfg.dims
        if kind != "SWA":
            self.comp = paged.RowPool(num_blocks * cfg.per_block(kind), device)
            self.state["main"] = self._state(slots, d.head_dim, state_dtype, device)
        if kind == "CSA":
            n_keys = num_blocks * cfg.per_block(kind) + 1  # + a scratch row
            self.keys = torch.zeros(
                n_keys, formats.ROW_BYTES[INDEX_KEY_FMT], dtype=torch.uint8, device=device
            )
            self.state["index"] = self._state(slots, d.index_dim, state_dtype, device)

    @staticmethod
    def _state(slots, width, dtype, device):
        return (
            torch.zeros(slots, width, dtype=dtype, device=device),
            torch.full((slots, width), float("-inf"), dtype=dtype, device=device),
        )


class ServedModel:
    """The reduced model on one device with its paged KV (``num_blocks`` engine blocks)."""

    def __init__(self, cfg: ServeConfig, kernels, num_blocks: int, device, *, graphs: bool = False):
        self.cfg, self.k, self.device = cfg, kernels, torch.device(device)
        self.num_blocks = num_blocks
        self.block_tokens = cfg.block_tokens
        self.graphs = graphs
        self.last_graph_bucket: int | None = None
        d = cfg.dims
        g = torch.Generator(device=self.device)
        g.manual_seed(cfg.seed)
        self.weights = []
        self.sinks = []
        for i in range(len(cfg.kinds)):
            gl = torch.Generator(device=self.device)
            gl.manual_seed(cfg.seed + 101 * i)
            self.weights.append(self._layer_weights(i, gl))
            self.sinks.append(torch.randn(d.heads, generator=gl, device=self.device))
        self.mhc_params = mhc_tk.make_params(d.hidden, device=self.device, generator=g)
        scale = 1 / math.sqrt(d.hidden)
        self.embed = (torch.randn(cfg.vocab, d.hidden, generator=g, device=self.device)).to(torch.bfloat16)
        self.head = (torch.randn(cfg.vocab, d.hidden, generator=g, device=self.device) * scale).to(
            torch.bfloat16
        )
        self.final_gamma = (1 + 0.1 * torch.randn(d.hidden, generator=g, device=self.device)).to(
            torch.bfloat16
        )
        half = d.rope_dim // 2
        self.inv_freq = cfg.rope_base ** (-torch.arange(half, device=self.device, dtype=torch.float64) / half)
        state_dtype = torch.float64 if kernels.act_dtype == torch.float64 else torch.float32
        self.kv = self._layer_kv(state_dtype)
        self.dummy_slot = cfg.state_slots
        self._slots: OrderedDict[int, int] = OrderedDict()  # seq_id -> slot, least recently used first
        self._mhc: OrderedDict[int, list] = OrderedDict()  # GEMM rows -> a pair of boundaries (eager)
        self._graphs: dict[tuple[int, int], _StepGraph] = {}
        self._graph_pool = None
        self.pre_captured = 0  # graphs captured by warm_up (before serving)
        self.pre_capture_s = 0.0
        self.captured_in_run = 0  # graphs captured by a step (its wall time includes the capture)
        self.last_step_captured = False

    model_name = SPEC  # the run directory's provenance names the served spec

    def _layer_weights(self, li: int, g: torch.Generator):
        """Layer ``li``'s weights drawn from ``g`` (forward.make_layer_weights: V4's kinds)."""
        return fw.make_layer_weights(self.cfg.kinds[li], self.cfg.dims, g, self.device)

    def _layer_kv(self, state_dtype) -> list:
        return [LayerKv(kind, self.cfg, self.num_blocks, state_dtype, self.device) for kind in self.cfg.kinds]

    def describe(self) -> dict:
        """The step function in the run's provenance: the model, its KV and graphs, the kernel packages."""
        from kernels_bench.production.run import production_provenance

        return {
            "spec": self.model_name,
            "layers": list(self.cfg.kinds),
            "routed_experts": self.cfg.dims.experts,
            "experts_per_token": self.cfg.dims.experts_per_token,
            "block_tokens": self.cfg.block_tokens,
            "num_blocks": self.num_blocks,
            "kv_bytes_per_block": self.kv_bytes_per_block,
            "kernels": self.k.name,
            "cuda_graphs": self.graphs,
            "graphs_captured": len(self._graphs),
            "graphs_pre_captured": self.pre_captured,
            "pre_capture_s": round(self.pre_capture_s, 2),
            "graphs_captured_in_run": self.captured_in_run,
            "row_buckets": list(ROW_BUCKETS),
            "context_bucket_tokens": CONTEXT_BUCKET_TOKENS,
            "provenance": production_provenance(None) if self.device.type == "cuda" else {},
        }

    # -- sizes --
    @property
    def kv_bytes_per_block(self) -> int:
        return kv_bytes_per_block(self.cfg)

    @staticmethod
    def blocks_that_fit(cfg: ServeConfig, kv_hbm_bytes: float) -> int:
        return int(kv_hbm_bytes // kv_bytes_per_block(cfg))

    def warm_up(self, context_tokens: int, max_rows: int) -> None:
        """Capture, before serving, the graph of every row bucket a step of up to ``max_rows`` rows can use
        (every bucket up to the first one >= ``max_rows``) for every context bucket up to
        ``context_tokens`` (largest first, so the shared pool is sized once); compilation and capture then
        stay out of the measured steps. A graph captured later (``step``) is counted as an in-run capture."""
        if not (self.graphs and context_tokens and self.device.type == "cuda"):
            return
        t0 = time.perf_counter()
        buckets = graph_row_buckets(max_rows)
        top = -(-context_tokens // CONTEXT_BUCKET_TOKENS) * CONTEXT_BUCKET_TOKENS
        for cb in range(top, 0, -CONTEXT_BUCKET_TOKENS):
            if cb // self.cfg.block_tokens > self.num_blocks:
                continue
            for b in sorted(buckets, reverse=True):
                if (b, cb) not in self._graphs:
                    self._graphs[(b, cb)] = _StepGraph(self, b, cb)
        torch.cuda.synchronize()
        self.pre_captured = len(self._graphs)
        self.pre_capture_s += time.perf_counter() - t0

    # -- the engine's step function --
    def __call__(self, plan) -> None:
        self.step(plan)
        if self.device.type == "cuda":
            torch.cuda.synchronize()

    def step(self, plan) -> torch.Tensor:
        """Run one StepPlan (decode + prefill works); returns the logits of each work's last row, in the
        plan's order (decode then prefill). Greedy sampling is their argmax; the engine reads nothing back."""
        works = list(plan.decode) + list(plan.prefill)
        self.last_step_captured = False
        if not works:
            return torch.empty(0, dtype=torch.int64)
        self._check(works)
        if self.graphs and self.device.type == "cuda":
            out = self._graph_step(works)
            if out is not None:
                return out
        self.last_graph_bucket = None
        return self.forward(self._rows(works))

    def _check(self, works) -> None:
        bt = self.cfg.block_tokens
        for w in works:
            need = -(-w.end_tokens // bt)
            if len(w.block_ids) < need:
                raise ValueError(
                    f"seq {w.seq_id}: {len(w.block_ids)} blocks for {w.end_tokens} tokens (need {need})"
                )
            if any(not 0 <= b < self.num_blocks for b in w.block_ids[:need]):
                raise ValueError(f"seq {w.seq_id}: block id outside 0..{self.num_blocks - 1}")

    def _slot(self, seq_id: int) -> int:
        if seq_id in self._slots:
            self._slots.move_to_end(seq_id)
            return self._slots[seq_id]
        if len(self._slots) < self.cfg.state_slots:
            slot = len(self._slots)
        else:  # recycle the least recently used sequence's state (finished sequences are never seen again)
            _, slot = self._slots.popitem(last=False)
        self._slots[seq_id] = slot
        return slot

    # -- rows of a step --
    def _rows(self, works, *, n_pad: int = 0, nb_pad: int = 0, seq_pad: int = 0) -> StepRows:
        """Host-side layout of a step: each work's rows in order (padded to ``n_pad`` rows, ``seq_pad``
        sequences and ``nb_pad`` blocks each for a graph)."""
        cfg = self.cfg
        n = n_pad or sum(w.new_tokens for w in works)
        pos = np.full(n, -1, dtype=np.int64)
        seq = np.zeros(n, dtype=np.int64)
        start = np.zeros(n, dtype=np.int64)
        end = np.zeros(n, dtype=np.int64)
        slot = np.full(n, self.dummy_slot, dtype=np.int64)
        tokens = np.zeros(n, dtype=np.int64)
        nb = nb_pad or max(-(-w.end_tokens // cfg.block_tokens) for w in works)
        bt = np.zeros((seq_pad or len(works), nb), dtype=np.int64)
        out_rows = np.zeros(seq_pad or len(works), dtype=np.int64)
        r = 0
        for i, w in enumerate(works):
            t = w.new_tokens
            k = -(-w.end_tokens // cfg.block_tokens)
            bt[i, :k] = w.block_ids[:k]
            pos[r : r + t] = np.arange(w.context_tokens, w.end_tokens)
            seq[r : r + t] = i
            start[r : r + t] = w.context_tokens
            end[r : r + t] = w.end_tokens
            slot[r : r + t] = self._slot(w.seq_id)
            tokens[r : r + t] = np.asarray(w.token_ids, dtype=np.int64) % cfg.vocab
            r += t
            out_rows[i] = r - 1
        ctx_max = nb * cfg.block_tokens
        n_keys = ctx_max // 4 if n_pad else max(1, int(((pos + 1) // 4).max()))
        hca = ctx_max // 128 if n_pad else int(((pos + 1) // 128).max())
        ctx_tokens = ctx_max if n_pad else max(1, int((pos + 1).max()))
        al = self.k.ext_align
        hca_width = max(al, -(-hca // al) * al)
        # one host-to-device copy for every index array of the step (each separate copy costs a sync)
        parts = [pos, seq, start, end, slot, tokens, out_rows, bt.ravel()]
        flat = torch.from_numpy(np.concatenate(parts))
        if self.device.type == "cuda":
            flat = flat.pin_memory().to(self.device, non_blocking=True)
        views, o = [], 0
        for a in parts:
            views.append(flat[o : o + a.shape[0]])
            o += a.shape[0]
        return StepRows(
            n=n,
            m=-(-n // self.k.pad_rows) * self.k.pad_rows,
            pos=views[0],
            seq=views[1],
            start=views[2],
            end=views[3],
            slot=views[4],
            tokens=views[5],
            bt=views[7].view(bt.shape),
            out_rows=views[6],
            n_keys=n_keys,
            hca_width=hca_width,
            ctx_tokens=ctx_tokens,
        )

    # -- the forward pass --
    def _boundaries(self, m: int) -> list:
        """Two mHC boundaries for m rows, used alternately (one's output is the other's input)."""
        if m not in self._mhc:
            self._mhc[m] = [
                self.k.make_mhc(m, self.cfg.dims.hidden, self.mhc_params, self.device) for _ in (0, 1)
            ]
            while len(self._mhc) > 8:
                self._mhc.popitem(last=False)
        self._mhc.move_to_end(m)
        return self._mhc[m]

    def _rope_tables(self, pos: torch.Tensor, m: int):
        p = torch.zeros(m, dtype=torch.float64, device=self.device)
        p[: pos.shape[0]] = pos.clamp_min(0).double()
        ang = p[:, None] * self.inv_freq[None, :]
        dt = self.k.act_dtype if self.k.act_dtype == torch.float64 else torch.float32
        return ang.cos().to(dt), ang.sin().to(dt)

    def forward(self, st: StepRows, boundaries=None) -> torch.Tensor:
        """One pass over the step's rows; returns the logits of each ``out_rows`` row."""
        d, k, n, m = self.cfg.dims, self.k, st.n, st.m
        act = k.act_dtype
        bnd = boundaries or self._boundaries(m)
        tok = torch.zeros(m, dtype=torch.int64, device=self.device)
        tok[:n] = st.tokens
        x0 = self.embed[tok].to(act)
        X = x0[:, None, :].expand(m, mhc_tk.STREAMS, d.hidden).contiguous()
        y = torch.zeros(m, d.hidden, dtype=act, device=self.device)
        post = torch.zeros(m, mhc_tk.STREAMS, dtype=k.acc_dtype, device=self.device)
        comb = torch.eye(mhc_tk.STREAMS, dtype=k.acc_dtype, device=self.device).expand(m, -1, -1).contiguous()
        cos, sin = self._rope_tables(st.pos, m)
        valid = (st.pos >= 0)[:, None, None]
        b = 0
        for li, kind in enumerate(self.cfg.kinds):
            X, x, post, comb = bnd[b % 2](X, y, post, comb)
            b += 1
            y = self._attention_block(li, kind, st, x, cos, sin, valid)
            X, x, post, comb = bnd[b % 2](X, y, post, comb)
            b += 1
            y = self._moe_block(li, x, n)
        _, h, _, _ = bnd[b % 2](X, y, post, comb)
        h = torch.nn.functional.rms_norm(h, (d.hidden,), self.final_gamma.to(h.dtype), mhc_tk.RMS_EPS)
        rows = h[st.out_rows]
        return rows @ self.head.to(rows.dtype).t()

    def _attention_block(self, li, kind, st: StepRows, x, cos, sin, valid) -> torch.Tensor:
        d, k, n, m = self.cfg.dims, self.k, st.n, st.m
        w, kv_l = self.weights[li], self.kv[li]
        xq = k.quant(x)
        qa = k.gemm(xq, w.w["q_a"])
        qa = torch.nn.functional.rms_norm(qa, (d.q_lora,), w.norm_w["q"].to(qa.dtype), 1e-6)
        qa_q = k.quant(qa)
        q = k.gemm(qa_q, w.w["q_b"]).view(m, d.heads, d.head_dim)
        fw.rope_(q, cos, sin, d.rope_dim)
        kv = k.gemm(xq, w.w["kv"])
        kv = torch.nn.functional.rms_norm(kv, (d.head_dim,), w.norm_w["kv"].to(kv.dtype), 1e-6)
        fw.rope_(kv, cos, sin, d.rope_dim)
        bt_tokens = self.cfg.block_tokens
        raw_dest = torch.where(
            st.pos >= 0,
            paged_rows(st.bt, st.seq, st.pos, bt_tokens),
            torch.full_like(st.pos, kv_l.raw.scratch_row),
        )
        kv_l.raw.write(raw_dest, k.quant_rows("fp8_584", kv[:n]))
        comp, ext_rows = self._global_entries(li, kind, st, xq, x, qa_q)
        # window: positions pos-W+1 .. pos
        W = d.window
        win_pos = st.pos[:, None] - torch.arange(W - 1, -1, -1, device=self.device)[None, :]
        win = torch.where(win_pos >= 0, paged_rows(st.bt, st.seq, win_pos, bt_tokens), -1)
        o = self._attend(li, q[:n], win, comp, ext_rows)
        o = torch.where(valid, o, torch.zeros((), dtype=o.dtype, device=o.device))
        om = torch.zeros(m, d.heads, d.head_dim, dtype=q.dtype, device=self.device)
        om[:n] = o
        fw.rope_(om, cos, -sin, d.rope_dim)  # inverse RoPE on the output (V4)
        g = d.o_groups
        oa = torch.bmm(om.view(m, g, -1).transpose(0, 1), w.wo_a.to(om.dtype)).transpose(0, 1).reshape(m, -1)
        return k.gemm(k.quant(oa), w.w["wo_b"])

    def _global_entries(self, li, kind, st: StepRows, xq, x, qa_q):
        """(the compressed pool layer ``li`` attends to, each row's entries in it as absolute pool rows
        [n, k], -1 = none), after writing this step's entries; (None, None) for an SWA-only layer. V4: CSA
        selects its top-512 of the visible entries, HCA attends every one."""
        if kind == "SWA":
            return None, None
        self._compress(li, kind, st, xq, x)
        if kind == "CSA":
            ext = self._select_csa(li, st, qa_q, x)
        else:
            j = torch.arange(st.hca_width, device=self.device)[None, :].expand(st.n, -1)
            vis = (st.pos + 1) // fw.RATIO["HCA"]
            ext = torch.where(j < vis[:, None], j, -1)
        rows = torch.where(ext >= 0, paged_rows(st.bt, st.seq, ext, self.cfg.per_block(kind)), -1)
        return self.kv[li].comp, rows

    def _compress(self, li, kind, st: StepRows, xq, x) -> None:
        """Pool this step's tokens into compressed rows (groups that close) and states (groups left open)."""
        d, k = self.cfg.dims, self.k
        w, kv_l, ratio = self.weights[li], self.kv[li], fw.RATIO[kind]
        c = k.gemm(xq, w.w["compressor"])
        half = c.shape[1] // 2
        val, closed = self._pool(
            kv_l.state["main"], st, ratio, c[:, : d.head_dim], c[:, half : half + d.head_dim]
        )
        ent = st.pos // ratio
        # the entry: norm, RoPE at its group's first position, quantise-on-write
        v = torch.nn.functional.rms_norm(
            val.to(k.act_dtype), (d.head_dim,), w.norm_w["kv"].to(k.act_dtype), 1e-6
        )
        ang = (ent * ratio).clamp_min(0).double()[:, None] * self.inv_freq[None, :]
        dt = torch.float64 if k.act_dtype == torch.float64 else torch.float32
        fw.rope_(v, ang.cos().to(dt), ang.sin().to(dt), d.rope_dim)
        per = self.cfg.per_block(kind)
        dest = torch.where(closed, paged_rows(st.bt, st.seq, ent, per), kv_l.comp.scratch_row)
        kv_l.comp.write(dest, k.quant_rows("fp8_584", v))
        if kind == "CSA":
            ic = k.gemm(xq, w.w["index_compressor"])
            ih = ic.shape[1] // 2
            ival, _ = self._pool(
                kv_l.state["index"], st, ratio, ic[:, : d.index_dim], ic[:, ih : ih + d.index_dim]
            )
            kdest = torch.where(closed, paged_rows(st.bt, st.seq, ent, per), kv_l.keys.shape[0] - 1)
            kv_l.keys[kdest] = k.quant_rows(INDEX_KEY_FMT, ival.to(k.act_dtype))

    def _pool(self, state, st: StepRows, ratio: int, kv: torch.Tensor, score: torch.Tensor):
        """Per-channel softmax pool of each row's group over this step (and the sequence's state when the
        group began before the step), with static shapes: every row's group is reduced at its first row in
        the step (scatter), so the row that closes a group, or ends its sequence's work, reads the group's
        pool so far. Closed groups give entries; the group left open at a sequence's last row goes back to
        the state. Returns (pooled values [n, D], closes a group [n])."""
        s_val, s_lse = state
        n, dev = st.n, self.device
        pos, start, slot = st.pos, st.start, st.slot
        ok = pos >= 0
        grp0 = (pos // ratio) * ratio
        i = torch.arange(n, device=dev)
        lead = torch.where(ok, i - (pos - torch.maximum(grp0, start)), i)
        acc = s_val.dtype
        ninf = float("-inf")
        sc = score[:n].to(acc).masked_fill(~ok[:, None], ninf)
        v = kv[:n].to(acc)
        idx = lead[:, None].expand_as(sc)
        use_state = (grp0 < start) & ok
        st_l = torch.where(use_state[:, None], s_lse[slot], ninf)
        st_v = torch.where(use_state[:, None], s_val[slot], 0.0)
        mx = torch.maximum(torch.full_like(sc, ninf).scatter_reduce(0, idx, sc, "amax"), st_l)
        mx = mx.clamp_min(-1e30)  # (rows with nothing: all -inf)
        wgt = torch.exp(sc - mx[lead])
        ws = torch.exp(st_l - mx)  # the state enters at the group's first row (its own row's state)
        den = torch.zeros_like(sc).scatter_add(0, idx, wgt) + ws
        num = torch.zeros_like(sc).scatter_add(0, idx, wgt * v) + ws * st_v
        den_r = den[lead].clamp_min(1e-30)
        val = num[lead] / den_r
        lse = mx[lead] + torch.log(den_r)
        closed = (pos % ratio == ratio - 1) & ok
        open_end = (pos == st.end - 1) & ok & ~closed
        sdest = torch.where(open_end, slot, self.dummy_slot)
        s_val[sdest] = val
        s_lse[sdest] = lse
        return val, closed

    def _select_csa(self, li, st: StepRows, qa_q, x) -> torch.Tensor:
        """Lightning indexer over each row's visible keys ((pos+1)//4, through its block table), top-512:
        [n, topk] entry numbers (-1 = none). Every row alike, decode or prefill (static shapes)."""
        from kernels_bench.serve.kernels import masked_topk

        d = self.cfg.dims
        vis = (st.pos + 1) // fw.RATIO["CSA"]
        sc = self._index_scores(li, self.kv[li].keys, st, qa_q, x, vis, st.n_keys, self.cfg.per_block("CSA"))
        return masked_topk(sc, d.topk)

    def _index_scores(self, li, keys, st: StepRows, qa_q, x, vis, n_keys: int, per: int) -> torch.Tensor:
        """Layer ``li``'s lightning-indexer queries scored against ``n_keys`` index keys of each row's
        sequence in the key pool ``keys`` (``per`` keys per engine block, through the block table): [n,
        n_keys] scores, -inf for keys j >= ``vis`` (the row's visible count). Every row alike, decode or
        prefill (static shapes)."""
        d, k, n = self.cfg.dims, self.k, st.n
        w = self.weights[li]
        iq = k.gemm(qa_q, w.w["index_q"]).view(st.m, d.index_heads, d.index_dim)[:n]
        iw = (x[:n] @ w.w_index_weights.to(x.dtype)).to(k.acc_dtype) / math.sqrt(d.index_heads * d.index_dim)
        if not hasattr(k, "index_logits_paged"):  # the reference: gather every row's keys
            j = torch.arange(n_keys, device=self.device)[None, :].expand(n, -1)
            rows = torch.where(j < vis[:, None], paged_rows(st.bt, st.seq, j, per), 0)
            return k.index_logits(iq, iw, keys, rows, vis)
        pp = per // 8  # the kernel's 8-key pages per engine block
        pages = (st.bt[:, :, None] * pp + torch.arange(pp, device=self.device)).flatten(1)
        sc = k.index_logits_paged(iq, iw, keys, pages[st.seq].int().contiguous(), n_keys)
        j = torch.arange(sc.shape[1], device=self.device)[None, :]
        return sc.masked_fill(j >= vis[:, None], float("-inf"))

    def _attend(self, li, q, win, comp, ext_rows) -> torch.Tensor:
        """Every row attends to its window rows of layer ``li`` and its entries ``ext_rows`` of the
        compressed pool ``comp`` (None: none) straight from the pools (FlashMLA sparse decode on the GPU,
        one query per row; the float64 reference on the CPU)."""
        k, kv_l, sink = self.k, self.kv[li], self.sinks[li]
        if not hasattr(k, "attend_decode"):
            return k.attend(q, kv_l.raw, win, comp, ext_rows, sink)
        return k.attend_decode(q, kv_l.raw, win, comp, ext_rows, sink)

    def _moe_block(self, li, x, n) -> torch.Tensor:
        d, k = self.cfg.dims, self.k
        w = self.weights[li]
        tok, wsorted, counts, xs = fw.route_tokens(x[:n], w.w_router, d.experts, d.experts_per_token)
        gu = k.grouped(xs, w.gate_up, counts)
        dn = k.grouped(fw.swiglu_(gu, d.inter), w.down, counts)
        su = k.gemm(k.quant(x), w.w["shared_gate_up"])
        sh = k.gemm(k.quant(fw.swiglu_(su, d.shared_inter)), w.w["shared_down"])
        acc = k.acc_dtype
        y = sh.to(acc)
        y[:n].index_add_(0, tok, dn.to(acc) * wsorted.to(acc)[:, None])
        return y.to(k.act_dtype)

    # -- CUDA graphs --
    @staticmethod
    def graph_key(works) -> tuple[int, int] | None:
        """(row bucket, context bucket) of the graph a step of ``works`` replays; None: it runs eagerly."""
        n = sum(w.new_tokens for w in works)
        bucket = next((b for b in ROW_BUCKETS if b >= n), None)
        ctx = max(w.end_tokens for w in works)
        cb = -(-ctx // CONTEXT_BUCKET_TOKENS) * CONTEXT_BUCKET_TOKENS
        if bucket is None or len(works) > min(bucket, MAX_SEQS_PER_STEP):
            return None
        return bucket, cb

    def _graph_step(self, works) -> torch.Tensor | None:
        """Replay the graph of the step's (row bucket, context bucket), capturing it on first use; None when
        the step is larger than every bucket (it then runs eagerly)."""
        key = self.graph_key(works)
        if key is None:
            return None
        bucket, cb = key
        if key not in self._graphs:
            self._graphs[key] = _StepGraph(self, bucket, cb)
            self.captured_in_run += 1
            self.last_step_captured = True
        self.last_graph_bucket = bucket
        g = self._graphs[key]
        return g.run(self._rows(works, n_pad=bucket, nb_pad=cb // self.cfg.block_tokens, seq_pad=g.seqs))[
            : len(works)
        ]


class _StepGraph:
    """The forward pass of ``bucket`` rows (any mix of decode and prefill rows, up to ``seqs`` sequences)
    for contexts up to ``ctx_tokens``, captured once. Graphs share one memory pool (they replay one at a
    time), so a graph costs its logits buffer, not its activations."""

    def __init__(self, model: ServedModel, bucket: int, ctx_tokens: int):
        self.seqs = min(bucket, MAX_SEQS_PER_STEP)
        self.st = _static_rows(model, bucket, ctx_tokens // model.cfg.block_tokens, self.seqs)
        self.bnd = [
            model.k.make_mhc(self.st.m, model.cfg.dims.hidden, model.mhc_params, model.device) for _ in (0, 1)
        ]
        stream = torch.cuda.Stream()
        stream.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(stream):
            for _ in range(2):  # warm-up: compile, FlashMLA scheduler metadata, cuBLASLt handles
                model.forward(self.st, self.bnd)
        torch.cuda.current_stream().wait_stream(stream)
        self.graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(self.graph, pool=model._graph_pool):
            self.out = model.forward(self.st, self.bnd)
        if model._graph_pool is None:
            model._graph_pool = self.graph.pool()

    def run(self, rows: StepRows) -> torch.Tensor:
        st = self.st
        for name in ("pos", "seq", "start", "end", "slot", "tokens", "bt", "out_rows"):
            getattr(st, name).copy_(getattr(rows, name))
        self.graph.replay()
        return self.out


def _static_rows(model: ServedModel, bucket: int, nb: int, seqs: int) -> StepRows:
    """A graph's static inputs: padding rows only (position -1), ``seqs`` block-table rows of ``nb``."""
    dev, n = model.device, bucket
    z = torch.zeros(n, dtype=torch.int64, device=dev)
    pad = model.k.pad_rows
    ctx = nb * model.cfg.block_tokens
    al = model.k.ext_align
    return StepRows(
        n=n,
        m=-(-n // pad) * pad,
        pos=torch.full((n,), -1, dtype=torch.int64, device=dev),
        seq=z.clone(),
        start=z.clone(),
        end=z.clone(),
        slot=torch.full((n,), model.dummy_slot, dtype=torch.int64, device=dev),
        tokens=z.clone(),
        bt=torch.zeros(seqs, nb, dtype=torch.int64, device=dev),
        out_rows=torch.zeros(seqs, dtype=torch.int64, device=dev),
        n_keys=ctx // 4,
        hca_width=max(al, -(-(ctx // 128) // al) * al),
        ctx_tokens=ctx,
    )


def gpu_step_function(
    num_blocks: int | None = None,
    kv_gib: float = 40.0,
    graphs: bool = True,
    warm_context_tokens: int = 0,
    warm_rows: int = 0,
    seed: int = 0,
) -> ServedModel:
    """The engine's step function (``python3 -m kernels_bench.serve.run --step
    kernels_bench.serve.model:gpu_step_function``): the reduced model on CUDA with the production kernels,
    ``num_blocks`` engine blocks (default: as many as ``kv_gib`` GiB of HBM hold, ``kv_bytes_per_block``
    each), every step replayed from a CUDA graph; ``warm_context_tokens`` and ``warm_rows`` > 0 capture the
    graphs up to those sizes before the replay."""
    return build_on_gpu(
        ServedModel, ServeConfig(seed=seed), num_blocks, kv_gib, graphs, warm_context_tokens, warm_rows
    )


def build_on_gpu(
    model_cls: type[ServedModel],
    cfg: Any,  # ServeConfig, or model41.ServeConfig41 for the V4.1 mini
    num_blocks: int | None,
    kv_gib: float,
    graphs: bool,
    warm_context_tokens: int,
    warm_rows: int,
) -> ServedModel:
    """One served mini of class ``model_cls`` on CUDA (the step functions of both minis)."""
    from kernels_bench.serve.kernels import ServeGpu

    n = num_blocks or model_cls.blocks_that_fit(cfg, kv_gib * 2**30)
    model = model_cls(cfg, ServeGpu(), n, "cuda", graphs=graphs)
    model.warm_up(warm_context_tokens, warm_rows)
    return model
