"""The scenario's `event_loop` and `extensions` keys (docs/simpy_and_extensions.md).

    event_loop: native | simpy      which loop runs the model (default native, the fast one); both
                                    give the same outputs byte for byte, so the choice is not part
                                    of the run's inputs (left out of summary.json and the run id)
    extensions:                     user SimPy processes; any entry makes the run use SimPy
      - "package.module:function"   called as function(env, ops)
      - use: "package.module:function"
        params: {name: value, ...}  called as function(env, ops, **params)

The entry's form is checked here; that the module imports and the function exists is checked
before the run starts (sim.extensions.load), with the same one-line error.
"""

from __future__ import annotations

import re
from typing import Any, Literal

from pydantic import Field, JsonValue, model_validator

from sim.config.base import StrictModel

EventLoopName = Literal["native", "simpy"]
ENTRY_POINT = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*(\.[A-Za-z_][A-Za-z0-9_]*)*:[A-Za-z_][A-Za-z0-9_]*$")
ENTRY_POINT_FORM = "'package.module:function' (a module on the Python path, a function in it)"


class Extension(StrictModel):
    use: str = Field(pattern=ENTRY_POINT.pattern, description=ENTRY_POINT_FORM)
    params: dict[str, JsonValue] = Field(
        default_factory=dict, description="keyword arguments of the function"
    )

    @model_validator(mode="before")
    @classmethod
    def _from_string(cls, value: Any) -> Any:
        return {"use": value} if isinstance(value, str) else value
