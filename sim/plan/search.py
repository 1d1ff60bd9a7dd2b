"""Search without brute force: bisection on the node scale k of each discrete combination.

Latency is non-increasing and cost increasing in k (see `spec.NodeSearch`), so feasibility is
monotone in k and the cheapest feasible k is found in about log2(max - min + 1) + 1 simulations
instead of max - min + 1. This is also the search-level early stop: once k fails, no smaller k is
simulated (it must fail too); once k passes, no larger k is simulated (it costs more and can only
be as good), so a combination stops as soon as its answer is known.

A bisection's next probe depends only on its own earlier results and on a cost cap that the
runner sets between rounds from the results of all earlier rounds (`Bisection.cap`), never on the
order in which results come back, so the set of simulated candidates (and with it the
recommendation) is the same for any number of workers and for local or Ray execution.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field


@dataclass
class Bisection:
    """Smallest feasible k in [lo, hi], assuming infeasible below it and feasible above."""

    lo: int
    hi: int
    results: dict[int, bool] = field(default_factory=dict)

    def next_k(self) -> int | None:
        """The next k to simulate, or None when the answer is known."""
        if self.lo < self.hi:
            return (self.lo + self.hi) // 2
        if self.lo == self.hi and self.lo not in self.results:
            return self.lo
        return None

    def record(self, k: int, feasible: bool) -> None:
        self.results[k] = feasible
        if feasible:
            self.hi = k
        else:
            self.lo = k + 1

    def cap(self, k: int) -> None:
        """Never go above k (larger k are known to lose on cost); the capped top is probed last."""
        self.hi = min(self.hi, k)

    @property
    def best(self) -> int | None:
        """The smallest feasible k (None when even the top k fails), once `next_k()` is None."""
        return self.hi if self.results.get(self.hi) else None

    def steps_left_at_most(self) -> int:
        """Upper bound on the simulations still needed (for a progress bar's total)."""
        if self.next_k() is None:
            return 0
        width = self.hi - self.lo + 1
        return math.ceil(math.log2(width)) + 1 if width > 1 else 1


def pool_nodes(ratio: dict[str, float], k: int, steps: dict[str, int] | None = None) -> dict[str, int]:
    """Nodes per pool at scale k: the largest weight gets k, the others ceil(k x w / w_max) >= 1,
    each rounded up to a multiple of its step (the nodes one instance spans). Non-decreasing in k."""
    top = max(ratio.values())
    steps = steps or {}
    nodes = {}
    for pool, weight in ratio.items():
        step = steps.get(pool, 1)
        wanted = max(1, math.ceil(k * weight / top - 1e-9))  # the epsilon absorbs float error of k*w/top
        nodes[pool] = step * math.ceil(wanted / step)
    return nodes
