"""The serving engine's scheduler: continuous batching under a token budget, chunked prefill, paged KV with
prefix reuse, eviction and preemption. One ``step()`` plans a step, runs it through the step function (timed
with the clock around the call) and applies its outcome.

Scheduling of one step (vLLM v1 / SGLang order; the settings mean what they mean in ``sim``'s scenario
``scheduler:`` section, sim/config/scheduler.py):

1. decode first: every running sequence whose prompt is done decodes one token; each takes one token of
   ``prefill_budget_tokens`` (the per-step token budget, decode rows included, as sim's batcher charges it).
   A decode that needs a new block and finds none preempts the most recently admitted running sequence
   (its blocks are freed, full ones stay cached, it goes back to the head of the queue and is recomputed
   later, usually from those cached blocks): vLLM's recompute preemption.
2. running prefills continue in admission order, each at most ``chunk_tokens`` per step, within the budget.
3. waiting requests are admitted in arrival order (head of line blocks) while budget remains and fewer than
   ``max_decode_batch`` sequences run. Admission looks the prompt's full blocks up in the pool (prefix
   hit: whole blocks, at most ``prompt - 1`` tokens, so at least one token is computed), and allocates the
   rest of the prompt's blocks at once; a prompt that needs more blocks than are free waits (cached free
   blocks are evicted, LRU, to make room); one larger than the whole pool is rejected (``kv_exceeds_hbm``).

A sequence whose last prompt chunk runs in a step gets its first token at that step's end; then it decodes
one token per step until ``output_tokens`` are out (the last token is never written to KV, as in vLLM).

Where ``sim``'s colocated instance (sim/cluster/instance.py) does otherwise, on purpose (this engine does what
real engines do):
- sim reserves HBM for the whole request (input + output) at admission and never preempts; the engine
  allocates the prompt at admission and decode blocks as they fill, and preempts when they run out.
- sim's ``max_decode_batch`` caps the decode batch only (a prefilled request waits to join it); here it
  caps all running sequences, prefilling ones included (vLLM's ``max_num_seqs``).
- sim matches a prefix by its session lineage (whole-context hits, else block-rounded); the engine by
  chained block hashes of the token ids, block-rounded always.
"""

from __future__ import annotations

import math
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np

from kernels_bench.serve.blocks import ROOT_HASH, BlockPool, chain_hash
from kernels_bench.serve.step_api import SeqWork, StepFunction, StepPlan, check_step_function


@dataclass(frozen=True)
class EngineConfig:
    prefill_budget_tokens: int  # tokens per step, decode rows included (sim: scheduler.prefill_budget_tokens)
    chunk_tokens: int  # prefill tokens of one sequence per step (sim: scheduler.chunk_tokens)
    max_decode_batch: int  # running sequences (sim: scheduler.max_decode_batch; vLLM max_num_seqs)
    num_blocks: int | None = None  # KV blocks used (None: all the step function holds)
    prefix_caching: bool = True

    def __post_init__(self) -> None:
        for name in ("prefill_budget_tokens", "chunk_tokens", "max_decode_batch"):
            if getattr(self, name) <= 0:
                raise ValueError(f"{name}={getattr(self, name)}: must be positive")
        if self.chunk_tokens > self.prefill_budget_tokens:
            raise ValueError(
                f"chunk_tokens ({self.chunk_tokens}) must not exceed prefill_budget_tokens ({self.prefill_budget_tokens})"
            )
        if self.num_blocks is not None and self.num_blocks <= 0:
            raise ValueError(f"num_blocks={self.num_blocks}: must be positive")


@dataclass
class EngineRequest:
    """A request as the engine receives it: ids of its prompt and of the tokens it will generate."""

    request_id: int
    session_id: int
    arrival_s: float
    input_ids: np.ndarray
    output_tokens: int
    output_ids: np.ndarray  # the made-up sampled tokens (len == output_tokens)

    @property
    def input_tokens(self) -> int:
        return len(self.input_ids)


@dataclass
class Outcome:
    """What happened to a request (the engine's side of its log row; times on the engine clock)."""

    request: EngineRequest
    status: str = "completed"  # completed | rejected
    reject_reason: str | None = None
    admitted_s: float = math.nan
    prefill_start_s: float = math.nan
    first_token_s: float = math.nan
    finish_s: float = math.nan
    hit_tokens: int = 0  # prefix found in the pool at first admission
    shared_hit: bool = False  # the hit's last block was computed by another session
    computed_tokens: int = 0  # prompt tokens prefilled, recomputation included
    preemptions: int = 0


@dataclass
class StepRecord:
    index: int
    start_s: float
    end_s: float
    graph_bucket: int | None
    graph_captured: bool | None  # the step captured its graph first (its wall time includes that)
    decode_context_tokens: list[int]
    prefill_context_tokens: list[int]
    prefill_new_tokens: list[int]
    prefill_last_chunk: list[bool]  # the chunk ends the sequence's prompt (its first token comes out)
    waiting: int  # queue after the step was planned
    running: int
    used_blocks: int  # after the step
    cached_free_blocks: int

    @property
    def wall_s(self) -> float:
        return self.end_s - self.start_s


@dataclass(eq=False)  # compared by identity (queue membership)
class _Seq:
    req: EngineRequest
    out: Outcome
    all_ids: np.ndarray  # prompt then outputs
    prompt_len: int  # tokens the current prefill covers (input, or input + generated after a preemption)
    blocks: list[int] = field(default_factory=list)
    num_computed: int = 0  # tokens in KV
    generated: int = 0
    chain: list[int] = field(default_factory=list)  # hashes of the first len(chain) full blocks of all_ids
    committed: int = 0  # leading blocks whose hash is in the pool

    @property
    def decoding(self) -> bool:
        return self.num_computed >= self.prompt_len

    def hashes(self, n_blocks: int, block_tokens: int) -> list[int]:
        parent = self.chain[-1] if self.chain else ROOT_HASH
        for k in range(len(self.chain), n_blocks):
            parent = chain_hash(parent, self.all_ids[k * block_tokens : (k + 1) * block_tokens])
            self.chain.append(parent)
        return self.chain[:n_blocks]


Clock = Callable[[], float]


class Engine:
    """Holds the queue, the running sequences and the block pool; ``step()`` runs one engine step."""

    def __init__(self, fn: StepFunction, cfg: EngineConfig, clock: Clock) -> None:
        check_step_function(fn)
        if cfg.num_blocks is not None and cfg.num_blocks > fn.num_blocks:
            raise ValueError(f"num_blocks={cfg.num_blocks} exceeds the step function's {fn.num_blocks}")
        self.fn = fn
        self.cfg = cfg
        self.clock = clock
        self.block_tokens = fn.block_tokens
        self.pool = BlockPool(cfg.num_blocks or fn.num_blocks, fn.block_tokens)
        self.waiting: deque[_Seq] = deque()
        self.running: list[_Seq] = []
        self.steps: list[StepRecord] = []
        self.done: list[Outcome] = []
        self.preemptions = 0

    # --- entry points ---

    def add(self, req: EngineRequest) -> None:
        if req.output_tokens < 1 or req.input_tokens < 1 or len(req.output_ids) != req.output_tokens:
            raise ValueError(
                f"request {req.request_id}: input {req.input_tokens}, output {req.output_tokens}"
            )
        seq = _Seq(req, Outcome(req), np.concatenate([req.input_ids, req.output_ids]), req.input_tokens)
        if self._blocks_for(req.input_tokens + 1) > self.pool.num_blocks:
            self._finish(seq, req.arrival_s, "kv_exceeds_hbm")
            return
        self.waiting.append(seq)

    @property
    def busy(self) -> bool:
        return bool(self.waiting or self.running)

    def step(self) -> list[Outcome]:
        """Plan, run and apply one step; returns the requests it finished (empty when nothing could run)."""
        plan, work = self._schedule()
        if plan.is_empty:
            return []
        start_s = self.clock()
        self.fn(plan)
        end_s = self.clock()
        self.steps.append(
            StepRecord(
                index=len(self.steps),
                start_s=start_s,
                end_s=end_s,
                graph_bucket=getattr(self.fn, "last_graph_bucket", None),
                graph_captured=getattr(self.fn, "last_step_captured", None),
                decode_context_tokens=[w.context_tokens for w in plan.decode],
                prefill_context_tokens=[w.context_tokens for w in plan.prefill],
                prefill_new_tokens=[w.new_tokens for w in plan.prefill],
                prefill_last_chunk=[
                    seq.num_computed + n >= seq.prompt_len for seq, n in work if not seq.decoding
                ],
                waiting=len(self.waiting),
                running=len(self.running),
                used_blocks=0,
                cached_free_blocks=0,
            )
        )
        finished = self._apply(work, start_s, end_s)
        self.steps[-1].used_blocks = self.pool.used_blocks
        self.steps[-1].cached_free_blocks = self.pool.cached_free_blocks
        return finished

    # --- scheduling ---

    def _blocks_for(self, tokens: int) -> int:
        return -(-tokens // self.block_tokens)

    def _work(self, seq: _Seq, new_tokens: int) -> SeqWork:
        c = seq.num_computed
        return SeqWork(
            seq_id=seq.req.request_id,
            block_ids=tuple(seq.blocks),
            context_tokens=c,
            new_tokens=new_tokens,
            token_ids=tuple(int(t) for t in seq.all_ids[c : c + new_tokens]),
        )

    def _schedule(self) -> tuple[StepPlan, list[tuple[_Seq, int]]]:
        budget = self.cfg.prefill_budget_tokens
        decode: list[SeqWork] = []
        prefill: list[SeqWork] = []
        work: list[tuple[_Seq, int]] = []
        # 1. decodes (a running sequence can be preempted by one ahead of it: iterate over a copy)
        for seq in list(self.running):
            if budget <= 0:
                break
            if seq not in self.running or not seq.decoding:
                continue
            need = self._blocks_for(seq.num_computed + 1) - len(seq.blocks)
            while need > 0 and not self.pool.can_allocate(need):
                victim = self.running[-1]
                self._preempt(victim)
                if victim is seq:
                    break
            if seq not in self.running:
                break  # it was the last one: nothing behind it to schedule
            if need > 0:
                seq.blocks += self.pool.allocate(need) or []
            decode.append(self._work(seq, 1))
            work.append((seq, 1))
            budget -= 1
        # 2. running prefills continue
        for seq in self.running:
            if budget <= 0:
                break
            if seq.decoding:
                continue
            take = min(seq.prompt_len - seq.num_computed, self.cfg.chunk_tokens, budget)
            prefill.append(self._work(seq, take))
            work.append((seq, take))
            budget -= take
        # 3. admissions, head of line
        while self.waiting and budget > 0 and len(self.running) < self.cfg.max_decode_batch:
            seq = self.waiting[0]
            hit = self._lookup(seq)
            need = self._blocks_for(seq.prompt_len) - len(hit)
            if not self.pool.can_allocate(need, hit):
                if (
                    self._blocks_for(seq.prompt_len) > self.pool.num_blocks
                ):  # never fits (a long preempted one)
                    self.waiting.popleft()
                    self._finish(seq, self.clock(), "kv_exceeds_hbm")
                    continue
                break
            self.waiting.popleft()
            self.pool.take(hit)
            seq.blocks = hit + (self.pool.allocate(need) or [])
            seq.num_computed = len(hit) * self.block_tokens
            seq.committed = len(hit)
            if math.isnan(seq.out.admitted_s):
                seq.out.admitted_s = self.clock()
                seq.out.hit_tokens = seq.num_computed
                seq.out.shared_hit = bool(hit) and self.pool.origin[hit[-1]] not in (-1, seq.req.session_id)
            self.running.append(seq)
            take = min(seq.prompt_len - seq.num_computed, self.cfg.chunk_tokens, budget)
            prefill.append(self._work(seq, take))
            work.append((seq, take))
            budget -= take
        return StepPlan(decode=tuple(decode), prefill=tuple(prefill)), work

    def _lookup(self, seq: _Seq) -> list[int]:
        if not self.cfg.prefix_caching:
            return []
        n = (seq.prompt_len - 1) // self.block_tokens
        return self.pool.match(self._hashes(seq, n)) if n > 0 else []

    def _hashes(self, seq: _Seq, n_blocks: int) -> list[int]:
        return seq.hashes(n_blocks, self.block_tokens)

    def _preempt(self, seq: _Seq) -> None:
        """Recompute preemption: free its blocks (full ones keep their hashes) and requeue it first."""
        self._commit(seq)
        self.pool.free(seq.blocks)
        seq.blocks = []
        seq.num_computed = 0
        seq.committed = 0
        seq.prompt_len = seq.req.input_tokens + seq.generated
        seq.out.preemptions += 1
        self.preemptions += 1
        self.running.remove(seq)
        self.waiting.appendleft(seq)

    # --- after the step ---

    def _commit(self, seq: _Seq) -> None:
        """Publish the hashes of the sequence's newly filled blocks."""
        if not self.cfg.prefix_caching:
            return
        full = seq.num_computed // self.block_tokens
        if full > seq.committed:
            hashes = self._hashes(seq, full)
            for k in range(seq.committed, full):
                self.pool.commit(seq.blocks[k], hashes[k], seq.req.session_id)
            seq.committed = full

    def _apply(self, work: list[tuple[_Seq, int]], start_s: float, end_s: float) -> list[Outcome]:
        finished: list[Outcome] = []
        for seq, n in work:
            if not seq.decoding:  # a prefill chunk
                if math.isnan(seq.out.prefill_start_s):
                    seq.out.prefill_start_s = start_s
                seq.out.computed_tokens += n
                seq.num_computed += n
                if seq.num_computed < seq.prompt_len:
                    self._commit(seq)
                    continue
                if math.isnan(seq.out.first_token_s):
                    seq.out.first_token_s = end_s
            else:
                seq.num_computed += 1
            seq.generated += 1
            self._commit(seq)
            if seq.generated >= seq.req.output_tokens:
                self.running.remove(seq)
                self.pool.free(seq.blocks)
                seq.blocks = []
                self._finish(seq, end_s, None)
                finished.append(seq.out)
        return finished

    def _finish(self, seq: _Seq, now_s: float, reason: str | None) -> None:
        seq.out.finish_s = now_s
        if reason is not None:
            seq.out.status = "rejected"
            seq.out.reject_reason = reason
        self.done.append(seq.out)
