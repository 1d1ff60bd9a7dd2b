"""DP attention in the engine: requests are placed on ranks round-robin as they arrive, and each
rank prefills its own requests under its share of the token budget (sim.sched.batcher,
sim.cluster.instance); the timing model gets each chunk with its rank. With rank_prefill_first each
rank keeps its own decode progress: a rank holding a chunk does not decode in that step."""

import pytest
from hypothesis import given, settings

from sim.cluster.events import EventLoop
from sim.cluster.instance import Instance
from sim.cluster.link import SharedLink
from sim.core.request import Request
from sim.sched.batcher import prefill_chunks_dp, rank_prefill_budget

from . import objects
from .test_engine_log import DECODE_STEP_S, PREFILL_STEP_S, Log, RoundSteps, run_trace, traces


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
        self.on_chunk_ranks = []  # per step with chunks: whether the ranks holding them decode too

    def step_s(self, batch_size, terms, prefill, heat_s=0.0):
        return self._record(batch_size, terms, prefill, on_chunk_ranks=True)

    def rank_step_s(self, batch_size, terms, prefill, heat_s=0.0):
        return self._record(batch_size, terms, prefill, on_chunk_ranks=False)

    def _record(self, batch_size, terms, prefill, *, on_chunk_ranks):
        if prefill:
            self.steps.append([(c.new_tokens, c.rank) for c in prefill])
            self.decoding.append(batch_size)
            self.on_chunk_ranks.append(on_chunk_ranks)
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


def _dp_instance(loop, timing, recorder=None, **kw):
    store = objects.store(objects.policy("v41"), hbm_bytes=[100e9])
    link = SharedLink(loop, "link", 1e12)
    (inst,) = objects.cluster(loop, store, lambda c: [
        Instance(loop, 0, "p", "colocated", 0, 4, timing, store, cluster=c, budget_tokens=2048, chunk_tokens=1024,
                 max_decode_batch=8, kv_replication=1, read_links=[None, *[link] * len(store.tiers)],
                 max_queue_wait_s=None, dp_ranks=4, **kw)
    ], net_out=[link], recorder=recorder).instances  # fmt: skip
    return inst


def test_prefill_first_stalls_every_rank_for_a_chunk_on_one():
    # r0 (rank 0) prefills, then decodes; r1 arrives on rank 1 while r0 decodes
    done = {}
    for prefill_first in (False, True):
        loop, timing = EventLoop(), Recording()
        inst = _dp_instance(loop, timing, step_composition="prefill_first" if prefill_first else "mixed")
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


class RankLog(Log):
    """The log, and at each request's end how many decode steps its rank ran since it joined."""

    def __init__(self):
        super().__init__()
        self.inst = None
        self.rank_steps = {}

    def record(self, req):
        if self.inst is not None and self.inst.rank_steps and req.output_tokens > 1:
            self.rank_steps[req.request_id] = self.inst.rank_steps[req.dp_rank] - req.join_step
        super().record(req)


def _run_dp(trace, composition):
    """trace: (arrival_s, input_tokens, output_tokens) per request, placed round robin on the 4 ranks."""
    loop, timing, log = EventLoop(), Recording(), RankLog()
    inst = _dp_instance(loop, timing, recorder=log, step_composition=composition)
    log.inst = inst
    for rid, (at, tokens, out) in enumerate(trace):
        loop.call_at(
            at, inst.cluster.dispatch, Request(rid, rid, 0, 0, rid, None, None, at, tokens, out, 0, 0, 0, 0)
        )
    loop.run()
    return {r.request_id: r for r in log.ended}, timing, inst, log


# r0 and r1 decode on ranks 0 and 1 (r2, r3: one token each on ranks 2 and 3); r4 comes to rank 0 with a
# prompt of three chunks (512 + 512 + 176 under SGLang's 2048 / 4 per rank)
STALL_TRACE = [(0.0, 100, 20), (0.0, 100, 20), (0.0, 100, 1), (0.0, 100, 1), (1.0, 1200, 2)]


def test_rank_prefill_first_stalls_only_the_ranks_holding_chunks():
    ended, timing, inst, log = _run_dp(STALL_TRACE, "rank_prefill_first")
    # step 2 [0.25, 0.5] holds r1-r3's chunks on ranks 1-3: r0 (rank 0) decodes in it. r4's chunks
    # [1.125, 1.875] are on rank 0: r0 waits, r1 (rank 1) decodes in each
    assert timing.steps == [[(100, 0)], [(100, 1), (100, 2), (100, 3)], [(512, 0)], [(512, 0)], [(176, 0)]]
    assert timing.decoding == [0, 1, 1, 1, 1] and not any(timing.on_chunk_ranks)
    # r0: 19 decode steps from 0.25 (one in step 2, 5 until r4's cut at 1.125, 13 from 1.875) plus the three
    # prefill steps it waited for; r1: 19 from 0.5, three of them in r4's prefill steps
    finish = {rid: r.finish_s for rid, r in ended.items()}
    assert finish == {0: 3.5, 1: 3.25, 2: 0.5, 3: 0.5, 4: 2.0}
    assert finish[0] - ended[0].decode_start_s == PREFILL_STEP_S + 18 * DECODE_STEP_S + 3 * PREFILL_STEP_S
    assert finish[1] - ended[1].decode_start_s == 16 * DECODE_STEP_S + 3 * PREFILL_STEP_S
    # every decoding request ran exactly its output less the first token on its own rank
    assert log.rank_steps == {0: 19, 1: 19, 4: 1}
    # 22 steps decoded on some rank: rank 0 sat out r4's three chunk steps, ranks 1-3 step 2
    assert inst.rank_steps == [19, 21, 21, 21] and inst.decode_steps == 22
    assert inst.decode_batch_size() == 0 and all(t.context_tokens == 0.0 for t in inst.rank_terms)
    # prefill_first (the ranks synced, SGLang with spec decoding): every chunk stalls both, which then end together
    ended, timing, inst, _ = _run_dp(STALL_TRACE, "prefill_first")
    assert timing.decoding == [0, 0, 0, 0, 0] and all(timing.on_chunk_ranks)
    assert {rid: r.finish_s for rid, r in ended.items()} == {0: 3.625, 1: 3.625, 2: 0.5, 3: 0.5, 4: 2.0}
    assert inst.rank_steps == [] and inst.decode_batch_size() == 0  # no per-rank state


@pytest.mark.parametrize("composition", ["mixed", "prefill_first"])
def test_the_other_compositions_keep_one_batch(composition):
    # mixed and prefill_first keep no per-rank state and time every step by `step_s`, never `rank_step_s`
    ended, timing, inst, _ = _run_dp(STALL_TRACE, composition)
    assert len(ended) == len(STALL_TRACE) and all(timing.on_chunk_ranks)
    assert inst.rank_steps == [] and inst.rank_running == [] and inst.decode_batch_size() == 0


def test_rank_prefill_first_on_one_rank_is_prefill_first():
    # without DP attention the one rank holding a chunk is the whole instance: the same exact log
    trace = [(0.0, 3000, 8), (0.1, 500, 3), (1.3, 200, 1)]
    log, inst = run_trace(trace, composition="rank_prefill_first")
    assert log == run_trace(trace, composition="prefill_first")[0] and inst.rank_steps == []


def test_an_unknown_step_composition_is_refused():
    with pytest.raises(ValueError, match="'interleaved' is not one of"):
        _dp_instance(EventLoop(), Recording(), step_composition="interleaved")


@settings(max_examples=40, deadline=None)
@given(trace=traces(10))
def test_rank_prefill_first_completes_every_request_with_its_tokens(trace):
    trace = sorted(trace)
    ended, timing, inst, log = _run_dp(trace, "rank_prefill_first")
    assert sorted(ended) == list(range(len(trace)))  # every request completes
    for rid, (_, _, out) in enumerate(trace):
        req = ended[rid]
        if out > 1:
            assert log.rank_steps[rid] == out - 1  # its rank's decode steps while it ran: its output less one
            # its steps in decode spans and in prefill steps it decoded in or waited for
            spent = req.finish_s - req.decode_start_s
            assert spent >= (out - 1) * DECODE_STEP_S
            assert ((spent - (out - 1) * DECODE_STEP_S) / (PREFILL_STEP_S - DECODE_STEP_S)).is_integer()
    assert not any(timing.on_chunk_ranks)
    assert inst.decode_batch_size() == 0 and all(not heap for heap in inst.rank_running)
    assert all(0 <= steps <= inst.decode_steps for steps in inst.rank_steps)


def test_a_running_cap_per_rank_admits_from_the_rank_that_has_room():
    # 12 requests at once on 4 ranks (round-robin: rank = id % 4), a cap of 8: request 1 (rank 1) finishes first
    admitted = {}
    for per_rank in (False, True):
        loop = EventLoop()
        inst = _dp_instance(loop, RoundSteps(), rank_running_cap=2 if per_rank else 0)
        reqs = [
            Request(i, i, 0, 0, i, None, None, 0.0, 100, 3 if i == 1 else 200, 0, 0, 0, 0) for i in range(12)
        ]
        for req in reqs:
            loop.call_at(0.0, inst.cluster.dispatch, req)
        loop.run()
        assert all(r.finish_s > 0 for r in reqs)  # every request completes
        first_wave = sorted(reqs, key=lambda r: (r.admitted_s, r.request_id))[:8]
        assert [r.request_id for r in first_wave] == list(range(8))  # two a rank either way
        admitted[per_rank] = min(
            (r for r in reqs if r.request_id >= 8), key=lambda r: r.admitted_s
        ).request_id
        if per_rank:
            assert inst._rank_held == [0, 0, 0, 0]  # every admitted request has been counted out again
    # request 1's slot: the instance's cap takes the queue's head (request 8, rank 0); SGLang's per-rank cap
    # keeps rank 0 full, and rank 1 takes its own next request (9)
    assert admitted == {False: 8, True: 9}


def test_a_decode_pool_caps_each_rank_as_its_requests_are_handed_over(tmp_path):
    # SGLang's PD decode server places handed-over requests on its DP ranks round-robin and caps each rank at
    # --max-running-requests // dp: 4 ranks of 2 decode fewer at once than one cap of 8 over the instance
    import yaml

    from sim.api import run_scenario

    summaries = {}
    for cap in ("instance", "per_rank"):
        data = {
            "name": f"decode-cap-{cap}",
            "seed": 3,
            "models": ["deepseek-v4-flash"],
            "hardware": "nvidia-h200-hgx8",
            "engine": {"name": "sglang"},
            "cluster": {
                "pools": [
                    {
                        "name": "p",
                        "role": "prefill",
                        "instances": 1,
                        "gpus_per_instance": 4,
                        "tp": 4,
                        "ep": 4,
                    },
                    {
                        "name": "d",
                        "role": "decode",
                        "instances": 1,
                        "gpus_per_instance": 4,
                        "tp": 1,
                        "ep": 4,
                        "dp": 4,
                    },
                ]
            },
            "workload": {
                "benchmark": {
                    "isl_tokens": 1024,
                    "osl_tokens": 256,
                    "length_jitter_frac": 0.9,
                    "concurrency": 32,
                },
                "warmup_s": 0,
                "max_requests": 160,
            },
            "scheduler": {"max_decode_batch": 8, "dp_running_cap": cap},
            "capacity": "off",
            "outputs": {"write_requests": False},
        }
        path = tmp_path / f"{cap}.yaml"
        path.write_text(yaml.safe_dump(data))
        summaries[cap] = run_scenario(path, out_dir=tmp_path / cap).summary["models"]["deepseek-v4-flash"]
    for s in summaries.values():
        assert s["requests_completed"] == s["requests_arrived"] == 160  # every request ends, once
    # a full rank's handed-over requests wait while another rank has room: less decoded at once, lower throughput
    assert summaries["per_rank"]["output_tokens_per_s"] < summaries["instance"]["output_tokens_per_s"]
