"""The capacity search of `sim run`: the highest load each model sustains within the SLO, measured
(sim.capacity.search: the bracket and bisection; sim.capacity.point: one load's scenario and verdict;
sim.capacity.verdict: what the run reports of it)."""
