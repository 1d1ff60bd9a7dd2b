"""The base of every config model: frozen, strict, unknown keys rejected (style.md §6), and numbers
that are finite and of a size the simulator can honour.

Bounds every model gets, so that no field needs its own (a field may add tighter ones):
- no NaN or infinity in any float, anywhere (a `.inf` warm-up would otherwise run a whole simulation
  and measure nothing);
- a field in seconds (name ending in `_s`) at most MAX_DURATION_S: longer than any span sim is built
  to simulate (traces cover weeks), so a larger value is a typo or a way to say "never", which sim
  does not support;
- an integer at most MAX_INT in size: beyond it a count stops being exact once it meets a float.
"""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, model_validator

from sim.config.errors import Problem, raise_problems

MAX_DURATION_S = 366 * 86_400  # a bound of ours [D]: one year of simulated time
MAX_INT = 2**53


class StrictModel(BaseModel):
    """Frozen after validation; no type coercion (a string is never read as a number); no extra keys;
    finite, bounded numbers (see the module doc)."""

    model_config = ConfigDict(
        frozen=True, strict=True, extra="forbid", validate_default=True, allow_inf_nan=False
    )

    @model_validator(mode="after")
    def _bounded_numbers(self) -> StrictModel:
        problems = []
        for name, info in type(self).model_fields.items():
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int | float):
                continue
            key = info.alias or name
            if key.endswith("_s") and value > MAX_DURATION_S:
                problems.append(
                    Problem(key, "longer than sim simulates (one year)", value, f"<= {MAX_DURATION_S:,} s")
                )
            elif isinstance(value, int) and abs(value) > MAX_INT:
                problems.append(Problem(key, "too large to count exactly", value, f"<= {MAX_INT:,} (2^53)"))
        raise_problems(problems)
        return self
