"""A reduced DeepSeek-V4.1-Flash served for real: CSA2's Full, Reuse and Reindex layers on the V4 mini's engine.

Issue 14 item 1, V4.1 (``sim/model/specs/deepseek-v4.1-flash-mini.yaml``: its header gives the layer pattern
and every difference from the full model). Six layers, V4.1's shapes (hidden 5120, q_lora 1280, indexer 32
x 128, experts of intermediate 2304, 48 routed experts top-6 + 1 shared) and CSA2's modes (model.md §3,
§4.2):

* **Full** (an owner): its own compressor (ratio 2: per-channel softmax pool of 2 tokens, no overlap;
  ratio 1: a plain projection), one latent per group, RMSNorm'd; the index key is ``wk`` (512 -> 128) of
  the pre-RoPE latent, the KV entry the latent with RoPE at its group's first position; its own indexer
  queries score the visible keys and keep the top 512. The ratio-1 Full layer is also the candidate source:
  the blocks of 8 keys with the largest block maximum, ``candidate_blocks`` of them (2,048), the newest
  always kept (model.md §3 "Hierarchical indexer").
* **Reuse**: its own queries and window KV, the owner's compressed KV and the selection of its
  ``selection_source`` (no indexer, no compressor).
* **Reindex**: its own indexer queries scored against the owner's index keys, restricted to the owner's
  candidates. As on SM90 engines, it scores every key and masks the non-candidates (kernels.md §3.1, "Hopper
  gap"): its cost is the Full layer's scoring.

Everything else is ``kernels_bench.serve.model``'s ``ServedModel`` (paged FP8-584 pools in FlashMLA's MODEL1
layout, FP8 index keys, mixed steps, compressor state across steps, CUDA graphs per row and context bucket):
only the layers' weights, pools and global entries differ. Engine blocks hold, per layer, the raw (window)
rows of every token; per owner, ``block_tokens / ratio`` compressed rows and index keys.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Literal

import torch

from kernels_bench import formats
from kernels_bench.production import forward as fw
from kernels_bench.serve import model as sm
from kernels_bench.serve import paged
from kernels_bench.serve.kernels import masked_topk
from kernels_bench.serve.paged import paged_rows

SPEC = "deepseek-v4.1-flash-mini"
Mode = Literal["swa", "full", "reuse", "reindex"]


@dataclass(frozen=True)
class Csa2Layer:
    """One layer: its compression ratio (0: SWA only), CSA2 mode, the layer whose compressed KV it reads
    (an owner reads its own) and the layer whose selection it uses (Full / Reindex: itself)."""

    ratio: int
    mode: Mode
    kv_source: int | None = None
    selection_source: int | None = None

    @property
    def label(self) -> str:
        return "SWA" if self.mode == "swa" else f"{self.mode}{self.ratio}"


# the spec's pattern: SWA | Full r2 | Reuse of 1 | Full r1 (candidate source) | Reindex in 3 | Reuse of 3 with 4's selection
LAYERS = (
    Csa2Layer(0, "swa"),
    Csa2Layer(2, "full", 1, 1),
    Csa2Layer(2, "reuse", 1, 1),
    Csa2Layer(1, "full", 3, 3),
    Csa2Layer(1, "reindex", 3, 4),
    Csa2Layer(1, "reuse", 3, 4),
)
DIMS = fw.Dims(  # model.md §3; 384 / 8 routed experts (one GPU of EP8, the V4 mini's reduction)
    hidden=5120, q_lora=1280, index_heads=32, experts=48, inter=2304, shared_inter=2304
)
COMPRESSOR_OUT = {2: 1024, 1: 512}  # pool2: wkv + wgate (5120 -> 512 each); projection: wkv (model.md §3)


@dataclass(frozen=True)
class ServeConfig41:
    dims: fw.Dims = field(default_factory=lambda: DIMS)
    layers: tuple[Csa2Layer, ...] = LAYERS
    vocab: int = 129280  # deepseek-v4.1-flash.yaml
    block_tokens: int = 256
    state_slots: int = 512
    rope_base: float = 10000.0
    seed: int = 0
    candidate_blocks: int = 2048  # model.md §3: the candidate source keeps 2,048 blocks of 8 keys
    candidate_block_keys: int = 8

    def __post_init__(self) -> None:
        if self.block_tokens <= 0 or self.block_tokens % 256:
            raise ValueError(f"block_tokens={self.block_tokens}: must be a positive multiple of 256")
        for i, lay in enumerate(self.layers):
            if lay.mode == "swa":
                continue
            src, sel = lay.kv_source, lay.selection_source
            owner = self.layers[src] if src is not None and 0 <= src <= i else None
            if owner is None or owner.mode != "full" or owner.ratio != lay.ratio or owner.kv_source != src:
                raise ValueError(
                    f"layer {i}: kv_source {src} is not a Full layer of ratio {lay.ratio} before it"
                )
            if lay.mode in ("full", "reindex") and sel != i:
                raise ValueError(f"layer {i}: a scoring layer uses its own selection")
            if lay.mode == "reuse" and not (sel is not None and sel < i and self.layers[sel].mode != "reuse"):
                raise ValueError(f"layer {i}: selection_source {sel} does not score before it")
            if lay.mode == "reindex" and owner.ratio != 1:
                raise ValueError(f"layer {i}: Reindex reads a ratio-1 candidate source")

    @property
    def kinds(self) -> tuple[str, ...]:
        return tuple(lay.label for lay in self.layers)

    def per_block(self, ratio: int) -> int:
        """Compressed entries (and index keys) of an owner of ``ratio`` per engine block."""
        return self.block_tokens // ratio


def kv_bytes_per_block(cfg: ServeConfig41) -> int:
    """HBM bytes one engine block occupies: raw rows in every layer, compressed rows (585 B with the page
    padding) and FP8 index keys (132 B) in each owner."""
    row = paged.RowPool.row_bytes_with_padding()
    total = len(cfg.layers) * cfg.block_tokens * row
    for lay in cfg.layers:
        if lay.mode == "full":
            total += cfg.per_block(lay.ratio) * (row + formats.ROW_BYTES[sm.INDEX_KEY_FMT])
    return int(math.ceil(total))


def candidate_mask(scores: torch.Tensor, visible: torch.Tensor, blocks: int, block_keys: int):
    """The hierarchical indexer's candidates (model.md §3): [n, N] scores (-inf = not visible) -> [n, N]
    bool, True for the keys of the ``blocks`` blocks of ``block_keys`` consecutive keys with the largest
    block maximum, the block of the newest visible key always kept; None when every block fits."""
    n, N = scores.shape
    nb = -(-N // block_keys)
    if nb <= blocks:
        return None
    s = torch.nn.functional.pad(scores, (0, nb * block_keys - N), value=float("-inf"))
    s = s.view(n, nb, block_keys).amax(dim=2)
    newest = ((visible - 1).clamp_min(0) // block_keys)[:, None]
    s = s.scatter(1, newest, float("inf"))
    top = torch.topk(s, blocks, dim=1, sorted=False).indices
    keep = torch.zeros(n, nb, dtype=torch.bool, device=scores.device).scatter_(1, top, True)
    return keep.repeat_interleave(block_keys, dim=1)[:, :N]


class LayerKv41:
    """One layer's pools: raw rows; an owner's compressed rows, index keys and (ratio 2) pooling state."""

    def __init__(self, lay: Csa2Layer, cfg: ServeConfig41, num_blocks: int, state_dtype, device):
        self.raw = paged.RowPool(num_blocks * cfg.block_tokens, device)
        self.comp = self.keys = None
        self.state = None
        if lay.mode == "full":
            per = cfg.per_block(lay.ratio)
            self.comp = paged.RowPool(num_blocks * per, device)
            self.keys = torch.zeros(
                num_blocks * per + 1, formats.ROW_BYTES[sm.INDEX_KEY_FMT], dtype=torch.uint8, device=device
            )  # + a scratch row
            if lay.ratio > 1:
                self.state = sm.LayerKv._state(cfg.state_slots + 1, cfg.dims.head_dim, state_dtype, device)


class ServedModel41(sm.ServedModel):
    """The reduced V4.1 on one device with its paged KV (``num_blocks`` engine blocks)."""

    model_name = SPEC

    def __init__(self, cfg: ServeConfig41, kernels, num_blocks: int, device, *, graphs: bool = False):
        self.wk: dict[int, torch.Tensor] = {}  # owner layer -> index-key projection [512, 128] (bf16)
        self._sel: dict[int, torch.Tensor] = {}  # this pass: scoring layer -> its selection [n, top-k]
        self._cand: dict[int, torch.Tensor | None] = {}  # this pass: candidate source -> its candidate mask
        super().__init__(cfg, kernels, num_blocks, device, graphs=graphs)

    def _layer_weights(self, li: int, g: torch.Generator):
        """V4's attention, MoE and indexer-head weights (forward.make_layer_weights of an SWA layer), plus
        what the layer's mode owns: compressor and ``wk`` (Full), indexer queries (Full, Reindex)."""
        d, lay = self.cfg.dims, self.cfg.layers[li]
        w = fw.make_layer_weights("SWA", d, g, self.device)

        def lin(n_out, n_in):
            return fw.quant_weight_blockwise(
                (torch.randn(n_out, n_in, generator=g, device=self.device) / math.sqrt(n_in)).to(
                    torch.bfloat16
                )
            )

        if lay.mode == "full":
            w.w["compressor"] = lin(COMPRESSOR_OUT[lay.ratio], d.hidden)
            wk = torch.randn(d.head_dim, d.index_dim, generator=g, device=self.device) / math.sqrt(d.head_dim)
            self.wk[li] = wk.to(torch.bfloat16)
        if lay.mode in ("full", "reindex"):
            w.w["index_q"] = lin(d.index_heads * d.index_dim, d.q_lora)
        return w

    def _layer_kv(self, state_dtype) -> list:
        return [
            LayerKv41(lay, self.cfg, self.num_blocks, state_dtype, self.device) for lay in self.cfg.layers
        ]

    @property
    def kv_bytes_per_block(self) -> int:
        return kv_bytes_per_block(self.cfg)

    @staticmethod
    def blocks_that_fit(cfg: ServeConfig41, kv_hbm_bytes: float) -> int:
        return int(kv_hbm_bytes // kv_bytes_per_block(cfg))

    def _global_entries(self, li, kind, st: sm.StepRows, xq, x, qa_q):
        """CSA2: a Full layer writes its entries and keys and selects; Reindex selects among its owner's
        candidates; Reuse takes its selection source's. Entries are read from the owner's pool."""
        lay = self.cfg.layers[li]
        if lay.mode == "swa":
            return None, None
        if lay.mode == "full":
            self._compress(li, st, xq)
        if lay.mode == "reuse":
            sel = self._sel[lay.selection_source]
        else:
            sel = self._select(li, lay, st, qa_q, x)
            self._sel[li] = sel
        per = self.cfg.per_block(lay.ratio)
        rows = torch.where(sel >= 0, paged_rows(st.bt, st.seq, sel, per), -1)
        return self.kv[lay.kv_source].comp, rows

    def _compress(self, li, st: sm.StepRows, xq) -> None:
        """This step's latents: ratio 2 pools each group of 2 (state across steps, ``ServedModel._pool``),
        ratio 1 projects every token; norm, index key ``wk`` of the pre-RoPE latent, RoPE, quantise-on-write."""
        d, k, n = self.cfg.dims, self.k, st.n
        lay, w, kv_l = self.cfg.layers[li], self.weights[li], self.kv[li]
        c = k.gemm(xq, w.w["compressor"])
        ok = st.pos >= 0
        if lay.ratio > 1:
            val, closed = self._pool(
                kv_l.state, st, lay.ratio, c[:, : d.head_dim], c[:, d.head_dim : 2 * d.head_dim]
            )
        else:
            val, closed = c[:n], ok
        lat = torch.nn.functional.rms_norm(
            val.to(k.act_dtype), (d.head_dim,), w.norm_w["kv"].to(k.act_dtype), 1e-6
        )
        key = lat @ self.wk[li].to(lat.dtype)
        ent = st.pos // lay.ratio
        per = self.cfg.per_block(lay.ratio)
        kdest = torch.where(closed, paged_rows(st.bt, st.seq, ent, per), kv_l.keys.shape[0] - 1)
        kv_l.keys[kdest] = k.quant_rows(sm.INDEX_KEY_FMT, key)
        v = lat.clone()
        ang = (ent * lay.ratio).clamp_min(0).double()[:, None] * self.inv_freq[None, :]
        dt = torch.float64 if k.act_dtype == torch.float64 else torch.float32
        fw.rope_(v, ang.cos().to(dt), ang.sin().to(dt), d.rope_dim)
        dest = torch.where(closed, paged_rows(st.bt, st.seq, ent, per), kv_l.comp.scratch_row)
        kv_l.comp.write(dest, k.quant_rows("fp8_584", v))

    def _select(self, li, lay: Csa2Layer, st: sm.StepRows, qa_q, x) -> torch.Tensor:
        """Top-512 of this layer's indexer scores over its owner's visible keys; the ratio-1 Full layer
        keeps its candidate mask, a Reindex layer scores only inside it."""
        cfg, src = self.cfg, lay.kv_source
        vis = (st.pos + 1) // lay.ratio
        sc = self._index_scores(
            li, self.kv[src].keys, st, qa_q, x, vis, st.ctx_tokens // lay.ratio, cfg.per_block(lay.ratio)
        )
        if lay.mode == "full" and lay.ratio == 1:
            self._cand[li] = candidate_mask(sc, vis, cfg.candidate_blocks, cfg.candidate_block_keys)
        elif lay.mode == "reindex" and self._cand[src] is not None:
            sc = sc.masked_fill(~self._cand[src], float("-inf"))
        return masked_topk(sc, cfg.dims.topk)


def gpu_step_function(
    num_blocks: int | None = None,
    kv_gib: float = 40.0,
    graphs: bool = True,
    warm_context_tokens: int = 0,
    warm_rows: int = 0,
    seed: int = 0,
) -> ServedModel41:
    """The engine's step function (``python3 -m kernels_bench.serve.run --step
    kernels_bench.serve.model41:gpu_step_function``), as ``model.gpu_step_function`` for the V4 mini."""
    return sm.build_on_gpu(
        ServedModel41, ServeConfig41(seed=seed), num_blocks, kv_gib, graphs, warm_context_tokens, warm_rows
    )
