"""A fleet of cells: the trace split by session over cells, cells run in parallel, merged exactly."""
