"""Dotted-path overrides of a scenario document (a plain dict read from YAML).

A path is dot-separated keys; a list is entered with a selector: `cluster.pools[name=decode].nodes`
picks the one pool whose `name` is `decode`, `models[0]` the first element. A mapping value is
deep-merged into a mapping already there; anything else replaces the old value. The result is
validated by the scenario schema afterwards, so a misspelt key is caught there (missing mappings
on the way are created: the template may leave a section to its defaults); a path that cannot be
walked (a selector matching nothing or several, a key inside a non-mapping) fails here, naming it.
"""

from __future__ import annotations

import copy
import re
from collections.abc import Mapping
from typing import Any

from sim.errors import InputError

_SEGMENT = re.compile(r"^(?P<key>[A-Za-z0-9_-]+)(?:\[(?P<sel>[^\]]+)\])?$")


def parse_path(path: str) -> list[tuple[str, str | None]]:
    """`a.b[name=x].c` -> [('a', None), ('b', 'name=x'), ('c', None)]."""
    parts: list[tuple[str, str | None]] = []
    # Split on dots outside brackets: a selector value may itself contain dots (`[name=v4.1]`).
    for raw in re.split(r"\.(?![^\[]*\])", path):
        match = _SEGMENT.match(raw)
        if not match:
            raise InputError(
                "bad override path segment",
                where=path,
                value=raw,
                allowed="key or key[field=value] or key[index]",
            )
        parts.append((match["key"], match["sel"]))
    return parts


def _select(items: Any, selector: str, path: str) -> int:
    """The index of the one element of `items` that `selector` picks."""
    if not isinstance(items, list):
        raise InputError("selector used on something that is not a list", where=path, value=selector)
    if selector.isdigit():
        index = int(selector)
        if index >= len(items):
            raise InputError(
                "list index out of range", where=path, value=index, allowed=f"0..{len(items) - 1}"
            )
        return index
    field, sep, wanted = selector.partition("=")
    if not sep:
        raise InputError("bad selector", where=path, value=selector, allowed="field=value or an index")
    hits = [i for i, item in enumerate(items) if isinstance(item, dict) and str(item.get(field)) == wanted]
    if len(hits) != 1:
        found = [item.get(field) for item in items if isinstance(item, dict)]
        raise InputError(
            f"selector matches {len(hits)} elements, needs exactly 1",
            where=path,
            value=selector,
            allowed=found,
        )
    return hits[0]


def _merge(old: Any, new: Any) -> Any:
    if isinstance(old, dict) and isinstance(new, Mapping):
        merged = dict(old)
        for key, value in new.items():
            merged[key] = _merge(old.get(key), value)
        return merged
    return copy.deepcopy(new)


def apply_overrides(document: Mapping[str, Any], overrides: Mapping[str, Any]) -> dict:
    """A deep copy of `document` with every `path: value` of `overrides` applied, in order."""
    result = copy.deepcopy(dict(document))
    for path, value in overrides.items():
        node: Any = result
        parts = parse_path(path)
        for depth, (key, selector) in enumerate(parts):
            last = depth == len(parts) - 1
            if not isinstance(node, dict):
                raise InputError("path walks into something that is not a mapping", where=path, value=key)
            if last and selector is None:
                node[key] = _merge(node.get(key), value)
                break
            if selector is None:
                node = node.setdefault(key, {})  # a section the template leaves to its defaults
                continue
            if key not in node:
                raise InputError("selector on a list the scenario does not have", where=path, value=key)
            items = node[key]
            index = _select(items, selector, path)
            if last:  # `pools[name=x]: {...}` merges into the selected element
                items[index] = _merge(items[index], value)
            node = items[index]
    return result
