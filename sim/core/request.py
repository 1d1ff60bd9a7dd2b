"""One request (a turn of an agent session) as it moves through the cluster.

Trace fields are set once at arrival; the rest is written only by the instance engines and the
cluster wiring (style.md §6 ownership table), and read by the request log when it ends
(sim.metrics.requestlog).
Timestamps that never happened stay NaN. Run-time fields start as class-level defaults, so
making a request sets only its trace fields (millions are made per run).

Cache keys are ints: a lineage (one agent of one session) is session_id * LINEAGE_AGENTS +
agent_id; a shared prompt prefix is -(shared_prefix_id + 1).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Final

if TYPE_CHECKING:  # the types its fields hold, named for the compiler: the record imports no layer above it
    from sim.cluster.instance import Instance
    from sim.timing.batch import DecodeTerms
    from sim.workload.arrivals import Due

NAN: Final = float("nan")
LINEAGE_AGENTS: Final = 1 << 16  # agents per session a lineage key can tell apart


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
    shared_held: bool = False  # it uses its shared prompt's cached blocks in place (sim.kvcache.store)
    load_bytes: float = 0.0
    swa_load_bytes: float = 0.0
    replay_tokens: int = 0
    swa_junction_tokens: int = 0  # the window its hit read or pinned, for its lineage (sim.kvcache.lookup)
    prefill_chunk_tokens: int = 0  # the chunk its prefill instance splits prompts into (sim.kvcache.lookup)
    ctx_before: int = 0
    computed_tokens: int = 0
    loads_pending: int = 0
    reserved_p_bytes: float = 0.0
    reserved_d_bytes: float = 0.0
    d_pinned: bool = False
    kv_transfer_bytes: float = 0.0
    pinst: Instance | None = None
    dinst: Instance | None = None
    prefill_pool: str | None = None
    prefill_instance: int = -1
    decode_pool: str | None = None
    decode_instance: int = -1
    dp_rank: int = 0  # the DP-attention rank of its prefill instance that holds it (sim.sched.batcher)
    swa_hold_tokens: int = 0  # the slots it holds in its instance's SWA token pool (sim.sched.swa_pool)
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
    terms: DecodeTerms | None = None  # its timing terms when it joined the decode batch
    join_step: int = 0
    # end
    due: Due | None = None  # its trace row (sim.workload.arrivals), which its end schedules the follow-ups of
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
