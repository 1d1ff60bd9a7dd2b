"""The one exception type for bad user input.

Every loader (scenario, trace, model, hardware profile) raises `InputError`; the CLI turns it
into a single line on stderr and exit code 2. Nothing else in the package prints or exits.
"""

from __future__ import annotations

from collections.abc import Iterable


class InputError(Exception):
    """Bad input a user can fix: names the file, the field (or line/row), the value and what is allowed."""

    def __init__(
        self,
        message: str,
        *,
        file: str | None = None,
        where: str | None = None,
        value: object = None,
        allowed: str | Iterable[str] | None = None,
    ) -> None:
        self.file = file
        self.where = where
        self.value = value
        if allowed is not None and not isinstance(allowed, str):
            allowed = ", ".join(str(a) for a in allowed)
        self.allowed = allowed
        parts = []
        if file:
            parts.append(f"{file}")
        if where:
            parts.append(f"{where}")
        prefix = ": ".join(parts)
        text = f"{prefix}: {message}" if prefix else message
        if value is not None:
            text += f" (got {value!r})"
        if allowed:
            text += f"; allowed: {allowed}"
        self.lines = [text]
        super().__init__(text)

    @classmethod
    def many(cls, lines: list[str], *, file: str | None = None) -> InputError:
        """Several problems found at once (e.g. every bad field of a scenario), one per line."""
        err = cls(lines[0] if lines else "invalid input", file=file)
        err.lines = [f"{file}: {line}" if file else line for line in lines]
        err.args = ("\n".join(err.lines),)
        return err

    def __str__(self) -> str:
        return "\n".join(self.lines)
