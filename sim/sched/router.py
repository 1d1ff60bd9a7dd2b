"""Routing: which instance of a role serves a request. Policies are plain functions in a
registry (`POLICIES`); the scenario names one (`scheduler.router.policy`).

- cache_aware: a weighted sum of three scorers, each in [0, 1] (BLIS's weighted scorers):
    prefix_hit  share of the prompt the instance holds: its HBM copy in full, a copy in its
                node's host DRAM at half weight (it must still be loaded);
    queue_depth 1 - depth / the largest depth among the candidates (`_queue_depth`: prompt tokens
                still to compute on a prefill or colocated instance, sequences held on a decode one);
    kv_usage    share of the instance's KV memory not reserved by running sequences;
  with `scheduler.router.weights`. Ties go to the lowest instance index (deterministic). The
  router never reads the true output length. The scorers are inlined: this runs for every
  request and candidate.
- least_loaded: the smallest queue depth (prompt tokens, or decode sequences).
- round_robin: instances in turn, per role.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from sim.core.request import Request
from sim.kvcache.store import KVStore
from sim.kvcache.tiers import Slot

if TYPE_CHECKING:
    from sim.cluster.instance import Instance


class Router:
    def __init__(self, policy: str, weights: Any, store: KVStore) -> None:
        if policy not in POLICIES:
            raise ValueError(f"unknown router policy {policy!r}; known: {sorted(POLICIES)}")
        self.policy = policy
        self._choose: Callable = POLICIES[policy]
        self.w_hit: float = weights.prefix_hit
        self.w_queue: float = weights.queue_depth
        self.w_kv: float = weights.kv_usage
        self.store = store
        self._rr: dict[str, int] = {}

    def route(self, req: Request, candidates: list[Instance], role: str) -> Instance:
        if len(candidates) == 1:
            return candidates[0]
        if self.policy == "cache_aware":  # the default, called directly: compiled code calls it natively
            return _cache_aware(self, req, candidates, role)
        return self._choose(self, req, candidates, role)


def _queue_depth(inst: Instance, decode: bool) -> float:
    """Work waiting on an instance, in its role's unit: prompt tokens still to compute (the front:
    prefill or colocated), sequences held (`decode`). A float either way (compiled code keeps it
    unboxed)."""
    if decode:
        return float(inst.held_sequences)
    return inst.queued_prompt_tokens


def _cache_aware(router: Router, req: Request, candidates: list[Instance], role: str) -> Instance:
    decode = role == "decode"
    max_depth = 0.0
    for inst in candidates:
        depth = _queue_depth(inst, decode)
        if depth > max_depth:
            max_depth = depth
    w_queue, w_kv = router.w_queue, router.w_kv
    q = w_queue / max_depth if max_depth > 0.0 else 0.0
    holders: list[Slot] | None = None
    dram_node = -1
    key = req.parent_lineage
    if router.w_hit and key is not None and req.prefix_tokens:
        holders = router.store.hbm_copies(key)
        if holders is not None and not decode:
            dram_node = router.store.demoted_node(key)
    # a context is cached on one instance or none, mostly: then no lookup per candidate
    only_inst = -1
    only_tokens = 0
    if holders is not None and len(holders) == 1:
        only_inst, only_tokens = holders[0].unit, holders[0].tokens
        holders = None
    w_hit = router.w_hit / req.input_tokens if req.input_tokens else 0.0
    prefix = req.prefix_tokens
    best = candidates[0]
    best_score = -1.0
    for inst in candidates:
        score = (
            w_queue
            - q * _queue_depth(inst, decode)
            + w_kv
            - w_kv * inst.hbm.reserved_bytes * inst.inv_kv_capacity
        )
        if holders is not None or only_inst >= 0:
            if holders is not None:
                tokens = 0
                for held in holders:
                    if held.unit == inst.index:
                        tokens = held.tokens
                        break
            else:
                tokens = only_tokens if inst.index == only_inst else 0
            if tokens:
                score += w_hit * (tokens if tokens < prefix else prefix)
            elif dram_node == inst.node:
                score += 0.5 * w_hit * prefix
        if score > best_score:
            best, best_score = inst, score
    return best


def _least_loaded(router: Router, req: Request, candidates: list[Instance], role: str) -> Instance:
    decode = role == "decode"
    best, best_depth = candidates[0], _queue_depth(candidates[0], decode)
    for inst in candidates[1:]:
        depth = _queue_depth(inst, decode)
        if depth < best_depth:
            best, best_depth = inst, depth
    return best


def _round_robin(router: Router, req: Request, candidates: list[Instance], role: str) -> Instance:
    i = router._rr.get(role, 0)
    router._rr[role] = i + 1
    return candidates[i % len(candidates)]


POLICIES: dict[str, Callable] = {
    "cache_aware": _cache_aware,
    "least_loaded": _least_loaded,
    "round_robin": _round_robin,
}
