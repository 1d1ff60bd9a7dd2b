"""DeepSeek API list prices (hardware.md §4), the anchor printed next to simulated $/1M tokens.

The data is `deepseek_api_prices.yaml` beside this module; `family` is a key of the family registry
(sim.config.families: `v4`, `v41`). `load_api_prices().latest("v41")` is the period in force at the end
of the data.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Literal

from pydantic import Field, field_validator, model_validator

from sim.config.base import StrictModel
from sim.config.errors import Problem, field_error, raise_problems, validate_or_raise
from sim.config.families import family_names
from sim.config.yamlio import read_yaml_mapping
from sim.errors import InputError
from sim.hardware.schema import Source, Sourced, sourced_numbers

API_PRICES_FILE = Path(__file__).with_name("deepseek_api_prices.yaml")
_UTC = r"^\d{4}-\d{2}-\d{2}T\d{2}:\d{2}$"

Tier = Literal["peak", "off_peak"]


class TokenPrices(StrictModel):
    cache_hit_usd_per_mtok: Sourced[float]
    cache_miss_usd_per_mtok: Sourced[float]
    output_usd_per_mtok: Sourced[float]


class ApiPeriod(StrictModel):
    api_model: str
    family: str
    valid_from_utc: str = Field(pattern=_UTC)
    valid_until_utc: str | None = Field(pattern=_UTC)
    note: str = ""
    peak: TokenPrices = Field(description="prices at peak hours, or all day when off_peak is null")
    off_peak: TokenPrices | None

    @field_validator("family")
    @classmethod
    def _registered(cls, value: str) -> str:
        if value not in family_names():
            raise field_error("not a model family", family_names())
        return value


class ApiPriceBook(StrictModel):
    schema_: Literal["sim.api_prices/v1"] = Field(alias="schema")
    peak_hours_utc: str
    sources: dict[str, Source]
    periods: list[ApiPeriod] = Field(min_length=1)

    @model_validator(mode="after")
    def _sources_exist(self) -> ApiPriceBook:
        raise_problems(
            Problem(f"{path}.src", "unknown source id", sid, ", ".join(self.sources))
            for path, item in sourced_numbers(self, "")
            for sid in item.src
            if sid not in self.sources
        )
        return self

    def latest(self, family: str) -> ApiPeriod:
        """The most recent period of a model family (ISO strings sort in time order)."""
        periods = [p for p in self.periods if p.family == family]
        if not periods:
            have = sorted({p.family for p in self.periods})
            raise InputError("no API prices for model family", value=family, allowed=have)
        return max(periods, key=lambda p: p.valid_from_utc)


@dataclass(frozen=True)
class ApiPrice:
    """One row for a summary table: a family's latest list price at one tier, $ per 1M tokens."""

    family: str
    api_model: str
    tier: str
    valid_from_utc: str
    cache_hit_usd_per_mtok: float
    cache_miss_usd_per_mtok: float
    output_usd_per_mtok: float
    src: tuple[str, ...]


def load_api_prices(path: str | Path = API_PRICES_FILE) -> ApiPriceBook:
    return validate_or_raise(ApiPriceBook, read_yaml_mapping(path), file=str(path))


def api_price_table(book: ApiPriceBook | None = None) -> list[ApiPrice]:
    """Latest prices of every family that has any, in registry order, one row per tier (peak, then off-peak
    when it exists)."""
    book = book or load_api_prices()
    rows = []
    priced = {p.family for p in book.periods}
    for family in (f for f in family_names() if f in priced):
        period = book.latest(family)
        tiers = [("peak" if period.off_peak else "all_day", period.peak)]
        if period.off_peak:
            tiers.append(("off_peak", period.off_peak))
        for tier, prices in tiers:
            src = sorted(
                {
                    s
                    for item in (
                        prices.cache_hit_usd_per_mtok,
                        prices.cache_miss_usd_per_mtok,
                        prices.output_usd_per_mtok,
                    )
                    for s in item.src
                }
            )
            rows.append(
                ApiPrice(
                    family=family,
                    api_model=period.api_model,
                    tier=tier,
                    valid_from_utc=period.valid_from_utc,
                    cache_hit_usd_per_mtok=prices.cache_hit_usd_per_mtok.value,
                    cache_miss_usd_per_mtok=prices.cache_miss_usd_per_mtok.value,
                    output_usd_per_mtok=prices.output_usd_per_mtok.value,
                    src=tuple(src),
                )
            )
    return rows


def api_cost_usd(
    prices: TokenPrices, *, cache_hit_tokens: float, cache_miss_tokens: float, output_tokens: float
) -> float:
    """What the API would bill for these token counts: sum of tokens x $/1M over the three lines."""
    return (
        cache_hit_tokens * prices.cache_hit_usd_per_mtok.value
        + cache_miss_tokens * prices.cache_miss_usd_per_mtok.value
        + output_tokens * prices.output_usd_per_mtok.value
    ) / 1e6
