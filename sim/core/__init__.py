"""The simulation's records, below every other layer of sim (style.md §7, layer 0): the request as it
moves through the cluster. Its fields are written by the engine (sim.cluster) and read by the cache tiers,
the scheduling policies and the request log; it imports none of them."""
