"""An instance with an SWA token pool (SGLang with V4, sim.sched.swa_pool) admits a request only while the pool
holds the slots it will take, gives back what its last chunk does not need when its prefill ends, and the rest
when it finishes."""

from __future__ import annotations

import math

from sim.cluster.events import EventLoop
from sim.cluster.instance import Instance
from sim.cluster.link import SharedLink
from sim.core.request import Request
from sim.sched.swa_pool import SwaPool

from . import objects
from .test_engine_log import EVENTS, Log, RoundSteps


def _run(trace, pool_tokens):
    loop = EventLoop()
    st = objects.store(objects.policy("v41"), hbm_bytes=[100e9])
    link = SharedLink(loop, "link", 1e12)
    log = Log()
    pool = (
        None
        if pool_tokens is None
        else SwaPool(pool_tokens, page_tokens=256, window_tokens=128, decode_tokens=128)
    )
    cluster = objects.cluster(loop, st, lambda c: [
        Instance(loop, 0, "c", "colocated", 0, 8, RoundSteps(), st, cluster=c, budget_tokens=1024, chunk_tokens=1024,
                 max_decode_batch=8, kv_replication=1, read_links=[None, *[link] * len(st.tiers)],
                 max_queue_wait_s=None, step_composition="prefill_first", swa_pool=pool, swa_chunk_tokens=1024)
    ], net_out=[link], recorder=log)  # fmt: skip
    (inst,) = cluster.instances
    for rid, (at, inp, out) in enumerate(trace):
        loop.call_at(at, cluster.dispatch, Request(rid, rid, 0, 0, rid, None, None, at, inp, out, 0, 0, 0, 0))
    loop.run()
    times = {
        (r.request_id, e): getattr(r, e) for r in log.ended for e in EVENTS if not math.isnan(getattr(r, e))
    }
    return times, inst, log


def test_a_request_waits_for_the_slots_the_running_one_holds():
    # r0 holds 768 + 128 of 1,024: r1 (512 + 128) waits for r0's finish, not for the batch or the HBM
    trace = [(0.0, 600, 4), (0.1, 300, 2)]
    times, inst, log = _run(trace, pool_tokens=1024)
    assert times[(1, "admitted_s")] == times[(0, "finish_s")] == 0.25 + 3 * 0.125
    assert len(log.ended) == 2 and inst._swa_free == [1024]  # every slot given back
    free, _, _ = _run(trace, pool_tokens=None)
    assert free[(1, "admitted_s")] == 0.1  # no pool: admitted on arrival


def test_a_split_prompt_gives_back_what_its_last_chunk_does_not_hold_when_its_prefill_ends():
    # r0's 1,500 tokens in chunks of 1,024 and 476: admitted against 1,024 + 128, it holds 512 + 128 once prefilled,
    # so r1 (512 + 128) fits in the 1,536 at the end of r0's second prefill step, before r0 finishes
    times, inst, _ = _run([(0.0, 1500, 4), (0.1, 300, 2)], pool_tokens=1536)
    assert times[(0, "first_token_s")] == 0.5 and times[(1, "admitted_s")] == 0.5
    assert times[(1, "admitted_s")] < times[(0, "finish_s")] and inst._swa_free == [1536]


def test_a_prompt_no_empty_pool_could_hold_is_rejected():
    times, _, log = _run([(0.0, 600, 4)], pool_tokens=512)
    (req,) = log.ended
    assert req.reject_reason == "kv_exceeds_hbm" and (0, "admitted_s") not in times
