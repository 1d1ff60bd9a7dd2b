"""`sim validate`: published serving results (case files) against what `sim` computes for the same
deployment and workload; the error per case is a measurement of the simulator, not a test."""

from sim.validate.cases import Case, load_cases
from sim.validate.runner import CaseResult, run_cases

__all__ = ["Case", "CaseResult", "load_cases", "run_cases"]
