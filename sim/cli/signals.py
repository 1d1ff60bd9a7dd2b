"""SIGTERM handled like Ctrl-C: both unwind the command through its `finally` and `except
BaseException` blocks (staged output folders deleted, temporary files removed, worker processes
stopped), then `sim` says what it kept and exits 130 (SIGINT) or 143 (SIGTERM), as shells do."""

from __future__ import annotations

import signal


class Terminated(KeyboardInterrupt):
    """SIGTERM arrived; a KeyboardInterrupt so that every clean-up written for Ctrl-C runs for it."""


def _raise_terminated(signum: int, frame) -> None:
    raise Terminated()


def install() -> None:
    """Turn SIGTERM into `Terminated` in this process (the main thread of the CLI)."""
    signal.signal(signal.SIGTERM, _raise_terminated)


def exit_code(err: KeyboardInterrupt) -> int:
    return 128 + (signal.SIGTERM if isinstance(err, Terminated) else signal.SIGINT)


def name(err: KeyboardInterrupt) -> str:
    return "SIGTERM" if isinstance(err, Terminated) else "SIGINT (Ctrl-C)"


def interrupt_behind(err: BaseException) -> KeyboardInterrupt | None:
    """The interrupt `err` is or was raised from (typer raises its exit 130 from the interrupt)."""
    seen: BaseException | None = err
    while seen is not None:
        if isinstance(seen, KeyboardInterrupt):
            return seen
        seen = seen.__cause__ or seen.__context__
    return None
