"""`sim sweep`: one benchmark scenario at a series of concurrencies per model, run in parallel, and
the throughput-latency frontier it draws (output tokens/s per GPU against tokens/s per user)."""

from sim.sweep.points import at_tpot, point_record
from sim.sweep.runner import SweepResult, run_sweep

__all__ = ["SweepResult", "at_tpot", "point_record", "run_sweep"]
