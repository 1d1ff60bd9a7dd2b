"""`cluster:` of a scenario: pools of identical instances, and node-level overrides.

Parallelism rule of one instance (documented here because every consumer relies on it):
- attention runs as `dp` data-parallel groups of `tp` tensor-parallel GPUs: tp x dp = gpus_per_instance;
- the MoE layers run expert-parallel over `ep` GPUs, with expert TP = gpus_per_instance / ep,
  so `ep` must divide gpus_per_instance.
An instance either fits in a node (gpus_per_instance divides GPUs per node) or spans whole nodes
(a multiple of GPUs per node, and the pool's node count a multiple of nodes per instance); those
checks need the hardware profile and run in `scenario.py`.

A pool is sized in `nodes` (whole nodes, every GPU an instance) or in `instances` (any count of
instances of 1, 2, 4 or 8 GPUs, packed onto as few nodes of the profile as hold them). A pool in
instances pays per GPU it uses (the node's price x GPUs used / GPUs per node) and gets the same
share of each node's host DRAM and SSD for KV; `Scenario.pool_layout` resolves both forms.

`cells` makes the cluster one cell of a fleet of identical cells behind a global router that sends
each session, whole, to one cell (sim.fleet): within a cell everything is as without cells.
"""

from __future__ import annotations

from typing import Literal

from pydantic import Field, field_validator, model_validator

from sim.config.base import StrictModel
from sim.config.engine_rules import Engine
from sim.config.errors import Problem, field_error, raise_problems

_NAME = r"^[A-Za-z0-9][A-Za-z0-9_.-]*$"
# A bound of ours [D]: the simulator holds every node and instance as objects (10,000 nodes of 8 GPUs
# took 0.2 GB and 8 s to build for a 400-request run); beyond it memory, not hardware, is the limit.
MAX_POOL_NODES = 10_000
MAX_POOL_INSTANCES = 80_000  # one GPU each on MAX_POOL_NODES nodes of 8


class Pool(StrictModel):
    """A group of `nodes` nodes of one hardware type running instances of one role."""

    name: str = Field(pattern=_NAME, description="unique pool name")
    role: Literal["prefill", "decode", "colocated"] = Field(description="disaggregated P or D, or both")
    hardware: str | None = Field(None, description="hardware profile id; default: the scenario's `hardware`")
    engine: Engine | None = Field(
        None, description="this pool's serving engine where it differs from the scenario's"
    )
    nodes: int | None = Field(
        None, ge=1, le=MAX_POOL_NODES, description="number of whole nodes in the pool (or give instances)"
    )
    instances: int | None = Field(
        None,
        ge=1,
        le=MAX_POOL_INSTANCES,
        description="number of instances (or give nodes): packed onto nodes, priced per GPU",
    )
    gpus_per_instance: int = Field(ge=1, description="GPUs of one serving instance (engine)")
    tp: int = Field(1, ge=1, description="attention tensor-parallel degree")
    ep: int = Field(1, ge=1, description="MoE expert-parallel degree (divides gpus_per_instance)")
    dp: int = Field(1, ge=1, description="attention data-parallel degree")
    prefill_context_parallel: Literal["off", "round_robin", "zigzag"] = Field(
        "off",
        description="how the tp GPUs of the attention group share a prefill step: off = by attention head; "
        "round_robin / zigzag = by token position (SGLang --nsa-prefill-cp-mode round-robin-split / "
        "in-seq-split, CP size = tp); needs tp >= 2 and dp = 1 (sim/timing/context_parallel.py)",
    )  # SGLang's DeepSeek-V4 recipes leave it off except the Context-Parallel one (round_robin)
    moe_a2a: Literal["link", "deepep", "megamoe"] = Field(
        "link",
        description="how the EP ranks exchange tokens around each MoE layer: link = their bytes over the scale-up "
        "link, timing.comm_overlap_frac hidden; deepep = DeepEP's measured kernels (the hardware profile's "
        "scale_up.deepep; SGLang --moe-a2a-backend deepep: low-latency in decode steps, normal in steps with "
        "prefill, not overlapped); megamoe = fused into DeepGEMM's Mega MoE kernel, no separate exchange "
        "(--moe-a2a-backend megamoe) [D] (sim/timing/roofline.py)",
    )
    megamoe_max_tokens_per_rank: int | None = Field(
        None,
        ge=1,
        description="the most tokens a DP rank may hold in a step for it to run Mega MoE (SGLang "
        "SGLANG_OPT_DEEPGEMM_MEGA_MOE_NUM_MAX_TOKENS_PER_RANK); a step over it runs the engine's fallback (SGLang: "
        "Triton's fused MoE over the DP-gathered tokens); unset: the engine's rule (sim.config.engine_rules "
        "megamoe_max_tokens_per_rank: SGLang 1,024; none read for vLLM: no cap); only with moe_a2a megamoe",
    )
    deepep_normal_sms: int | None = Field(
        None,
        ge=2,
        description='SMs DeepEP\'s normal kernels run on (SGLang --deepep-config \'{"normal_dispatch": {"num_sms": '
        "N}, ...}'; even, at most the GPU's SMs); unset: DeepEP's default Buffer.num_sms, 20; only with moe_a2a "
        "deepep (sim/timing/comm.py deepep_normal_per_token_s)",
    )
    prefill_decoder_tail: Literal["auto", "on", "off"] = Field(
        "auto",
        description="whether the pool's engine runs V4.1's decoder layers on each request's last rows only "
        "(CED, decoder SWA bounded replay): auto = only without DP attention and prefill CP (SGLang refuses "
        "the combination; vLLM has not merged it), on / off = everywhere / nowhere; no effect on models "
        "without a decoder tail (sim/timing/decoder_tail.py)",
    )

    reindex_scoring: Literal["auto", "candidates", "full_range"] = Field(
        "auto",
        description="how the pool's engine scores V4.1's Reindex layers (24/28/32/36) in decode and prefill: "
        "candidates = only the ≤ 16,384 positions layer 20 publishes (the model's design; vLLM --attention-config "
        "indexer_sparse_logits: true), full_range = every compressed position, then masked (the engines' dense "
        "path: a Reindex layer costs a Full one); auto = the engine's rule (sim.config.engine_rules "
        "reindex_scoring; no engine named: candidates); no effect on models without Reindex layers",
    )

    prefill_indexer: Literal["auto", "kernel", "torch", "torch_fused_scores"] = Field(
        "auto",
        description="what runs V4.1's prefill index layers: kernel = a fused MQA-logits kernel (sim's measured "
        "DeepGEMM indexer tables, at the chunk's index FLOPs), torch = SGLang's eager torch path on Hopper "
        "(BF16 scores materialised over every visible position, per request and layer; measured on the H100, "
        "carried to the H200, sim/timing/torch_indexer.py; calibrated timing only), torch_fused_scores = the "
        "same path with SGLang's opt-in fused score kernel (SGLANG_OPT_USE_FUSED_DSV41_INDEXER_SCORES=1; "
        "measured likewise); auto = the engine's rule (sim.config.engine_rules v41_prefill_indexer, which never "
        "picks torch_fused_scores; no engine named: kernel); no effect on models other than V4.1",
    )

    moe_runner: Literal["auto", "marlin", "flashinfer_cutlass", "flashinfer_trtllm"] = Field(
        "auto",
        description="the engine's MoE runner where sim times it from a measured module: marlin = Marlin's W4A16 MoE "
        "(vLLM --moe-backend marlin, SGLang --moe-runner-backend marlin; H100 / H200, sim/timing/marlin.py), "
        "flashinfer_cutlass = FlashInfer's SM90 CUTLASS W4A16 MoE (vLLM --moe-backend flashinfer_cutlass, SGLang "
        "--moe-runner-backend flashinfer_mxfp4 on Hopper; measured on the H100, the H200 takes its rows), "
        "flashinfer_trtllm = FlashInfer's TRT-LLM-gen MXFP4 MoE, W4A8 (SGLang --moe-runner-backend flashinfer_mxfp4 "
        "on Blackwell; AIConfigurator's module on the B200 / B300); the W4A16 runners need the experts W4A16 "
        "(models[].expert_activations bf16) on a GPU without FP4 MMAs, flashinfer_trtllm W4A8 on one with them; "
        "auto = marlin for W4A16 experts on Hopper, the kernel tables or Mega MoE elsewhere "
        "(sim/timing/engine_moe.py; calibrated timing only)",
    )

    @field_validator("hardware")
    @classmethod
    def _known_hardware(cls, name: str | None) -> str | None:
        return None if name is None else known_hardware(name)

    @model_validator(mode="after")
    def _parallelism(self) -> Pool:
        problems = []
        if (self.nodes is None) == (self.instances is None):
            problems.append(
                Problem(
                    "nodes",
                    "both nodes and instances given" if self.nodes else "neither nodes nor instances given",
                    self.nodes,
                    "exactly one of: nodes, instances",
                )
            )
        if self.tp * self.dp != self.gpus_per_instance:
            problems.append(
                Problem(
                    "tp",
                    f"tp x dp must equal gpus_per_instance ({self.tp} x {self.dp} = {self.tp * self.dp}, "
                    f"gpus_per_instance = {self.gpus_per_instance})",
                    self.tp,
                    f"tp = gpus_per_instance / dp = {self.gpus_per_instance / self.dp:g}",
                )
            )
        if self.prefill_context_parallel != "off" and (self.tp < 2 or self.dp != 1):
            problems.append(
                Problem(
                    "prefill_context_parallel",
                    f"prefill context parallelism spreads a step's rows over the tp GPUs of one attention group: "
                    f"needs tp >= 2 and dp = 1 (got tp {self.tp}, dp {self.dp})",
                    self.prefill_context_parallel,
                    "off, or tp = gpus_per_instance with dp 1",
                )
            )
        if self.deepep_normal_sms is not None and (self.moe_a2a != "deepep" or self.deepep_normal_sms % 2):
            problems.append(
                Problem(
                    "deepep_normal_sms",
                    "sets DeepEP's normal kernels: needs moe_a2a deepep"
                    if self.moe_a2a != "deepep"
                    else "DeepEP runs its normal kernels on SM pairs (one channel each): an even count",
                    self.deepep_normal_sms,
                    "an even number with moe_a2a: deepep, or unset"
                    if self.moe_a2a == "deepep"
                    else "unset, or moe_a2a: deepep",
                )
            )
        if self.gpus_per_instance % self.ep:
            problems.append(
                Problem(
                    "ep",
                    f"ep must divide gpus_per_instance ({self.gpus_per_instance})",
                    self.ep,
                    ", ".join(str(d) for d in _divisors(self.gpus_per_instance)),
                )
            )
        raise_problems(problems)
        return self


class NodeOverrides(StrictModel):
    """What-if changes to every node's memory (priced by `pricing.dram_usd_per_gb` / `ssd_usd_per_tb`)."""

    dram_gb: float | None = Field(
        None, gt=0, description="host DRAM per node, decimal GB (replaces the profile's)"
    )
    ssd_tb: float | None = Field(
        None, ge=0, description="local NVMe per node, decimal TB (replaces the profile's)"
    )


MAX_CELLS = 4096  # a bound of ours [D]: one trace file per cell is open while the trace is split


class Cells(StrictModel):
    """The fleet: `count` cells, each this cluster, and the policy that sends a session to a cell."""

    count: int = Field(ge=1, le=MAX_CELLS, description="cells in the fleet, each `cluster.pools`")
    router: Literal["hash", "least_loaded", "tenant"] = Field(
        "hash",
        description="session to cell: hash = a stable hash of the session id; least_loaded = the cell "
        "with the fewest requests in the previous interval (plus those the sessions it was sent this "
        "interval are expected to bring); tenant = `pins`, other tenants by hash",
    )
    interval_s: float = Field(3600.0, gt=0, description="least_loaded: the load interval")
    pins: dict[str, int] = Field(default_factory=dict, description="tenant: its cell (router tenant)")

    @model_validator(mode="after")
    def _pins_in_range(self) -> Cells:
        problems = [
            Problem(f"pins.{tenant}", "no such cell", cell, f"0..{self.count - 1}")
            for tenant, cell in self.pins.items()
            if not 0 <= cell < self.count
        ]
        if self.pins and self.router != "tenant":
            problems.append(Problem("pins", "pins apply to router tenant only", self.router, "tenant"))
        raise_problems(problems)
        return self


class Cluster(StrictModel):
    pools: list[Pool] = Field(min_length=1, description="all colocated, or prefill + decode pools")
    node: NodeOverrides = Field(default_factory=NodeOverrides)
    activation_reserve_frac: float = Field(
        0.10, ge=0.0, le=0.5, description="HBM fraction kept for activations and runtime, not weights or KV"
    )  # a choice [D]: engines reserve ~5-15 % (e.g. vLLM gpu_memory_utilization 0.9)
    engram_placement: Literal["hbm", "host_dram"] = Field(
        "hbm", description="where V4.1's Engram tables (model.md §9 #10: 202.8 GB) live"
    )
    cells: Cells | None = Field(None, description="a fleet of cells of these pools (sim.fleet); null: one")

    @field_validator("cells", mode="before")
    @classmethod
    def _count_alone(cls, value):
        return {"count": value} if isinstance(value, int) and not isinstance(value, bool) else value

    @model_validator(mode="after")
    def _pools_consistent(self) -> Cluster:
        problems = []
        seen: dict[str, int] = {}
        for i, pool in enumerate(self.pools):
            if pool.name in seen:
                problems.append(
                    Problem(
                        f"pools[{i}].name", f"duplicate pool name (also pools[{seen[pool.name]}])", pool.name
                    )
                )
            seen.setdefault(pool.name, i)
        roles = {p.role for p in self.pools}
        if "colocated" in roles and roles != {"colocated"}:
            problems.append(
                Problem(
                    "pools",
                    "mixes colocated pools with prefill/decode pools",
                    sorted(roles),
                    "all colocated, or prefill + decode",
                )
            )
        elif roles and roles != {"colocated"} and roles != {"prefill", "decode"}:
            missing = ({"prefill", "decode"} - roles).pop()
            problems.append(
                Problem(
                    "pools",
                    f"disaggregated serving needs a {missing} pool",
                    sorted(roles),
                    "all colocated, or at least one prefill and one decode pool",
                )
            )
        raise_problems(problems)
        return self


def known_hardware(name: str) -> str:
    """`name` if it is a profile of hwprofiles/, else a field error listing the profiles."""
    from sim.hardware import hw_names  # lazy: sim.hardware imports sim.config helpers

    known = hw_names()
    if name not in known:
        raise field_error("unknown hardware profile", known)
    return name


def _divisors(n: int) -> list[int]:
    return [d for d in range(1, n + 1) if n % d == 0]
