"""The simulator's invariants, checked on every run (style.md §1, BLIS's reliability discipline).

Each check is cheap, and a broken one is a bug in `sim`, never bad input: it raises
`InvariantError`, naming the invariant, the request or tier and the values.

- causality, per ended request (`check_ended`, called by the cluster as each request ends):
  arrival <= admitted <= prefill start < first token <= finish; a prefix load and a KV transfer
  lie between admission and prefill start, and between first token and decode start;
- tokens, per completed request: the prefill computed exactly input - hit + replay tokens, the hit
  is shorter than the prompt (the last token is always computed), the HBM part within the hit;
- rejection: a rejected request names one of the counted reasons (`sim.sched.admission.REASONS`);
- conservation, at the end (`check_run`): every arrived request completed or was rejected, each
  was logged once, none is left in the system, in an engine queue or on a link (a drain-limited run
  ends its leftovers as `unfinished_at_end`, which frees neither HBM nor links);
- capacities, at the end: no tier unit ever held more than its capacity (peaks included), and, once
  every request has ended normally, every HBM reservation was given back.
"""

from __future__ import annotations

from typing import Any

from mypy_extensions import mypyc_attr

from sim.core.request import Request
from sim.sched.admission import REASONS

# Relative slack of the byte checks: byte counts are running float sums of reservations and
# releases, exact to about 1e-15 each; 1e-9 of a tier's capacity is far above that drift and far
# below one token's KV (>= 890 B).
BYTES_REL_TOL = 1e-9


@mypyc_attr(native_class=False)  # an exception: compiled code may not subclass builtins natively
class InvariantError(RuntimeError):
    """An invariant of the simulation does not hold: a bug in sim (please report it)."""

    def __init__(self, invariant: str, detail: str) -> None:
        super().__init__(f"internal error, invariant '{invariant}' broken: {detail} (a bug in sim)")
        self.invariant = invariant


def check_ended(req: Request) -> None:
    """The per-request invariants of a request that just completed or was rejected."""
    if req.status == "rejected":
        if req.reject_reason not in REASONS:
            raise InvariantError(
                "rejection", f"request {req.request_id}: reason {req.reject_reason!r} not in {REASONS}"
            )
        if not req.finish_s >= req.arrival_s:
            raise InvariantError(
                "causality",
                f"request {req.request_id}: rejected at {req.finish_s} s, arrived at {req.arrival_s} s",
            )
        return
    if req.status != "completed":
        raise InvariantError("conservation", f"request {req.request_id} ended with status {req.status!r}")
    arrival, admitted, prefill, first, finish = (
        req.arrival_s,
        req.admitted_s,
        req.prefill_start_s,
        req.first_token_s,
        req.finish_s,
    )
    if not arrival <= admitted <= prefill < first <= finish:
        raise InvariantError(
            "causality",
            f"request {req.request_id}: arrival {arrival} <= admitted {admitted} <= prefill start {prefill} "
            f"< first token {first} <= finish {finish} does not hold",
        )
    if req.load_start_s == req.load_start_s and not admitted <= req.load_start_s <= req.load_end_s <= prefill:
        raise InvariantError(
            "causality",
            f"request {req.request_id}: prefix load {req.load_start_s}..{req.load_end_s} s outside admitted "
            f"{admitted} .. prefill start {prefill}",
        )
    if (
        req.kv_transfer_start_s == req.kv_transfer_start_s
        and not first <= req.kv_transfer_start_s <= req.kv_transfer_end_s <= req.decode_start_s <= finish
    ):
        raise InvariantError(
            "causality",
            f"request {req.request_id}: KV transfer {req.kv_transfer_start_s}..{req.kv_transfer_end_s} s outside first token "
            f"{first} .. decode start {req.decode_start_s} .. finish {finish}",
        )
    if req.output_tokens > 1 and not first <= req.decode_start_s < finish:
        raise InvariantError(
            "causality",
            f"request {req.request_id}: decode start {req.decode_start_s} outside first token {first} .. finish {finish}",
        )
    computed = req.input_tokens - req.hit_tokens + req.replay_tokens
    if req.computed_tokens != computed or req.new_tokens != computed:
        raise InvariantError(
            "tokens",
            f"request {req.request_id}: computed {req.computed_tokens} prompt tokens, expected input "
            f"{req.input_tokens} - hit {req.hit_tokens} + replay {req.replay_tokens} = {computed}",
        )
    if not 0 <= req.hbm_hit_tokens <= req.hit_tokens <= req.input_tokens - 1:
        raise InvariantError(
            "tokens",
            f"request {req.request_id}: HBM hit {req.hbm_hit_tokens} <= hit {req.hit_tokens} <= input "
            f"{req.input_tokens} - 1 does not hold",
        )


def check_run(sim: Any, *, drain_limited: bool) -> None:
    """The end-of-run invariants of one model's simulation (`sim.cluster.build.Simulation`), after
    its leftovers (if the drain limit ended the run) have been rejected."""
    c = sim.cluster
    if c.arrived != c.completed + c.rejected or c.in_flight != 0 or c.live:
        raise InvariantError(
            "conservation",
            f"{c.arrived} arrived != {c.completed} completed + {c.rejected} rejected "
            f"({c.in_flight} still in flight, {len(c.live)} live)",
        )
    for tier in _tier_units(sim.store):
        limit = tier.capacity_bytes * (1.0 + BYTES_REL_TOL) + 1.0
        if tier.peak_bytes > limit or tier.used_bytes > limit:
            raise InvariantError(
                "capacity",
                f"{tier.name}: peak {tier.peak_bytes:.0f} B, now {tier.used_bytes:.0f} B > capacity "
                f"{tier.capacity_bytes:.0f} B",
            )
    if drain_limited:
        return  # leftovers were ended where they stood: queues, HBM and links still hold them
    for inst in sim.instances:
        queued = (len(inst.waiting), len(inst.ready), inst.loading, len(inst.joins), inst.decode_batch_size())
        if any(queued):
            raise InvariantError(
                "conservation",
                f"instance {inst.index}: (waiting, ready, loading, joins, running) = {queued} after "
                "every request ended",
            )
        hbm = inst.hbm
        if hbm.reserved_bytes > BYTES_REL_TOL * hbm.capacity_bytes:
            raise InvariantError(
                "capacity", f"{hbm.name}: {hbm.reserved_bytes:.0f} B still reserved after every request ended"
            )
    links = [*c.net_out]
    for inst in sim.instances:
        links += [link for link in inst.read_links if link is not None]
    for link in links:
        if link.in_flight():
            raise InvariantError(
                "conservation", f"link {link.name}: {link.in_flight()} transfers never ended"
            )


def _tier_units(store: Any) -> list[Any]:
    """Every byte tier unit of the store (HBM per instance, the tiers below, the SWA pool)."""
    units = [*store.hbm, *store.swa]
    for tier in store.tiers:
        units.extend(tier.units)
    return units
