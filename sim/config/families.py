"""Model families: the one registry of what differs between the models `sim` can serve.

A family is the key under which a model's policy blocks are filed in a scenario (`cache.v4`,
`spec_decode.v41`) and its DeepSeek API prices in `sim/hardware/deepseek_api_prices.yaml`. The
scenario schema (sim.config.cache, sim.config.timing), the cluster builder (sim.cluster.build), the
calibrated timing tables (sim.timing.calibrated), the API price book (sim.hardware.api_prices) and
the report's V4.1-vs-V4 pairing (sim.report.compare) all read `FAMILIES`; none names a family.

Adding a family is one `Family` entry below (plus its model file in sim/model/, its prices in the
price book and, for calibrated timing, its rows in the kernel tables). A family whose KV cache works
differently from both of these also adds a block class in sim.config.family_cache.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from pydantic import BaseModel, create_model

from sim.config.family_cache import FamilyCacheBlock, V4CachePolicy, V41CachePolicy
from sim.errors import InputError


@dataclass(frozen=True)
class Family:
    key: str  # the scenario's block key (`cache.<key>`, `spec_decode.<key>`) and the price book's `family`
    label: str  # short model name: the kernel tables' `model` column, the report's "V4.1 / V4" ratios
    models: tuple[str, ...]  # model names (sim/model/<name>.yaml) served under this family
    cache_block: type[FamilyCacheBlock]  # schema and defaults of `cache.<key>`
    spec_decode: dict[str, Any] = field(default_factory=dict)  # defaults of `spec_decode.<key>`
    predecessor: str | None = None  # the family the report compares this one against (new / old)


FAMILIES: tuple[Family, ...] = (
    Family(
        key="v4",
        label="V4",
        # the mini: the reduced V4 served for real on one H200 (issue 14, kernels_bench/serve), V4's kernels;
        # 0731: the same backbone with a DSpark drafter (`spec_decode.v4.method: dspark`)
        models=("deepseek-v4-flash", "deepseek-v4-flash-0731", "deepseek-v4-flash-mini"),
        cache_block=V4CachePolicy,
        # V4 ships one MTP block, depth 1 (model.md §9 #1; V4 report arXiv 2606.19348 §2.1: "the same strategy
        # as V3"), chained for longer drafts (SGLang's EAGLE 3-1-4). 2 rows per sequence at 1 draft token =
        # FlashMLA's V4 decode cases, s_q = 2 (kernels.md §3.1 [A]). Acceptance: the measured curve per draft
        # length (sim/model/acceptance.yaml: V4-Pro's as analog, 1.79 at 1 token on coding).
        spec_decode={"method": "mtp", "draft_tokens": 1},
    ),
    Family(
        key="v41",
        label="V4.1",
        # the mini: the reduced V4.1 served for real on one H200 (issue 14, kernels_bench/serve/model41.py)
        models=("deepseek-v4.1-flash", "deepseek-v4.1-flash-mini"),
        cache_block=V41CachePolicy,
        # DSpark drafts blocks of 5 (model.md §10 [A]) and the engines verify the whole block, 6 rows (SGLang's
        # static verify by default, engine rule `dspark_verify`; a confidence-scheduled prefix is opt-in).
        # Acceptance: measured, 3.51 on SPEED-Bench coding (sim/model/acceptance.yaml; 2.5 was assumed before
        # issue 29), with adaptive verification off: the same 6 rows.
        spec_decode={"method": "dspark", "draft_tokens": 5},
        predecessor="v4",
    ),
)


def family_names() -> list[str]:
    """The family keys, in registry order."""
    return [f.key for f in FAMILIES]


def servable_models() -> list[str]:
    """Models a scenario may simulate: those with a family (the others are reference-only)."""
    return [m for f in FAMILIES for m in f.models]


def family(key: str) -> Family:
    """The registry entry of a family key; an InputError naming the keys otherwise."""
    for f in FAMILIES:
        if f.key == key:
            return f
    raise InputError("unknown model family", value=key, allowed=family_names())


def model_family(model_name: str) -> str:
    """The family key of a servable model; an InputError naming the servable models otherwise."""
    for f in FAMILIES:
        if model_name in f.models:
            return f.key
    raise InputError(
        "no policy family for model", where="models", value=model_name, allowed=servable_models()
    )


def model_labels() -> dict[str, str]:
    """Model name -> its family's short label (`deepseek-v4.1-flash` -> `V4.1`)."""
    return {m: f.label for f in FAMILIES for m in f.models}


def with_family_fields(base: type[BaseModel], field_of: Callable[[Family], tuple[type, Any]]) -> Any:
    """`base` extended by one field per family, named by its key, after base's own fields (so dumps keep
    their order); `field_of(family)` gives the field's (type, pydantic Field). Subclass the result."""
    return create_model(f"{base.__name__}Families", __base__=base, **{f.key: field_of(f) for f in FAMILIES})
