"""The invariants module raises a clear internal error for each kind of broken invariant (the
property tests and every run check that they hold)."""

import re
from types import SimpleNamespace

import pytest

from sim.metrics.invariants import InvariantError, check_ended, check_run

from . import objects


def _completed(**times):
    """A request of 1000 prompt tokens (100 hit) that completed, with these timestamps."""
    req = objects.request(100, 1000, out=4)
    req.status = "completed"
    req.hit_tokens = 100
    req.computed_tokens = req.new_tokens = 900
    t = dict(
        arrival_s=0.0,
        admitted_s=0.0,
        prefill_start_s=0.1,
        first_token_s=0.5,
        decode_start_s=0.5,
        finish_s=0.9,
    )
    for name, value in {**t, **times}.items():
        setattr(req, name, value)
    return req


def test_a_consistent_request_passes():
    check_ended(_completed())


@pytest.mark.parametrize(
    "times",
    [{"first_token_s": 0.05}, {"admitted_s": -1.0}, {"finish_s": 0.4}, {"decode_start_s": 0.95}],
)
def test_time_running_backwards_is_a_causality_error(times):
    with pytest.raises(InvariantError, match=r"invariant 'causality' broken: request 1"):
        check_ended(_completed(**times))


def test_a_kv_transfer_outside_first_token_and_decode_start_is_a_causality_error():
    with pytest.raises(InvariantError, match="KV transfer"):
        check_ended(_completed(kv_transfer_start_s=0.6, kv_transfer_end_s=0.7))


def test_prompt_tokens_not_all_computed_is_a_tokens_error():
    req = _completed()
    req.computed_tokens = 899
    with pytest.raises(InvariantError, match=r"'tokens'.*computed 899 prompt tokens.*= 900"):
        check_ended(req)


def test_a_rejection_without_a_counted_reason_is_an_error():
    req = objects.request(0, 1000)
    req.status, req.reject_reason, req.finish_s = "rejected", "tired", 0.0
    with pytest.raises(InvariantError, match="'rejection'.*'tired'"):
        check_ended(req)


def _sim(arrived=2, completed=1, rejected=1):
    st = objects.store(objects.policy("v41"))
    cluster = SimpleNamespace(arrived=arrived, completed=completed, rejected=rejected, in_flight=0, live={},
                              net_out=[])  # fmt: skip
    return SimpleNamespace(cluster=cluster, store=st, instances=objects.instances(st, [0, 1]))


def test_a_lost_request_is_a_conservation_error():
    check_run(_sim(), drain_limited=False)
    with pytest.raises(InvariantError, match=r"'conservation'.*3 arrived != 1 completed \+ 1 rejected"):
        check_run(_sim(arrived=3), drain_limited=False)


def test_a_tier_over_its_capacity_or_a_reservation_never_returned_is_a_capacity_error():
    sim = _sim()
    dram = sim.store.units_of("dram")[0]
    dram.peak_bytes = dram.capacity_bytes * 1.01
    with pytest.raises(InvariantError, match=rf"'capacity'.*{re.escape(dram.name)}: peak"):
        check_run(sim, drain_limited=False)
    sim = _sim()
    sim.store.hbm[1].reserve(1e6)
    with pytest.raises(InvariantError, match=r"'capacity'.*hbm\[1\]: 1000000 B still reserved"):
        check_run(sim, drain_limited=False)
    check_run(sim, drain_limited=True)  # a drain-limited run ends its leftovers where they stand
