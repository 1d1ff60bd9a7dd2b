"""Candidate generation: discrete combinations of the plan's axes, and candidates (a combination at
one node scale k) as fully resolved scenario documents with a stable key.

Combinations are numbered in a fixed order (models outermost, then the space's axes in the order
written, then the node ratios), and that number, with k, orders everything downstream.
"""

from __future__ import annotations

import hashlib
import itertools
import json
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from sim.errors import InputError
from sim.plan.overrides import apply_overrides
from sim.plan.search import pool_nodes
from sim.plan.spec import PlanSpec

RATIO_AXIS = "nodes"


@dataclass(frozen=True)
class Combo:
    """One discrete point of the search space for one model."""

    index: int
    model: str
    choices: tuple[tuple[str, str], ...]  # (axis, option label), the node ratio last
    overrides: tuple[tuple[str, Any], ...]  # dotted path -> value, in application order
    ratio: tuple[tuple[str, float], ...]  # pool -> weight

    @property
    def label(self) -> str:
        return "/".join(option for _, option in self.choices)


@dataclass(frozen=True)
class PoolUnit:
    """What one node of a pool brings, as the simulator counts it (costs are linear in nodes)."""

    nodes: int  # in the inspected scenario (kept by pools the ratio does not name)
    gpus_per_node: int
    usd_per_node_hour: float
    nodes_per_instance: int  # node counts must be multiples of this


@dataclass(frozen=True)
class Inspection:
    """A combination looked at once before any simulation (see Backend.inspect)."""

    pools: dict[str, PoolUnit]
    prune_reason: str | None = None  # set: it cannot work at any node count, never simulate it


@dataclass(frozen=True)
class Candidate:
    """A combination at node scale k: what one simulation runs."""

    key: str
    fingerprint: str  # what else decides the result: simulator code and data, input files
    combo: Combo
    scale: int
    nodes: dict[str, int]  # every pool (those the ratio does not name keep the template's count)
    total_gpus: int
    usd_per_hour: float  # cluster $/hour, computed exactly as the simulator does
    scenario: dict[str, Any]
    seed: int


@dataclass(frozen=True)
class EvalTask:
    """What a worker gets: one resolved scenario to simulate, and the model whose metrics count.
    (Defined here, not beside the runner, so that workers import nothing heavy to unpickle it.)"""

    key: str
    model: str
    scenario: dict[str, Any]
    seed: int
    fingerprint: str  # of the simulator the driver keyed this candidate with; the worker checks its own


def combos(spec: PlanSpec, model_overrides: dict[str, dict[str, Any]]) -> list[Combo]:
    """Every combination, numbered. `model_overrides[model]` selects the model in the scenario."""
    axes = [(axis, list(options.items())) for axis, options in spec.space.items()]
    axes.append((RATIO_AXIS, [(label, None) for label in spec.nodes.ratios]))
    result: list[Combo] = []
    for model in spec.models:
        for picks in itertools.product(*(options for _, options in axes)):
            overrides: dict[str, Any] = dict(model_overrides[model])
            for (axis, _), (label, option_overrides) in zip(axes[:-1], picks[:-1], strict=True):
                clash = sorted(set(overrides) & set(option_overrides))
                if clash:  # two axes writing one path: the later would win without a word
                    raise InputError(
                        "path set by more than one axis", where=f"space.{axis}.{label}", value=clash[0]
                    )
                overrides.update(option_overrides)
            ratio_label = picks[-1][0]
            result.append(
                Combo(
                    index=len(result),
                    model=model,
                    choices=tuple((axis, label) for (axis, _), (label, _) in zip(axes, picks, strict=True)),
                    overrides=tuple(overrides.items()),
                    ratio=tuple(spec.nodes.ratios[ratio_label].items()),
                )
            )
    return result


def node_path(pool: str) -> str:
    """The override path of a pool's node count in the scenario schema."""
    return f"cluster.pools[name={pool}].nodes"


def candidate_key(scenario: dict[str, Any], seed: int, fingerprint: str) -> str:
    """Stable hash of the resolved scenario, the seed and the fingerprint of everything else that
    decides the result (never Python's salted hash()): equal keys mean equal simulations."""
    text = json.dumps(
        {"scenario": scenario, "seed": seed, "fingerprint": fingerprint},
        sort_keys=True,
        separators=(",", ":"),
    )
    return hashlib.blake2b(text.encode(), digest_size=16).hexdigest()


def resolve(template: dict[str, Any], combo: Combo, nodes: dict[str, int]) -> dict[str, Any]:
    """The scenario document of `combo` with the given node counts."""
    overrides = dict(combo.overrides)
    overrides.update({node_path(pool): n for pool, n in nodes.items()})
    return apply_overrides(template, overrides)


def candidate(
    template: dict[str, Any],
    combo: Combo,
    scale: int,
    seed: int,
    inspection: Inspection,
    fingerprint: Callable[[dict[str, Any]], str],
) -> Candidate:
    """`combo` at node scale `scale`, resolved on the template document."""
    steps = {name: unit.nodes_per_instance for name, unit in inspection.pools.items()}
    scaled = pool_nodes(dict(combo.ratio), scale, steps)
    scenario = resolve(template, combo, scaled)
    nodes = {name: scaled.get(name, unit.nodes) for name, unit in inspection.pools.items()}
    return Candidate(
        key=candidate_key(scenario, seed, stamp := fingerprint(scenario)),
        fingerprint=stamp,
        combo=combo,
        scale=scale,
        nodes=nodes,
        total_gpus=sum(n * inspection.pools[p].gpus_per_node for p, n in nodes.items()),
        usd_per_hour=sum(n * inspection.pools[p].usd_per_node_hour for p, n in nodes.items()),
        scenario=scenario,
        seed=seed,
    )
