"""A fleet of cells: the trace split by session over cells, cells run in parallel, merged exactly
(sim.fleet.run). FLEET_FORMAT marks a fleet's summary.json (what `sim report` looks for)."""

FLEET_FORMAT = "sim.fleet/v1"
