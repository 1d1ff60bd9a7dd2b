"""Capacity planning (`sim plan`): search a space of cluster configurations for the cheapest one
per model that meets an SLO, running each candidate as an independent simulation on local
processes or Ray, with a resumable Parquet ledger.

    spec.py       the plan YAML (template, space, node search, constraints, objective)
    overrides.py  dotted-path overrides of a scenario document
    space.py      combinations and candidates (resolved scenarios with stable keys)
    search.py     bisection on the node scale, node counts per pool
    executors.py  local process pool, Ray
    ledger.py     one atomic Parquet part per finished candidate
    runner.py     the loop: rounds of probes, cost bound, resume, outputs
    backend.py    the real simulator behind it (sim.api.run_scenario)
    verdict.py    the recommendation per model and the verdict between models
    frontier.py   Pareto frontier page (cost per task vs TTFT p99)
"""
