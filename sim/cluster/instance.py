"""One serving instance: its engine loop as a small state machine driven by timed calls
(sim.cluster.events).

An engine step is either
- a discrete step (STEP): prefill chunks under the token budget, plus one decode step of every
  running sequence on a colocated instance whose steps are mixed (`scheduler.step_composition`,
  sim.sched.batcher: with prefill_first the running sequences wait for the step); one event per step;
- a decode span (SPAN): decode-only steps with fixed membership, jumped over in one event up to
  the next leave (the earliest finishing sequence). A join (a request whose prefill or KV
  transfer just finished) cuts the span at the end of the step in progress, computed in closed
  form from the timing model, so decode never costs an event per token.

The decode batch keeps the sum of its sequences' timing terms and of their growth per step (one
`DecodeTerms`, the same class the timing model reads), so a join or a leave is O(1) (plus a heap
push/pop for the finish step); `decode_steps` counts decode steps since the start, and a sequence
that joined at step j with s steps to go leaves at the boundary decode_steps = j + s.

Per-rank decode progress (`step_composition` rank_prefill_first on a colocated DP-attention
instance: each rank picks its own batch, so a rank holding a chunk does not decode in that step
while the others do): each rank keeps its own count of decode steps (`rank_steps`), its own heap
of running sequences by the leave step in that count and its own summed terms, so a join or a
leave stays O(1) plus a heap push/pop, and a step or span pays O(dp) to advance the ranks that
decode and to find the next leave. The mixed and prefill_first engines keep the single batch above.

HBM admission is FIFO (head-of-line): a request is admitted when its KV fits beside the running
ones (cached copies are evicted as needed, LRU first); then its prefix is looked up through the
tiers and loads start at once, asynchronously, on the instance's links; it becomes ready for
prefill when they finish. With a running cap per DP rank (SGLang's per-worker
`--max-running-requests`), the queue is the ranks' queues interleaved: a request whose rank is full is
passed over, and the first one whose rank has room is admitted (on a decode instance: joins the batch).
"""

from __future__ import annotations

import math
from collections import deque
from typing import TYPE_CHECKING, Any, Final

from sim.cluster.events import EventLoop
from sim.cluster.heap import Keyed, pop, push
from sim.cluster.link import SharedLink
from sim.core.request import Request
from sim.kvcache.lookup import plan_prefix
from sim.kvcache.store import KVStore
from sim.sched.batcher import (
    STEP_COMPOSITIONS,
    decoding_with_prefill,
    prefill_chunks,
    prefill_chunks_dp,
    rank_prefill_budget,
)
from sim.sched.swa_pool import SwaPool
from sim.timing.batch import DecodeTerms, PrefillChunk
from sim.timing.sustained import PowerLimit

if TYPE_CHECKING:
    from sim.cluster.cluster import Cluster

# engine modes
IDLE: Final = 0
STEP: Final = 1
SPAN: Final = 2


class Instance:
    def __init__(
        self,
        env: EventLoop,
        index: int,
        pool: str,
        role: str,
        node: int,
        gpus: int,
        timing: Any,  # a sim.timing.base.TimingModel: any implementation, compiled or not, plugs in
        store: KVStore,
        *,
        cluster: Cluster,  # the one that makes it (sim.cluster.cluster) and takes its requests back
        budget_tokens: int,
        chunk_tokens: int,
        max_decode_batch: int,
        kv_replication: int,
        read_links: list[SharedLink | None],
        max_queue_wait_s: float | None,
        dp_ranks: int = 1,
        dp_budget_divided: bool = True,
        step_composition: str = "mixed",
        rank_running_cap: int = 0,
        swa_pool: SwaPool | None = None,
        swa_chunk_tokens: int = 0,
    ) -> None:
        if step_composition not in STEP_COMPOSITIONS:
            raise ValueError(f"step composition {step_composition!r} is not one of {STEP_COMPOSITIONS}")
        self.env = env
        self.index = index
        self.pool = pool
        self.role = role
        self.node = node
        self.gpus = gpus
        self.timing = timing
        self.store = store
        self.cluster = cluster
        self.hbm = store.hbm[index]
        self.policy = store.policy
        self.budget_tokens = budget_tokens
        self.chunk_tokens = chunk_tokens
        self.max_decode_batch = max_decode_batch
        self.kv_replication = kv_replication
        # DP attention: requests are placed on ranks round-robin as they arrive (SGLang's default
        # `--load-balance-method round_robin`); each rank prefills its own under the engine's budget
        # rule (sim.sched.batcher.rank_prefill_budget: budget / dp_ranks, or the budget per rank)
        self.dp_ranks = dp_ranks
        self._budget_divided = dp_budget_divided
        self._next_rank = 0
        # the running cap per DP rank (SGLang: --max-running-requests per DP worker, scheduler.dp_running_cap):
        # a colocated instance admits a request, a decode instance lets it join, only while its rank holds
        # fewer; 0: max_decode_batch over the instance only
        self._rank_cap = rank_running_cap if dp_ranks > 1 and role != "prefill" else 0
        # by rank, the requests it holds against the cap: on a colocated instance from admission to finish, on a
        # decode instance from joining the decode batch to finish
        self._rank_held: list[int] = [0] * (dp_ranks if self._rank_cap else 0)
        # the engine's SWA token pool, one per DP rank (SGLang with V4, sim.sched.swa_pool): a colocated instance
        # admits a request only while its rank's pool has the slots it will hold (its last prefill chunk of
        # `swa_chunk_tokens` at most, page-rounded, and its decode window) until it finishes; None: no such pool
        self._swa = swa_pool if role == "colocated" else None
        self._swa_chunk = swa_chunk_tokens
        self._swa_free: list[int] = [self._swa.tokens] * dp_ranks if self._swa is not None else []
        # scheduler.step_composition (sim.sched.batcher): prefill_first = a step with prefill chunks
        # decodes nothing (SGLang), mixed = the running decodes ride in every step (vLLM);
        # rank_prefill_first = only the DP ranks holding chunks wait (per-rank progress, the module doc),
        # which is prefill_first with one rank and where no step holds both kinds of work
        self._per_rank = step_composition == "rank_prefill_first" and dp_ranks > 1 and role == "colocated"
        self._prefill_first = step_composition != "mixed" and not self._per_rank
        self._no_terms = DecodeTerms()  # the decode terms of a prefill step that decodes nothing
        # by chain index: the link a load from that tier into this instance's HBM uses ([0], HBM: None)
        self.read_links = read_links
        self.max_queue_wait_s = max_queue_wait_s
        self._colocated = role == "colocated"
        self._verify: int = timing.verified_tokens_per_step
        self._accept: float = timing.accepted_tokens_per_step
        # queues
        self.waiting: deque[Request] = deque()  # routed here, not yet admitted to HBM
        self.ready: list[Request] = []  # admitted and loaded, prefill not finished
        self.loading = 0  # admitted, loads in flight
        self.joins: deque[Request] = deque()  # waiting to join the decode batch
        # the decode batch: a heap of _Seqs by (finish step, request id) (sim.cluster.heap)
        self.running: list[Keyed] = []
        # decode batch state: decode steps since the start, summed timing terms of the running sequences
        # (with per-rank progress: of the ranks decoding in the step or span in progress)
        self.decode_steps = 0
        self.terms = DecodeTerms()
        # per-rank progress (module doc; else empty, and `running` holds the batch): by rank, its decode
        # steps, its running sequences (a heap of _Seqs by the leave step in its own count), their summed
        # terms, and whether it holds chunks in the step in progress (it does not decode there)
        ranks = dp_ranks if self._per_rank else 0
        self.rank_steps: list[int] = [0] * ranks
        self.rank_running: list[list[Keyed]] = [[] for _ in range(ranks)]
        self.rank_terms: list[DecodeTerms] = [DecodeTerms() for _ in range(ranks)]
        self._rank_stalled: list[bool] = [False] * ranks
        self._rank_batch = 0  # sequences in `rank_running`
        # engine loop state
        self.mode = IDLE
        self._timer = env.timer(self._boundary)  # the end of the step or span in progress
        self._start = 0.0  # start of the current step or span (may lie ahead after a cut)
        self._span_steps = 0  # decode steps the current step/span advances
        self._chunks: list[tuple[Request, int]] = []
        self._batch = 0
        self._in_boundary = False  # completions inside a boundary must not re-plan before it ends
        # the board's heat at the power limit (sim.timing.sustained), as the last step holding chunks left it
        # at `_hot_end_s`; the steps between (decode, idle) cool it. None: the GPU's limit is not measured
        self._power: PowerLimit | None = timing.power_limit
        self._heat_s = 0.0
        self._hot_end_s = 0.0
        # bytes per token and fixed bytes per sequence in this instance's HBM (replicated on TP ranks)
        self._rep_bpt = kv_replication * self.policy.global_kv_bytes_per_token
        self._rep_state = kv_replication * self.policy.seq_state_bytes
        # what the router weighs (sim.sched.router): on a prefill or colocated instance, the prompt tokens
        # routed to it and not yet computed (estimated until the prefix lookup); on a decode instance,
        # the sequences handed to it and not yet finished
        self.queued_prompt_tokens = 0.0
        self.held_sequences = 0
        self.inv_kv_capacity = 1.0 / self.hbm.capacity_bytes if self.hbm.capacity_bytes > 0 else 0.0
        # statistics
        self.busy_s = 0.0
        self.prefill_busy_s = 0.0  # busy time attributed to prefill (token share of mixed steps)
        self._prefill_share = 0.0
        self.batch_seq_s = 0.0  # integral of decode batch size over time
        self.steps = 0
        self.spans = 0

    # --- entry points ---

    def submit(self, req: Request) -> None:
        """A request routed to this (prefill or colocated) instance."""
        req.pinst = self
        req.prefill_pool = self.pool
        req.prefill_instance = self.index
        self.queued_prompt_tokens += req.est_new_tokens
        if self.dp_ranks > 1:
            req.dp_rank = self._next_rank
            self._next_rank = (self._next_rank + 1) % self.dp_ranks
        self.waiting.append(req)
        self._admit()

    def receive(self, req: Request) -> None:
        """A prefilled request handed to this decode instance (its KV is still on the prefill side)."""
        req.dinst = self
        req.decode_pool = self.pool
        req.decode_instance = self.index
        self.held_sequences += 1
        if self._rank_cap:  # the decode side's own ranks, round-robin as handed over (SGLang PD decode)
            req.dp_rank = self._next_rank
            self._next_rank = (self._next_rank + 1) % self.dp_ranks
        self.waiting.append(req)
        self._admit_decode()

    def decode_batch_size(self) -> int:
        """Sequences in the decode batch (on every rank)."""
        return self._rank_batch if self._per_rank else len(self.running)

    def _in_engine(self) -> int:
        """Requests the engine holds: admitted (loading, ready to prefill, prefilling, waiting to join)
        or decoding."""
        return self.decode_batch_size() + len(self.ready) + self.loading + len(self.joins)

    def stop(self) -> None:
        """The instance failed and every request was taken off it (sim.cluster.faults): an empty,
        idle engine (the wake-up it had set finds it idle, `_boundary`)."""
        self.loading = 0
        self.mode = IDLE
        self._chunks = []
        self._batch = 0
        self.terms.clear()
        for terms in self.rank_terms:
            terms.clear()
        for r in range(len(self._rank_held)):
            self._rank_held[r] = 0
        if self._swa is not None:
            for r in range(len(self._swa_free)):
                self._swa_free[r] = self._swa.tokens
        self.queued_prompt_tokens = 0.0
        self.held_sequences = 0

    def drop_running(self, req: Request) -> None:
        """Take `req` out of the decode batch of an instance that is failing (`stop` resets the sums)."""
        heap = self.rank_running[req.dp_rank] if self._per_rank else self.running
        kept: list[Keyed] = []
        for seq in heap:
            assert isinstance(seq, _Seq)
            if seq.req is not req:
                kept.append(seq)
        if len(kept) != len(heap):
            heap[:] = kept
            if self._per_rank:
                self._rank_batch -= 1

    def queued(self) -> int:
        return len(self.waiting) + len(self.ready) + self.loading + len(self.joins)

    def busy_until(self, now: float) -> tuple[float, float]:
        """(busy seconds, batch-size-seconds) up to `now`, including the step in progress."""
        if self.mode == IDLE or now <= self._start:
            return self.busy_s, self.batch_seq_s
        dt = now - self._start
        return self.busy_s + dt, self.batch_seq_s + self._batch * dt

    def need_bytes(self, tokens: int) -> float:
        """HBM a sequence of `tokens` tokens takes here (global KV + state, replicated)."""
        return self._rep_bpt * tokens + self._rep_state

    # --- HBM admission and loads ---

    def _expire_waiting(self, now: float) -> None:
        limit = self.max_queue_wait_s
        if limit is None:
            return
        while self.waiting and now - self.waiting[0].arrival_s > limit:
            req = self.waiting.popleft()
            self._drop_waiting(req, "queue_timeout")

    def _drop_waiting(self, req: Request, reason: str) -> None:
        if self.role == "decode":
            self.held_sequences -= 1
            _prefill_side(req).handed_off(req)  # free the prefill side
        else:
            self.queued_prompt_tokens -= req.est_new_tokens
        self.cluster.reject(req, reason)

    def _sweep_hbm(self, now: float) -> None:
        """Drop this instance's expired cached copies before admitting (when the oldest is due)."""
        hbm = self.hbm
        if hbm.oldest_use_s() <= now - hbm.ttl_s:
            self.store.sweep_hbm(self.index, now)

    def _reservation_bytes(self, req: Request, *, with_output: bool) -> float:
        """HBM that `req` reserves here: its prompt's KV, and its output's if it decodes here."""
        return self.need_bytes(req.input_tokens + req.output_tokens if with_output else req.input_tokens)

    def _shared_in_place(self, req: Request) -> int:
        """Tokens of `req`'s shared prompt it can use in place from this instance's HBM (sim.kvcache.store)."""
        key = req.shared_key
        if key is None or self.role == "decode":
            return 0
        return self.store.shared_hbm_tokens(key, self.index, req.shared_tokens)

    def _fitting_head(self, *, with_output: bool) -> Request | None:
        """The head of the waiting queue, taken off it, if its KV fits in HBM beside the running
        sequences (cached copies are evicted to make room); None if it must wait. A head that
        cannot fit even in an empty HBM is rejected and the next one tried. `with_output`: the
        reservation holds the output tokens too (the sequence decodes here); a shared prompt used
        in place is not reserved again. With a running cap per DP rank the head is the first request
        whose rank has room: each rank's scheduler takes from its own queue, so a full rank's requests
        wait without holding up the others'; None when every rank is full. With an SWA token pool
        (`swa_pool`) a rank whose pool cannot hold its first waiting request takes none of its others."""
        waiting, hbm = self.waiting, self.hbm
        cap = self._rank_cap if self._colocated else 0  # a decode instance caps its ranks at the join
        held = self._rank_held
        if cap and min(held) >= cap:
            return None
        swa, swa_free = self._swa, self._swa_free
        # ranks whose SWA pool cannot take their next request: each rank's scheduler stops at its own head
        swa_blocked = [False] * len(swa_free)
        i = 0
        hold = 0
        while i < len(waiting):
            req = waiting[i]
            if cap and held[req.dp_rank] >= cap:
                i += 1
                continue
            if swa is not None:
                rank = req.dp_rank
                if swa_blocked[rank]:
                    i += 1
                    continue
                hold = swa.admission_tokens(req.input_tokens, self._swa_chunk)
                if hold > swa.tokens:  # not even in an empty pool
                    del waiting[i]
                    self._drop_waiting(req, "kv_exceeds_hbm")
                    continue
                if swa_free[rank] < hold:
                    swa_blocked[rank] = True
                    i += 1
                    continue
            need = self._reservation_bytes(req, with_output=with_output)
            shared, key = self._shared_in_place(req), req.shared_key
            if shared and key is not None:
                need += self.store.shared_hold_bytes(key, self.index) - shared * self._rep_bpt
            if hbm.can_reserve(need):
                del waiting[i]
                req.swa_hold_tokens = hold  # what `_admit` takes off its rank's SWA pool (0: no pool)
                return req
            if hbm.reserved_bytes > 0.0:
                return None  # head-of-line: wait for a running sequence to give its room back
            del waiting[i]
            self._drop_waiting(req, "kv_exceeds_hbm")
        return None

    def _admit(self) -> None:
        """FIFO admission to HBM of routed requests, then their prefix loads (or ready at once)."""
        store = self.store
        now = self.env.now_s
        self._sweep_hbm(now)
        if self.max_queue_wait_s is not None:
            self._expire_waiting(now)
        added = False
        colocated = self._colocated  # room for the output too
        while True:
            # the engine's running-request cap (vLLM --max-num-seqs: Scheduler.schedule stops taking WAITING
            # requests once max_num_running_reqs run; SGLang --max-running-requests: no new prefill batch
            # while the running batch is full) holds requests in prefill as well as decoding ones, so on
            # a colocated instance a request waits before its prefill, not after it
            if colocated and self._in_engine() >= self.max_decode_batch:
                break
            req = self._fitting_head(with_output=colocated)
            if req is None:
                break
            if self._rank_cap:
                self._rank_held[req.dp_rank] += 1
            if self._swa is not None:
                self._swa_free[req.dp_rank] -= req.swa_hold_tokens
            need = self._reservation_bytes(req, with_output=colocated)
            req.admitted_s = now
            req.prefill_chunk_tokens = self.chunk_tokens
            plan = plan_prefix(store, req, self.index, now)
            pinned = 0.0
            if plan is not None:
                req.swa_junction_tokens = plan.junction_tokens
            if plan is not None and plan.tokens:
                key, tokens, hbm_tokens = plan.key, plan.tokens, plan.hbm_tokens
                if hbm_tokens:
                    if plan.shared:
                        store.touch_hbm(key, self.index, now)
                    else:
                        pinned = store.pin_hbm(key, self.index)
                        req.pinned = True
                req.hit_tokens = tokens
                req.hbm_hit_tokens = hbm_tokens
                req.prefix_source = store.tier_names[plan.tier]
                req.shared_prefix_hit = plan.shared
                replay = plan.replay_tokens
                req.replay_tokens = replay
                new = req.input_tokens - tokens + replay
                self.queued_prompt_tokens += new - req.est_new_tokens
                req.est_new_tokens = req.new_tokens = new
                req.ctx_before = tokens - replay
                load_bytes = plan.load_bytes
                if load_bytes:
                    # V4.1's SWA ring (a pool hit always comes with a load from a lower tier) travels
                    # in the same job: one transfer per request, on the tier's read link
                    nbytes = load_bytes
                    tier = plan.tier
                    store.touch_lower(key, tier, now)
                    req.load_bytes = load_bytes
                    if plan.swa_node >= 0:
                        store.use_swa(key, now)
                        req.swa_load_bytes = store.policy.swa_state_bytes
                        nbytes += req.swa_load_bytes
                    req.loads_pending = 1
                    link = self.read_links[tier]
                    assert link is not None  # every tier below HBM has a read link
                    link.submit(nbytes, self._loaded, req, store.read_overhead_s(tier, tokens - hbm_tokens))
            shared, skey = self._shared_in_place(req), req.shared_key
            if shared and skey is not None:
                store.hold_shared(skey, self.index)
                req.shared_held = True
                need -= shared * self._rep_bpt
            store.reserve_hbm(self.index, need - pinned, now)
            req.reserved_p_bytes = need
            if req.loads_pending:
                req.load_start_s = now
                self.loading += 1
            else:
                self.ready.append(req)
                added = True
        if added:
            self.kick()

    def _loaded(self, req: Request) -> None:
        req.loads_pending = 0
        req.load_end_s = self.env.now_s
        self.loading -= 1
        self.ready.append(req)
        self.kick()

    def _admit_decode(self) -> None:
        """FIFO admission of prefilled requests; admitted ones pull their KV from the prefill side
        (only the part this instance does not hold already)."""
        store, policy = self.store, self.policy
        now = self.env.now_s
        self._sweep_hbm(now)
        while True:
            req = self._fitting_head(with_output=True)
            if req is None:
                break
            need = self._reservation_bytes(req, with_output=True)
            usable = 0
            pinned = 0.0
            key = req.parent_lineage
            if key is not None and req.prefix_tokens:
                held = store.hbm_tokens(key, self.index)
                if held:
                    usable = policy.hit_tokens(held, req.prefix_tokens, req.input_tokens)
                    if usable > 0:
                        pinned = store.pin_hbm(key, self.index)
                        req.d_pinned = True
                    else:
                        usable = 0
            store.reserve_hbm(self.index, need - pinned, now)
            req.reserved_d_bytes = need
            nbytes = (req.input_tokens - usable) * policy.global_kv_bytes_per_token + policy.seq_state_bytes
            req.kv_transfer_bytes = nbytes
            req.kv_transfer_start_s = now
            self.cluster.net_out[_prefill_side(req).node].submit(nbytes, self._kv_arrived, req)

    def _kv_arrived(self, req: Request) -> None:
        req.kv_transfer_end_s = self.env.now_s
        self.cluster.net_in[self.node].bytes_done += req.kv_transfer_bytes
        _prefill_side(req).handed_off(req)
        self.joins.append(req)
        self.kick()

    def handed_off(self, req: Request) -> None:
        """The decode side has the KV: free the prefill-side reservation, keep a cached copy."""
        self.store.finish(
            req.lineage,
            self.index,
            tokens=req.input_tokens,
            reserved_bytes=req.reserved_p_bytes,
            unpin_key=req.parent_lineage if req.pinned else None,
            now_s=self.env.now_s,
            persist=False,
            shared_key=req.shared_key,
            shared_held=req.shared_held,
        )
        req.pinned = False
        req.shared_held = False
        self._admit()

    # --- the engine loop ---

    def kick(self) -> None:
        """Something new to do (a request ready to prefill, a sequence ready to join): start a step
        if idle; during a decode span, end the span at the end of the step in progress and plan
        the next one from there at once (its timer moves there: nothing stale is left in the event heap)."""
        if self._in_boundary:
            return  # the boundary plans the next step itself
        mode = self.mode
        if mode == IDLE:
            self._plan(self.env.now_s)
        elif mode == SPAN:
            now = self.env.now_s
            start = self._start
            if now < start:  # a span planned from a boundary still ahead: re-plan from there
                self._plan(start)
                return
            # typed results: the timing model is any object (Any), and an untyped tuple or float would be
            # unpacked and added through generic calls
            ended: tuple[int, float] = self.timing.decode_step_end(self._batch, self.terms, now - start)
            steps, dt = ended
            if steps >= self._span_steps:
                return  # the span ends after the step in progress anyway
            end = start + dt
            self._end_step(end, steps)
            self._plan(end)

    def _end_step(self, end: float, steps: int) -> None:
        """The step or span in progress ends at `end` after `steps` decode steps: count its busy
        time and advance the decode batch."""
        dt = end - self._start
        self.busy_s += dt
        self.batch_seq_s += self._batch * dt
        if self.mode == STEP:
            self.prefill_busy_s += self._prefill_share * dt
        if steps:
            self.decode_steps += steps
            self.terms.advance(steps)
            if self._per_rank:
                self._advance_ranks(steps)

    def _advance_ranks(self, steps: int) -> None:
        """Per-rank progress: every rank advances `steps` decode steps, but in a step with chunks the
        ranks holding them."""
        skip = self.mode == STEP
        stalled, counts, sums = self._rank_stalled, self.rank_steps, self.rank_terms
        for r in range(self.dp_ranks):
            if not (skip and stalled[r]):
                counts[r] += steps
                sums[r].advance(steps)

    def _plan(self, start: float) -> None:
        """Plan the next step or span from `start` (now, or a boundary just ahead)."""
        if self._rank_cap and not self._colocated:
            self._join_by_rank(start)
        else:
            joins = self.joins
            while joins and self.decode_batch_size() < self.max_decode_batch:
                self._join(joins.popleft(), start)
        if self._per_rank:
            self._plan_ranks(start)
            return
        batch = len(self.running)
        decoding = decoding_with_prefill(batch, self._prefill_first)  # if this step carries prefill
        decode_rows = decoding * self._verify
        chunks = None
        if self.ready:
            dp = self.dp_ranks
            if dp == 1:
                budget = self.budget_tokens - decode_rows
                if budget > 0:
                    chunks = prefill_chunks(self.ready, budget, self.chunk_tokens)
            else:
                budget = rank_prefill_budget(self.budget_tokens, decode_rows, dp, self._budget_divided)
                if budget > 0:
                    chunks = prefill_chunks_dp(self.ready, budget, self.chunk_tokens, dp)
        dt: float  # typed: the timing model is any object (Any)
        if chunks:
            parts = self._prefill_step(chunks, decode_rows, start)
            heat = self._heat_at(start)
            dt = self.timing.step_s(
                decoding, self.terms if decoding == batch else self._no_terms, parts, heat
            )
            self._heated(heat, start, dt)
            self._span_steps = 1 if decoding else 0
        elif batch:
            dt = self._span(batch, _leave_step(self.running[0]) - self.decode_steps)
        else:
            self.mode = IDLE
            return
        self._run(start, batch, dt)

    def _plan_ranks(self, start: float) -> None:
        """`_plan` with per-rank progress (module doc): the ranks holding chunks run them under their
        whole share of the budget (SGLang's prefill batch, `--enable-mixed-chunk` off) and do not
        decode; the other ranks' sequences decode in the same step."""
        dp = self.dp_ranks
        chunks = None
        if self.ready:
            budget = rank_prefill_budget(self.budget_tokens, 0, dp, self._budget_divided)
            if budget > 0:
                chunks = prefill_chunks_dp(self.ready, budget, self.chunk_tokens, dp)
        stalled = self._rank_stalled
        for r in range(dp):
            stalled[r] = False
        if chunks:
            for req, _take in chunks:
                stalled[req.dp_rank] = True
        # the decoding ranks' sequences and summed terms
        terms = self.terms
        terms.clear()
        decoding = 0
        for r in range(dp):
            if not stalled[r]:
                decoding += len(self.rank_running[r])
                terms.add(self.rank_terms[r])
        batch = self._rank_batch
        dt: float  # typed: the timing model is any object (Any)
        if chunks:
            parts = self._prefill_step(chunks, decoding * self._verify, start)
            heat = self._heat_at(start)
            dt = self.timing.rank_step_s(decoding, terms, parts, heat)
            self._heated(heat, start, dt)
            self._span_steps = 1 if decoding else 0
        elif batch:
            dt = self._span(batch, self._rank_leave_steps())
        else:
            self.mode = IDLE
            return
        self._run(start, batch, dt)

    def _heat_at(self, start: float) -> float:
        """The board's heat at `start`: the last step holding chunks left it, and everything since cooled it."""
        power = self._power
        if power is None:
            return 0.0
        return power.cooled_s(self._heat_s, start - self._hot_end_s)

    def _heated(self, heat: float, start: float, dt: float) -> None:
        """A step holding chunks runs from `start` for `dt` seconds from `heat`: the board's heat after it."""
        power = self._power
        if power is not None:
            self._heat_s = power.heated_s(heat, dt)
            self._hot_end_s = start + dt

    def _rank_leave_steps(self) -> int:
        """Per-rank progress: decode steps (every rank advancing) until the next sequence leaves."""
        steps = -1
        for r in range(self.dp_ranks):
            heap = self.rank_running[r]
            if heap:
                left = _leave_step(heap[0]) - self.rank_steps[r]
                if steps < 0 or left < steps:
                    steps = left
        return steps

    def _prefill_step(
        self, chunks: list[tuple[Request, int]], decode_rows: int, start: float
    ) -> list[PrefillChunk]:
        """The step planned from `start` carries `chunks` beside `decode_rows` decode rows: the chunks as
        the timing model reads them."""
        parts: list[PrefillChunk] = []
        rows = 0
        for req, take in chunks:
            if req.computed_tokens == 0:
                req.prefill_start_s = start
            img = req.image_pending
            parts.append(
                PrefillChunk(
                    take,
                    req.ctx_before + req.computed_tokens,
                    last_chunk=req.computed_tokens + take >= req.new_tokens,
                    image_tokens=img,
                    image_count=req.image_count if img else 0,
                    rank=req.dp_rank,
                )
            )
            req.image_pending = 0
            rows += take
        self._prefill_share = rows / (rows + decode_rows)
        self.mode = STEP
        self._chunks = chunks
        self.steps += 1
        return parts

    def _span(self, batch: int, steps: int) -> float:
        """The next event is a decode span of `steps` steps of the whole `batch`: its seconds."""
        dt: float = self.timing.decode_span_s(batch, self.terms, steps)
        self.mode = SPAN
        self._span_steps = steps
        self.spans += 1
        return dt

    def _run(self, start: float, batch: int, dt: float) -> None:
        """The step or span planned runs from `start` for `dt` seconds with `batch` sequences."""
        self._batch = batch
        self._start = start
        self.env.set_timer(self._timer, start + dt)

    def _boundary(self, _arg: Any) -> None:
        if self.mode == IDLE:
            return  # the instance failed (sim.cluster.faults) after this wake-up was set
        now = self.env.now_s
        self._in_boundary = True
        self._end_step(now, self._span_steps)
        if self.mode == STEP:
            self._finish_chunks(now)
        if self._per_rank:
            for r in range(self.dp_ranks):
                self._leave_due(self.rank_running[r], self.rank_steps[r], now)
        else:
            self._leave_due(self.running, self.decode_steps, now)
        self.mode = IDLE
        self._in_boundary = False
        self._plan(now)

    def _leave_due(self, running: list[Keyed], steps: int, now: float) -> None:
        """The sequences of `running` (a heap) due to leave by decode step `steps` of its count finish."""
        while running and _leave_step(running[0]) <= steps:
            seq = pop(running)
            assert isinstance(seq, _Seq)
            req = seq.req
            self._leave(req)
            self._complete(req, now)

    def _finish_chunks(self, now: float) -> None:
        finished = False
        gave_back = False  # SWA slots given back: a waiting request may fit now
        for req, take in self._chunks:
            req.computed_tokens += take
            self.queued_prompt_tokens -= take
            if req.computed_tokens >= req.new_tokens:
                finished = True
                req.first_token_s = now
                if self._swa is not None:  # its lock holds its last chunk's leaf only: give back the rest
                    held = self._swa.held_tokens(take)
                    if held < req.swa_hold_tokens:
                        self._swa_free[req.dp_rank] += req.swa_hold_tokens - held
                        req.swa_hold_tokens = held
                        gave_back = True
                if req.shared_key is not None and not (req.shared_prefix_hit and req.prefix_source == "hbm"):
                    self.store.retain_shared(req.shared_key, self.index, req.shared_tokens, now)
                if req.output_tokens <= 1:
                    self._complete(req, now)
                elif self._colocated:
                    self.joins.append(req)
                else:
                    self.cluster.to_decode(req)
        self._chunks = []
        if finished:
            self.ready = [r for r in self.ready if r.computed_tokens < r.new_tokens]
        if gave_back and self.waiting:
            self._admit()

    def _join_by_rank(self, start: float) -> None:
        """Join waiting requests in order whose rank is under its running cap; the others keep their place."""
        held, cap = self._rank_held, self._rank_cap
        kept: deque[Request] = deque()
        joins = self.joins
        while joins and self.decode_batch_size() < self.max_decode_batch:
            req = joins.popleft()
            if held[req.dp_rank] >= cap:
                kept.append(req)
                continue
            held[req.dp_rank] += 1
            self._join(req, start)
        if kept:
            kept.extend(joins)
            self.joins = kept

    def _join(self, req: Request, now: float) -> None:
        steps = max(1, math.ceil((req.output_tokens - 1) / self._accept))
        terms: DecodeTerms = self.timing.decode_seq_terms(req.input_tokens + 1, steps)
        req.terms = terms
        req.decode_start_s = now
        if self._per_rank:  # its rank's heap, sums and count of decode steps
            r = req.dp_rank
            running, sums, joined = self.rank_running[r], self.rank_terms[r], self.rank_steps[r]
            self._rank_batch += 1
        else:
            running, sums, joined = self.running, self.terms, self.decode_steps
        req.join_step = joined
        if running:
            sums.add(terms)
        else:
            sums.set(terms)
        push(running, _Seq(joined + steps, req))

    def _leave(self, req: Request) -> None:
        """`req` left the decode batch (taken off its heap): take its terms off the batch's sums."""
        if self._per_rank:
            r = req.dp_rank
            running, sums, count = self.rank_running[r], self.rank_terms[r], self.rank_steps[r]
            self._rank_batch -= 1
        else:
            running, sums, count = self.running, self.terms, self.decode_steps
        if not running:
            sums.clear()  # no drift from repeated sums
            return
        terms = req.terms
        assert terms is not None  # set when it joined
        sums.remove(terms, count - req.join_step)

    def _complete(self, req: Request, now: float) -> None:
        """The last token is out: cache and persist the session's context, then report.
        A decode instance holds the request's decode-side reservation; a colocated instance (or a
        one-token request finishing on its prefill instance) holds the prefill-side one."""
        req.finish_s = now
        decode = self.role == "decode"
        if decode:
            self.held_sequences -= 1
            reserved_bytes, pinned = req.reserved_d_bytes, req.d_pinned
            req.d_pinned = False
        else:
            reserved_bytes, pinned = req.reserved_p_bytes, req.pinned
            req.pinned = False
        if self._rank_cap:
            self._rank_held[req.dp_rank] -= 1
        if self._swa is not None:
            self._swa_free[req.dp_rank] += req.swa_hold_tokens
            req.swa_hold_tokens = 0
        shared_held = req.shared_held
        req.shared_held = False
        self.store.finish(
            req.lineage,
            self.index,
            tokens=req.input_tokens + req.output_tokens,
            reserved_bytes=reserved_bytes,
            unpin_key=req.parent_lineage if pinned else None,
            now_s=now,
            persist=True,
            prompt_tokens=req.input_tokens,
            junction_tokens=req.swa_junction_tokens,
            chunk_from_tokens=req.ctx_before,
            chunk_tokens=req.prefill_chunk_tokens,
            shared_key=req.shared_key,
            shared_held=shared_held,
        )
        self.cluster.request_done(req)
        if self.waiting:
            if decode:
                self._admit_decode()
            else:
                self._admit()


class _Seq(Keyed):
    """A sequence of the decode batch: it leaves at decode step `leave_step` (ties: by request id)."""

    __slots__ = ("leave_step", "req")

    def __init__(self, leave_step: int, req: Request) -> None:
        super().__init__(float(leave_step), req.request_id)  # steps < 2**53: exact as floats
        self.leave_step = leave_step
        self.req = req


def _leave_step(item: Keyed) -> int:
    assert isinstance(item, _Seq)
    return item.leave_step


def _prefill_side(req: Request) -> Instance:
    """The prefill instance of a request on the decode side (set when it was routed)."""
    inst = req.pinst
    assert inst is not None
    return inst
