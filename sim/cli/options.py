"""Command-line options shared by several commands, declared once.

`Workers` and `RayAddress` say where the simulations of `sim sweep`, `sim plan` and `sim validate`
run (sim.plan.executors); `Jobs` how many models of one scenario `sim run` simulates at once
(sim.api, sim.processes).
"""

from __future__ import annotations

import os
from typing import Annotated

import typer

CORES = os.cpu_count() or 1

Workers = Annotated[
    int, typer.Option("--workers", min=1, help="simulations run at once (local processes or local Ray CPUs)")
]
RayAddress = Annotated[
    str | None,
    typer.Option(
        "--ray",
        help="'local': a local Ray instance of --workers CPUs; else the address of a running Ray cluster "
        "(host:port or ray://host:port), whose CPUs decide the parallelism",
    ),
]
Jobs = Annotated[
    int,
    typer.Option(
        "--jobs",
        "-j",
        min=1,
        help="models simulated at once, each in its own process (default: one per core)",
    ),
]
