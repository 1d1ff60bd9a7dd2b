"""The hardware-profile schema (one YAML per deployable node type in `hwprofiles/`).

Shape follows hardware.md §6: units in the field names (validated, see `sim.config.suffixes`),
every number given as `{value, src, est}` so a user can trace it to a source id of the profile's
`sources`, and peak specs kept apart from the `achievable` fractions and `measured` ceilings so
that calibration never edits a spec.
"""

from __future__ import annotations

from typing import Any, Generic, Literal, TypeVar

from pydantic import BaseModel, Field, field_validator, model_validator
from pydantic_core import PydanticCustomError

from sim import units
from sim.config.base import StrictModel
from sim.config.errors import Problem, raise_problems
from sim.errors import InputError

SCHEMA_ID = "sim.hw_profile/v1"
DTYPES = ("bf16", "fp8", "fp4")
_DATE = r"^\d{4}(-\d{2}(-\d{2})?)?$"

T = TypeVar("T")

# Tags of hardware.md ("Tag legend"); M = measured on our own H200 (kernels.md §1).
Tag = Literal["A", "B", "B-fixture", "C", "D", "M"]


class Sourced(StrictModel, Generic[T]):
    """One number with where it came from. `est: true` marks a derived [C] or guessed [D] value."""

    value: T = Field(description="the number, in the unit named by the field that holds it")
    src: list[str] = Field(min_length=1, description="source ids from the profile's `sources`")
    est: bool = Field(False, description="true when derived by arithmetic [C] or guessed [D]")
    tag: Tag | None = Field(None, description="confidence tag of hardware.md, when not plain [A]")
    note: str = Field("", description="how the number was read or derived")

    @model_validator(mode="before")
    @classmethod
    def _needs_mapping(cls, data: Any) -> Any:
        if not isinstance(data, dict):
            raise PydanticCustomError(
                "sourced_number",
                "every number needs its source: write {form}",
                {"form": "{value: X, src: [S..], est: true|false}"},
            )
        if isinstance(data.get("src"), str):
            data = {**data, "src": [data["src"]]}
        return data

    @model_validator(mode="after")
    def _estimates_flagged(self) -> Sourced:
        if self.tag in ("C", "D") and not self.est:
            raise ValueError(f"a [{self.tag}] value must carry est: true")
        return self


class Source(StrictModel):
    url: str = Field(description="where the number was read")
    date: str = Field(description="date of the content or of the copy used, as hardware.md §9 gives it")
    note: str = ""


class DenseTflops(StrictModel):
    """Dense peak (no 2:4 sparsity), TFLOP/s per dtype; value null = no native support."""

    bf16: Sourced[float]
    fp8: Sourced[float]
    fp4: Sourced[float | None]


class Accelerator(StrictModel):
    model: str
    count_per_node: Sourced[int]
    hbm_capacity_gb: Sourced[float] = Field(description="usable HBM per GPU, decimal GB")
    hbm_capacity_nominal_gb: Sourced[float] | None = Field(None, description="marketing stack size")
    hbm_bw_TBps: Sourced[float] = Field(description="peak HBM bandwidth per GPU, terabytes/s")
    dense_tflops: DenseTflops
    tdp_w: Sourced[float]
    # what a kernel bound by neither peak scales with (sim.timing.carry rule 2b): streaming multiprocessors
    # (AMD: compute units) and their maximum clock
    sm_count: Sourced[int] | None = Field(
        None, description="streaming multiprocessors (AMD: compute units) per GPU"
    )
    sm_clock_max_MHz: Sourced[float] | None = Field(None, description="maximum (boost) SM clock, MHz")
    # what an engine picks its kernels and collectives by (e.g. vLLM's all-reduce tiers, sim.config.engine_rules)
    compute_capability: Sourced[str] | None = Field(
        None, description="CUDA compute capability, major.minor (NVIDIA only), e.g. 9.0, 10.0, 10.3"
    )
    # what large GEMMs reach of the FP8 peak on this GPU (sim.timing.carry rule 3b)
    gemm_fp8_peak_frac: Sourced[float] | None = Field(
        None,
        description="median fraction of the datasheet dense FP8 peak that large FP8 GEMMs reach on this GPU, "
        "measured (the carry's rule 3b, sim.timing.carry); null: the H200's fraction",
    )
    # what a kernel bound by compute takes once the board sits at its power limit, against the burst the kernel
    # tables time (sim.timing.sustained; docs/carry/sustained)
    sustained_compute_slowdown_x: Sourced[float] | None = Field(
        None,
        description="sustained / burst time of compute-bound kernels at the board's power limit, measured; "
        "null: not measured, the tables' burst times stand",
    )

    sustained_compute_onset_s: Sourced[float] | None = Field(
        None,
        description="seconds of compute the board takes to reach its sustained slowdown from a cool start, "
        "measured; null: at once",
    )
    sustained_compute_delay_s: Sourced[float] | None = Field(
        None,
        description="seconds of compute from a cool start before the clock drops at all, measured; null: 0",
    )
    sustained_recovery_x: Sourced[float] | None = Field(
        None,
        description="seconds of the board's heat (its compute seconds toward the onset) shed per second without "
        "compute, measured; null: each step starts cool",
    )

    @field_validator("sustained_compute_slowdown_x")
    @classmethod
    def _not_faster(cls, v: Sourced[float] | None) -> Sourced[float] | None:
        if v is not None and v.value < 1.0:
            raise ValueError(
                f"a sustained slowdown is 1.0 or more (a GPU at its limit is not faster), got {v.value}"
            )
        return v

    @field_validator("gemm_fp8_peak_frac")
    @classmethod
    def _a_fraction(cls, v: Sourced[float] | None) -> Sourced[float] | None:
        if v is not None and not 0.0 < v.value <= 1.0:
            raise ValueError(f"a fraction of the peak is in (0, 1], got {v.value}")
        return v

    @model_validator(mode="after")
    def _delay_within_onset(self):
        d, o = self.sustained_compute_delay_s, self.sustained_compute_onset_s
        if d is not None and (o is None or d.value > o.value):
            raise ValueError(
                f"sustained_compute_delay_s ({d.value}) must not exceed sustained_compute_onset_s "
                f"({None if o is None else o.value}): the clock drops after the delay and reaches its slowdown by the onset"
            )
        return self


class DeepEpKernel(StrictModel):
    """One DeepEP mode's measured per-call times inside the scale-up domain, as fixed + per-token seconds for
    the tokens one rank sends (dispatch) or receives back (combine), fitted to a measured table."""

    dispatch_us: Sourced[float] = Field(description="fixed part of a dispatch call")
    dispatch_us_per_token: Sourced[float] = Field(description="per token of the sending rank")
    combine_us: Sourced[float] = Field(description="fixed part of a combine call")
    combine_us_per_token: Sourced[float] = Field(description="per token of the receiving rank")


class DeepEpSmSweep(StrictModel):
    """How the normal kernels' per-token time follows the SMs they get (SGLang `--deepep-config` num_sms): the
    tables' per-token time at `measured_sms`, of which `*_sm_frac` shrinks as 1 / SMs (a + b / SMs fitted to
    the measured SM sweep; sim.timing.comm.deepep_normal_per_token_s)."""

    measured_sms: Sourced[int] = Field(description="SMs of the normal kernels' per-token times above")
    dispatch_sm_frac: Sourced[float] = Field(
        description="share of the dispatch per-token time that goes as 1 / SMs"
    )
    combine_sm_frac: Sourced[float] = Field(
        description="share of the combine per-token time that goes as 1 / SMs"
    )

    @field_validator("dispatch_sm_frac", "combine_sm_frac")
    @classmethod
    def _a_share(cls, v: Sourced[float]) -> Sourced[float]:
        if not 0.0 <= v.value <= 1.0:
            raise ValueError(f"a share of the per-token time is in [0, 1], got {v.value}")
        return v


class DeepEp(StrictModel):
    """DeepEP's two kernel families (SGLang `--deepep-mode auto` runs low-latency in CUDA-graph decode steps,
    normal in steps that extend), measured at `measured_ep_gpus` ranks."""

    low_latency: DeepEpKernel
    normal: DeepEpKernel
    measured_ep_gpus: Sourced[int] = Field(description="EP ranks the tables were measured at")
    normal_sms: DeepEpSmSweep


class ScaleUp(StrictModel):
    fabric: Literal["nvlink4", "nvlink5", "infinity_fabric3", "infinity_fabric4"]
    domain_size_gpus: Sourced[int]
    bw_per_gpu_bidir_GBps: Sourced[float] = Field(
        description="per-GPU bidirectional aggregate, as vendors quote"
    )
    latency_us: Sourced[float]
    # the engines' small-message TP all-reduce (vLLM / SGLang custom all-reduce inside a CUDA graph), as
    # latency + 2 (p - 1) / p x bytes / bus bandwidth; absent: latency_us and the link at scale_up_bw_frac
    allreduce_latency_us: Sourced[float] | None = Field(
        None, description="per-call latency of the TP all-reduce"
    )
    allreduce_bus_GBps: Sourced[float] | None = Field(
        None, description="its bus bandwidth per GPU, one direction"
    )
    # the same all-reduce in NCCL, which the engine takes above its custom all-reduce's largest message
    # (sim.config.engine_rules `custom_allreduce_max_bytes`); absent: the custom all-reduce's fit at every size
    allreduce_nccl_latency_us: Sourced[float] | None = Field(
        None, description="per-call latency of the TP all-reduce in NCCL (large messages)"
    )
    allreduce_nccl_bus_GBps: Sourced[float] | None = Field(
        None, description="its bus bandwidth per GPU, one direction"
    )
    # the MoE all-to-all as DeepEP's kernels run it (a pool's `moe_a2a: deepep`); absent: such a pool is refused
    deepep: DeepEp | None = Field(None, description="DeepEP's measured per-call times (moe_a2a: deepep)")


class HostLink(StrictModel):
    type: Literal["pcie", "nvlink_c2c"]
    description: str = Field(description="e.g. 'PCIe Gen5 x16'")
    bw_bidir_GBps: Sourced[float] = Field(description="bidirectional bandwidth of one link")
    gpus_per_link: Sourced[int] = Field(description="GPUs sharing that link (NVLink-C2C: 2 per Grace)")


class Host(StrictModel):
    cpu: str
    cpu_cores: Sourced[int]
    dram_gb: Sourced[float]
    dram_bw_GBps: Sourced[float]
    dram_usable_for_kv_gb: Sourced[float]


class LocalStorage(StrictModel):
    nvme_drives: Sourced[int]
    nvme_capacity_tb_each: Sourced[float]
    nvme_read_GBps_each: Sourced[float]
    nvme_write_GBps_each: Sourced[float]
    usable_for_kv_frac: Sourced[float]


class ScaleOut(StrictModel):
    description: str
    nics: Sourced[int]
    nic_line_rate_Gbps_each: Sourced[float] = Field(description="line rate per NIC, gigabits/s")
    latency_us: Sourced[float] = Field(description="one RDMA message across the fabric")
    rdma: bool
    gpudirect_rdma: bool


class Power(StrictModel):
    node_kw_max: Sourced[float]
    node_kw_typical: Sourced[float] | None = None


class Rack(StrictModel):
    """Rack-scale systems (NVL72): the node is one compute tray, the scale-up domain the rack."""

    gpus: Sourced[int]
    trays: Sourced[int]
    power_kw: Sourced[float]
    nvlink_aggregate_TBps: Sourced[float]


class Achievable(StrictModel):
    """Calibration fractions of the peaks (not specs). null = derive from another fraction."""

    hbm_bw_frac: Sourced[float]
    mfu_prefill: Sourced[float]
    mfu_decode: Sourced[float | None]
    scale_up_bw_frac: Sourced[float]
    scale_out_bw_frac: Sourced[float]
    pcie_bw_frac: Sourced[float]
    ssd_bw_frac: Sourced[float]


class Measured(StrictModel):
    """Ceilings measured on real hardware (kernels.md §1), kept beside the peaks they bound."""

    hbm_copy_TBps: Sourced[float] | None = None
    bf16_gemm_tflops: Sourced[float] | None = None
    fp8_gemm_tflops: Sourced[float] | None = None
    fp8_blockwise_gemm_tflops: Sourced[float] | None = None


class RentalTerm(StrictModel):
    kind: Literal["on_demand", "spot", "reserved", "savings_plan", "capacity_block", "market"]
    provider: str
    sku: str = ""
    usd_per_gpu_hour: Sourced[float]
    date: str = Field(pattern=_DATE, description="when the price was seen, YYYY-MM[-DD]")
    commitment_years: int | None = None


class CapexTerm(StrictModel):
    """Buying the hardware: `purchase_usd` buys `purchase_gpus` GPUs (a server or a whole rack)."""

    purchase_usd: Sourced[float]
    purchase_gpus: Sourced[int]
    amortization_years: int = Field(gt=0, description="straight-line amortisation period (a choice)")
    residual_frac: Sourced[float]
    support_frac_per_year: Sourced[float]
    power_basis: Literal["max", "typical"] = Field("max", description="which node power to bill energy at")
    date: str = Field(pattern=_DATE)


class Energy(StrictModel):
    usd_per_kwh: Sourced[float]
    pue: Sourced[float]


class MemoryPrices(StrictModel):
    dram_usd_per_gb: Sourced[float]
    nvme_usd_per_tb: Sourced[float]


class Pricing(StrictModel):
    default_term: str | None = Field(description="term used when a scenario names none; null = no price")
    rental: dict[str, RentalTerm] = Field(default_factory=dict)
    capex: dict[str, CapexTerm] = Field(default_factory=dict)
    energy: Energy
    memory_prices: MemoryPrices

    @model_validator(mode="after")
    def _terms_consistent(self) -> Pricing:
        problems = [
            Problem(f"capex.{name}", "term name also used by a rental term", name)
            for name in self.capex
            if name in self.rental
        ]
        if self.default_term is not None and self.default_term not in self.term_names():
            problems.append(
                Problem("default_term", "unknown term", self.default_term, ", ".join(self.term_names()))
            )
        raise_problems(problems)
        return self

    def term_names(self) -> list[str]:
        return [*self.rental, *self.capex]


class HwProfile(StrictModel):
    """One deployable node type. Accessors below give SI units (bytes, bytes/s, FLOP/s, W)."""

    schema_: Literal["sim.hw_profile/v1"] = Field(alias="schema")
    id: str = Field(pattern=r"^[a-z0-9][a-z0-9.-]*$")
    display_name: str
    gpu: str = Field(description="short GPU name for tables, e.g. 'H200'")
    vendor: Literal["nvidia", "amd"]
    as_of: str = Field(pattern=_DATE)
    status: Literal["announced", "shipping", "legacy"]
    notes: list[str] = Field(default_factory=list)
    sources: dict[str, Source]
    accelerator: Accelerator
    scale_up: ScaleUp
    host_link: HostLink
    host: Host
    local_storage: LocalStorage
    scale_out: ScaleOut
    power: Power
    rack: Rack | None = None
    achievable: Achievable
    measured: Measured = Field(default_factory=Measured)
    pricing: Pricing

    @field_validator("sources")
    @classmethod
    def _some_sources(cls, v: dict[str, Source]) -> dict[str, Source]:
        if not v:
            raise ValueError("at least one source is needed")
        return v

    @model_validator(mode="after")
    def _sources_exist(self) -> HwProfile:
        known = ", ".join(self.sources)
        raise_problems(
            Problem(f"{path}.src", "unknown source id", sid, known)
            for path, item in sourced_numbers(self, "")
            for sid in item.src
            if sid not in self.sources
        )
        return self

    # --- accessors (SI units; 'per GPU' or 'per node' is in every name that could be either) ---

    @property
    def gpus_per_node(self) -> int:
        return self.accelerator.count_per_node.value

    @property
    def scale_up_domain_gpus(self) -> int:
        return self.scale_up.domain_size_gpus.value

    @property
    def hbm_capacity_bytes(self) -> float:
        """Usable HBM per GPU."""
        return self.accelerator.hbm_capacity_gb.value * units.GB

    @property
    def hbm_bw_bytes_per_s(self) -> float:
        """Peak HBM bandwidth per GPU (multiply by `achievable.hbm_bw_frac` for a realistic rate)."""
        return self.accelerator.hbm_bw_TBps.value * units.TB

    def supports_dtype(self, dtype: str) -> bool:
        return self.peak_tflops(dtype) is not None

    def peak_tflops(self, dtype: str) -> float | None:
        """Dense peak TFLOP/s per GPU for `dtype`, None when the GPU has no native support."""
        if dtype not in DTYPES:
            raise InputError("unknown dtype", where=f"{self.id}: dtype", value=dtype, allowed=DTYPES)
        return getattr(self.accelerator.dense_tflops, dtype).value

    def peak_flops_per_s(self, dtype: str) -> float:
        """Dense peak FLOP/s per GPU; an InputError when the GPU cannot run `dtype` natively."""
        tflops = self.peak_tflops(dtype)
        if tflops is None:
            supported = [d for d in DTYPES if self.peak_tflops(d) is not None]
            raise InputError(
                f"{self.gpu} has no native {dtype} matmul",
                where=f"{self.id}: dtype",
                value=dtype,
                allowed=supported,
            )
        return tflops * units.TFLOP

    @property
    def scale_up_bw_per_gpu_bytes_per_s(self) -> float:
        """NVLink / Infinity Fabric bandwidth per GPU, ONE direction (half the vendors' bidir figure)."""
        return self.scale_up.bw_per_gpu_bidir_GBps.value / 2 * units.GB

    @property
    def scale_up_latency_s(self) -> float:
        return self.scale_up.latency_us.value * units.US

    @property
    def scale_out_latency_s(self) -> float:
        return self.scale_out.latency_us.value * units.US

    @property
    def scale_out_bw_per_node_bytes_per_s(self) -> float:
        """RDMA line rate of all the node's NICs together, one direction, bytes/s (8 bits per byte)."""
        return units.gbps_to_bytes_per_s(
            self.scale_out.nics.value * self.scale_out.nic_line_rate_Gbps_each.value
        )

    @property
    def scale_out_bw_per_gpu_bytes_per_s(self) -> float:
        """The node's RDMA line rate divided evenly among its GPUs, one direction."""
        return self.scale_out_bw_per_node_bytes_per_s / self.gpus_per_node

    @property
    def pcie_bw_per_gpu_bytes_per_s(self) -> float:
        """Host link (PCIe or NVLink-C2C) per GPU, one direction: bidir / 2 / GPUs sharing the link."""
        link = self.host_link
        return link.bw_bidir_GBps.value / 2 / link.gpus_per_link.value * units.GB

    @property
    def host_dram_bytes(self) -> float:
        """Installed host DRAM per node."""
        return self.host.dram_gb.value * units.GB

    @property
    def host_dram_usable_for_kv_bytes(self) -> float:
        """Host DRAM per node a KV pool may use (the rest is OS and runtime)."""
        return self.host.dram_usable_for_kv_gb.value * units.GB

    @property
    def dram_bw_bytes_per_s(self) -> float:
        """Host DRAM bandwidth per node."""
        return self.host.dram_bw_GBps.value * units.GB

    @property
    def ssd_capacity_bytes(self) -> float:
        """Raw local NVMe capacity per node (multiply by `local_storage.usable_for_kv_frac` for KV)."""
        s = self.local_storage
        return s.nvme_drives.value * s.nvme_capacity_tb_each.value * units.TB

    @property
    def ssd_read_bytes_per_s(self) -> float:
        """Local NVMe read bandwidth per node: drives x per-drive rate [C]."""
        s = self.local_storage
        return s.nvme_drives.value * s.nvme_read_GBps_each.value * units.GB

    @property
    def ssd_write_bytes_per_s(self) -> float:
        """Local NVMe write bandwidth per node: drives x per-drive rate [C]."""
        s = self.local_storage
        return s.nvme_drives.value * s.nvme_write_GBps_each.value * units.GB

    @property
    def node_power_w(self) -> float:
        """Rated maximum node power (for NVL72: this tray's share of the rack)."""
        return self.power.node_kw_max.value * 1e3

    @property
    def gpu_tdp_w(self) -> float:
        return self.accelerator.tdp_w.value


def sourced_numbers(obj: Any, path: str = ""):
    """(field path, Sourced) for every sourced number inside a model, in field order."""
    if isinstance(obj, Sourced):
        yield path, obj
    elif isinstance(obj, BaseModel):
        for name, info in type(obj).model_fields.items():
            key = info.alias or name
            yield from sourced_numbers(getattr(obj, name), f"{path}.{key}" if path else key)
    elif isinstance(obj, dict):
        for key, item in obj.items():
            yield from sourced_numbers(item, f"{path}.{key}")
    elif isinstance(obj, list):
        for i, item in enumerate(obj):
            yield from sourced_numbers(item, f"{path}[{i}]")
