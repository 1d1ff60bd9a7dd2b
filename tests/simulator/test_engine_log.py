"""One instance's engine loop on a three-request trace: the exact (event, time) log.

The timing model is a stand-in with round binary step times (a step with prefill rows 0.25 s,
a decode-only step 0.125 s), so every time below is exact and the log shows the loop's mechanics
alone: FIFO admission, chunked prefill under the token budget, mixed steps, a join cutting a
decode span at the end of the step in progress, and a one-token request ending at its first token.
"""

import math

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from sim.cluster.events import EventLoop
from sim.cluster.instance import Instance
from sim.cluster.link import SharedLink
from sim.cluster.simpy_loop import SimPyLoop
from sim.core.request import Request
from sim.metrics.recorder import Recorder
from sim.timing.batch import DecodeTerms

from . import objects

PREFILL_STEP_S = 0.25
DECODE_STEP_S = 0.125


class RoundSteps:
    """A timing model with fixed step times (the engine only adds the terms up)."""

    name = "round-steps"
    accepted_tokens_per_step = 1.0
    verified_tokens_per_step = 1
    power_limit = None  # no power limit: the board's heat is not read

    def decode_seq_terms(self, context_tokens, steps):
        return DecodeTerms(context_tokens=float(context_tokens), context_tokens_growth=1.0)

    def step_s(self, batch_size, terms, prefill, heat_s=0.0):
        return PREFILL_STEP_S if prefill else DECODE_STEP_S

    def decode_span_s(self, batch_size, terms, steps):
        return DECODE_STEP_S * steps

    def decode_step_end(self, batch_size, terms, elapsed_s):
        steps = math.floor(elapsed_s / DECODE_STEP_S) + 1
        return steps, DECODE_STEP_S * steps


class Log(Recorder):
    def __init__(self):
        super().__init__(None, slo_ttft_s=10.0, slo_tpot_s=1.0, tiers=["dram", "ssd"])
        self.ended = []

    def record(self, req):
        self.ended.append(req)
        super().record(req)


EVENTS = ("arrival_s", "admitted_s", "prefill_start_s", "first_token_s", "decode_start_s", "finish_s")


# the own loop and the SimPy one give the same log (sim.cluster.simpy_loop)
LOOPS = pytest.mark.parametrize("new_loop", [EventLoop, SimPyLoop], ids=["native", "simpy"])


def run_trace(trace, composition="mixed", new_loop=EventLoop, timing=None):
    """trace: (arrival_s, input_tokens, output_tokens) per request; returns the log and the instance (on
    `timing`, RoundSteps by default)."""
    loop = new_loop()
    st = objects.store(objects.policy("v41"), hbm_bytes=[100e9])
    link = SharedLink(loop, "link", 1e12)
    log = Log()
    cluster = objects.cluster(loop, st, lambda c: [
        Instance(loop, 0, "c", "colocated", 0, 8, timing or RoundSteps(), st, cluster=c, budget_tokens=2048, chunk_tokens=1024,
                 max_decode_batch=8, kv_replication=1, read_links=[None, *[link] * len(st.tiers)],
                 max_queue_wait_s=None, step_composition=composition)
    ], net_out=[link], recorder=log)  # fmt: skip
    (inst,) = cluster.instances
    for rid, (at, inp, out) in enumerate(trace):
        req = Request(rid, rid, 0, 0, rid, None, None, at, inp, out, 0, 0, 0, 0)
        loop.call_at(at, cluster.dispatch, req)
    loop.run()
    events = sorted(
        (getattr(r, e), r.request_id, i)
        for r in log.ended
        for i, e in enumerate(EVENTS)
        if not math.isnan(getattr(r, e))
    )
    return [(f"r{rid} {EVENTS[i].removesuffix('_s')}", t) for t, rid, i in events], inst


@LOOPS
def test_three_requests_on_one_instance_give_this_exact_log(new_loop):
    # GIVEN one colocated instance (token budget 2048, chunks of 1024) and three requests
    # WHEN they run
    log, inst = run_trace([(0.0, 3000, 8), (0.1, 500, 3), (1.3, 200, 1)], new_loop=new_loop)
    # THEN the loop does exactly this
    assert log == [
        ("r0 arrival", 0.0),
        ("r0 admitted", 0.0),
        ("r0 prefill_start", 0.0),  # step 1 [0, 0.25]: r0's first 1024 tokens
        ("r1 arrival", 0.1),
        ("r1 admitted", 0.1),  # waits for the step in progress
        ("r1 prefill_start", 0.25),  # step 2 [0.25, 0.5]: r0 1024 + r1's 500 tokens
        ("r1 first_token", 0.5),
        ("r1 decode_start", 0.5),  # step 3 [0.5, 0.75]: r1 decodes beside r0's last 952 tokens
        ("r0 first_token", 0.75),
        ("r0 decode_start", 0.75),  # span [0.75, 0.875]: one decode step, until r1 leaves
        ("r1 finish", 0.875),  # 3 tokens: the first + 2 decode steps; then r0 alone: a span of 6 steps
        ("r2 arrival", 1.3),
        ("r2 admitted", 1.3),  # cuts r0's span at the end of its step in progress (4 x 0.125 s)
        ("r2 prefill_start", 1.375),  # mixed step [1.375, 1.625]
        ("r2 first_token", 1.625),
        ("r2 finish", 1.625),  # one output token: done at its first token
        ("r0 finish", 1.75),  # 8 tokens: the first + 7 decode steps (1 + 4 + 1 + 1)
    ]
    assert (inst.steps, inst.spans, inst.busy_s) == (4, 3, 1.75)


@LOOPS
def test_prefill_first_stalls_the_running_decodes_for_each_prefill_step(new_loop):
    # GIVEN the same instance and trace, with SGLang's step composition (sim.sched.batcher: a step with
    # prefill chunks decodes nothing; the chunks get the whole budget)
    log, inst = run_trace(
        [(0.0, 3000, 8), (0.1, 500, 3), (1.3, 200, 1)], composition="prefill_first", new_loop=new_loop
    )
    # THEN every decode waits out each prefill step
    assert log == [
        ("r0 arrival", 0.0),
        ("r0 admitted", 0.0),
        ("r0 prefill_start", 0.0),  # step 1 [0, 0.25]: r0's first 1024 tokens
        ("r1 arrival", 0.1),
        ("r1 admitted", 0.1),
        ("r1 prefill_start", 0.25),  # step 2 [0.25, 0.5]: r0 1024 + r1's 500 tokens
        ("r1 first_token", 0.5),
        ("r1 decode_start", 0.5),  # step 3 [0.5, 0.75]: r0's last 952 tokens alone; r1 waits
        ("r0 first_token", 0.75),
        ("r0 decode_start", 0.75),  # span [0.75, 1.0]: r1's 2 decode steps
        ("r1 finish", 1.0),
        ("r2 arrival", 1.3),
        ("r2 admitted", 1.3),  # cuts r0's span after 3 steps (1.0 + 3 x 0.125)
        ("r2 prefill_start", 1.375),  # prefill step [1.375, 1.625]: r0 waits
        ("r2 first_token", 1.625),
        ("r2 finish", 1.625),
        ("r0 finish", 1.875),  # r0's 7 decode steps + the one prefill step it waited for
    ]
    times = dict(log)
    # each decode lasts its decode steps plus the prefill steps it waited for (mixed: r1 0.375, r0 1.0)
    assert times["r1 finish"] - times["r1 decode_start"] == 2 * DECODE_STEP_S + PREFILL_STEP_S
    assert times["r0 finish"] - times["r0 decode_start"] == 7 * DECODE_STEP_S + PREFILL_STEP_S
    assert (inst.steps, inst.spans, inst.busy_s) == (4, 3, 1.875)
    assert inst.prefill_busy_s == 4 * PREFILL_STEP_S  # every step with chunks is all prefill


def traces(max_requests: int):
    """Hypothesis traces: (arrival_s on an eighth-second grid, input_tokens, output_tokens) per request."""
    return st.lists(
        st.tuples(st.integers(0, 40).map(lambda k: k / 8), st.integers(1, 5000), st.integers(1, 12)),
        min_size=1,
        max_size=max_requests,
    )


@settings(max_examples=40, deadline=None)
@given(trace=traces(8))
def test_prefill_first_decodes_only_in_decode_steps(trace):
    # with prefill first, a decoding sequence's time is its decode steps plus whole prefill steps it waited
    # for: a decode that rode in a prefill step (mixed) would leave PREFILL - DECODE, half a prefill step, over
    log, _ = run_trace(sorted(trace), composition="prefill_first")
    times = dict(log)
    for rid, (_, _, out) in enumerate(sorted(trace)):
        if out > 1:
            waited = times[f"r{rid} finish"] - times[f"r{rid} decode_start"] - (out - 1) * DECODE_STEP_S
            assert waited >= 0 and (waited / PREFILL_STEP_S).is_integer(), (rid, waited)
