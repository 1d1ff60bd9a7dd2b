"""Build one model's simulation from a validated scenario: nodes, links, tiers, timing per pool,
instances, router, cluster wiring, recorder and sampler. Pure construction, no run.

Resolution rules (each a stated choice):
- HBM per instance = GPUs x usable HBM x (1 - activation_reserve_frac); weights take one copy of
  the routed experts (drafter's included: EP splits the experts, expert TP = GPUs / EP splits each
  one, as sim/config/cluster.py defines it and the timing models charge; in FP8 where they run at the
  FP8 rate on a GPU without FP4, `experts_held_in_fp8`), DP copies of everything else
  (attention-TP shards it), and V4.1's Engram tables once (row-sharded) when they live in HBM;
  the rest holds KV. The latent KV is replicated on every attention-TP rank (model.md §9).
- The tiers below HBM are the enabled entries of `cache.tiers` (sim.config.cache), fastest first, each
  built the same way (`store_tiers`): units by scope (one per instance, node, cluster pool, or one),
  each the sum of its nodes' contributions by medium: host DRAM, the profile's `dram_usable_for_kv_gb`
  (scaled if `cluster.node.dram_gb` overrides the installed size; V4.1's SWA pool takes
  `swa_pool_dram_frac` of installed DRAM out of the first such tier, model.md §10); NVMe, the drives x
  `usable_for_kv_frac` (the default SSD tier is one cluster-wide unit read through each node's own
  drives: a striped store like 3FS gives each reader about its share); memory, `capacity_gb_per_node`.
- Links: one per link kind, owner and bandwidth (sim.config.cache LINK_OWNER: PCIe per instance, its
  GPUs' host links; NVMe and NICs per node), shared by the tiers whose paths use that kind at that share;
  the NICs also carry a prefill node's KV to the decode side (one link per transfer, sim.cluster.link).
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import NamedTuple

from sim import units
from sim.cluster.cluster import Cluster
from sim.cluster.events import EventLoop
from sim.cluster.instance import Instance
from sim.cluster.link import FifoLink, SharedLink
from sim.config.cache import LINK_OWNER, TierPath
from sim.config.cluster import Pool
from sim.config.engine_rules import (
    LayerShape,
    custom_allreduce_max_bytes,
    decode_layer_term,
    deepep_expert_alignment_rows,
    eager_prefill_launches,
    megamoe_max_tokens_per_rank,
    prefill_indexer,
    reindex_full_range,
    spec_decode_host_chain_s,
    swa_checkpoints,
    swa_token_pool,
)
from sim.errors import InputError
from sim.hardware import HwProfile, load_hw
from sim.kvcache.paths import kv_regions_per_block, link_lanes, path_cost, path_rates
from sim.kvcache.policies import CachePolicy
from sim.kvcache.store import KVStore, StoreTier
from sim.metrics.recorder import Recorder
from sim.metrics.timeseries import PoolView, Sampler
from sim.model import (
    ModelSpec,
    compressor_state_bytes_per_sequence,
    global_kv_bytes_per_token,
    swa_prefix_state,
    swa_window_tokens,
    weights_bytes_by_group,
)
from sim.sched.router import Router
from sim.sched.swa_pool import MIB, SwaPool, sglang_mem_fraction_static, sglang_v4_swa_pool
from sim.timing.aic import resolved_stack
from sim.timing.arith import ModelArith, build_arith
from sim.timing.base import TimingModel
from sim.timing.comm import DEEPEP_DEFAULT_NORMAL_SMS
from sim.timing.decoder_tail import pool_prefill_mode
from sim.timing.factory import TimingContext, make_timing, resolve_timing_name
from sim.timing.host import HostCosts, eager_issue_s
from sim.timing.roofline import Parallelism

# Defaults not (yet) in the scenario schema, each a stated choice:
KERNELS_PER_LAYER_STEP = (
    11  # model.md §10 [A]: a V4.1 Reuse-mode layer runs 11 kernels in decode; V4 assumed alike [D]
)
PCIE_BW_FRAC = 0.8  # [D] achievable share of PCIe for bulk KV copies
SSD_BW_FRAC = 0.8  # [D] cf. 3FS reads at ~80 % of line rate (hardware.md §5, S96)
COMM_OVERLAP_FRAC = 0.0  # [D] conservative: no overlap of EP/TP communication with compute
SCALE_OUT_LATENCY_S = 10e-6  # [D] RDMA one-way latency incl. software
BLOCK_TOKENS = 256  # model.md §5.2 [B]: SGLang 256-token pages for V4; vLLM --block-size 256 for V4.1
TIMESCALE_EPS_S = 1e-9  # a TTL of 0 means "expire at the next sweep"


@dataclass
class PoolInfo:
    name: str
    role: str
    hw_id: str
    nodes: int
    gpus: int
    instances: int
    gpus_per_instance: int
    weights_bytes_per_instance: float
    kv_bytes_per_instance: float
    usd_per_hour: float
    timing: str
    index_paths: dict | None = None  # V4.1: what runs its index layers here (`pool_index_record`)


@dataclass(frozen=True)
class InstanceSpec:
    """Where one instance runs and what it holds, before the links and the store exist."""

    pool: str
    role: str
    node: int  # index of its (first) node
    gpus: int
    timing: TimingModel
    kv_capacity_bytes: float  # HBM left for KV (all its GPUs)
    kv_replication: int  # copies of the latent KV (its attention-TP ranks, model.md §9)
    dp_ranks: int  # attention data-parallel ranks (each holds whole requests)
    swa_pool: SwaPool | None = None  # the engine's SWA token pool of one DP rank (sim.sched.swa_pool), if any
    swa_chunk_tokens: int = 0  # a DP rank's prefill chunk, the most of a prompt its SWA pool holds


@dataclass
class Simulation:
    env: EventLoop
    cluster: Cluster
    store: KVStore
    recorder: Recorder
    sampler: Sampler
    policy: CachePolicy
    arith: ModelArith
    pools: list[PoolInfo]
    instances: list[Instance]
    front: list[Instance]
    back: list[Instance]
    usd_per_hour: float
    family: str
    tier_names: list[str]  # the configured chain by rank, HBM first, enabled or not (per-tier metrics)
    extra: dict = field(default_factory=dict)


def cache_policy(scn, family: str, spec, kv_layout: str | None) -> CachePolicy:
    c = scn.cache
    eps = TIMESCALE_EPS_S
    swa = swa_prefix_state(spec, c.swa_prefix_rows, c.block_tokens, kv_layout)  # sim.model.kv
    common = dict(
        # model.md §5.1, plus every token's raw window rows where the engine keeps them
        global_kv_bytes_per_token=global_kv_bytes_per_token(spec, kv_layout) + swa.rows_bytes_per_token,
        swa_state_bytes=swa.ring_bytes_per_sequence,  # model.md §5.2
        compressor_state_bytes=compressor_state_bytes_per_sequence(spec),  # model.md §5.2
        block_tokens=c.block_tokens,
        kv_regions_per_block=kv_regions_per_block(spec, kv_layout),  # sim.kvcache.paths
        swa_window_tokens=swa_window_tokens(spec),  # model.md §1
        hbm_keep_s=max(c.tier("hbm").ttl_s, eps),
    )
    rules = c.policy_for(family).store_rules(  # the family's own semantics: sim.config.family_cache
        window_rebuild_tokens=swa.rebuild_tokens,
        eps_s=eps,
    )
    if swa.every_token:
        rules = rules.with_window_in_blocks()
    return CachePolicy(family=family, **asdict(rules), **common, swa_checkpoints=_swa_checkpoints(scn, rules))


def _swa_checkpoints(scn, rules) -> str:
    """Where the prefix cache keeps V4's windows: `cache.swa_checkpoints`, else the rule of the engine of the
    first pool that prefills (hits are looked up where prompts are computed), else sequence_ends (DeepSeek's
    own prefix units, at the input's and the output's end, hardware.md §4.1). A family with an SWA pool
    (V4.1) keeps its own rules (model.md §10)."""
    if scn.cache.swa_checkpoints is not None:
        return scn.cache.swa_checkpoints
    if rules.swa_pool:
        return "sequence_ends"
    prefilling = next(p for p in scn.cluster.pools if p.role != "decode")
    return swa_checkpoints(scn.pool_engine(prefilling)) or "sequence_ends"


def expert_activations_on(spec: ModelSpec, hw: HwProfile, setting: str | None) -> str:
    """The routed experts' activation format a pool on `hw` runs: `models[].expert_activations`, or where unset the
    stock deployment: W4A8 (fp8) on a GPU with FP4 MMAs; elsewhere the FP8 grouped GEMMs where the experts come in
    FP8 (the model's FP8 checkpoint, `moe.fp8_checkpoint`: V4's; or FP8 experts in the spec), W4A16 (bf16) on Marlin
    where its module is measured (V4.1 on the H200 and the H100: no FP8 checkpoint is published,
    docs/engines_and_validation.md section 55), else an FP8 conversion [D]."""
    from sim.timing.marlin import measured_on

    if setting is not None:
        return setting
    moe = spec.moe
    fp8_experts = (
        moe is None or moe.fp8_checkpoint or spec.weight_formats[moe.expert_dtype].bytes_per_element >= 1.0
    )
    return "bf16" if not hw.peak_tflops("fp4") and not fp8_experts and measured_on(hw) else "fp8"


def experts_held_in_fp8(hw: HwProfile, expert_activations: str) -> bool:
    """Whether an engine holds the MXFP4 routed experts in FP8 on `hw`: on a GPU without FP4 MMAs, experts run at
    the FP8 rate (`expert_activations` fp8) are the GPU's FP8 grouped GEMMs over FP8 weights, an FP8 checkpoint
    (V4's) or a conversion; W4A16 (bf16) dequantises MXFP4 in the kernel, and a GPU with native FP4 runs MXFP4
    (docs/engines_and_validation.md section 56)."""
    return not hw.peak_tflops("fp4") and expert_activations != "bf16"


class ExpertFormat(NamedTuple):
    """How one pool runs and holds a model's routed experts (`pool_expert_format`)."""

    activations: str  # fp8 | fp4 | bf16 (`expert_activations_on`)
    held_in_fp8: bool  # `experts_held_in_fp8`
    set_by_scenario: bool  # models[].expert_activations names it; else the stock deployment
    # the engine runner whose measured module times them (cluster.pools[].moe_runner; for `auto`, Marlin's where
    # they run W4A16 on a GPU without FP4 MMAs); None: the kernel tables or Mega MoE. Whether the runner fits the
    # experts and the GPU is preflight's and the timing's check (sim.timing.engine_moe.runner_misfit)
    module: str | None = None


def pool_expert_format(scn, spec: ModelSpec, hw: HwProfile, pool: Pool | None = None) -> ExpertFormat:
    """The one resolution the timing, the HBM budget and `sim scenario check` share, for `spec` on a pool of `hw`
    (`pool`: the pool itself, for its MoE runner)."""
    setting = next((m.expert_activations for m in scn.models if m.name == spec.name), None)
    activations = expert_activations_on(spec, hw, setting)
    module = None
    if pool is not None and pool.moe_runner != "auto":
        module = pool.moe_runner
    elif pool is not None and activations == "bf16" and not hw.peak_tflops("fp4"):
        module = "marlin"
    return ExpertFormat(activations, experts_held_in_fp8(hw, activations), setting is not None, module)


def instance_weight_bytes(spec, dp: int, engram_in_hbm: bool, experts_fp8: bool = False) -> float:
    """HBM the weights take in one instance (see the module doc); `experts_fp8`: the routed experts held in the
    model's FP8 format (that of its shared experts) instead of MXFP4 (`experts_held_in_fp8`)."""
    groups = weights_bytes_by_group(spec)
    experts = groups.get("routed_experts", 0.0) + groups.get("drafter_routed_experts", 0.0)
    engram = groups.get("engram_tables", 0.0)
    rest = sum(groups.values()) - experts - engram
    if experts_fp8 and spec.moe is not None:
        fmt = spec.weight_formats
        experts *= fmt[spec.moe.shared_dtype].bytes_per_element / fmt[spec.moe.expert_dtype].bytes_per_element
    return experts + dp * rest + (engram if engram_in_hbm else 0.0)


@dataclass(frozen=True)
class HbmBudget:
    """HBM of one instance of a pool: what the weights take, what the activation reserve leaves."""

    weights_bytes: float
    usable_bytes: float  # all GPUs of the instance, after cluster.activation_reserve_frac
    kv_limit_bytes: float | None = None  # cache.tiers.hbm.capacity_gb_per_node, the instance's share

    @property
    def kv_bytes(self) -> float:
        left = self.usable_bytes - self.weights_bytes
        return left if self.kv_limit_bytes is None else min(left, self.kv_limit_bytes)


def hbm_budget(scn, pool, spec, *, engram_in_hbm: bool) -> HbmBudget:
    """The rule every consumer shares (the build, the preflight, the planner's pruning): weights plus
    the activation reserve must leave HBM for KV."""
    hw = scn.pool_profile(pool)
    gpi = pool.gpus_per_instance
    cap_gb = scn.cache.tier("hbm").capacity_gb_per_node
    return HbmBudget(
        weights_bytes=instance_weight_bytes(
            spec, pool.dp, engram_in_hbm, pool_expert_format(scn, spec, hw).held_in_fp8
        ),
        usable_bytes=gpi * hw.hbm_capacity_bytes * (1.0 - scn.cluster.activation_reserve_frac),
        kv_limit_bytes=None if cap_gb is None else cap_gb * units.GB * gpi / hw.gpus_per_node,
    )


class LinkSet:
    """The run's transfer links: one per (direction, link kind, owner, bandwidth), so tiers whose paths use a
    link kind at the same share share its lanes (host DRAM and a CXL expander both read over an instance's
    PCIe, V4.1's SWA ring writes ride host DRAM's); a path with its own `bw_frac` gets lanes of its own.
    Loads are processor-sharing (SharedLink), writes FIFO (FifoLink)."""

    def __init__(self, env) -> None:
        self.env = env
        self.reads: dict[tuple, SharedLink] = {}
        self.writes: dict[tuple, FifoLink] = {}

    def read(self, kind: str, owner: str, idx: int, bw: float, latency_s: float) -> SharedLink:
        key = (kind, owner, idx, bw)
        link = self.reads.get(key)
        if link is None:
            link = self.reads[key] = SharedLink(self.env, f"{kind}[{owner} {idx}]", bw, latency_s)
        return link

    def write(self, kind: str, owner: str, idx: int, bw: float, latency_s: float) -> FifoLink:
        key = (kind, owner, idx, bw)
        link = self.writes.get(key)
        if link is None:
            link = self.writes[key] = FifoLink(f"{kind}[{owner} {idx}]", bw, latency_s)
        return link

    def of(self, direction: str, kind: str, instances: list[int], nodes: list[int]) -> list:
        """The links of `kind` owned by these instances or nodes, in the order they were made."""
        links = self.reads if direction == "read" else self.writes
        inst, node = set(instances), set(nodes)
        return [
            link
            for (k, owner, idx, _bw), link in links.items()
            if k == kind and (idx in inst if owner == "instance" else idx in node)
        ]


@dataclass(frozen=True)
class NodeSpec:
    """One node as its pool brings it: the hardware, and the share of its host memory the pool may use."""

    pool: int  # index of its cluster pool
    hw: HwProfile
    achievable: dict  # its pool's hardware fractions with the scenario's overrides
    share: float  # the share of the node's host memory its pool may use (sim.config.cluster)
    dram_bytes: float  # installed host DRAM the pool may use, after the overrides
    ssd_bytes: float  # raw NVMe the pool may use
    net_bw_bytes_per_s: float  # one NIC direction, as the pool's timing model sees it
    net_latency_s: float


@dataclass(frozen=True)
class Layout:
    """Where the run's instances and nodes are, and what each node brings (by instance and node index)."""

    instances: list[InstanceSpec]
    nodes: list[NodeSpec]


@dataclass(frozen=True)
class PoolBuild:
    """One pool built: its summary, and its nodes and instances with their indices in the run."""

    pool: Pool
    info: PoolInfo
    nodes: list[NodeSpec]
    instances: list[InstanceSpec]
    node_ids: list[int]
    instance_ids: list[int]


def _units(scope: str, lay: Layout) -> tuple[list[int], list[int], int]:
    """(unit of each instance, unit of each node, units) of a tier of `scope`."""
    n_nodes = len(lay.nodes)
    if scope == "instance":
        n = len(lay.instances)
        return list(range(n)), [-1] * n_nodes, n  # no node-level copy moves into one instance's tier
    if scope == "node":
        of_node = list(range(n_nodes))
    elif scope == "pool":
        of_node = [node.pool for node in lay.nodes]
    else:
        of_node = [0] * n_nodes
    return [of_node[s.node] for s in lay.instances], of_node, max(of_node) + 1


def _node_capacity(name: str, tier, lay: Layout, n: int, swa_bytes: float) -> float:
    """Bytes node `n` contributes to tier `name` (see the module doc); `swa_bytes`: V4.1's SWA pool here."""
    node = lay.nodes[n]
    hw, share, installed, raw_ssd = node.hw, node.share, node.dram_bytes, node.ssd_bytes
    if tier.capacity_gb_per_node is not None:
        cap = tier.capacity_gb_per_node * units.GB * share
    elif tier.medium == "host_dram":
        # the profile's usable share of DRAM for KV, applied to the (possibly overridden) size
        cap = installed * hw.host_dram_usable_for_kv_bytes / hw.host_dram_bytes
    elif tier.medium == "nvme":
        return raw_ssd * hw.local_storage.usable_for_kv_frac.value
    else:  # memory: validated to have a capacity (sim.config.cache)
        raise InputError(f"tier {name} needs capacity_gb_per_node", where=f"cache.tiers.{name}")
    return max(0.0, cap - swa_bytes) if tier.medium == "host_dram" else cap


def store_tiers(
    cache, policy: CachePolicy, lay: Layout, links: LinkSet
) -> tuple[list[StoreTier], list[float]]:
    """The tiers below HBM of the enabled chain, fastest first, and V4.1's SWA pool per node."""
    eps = TIMESCALE_EPS_S
    n_nodes = len(lay.nodes)
    inst_node = [s.node for s in lay.instances]
    swa_caps = [policy.swa_pool_dram_frac * node.dram_bytes if policy.swa_pool else 0.0 for node in lay.nodes]
    swa_beside = next((name for name, t in cache.chain() if t.medium == "host_dram"), None)
    tiers = []
    for name, tier in cache.chain():
        if tier.medium == "hbm":
            continue
        assert tier.read is not None and tier.write is not None  # validated (sim.config.cache)
        of_inst, of_node, n_units = _units(tier.scope, lay)
        caps = [0.0] * n_units
        per_inst = [0] * n_nodes
        for node in inst_node:
            per_inst[node] += 1
        for n in range(n_nodes):
            cap = _node_capacity(name, tier, lay, n, swa_caps[n] if name == swa_beside else 0.0)
            if tier.scope == "instance":
                for i, node in enumerate(inst_node):
                    if node == n:
                        caps[i] += cap / per_inst[n]
            elif of_node[n] >= 0:
                caps[of_node[n]] += cap
        demote = tier.fill == "demote"
        write_through_ttl = 0.0 if demote else policy.retention_s
        write_inst = [_link(links, "write", tier.write, lay, i=i) for i in range(len(inst_node))]
        write_node = [_link(links, "write", tier.write, lay, n=n) for n in range(n_nodes)] if demote else []
        tiers.append(
            StoreTier(
                name,
                scope=tier.scope,
                capacity_bytes=caps,
                ttl_s=max(tier.ttl_s, eps, write_through_ttl),
                unit_of_instance=of_inst,
                unit_of_node=of_node,
                demote=demote,
                retention_s=0.0 if demote else policy.retention_s,
                read=path_cost(tier.read),
                write=path_cost(tier.write),
                write_links_instance=write_inst,
                write_links_node=write_node,
            )
        )
    return tiers, swa_caps


def _link(links: LinkSet, direction: str, path, lay: Layout, *, i: int = -1, n: int = -1):
    """The link `path` uses for instance `i` (its own lanes or its node's, by link kind) or node `n`."""
    if i >= 0 and LINK_OWNER[path.link] == "instance":
        owner, idx, node = "instance", i, lay.instances[i].node
    else:
        owner, node = "node", (lay.instances[i].node if i >= 0 else n)
        idx = node
    spec = lay.nodes[node]
    hw = spec.hw
    gpus = lay.instances[i].gpus if i >= 0 else hw.gpus_per_node
    bw = path_rates(path, hw, spec.achievable, link_lanes(path.link, owner, gpus, hw)).bw_bytes_per_s
    latency = spec.net_latency_s if path.link == "net" else 0.0
    make = links.read if direction == "read" else links.write
    return make(path.link, owner, idx, bw, latency)


def _pool_arith(
    arith: ModelArith, pool, kv_layout: str | None, reindex_full_range: bool = False
) -> ModelArith:
    """The model's tables in the prefill mode the pool's engine runs (sim.timing.decoder_tail) and with the
    Reindex scoring it runs (sim.config.engine_rules reindex_full_range)."""
    mode = pool_prefill_mode(
        arith.spec,
        arith.prefill_mode,
        setting=pool.prefill_decoder_tail,
        dp=pool.dp,
        prefill_cp=pool.prefill_context_parallel,
    )
    full = reindex_full_range and any(layer.selection == "reindex" for layer in arith.spec.layers)
    if mode == arith.prefill_mode and full == arith.reindex_full_range:
        return arith
    return build_arith(arith.name, prefill_mode=mode, kv_layout=kv_layout, reindex_full_range=full)


class EagerFloor(NamedTuple):
    """The least a prefill step of one pool lasts where its engine runs it eagerly: its launches at the host's
    measured time a launch (sim.timing.host); HostCosts.eager_floor_s adds them up for a step's layers."""

    step_launches: float  # once a step
    layer_launches: float  # over the decoder layers
    eager_step_s: float
    eager_per_layer_s: float


def engine_eager_floor(engine, pool: Pool, spec: ModelSpec) -> EagerFloor | None:
    """The eager floor `engine` gives `pool` serving `spec`'s model (sim.config.engine_rules), or None where
    the engine graphs its prefill steps or none is named."""
    shapes = [
        LayerShape(
            compressor=layer.compressor is not None and layer.owns_kv,
            indexer=layer.has_index_query,
            compressed=layer.ratio > 0,
            top_k=layer.top_k is not None,
        )
        for layer in spec.layers
    ]
    launches = eager_prefill_launches(engine, spec.name, shapes, pool.moe_a2a, pool.tp)
    if launches is None:
        return None
    step_launches, layer_launches = launches
    step_s, layer_s = eager_issue_s(step_launches, layer_launches, len(spec.layers))
    return EagerFloor(step_launches, layer_launches, step_s, layer_s)


def pool_host_costs(scn, pool: Pool, spec: ModelSpec) -> HostCosts:
    """The scenario's `timing.host` for `pool` serving `spec`'s model, with an eager step's issue time the
    engine's where it leaves it unset (`engine_eager_floor`; none where the engine graphs its prefill), and a
    decode step's floor the engine's host chain where unset (`spec_decode_host_chain_s`)."""
    costs = scn.timing.host.model_dump()
    engine = scn.pool_engine(pool)
    if costs["eager_step_s"] is None or costs["eager_per_layer_s"] is None:
        floor = engine_eager_floor(engine, pool, spec)
        for key in ("eager_step_s", "eager_per_layer_s"):
            if costs[key] is None:
                costs[key] = getattr(floor, key) if floor is not None else 0.0
    if costs["decode_floor_s"] is None:
        drafter = spec.drafter.kind if scn.spec_decode.enabled and spec.drafter is not None else None
        costs["decode_floor_s"] = spec_decode_host_chain_s(engine, spec.name, drafter)
    return HostCosts(**costs)


def pool_decode_layer_term(scn, pool: Pool) -> bool:
    """Whether `pool`'s decode steps carry the forward term's per-layer part: `timing.decode_layer_term`, or
    the pool's engine rule where it says `engine`."""
    setting = scn.timing.decode_layer_term
    return decode_layer_term(scn.pool_engine(pool)) if setting == "engine" else setting == "on"


class EnginePaths(NamedTuple):
    """Which kernels a pool's engine runs for V4.1's index layers on its GPU (sim.config.engine_rules)."""

    prefill_indexer: str  # kernel | torch | torch_fused_scores (sim.timing.torch_indexer)
    reindex_full_range: bool  # the Reindex layers score every position, then mask


def pool_engine_paths(scn, pool: Pool, hw: HwProfile, model: str) -> EnginePaths:
    """The pool's settings, or where they say auto its engine's rules on `hw`'s compute capability."""
    engine = scn.pool_engine(pool)
    cc = hw.accelerator.compute_capability
    cap = cc.value if cc is not None else None
    return EnginePaths(
        prefill_indexer(engine, cap, model, pool.prefill_indexer),
        reindex_full_range(engine, cap, pool.reindex_scoring),
    )


def pool_index_record(scn, pool: Pool, hw: HwProfile, spec: ModelSpec) -> dict | None:
    """For a model with Reindex layers (V4.1), what `pool`'s engine runs for its index layers on `hw`
    (`pool_engine_paths`): the prefill indexer (none in a disaggregated decode pool, which runs no prefill
    step), its table on that GPU and whether that table is measured or carried [D], and whether the Reindex
    layers score every position. None for a model without Reindex layers. `sim scenario check` prints it;
    a run's summary.json keeps it per pool."""
    from sim.timing import torch_indexer as ti
    from sim.timing.tables import gpu_key

    if not any(layer.selection == "reindex" for layer in spec.layers):
        return None
    paths = pool_engine_paths(scn, pool, hw, spec.name)
    prefills = pool.role != "decode"
    table = ti.POINTS_FILES.get((paths.prefill_indexer, gpu_key(hw))) if prefills else None
    return {
        "prefill_indexer": paths.prefill_indexer if prefills else None,
        "reindex_scoring": "full_range" if paths.reindex_full_range else "candidates",
        "indexer_table": "/".join(table) if table else None,
        "indexer_table_derived": ti.table_is_derived(paths.prefill_indexer, gpu_key(hw)) if table else None,
    }


def pool_kernel_stack(scn, pool: Pool, hw: HwProfile) -> str:
    """The kernel stack `pool`'s calibrated timing reads on `hw`: timing.kernels, `auto` resolved by the pool's
    engine (sim.timing.aic resolved_stack). `sim scenario check` prints it."""
    engine = scn.pool_engine(pool)
    return resolved_stack(scn.timing.kernels, engine.name if engine is not None else "", hw)


def pool_timing(
    scn, pool: Pool, hw: HwProfile, arith: ModelArith, model_ref, spec_step, engram_in_dram: bool
):
    """The timing model of one instance of `pool` on its hardware (sim.timing.factory)."""
    engine = scn.pool_engine(pool)
    cc = hw.accelerator.compute_capability
    paths = pool_engine_paths(scn, pool, hw, arith.name)
    experts = pool_expert_format(scn, arith.spec, hw, pool)
    ctx = TimingContext.of_instance(
        arith.name,
        _pool_arith(arith, pool, model_ref.kv_layout, paths.reindex_full_range),
        hw,
        Parallelism(
            gpus=pool.gpus_per_instance,
            tp=pool.tp,
            ep=pool.ep,
            dp=pool.dp,
            moe_a2a=pool.moe_a2a,
            deepep_normal_sms=pool.deepep_normal_sms or DEEPEP_DEFAULT_NORMAL_SMS,
        ),
        scn.timing,
        scn.achievable(pool),
        accepted_tokens_per_step=spec_step.accepted_tokens_per_step,
        draft_tokens=spec_step.draft_tokens,
        verify_rows=spec_step.verify_rows,
        engram_in_dram=engram_in_dram,
        vision_on_instance=True,
        kernels=pool_kernel_stack(scn, pool, hw),
        forward_term=scn.timing.forward_term,
        decode_layer_term=pool_decode_layer_term(scn, pool),
        row_buckets=tuple(scn.timing.graph_row_buckets),
        prefill_through_decode=scn.timing.prefill_attention == "decode_kernel",
        prefill_cp=pool.prefill_context_parallel,
        host=pool_host_costs(scn, pool, arith.spec),
        engine=engine.name if engine is not None else "",
        engine_glue=scn.timing.engine_glue,
        power_limit=scn.timing.power_limit == "measured",
        expert_activations=experts.activations,
        expert_alignment_rows=deepep_expert_alignment_rows(engine) if pool.moe_a2a == "deepep" else 1,
        prefill_indexer=paths.prefill_indexer,
        moe_runner=experts.module or "",
        megamoe_cap_rows=(megamoe_max_tokens_per_rank(engine, pool.megamoe_max_tokens_per_rank) or 0)
        if pool.moe_a2a == "megamoe"
        else 0,
    )
    # the engine's custom all-reduce takes the TP all-reduces up to its largest message, NCCL the rest
    fast_max_bytes = custom_allreduce_max_bytes(engine, cc.value if cc is not None else None, pool.tp)
    ctx = replace(ctx, hw=replace(ctx.hw, allreduce_custom_max_bytes=fast_max_bytes))
    return make_timing(scn.timing.model, ctx)


def build_pool(
    scn,
    pool: Pool,
    pool_index: int,
    arith: ModelArith,
    model_ref,
    spec_step,
    *,
    engram_in_dram: bool,
    first_node: int,
    first_instance: int,
) -> PoolBuild:
    """One pool's hardware, timing and HBM budget, and where its nodes and instances sit: its nodes are
    numbered from `first_node`, its instances from `first_instance` (pools follow each other in order)."""
    hw_id = scn.pool_hardware(pool)
    hw = load_hw(hw_id)
    gpn = hw.gpus_per_node
    gpi = pool.gpus_per_instance
    layout = scn.pool_layout(pool)
    timing = pool_timing(scn, pool, hw, arith, model_ref, spec_step, engram_in_dram)
    budget = hbm_budget(scn, pool, arith.spec, engram_in_hbm=not engram_in_dram)
    kv_cap = budget.kv_bytes
    if kv_cap <= 0.0:  # sim.preflight reports this, with the file, before any model runs
        raise InputError(
            f"{arith.name} weights leave no HBM for KV in pool {pool.name}", where="cluster.pools"
        )
    # a pool in instances gets its share of each node's host memory (sim.config.cluster)
    share = layout.node_share
    node = NodeSpec(
        pool=pool_index,
        hw=hw,
        achievable=scn.achievable(pool),
        share=share,
        dram_bytes=scn.node_dram_bytes(pool) * share,
        ssd_bytes=scn.node_ssd_bytes(pool) * share,
        net_bw_bytes_per_s=timing.link_bw_bytes_per_s("net", 1),
        net_latency_s=timing.link_latency_s("net"),
    )
    swa, swa_chunk = _swa_pool(scn, pool, arith, hw, budget.weights_bytes / gpi)
    per_node = max(1, gpn // gpi)
    nodes_per_inst = max(1, gpi // gpn)
    instances = [
        InstanceSpec(
            pool=pool.name,
            role=pool.role,
            node=first_node + (i // per_node if gpi <= gpn else i * nodes_per_inst),
            gpus=gpi,
            timing=timing,
            kv_capacity_bytes=kv_cap,
            kv_replication=pool.tp,
            dp_ranks=pool.dp,
            swa_pool=swa,
            swa_chunk_tokens=swa_chunk,
        )
        for i in range(layout.instances)
    ]
    info = PoolInfo(
        name=pool.name,
        role=pool.role,
        hw_id=hw_id,
        nodes=layout.nodes,
        gpus=layout.gpus,
        instances=layout.instances,
        gpus_per_instance=gpi,
        weights_bytes_per_instance=budget.weights_bytes,
        kv_bytes_per_instance=kv_cap,
        usd_per_hour=scn.pool_usd_per_hour(pool),
        timing=resolve_timing_name(scn.timing.model, hw, arith.name),
        index_paths=pool_index_record(scn, pool, hw, arith.spec),
    )
    return PoolBuild(
        pool=pool,
        info=info,
        nodes=[node] * layout.nodes,
        instances=instances,
        node_ids=list(range(first_node, first_node + layout.nodes)),
        instance_ids=list(range(first_instance, first_instance + layout.instances)),
    )


def _swa_pool(
    scn, pool, arith: ModelArith, hw: HwProfile, weights_bytes_per_gpu: float
) -> tuple[SwaPool | None, int]:
    """A colocated pool's SWA token pool per DP rank and the chunk a rank prefills, where its engine keeps one
    for the model (sim.config.engine_rules swa_token_pool), in the memory the engine's own rule keeps for KV
    (sim.sched.swa_pool.sglang_mem_fraction_static); (None, 0) elsewhere."""
    if pool.role != "colocated" or not swa_token_pool(scn.pool_engine(pool), arith.name):
        return None, 0
    sch, dp, gpi = scn.scheduler, pool.dp, pool.gpus_per_instance
    divided = scn.pool_step_rules(pool).dp_prefill_budget == "divided"
    chunk = max(1, sch.chunk_tokens // dp) if divided else sch.chunk_tokens
    gpu_mem_mib = hw.hbm_capacity_bytes / MIB
    frac = sglang_mem_fraction_static(gpu_mem_mib, chunked_prefill_tokens=sch.chunk_tokens, tp_size=gpi, dp_size=dp,
                                      dp_attention=dp > 1, deepep=pool.moe_a2a == "deepep")  # fmt: skip
    kv_bytes_per_gpu = hw.hbm_capacity_bytes * frac - weights_bytes_per_gpu
    swa = sglang_v4_swa_pool(arith.spec, kv_bytes_per_gpu=kv_bytes_per_gpu, speculative=scn.spec_decode.enabled,
                             running_per_rank=max(1, sch.max_decode_batch // dp))  # fmt: skip
    return swa, chunk


def build_pools(scn, arith: ModelArith, model_ref, spec_step, *, engram_in_dram: bool) -> list[PoolBuild]:
    """Every pool of the cluster in order, its nodes and instances numbered after the previous pool's."""
    built: list[PoolBuild] = []
    nodes = instances = 0
    for index, pool in enumerate(scn.cluster.pools):
        one = build_pool(
            scn,
            pool,
            index,
            arith,
            model_ref,
            spec_step,
            engram_in_dram=engram_in_dram,
            first_node=nodes,
            first_instance=instances,
        )
        built.append(one)
        nodes += len(one.nodes)
        instances += len(one.instances)
    return built


@dataclass(frozen=True)
class TierChain:
    """The KV store with its tiers below HBM, and the links that move KV between them and the GPUs."""

    store: KVStore
    links: LinkSet
    net_out: list[SharedLink]  # per node, RDMA sends (a prefill node's KV to the decode side)
    read_links: list[list]  # per instance, by chain index: the link a load into its HBM uses ([0], HBM: None)


def build_tier_chain(env: EventLoop, cache, policy: CachePolicy, lay: Layout) -> TierChain:
    """The tier chain below HBM and its links (sim.config.cache, sim.kvcache.paths), and the store over it.
    The links are made in a fixed order (NICs, tier writes, loads, SWA writes): the run depends on it."""
    net_out = [
        SharedLink(env, f"net_out[{n}]", node.net_bw_bytes_per_s, node.net_latency_s)
        for n, node in enumerate(lay.nodes)
    ]
    links = LinkSet(env)
    tiers, swa_caps = store_tiers(cache, policy, lay, links)
    n_inst = len(lay.instances)
    read_links = [
        [None, *(_link(links, "read", t.read, lay, i=i) for _n, t in cache.chain() if t.read is not None)]
        for i in range(n_inst)
    ]
    swa_write = [_link(links, "write", TierPath(link="pcie_d2h"), lay, i=i) for i in range(n_inst)]
    store = KVStore(
        policy,
        hbm_capacity_bytes=[s.kv_capacity_bytes for s in lay.instances],
        instance_node=[s.node for s in lay.instances],
        kv_replication=[s.kv_replication for s in lay.instances],
        tiers=tiers,
        swa_pool_capacity_bytes=swa_caps,
        swa_write_links=swa_write,
    )
    return TierChain(store=store, links=links, net_out=net_out, read_links=read_links)


def build_instances(env: EventLoop, scn, lay: Layout, chain: TierChain, cluster: Cluster) -> list[Instance]:
    """The serving instances of `cluster`, in the run's order, each on its node's links under its pool's
    step rules."""
    sch = scn.scheduler
    step_rules = {p.name: scn.pool_step_rules(p) for p in scn.cluster.pools}  # sim.config.engine_rules
    return [
        Instance(
            env,
            i,
            s.pool,
            s.role,
            s.node,
            s.gpus,
            s.timing,
            chain.store,
            cluster=cluster,
            budget_tokens=sch.prefill_budget_tokens,
            chunk_tokens=sch.chunk_tokens,
            max_decode_batch=sch.max_decode_batch,
            kv_replication=s.kv_replication,
            dp_ranks=s.dp_ranks,
            dp_budget_divided=step_rules[s.pool].dp_prefill_budget == "divided",
            step_composition=step_rules[s.pool].step_composition,
            rank_running_cap=max(1, sch.max_decode_batch // s.dp_ranks)
            if step_rules[s.pool].dp_running_cap == "per_rank" and s.dp_ranks > 1
            else 0,
            swa_pool=s.swa_pool,
            swa_chunk_tokens=s.swa_chunk_tokens,
            read_links=chain.read_links[i],
            max_queue_wait_s=sch.admission.max_queue_wait_s,
        )
        for i, s in enumerate(lay.instances)
    ]


def wire_cluster(
    env: EventLoop,
    scn,
    arith: ModelArith,
    lay: Layout,
    chain: TierChain,
    router: Router,
    recorder: Recorder,
) -> Cluster:
    """The cluster and its instances (it makes them, each given the cluster: sim.cluster.cluster says why):
    prefill or colocated in front, decode behind."""
    return Cluster(
        env,
        instances=lambda cluster: build_instances(env, scn, lay, chain, cluster),
        net_out=chain.net_out,
        store=chain.store,
        router=router,
        recorder=recorder,
        max_context_tokens=arith.max_context_tokens,
        max_queue_per_instance=scn.scheduler.admission.max_queue_per_instance,
    )


def pool_views(pools: list[PoolBuild], instances: list[Instance], chain: TierChain, cluster: Cluster):
    """What the sampler reads per pool (sim.metrics.timeseries): its instances, nodes and links."""
    links = chain.links
    return [
        PoolView(
            name=p.pool.name,
            role=p.pool.role,
            instances=[instances[i] for i in p.instance_ids],
            nodes=p.node_ids,
            h2d=links.of("read", "pcie_h2d", p.instance_ids, p.node_ids),
            d2h=links.of("write", "pcie_d2h", p.instance_ids, p.node_ids),
            ssd_read=links.of("read", "ssd_read", p.instance_ids, p.node_ids),
            ssd_write=links.of("write", "ssd_write", p.instance_ids, p.node_ids),
            net_out=[chain.net_out[n] for n in p.node_ids],
            net_in=[cluster.net_in[n] for n in p.node_ids],
        )
        for p in pools
    ]


def spec_decode_summary(sd, spec_step) -> dict:
    """The speculative decoding the run resolved, as the summary reports it."""
    return {
        "enabled": sd.enabled,
        "method": spec_step.method,
        "accepted_tokens_per_step": spec_step.accepted_tokens_per_step,
        "acceptance_source": spec_step.acceptance_source,
        "workload_kind": sd.workload_kind if sd.enabled else None,
        "draft_tokens": spec_step.draft_tokens,
        "verify_rows": spec_step.verify_rows,
    }


def build_simulation(
    scn,
    model_ref,
    arith: ModelArith,
    *,
    out_dir: Path | None,
    progress=None,
    run_id: str = "",
    env: EventLoop | None = None,
) -> Simulation:
    """One model's simulation, step by step: the pools (hardware, timing, placement), the tier chain and
    its links, the recorder and the router, the cluster with its instances, then the sampler.
    `env`: the loop to build on (the own loop if None; sim.cluster.simpy_loop for SimPy)."""
    env = EventLoop() if env is None else env
    family = model_ref.family
    policy = cache_policy(scn, family, arith.spec, model_ref.kv_layout)
    sd = scn.spec_decode
    spec_step = sd.choice(family, model_ref.accepted_tokens_per_step)
    engram_in_dram = scn.cluster.engram_placement == "host_dram" and arith.engram_table_bytes > 0

    pools = build_pools(scn, arith, model_ref, spec_step, engram_in_dram=engram_in_dram)
    lay = Layout(
        instances=[s for p in pools for s in p.instances],
        nodes=[n for p in pools for n in p.nodes],
    )
    chain = build_tier_chain(env, scn.cache, policy, lay)
    tier_names = [name for name, _t in sorted(scn.cache.tiers.items(), key=lambda item: item[1].rank)]
    model_dir = out_dir / arith.name if out_dir is not None else None
    recorder = Recorder(
        model_dir / "requests.parquet" if model_dir is not None and scn.outputs.write_requests else None,
        slo_ttft_s=scn.slo.ttft_s,
        slo_tpot_s=scn.slo.tpot_s,
        run_id=run_id,
        tiers=tier_names[1:],
    )
    router = Router(scn.scheduler.router.policy, scn.scheduler.router.weights, chain.store)
    cluster = wire_cluster(env, scn, arith, lay, chain, router, recorder)
    instances = cluster.instances
    sampler = Sampler(
        env,
        pools=pool_views(pools, instances, chain, cluster),
        cluster=cluster,
        store=chain.store,
        tier_names=tier_names,
        interval_s=scn.outputs.timeseries_interval_s,
        progress=progress,
    )
    infos = [p.info for p in pools]
    return Simulation(
        env=env,
        cluster=cluster,
        store=chain.store,
        recorder=recorder,
        sampler=sampler,
        policy=policy,
        arith=arith,
        pools=infos,
        instances=instances,
        front=cluster.front,
        back=cluster.back,
        usd_per_hour=sum(p.usd_per_hour for p in infos),
        family=family,
        tier_names=tier_names,
        extra={"spec_decode": spec_decode_summary(sd, spec_step), "engram_in_dram": engram_in_dram},
    )
