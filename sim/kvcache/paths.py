"""The time to move a prefix's KV along one tier path (sim.config.cache `TierPath`):

    transfer_s = per_request_s + segments x per_segment_s + bytes / (line rate x achieved share)

- bytes: the prefix's KV (global KV per token x tokens, plus persisted per-sequence state);
- segments: the contiguous regions an engine moves, one per KV region of a layer per block:
  ceil(tokens / block_tokens) x regions per block. A layer stores one region per row kind it owns (V4/V4.1:
  the latent row, and the index key where it owns one); a GQA layout with separate K and V rows stores two
  (vLLM/SGLang allocate K and V as separate pages per layer);
- line rate: the hardware profile's link (PCIe per GPU, NVMe per node, NICs per GPU here), times `bw_frac`
  or the profile's achievable share of that link.

Default overheads (sim.config.cache DEFAULT_TIERS), measured on one H20 by gahow/agentic-kvc v2 exp (a)
(Qwen3-Coder-30B-A3B, vLLM 0.18.1; hwprofiles/nvidia-h20-hgx8.yaml S4):
- per_request_s 13 ms for every tier below HBM [C]: at a 1K-token prefix the host-DRAM hit takes 57 ms
  against 42 ms from HBM, of which 1.9 ms is the copy at the measured 54.4 GB/s: the rest is the connector's
  fixed cost, mostly the engine step the asynchronously loaded request waits for. Taken the same for the
  other tiers (an assumption [D]).
- per_segment_s 0 on PCIe and NVMe [D]: the engines gather a layer's blocks in one copy kernel;
  2 us on RDMA [D]: one RDMA work request per region, posted and completed by the connector (SGLang moved
  its Mooncake transfers to batches because per-region costs bounded it at ~1.5 GB/s, sglang#7236; very long
  prompts still submit "hundreds of thousands of RDMA slices", sglang#32758). Not fitted to the 64K point.
  The source's remote tier is not a DRAM pool read: instance B pulls instance A's cached prefix through
  Mooncake's transfer engine (do_remote_prefill), "~5-7 GB/s effective" in its own words; its points below
  64K were not available to us, so RDMA's 13 ms per request is DRAM's, assumed [D].

A link kind is one entry of each table below (which achievable share, who owns its lanes, its line rate
and lanes) and the line rate's field in the hardware profile (sim.hardware.schema); the scenario schema
takes the kinds from here (sim.config.cache `LinkKind`).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from sim.errors import InputError

# the `achievable` fraction of the hardware profile that a link kind uses by default
LINK_ACHIEVABLE = {
    "pcie_h2d": "pcie_bw_frac",
    "pcie_d2h": "pcie_bw_frac",
    "ssd_read": "ssd_bw_frac",
    "ssd_write": "ssd_bw_frac",
    "net": "scale_out_bw_frac",
}


@dataclass(frozen=True)
class PathCost:
    """The software cost of one move along a tier path: per request, and per KV segment moved."""

    per_request_s: float = 0.0
    per_segment_s: float = 0.0

    def overhead_s(self, segments: int) -> float:
        return self.per_request_s + segments * self.per_segment_s


@dataclass(frozen=True)
class PathRates:
    """A tier path resolved against hardware: achieved bandwidth and the software overheads."""

    link: str
    bw_bytes_per_s: float
    cost: PathCost

    def transfer_s(self, nbytes: float, segments: int) -> float:
        return self.cost.overhead_s(segments) + nbytes / self.bw_bytes_per_s


def path_cost(path) -> PathCost:
    """The overheads of `path` (a TierPath)."""
    return PathCost(path.per_request_s, path.per_segment_s)


def link_line_rate_bytes_per_s(hw, link: str) -> float:
    """Line rate of one unit of a link kind: one GPU's host link (pcie_*), one GPU's share of the node's
    NICs (net), the node's NVMe set (ssd_*)."""
    if link in ("pcie_h2d", "pcie_d2h"):
        return hw.pcie_bw_per_gpu_bytes_per_s
    if link == "net":
        return hw.scale_out_bw_per_gpu_bytes_per_s
    if link == "ssd_read":
        return hw.ssd_read_bytes_per_s
    if link == "ssd_write":
        return hw.ssd_write_bytes_per_s
    raise InputError("unknown link kind", value=link, allowed=list(LINK_ACHIEVABLE))


def path_rates(path, hw, achievable: dict[str, float | None], units: float) -> PathRates:
    """`path` (a TierPath) over `units` lanes of `hw`, at its own `bw_frac` or the achievable share."""
    frac = path.bw_frac if path.bw_frac is not None else achievable[LINK_ACHIEVABLE[path.link]]
    assert frac is not None  # every link fraction of a profile is a number
    bw = units * link_line_rate_bytes_per_s(hw, path.link) * frac
    return PathRates(path.link, bw, path_cost(path))


def link_lanes(link: str, owner: str, gpus: int, hw) -> int:
    """Units of `link` one owner has: an instance's GPUs' host links (pcie, `gpus`), a node's host links
    (pcie, all its GPUs), a node's NVMe set (ssd, 1), a node's NICs (net, one per GPU)."""
    if link.startswith("ssd"):
        return 1
    if link.startswith("pcie") and owner == "instance":
        return gpus
    return hw.gpus_per_node


def kv_regions_per_block(spec, layout: str | None = None) -> int:
    """Contiguous KV regions per block of tokens, summed over the layers (see the module doc)."""
    lay = spec.layout(layout)
    split_kv = (
        2
        if any(k.startswith("k_") for k in lay.main_row) and any(k.startswith("v_") for k in lay.main_row)
        else 1
    )
    regions = 0
    for layer in spec.layers:
        if layer.owns_kv:
            regions += split_kv
        if layer.owns_index_keys:
            regions += 1
    return regions


def kv_segments(tokens: int, block_tokens: int, regions_per_block: int) -> int:
    """Contiguous regions a move of `tokens` touches: whole blocks x regions per block."""
    return math.ceil(tokens / block_tokens) * regions_per_block
