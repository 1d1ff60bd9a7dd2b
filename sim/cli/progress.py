"""The progress bar of a long command (`sim run`, `sim plan`, fleets): what is running, done of total, the
command's own fields, elapsed time and the ETA, in one place so that every long command reads alike."""

from __future__ import annotations

from rich.console import Console
from rich.progress import (
    BarColumn,
    MofNCompleteColumn,
    Progress,
    ProgressColumn,
    TextColumn,
    TimeElapsedColumn,
    TimeRemainingColumn,
)


def eta_bar(
    console: Console, *middle: str, transient: bool = False, refresh_per_second: float = 1
) -> Progress:
    """A bar of description, bar, done of total, `middle` (text columns with `task.fields`), elapsed and ETA.
    Redrawn once a second by default: rich's ten redraws a second cost ~40 ms of CPU a second, taken from
    the worker processes on a machine with as many cores as workers."""
    columns: list[ProgressColumn] = [
        TextColumn("[bold]{task.description}"),
        BarColumn(),
        MofNCompleteColumn(),
    ]
    columns += [TextColumn(m) for m in middle]
    columns += [TimeElapsedColumn(), TextColumn("ETA"), TimeRemainingColumn()]
    return Progress(*columns, console=console, transient=transient, refresh_per_second=refresh_per_second)
