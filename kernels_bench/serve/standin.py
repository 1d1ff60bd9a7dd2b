"""A stand-in step function for CPU tests and CI run directories: no model, it advances a ``FakeClock`` by
an affine step cost (or really sleeps that long with a wall clock). Never a measurement.

cost = base_s + decode_s * decode_batch + decode_ctx_s * sum(decode contexts)
       + prefill_token_s * prefill tokens + prefill_attn_s * sum(chunk * (context + chunk / 2))
"""

from __future__ import annotations

import time
from dataclasses import asdict, dataclass, field

from kernels_bench.serve.replay import FakeClock
from kernels_bench.serve.step_api import StepPlan


@dataclass(frozen=True)
class AffineCost:
    base_s: float = 4e-3
    decode_s: float = 5e-5
    decode_ctx_s: float = 2e-9
    prefill_token_s: float = 2e-5
    prefill_attn_s: float = 1e-10

    def step_s(self, plan: StepPlan) -> float:
        return (
            self.base_s
            + self.decode_s * len(plan.decode)
            + self.decode_ctx_s * sum(w.context_tokens for w in plan.decode)
            + self.prefill_token_s * plan.prefill_tokens
            + self.prefill_attn_s
            * sum(w.new_tokens * (w.context_tokens + w.new_tokens / 2) for w in plan.prefill)
        )


@dataclass
class StandinStepFunction:
    """Implements ``StepFunction``; ``clock`` None sleeps for real (a wall-clock dry run of the engine)."""

    block_tokens: int = 256
    num_blocks: int = 512
    cost: AffineCost = field(default_factory=AffineCost)
    clock: FakeClock | None = None
    model_name: str | None = None
    plans: list[StepPlan] = field(default_factory=list)
    keep_plans: bool = False
    last_graph_bucket: int | None = None

    def __call__(self, plan: StepPlan) -> None:
        if self.keep_plans:
            self.plans.append(plan)
        dt = self.cost.step_s(plan)
        if self.clock is not None:
            self.clock.advance(dt)
        else:
            time.sleep(dt)

    def describe(self) -> dict:
        cost = asdict(self.cost) if isinstance(self.cost, AffineCost) else type(self.cost).__name__
        return {"kind": "standin (not a measurement)", "cost": cost}
