"""Turn pydantic validation errors and cross-field problems into one line each:
`field.path: message (got VALUE); allowed: ...` (the caller's InputError adds `FILE: `).

Cross-field checks inside a model validator report through `raise_problems`, which keeps each
problem's own sub-path (pydantic alone would pin them all on the model that ran the check).
"""

from __future__ import annotations

import difflib
import types
import typing
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from pydantic import BaseModel, ValidationError
from pydantic_core import PydanticCustomError

from sim.config.suffixes import UNIT_SUFFIXES, split_suffix, unit_of
from sim.errors import InputError

_NO_VALUE = object()
_PROBLEMS = "sim_problems"
_FIELD = "sim_field"


@dataclass(frozen=True)
class Problem:
    """One cross-field problem; `path` is relative to the model whose validator found it."""

    path: str
    message: str
    value: Any = _NO_VALUE
    allowed: str | None = None


def raise_problems(problems: Iterable[Problem]) -> None:
    """Raise all `problems` at once from inside a pydantic validator (no-op when there are none)."""
    problems = tuple(problems)
    if problems:
        summary = "; ".join(f"{p.path}: {p.message}" for p in problems)
        raise PydanticCustomError(_PROBLEMS, "{summary}", {"summary": summary, "problems": problems})


def field_error(message: str, allowed: str | Iterable[str] | None = None) -> PydanticCustomError:
    """An error for a field validator to raise: printed as `path: message (got VALUE); allowed: ...`."""
    if allowed is not None and not isinstance(allowed, str):
        allowed = ", ".join(str(a) for a in allowed)
    return PydanticCustomError(_FIELD, "{message}", {"message": message, "allowed": allowed})


def problem_line(path: str, message: str, value: Any = _NO_VALUE, allowed: str | None = None) -> str:
    """The one-line form shared by every config loader (InputError uses the same layout)."""
    text = f"{path}: {message}" if path else message
    if value is not _NO_VALUE:
        text += f" (got {_short_repr(value)})"
    if allowed:
        text += f"; allowed: {allowed}"
    return text


def validation_input_error(err: ValidationError, model: type[BaseModel], *, file: str) -> InputError:
    """Every error of `err` as one line, with field paths as the user wrote them."""
    items = err.errors(include_url=False)

    def unit_slot(item: dict) -> tuple:
        """(parent loc, name with its unit replaced by *): equal for `hbm_bw_TBps` and `hbm_bw_Gbps`."""
        loc = tuple(item["loc"])
        pattern, suffix = split_suffix(str(loc[-1])) if loc else ("", None)
        return (loc[:-1], pattern) if suffix else ()

    # A key with the wrong unit suffix also makes the right one "missing": report it once, as the former.
    misnamed = {unit_slot(i) for i in items if i["type"] == "extra_forbidden"} - {()}
    lines: list[str] = []
    for item in items:
        if item["type"] == "missing" and unit_slot(item) in misnamed:
            continue
        lines.extend(_lines_for(item, model))
    return InputError.many(lines, file=file)


def validate_or_raise(model: type[BaseModel], data: Any, *, file: str, context: dict | None = None):
    """`model.model_validate(data)`, with every problem turned into one InputError line."""
    try:
        return model.model_validate(data, context=context)
    except ValidationError as err:
        raise validation_input_error(err, model, file=file) from None


# --- internals ---------------------------------------------------------------------------------


def _short_repr(value: Any, limit: int = 80) -> str:
    text = repr(value)
    return text if len(text) <= limit else text[: limit - 3] + "..."


def _unwrap(tp: Any) -> list[Any]:
    """The member types of an Optional/Union annotation (or the annotation itself)."""
    if typing.get_origin(tp) in (typing.Union, types.UnionType):
        return [a for a in typing.get_args(tp) if a is not type(None)]
    return [tp]


def _is_model(tp: Any) -> bool:
    return isinstance(tp, type) and issubclass(tp, BaseModel)


def _walk(root: type[BaseModel], loc: tuple) -> tuple[str, type[BaseModel] | None, str | None]:
    """(printable path, model class holding the last key, last field name) for a pydantic loc."""
    parts: list[str] = []
    current: list[Any] = [root]
    parent: type[BaseModel] | None = None
    field: str | None = None
    for item in loc:
        if isinstance(item, int):
            parts.append(f"[{item}]")
            current = [typing.get_args(t)[0] for t in current if typing.get_origin(t) in (list, tuple)]
            current = [m for t in current for m in _unwrap(t)]
            continue
        models = [t for t in current if _is_model(t)]
        owner = next((m for m in models if item in field_names(m)), None)
        if owner is not None:
            parent, field = owner, item
            parts.append(item)
            current = _unwrap(owner.model_fields[field_names(owner)[item]].annotation)
            continue
        dicts = [t for t in current if typing.get_origin(t) is dict]
        if dicts:  # a key of a user mapping (e.g. a pricing term name)
            parts.append(item)
            current = [m for t in dicts for m in _unwrap(typing.get_args(t)[1])]
            continue
        if models and len(models) == len(current):  # an unknown key of a model
            parent, field = models[0], item
            parts.append(item)
            current = []
            continue
        if current:
            continue  # a union-member label pydantic adds to loc (e.g. 'str', 'list[str]')
        parts.append(item)
    path = ""
    for part in parts:
        path += part if part.startswith("[") or not path else f".{part}"
    return path, parent, field


def field_names(model: type[BaseModel]) -> dict[str, str]:
    """Key as written in YAML (the alias, if any) -> attribute name, in declaration order."""
    return {(info.alias or name): name for name, info in model.model_fields.items()}


def _unit_field(path: str) -> str | None:
    """The innermost name on the path that carries a unit suffix (e.g. `ttft_s`)."""
    for name in reversed(path.replace("[", ".[").split(".")):
        if unit_of(name):
            return name
    return None


def _lines_for(item: dict, root: type[BaseModel]) -> list[str]:
    loc = tuple(item.get("loc", ()))
    kind = item.get("type", "")
    path, parent, field = _walk(root, loc)
    value = item.get("input", _NO_VALUE)
    ctx = item.get("ctx") or {}

    if kind == _PROBLEMS:
        return [
            problem_line(
                ".".join(p for p in (path, pr.path) if p).replace(".[", "["), pr.message, pr.value, pr.allowed
            )
            for pr in ctx["problems"]
        ]
    if kind == _FIELD:
        return [problem_line(path, ctx["message"], value, ctx.get("allowed"))]
    if kind == "finite_number":
        return [problem_line(path, "not a finite number", value, "a finite number")]
    if kind == "missing":
        return [problem_line(path, "required field is missing")]
    if kind == "extra_forbidden":
        return [_unknown_key_line(path, parent, field or "", value)]
    if kind == "literal_error":
        return [problem_line(path, "not one of the allowed values", value, ctx.get("expected"))]
    if kind == "too_short":
        n = ctx.get("min_length", 1)
        return [problem_line(path, "must not be empty" if n == 1 else f"needs at least {n} items", value)]
    if kind in ("model_type", "model_attributes_type", "dict_type"):
        return [problem_line(path, "expected a mapping of keys", value)]
    if kind in ("float_type", "int_type", "float_parsing", "int_parsing", "int_from_float"):
        unit_name = _unit_field(path)
        if isinstance(value, str) and unit_name:
            suffix = split_suffix(unit_name)[1]
            unit = UNIT_SUFFIXES[suffix]
            return [
                problem_line(
                    path,
                    f"expected a plain number in {unit} (the suffix {suffix} of '{unit_name}' is the unit), "
                    "not a string",
                    value,
                )
            ]
        wanted = "an integer" if kind.startswith("int") else "a number"
        return [problem_line(path, f"expected {wanted}", value)]
    message = item.get("msg", "invalid value")
    for prefix in ("Value error, ", "Assertion failed, "):
        message = message.removeprefix(prefix)
    for phrase in ("Input should", "String should", "List should", "Dictionary should"):
        message = message.replace(phrase, "must")
    return [problem_line(path, message, value)]


def _unknown_key_line(path: str, parent: type[BaseModel] | None, key: str, value: Any) -> str:
    if isinstance(value, dict | list):
        value = _NO_VALUE  # the key is the problem; a whole sub-mapping would only add noise
    if parent is None:
        return problem_line(path, "unknown key")
    fields = list(field_names(parent))
    allowed = ", ".join(fields)
    stem, suffix = split_suffix(key)
    if suffix:
        same_stem = [f for f in fields if split_suffix(f)[0] == stem and f != key]
        if same_stem:
            expected = same_stem[0]
            got_unit = UNIT_SUFFIXES.get(suffix, "not a unit sim knows")
            want_unit = unit_of(expected)
            return problem_line(
                path,
                f"wrong unit suffix '{suffix}' = {got_unit}; this field is '{expected}', in {want_unit}",
                value,
                allowed,
            )
    close = difflib.get_close_matches(key, fields, n=1)
    hint = f"unknown key; did you mean '{close[0]}'?" if close else "unknown key"
    return problem_line(path, hint, value, allowed)
