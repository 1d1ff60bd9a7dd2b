"""A dense float64 reference of the served model for one sequence: no pages, no steps, no state.

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
    for li, kind in enumerate(cfg.kinds):
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
        comp = None
        ratio = fw.RATIO[kind]
        if kind != "SWA":
            c = k.gemm(xq, w.w["compressor"])
            h = c.shape[1] // 2
            ent = _pool_groups(c[:, : d.head_dim], c[:, h : h + d.head_dim], ratio)
            ent = torch.nn.functional.rms_norm(ent, (d.head_dim,), w.norm_w["kv"].double(), 1e-6)
            ea = (torch.arange(ent.shape[0], device=dev) * ratio).double()[:, None] * model.inv_freq[None, :]
            fw.rope_(ent, ea.cos(), ea.sin(), d.rope_dim)
            comp = _rt("fp8_584", ent)
        sel = None
        if kind == "CSA":
            ic = k.gemm(xq, w.w["index_compressor"])
            h = ic.shape[1] // 2
            keys = _rt("fp8_132", _pool_groups(ic[:, : d.index_dim], ic[:, h : h + d.index_dim], ratio))
            iq = k.gemm(qa_q, w.w["index_q"]).view(T, d.index_heads, d.index_dim)
            iqd = iq.float().clamp(-formats.E4M3_MAX, formats.E4M3_MAX).to(torch.float8_e4m3fn).double()
            iw = (x @ w.w_index_weights.double()) / math.sqrt(d.index_heads * d.index_dim)
            s = (torch.relu(torch.einsum("thd,nd->thn", iqd, keys)) * iw[:, :, None]).sum(dim=1)
            vis = (pos + 1) // ratio
            s = s.masked_fill(torch.arange(keys.shape[0], device=dev)[None, :] >= vis[:, None], float("-inf"))
            sel = masked_topk(s, d.topk) if keys.shape[0] else None
        o = torch.zeros(T, d.heads, d.head_dim, dtype=torch.float64, device=dev)
        for t in range(T):
            cols = [raw[max(0, t - d.window + 1) : t + 1]]
            if kind == "HCA":
                cols.append(comp[: (t + 1) // ratio])
            elif kind == "CSA" and sel is not None:
                j = sel[t][sel[t] >= 0]
                cols.append(comp[j])
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
