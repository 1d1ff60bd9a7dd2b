"""Building canonical request tables from column arrays, with the defaults every producer shares."""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import numpy as np
import pyarrow as pa

from .schema import REQUEST_SCHEMA

# What a column holds when its producer has nothing to say (see schema.py for the meanings).
_DEFAULTS: dict[str, object] = {
    "tenant": None,
    "source": None,
    "template": None,
    "agent_id": 0,
    "think_time_s": 0.0,
    "depends_on_request_id": -1,
    "prefix_parent_request_id": -1,
    "prefix_tokens": 0,
    "shared_prefix_id": -1,
    "shared_prefix_tokens": 0,
    "block_size_tokens": 0,
    "block_hashes": None,
    "stop_reason": None,
    "image_count": 0,
    "image_tokens": 0,
    "reasoning_effort": 0,
    "model": None,
    "agent_async": False,
}


def list_array(offsets: np.ndarray, values: np.ndarray, valid: np.ndarray | None = None) -> pa.Array:
    """A list<uint64> column from flat values and n+1 offsets; rows where `valid` is False are null."""
    mask = None if valid is None else pa.array(~np.asarray(valid, dtype=bool))
    return pa.ListArray.from_arrays(
        pa.array(np.asarray(offsets, dtype=np.int32)),
        pa.array(np.asarray(values, dtype=np.uint64)),
        mask=mask,
    )


def request_table(n: int, columns: Mapping[str, object]) -> pa.Table:
    """A table in REQUEST_SCHEMA from `columns` (arrays of length n, scalars, or pyarrow arrays);
    columns left out take their default. Unknown column names are a programming error."""
    unknown = set(columns) - set(REQUEST_SCHEMA.names)
    if unknown:
        raise KeyError(f"unknown trace columns {sorted(unknown)}")
    arrays = []
    for field in REQUEST_SCHEMA:
        value = columns[field.name] if field.name in columns else _DEFAULTS[field.name]
        arrays.append(_column(field, value, n))
    return pa.Table.from_arrays(arrays, schema=REQUEST_SCHEMA)


def _column(field: pa.Field, value: object, n: int) -> pa.Array:
    if isinstance(value, pa.Array | pa.ChunkedArray):
        return value.cast(field.type) if value.type != field.type else value
    if value is None or isinstance(value, str | int | float):
        if value is None:
            return pa.nulls(n, type=field.type)
        if pa.types.is_boolean(field.type):
            return pa.array(np.full(n, bool(value)))
        if pa.types.is_string(field.type):
            return pa.DictionaryArray.from_arrays(np.zeros(n, dtype=np.int32), [value]).cast(field.type)
        return pa.array(np.full(n, value, dtype=field.type.to_pandas_dtype()))
    if pa.types.is_string(field.type) and isinstance(value, Sequence | np.ndarray):
        return pa.array(list(value) if not isinstance(value, list) else value, type=field.type)
    return pa.array(np.asarray(value, dtype=field.type.to_pandas_dtype()))
