"""Configuration: frozen, strict pydantic schemas read from YAML, with one-line errors.

`scenario.py` holds the scenario schema and `load_scenario`; `yamlio.py` strict YAML reading;
`errors.py` the turning of validation errors into `FILE: field.path: message` lines.
"""

from sim.config.scenario import ModelRef, Scenario, load_scenario

__all__ = ["ModelRef", "Scenario", "load_scenario"]
