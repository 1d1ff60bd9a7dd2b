"""Scheduling: admission, routing (pluggable policies), the token-budget batcher, arrivals."""
