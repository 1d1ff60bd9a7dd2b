"""`cache:` of a scenario: the KV tier chain, block size and per-family rules.

The tier chain (`cache.tiers`) is data: an ordered set of named tiers (rank: smaller = faster), each with a
scope (per instance, per node, shared by a pool's nodes, or by the whole cluster), a capacity, a TTL, how copies
arrive (`fill`: demoted from the tier above, or written through at every completion) and the read and write
paths by which KV moves between it and HBM: a link kind of the hardware, the share of its line rate achieved,
and software overheads per request and per KV segment (one contiguous region of one layer in one block,
sim.kvcache.paths). A run walks the chain (sim.kvcache.store); `sim calibrate tiers` reports every tier's
path. A scenario's `tiers:` mapping is merged by name onto the defaults below, so `tiers: {dram: {ttl_s: 60}}`
changes one field and `tiers: {rdma_pool: {enabled: true, capacity_gb_per_node: 512}}` turns the RDMA pool on.
A new tier (a CXL memory expander, say) is one more entry with its own rank (scenarios/tiers_cxl.yaml).

Beside the chain, one block per model family (`cache.v4`, `cache.v41`): its fields come from the family
registry (sim.config.families), its schemas and what they mean from sim.config.family_cache.
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import Field, field_validator, model_validator

from sim.config.base import StrictModel
from sim.config.errors import Problem, raise_problems
from sim.config.families import family, with_family_fields
from sim.config.family_cache import FamilyCacheBlock

# who owns one set of a link kind's lanes in a run: an instance (its GPUs' host links) or a node (its NVMe
# drives, its NICs). A load into an instance's HBM uses its own lanes or its node's; a write from a node-level
# copy (one leaving host DRAM) uses the node's.
LINK_OWNER = {
    "pcie_h2d": "instance",
    "pcie_d2h": "instance",
    "ssd_read": "node",
    "ssd_write": "node",
    "net": "node",
}
LinkKind = Literal[tuple(LINK_OWNER)]  # type: ignore[valid-type]  # the link kinds sim.kvcache.paths moves KV on


class TierPath(StrictModel):
    """How KV moves between HBM and a tier (one direction)."""

    link: LinkKind = Field(
        description="hardware lanes used: pcie_h2d/pcie_d2h (the instance's GPUs' host links), ssd_read/"
        "ssd_write (the node's NVMe), net (RDMA NICs: the node's on a node link, one GPU's in calibrate tiers)"
    )
    bw_frac: float | None = Field(
        None,
        gt=0,
        le=1,
        description="share of the link's line rate achieved; null = the hardware's achievable",
    )
    per_request_s: float = Field(0.0, ge=0, description="fixed software cost of one load or store")
    per_segment_s: float = Field(
        0.0, ge=0, description="cost per KV segment moved (one contiguous region of one layer in one block)"
    )


SCOPES = ("instance", "node", "pool", "cluster")  # narrowest first


class CacheTier(StrictModel):
    rank: int = Field(ge=0, description="position in the chain (smaller = faster); HBM is the unique rank 0")
    scope: Literal["instance", "node", "pool", "cluster"] = Field(
        description="who shares one copy: an instance, the instances of a node, the nodes of a cluster pool, all"
    )
    medium: Literal["hbm", "host_dram", "nvme", "memory"] = Field(
        description="where the bytes live; sets the default capacity (hbm: HBM left by the weights; host_dram: "
        "the profile's DRAM usable for KV, less V4.1's SWA pool; nvme: drives x usable share; memory: "
        "capacity_gb_per_node, e.g. an RDMA pool's DRAM or a CXL expander)"
    )
    fill: Literal["demote", "write_through"] = Field(
        "demote",
        description="how copies arrive: demote = a copy pushed out of HBM goes to the first demote tier, one "
        "leaving a demote tier to the next; write_through = every completed context is written to it (the "
        "family's persisted prefixes, with their retention guarantee)",
    )
    enabled: bool = Field(True, description="false: the tier is not built")
    capacity_gb_per_node: float | None = Field(
        None,
        ge=0,
        description="capacity each node contributes, decimal GB; null = the medium's default "
        "(hbm: at most this much KV per node, split over its GPUs, within what the weights leave)",
    )
    ttl_s: float = Field(
        ge=0, description="idle time after which a copy is dropped (HBM: demoted); 0 = at once"
    )
    read: TierPath | None = Field(None, description="tier -> HBM (null only for HBM itself)")
    write: TierPath | None = Field(None, description="HBM -> tier (null only for HBM itself)")


# The default chain. Overheads: sim.kvcache.paths documents each value and its source.
DEFAULT_TIERS: dict[str, dict[str, Any]] = {
    "hbm": {"rank": 0, "scope": "instance", "medium": "hbm", "ttl_s": 30.0},
    # keep a finished turn's KV in HBM 30 s, while its session is likely to return: a choice [D]
    "dram": {
        "rank": 10,
        "scope": "node",
        "medium": "host_dram",
        "ttl_s": 600.0,  # a choice [D]
        "read": {"link": "pcie_h2d", "per_request_s": 0.013},
        "write": {"link": "pcie_d2h"},
    },
    "rdma_pool": {
        "rank": 20,
        "scope": "cluster",
        "medium": "memory",
        "enabled": False,
        "capacity_gb_per_node": 0.0,
        "ttl_s": 3600.0,  # a choice [D]
        "read": {"link": "net", "per_request_s": 0.013, "per_segment_s": 2e-6},
        "write": {"link": "net", "per_segment_s": 2e-6},
    },
    "ssd": {
        "rank": 30,
        "scope": "cluster",
        "medium": "nvme",
        "fill": "write_through",
        "ttl_s": 86400.0,  # hardware.md §4.1 [A]: "usually within a few hours to a few days"; 24 h chosen [D]
        "read": {"link": "ssd_read", "per_request_s": 0.013},
        "write": {"link": "ssd_write"},
    },
}


def _merged(base: dict[str, Any], over: dict[str, Any]) -> dict[str, Any]:
    out = dict(base)
    for key, value in over.items():
        out[key] = (
            _merged(out[key], value) if isinstance(value, dict) and isinstance(out.get(key), dict) else value
        )
    return out


class _TierChain(StrictModel):
    tiers: dict[str, CacheTier] = Field(
        default_factory=lambda: {n: CacheTier.model_validate(t) for n, t in DEFAULT_TIERS.items()},
        description="the tier chain by name, merged onto the defaults (hbm, dram, rdma_pool off, ssd)",
    )
    eviction: Literal["lru"] = Field("lru", description="eviction order inside a tier")
    block_tokens: int = Field(
        256,
        ge=1,
        description="the engine's KV block (page) size in tokens: a partial prefix match is used in whole blocks, "
        "and HBM evicts a cached context block by block from its tail",
    )
    # The engine's setting, not the model's. 256 for both families because the engines that serve them use it:
    # SGLang's 256-token pages for V4 and vLLM's --block-size 256 for V4.1 (model.md §5.2 [B]). Engine defaults
    # for other models differ [B]: vLLM 16 (its --block-size default; MLA backends raise it to 64,
    # vllm-project/vllm#24692), SGLang page_size 1 (a radix cache per token); the served mini engine of issue 14
    # runs 256 (kernels_bench/serve/blocks.py), and `sim validate --real` takes the run's value from its provenance.
    swa_prefix_rows: Literal["window", "every_token"] = Field(
        "window",
        description="what the prefix cache keeps of the sliding-window KV: window = the last window of each "
        "sequence (a hit whose window is gone recomputes it), every_token = every token's raw window row in "
        "its KV block (a hit recomputes nothing; the rows cost bytes per token)",
    )  # sim.model.kv.SwaPrefixState: SGLang and vLLM keep the window only [B]; the served mini keeps every row
    swa_checkpoints: Literal["sequence_ends", "every_block", "prompt_ends", "rebuild"] | None = Field(
        None,
        description="where a V4 model's windows stay cached, and what a hit without one does (sim.kvcache.lookup): "
        "sequence_ends = where a request's prompt and its sequence ended, a hit elsewhere ends at the deepest of "
        "them before it or misses; every_block = at every block boundary while the blocks are in HBM; "
        "prompt_ends = at each request's prompt end and where a hit ended; rebuild = as sequence_ends, but a hit "
        "elsewhere re-runs the window's receptive field (sgl-project/sglang#31713, opt-in, unmerged); null = the "
        "engine's rule (sim scenario fields: swa_checkpoints), sequence_ends with no engine named",
    )

    @field_validator("tiers", mode="before")
    @classmethod
    def _onto_defaults(cls, value: Any) -> Any:
        if not isinstance(value, dict):
            return value
        return {
            name: _merged(DEFAULT_TIERS.get(name, {}), over) if isinstance(over, dict) else over
            for name, over in {**{n: {} for n in DEFAULT_TIERS}, **value}.items()
        }

    @model_validator(mode="after")
    def _a_chain(self) -> _TierChain:
        problems = []
        chain = self.chain()
        ranks = [t.rank for _n, t in chain]
        for name, tier in chain:
            if ranks.count(tier.rank) > 1:
                problems.append(Problem(f"tiers.{name}.rank", "two enabled tiers share a rank", tier.rank))
            if (tier.medium == "hbm") != (tier.rank == 0):
                problems.append(Problem(f"tiers.{name}.rank", "HBM is the one tier of rank 0", tier.rank))
            if tier.medium != "hbm" and (tier.read is None or tier.write is None):
                problems.append(Problem(f"tiers.{name}", "a tier below HBM needs read and write paths", name))
            if tier.medium == "memory" and not tier.capacity_gb_per_node:
                problems.append(
                    Problem(f"tiers.{name}.capacity_gb_per_node", "a pooled tier needs a capacity", 0, "> 0")
                )
        # a copy moves outward down the demotion chain: a node-level copy cannot pick one instance's tier
        feeder_scope = "instance"  # HBM
        for name, tier in chain:
            if tier.medium == "hbm" or tier.fill != "demote":
                continue
            if SCOPES.index(tier.scope) < SCOPES.index(feeder_scope):
                problems.append(
                    Problem(
                        f"tiers.{name}.scope",
                        "a demote tier is at least as wide as the demote tier above it",
                        tier.scope,
                        ", ".join(SCOPES[SCOPES.index(feeder_scope) :]),
                    )
                )
            feeder_scope = tier.scope
        if not chain or chain[0][1].medium != "hbm":
            problems.append(Problem("tiers.hbm", "the chain needs an enabled HBM tier", None))
        raise_problems(problems)
        return self

    def chain(self) -> list[tuple[str, CacheTier]]:
        """The enabled tiers, fastest first."""
        return sorted(((n, t) for n, t in self.tiers.items() if t.enabled), key=lambda item: item[1].rank)

    def tier(self, name: str) -> CacheTier:
        return self.tiers[name]

    def policy_for(self, key: str) -> FamilyCacheBlock:
        """The block of family `key` (`ModelRef.family` gives the family of a model)."""
        block: FamilyCacheBlock = getattr(self, family(key).key)
        return block


class Cache(
    with_family_fields(
        _TierChain,
        lambda f: (
            f.cache_block,
            Field(default_factory=f.cache_block, description=f"rules for {', '.join(f.models)}"),
        ),
    )
):
    """The tier chain, then one block per model family (`cache.v4`, `cache.v41`: sim.config.family_cache)."""
