"""The canonical trace format: one Parquet file of requests, one row per request.

Session fields are repeated on each of the session's rows (dictionary/RLE encoding makes this
nearly free) so that one file streams in row groups. Rows are sorted by
(session_start_s, session_id, request_index): a session's rows are contiguous and sessions come
in start order, which lets the simulator read the trace in bounded memory.

Arrival rule of a request (column `arrival`):
- "absolute": it arrives at `arrival_time_s` (open-loop timestamp replay).
- "think": it arrives `think_time_s` after the simulated completion of `depends_on_request_id`
  (closed-loop replay); `arrival_time_s` still holds the time seen in the source trace.
The first request of a session has arrival "absolute" (a sub-agent's first request waits for
the request that launched it).

Prefix relation: `prefix_parent_request_id` names the earlier request of the same session whose
first `prefix_tokens` tokens (its input followed by its output) this request repeats (-1: none).
Cross-session sharing (a system or tool prompt used by many sessions) is `shared_prefix_id` /
`shared_prefix_tokens`: two requests with the same id share their first min(shared_prefix_tokens)
tokens. Imported traces that carry block hashes keep them in `block_hashes` (chained,
`block_size_tokens` tokens each: equal values at position k mean equal first (k+1) blocks,
anywhere in the file); generated traces leave them null.

`model` is the model the source request was sent to (e.g. a Claude Code session mixes Opus calls
with small Haiku ones; a scenario may route or drop them); null when the source does not say.
`agent_async` marks the rows of a sub-agent its parent did not wait for (the parent's next request
arrived before the sub-agent ended). Files written before these two columns existed read as null /
false (`OPTIONAL_COLUMNS`, `complete_columns`).

`image_count`/`image_tokens` are the images newly attached by this request; their tokens are part
of `input_tokens`. The invariants every file satisfies are checked by `sim.workload.validate`.

Units are in the names: seconds (`_s`), tokens (`_tokens`). Documented for users in traces/README.md.
"""

from __future__ import annotations

import pyarrow as pa

FORMAT_VERSION = "sim.trace/v1"

ARRIVAL_ABSOLUTE = "absolute"
ARRIVAL_THINK = "think"

REQUEST_SCHEMA = pa.schema(
    [
        # session (repeated on each row of the session)
        pa.field("session_id", pa.int64(), nullable=False),
        pa.field("session_start_s", pa.float64(), nullable=False),
        pa.field("tenant", pa.string()),
        pa.field("source", pa.string()),  # importer or generator name, e.g. "weka", "gen:agent_2w"
        pa.field("template", pa.string()),  # source session resampled by the generator, if any
        # request
        pa.field("request_id", pa.int64(), nullable=False),  # unique in the file
        pa.field("request_index", pa.int32(), nullable=False),  # order within the session
        pa.field("agent_id", pa.int32(), nullable=False),  # 0 = main agent, k > 0 = sub-agent k
        pa.field("arrival", pa.string(), nullable=False),  # "absolute" | "think"
        pa.field("arrival_time_s", pa.float64(), nullable=False),
        pa.field("think_time_s", pa.float64(), nullable=False),
        pa.field("depends_on_request_id", pa.int64(), nullable=False),  # -1 when arrival is absolute
        pa.field("input_tokens", pa.int32(), nullable=False),
        pa.field("output_tokens", pa.int32(), nullable=False),
        pa.field("prefix_parent_request_id", pa.int64(), nullable=False),  # -1 when none
        pa.field("prefix_tokens", pa.int32(), nullable=False),  # input tokens shared with the parent
        pa.field("shared_prefix_id", pa.int64(), nullable=False),  # -1 when none
        pa.field("shared_prefix_tokens", pa.int32(), nullable=False),
        pa.field("block_size_tokens", pa.int32(), nullable=False),  # 0 when no hashes
        pa.field("block_hashes", pa.list_(pa.uint64())),  # null when absent
        pa.field("stop_reason", pa.string()),  # "tool_use" | "end_turn" | "max_tokens" | null
        pa.field("image_count", pa.int16(), nullable=False),
        pa.field("image_tokens", pa.int32(), nullable=False),
        pa.field("reasoning_effort", pa.int16(), nullable=False),  # 1..100; 0 = unknown
        pa.field("model", pa.string()),  # the source request's model; null = unknown
        pa.field("agent_async", pa.bool_(), nullable=False),  # a sub-agent its parent did not wait for
    ],
    metadata={"format": FORMAT_VERSION},
)

REQUEST_COLUMNS = tuple(REQUEST_SCHEMA.names)

# Columns added after sim.trace/v1 was first written, with the value older files mean.
OPTIONAL_COLUMNS: dict[str, object] = {"model": None, "agent_async": False}


def complete_columns(table: pa.Table) -> pa.Table:
    """`table` with every REQUEST_SCHEMA column: optional ones (and `block_hashes`) it lacks are
    added with their defaults (null hashes), in schema order."""
    n = table.num_rows
    arrays = []
    for field in REQUEST_SCHEMA:
        if field.name in table.column_names:
            arrays.append(table.column(field.name))
        elif field.name == "block_hashes" or OPTIONAL_COLUMNS.get(field.name) is None:
            arrays.append(pa.nulls(n, field.type))
        else:
            arrays.append(pa.array([OPTIONAL_COLUMNS[field.name]] * n, field.type))
    return pa.Table.from_arrays(arrays, schema=REQUEST_SCHEMA)


ENVELOPE_FORMAT_VERSION = "sim.envelope/v1"

# A rate envelope (e.g. imported ServeGen client series): one row per (client, window).
ENVELOPE_SCHEMA = pa.schema(
    [
        pa.field("client", pa.string(), nullable=False),  # e.g. "language/m-large/12"
        pa.field("window_start_s", pa.float64(), nullable=False),
        pa.field("window_s", pa.float64(), nullable=False),
        pa.field("rate_per_s", pa.float64(), nullable=False),  # mean request rate in the window
        pa.field("interarrival_cv", pa.float64(), nullable=False),
        pa.field("family", pa.string()),  # fitted interarrival family ("Gamma", "Weibull"), null when idle
        pa.field("param_1", pa.float64(), nullable=False),
        pa.field("param_2", pa.float64(), nullable=False),
    ],
    metadata={"format": ENVELOPE_FORMAT_VERSION},
)
