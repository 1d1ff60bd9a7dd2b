"""Workloads: the canonical trace format, importers for public traces, the multi-week generator.

What the simulator uses (documented in each function):
- `iter_sessions(path, batch_rows=..., columns=None)`: sessions in start order, bounded memory;
- `read_trace_table(path, columns=None)`: a whole validated trace;
- `trace_info(path)`: counts and time span from the file's metadata;
- `generate_trace(spec, out_path, seed, days=None, progress=None)`: a spec -> a trace file.
"""

from .generator import generate_trace
from .io import TraceSession, iter_sessions, read_trace_table, trace_info

__all__ = ["TraceSession", "generate_trace", "iter_sessions", "read_trace_table", "trace_info"]
