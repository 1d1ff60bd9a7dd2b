"""DP attention in the engine: requests are placed on ranks round-robin as they arrive, and each
rank prefills its own requests under its share of the token budget (sim.sched.batcher,
sim.cluster.instance); the timing model gets each chunk with its rank."""

from sim.cluster.events import EventLoop
from sim.cluster.instance import Instance
from sim.cluster.link import SharedLink
from sim.core.request import Request
from sim.sched.batcher import prefill_chunks_dp, rank_prefill_budget

from . import objects
from .test_engine_log import RoundSteps


def _req(rid: int, tokens: int, rank: int) -> Request:
    req = Request(rid, rid, 0, 0, rid, None, None, 0.0, tokens, 1, 0, 0, 0, 0)
    req.dp_rank = rank
    return req


def test_each_rank_fills_its_own_budget_in_order():
    ready = [_req(0, 5000, 0), _req(1, 300, 0), _req(2, 5000, 1), _req(3, 5000, 0), _req(4, 100, 3)]
    chunks = prefill_chunks_dp(ready, 1000, 800, 4)
    # rank 0: 800 (the chunk cap) + 200 (its budget's rest), nothing for request 3; rank 1: 800; rank 3: 100
    assert [(r.request_id, take) for r, take in chunks] == [(0, 800), (1, 200), (2, 800), (4, 100)]
    assert prefill_chunks_dp(ready, 0, 800, 4) == []


class Recording(RoundSteps):
    """Fixed step times; keeps each step's chunks as (request tokens, rank) pairs."""

    def __init__(self):
        self.steps = []
        self.decoding = []  # per step with chunks: the sequences that decode in it

    def step_s(self, batch_size, terms, prefill):
        if prefill:
            self.steps.append([(c.new_tokens, c.rank) for c in prefill])
            self.decoding.append(batch_size)
        return super().step_s(batch_size, terms, prefill)


def test_requests_go_round_robin_and_prefill_on_their_own_rank():
    loop = EventLoop()
    st = objects.store(objects.policy("v41"), hbm_bytes=[100e9])
    link = SharedLink(loop, "link", 1e12)
    timing = Recording()
    cluster = objects.cluster(loop, st, lambda c: [
        Instance(loop, 0, "p", "colocated", 0, 4, timing, st, cluster=c, budget_tokens=2048, chunk_tokens=1024,
                 max_decode_batch=8, kv_replication=1, read_links=[None, *[link] * len(st.tiers)],
                 max_queue_wait_s=None, dp_ranks=4)
    ], net_out=[link])  # fmt: skip
    for rid, tokens in enumerate((1200, 300, 700, 400, 100)):  # ranks 0, 1, 2, 3, 0
        loop.call_at(
            0.0, cluster.dispatch, Request(rid, rid, 0, 0, rid, None, None, 0.0, tokens, 1, 0, 0, 0, 0)
        )
    loop.run()
    # budget 2048 over 4 ranks: 512 tokens per rank and step; a rank's requests share its 512.
    # The first arrival starts a step at once, alone
    assert timing.steps == [
        [(512, 0)],
        [(512, 0), (300, 1), (512, 2), (400, 3)],
        [(176, 0), (188, 2), (100, 0)],
    ]


def test_rank_budget_rules():
    # SGLang divides the instance budget (less every decode row) over the ranks; vLLM gives each rank
    # the whole budget less its own decode rows
    assert rank_prefill_budget(16384, 256, 8, True) == (16384 - 256) // 8
    assert rank_prefill_budget(16384, 256, 8, False) == 16384 - 32
    assert rank_prefill_budget(16384, 257, 8, False) == 16384 - 33  # the busiest rank's decode rows
    assert rank_prefill_budget(100, 99, 8, True) == 1  # something left: at least a token per rank
    assert rank_prefill_budget(100, 100, 8, True) == 0
    assert rank_prefill_budget(100, 800, 8, False) == 0


def test_per_rank_budget_gives_each_rank_the_whole_budget():
    loop = EventLoop()
    st = objects.store(objects.policy("v41"), hbm_bytes=[100e9])
    link = SharedLink(loop, "link", 1e12)
    timing = Recording()
    cluster = objects.cluster(loop, st, lambda c: [
        Instance(loop, 0, "p", "colocated", 0, 4, timing, st, cluster=c, budget_tokens=512, chunk_tokens=1024,
                 max_decode_batch=8, kv_replication=1, read_links=[None, *[link] * len(st.tiers)],
                 max_queue_wait_s=None, dp_ranks=4, dp_budget_divided=False)
    ], net_out=[link])  # fmt: skip
    for rid, tokens in enumerate((1200, 300, 700, 400)):  # ranks 0, 1, 2, 3
        loop.call_at(
            0.0, cluster.dispatch, Request(rid, rid, 0, 0, rid, None, None, 0.0, tokens, 1, 0, 0, 0, 0)
        )
    loop.run()
    # 512 tokens on every rank and step (divided, the same instance would give each rank 128)
    assert timing.steps[:2] == [[(512, 0)], [(512, 0), (300, 1), (512, 2), (400, 3)]]


def _dp_instance(loop, timing, **kw):
    st = objects.store(objects.policy("v41"), hbm_bytes=[100e9])
    link = SharedLink(loop, "link", 1e12)
    (inst,) = objects.cluster(loop, st, lambda c: [
        Instance(loop, 0, "p", "colocated", 0, 4, timing, st, cluster=c, budget_tokens=2048, chunk_tokens=1024,
                 max_decode_batch=8, kv_replication=1, read_links=[None, *[link] * len(st.tiers)],
                 max_queue_wait_s=None, dp_ranks=4, **kw)
    ], net_out=[link]).instances  # fmt: skip
    return inst


def test_prefill_first_stalls_every_rank_for_a_chunk_on_one():
    # r0 (rank 0) prefills, then decodes; r1 arrives on rank 1 while r0 decodes
    done = {}
    for prefill_first in (False, True):
        loop, timing = EventLoop(), Recording()
        inst = _dp_instance(loop, timing, prefill_first=prefill_first)
        for rid, (at, tokens, out) in enumerate(((0.0, 100, 20), (0.3, 1200, 2))):
            req = Request(rid, rid, 0, 0, rid, None, None, at, tokens, out, 0, 0, 0, 0)
            loop.call_at(at, inst.cluster.dispatch, req)
        loop.run()
        done[prefill_first] = (timing.steps, timing.decoding, inst.decode_steps)
    # mixed (vLLM): r0's decode row rides in r1's chunk steps and takes one row of SGLang's divided budget
    steps, decoding, _ = done[False]
    assert steps[1:] == [[(511, 1)], [(511, 1)], [(178, 1)]] and decoding[1:] == [1, 1, 1]
    # prefill_first (SGLang with spec decoding: the ranks sync the step's mode, prepare_mlp_sync_batch): r1's
    # chunk on rank 1 stalls r0's decode on rank 0 too, and the chunks get the whole 2048 / 4 per rank
    steps, decoding, _ = done[True]
    assert steps[1:] == [[(512, 1)], [(512, 1)], [(176, 1)]] and decoding[1:] == [0, 0, 0]
    assert done[True][2] == done[False][2]  # the same decode steps in all: only their timing moved
