"""Steps holding prefill chunks at the board's power limit, with the board's heat carried from step to step
(issue 29; docs/carry/sustained/README.md).

The kernel tables, the measured modules and the forward-pass check time kernels in bursts (kernels_bench.timing:
tens of milliseconds a row), before a GPU's power limit acts. Serving keeps a GPU busy: a step holding a prefill
chunk runs compute-bound kernels for 80-240 ms, and once the board draws its limit it lowers its SM clock. Measured
on lent H100 SXMs (700 W, `python3 -m kernels_bench.sustained`): back-to-back FP8 and BF16 GEMMs take
1.135-1.198x their burst time once the board is at its limit (SM clock 1,980 -> 1,245-1,380 MHz, clock-event
reason: the software power cap), while a device copy does not slow (0.98-0.99x) and draws about 480 W.

How fast the clock drops and recovers was measured with compute blocks alternating with copies or idle
(`--duty`, docs/carry/sustained "Duty cycles"). The board's state is a **heat**, in seconds of compute at the
burst clock: it grows by each second the GPU computes and falls by `recovery_x` seconds for each second it does
not (decode steps stream weights and KV, like the copy; or it idles). The excess over the burst at heat h is
E(h): nothing for the first `delay_s`, then linear to all of it at `onset_s`. A step of g seconds of GPU work at
the burst clock, starting at heat h, takes g x (1 + (slowdown - 1) x mean of E over [h, h + g]). With no delay, an
onset of 0.16 s and no memory (each step from heat 0) it is the rule first shipped.

The hardware profile holds what was measured (`accelerator.sustained_compute_*`); the H200 takes the H100's [D:
the same die, clocks and 700 W limit; not measured on an H200]; the B200's slowdown is read from a published
back-to-back attention run (flashinfer PR #2899: 1.172x at 1,000 W), its timing [D]. GPUs without them (B300,
GB200, the AMD profiles) keep the burst times. sim.timing.calibrated applies it to the GPU work of every step holding prefill
chunks (not to its link or host time); sim.cluster.instance carries each instance's heat between its steps.

Assumptions [D]: an instance's GPUs share one heat (a DP rank that prefills and the ranks that decode beside it
run the same experts); the whole of a chunk step heats the board, decode steps and idle cool it alike; the factor
measured on cuBLAS GEMMs stands for every kernel of the step.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class PowerLimit:
    """A board's measured slowdown at its power limit and how its heat builds and sheds (module doc)."""

    slowdown_x: float  # sustained / burst time of compute-bound work at the limit
    delay_s: float  # heat below which the clock has not dropped
    onset_s: float  # heat from which the whole slowdown applies
    recovery_x: float  # seconds of heat shed per second without compute

    def _integral(self, heat_s: float) -> float:
        """The integral of E from 0 to `heat_s`."""
        d, o = self.delay_s, self.onset_s
        if heat_s <= d:
            return 0.0
        if heat_s <= o:
            return (heat_s - d) * (heat_s - d) / (2.0 * (o - d))
        return (o - d) / 2.0 + (heat_s - o)

    def run_s(self, gpu_s: float, heat_s: float) -> float:
        """`gpu_s` seconds of GPU work at burst clocks, run from `heat_s` (module doc)."""
        if gpu_s <= 0.0:
            return gpu_s
        mean = (self._integral(heat_s + gpu_s) - self._integral(heat_s)) / gpu_s
        return gpu_s * (1.0 + (self.slowdown_x - 1.0) * mean)

    def heated_s(self, heat_s: float, step_s: float) -> float:
        """The heat after a step of `step_s` seconds from `heat_s` (at most `onset_s`: nothing is stored past
        it)."""
        h = heat_s + step_s
        return h if h < self.onset_s else self.onset_s

    def cooled_s(self, heat_s: float, rest_s: float) -> float:
        """The heat after `rest_s` seconds without compute (none: back to back, the heat stays)."""
        if rest_s <= 0.0:
            return heat_s
        h = heat_s - self.recovery_x * rest_s
        return h if h > 0.0 else 0.0


def power_limit_of(profile) -> PowerLimit | None:
    """The profile's measured power limit behaviour, or None where it has none (the burst times stand)."""
    acc = profile.accelerator
    slowdown = acc.sustained_compute_slowdown_x
    if slowdown is None or slowdown.value == 1.0:
        return None

    def value(field, default: float) -> float:
        return default if field is None else float(field.value)

    return PowerLimit(
        slowdown_x=float(slowdown.value),
        delay_s=value(acc.sustained_compute_delay_s, 0.0),
        onset_s=value(acc.sustained_compute_onset_s, 0.0),
        recovery_x=value(acc.sustained_recovery_x, float("inf")),
    )
