"""Measured speculative-decoding acceptance (sim/model/acceptance.yaml): mean tokens a sequence advances
per verify step, per (model family, drafter, draft length, workload kind), each point with its source.

A scenario's `spec_decode.<family>.accepted_tokens_per_step: null` (the default) reads the point of its
drafter, `draft_tokens` and `spec_decode.workload_kind` here; a number there overrides it (a what-if).
There is no interpolation between draft lengths and no fallback between workload kinds: a combination
with no measurement is refused with the ones that exist, since acceptance moves by a lot between them
(coding vs GSM8K on V4.1 DSpark: 3.51 vs 2.82).
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import cache
from pathlib import Path
from typing import Literal, get_args

import yaml

WorkloadKind = Literal[
    "coding", "coding_no_think", "math", "prose", "random_tokens"
]  # acceptance.yaml's header
WORKLOAD_KINDS: tuple[str, ...] = get_args(WorkloadKind)
_FILE = Path(__file__).with_name("acceptance.yaml")


@dataclass(frozen=True)
class AcceptancePoint:
    family: str
    drafter: str
    draft_tokens: int
    workload: str
    accepted: float  # mean accepted tokens per verify step, bonus token included
    measured_on: str  # the model measured (an analog where it is not the family's own)
    tag: str  # A / B / D, as in the fact base
    source: str


@cache
def acceptance_points() -> tuple[AcceptancePoint, ...]:
    """Every point of acceptance.yaml, in file order."""
    rows = yaml.safe_load(_FILE.read_text())["points"]
    return tuple(AcceptancePoint(**row) for row in rows)


def curve(family: str, drafter: str) -> list[AcceptancePoint]:
    """The points of one family's drafter, by workload kind then draft length."""
    pts = [p for p in acceptance_points() if p.family == family and p.drafter == drafter]
    return sorted(pts, key=lambda p: (WORKLOAD_KINDS.index(p.workload), p.draft_tokens))


def lookup(family: str, drafter: str, draft_tokens: int, workload: str) -> AcceptancePoint | None:
    """The measured point of exactly this combination, or None."""
    return next((p for p in curve(family, drafter) if (p.draft_tokens, p.workload) == (draft_tokens, workload)),
                None)  # fmt: skip


def measured_combinations(family: str, drafter: str) -> str:
    """`draft_tokens/workload` of every point of a drafter, for a refusal's `allowed`."""
    return ", ".join(f"{p.draft_tokens}/{p.workload}" for p in curve(family, drafter)) or "(none)"
