"""The `sim` command line: the only place that prints, exits or reads argv.

Each command group lives in its own module with a `register(app)` function, so the tree of
`sim/cli/` mirrors the tree of `sim --help`.
"""

from __future__ import annotations

import sys

import typer
from rich.console import Console
from rich.markup import escape

from sim.errors import InputError

from . import (
    bench_cmd,
    calibrate_cmd,
    fleet_cmd,
    hw_cmd,
    model_cmd,
    plan_cmd,
    report_cmd,
    run_cmd,
    scenario_cmd,
    signals,
    sweep_cmd,
    trace_cmd,
    validate_cmd,
)

app = typer.Typer(
    name="sim",
    help="Simulate GPU clusters serving agent workloads with DeepSeek-V4-Flash and V4.1-Flash.",
    no_args_is_help=True,
    pretty_exceptions_enable=False,
    add_completion=False,
)


@app.callback()
def _root() -> None:
    """Simulate GPU clusters serving agent workloads with DeepSeek-V4-Flash and V4.1-Flash."""


@app.command()
def version() -> None:
    """Print the version of sim."""
    from sim import __version__

    typer.echo(__version__)


for _module in (
    model_cmd,
    hw_cmd,
    scenario_cmd,
    trace_cmd,
    run_cmd,
    bench_cmd,
    fleet_cmd,
    calibrate_cmd,
    report_cmd,
    plan_cmd,
    sweep_cmd,
    validate_cmd,
):
    _module.register(app)


def main() -> None:
    """Entry point: bad input becomes one clear message on stderr and exit code 2, never a traceback;
    SIGINT and SIGTERM end the command cleanly (sim.cli.signals) with exit code 130 or 143."""
    signals.install()
    err_console = Console(stderr=True, highlight=False, soft_wrap=True)
    try:
        app()
    except InputError as err:
        err_console.print(f"[bold red]error:[/] {escape(str(err))}", markup=True)
        sys.exit(2)
    except (KeyboardInterrupt, SystemExit) as err:
        interrupt = signals.interrupt_behind(err)  # typer turns an interrupt into exit 130
        if interrupt is None:
            raise
        err_console.print(f"interrupted by {signals.name(interrupt)}", markup=False)
        sys.exit(signals.exit_code(interrupt))
