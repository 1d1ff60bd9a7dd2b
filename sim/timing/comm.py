"""Collective communication time inside one serving instance (pure functions).

Ring all-reduce over p ranks moves 2 (p - 1) / p of the buffer through each rank's link; a ring
all-gather moves (p - 1) / p of the gathered buffer; an all-to-all over p ranks sends (p - 1) / p
of each rank's buffer to the others. Each collective pays a fixed latency once. Bandwidths are one
direction, per GPU, already scaled by the achievable fraction.
"""

from __future__ import annotations

import math
from typing import Final

DISPATCH_BYTES_PER_ELEM: Final = 1.0  # DeepEP dispatch in FP8 (hardware.md §1 notes, S41)
COMBINE_BYTES_PER_ELEM: Final = 2.0  # combine in BF16
# DeepEP's FP8 dispatch also carries one FP32 scale per 128 elements (SGLang quantises per 1 x 128 group)
DISPATCH_SCALE_BYTES_PER_ELEM: Final = 4.0 / 128.0
# DeepEP's Buffer.num_sms (deep_ep/buffer.py): the normal kernels' SMs in SGLang without --deepep-config
DEEPEP_DEFAULT_NORMAL_SMS: Final = 20


def allreduce_s(nbytes: float, ranks: int, bw_bytes_per_s: float, latency_s: float) -> float:
    """Ring all-reduce of an `nbytes` buffer over `ranks` GPUs."""
    if ranks <= 1 or nbytes <= 0.0:
        return 0.0
    return latency_s + 2.0 * (ranks - 1) / ranks * nbytes / bw_bytes_per_s


def allgather_s(nbytes_total: float, ranks: int, bw_bytes_per_s: float, latency_s: float) -> float:
    """Ring all-gather whose gathered buffer is `nbytes_total` (each of `ranks` GPUs brings 1 / ranks
    of it and receives the rest)."""
    if ranks <= 1 or nbytes_total <= 0.0:
        return 0.0
    return latency_s + (ranks - 1) / ranks * nbytes_total / bw_bytes_per_s


def alltoall_s(nbytes_per_rank: float, ranks: int, bw_bytes_per_s: float, latency_s: float) -> float:
    """All-to-all where every GPU holds `nbytes_per_rank` to scatter over `ranks` GPUs."""
    if ranks <= 1 or nbytes_per_rank <= 0.0:
        return 0.0
    return latency_s + (ranks - 1) / ranks * nbytes_per_rank / bw_bytes_per_s


def moe_alltoall_s(
    tokens: float,
    *,
    gpus: int,
    ep: int,
    hidden: int,
    top_k: int,
    moe_layers: int,
    dispatch_bytes_per_elem: float,
    combine_bytes_per_elem: float,
    bw_bytes_per_s: float,
    latency_s: float,
) -> float:
    """EP dispatch + combine for `tokens` rows spread evenly over `gpus`, every MoE layer.

    Each row goes to `top_k` experts: dispatch sends hidden x dispatch bytes per copy (FP8 in
    DeepEP), combine returns hidden x combine bytes (BF16)."""
    if ep <= 1 or tokens <= 0.0:
        return 0.0
    rows_per_gpu = tokens / gpus
    dispatch = alltoall_s(
        rows_per_gpu * top_k * hidden * dispatch_bytes_per_elem, ep, bw_bytes_per_s, latency_s
    )
    combine = alltoall_s(
        rows_per_gpu * top_k * hidden * combine_bytes_per_elem, ep, bw_bytes_per_s, latency_s
    )
    return moe_layers * (dispatch + combine)


def tp_allreduce_s(
    tokens: float,
    *,
    dp: int,
    tp: int,
    hidden: int,
    layers: int,
    allreduces_per_layer: int,
    act_bytes_per_elem: float,
    bw_bytes_per_s: float,
    latency_s: float,
    custom_max_bytes: float = math.inf,
    nccl_bw_bytes_per_s: float = 0.0,
    nccl_latency_s: float = 0.0,
) -> float:
    """Tensor-parallel all-reduces of the activations: each of the `dp` groups holds tokens / dp rows. A message
    above `custom_max_bytes` (the engine's custom all-reduce's largest) runs at NCCL's rate instead."""
    if tp <= 1 or tokens <= 0.0:
        return 0.0
    nbytes = tokens / dp * hidden * act_bytes_per_elem
    if nbytes > custom_max_bytes:
        one = allreduce_s(nbytes, tp, nccl_bw_bytes_per_s, nccl_latency_s)
    else:
        one = allreduce_s(nbytes, tp, bw_bytes_per_s, latency_s)
    return layers * allreduces_per_layer * one


def deepep_destination_ranks(ep: int, experts: int, top_k: int) -> float:
    """Expected EP ranks (the token's own included) holding at least one of a token's `top_k` experts, the
    `experts` split evenly over `ep` ranks and routing uniform: DeepEP copies a token once to each such rank."""
    if ep <= 1:
        return 1.0
    per_rank = experts / ep
    miss = math.prod((experts - per_rank - i) / (experts - i) for i in range(top_k))
    return ep * (1.0 - miss)


def deepep_normal_per_token_s(
    measured_s: float,
    *,
    sm_frac: float,
    measured_sms: int,
    sms: int,
    destinations_ratio: float,
    link_floor_s: float,
) -> float:
    """DeepEP normal dispatch or combine, per token of one rank, at `sms` SMs (SGLang --deepep-config num_sms).

    `measured_s` is the table's per-token time at `measured_sms`; `sm_frac` of it shrinks as measured_sms / sms
    (the a + b / SMs form of the measured SM sweep), all of it scales with the (token, rank) pairs copied
    (`destinations_ratio`, this pool's destination ranks over the table's), and no token crosses the link faster
    than its remote bytes at the link's rate (`link_floor_s`)."""
    sm_bound = measured_s * destinations_ratio * ((1.0 - sm_frac) + sm_frac * measured_sms / sms)
    return max(sm_bound, link_floor_s)
