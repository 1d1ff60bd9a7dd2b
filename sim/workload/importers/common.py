"""What every importer shares: strict field readers that name the file, line and field on error."""

from __future__ import annotations

import json
import math
from dataclasses import dataclass

from sim.errors import InputError


@dataclass(frozen=True)
class Where:
    """A position in a source file, for error messages: file, 1-based line, field path."""

    file: str
    line: int
    path: str = ""

    def at(self, key: str | int) -> Where:
        sub = f"[{key}]" if isinstance(key, int) else (f".{key}" if self.path else key)
        return Where(self.file, self.line, self.path + sub)

    def error(self, message: str, value: object = None, allowed: str | None = None) -> InputError:
        where = f"line {self.line}" + (f", field {self.path}" if self.path else "")
        return InputError(message, file=self.file, where=where, value=value, allowed=allowed)


def parse_json_line(raw: bytes, where: Where) -> object:
    try:
        return json.loads(raw)
    except (ValueError, UnicodeDecodeError) as err:
        raise where.error(f"not valid JSON ({err})") from None


# The readers below take the parent position and the key separately and build the full position
# only when they fail: importers call them for every field of every request.


def get_field(obj: object, key: str, where: Where, *, required: bool = True) -> object:
    if not isinstance(obj, dict):
        raise where.error("expected a JSON object", type(obj).__name__)
    if key not in obj:
        if required:
            raise where.at(key).error("missing field")
        return None
    return obj[key]


def as_count(value: object, where: Where, key: str | int | None = None) -> int:
    """A token count: a non-negative integer (integral floats are accepted)."""
    if type(value) is int and value >= 0:
        return value
    w = where if key is None else where.at(key)
    if (
        isinstance(value, bool)
        or not isinstance(value, int | float)
        or not math.isfinite(value)
        or value != int(value)
    ):
        raise w.error("not an integer", value, "a non-negative integer")
    if value < 0:
        raise w.error("negative count", value, ">= 0")
    return int(value)


def as_seconds(value: object, where: Where, key: str | int | None = None) -> float:
    """A duration or time in seconds: a finite number >= 0."""
    if type(value) in (int, float) and 0 <= value < math.inf:
        return float(value)
    w = where if key is None else where.at(key)
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value):
        raise w.error("not a number", value, "seconds")
    raise w.error("negative time", value, ">= 0")


def as_text(
    value: object, where: Where, key: str | int | None = None, *, allow_none: bool = True
) -> str | None:
    if isinstance(value, str) or (value is None and allow_none):
        return value
    raise (where if key is None else where.at(key)).error("not a string", value)
