"""sim: a discrete-event simulator of GPU clusters serving agent workloads with
DeepSeek-V4-Flash and DeepSeek-V4.1-Flash."""

from sim import native

__version__ = "0.1.0"

native.install()  # before any module of the compiled core is imported (sim.native's doc)
