"""`sim report` commands (to be filled by the issue that builds them)."""

import typer


def register(app: typer.Typer) -> None:
    """Add this module's commands to the top-level app."""
