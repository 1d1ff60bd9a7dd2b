"""Metrics: the append-only request log and pool samples (recorder, timeseries), the Parquet
schemas of the outputs (schema), the run summary (summarize) and invariant checks (invariants)."""
