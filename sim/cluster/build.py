"""Build one model's simulation from a validated scenario: nodes, links, tiers, timing per pool,
instances, router, cluster wiring, recorder and sampler. Pure construction, no run.

Resolution rules (each a stated choice):
- HBM per instance = GPUs x usable HBM x (1 - activation_reserve_frac); weights take one copy of
  the routed experts (drafter's included: EP splits the experts, expert TP = GPUs / EP splits each
  one, as sim/config/cluster.py defines it and the timing models charge), DP copies of everything else
  (attention-TP shards it), and V4.1's Engram tables once (row-sharded) when they live in HBM;
  the rest holds KV. The latent KV is replicated on every attention-TP rank (model.md §9).
- Host DRAM per node: the profile's `dram_usable_for_kv_gb` (scaled if `cluster.node.dram_gb`
  overrides the installed size); V4.1's SWA pool takes `swa_pool_dram_frac` of installed DRAM
  out of it (model.md §10).
- SSD: one cluster-wide tier of every node's NVMe x `usable_for_kv_frac`, read through each
  node's own drives (a striped store like 3FS gives each reader about its share).
- Links: PCIe per instance (its GPUs' host links), NVMe read/write and the NICs per node (a
  prefill node's sends carry its KV to the decode side; one link per transfer, see sim.cluster.link).
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field, replace
from pathlib import Path

import simpy

from sim import units
from sim.cluster.cluster import Cluster
from sim.cluster.instance import Instance
from sim.cluster.link import FifoLink, SharedLink
from sim.errors import InputError
from sim.hardware import load_hw
from sim.kvcache.paths import kv_regions_per_block, path_rates
from sim.kvcache.policies import CachePolicy, TierCost
from sim.kvcache.store import KVStore
from sim.metrics.recorder import Recorder
from sim.metrics.timeseries import PoolView, Sampler
from sim.model import (
    compressor_state_bytes_per_sequence,
    global_kv_bytes_per_token,
    swa_bytes_per_sequence,
    swa_rebuild_tokens,
    swa_window_tokens,
    weights_bytes_by_group,
)
from sim.sched.router import Router
from sim.timing.arith import ModelArith
from sim.timing.factory import TimingContext, make_timing, resolve_timing_name
from sim.timing.roofline import Efficiency, HwRates, Parallelism

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


@dataclass
class Simulation:
    env: simpy.Environment
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
    extra: dict = field(default_factory=dict)


def cache_policy(scn, family: str, spec, kv_layout: str | None) -> CachePolicy:
    c = scn.cache
    eps = TIMESCALE_EPS_S
    common = dict(
        global_kv_bytes_per_token=global_kv_bytes_per_token(spec, kv_layout),  # model.md §5.1
        swa_state_bytes=swa_bytes_per_sequence(spec, kv_layout),  # model.md §5.2
        compressor_state_bytes=compressor_state_bytes_per_sequence(spec),  # model.md §5.2
        block_tokens=c.block_tokens,
        kv_regions_per_block=kv_regions_per_block(spec, kv_layout),  # sim.kvcache.paths
        read_cost={n: TierCost(t.read.per_request_s, t.read.per_segment_s) for n, t in c.chain() if t.read},
        write_cost={
            n: TierCost(t.write.per_request_s, t.write.per_segment_s) for n, t in c.chain() if t.write
        },
        swa_window_tokens=swa_window_tokens(spec),  # model.md §1
        hbm_keep_s=max(c.tier("hbm").ttl_s, eps),
        demote_to_dram=True,
        dram_ttl_s=max(c.tier("dram").ttl_s, eps),
        pool_ttl_s=max(c.tier("rdma_pool").ttl_s, eps),
    )
    rules = c.policy_for(family).store_rules(  # the family's own semantics: sim.config.family_cache
        ssd_ttl_s=c.tier("ssd").ttl_s,
        window_rebuild_tokens=swa_rebuild_tokens(spec, c.block_tokens),
        eps_s=eps,
    )
    return CachePolicy(family=family, **asdict(rules), **common)


def hw_rates(hw, scale_out_latency_s: float) -> HwRates:
    return HwRates(
        gpus_per_node=hw.gpus_per_node,
        scale_up_domain_gpus=hw.scale_up_domain_gpus,
        fp8_flops_per_s=hw.peak_flops_per_s("fp8"),
        bf16_flops_per_s=hw.peak_flops_per_s("bf16"),
        hbm_bw_bytes_per_s=hw.hbm_bw_bytes_per_s,
        scale_up_bw_bytes_per_s=hw.scale_up_bw_per_gpu_bytes_per_s,
        scale_up_latency_s=hw.scale_up.latency_us.value * units.US,
        scale_out_bw_per_gpu_bytes_per_s=hw.scale_out_bw_per_gpu_bytes_per_s,
        scale_out_bw_per_node_bytes_per_s=hw.scale_out_bw_per_node_bytes_per_s,
        scale_out_latency_s=scale_out_latency_s,
        pcie_bw_per_gpu_bytes_per_s=hw.pcie_bw_per_gpu_bytes_per_s,
        ssd_read_bytes_per_s=hw.ssd_read_bytes_per_s,
        ssd_write_bytes_per_s=hw.ssd_write_bytes_per_s,
    )


def efficiency(achievable: dict, timing) -> Efficiency:
    """The pool's achievable fractions (profile, with the scenario's overrides) and the
    scenario's fixed costs (`timing` block)."""
    mfu_prefill = achievable["mfu_prefill"]
    # a null decode MFU in the profile means "bandwidth-bound": compute at the prefill MFU
    mfu_decode = achievable["mfu_decode"] if achievable["mfu_decode"] is not None else mfu_prefill
    return Efficiency(
        mfu_prefill=mfu_prefill,
        mfu_decode=mfu_decode,
        hbm_bw_frac=achievable["hbm_bw_frac"],
        scale_up_bw_frac=achievable["scale_up_bw_frac"],
        scale_out_bw_frac=achievable["scale_out_bw_frac"],
        pcie_bw_frac=achievable["pcie_bw_frac"],
        ssd_bw_frac=achievable["ssd_bw_frac"],
        step_overhead_s=timing.kernel_overhead_s * timing.kernels_per_layer_step,  # x layers: see below
        comm_overlap_frac=timing.comm_overlap_frac,
    )


def instance_weight_bytes(spec, dp: int, engram_in_hbm: bool) -> float:
    """HBM the weights take in one instance (see the module doc)."""
    groups = weights_bytes_by_group(spec)
    experts = groups.get("routed_experts", 0.0) + groups.get("drafter_routed_experts", 0.0)
    engram = groups.get("engram_tables", 0.0)
    rest = sum(groups.values()) - experts - engram
    return experts + dp * rest + (engram if engram_in_hbm else 0.0)


@dataclass(frozen=True)
class HbmBudget:
    """HBM of one instance of a pool: what the weights take, what the activation reserve leaves."""

    weights_bytes: float
    usable_bytes: float  # all GPUs of the instance, after cluster.activation_reserve_frac

    @property
    def kv_bytes(self) -> float:
        return self.usable_bytes - self.weights_bytes


def hbm_budget(scn, pool, spec, *, engram_in_hbm: bool) -> HbmBudget:
    """The rule every consumer shares (the build, the preflight, the planner's pruning): weights plus
    the activation reserve must leave HBM for KV."""
    hw = scn.pool_profile(pool)
    gpi = pool.gpus_per_instance
    return HbmBudget(
        weights_bytes=instance_weight_bytes(spec, pool.dp, engram_in_hbm),
        usable_bytes=gpi * hw.hbm_capacity_bytes * (1.0 - scn.cluster.activation_reserve_frac),
    )


def _rdma_pool_tier(cache):
    """The enabled RDMA pool tier, or None. The store holds it between host DRAM and SSD (copies
    leaving DRAM go there); shared by all nodes (scope cluster) or by the nodes of one cluster pool."""
    held = ("hbm", "dram", "rdma_pool", "ssd")
    for name, other in cache.chain():
        if name not in held:  # `sim calibrate tiers` reports any tier; the store holds these four
            raise InputError(
                "the simulator's store holds the tiers hbm, dram, rdma_pool and ssd",
                where=f"cache.tiers.{name}.enabled",
                value=other.enabled,
                allowed="false (sim calibrate tiers --scenario reports the tier's path)",
            )
    tier = cache.tier("rdma_pool")
    if not tier.enabled:
        return None
    dram, ssd = cache.tier("dram"), cache.tier("ssd")
    problems = []
    if not dram.rank < tier.rank < ssd.rank:
        problems.append(("rank", tier.rank, f"between dram ({dram.rank}) and ssd ({ssd.rank})"))
    if tier.scope not in ("pool", "cluster"):
        problems.append(("scope", tier.scope, "pool, cluster"))
    if problems:
        field_, value, allowed = problems[0]
        raise InputError(
            "the RDMA pool sits between host DRAM and SSD, shared by nodes",
            where=f"cache.tiers.rdma_pool.{field_}",
            value=value,
            allowed=allowed,
        )
    return tier


def build_simulation(
    scn, model_ref, arith: ModelArith, *, out_dir: Path | None, progress=None, run_id: str = ""
) -> Simulation:
    env = simpy.Environment()
    spec = arith.spec
    family = model_ref.family
    policy = cache_policy(scn, family, spec, model_ref.kv_layout)
    sd = scn.spec_decode
    spec_step = sd.choice(family, model_ref.accepted_tokens_per_step)
    engram_in_dram = scn.cluster.engram_placement == "host_dram" and arith.engram_table_bytes > 0

    # nodes and instances, pools in order
    inst_specs = []  # (pool, role, node, gpus, timing, kv_capacity, replication)
    node_hw = []  # hardware profile per node
    node_timing = []
    pools: list[PoolInfo] = []
    views_meta = []
    node_dram = []  # (host DRAM, raw NVMe) per node that the pool may use, after the overrides
    node_share = []  # the share of each node's host memory its pool may use
    node_ach = []  # achievable fractions per node (its pool's hardware, the scenario's overrides)
    for pool in scn.cluster.pools:
        hw_id = scn.pool_hardware(pool)
        hw = load_hw(hw_id)
        gpn = hw.gpus_per_node
        gpi = pool.gpus_per_instance
        layout = scn.pool_layout(pool)
        first_node = len(node_hw)
        node_hw.extend([hw] * layout.nodes)
        n_inst = layout.instances
        rates = hw_rates(hw, scn.timing.scale_out_latency_s)
        eff = efficiency(scn.achievable(pool), scn.timing)
        eff = replace(eff, step_overhead_s=eff.step_overhead_s * arith.layers)
        par = Parallelism(gpus=gpi, tp=pool.tp, ep=pool.ep, dp=pool.dp)
        ctx = TimingContext(
            model_name=arith.name,
            arith=arith,
            hw_profile=hw,
            hw=rates,
            par=par,
            eff=eff,
            accepted_tokens_per_step=spec_step.accepted_tokens_per_step,
            draft_tokens=spec_step.draft_tokens,
            verify_rows=spec_step.verify_rows,
            engram_in_dram=engram_in_dram,
            vision_on_instance=True,
            kernels=scn.timing.kernels,
            forward_term=scn.timing.forward_term,
        )
        timing = make_timing(scn.timing.model, ctx)
        node_timing.extend([timing] * layout.nodes)
        budget = hbm_budget(scn, pool, spec, engram_in_hbm=not engram_in_dram)
        weights, kv_cap = budget.weights_bytes, budget.kv_bytes
        if kv_cap <= 0.0:  # sim.preflight reports this, with the file, before any model runs
            raise InputError(
                f"{arith.name} weights leave no HBM for KV in pool {pool.name}", where="cluster.pools"
            )
        per_node = max(1, gpn // gpi)
        nodes_per_inst = max(1, gpi // gpn)
        first_inst = len(inst_specs)
        for i in range(n_inst):
            node = first_node + (i // per_node if gpi <= gpn else i * nodes_per_inst)
            inst_specs.append((pool.name, pool.role, node, gpi, timing, kv_cap, pool.tp))
        pools.append(
            PoolInfo(
                name=pool.name,
                role=pool.role,
                hw_id=hw_id,
                nodes=layout.nodes,
                gpus=layout.gpus,
                instances=n_inst,
                gpus_per_instance=gpi,
                weights_bytes_per_instance=weights,
                kv_bytes_per_instance=kv_cap,
                usd_per_hour=scn.pool_usd_per_hour(pool),
                timing=resolve_timing_name(scn.timing.model, hw, arith.name),
            )
        )
        views_meta.append(
            (
                pool,
                list(range(first_node, first_node + layout.nodes)),
                list(range(first_inst, first_inst + n_inst)),
            )
        )
        # a pool in instances gets its share of each node's host memory (sim.config.cluster)
        share = layout.node_share
        node_dram.extend(
            [(scn.node_dram_bytes(pool) * share, scn.node_ssd_bytes(pool) * share)] * layout.nodes
        )
        node_share.extend([share] * layout.nodes)
        node_ach.extend([scn.achievable(pool)] * layout.nodes)

    # per-node memory and links; the tiers' capacities and paths come from the chain (sim.config.cache)
    dram_tier, ssd_tier = scn.cache.tier("dram"), scn.cache.tier("ssd")
    pool_tier = _rdma_pool_tier(scn.cache)
    dram_caps, swa_caps, ssd_total = [], [], 0.0
    ssd_read, ssd_write, net_out = [], [], []
    for n, hw in enumerate(node_hw):
        installed, raw_ssd = node_dram[n]
        # the profile's usable share of DRAM for KV, applied to the (possibly overridden) size
        usable = installed * hw.host_dram_usable_for_kv_bytes / hw.host_dram_bytes
        if dram_tier.capacity_gb_per_node is not None:
            usable = dram_tier.capacity_gb_per_node * units.GB * node_share[n]
        swa = policy.swa_pool_dram_frac * installed if policy.swa_pool else 0.0
        dram_caps.append(max(0.0, usable - swa))
        swa_caps.append(swa)
        if ssd_tier.capacity_gb_per_node is not None:
            ssd_total += ssd_tier.capacity_gb_per_node * units.GB * node_share[n]
        else:
            ssd_total += raw_ssd * hw.local_storage.usable_for_kv_frac.value
        t, ach = node_timing[n], node_ach[n]
        assert ssd_tier.read is not None and ssd_tier.write is not None  # validated (sim.config.cache)
        ssd_read.append(
            SharedLink(env, f"ssd_read[{n}]", path_rates(ssd_tier.read, hw, ach, 1).bw_bytes_per_s)
        )
        ssd_write.append(FifoLink(f"ssd_write[{n}]", path_rates(ssd_tier.write, hw, ach, 1).bw_bytes_per_s))
        net_out.append(
            SharedLink(env, f"net_out[{n}]", t.link_bw_bytes_per_s("net", 1), t.link_latency_s("net"))
        )
    # the RDMA pool: units by scope, each the sum of its nodes' contributions, reached over the nodes' NICs
    pool_caps: list[float] = []
    pool_unit_of_node: list[int] = []
    pool_read: list[SharedLink] = []
    pool_write: list[FifoLink] = []
    if pool_tier is not None:
        assert pool_tier.read is not None and pool_tier.write is not None and pool_tier.capacity_gb_per_node
        node_pool = [i for i, (_p, nodes, _i) in enumerate(views_meta) for _n in nodes]
        pool_unit_of_node = node_pool if pool_tier.scope == "pool" else [0] * len(node_hw)
        pool_caps = [0.0] * (max(pool_unit_of_node) + 1)
        for n, hw in enumerate(node_hw):
            pool_caps[pool_unit_of_node[n]] += pool_tier.capacity_gb_per_node * units.GB * node_share[n]
            nics = path_rates(pool_tier.read, hw, node_ach[n], hw.gpus_per_node).bw_bytes_per_s
            lat = node_timing[n].link_latency_s("net")
            pool_read.append(SharedLink(env, f"pool_read[{n}]", nics, lat))
            nics = path_rates(pool_tier.write, hw, node_ach[n], hw.gpus_per_node).bw_bytes_per_s
            pool_write.append(FifoLink(f"pool_write[{n}]", nics, lat))
    h2d, d2h = [], []
    assert dram_tier.read is not None and dram_tier.write is not None
    for i, (_pool, _role, node, gpus, _timing, _cap, _rep) in enumerate(inst_specs):
        hw, ach = node_hw[node], node_ach[node]
        h2d.append(
            SharedLink(env, f"pcie_h2d[{i}]", path_rates(dram_tier.read, hw, ach, gpus).bw_bytes_per_s)
        )
        d2h.append(FifoLink(f"pcie_d2h[{i}]", path_rates(dram_tier.write, hw, ach, gpus).bw_bytes_per_s))

    store = KVStore(
        policy,
        hbm_capacity_bytes=[s[5] for s in inst_specs],
        instance_node=[s[2] for s in inst_specs],
        kv_replication=[s[6] for s in inst_specs],
        d2h_links=d2h,
        dram_capacity_bytes=dram_caps,
        swa_pool_capacity_bytes=swa_caps,
        ssd_capacity_bytes=ssd_total,
        ssd_write_links=ssd_write,
        pool_capacity_bytes=pool_caps,
        pool_unit_of_node=pool_unit_of_node,
        pool_write_links=pool_write,
    )
    model_dir = out_dir / arith.name if out_dir is not None else None
    recorder = Recorder(
        model_dir / "requests.parquet" if model_dir is not None and scn.outputs.write_requests else None,
        slo_ttft_s=scn.slo.ttft_s,
        slo_tpot_s=scn.slo.tpot_s,
        run_id=run_id,
    )
    router = Router(scn.scheduler.router.policy, scn.scheduler.router.weights, store)
    sch = scn.scheduler
    instances: list[Instance] = []
    for i, (pool_name, role, node, gpus, timing, _cap, rep) in enumerate(inst_specs):
        instances.append(
            Instance(
                env,
                i,
                pool_name,
                role,
                node,
                gpus,
                timing,
                store,
                budget_tokens=sch.prefill_budget_tokens,
                chunk_tokens=sch.chunk_tokens,
                max_decode_batch=sch.max_decode_batch,
                kv_replication=rep,
                h2d=h2d[i],
                ssd_read=ssd_read[node],
                pool_read=pool_read[node] if pool_read else None,
                max_queue_wait_s=sch.admission.max_queue_wait_s,
            )
        )
    front = [inst for inst in instances if inst.role != "decode"]
    back = [inst for inst in instances if inst.role == "decode"]
    cluster = Cluster(
        env,
        front=front,
        back=back,
        net_out=net_out,
        store=store,
        router=router,
        recorder=recorder,
        max_context_tokens=arith.max_context_tokens,
        max_queue_per_instance=sch.admission.max_queue_per_instance,
    )
    for inst in instances:
        inst.cluster = cluster
    views = [
        PoolView(
            name=pool.name,
            role=pool.role,
            instances=[instances[i] for i in inst_ids],
            nodes=node_ids,
            h2d=[h2d[i] for i in inst_ids],
            d2h=[d2h[i] for i in inst_ids],
            ssd_read=[ssd_read[n] for n in node_ids],
            ssd_write=[ssd_write[n] for n in node_ids],
            net_out=[net_out[n] for n in node_ids],
            net_in=[cluster.net_in[n] for n in node_ids],
        )
        for pool, node_ids, inst_ids in views_meta
    ]
    sampler = Sampler(
        env,
        pools=views,
        cluster=cluster,
        store=store,
        interval_s=scn.outputs.timeseries_interval_s,
        progress=progress,
    )
    return Simulation(
        env=env,
        cluster=cluster,
        store=store,
        recorder=recorder,
        sampler=sampler,
        policy=policy,
        arith=arith,
        pools=pools,
        instances=instances,
        front=front,
        back=back,
        usd_per_hour=sum(p.usd_per_hour for p in pools),
        family=family,
        extra={
            "spec_decode": {
                "enabled": sd.enabled,
                "method": spec_step.method,
                "accepted_tokens_per_step": spec_step.accepted_tokens_per_step,
                "draft_tokens": spec_step.draft_tokens,
                "verify_rows": spec_step.verify_rows,
            },
            "engram_in_dram": engram_in_dram,
        },
    )
