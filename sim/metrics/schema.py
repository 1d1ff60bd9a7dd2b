"""Output files of `sim run` and their columns (units in the names; NaN = did not happen).

DIR/summary.json                         models.<name>.* (sim.metrics.summarize)
DIR/<model>/requests.parquet             one row per arrived request (REQUEST_SCHEMA)
DIR/<model>/timeseries/<pool>.parquet    one row per sample per pool (POOL_SCHEMA)
DIR/<model>/timeseries/_cluster.parquet  one row per sample, cluster-wide (CLUSTER_SCHEMA)
"""

from __future__ import annotations

import pyarrow as pa

RUN_FORMAT = "sim.run/v2"  # v2: every file carries the run id (summary.json `run_id`, Parquet metadata)
RUN_ID_KEY = "sim.run_id"


def stamped(schema: pa.Schema, run_id: str) -> pa.Schema:
    """`schema` with the run id in its metadata, so `sim report` can tell files of two runs apart."""
    return schema.with_metadata({**(schema.metadata or {}), RUN_ID_KEY.encode(): run_id.encode()})


REQUEST_SCHEMA = pa.schema(
    [
        pa.field("request_id", pa.int64(), nullable=False),
        pa.field("session_id", pa.int64(), nullable=False),
        pa.field("request_index", pa.int32(), nullable=False),
        pa.field("agent_id", pa.int32(), nullable=False),
        pa.field("status", pa.string(), nullable=False),  # completed | rejected
        pa.field("reject_reason", pa.string()),  # null unless rejected (sim.sched.admission.REASONS)
        pa.field("measured", pa.bool_(), nullable=False),  # arrived after the warm-up
        # timestamps, simulated seconds
        pa.field("arrival_s", pa.float64(), nullable=False),
        pa.field("admitted_s", pa.float64()),  # HBM reserved on the prefill/colocated instance
        pa.field("load_start_s", pa.float64()),  # prefix load from DRAM/SSD (and SWA pool) started
        pa.field("load_end_s", pa.float64()),
        pa.field("prefill_start_s", pa.float64()),  # first chunk scheduled
        pa.field("first_token_s", pa.float64()),
        pa.field("kv_transfer_start_s", pa.float64()),  # disaggregated: P -> D
        pa.field("kv_transfer_end_s", pa.float64()),
        pa.field("decode_start_s", pa.float64()),  # joined the decode batch
        pa.field("finish_s", pa.float64(), nullable=False),  # completion or rejection
        # derived latencies
        pa.field("ttft_s", pa.float64()),
        pa.field("tpot_s", pa.float64()),  # (finish - first token) / (output tokens - 1)
        pa.field("e2e_s", pa.float64()),
        # tokens
        pa.field("input_tokens", pa.int32(), nullable=False),
        pa.field("output_tokens", pa.int32(), nullable=False),
        pa.field("prefix_tokens", pa.int32(), nullable=False),  # repeated from the parent request
        pa.field("hit_tokens", pa.int32(), nullable=False),  # prefix found in a tier (all of it)
        pa.field("hbm_hit_tokens", pa.int32(), nullable=False),  # the part already in the instance's HBM
        pa.field("computed_tokens", pa.int32(), nullable=False),  # prefilled (incl. SWA replay)
        pa.field(
            "replay_tokens", pa.int32(), nullable=False
        ),  # SWA window rebuilt (V4.1 bounded replay; V4 receptive field)
        pa.field("image_tokens", pa.int32(), nullable=False),
        # where the prefix was found and the bytes moved
        pa.field("prefix_source", pa.string(), nullable=False),  # hbm | dram | ssd | none: the tier
        # the prefix's last part came from (the part beyond hbm_hit_tokens; hbm = all in HBM)
        pa.field("shared_prefix_hit", pa.bool_(), nullable=False),  # hit was a cross-session prefix
        pa.field(
            "swa_source", pa.string()
        ),  # pool (V4.1) | replay | hbm; null when no hit, or V4 restoring with its prefix
        pa.field("load_bytes", pa.float64(), nullable=False),  # prefix bytes loaded from DRAM/SSD
        pa.field("swa_load_bytes", pa.float64(), nullable=False),  # V4.1 SWA ring from the pool
        pa.field("kv_transfer_bytes", pa.float64(), nullable=False),  # P -> D
        # where it ran
        pa.field("prefill_pool", pa.string()),
        pa.field("prefill_instance", pa.int32(), nullable=False),  # -1: none
        pa.field("decode_pool", pa.string()),
        pa.field("decode_instance", pa.int32(), nullable=False),
    ],
    metadata={"format": RUN_FORMAT},
)

POOL_SCHEMA = pa.schema(
    [
        pa.field("t_s", pa.float64(), nullable=False),  # end of the sample interval
        pa.field("instances", pa.int32(), nullable=False),
        pa.field("utilization", pa.float64(), nullable=False),  # busy fraction, mean over instances
        pa.field("decode_batch_mean", pa.float64(), nullable=False),  # time-averaged sequences per instance
        pa.field("running_seqs", pa.int32(), nullable=False),  # decoding now, all instances
        pa.field("queue_len", pa.int32(), nullable=False),  # waiting, loading, ready, joining now
        pa.field("prefill_tokens_queued", pa.int64(), nullable=False),
        pa.field("hbm_kv_capacity_bytes", pa.float64(), nullable=False),
        pa.field("hbm_reserved_bytes", pa.float64(), nullable=False),  # running sequences
        pa.field("hbm_cached_bytes", pa.float64(), nullable=False),  # finished sessions kept
        pa.field("dram_kv_bytes", pa.float64(), nullable=False),  # the pool's nodes
        pa.field("dram_kv_capacity_bytes", pa.float64(), nullable=False),
        pa.field("swa_pool_bytes", pa.float64(), nullable=False),
        pa.field("pcie_h2d_bytes_per_s", pa.float64(), nullable=False),  # mean over the interval
        pa.field("pcie_d2h_bytes_per_s", pa.float64(), nullable=False),
        pa.field("ssd_read_bytes_per_s", pa.float64(), nullable=False),
        pa.field("ssd_write_bytes_per_s", pa.float64(), nullable=False),
        pa.field("net_out_bytes_per_s", pa.float64(), nullable=False),  # RDMA sends (P -> D KV)
        pa.field("net_in_bytes_per_s", pa.float64(), nullable=False),  # RDMA receives
    ],
    metadata={"format": RUN_FORMAT},
)

CLUSTER_SCHEMA = pa.schema(
    [
        pa.field("t_s", pa.float64(), nullable=False),
        pa.field("arrived", pa.int64(), nullable=False),  # cumulative
        pa.field("completed", pa.int64(), nullable=False),
        pa.field("rejected", pa.int64(), nullable=False),
        pa.field("in_flight", pa.int64(), nullable=False),
        pa.field("ssd_kv_bytes", pa.float64(), nullable=False),
        pa.field("ssd_kv_capacity_bytes", pa.float64(), nullable=False),
        pa.field("hbm_kv_bytes", pa.float64(), nullable=False),
        pa.field("dram_kv_bytes", pa.float64(), nullable=False),
        pa.field("swa_pool_bytes", pa.float64(), nullable=False),
    ],
    metadata={"format": RUN_FORMAT},
)
