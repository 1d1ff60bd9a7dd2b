"""The request log's rows while a row group fills: preallocated, filled by compiled code.

One ended request is one fixed-width record of its numeric fields, packed into a preallocated
buffer (`struct`, in `NUMERIC_FIELDS` order), and its text fields go into preallocated lists; the
recorder (sim.metrics.recorder) views the buffer as numpy columns when the group is full. Memory is
allocated once, at the start of the run, for one row group, and the request object is released at
once. Fields carry their request-log names (sim.metrics.schema.REQUEST_SCHEMA gives their types).
"""

from __future__ import annotations

from struct import Struct

from sim.core.request import Request

NUMERIC_FIELDS = (
    "request_id",
    "session_id",
    "request_index",
    "agent_id",
    "measured",
    "arrival_s",
    "admitted_s",
    "load_start_s",
    "load_end_s",
    "prefill_start_s",
    "first_token_s",
    "kv_transfer_start_s",
    "kv_transfer_end_s",
    "decode_start_s",
    "finish_s",
    "input_tokens",
    "output_tokens",
    "prefix_tokens",
    "hit_tokens",
    "hbm_hit_tokens",
    "computed_tokens",
    "replay_tokens",
    "image_tokens",
    "shared_prefix_hit",
    "load_bytes",
    "swa_load_bytes",
    "kv_transfer_bytes",
    "prefill_instance",
    "decode_instance",
)
TEXT_FIELDS = ("status", "reject_reason", "prefix_source", "prefill_pool", "decode_pool")


class RequestRows:
    """Up to `capacity` ended requests: `numbers` holds a record of `record_format` (struct codes
    of NUMERIC_FIELDS, standard sizes, no padding) per row, the text fields a list each."""

    def __init__(self, capacity: int, record_format: str) -> None:
        self.capacity = capacity
        self.size = 0
        self._record = Struct(record_format)
        self.record_bytes: int = self._record.size
        self.numbers = bytearray(capacity * self.record_bytes)
        self.status: list[str] = [""] * capacity
        self.reject_reason: list[str | None] = [None] * capacity
        self.prefix_source: list[str] = [""] * capacity
        self.prefill_pool: list[str | None] = [None] * capacity
        self.decode_pool: list[str | None] = [None] * capacity

    def add(self, r: Request) -> bool:
        """Log `r`'s fields in the next row; True when the rows are full."""
        i = self.size
        self._record.pack_into(
            self.numbers,
            i * self.record_bytes,
            r.request_id,
            r.session_id,
            r.request_index,
            r.agent_id,
            r.measured,
            r.arrival_s,
            r.admitted_s,
            r.load_start_s,
            r.load_end_s,
            r.prefill_start_s,
            r.first_token_s,
            r.kv_transfer_start_s,
            r.kv_transfer_end_s,
            r.decode_start_s,
            r.finish_s,
            r.input_tokens,
            r.output_tokens,
            r.prefix_tokens,
            r.hit_tokens,
            r.hbm_hit_tokens,
            r.computed_tokens,
            r.replay_tokens,
            r.image_tokens,
            r.shared_prefix_hit,
            r.load_bytes,
            r.swa_load_bytes,
            r.kv_transfer_bytes,
            r.prefill_instance,
            r.decode_instance,
        )
        self.status[i] = r.status
        self.reject_reason[i] = r.reject_reason
        self.prefix_source[i] = r.prefix_source
        self.prefill_pool[i] = r.prefill_pool
        self.decode_pool[i] = r.decode_pool
        self.size = i + 1
        return self.size == self.capacity
