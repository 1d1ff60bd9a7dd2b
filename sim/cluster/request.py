"""One request (a turn of an agent session) as it moves through the cluster.

Trace fields are set once at arrival; the rest is written only by the instance engines and the
cluster wiring (style.md §6 ownership table), and read by the recorder when it ends.
Timestamps that never happened stay NaN. Run-time fields start as class-level defaults, so
making a request sets only its trace fields (millions are made per run).

Cache keys are ints: a lineage (one agent of one session) is session_id * LINEAGE_AGENTS +
agent_id; a shared prompt prefix is -(shared_prefix_id + 1).
"""

from __future__ import annotations

from typing import Any

NAN: float = float("nan")
LINEAGE_AGENTS = 1 << 16  # agents per session a lineage key can tell apart
# What the request log keeps of an ended request, in `Request.logged()` order (the recorder,
# sim.metrics.recorder, names their columns; a test checks the two lists agree).
LOGGED_FIELDS = (
    "request_id",
    "session_id",
    "request_index",
    "agent_id",
    "status",
    "reject_reason",
    "measured",
    "arrival_s",
    "admitted_s",
    "load_start_s",
    "load_end_s",
    "prefill_start_s",
    "first_token_s",
    "kv_transfer_start_s",
    "kv_transfer_end_s",
    "decode_start_s",
    "finish_s",
    "input_tokens",
    "output_tokens",
    "prefix_tokens",
    "hit_tokens",
    "hbm_hit_tokens",
    "computed_tokens",
    "replay_tokens",
    "image_tokens",
    "prefix_source",
    "shared_prefix_hit",
    "load_bytes",
    "swa_load_bytes",
    "kv_transfer_bytes",
    "prefill_pool",
    "prefill_instance",
    "decode_pool",
    "decode_instance",
)


def lineage_key(session_id: int, agent_id: int) -> int:
    return session_id * LINEAGE_AGENTS + agent_id


def shared_key(shared_prefix_id: int) -> int:
    return -(shared_prefix_id + 1)


class Request:
    # routing and cache
    est_new_tokens: int = 0
    hit_tokens: int = 0
    hbm_hit_tokens: int = 0
    prefix_source: str = "none"
    shared_prefix_hit: bool = False
    pinned: bool = False
    load_bytes: float = 0.0
    swa_load_bytes: float = 0.0
    replay_tokens: int = 0
    ctx_before: int = 0
    computed_tokens: int = 0
    loads_pending: int = 0
    reserved_p_bytes: float = 0.0
    reserved_d_bytes: float = 0.0
    d_pinned: bool = False
    kv_transfer_bytes: float = 0.0
    pinst: Any = None
    dinst: Any = None
    prefill_pool: str | None = None
    prefill_instance: int = -1
    decode_pool: str | None = None
    decode_instance: int = -1
    # timestamps
    admitted_s: float = NAN
    load_start_s: float = NAN
    load_end_s: float = NAN
    prefill_start_s: float = NAN
    first_token_s: float = NAN
    kv_transfer_start_s: float = NAN
    kv_transfer_end_s: float = NAN
    decode_start_s: float = NAN
    finish_s: float = NAN
    # decode
    terms: tuple[float, float, float, float] = (0.0, 0.0, 0.0, 0.0)
    join_step: int = 0
    # end
    status: str = ""
    reject_reason: str | None = None
    measured: bool = False

    def __init__(
        self,
        request_id: int,
        session_id: int,
        request_index: int,
        agent_id: int,
        lineage: int,
        parent_lineage: int | None,
        shared: int | None,
        arrival_s: float,
        input_tokens: int,
        output_tokens: int,
        prefix_tokens: int,
        shared_tokens: int,
        image_tokens: int,
        image_count: int,
    ) -> None:
        self.request_id = request_id
        self.session_id = session_id
        self.request_index = request_index
        self.agent_id = agent_id
        self.lineage = lineage
        self.parent_lineage = parent_lineage
        self.shared_key = shared
        self.arrival_s = arrival_s
        self.input_tokens = input_tokens
        self.output_tokens = output_tokens
        self.prefix_tokens = prefix_tokens
        self.shared_tokens = shared_tokens
        self.image_tokens = image_tokens
        self.image_count = image_count
        self.image_pending = image_tokens
        self.new_tokens = input_tokens

    @property
    def context_tokens(self) -> int:
        """Tokens of the session's context after this request (what a completion caches)."""
        return self.input_tokens + self.output_tokens

    def logged(self) -> tuple[object, ...]:
        """The LOGGED_FIELDS of this request, read in compiled code (once per ended request:
        reading 34 attributes by name from Python cost more than the rest of its logging)."""
        return (
            self.request_id,
            self.session_id,
            self.request_index,
            self.agent_id,
            self.status,
            self.reject_reason,
            self.measured,
            self.arrival_s,
            self.admitted_s,
            self.load_start_s,
            self.load_end_s,
            self.prefill_start_s,
            self.first_token_s,
            self.kv_transfer_start_s,
            self.kv_transfer_end_s,
            self.decode_start_s,
            self.finish_s,
            self.input_tokens,
            self.output_tokens,
            self.prefix_tokens,
            self.hit_tokens,
            self.hbm_hit_tokens,
            self.computed_tokens,
            self.replay_tokens,
            self.image_tokens,
            self.prefix_source,
            self.shared_prefix_hit,
            self.load_bytes,
            self.swa_load_bytes,
            self.kv_transfer_bytes,
            self.prefill_pool,
            self.prefill_instance,
            self.decode_pool,
            self.decode_instance,
        )
