"""Strict YAML reading: syntax errors become one `InputError` line with line and column.

Differences from `yaml.safe_load`, each chosen to stop a silent misreading:
- a key repeated in one mapping is an error (PyYAML keeps the last one without a word);
- dates stay strings (`2026-08-06`), so every date field is validated the same way;
- `1e6` and `2E-3` are numbers (YAML 1.1 would read them as strings).
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import yaml

from sim.errors import InputError


class _StrictLoader(getattr(yaml, "CSafeLoader", yaml.SafeLoader)):  # C parser when built
    """SafeLoader without the timestamp resolver, with exponent floats and duplicate-key errors."""


# Copy the resolver table so the change stays local to this loader class.
_StrictLoader.yaml_implicit_resolvers = {
    first: [(tag, rx) for tag, rx in resolvers if tag != "tag:yaml.org,2002:timestamp"]
    for first, resolvers in yaml.SafeLoader.yaml_implicit_resolvers.items()
}
_StrictLoader.add_implicit_resolver(
    "tag:yaml.org,2002:float",
    re.compile(r"^[-+]?(?:[0-9][0-9_]*)(?:\.[0-9_]*)?[eE][-+]?[0-9]+$"),
    list("-+0123456789"),
)


def _construct_mapping(loader: _StrictLoader, node: yaml.MappingNode, deep: bool = False) -> dict:
    seen: dict[Any, yaml.Node] = {}
    for key_node, _ in node.value:
        key = loader.construct_object(key_node, deep=True)
        if key in seen:
            raise yaml.constructor.ConstructorError(
                "while reading a mapping",
                node.start_mark,
                f"duplicate key {key!r} (first at line {seen[key].start_mark.line + 1})",
                key_node.start_mark,
            )
        seen[key] = key_node
    return loader.construct_mapping(node, deep=deep)


_StrictLoader.add_constructor(yaml.resolver.BaseResolver.DEFAULT_MAPPING_TAG, _construct_mapping)


def parse_yaml(text: str, *, file: str) -> Any:
    """Parse YAML text; any syntax problem becomes an InputError naming `file`, line and column."""
    try:
        return yaml.load(text, Loader=_StrictLoader)  # noqa: S506 - a SafeLoader subclass
    except yaml.MarkedYAMLError as err:
        mark = err.problem_mark or err.context_mark
        where = f"line {mark.line + 1}, column {mark.column + 1}" if mark else None
        problem = err.problem or err.context or "invalid YAML"
        raise InputError(f"YAML syntax error: {problem}", file=file, where=where) from None
    except yaml.YAMLError as err:
        raise InputError(f"YAML error: {err}", file=file) from None


def read_yaml_mapping(path: str | Path) -> dict:
    """Read a YAML file whose top level must be a mapping (every config file of `sim` is one)."""
    path = Path(path)
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise InputError("file not found", file=str(path)) from None
    except (OSError, UnicodeDecodeError) as err:
        raise InputError(f"cannot read file: {err}", file=str(path)) from None
    data = parse_yaml(text, file=str(path))
    if not isinstance(data, dict):
        kind = "empty" if data is None else type(data).__name__
        raise InputError(f"expected a mapping of keys at the top level, found {kind}", file=str(path))
    return data
