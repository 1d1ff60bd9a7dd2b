"""A step holding prefill chunks at the board's power limit (issue 29; docs/carry/sustained/README.md).

The kernel tables, the measured modules and the forward-pass check time kernels in bursts (kernels_bench.timing:
tens of milliseconds a row), before a GPU's power limit acts. Serving keeps a GPU busy: a step holding a prefill
chunk runs compute-bound kernels for 80-240 ms, and once the board draws its limit it lowers its SM clock. Measured
on the lent H100 SXM (700 W, `python3 -m kernels_bench.sustained`): back-to-back FP8 and BF16 GEMMs take
1.135-1.191x their burst time from about 0.1-0.2 s on (SM clock 1,980 -> 1,245-1,380 MHz, clock-event reason:
the software power cap), while a device copy does not slow (0.981x) and draws 482 W.

The hardware profile holds what was measured: `accelerator.sustained_compute_slowdown_x`, the sustained / burst
time (the H100's median of the three GEMMs, 1.136), and `accelerator.sustained_compute_onset_s`, how long the
board takes to reach it (0.16 s: the excess over the burst was about 0.2 of the sustained one in the first 50 ms,
0.4-0.8 by 100 ms and about all of it from 150-170 ms); the H200 takes the H100's [D: the same die, clocks and
700 W limit; not measured on an H200]. GPUs without them (the Blackwell and AMD profiles) keep the burst times.

sim.timing.calibrated applies `at_power_limit_s` to the GPU work of every step holding prefill chunks (attention,
projections, mHC, the experts, the forward-pass term, the drafter, the logits: the SM clock slows them all), not
to its link time (all-reduces, all-to-alls, context-parallel gathers) nor the host's (issue gaps; the eager floor
is still a max against the slowed work). The excess ramps in linearly over the onset from the step's start, so a
step of 10 ms (a small model's prefill, the served H100 runs) pays 3 % of it, one of 100 ms 31 %, one of 0.5 s 84 %.
Steps that only decode stream weights and KV and draw far less than the limit (the copy: 482 W): no slowdown.

Assumptions [D]: each step starts at the burst clock (no memory between steps: back-to-back chunk steps, which
keep the board at its limit, pay less than they would); after the ramp the whole measured slowdown at once (the
measured excess dipped to about 0.7 between 0.2 and 0.7 s and reached its tail over seconds as the board warmed
from 39 to 62 C); a chunk step's bandwidth-bound work slowed with the rest; the factor measured on cuBLAS GEMMs
stands for every kernel of the step.
"""

from __future__ import annotations


def slowdown_of(profile) -> float:
    """The profile's measured sustained / burst factor for compute-bound work, 1.0 where none is measured."""
    v = profile.accelerator.sustained_compute_slowdown_x
    return 1.0 if v is None else float(v.value)


def onset_of(profile) -> float:
    """Seconds of compute the profile's board takes to reach its sustained slowdown, 0.0 where none is measured."""
    v = profile.accelerator.sustained_compute_onset_s
    return 0.0 if v is None else float(v.value)


def at_power_limit_s(gpu_s: float, slowdown: float, onset_s: float) -> float:
    """`gpu_s` seconds of GPU work at burst clocks, run from a cool start: the slowdown's excess ramps in linearly
    over the first `onset_s` (its mean over the step: gpu_s / (2 onset) within the ramp, 1 - onset / (2 gpu_s)
    past it), measured on the burst duration."""
    if slowdown == 1.0 or gpu_s <= 0.0:
        return gpu_s
    if gpu_s <= onset_s:
        mean = gpu_s / (2.0 * onset_s)
    else:
        mean = 1.0 - onset_s / (2.0 * gpu_s)
    return gpu_s * (1.0 + (slowdown - 1.0) * mean)
