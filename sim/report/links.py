"""Bandwidth per link over simulated time: one subplot per link and direction, one line per series."""

from __future__ import annotations

from sim.report.page import Panel, missing
from sim.report.series import Series
from sim.report.timeaxis import Cell, TimeAxis, bucket_caption, level_grid_figure, pool_sum

# (subplot title, pool time-series column); mean bytes/s over each sample interval.
LINKS = (
    ("PCIe host → GPU", "pcie_h2d_bytes_per_s"),
    ("PCIe GPU → host", "pcie_d2h_bytes_per_s"),
    ("SSD read", "ssd_read_bytes_per_s"),
    ("SSD write", "ssd_write_bytes_per_s"),
    ("network out", "net_out_bytes_per_s"),
    ("network in", "net_in_bytes_per_s"),
)


def bandwidth_panel(series: list[Series], axis: TimeAxis) -> Panel:
    title = "Bandwidth used per link over simulated time"
    cells = [Cell(f"{name} (B/s)", pool_sum(col)) for name, col in LINKS]
    fig = level_grid_figure(title, axis, series, cells, "B/s", cols=2)
    if fig is None:
        return missing(title, "pool time series with bytes per second per link", wide=True)
    what = "Bytes per second over each link, summed over the model's pools (decimal: 1 GB/s = 1e9 B/s)"
    return Panel(title, fig, caption=bucket_caption(axis, what), wide=True)
