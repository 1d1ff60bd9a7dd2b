"""A typer callback for float options: click's ranges let `inf` and `nan` through (NaN fails every
comparison), so every float option of the CLI passes through `finite`."""

from __future__ import annotations

import math

import typer


def finite(value: float | None) -> float | None:
    if value is not None and not math.isfinite(value):
        raise typer.BadParameter(f"{value} is not a finite number")
    return value
