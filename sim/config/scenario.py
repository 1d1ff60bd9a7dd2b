"""The scenario: one YAML file that says what to simulate. `load_scenario(path)` reads it.

Every problem of a file is reported at once, one line each, as
`FILE: field.path: message (got VALUE); allowed: ...`, through one `InputError`.

Top-level keys (details and units in each section's module):
    name, description, seed               identity and the one seed of the run (sim.rng)
    models       list of model names or {name, prefill_mode, kv_layout}; each run simulates one
    hardware     default hardware profile id (hwprofiles/<id>.yaml)
    engine       the serving engine {name: vllm|sglang, version} whose rules apply (sim.config.engine_rules)
    cluster      pools of nodes and instances (sim.config.cluster)
    workload     trace or generator, replay mode, time window (sim.config.workload)
    cache        KV tier policy and per-family rules (sim.config.cache)
    scheduler    router, batching, admission (sim.config.scheduler)
    timing, spec_decode                   step-time model and speculative decoding (sim.config.timing)
    slo, pricing, outputs                 (sim.config.objectives)
    event_loop, extensions                the loop and user SimPy processes (sim.config.extensions)
    capacity     the capacity search of `sim run`, or `capacity: off` (sim.config.capacity)
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

from pydantic import Field, PrivateAttr, field_validator, model_serializer, model_validator

from sim import units
from sim.config.base import StrictModel
from sim.config.cache import Cache
from sim.config.capacity import CapacitySearch
from sim.config.cluster import Cluster, Pool, known_hardware
from sim.config.engine_rules import Engine, StepRules, pool_step_rules
from sim.config.errors import Problem, field_error, raise_problems, validate_or_raise
from sim.config.extensions import EventLoopName, Extension
from sim.config.families import model_family, servable_models
from sim.config.objectives import Outputs, ScenarioPricing, Slo
from sim.config.scheduler import Scheduler
from sim.config.timing import SpecDecode, Timing
from sim.config.workload import Workload
from sim.config.yamlio import read_yaml_mapping

if TYPE_CHECKING:
    from sim.hardware import HwProfile, NodeCost


@dataclass(frozen=True)
class PoolLayout:
    """Where a pool's instances sit: `nodes` nodes, `instances` instances, `gpus` GPUs in use
    (a pool in instances may leave part of its last node to others; it pays per GPU used)."""

    nodes: int
    instances: int
    gpus: int
    gpus_per_node: int

    @property
    def node_share(self) -> float:
        """Share of its nodes' GPUs (and so of their price, host DRAM and SSD) the pool uses."""
        return self.gpus / (self.nodes * self.gpus_per_node)


class ModelRef(StrictModel):
    """A model to simulate, with optional engine choices (sim.model documents their meaning)."""

    name: str = Field(description="a name from sim.model.model_names()")
    prefill_mode: Literal["ced", "engine", "full40", "full"] | None = Field(
        None, description="V4.1 prefill path (model.md §9 #8); null = the model's default"
    )
    kv_layout: str | None = Field(
        None, description="KV byte layout (model.md §9 #2); null = the model's default"
    )
    expert_activations: Literal["fp8", "fp4", "bf16"] | None = Field(
        None,
        description="the format the engine gives the MXFP4 routed experts' activations: fp8 = W4A8 (SGLang's and "
        "vLLM's MXFP4 runners on GPUs with native FP4, at the FP8 MMA rate; elsewhere the GPU's measured FP8 "
        "experts, held in FP8 in HBM: an FP8 checkpoint or a conversion, sim.cluster.build.experts_held_in_fp8); fp4 = W4A4, an NVFP4 checkpoint on vLLM, at the FP4 rate; bf16 = W4A16, the weights "
        "dequantised in the kernel: Marlin (vLLM's --moe-backend marlin, SGLang's --moe-runner-backend marlin) "
        "on the H200 or the H100, timed as AIConfigurator measured Marlin's module there (sim.timing.marlin), "
        "at the BF16 rate on GPUs with native FP4 (sim.timing.carry "
        "rule 4); null = the stock deployment on each pool's GPU (sim.cluster.build.expert_activations_on): fp8 on "
        "GPUs with FP4 MMAs and for models with an FP8 expert checkpoint (V4), else bf16 where Marlin is measured "
        "(V4.1 on the H200 and the H100), else fp8 (a conversion)",
    )
    pools: list[Pool] | None = Field(
        None,
        min_length=1,
        description="this model's own pools (cluster.pools' fields), on the scenario's cluster settings: "
        "the deployment its engine starts, sized for it; null = cluster.pools",
    )
    accepted_tokens_per_step: float | None = Field(
        None,
        ge=1,
        description="this model's mean accepted tokens per verify step when spec_decode is enabled; "
        "null = spec_decode.<family>.accepted_tokens_per_step, else the measured curve (sim/model/acceptance.yaml)",
    )

    @field_validator("name")
    @classmethod
    def _known_model(cls, name: str) -> str:
        known = _model_names()
        if name not in known:
            raise field_error("unknown model", [n for n in known if n in servable_models()])
        if name not in servable_models():
            raise field_error("a reference-only model cannot be served", servable_models())
        return name

    @model_validator(mode="after")
    def _engine_choices(self) -> ModelRef:
        from sim.model import load_model

        spec = load_model(self.name)
        problems = []
        if self.prefill_mode is not None and self.prefill_mode not in spec.prefill_modes:
            problems.append(
                Problem(
                    "prefill_mode",
                    f"not a prefill mode of {self.name}",
                    self.prefill_mode,
                    ", ".join(spec.prefill_modes),
                )
            )
        if self.kv_layout is not None and self.kv_layout not in spec.kv_layouts:
            problems.append(
                Problem(
                    "kv_layout", f"not a KV layout of {self.name}", self.kv_layout, ", ".join(spec.kv_layouts)
                )
            )
        raise_problems(problems)
        return self

    @property
    def family(self) -> str:
        """`v4` or `v41`: the key of this model's blocks in `cache` and `spec_decode`."""
        return model_family(self.name)


class Scenario(StrictModel):
    name: str = Field(
        pattern=r"^[A-Za-z0-9][A-Za-z0-9_.-]*$", description="short name, used in output file names"
    )
    description: str = ""
    seed: int = Field(0, ge=0, description="the run's only seed (sim.rng.RngStreams)")
    models: list[ModelRef] = Field(min_length=1, description="models to simulate, one run each")
    hardware: str = Field(description="default hardware profile id for pools that name none")
    engine: Engine | None = Field(
        None,
        description="the serving engine whose rules apply (a pool's own `engine` overrides); null = sim's "
        "generic defaults and no engine's refusals (sim.config.engine_rules)",
    )
    cluster: Cluster
    workload: Workload
    cache: Cache = Field(default_factory=Cache)
    scheduler: Scheduler = Field(default_factory=Scheduler)
    timing: Timing = Field(default_factory=Timing)
    spec_decode: SpecDecode = Field(default_factory=SpecDecode)
    slo: Slo = Field(default_factory=Slo)
    pricing: ScenarioPricing = Field(default_factory=ScenarioPricing)
    outputs: Outputs = Field(default_factory=Outputs)
    event_loop: EventLoopName = Field("native", description="native (fast) or simpy: same outputs")
    extensions: list[Extension] = Field(default_factory=list, description="user SimPy processes")
    capacity: CapacitySearch = Field(default_factory=CapacitySearch)

    # Hardware profiles of the pools, read once during validation (not a field; not serialised).
    _profiles: dict[str, HwProfile] = PrivateAttr(default_factory=dict)
    # The file it was read from (`load_scenario`), for messages about the scenario as a whole.
    _file: str | None = PrivateAttr(None)

    @model_serializer(mode="wrap")
    def _inputs_only(self, handler):
        """The loop is no input of the run (both give the same bytes): left out, so that the run id
        and summary.json do not depend on it; no extensions is left out too, so a scenario without
        any keeps the run id and outputs it had before extensions existed."""
        out = handler(self)
        out.pop("event_loop", None)
        if not self.extensions:
            out.pop("extensions", None)
        return out

    @field_validator("models", mode="before")
    @classmethod
    def _names_to_refs(cls, value: Any) -> Any:
        if isinstance(value, list):
            return [{"name": v} if isinstance(v, str) else v for v in value]
        return value

    @field_validator("hardware")
    @classmethod
    def _known_hardware(cls, name: str) -> str:
        return known_hardware(name)

    @model_validator(mode="after")
    def _cross_checks(self) -> Scenario:
        from sim.hardware import load_hw

        problems: list[Problem] = []
        names = [m.name for m in self.models]
        problems += [
            Problem(f"models[{i}].name", "model listed twice", n)
            for i, n in enumerate(names)
            if n in names[:i]
        ]
        profiles = {}
        placed = [("cluster.pools", self.cluster.pools)]
        placed += [(f"models[{k}].pools", m.pools) for k, m in enumerate(self.models) if m.pools is not None]
        for where, pools in placed:
            for i, pool in enumerate(pools):
                hw_name = self.pool_hardware(pool)
                profiles.setdefault(hw_name, load_hw(hw_name))
                problems += _pool_fits_hardware(f"{where}[{i}]", pool, profiles[hw_name])
            if where != "cluster.pools":
                problems += _own_pools_problems(where, self.cluster, pools)
        self._profiles = profiles
        problems += _spec_decode_problems(self.models, self.spec_decode)
        problems += _pricing_problems(self.pricing, profiles)
        problems += _capacity_problems(self.capacity, self.workload)
        raise_problems(problems)
        return self

    def for_model(self, model: str) -> Scenario:
        """This scenario as `model` runs it: its own pools (`models[].pools`) as `cluster.pools`."""
        ref = next(m for m in self.models if m.name == model)
        if ref.pools is None:
            return self
        return self.model_copy(update={"cluster": self.cluster.model_copy(update={"pools": ref.pools})})

    @property
    def source_file(self) -> str | None:
        """The YAML file this scenario was read from, or None when built in code."""
        return self._file

    def pool_engine(self, pool: Pool) -> Engine | None:
        """The engine serving a pool (its own, or the scenario's), or None."""
        return pool.engine or self.engine

    def pool_step_rules(self, pool: Pool) -> StepRules:
        """How the pool's engine makes its steps: `scheduler` settings, else its engine's rules."""
        return pool_step_rules(self.pool_engine(pool), pool.model_dump(), self.spec_decode.enabled,
                               self.scheduler.model_dump())  # fmt: skip

    def pool_hardware(self, pool: Pool) -> str:
        """The hardware profile id a pool runs on (its own, or the scenario default)."""
        return pool.hardware or self.hardware

    def pool_profile(self, pool: Pool) -> HwProfile:
        """The pool's hardware profile, as read when the scenario was validated."""
        return self._profiles[self.pool_hardware(pool)]

    def pool_layout(self, pool: Pool) -> PoolLayout:
        """Nodes, instances and GPUs of a pool sized in `nodes` or in `instances` (module doc of
        sim.config.cluster): instances of one node or less are packed onto as few nodes as hold them."""
        gpn = self.pool_profile(pool).gpus_per_node
        gpi = pool.gpus_per_instance
        if pool.instances is not None:
            return PoolLayout(
                math.ceil(pool.instances * gpi / gpn), pool.instances, pool.instances * gpi, gpn
            )
        nodes = pool.nodes or 0  # validation guarantees one of nodes, instances
        return PoolLayout(nodes, nodes * gpn // gpi, nodes * gpn, gpn)

    def pool_usd_per_hour(self, pool: Pool) -> float:
        """The pool's $/hour: its nodes at `pool_node_cost`, times the share of their GPUs it uses."""
        layout = self.pool_layout(pool)
        return self.pool_node_cost(pool).total_usd_per_hour * layout.nodes * layout.node_share

    def node_dram_bytes(self, pool: Pool) -> float:
        """Host DRAM per node of the pool: `cluster.node.dram_gb` if given, else the profile's."""
        override = self.cluster.node.dram_gb
        return override * units.GB if override is not None else self.pool_profile(pool).host_dram_bytes

    def node_ssd_bytes(self, pool: Pool) -> float:
        """Raw local NVMe per node of the pool: `cluster.node.ssd_tb` if given, else the profile's."""
        override = self.cluster.node.ssd_tb
        return override * units.TB if override is not None else self.pool_profile(pool).ssd_capacity_bytes

    def achievable(self, pool: Pool) -> dict[str, float | None]:
        """The pool hardware's `achievable` fractions with `timing.efficiency` overrides applied."""
        profile = self.pool_profile(pool).achievable
        overrides = self.timing.efficiency
        return {
            name: getattr(overrides, name)
            if getattr(overrides, name) is not None
            else getattr(profile, name).value
            for name in type(overrides).model_fields
        }

    def pool_node_cost(self, pool: Pool) -> NodeCost:
        """$/node-hour of the pool under `pricing` (extra DRAM/SSD over the profile's is charged; less is
        not refunded)."""
        from sim.hardware import node_cost

        hw = self.pool_profile(pool)
        p = self.pricing
        return node_cost(
            hw,
            p.term,
            usd_per_gpu_hour=p.usd_per_gpu_hour,
            include_energy=p.include_energy,
            extra_dram_gb=max(0.0, (self.node_dram_bytes(pool) - hw.host_dram_bytes) / units.GB),
            extra_ssd_tb=max(0.0, (self.node_ssd_bytes(pool) - hw.ssd_capacity_bytes) / units.TB),
            dram_usd_per_gb=p.dram_usd_per_gb,
            ssd_usd_per_tb=p.ssd_usd_per_tb,
            energy_usd_per_kwh=p.energy_usd_per_kwh,
            pue=p.pue,
        )


def _spec_decode_problems(models: list[ModelRef], sd: SpecDecode) -> list[Problem]:
    """A model's acceptance fits its family's verified rows and exists (given, or measured for its drafter,
    draft length and workload kind); the drafter named is the model's own."""
    from sim.model import load_model
    from sim.model.acceptance import measured_combinations

    problems = []
    for i, ref in enumerate(models):
        fam = sd.for_family(ref.family)
        rows = fam.rows_per_step
        if ref.accepted_tokens_per_step is not None and ref.accepted_tokens_per_step > rows:
            problems.append(
                Problem(
                    f"models[{i}].accepted_tokens_per_step",
                    f"cannot exceed the rows spec_decode.{ref.family} verifies per step ({rows})",
                    ref.accepted_tokens_per_step,
                    f"1 .. {rows}",
                )
            )
        drafter = load_model(ref.name).drafter
        if sd.enabled and (drafter is None or drafter.kind != fam.method):
            problems.append(
                Problem(
                    f"spec_decode.{ref.family}.method",
                    f"{ref.name} has no {fam.method} drafter",
                    fam.method,
                    drafter.kind if drafter else "(none: disable spec_decode)",
                )
            )
            continue
        if not sd.enabled:
            continue
        accepted, why = sd.accepted(ref.family, ref.accepted_tokens_per_step)
        if accepted is None:
            problems.append(
                Problem(
                    f"spec_decode.{ref.family}.draft_tokens",
                    f"{why} (sim/model/acceptance.yaml); give spec_decode.{ref.family}.accepted_tokens_per_step",
                    fam.draft_tokens,
                    f"draft_tokens/workload_kind measured: {measured_combinations(ref.family, fam.method)}",
                )
            )
        elif ref.accepted_tokens_per_step is None and accepted > rows:
            problems.append(
                Problem(
                    f"spec_decode.{ref.family}.verify_rows",
                    f"the acceptance {accepted:g} ({why}) exceeds the {rows} rows verified per step",
                    fam.verify_rows,
                    f">= {math.ceil(accepted)}",
                )
            )
    return problems


def load_scenario(path: str | Path) -> Scenario:
    """Read and validate a scenario YAML; paths inside it are relative to its folder."""
    path = Path(path)
    data = read_yaml_mapping(path)
    scn = validate_or_raise(Scenario, data, file=str(path), context={"base_dir": path.parent.resolve()})
    scn._file = str(path)
    return scn


# --- helpers (the model and hardware packages are imported lazily: they import config helpers) ---


def _model_names() -> list[str]:
    from sim.model import model_names

    return list(model_names())


def _pool_fits_hardware(path: str, pool: Pool, hw) -> list[Problem]:
    gpn = hw.gpus_per_node
    gpi = pool.gpus_per_instance
    problems = []
    if pool.moe_a2a == "deepep" and hw.scale_up.deepep is None:
        problems.append(
            Problem(
                f"{path}.moe_a2a",
                f"the hardware profile {hw.id} has no measured DeepEP kernels (scale_up.deepep)",
                pool.moe_a2a,
                "link or megamoe; deepep where the profile measures it (`sim hw show <profile>`: scale_up.deepep)",
            )
        )
    sms = hw.accelerator.sm_count.value if hw.accelerator.sm_count else None
    if pool.deepep_normal_sms is not None and sms is not None and pool.deepep_normal_sms > sms:
        problems.append(
            Problem(
                f"{path}.deepep_normal_sms",
                f"more SMs than a GPU of {hw.id} has ({sms})",
                pool.deepep_normal_sms,
                f"an even number up to {sms}",
            )
        )
    if gpi <= gpn:
        if gpn % gpi:
            problems.append(
                Problem(
                    f"{path}.gpus_per_instance",
                    f"must divide the {gpn} GPUs per node of {hw.id}, or span whole nodes",
                    gpi,
                    f"a divisor of {gpn} or a multiple of {gpn}",
                )
            )
    elif gpi % gpn:
        problems.append(
            Problem(
                f"{path}.gpus_per_instance",
                f"an instance spanning nodes must use whole {gpn}-GPU {hw.id} nodes",
                gpi,
                f"a multiple of {gpn}",
            )
        )
    elif pool.instances is not None:
        problems.append(
            Problem(
                f"{path}.gpus_per_instance",
                f"a pool in instances packs them onto {gpn}-GPU {hw.id} nodes; an instance cannot span nodes",
                gpi,
                f"a divisor of {gpn} (or size the pool in nodes)",
            )
        )
    elif pool.nodes is not None and pool.nodes % (gpi // gpn):
        problems.append(
            Problem(
                f"{path}.nodes",
                f"must be a multiple of the {gpi // gpn} nodes one instance spans",
                pool.nodes,
            )
        )
    domain = hw.scale_up_domain_gpus
    if pool.tp > domain:
        problems.append(
            Problem(
                f"{path}.tp",
                f"tensor parallelism beyond the {domain}-GPU scale-up domain of {hw.id}",
                pool.tp,
                f"<= {domain}",
            )
        )
    return problems


def _own_pools_problems(where: str, cluster: Cluster, pools: list[Pool]) -> list[Problem]:
    """A model's own pools pass the checks `cluster.pools` passes (sim.config.cluster.Cluster)."""
    from pydantic import ValidationError

    try:
        Cluster.model_validate({**cluster.model_dump(), "pools": [p.model_dump() for p in pools]})
    except ValidationError as err:
        problems = []
        for e in err.errors():
            # the Cluster's own checks name `pools[i].field: message`: put them under `where`
            path, sep, message = e["msg"].removeprefix("Value error, ").partition(": ")
            if sep and path.startswith("pools"):
                problems.append(Problem(where + path.removeprefix("pools"), message))
            else:
                problems.append(Problem(where, e["msg"].removeprefix("Value error, ")))
        return problems
    return []


def _capacity_problems(c: CapacitySearch, w: Workload) -> list[Problem]:
    """The search window must leave a measured window after the warm-up it runs with."""
    warmup_s = c.warmup_s if c.warmup_s is not None else w.warmup_s
    horizon_s = c.horizon_s if c.horizon_s is not None else w.horizon_s
    if not c.enabled or horizon_s is None or horizon_s > warmup_s:
        return []
    field = "capacity.horizon_s" if c.horizon_s is not None else "capacity.warmup_s"
    return [Problem(field, f"the search's horizon ({horizon_s:g} s) must be after its warm-up ({warmup_s:g} s)",
                    getattr(c, field.split(".")[1]), "horizon_s > warmup_s")]  # fmt: skip


def _pricing_problems(pricing: ScenarioPricing, profiles: dict) -> list[Problem]:
    if pricing.usd_per_gpu_hour is not None:
        return []
    problems = []
    for hw_id, hw in profiles.items():
        terms = hw.pricing.term_names()
        if pricing.term is not None and pricing.term not in terms:
            problems.append(
                Problem(
                    "pricing.term",
                    f"not a pricing term of {hw_id}",
                    pricing.term,
                    ", ".join(terms) or "(none: give pricing.usd_per_gpu_hour)",
                )
            )
        elif pricing.term is None and hw.pricing.default_term is None:
            problems.append(Problem("pricing", f"{hw_id} lists no price; give pricing.usd_per_gpu_hour"))
    return problems
