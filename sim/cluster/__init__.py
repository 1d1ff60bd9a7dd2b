"""The cluster: nodes (host DRAM, SSD, links), serving instances (engine loops) and transfer links."""
