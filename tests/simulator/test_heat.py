"""An instance carries its board's heat at the power limit from step to step (sim.timing.sustained,
sim.cluster.instance): each step holding chunks starts from the heat the last one left, less what the decode
steps and idle time since have shed."""

from __future__ import annotations

import pytest

from sim.timing.sustained import PowerLimit

from .test_engine_log import RoundSteps, run_trace

LIMIT = PowerLimit(slowdown_x=1.2, delay_s=0.02, onset_s=0.6, recovery_x=0.5)


class HeatSeen(RoundSteps):
    """Fixed step times (RoundSteps'); keeps the heat each step holding chunks starts from."""

    def __init__(self, power_limit):
        self.power_limit = power_limit
        self.heats = []

    def step_s(self, batch_size, terms, prefill, heat_s=0.0):
        if prefill:
            self.heats.append(heat_s)
        return super().step_s(batch_size, terms, prefill)


@pytest.mark.parametrize("composition", ["mixed", "prefill_first"])
def test_chunk_steps_back_to_back_heat_the_board_and_the_decode_between_cools_it(composition):
    timing = HeatSeen(LIMIT)
    # the trace of test_engine_log: chunk steps [0, 0.25], [0.25, 0.5], [0.5, 0.75], decode until r2 arrives at
    # 1.3, its chunk step from the end of the decode step in progress (1.375 mixed; prefill_first: 1.5)
    log, _inst = run_trace([(0.0, 3000, 8), (0.1, 500, 3), (1.3, 200, 1)], composition, timing=timing)
    last_start = dict(log)["r2 prefill_start"]
    # 0.25 s a step from cool, back to back; at most the onset (0.6) stored; then 0.5 s of heat a second shed
    assert timing.heats == pytest.approx([0.0, 0.25, 0.5, 0.6 - 0.5 * (last_start - 0.75)])


def test_without_a_measured_limit_every_step_starts_cool():
    timing = HeatSeen(None)
    run_trace([(0.0, 3000, 8), (0.1, 500, 3), (1.3, 200, 1)], timing=timing)
    assert timing.heats == [0.0] * 4
