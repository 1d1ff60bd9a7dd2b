"""What one node costs per hour under a pricing term of its profile (pure arithmetic).

Formulas (hardware.md §3.3 and §3.4):
- rental term: usd_per_gpu_hour x GPUs per node. Energy is inside the rental price.
- capex term, for the node's share of a purchase of `purchase_gpus` GPUs:
    share        = GPUs per node / purchase_gpus       (1 for a server, 4/72 for an NVL72 tray)
    amortisation = purchase_usd x share x (1 - residual_frac) / (years x 8,760 h)
    support      = purchase_usd x share x support_frac_per_year / 8,760 h
    energy       = node kW (max or typical, per the term) x PUE x $/kWh     (if include_energy)
- own price (`usd_per_gpu_hour` given): a rental at that price, reported as term "custom".
- extras, any term: (extra DRAM GB x $/GB + extra SSD TB x $/TB) / (years x 8,760 h), with the capex
  term's years, or `extras_years` (default 4, as hardware.md §3.3) for a rental term.
"""

from __future__ import annotations

from dataclasses import dataclass

from sim import units
from sim.errors import InputError
from sim.hardware.schema import CapexTerm, HwProfile

DEFAULT_EXTRAS_YEARS = 4  # hardware.md §3.3 straight-line period
CUSTOM_TERM = "custom"


def hours_per_year() -> float:
    """8,760 h: the straight-line year of hardware.md §3.3 (no leap day, 100 % availability)."""
    return 365 * units.DAY_S / units.HOUR_S


@dataclass(frozen=True)
class NodeCost:
    """$/node-hour split into its parts; `total_usd_per_hour` is their sum."""

    term: str
    kind: str  # "rental" | "capex"
    rental_usd_per_hour: float = 0.0
    amortization_usd_per_hour: float = 0.0
    support_usd_per_hour: float = 0.0
    energy_usd_per_hour: float = 0.0
    extras_usd_per_hour: float = 0.0

    @property
    def total_usd_per_hour(self) -> float:
        return (
            self.rental_usd_per_hour
            + self.amortization_usd_per_hour
            + self.support_usd_per_hour
            + self.energy_usd_per_hour
            + self.extras_usd_per_hour
        )


def resolve_term(profile: HwProfile, term: str | None) -> str:
    """`term`, or the profile's default; an InputError listing the profile's terms when unknown."""
    names = profile.pricing.term_names()
    chosen = term if term is not None else profile.pricing.default_term
    if chosen is None or chosen not in names:
        raise InputError(
            f"unknown pricing term for {profile.id}"
            if chosen
            else f"{profile.id} has no default pricing term",
            where="pricing.term",
            value=chosen,
            allowed=names or "(this profile lists no prices)",
        )
    return chosen


def node_cost(
    profile: HwProfile,
    term: str | None = None,
    *,
    include_energy: bool = True,
    extra_dram_gb: float = 0.0,
    extra_ssd_tb: float = 0.0,
    dram_usd_per_gb: float | None = None,
    ssd_usd_per_tb: float | None = None,
    energy_usd_per_kwh: float | None = None,
    pue: float | None = None,
    extras_years: float = DEFAULT_EXTRAS_YEARS,
    usd_per_gpu_hour: float | None = None,
) -> NodeCost:
    """Cost of one node per hour under `term` (None = the profile's default), itemised.

    Price arguments left as None take the profile's values (memory_prices, energy);
    `usd_per_gpu_hour` replaces the term by a rental price of your own.
    """
    name = CUSTOM_TERM if usd_per_gpu_hour is not None else resolve_term(profile, term)
    mem = profile.pricing.memory_prices
    dram_price = mem.dram_usd_per_gb.value if dram_usd_per_gb is None else dram_usd_per_gb
    ssd_price = mem.nvme_usd_per_tb.value if ssd_usd_per_tb is None else ssd_usd_per_tb
    extras_usd = extra_dram_gb * dram_price + extra_ssd_tb * ssd_price

    if name == CUSTOM_TERM or name in profile.pricing.rental:
        gpu_price = (
            usd_per_gpu_hour if name == CUSTOM_TERM else profile.pricing.rental[name].usd_per_gpu_hour.value
        )
        rental = gpu_price * profile.gpus_per_node
        extras = extras_usd / (extras_years * hours_per_year())
        return NodeCost(term=name, kind="rental", rental_usd_per_hour=rental, extras_usd_per_hour=extras)

    capex: CapexTerm = profile.pricing.capex[name]
    share_usd = capex.purchase_usd.value * profile.gpus_per_node / capex.purchase_gpus.value
    amort_h = capex.amortization_years * hours_per_year()
    energy = 0.0
    if include_energy:
        energy = _node_kw(profile, capex.power_basis) * _energy_usd_per_kwh_at_pue(
            profile, energy_usd_per_kwh, pue
        )
    return NodeCost(
        term=name,
        kind="capex",
        amortization_usd_per_hour=share_usd * (1.0 - capex.residual_frac.value) / amort_h,
        support_usd_per_hour=share_usd * capex.support_frac_per_year.value / hours_per_year(),
        energy_usd_per_hour=energy,
        extras_usd_per_hour=extras_usd / amort_h,
    )


def node_usd_per_hour(profile: HwProfile, term: str | None = None, **kwargs) -> float:
    """$/node-hour under `term` (see `node_cost` for the keyword arguments and the module doc)."""
    return node_cost(profile, term, **kwargs).total_usd_per_hour


def _node_kw(profile: HwProfile, basis: str) -> float:
    typical = profile.power.node_kw_typical
    if basis == "typical" and typical is not None:
        return typical.value
    return profile.power.node_kw_max.value


def _energy_usd_per_kwh_at_pue(profile: HwProfile, usd_per_kwh: float | None, pue: float | None) -> float:
    energy = profile.pricing.energy
    price = energy.usd_per_kwh.value if usd_per_kwh is None else usd_per_kwh
    return price * (energy.pue.value if pue is None else pue)
