"""A dense float64 reference of the served models (V4 and V4.1 minis) for one sequence: no pages, no steps, no state.

It runs a whole sequence in one pass from the same weights and the same per-row primitives (the FP8 GEMMs,
mHC boundary and MoE of ``ServeRef``), but rebuilds the serving data flow directly from the definition:
every token's KV row, every compressor group pooled over its ``ratio`` tokens at once, each position's
window, visible index keys, top-k and HCA entries listed explicitly. ``ServedModel`` (paged KV shared by
sequences, chunked prefill, decode, compressor state across steps, prefix reuse) must give the same logits.
"""

from __future__ import annotations

import math

import torch

from kernels_bench import formats
from kernels_bench.production import forward as fw
from kernels_bench.production import mhc_tk
from kernels_bench.serve.kernels import SM_SCALE, masked_topk


def _rt(fmt: str, x: torch.Tensor) -> torch.Tensor:
    """Quantise then dequantise rows (what a pool stores and a kernel reads), float64."""
    return formats.dequant_rows(fmt, formats.quant_rows(fmt, x.float())).double()


def _pool_groups(kv: torch.Tensor, score: torch.Tensor, ratio: int) -> torch.Tensor:
    """Per-channel softmax pool of each complete group of ``ratio`` rows: [T, D] -> [T // ratio, D]."""
    g = kv.shape[0] // ratio
    v = kv[: g * ratio].double().view(g, ratio, -1)
    s = score[: g * ratio].double().view(g, ratio, -1)
    return (torch.softmax(s, dim=1) * v).sum(dim=1)


def dense_logits(model, token_ids: list[int]) -> torch.Tensor:
    """[T, vocab] float64 logits of every position of one sequence (``model``: a ``ServedModel`` on
    ``ServeRef`` kernels, whose weights are used)."""
    return _dense(model, token_ids, _v4_entries)


def _index_scores(model, li, x, qa_q, keys: torch.Tensor, ratio: int) -> torch.Tensor:
    """[T, N] layer ``li``'s indexer scores of the keys (float64, dequantised) over each position's visible
    ones ((t+1)//ratio), -inf elsewhere."""
    k, d = model.k, model.cfg.dims
    w = model.weights[li]
    T = x.shape[0]
    iq = k.gemm(qa_q, w.w["index_q"]).view(T, d.index_heads, d.index_dim)
    iqd = iq.float().clamp(-formats.E4M3_MAX, formats.E4M3_MAX).to(torch.float8_e4m3fn).double()
    iw = (x @ w.w_index_weights.double()) / math.sqrt(d.index_heads * d.index_dim)
    s = (torch.relu(torch.einsum("thd,nd->thn", iqd, keys)) * iw[:, :, None]).sum(dim=1)
    vis = (torch.arange(T, device=x.device) + 1) // ratio
    return s.masked_fill(torch.arange(keys.shape[0], device=x.device)[None, :] >= vis[:, None], float("-inf"))


def _entries_rope(model, ent: torch.Tensor, ratio: int) -> torch.Tensor:
    d = model.cfg.dims
    ea = (torch.arange(ent.shape[0], device=ent.device) * ratio).double()[:, None] * model.inv_freq[None, :]
    fw.rope_(ent, ea.cos(), ea.sin(), d.rope_dim)
    return _rt("fp8_584", ent)


def _v4_entries(model, li, xq, x, qa_q, passes):
    """V4's layer ``li``: (its compressed entries [E, 512], each position's entry numbers [T, k], -1 none)."""
    k, d = model.k, model.cfg.dims
    kind, w = model.cfg.kinds[li], model.weights[li]
    T = x.shape[0]
    if kind == "SWA":
        return None, None
    ratio = fw.RATIO[kind]
    c = k.gemm(xq, w.w["compressor"])
    h = c.shape[1] // 2
    ent = _pool_groups(c[:, : d.head_dim], c[:, h : h + d.head_dim], ratio)
    ent = torch.nn.functional.rms_norm(ent, (d.head_dim,), w.norm_w["kv"].double(), 1e-6)
    comp = _entries_rope(model, ent, ratio)
    pos = torch.arange(T, device=x.device)
    if kind == "HCA":
        j = torch.arange(comp.shape[0], device=x.device)[None, :].expand(T, -1)
        return comp, torch.where(j < ((pos + 1) // ratio)[:, None], j, -1)
    ic = k.gemm(xq, w.w["index_compressor"])
    h = ic.shape[1] // 2
    keys = _rt("fp8_132", _pool_groups(ic[:, : d.index_dim], ic[:, h : h + d.index_dim], ratio))
    if not keys.shape[0]:
        return comp, torch.full((T, 0), -1, dtype=torch.int64, device=x.device)
    return comp, masked_topk(_index_scores(model, li, x, qa_q, keys, ratio), d.topk)


def _v41_entries(model, li, xq, x, qa_q, passes):
    """V4.1's layer ``li`` (kernels_bench.serve.model41): an owner's entries and keys from its definition
    (pool of 2 or projection, norm, ``wk`` of the pre-RoPE latent), Full / Reindex top-512 (Reindex inside
    the candidate source's blocks), Reuse its source's selection; ``passes`` keeps them across layers."""
    from kernels_bench.serve.model41 import candidate_mask

    k, cfg = model.k, model.cfg
    d, lay, w = cfg.dims, cfg.layers[li], model.weights[li]
    if lay.mode == "swa":
        return None, None
    if lay.mode == "full":
        c = k.gemm(xq, w.w["compressor"])
        if lay.ratio > 1:
            ent = _pool_groups(c[:, : d.head_dim], c[:, d.head_dim : 2 * d.head_dim], lay.ratio)
        else:
            ent = c[:, : d.head_dim].double()
        lat = torch.nn.functional.rms_norm(ent, (d.head_dim,), w.norm_w["kv"].double(), 1e-6)
        passes[("keys", li)] = _rt("fp8_132", lat @ model.wk[li].double())
        passes[("comp", li)] = _entries_rope(model, lat.clone(), lay.ratio)
    if lay.mode == "reuse":
        sel = passes[("sel", lay.selection_source)]
    else:
        keys = passes[("keys", lay.kv_source)]
        s = _index_scores(model, li, x, qa_q, keys, lay.ratio)
        vis = (torch.arange(x.shape[0], device=x.device) + 1) // lay.ratio
        if lay.mode == "full" and lay.ratio == 1:
            passes[("cand", li)] = candidate_mask(s, vis, cfg.candidate_blocks, cfg.candidate_block_keys)
        cand = passes.get(("cand", lay.kv_source)) if lay.mode == "reindex" else None
        if cand is not None:
            s = s.masked_fill(~cand, float("-inf"))
        sel = masked_topk(s, d.topk)
        passes[("sel", li)] = sel
    return passes[("comp", lay.kv_source)], sel


def dense_logits41(model, token_ids: list[int]) -> torch.Tensor:
    """``dense_logits`` of the reduced V4.1 (a ``ServedModel41`` on ``ServeRef`` kernels)."""
    return _dense(model, token_ids, _v41_entries)


def _dense(model, token_ids: list[int], entries) -> torch.Tensor:
    """The one-pass stack; ``entries(model, li, xq, x, qa_q, passes)`` gives a layer's compressed entries
    and each position's entry numbers (None, None: window only)."""
    k, cfg = model.k, model.cfg
    d = cfg.dims
    T = len(token_ids)
    dev = model.device
    pos = torch.arange(T, device=dev)
    ang = pos.double()[:, None] * model.inv_freq[None, :]
    cos, sin = ang.cos(), ang.sin()
    x0 = model.embed[torch.tensor(token_ids, device=dev) % cfg.vocab].double()
    X = x0[:, None, :].expand(T, mhc_tk.STREAMS, d.hidden).contiguous()
    y = torch.zeros(T, d.hidden, dtype=torch.float64, device=dev)
    post = torch.zeros(T, mhc_tk.STREAMS, dtype=torch.float64, device=dev)
    comb = torch.eye(mhc_tk.STREAMS, dtype=torch.float64, device=dev).expand(T, -1, -1).contiguous()
    bnd = k.make_mhc(T, d.hidden, model.mhc_params, dev)
    passes: dict = {}
    for li in range(len(cfg.kinds)):
        w, sink = model.weights[li], model.sinks[li]
        X, x, post, comb = bnd(X, y, post, comb)
        xq = k.quant(x)
        qa = k.gemm(xq, w.w["q_a"])
        qa = torch.nn.functional.rms_norm(qa, (d.q_lora,), w.norm_w["q"].double(), 1e-6)
        qa_q = k.quant(qa)
        q = k.gemm(qa_q, w.w["q_b"]).view(T, d.heads, d.head_dim)
        fw.rope_(q, cos, sin, d.rope_dim)
        kv = k.gemm(xq, w.w["kv"])
        kv = torch.nn.functional.rms_norm(kv, (d.head_dim,), w.norm_w["kv"].double(), 1e-6)
        fw.rope_(kv, cos, sin, d.rope_dim)
        raw = _rt("fp8_584", kv)  # [T, 512]
        comp, sel = entries(model, li, xq, x, qa_q, passes)
        o = torch.zeros(T, d.heads, d.head_dim, dtype=torch.float64, device=dev)
        for t in range(T):
            cols = [raw[max(0, t - d.window + 1) : t + 1]]
            if sel is not None:
                cols.append(comp[sel[t][sel[t] >= 0]])
            kvt = torch.cat(cols, dim=0)
            sc = torch.einsum("hd,nd->hn", q[t].double(), kvt) * SM_SCALE
            p = torch.softmax(torch.cat([sc, sink.double()[:, None]], dim=1), dim=1)[:, :-1]
            o[t] = p @ kvt
        fw.rope_(o, cos, -sin, d.rope_dim)
        g = d.o_groups
        oa = torch.bmm(o.view(T, g, -1).transpose(0, 1), w.wo_a.double()).transpose(0, 1).reshape(T, -1)
        y = k.gemm(k.quant(oa), w.w["wo_b"])
        X, x, post, comb = bnd(X, y, post, comb)
        y = model._moe_block(li, x, T)
    _, hid, _, _ = bnd(X, y, post, comb)
    hid = torch.nn.functional.rms_norm(hid, (d.hidden,), model.final_gamma.double(), mhc_tk.RMS_EPS)
    return hid @ model.head.double().t()
