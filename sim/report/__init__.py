"""Interactive HTML reports of runs (`sim report`, `sim compare`), built from a run's output files only.

Never imports SimPy or sim.cluster: a page can be made from any run folder, on any machine.
Modules: rundata (reading a run), series/compare (what is plotted, V4.1 vs V4 pairing), reduce
(downsampling, CDF quantiles), theme (colours, units, formats), timeaxis (shared time axis), one module
per figure family (headline, cost, capacity, kvtiers, latency, timeseries, links, inputs), page (the
HTML file) and build (sections in order).
"""
