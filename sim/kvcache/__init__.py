"""KV-cache state: byte tiers (HBM cache part, host DRAM, SSD, V4.1's SWA pool), the entry
store with prefix lookup across tiers, and each model family's cache policy."""
