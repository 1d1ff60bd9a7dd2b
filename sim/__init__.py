"""sim: a discrete-event simulator of GPU clusters serving agent workloads with
DeepSeek-V4-Flash and DeepSeek-V4.1-Flash."""

__version__ = "0.1.0"
