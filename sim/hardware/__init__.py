"""Hardware profiles (`hwprofiles/*.yaml`) as typed, frozen specs, and what a node costs per hour.

    from sim.hardware import load_hw, hw_names, node_usd_per_hour
    hw = load_hw("nvidia-h200-hgx8")
    hw.hbm_bw_bytes_per_s, hw.peak_flops_per_s("fp8"), node_usd_per_hour(hw, "aws_on_demand")

Accessors return SI units (bytes, bytes/s, FLOP/s, W) and say "per GPU" or "per node" in their
names or docstrings; the raw fields keep the vendors' units in their names (hardware.md §6).
"""

from sim.hardware.api_prices import ApiPeriod, ApiPrice, api_cost_usd, api_price_table, load_api_prices
from sim.hardware.loader import hw_names, hw_path, load_all_hw, load_hw
from sim.hardware.pricing import NodeCost, hours_per_year, node_cost, node_usd_per_hour, resolve_term
from sim.hardware.schema import DTYPES, HwProfile, Sourced, sourced_numbers

__all__ = [
    "DTYPES",
    "ApiPeriod",
    "ApiPrice",
    "api_cost_usd",
    "HwProfile",
    "NodeCost",
    "Sourced",
    "api_price_table",
    "hours_per_year",
    "hw_names",
    "hw_path",
    "load_all_hw",
    "load_api_prices",
    "load_hw",
    "node_cost",
    "node_usd_per_hour",
    "resolve_term",
    "sourced_numbers",
]
