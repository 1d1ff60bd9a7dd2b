"""A run's latency values (TTFT, TPOT, E2E of each measured completed request), kept for exact
percentiles at the end of the run, at 8 B a value and without a copy at the end.

Values arrive in batches (one per row group of the request log) and are copied into fixed blocks
of 2**22 float64 (32 MiB). A block that size is always a mapping of its own (glibc serves
allocations at or above its largest mmap threshold, 32 MiB on 64-bit, with mmap): its pages become
resident only as they are written, and freeing it returns them to the system. Small arrays, such
as one list of batch-sized chunks would be, come from the heap, which keeps their pages after
they are freed, so joining them at the end added a second copy of every value to the process's
resident memory (+196 MB at the end of a 9.56M-request run).

`array()` returns the values in arrival order: the only block's filled part as a view when they
fit in one (4.19M values), or else one array into which the blocks are copied and released one
by one (at most one block held twice)."""

from __future__ import annotations

import numpy as np

VALUES_PER_BLOCK = 1 << 22


class LatencyValues:
    def __init__(self, block_values: int = VALUES_PER_BLOCK) -> None:
        self._block_values = block_values
        self._blocks: list[np.ndarray] = []
        self._last_used = 0  # values in the last block
        self._size = 0

    def __len__(self) -> int:
        return self._size

    def extend(self, values: np.ndarray) -> None:
        pos = 0
        while pos < len(values):
            if not self._blocks or self._last_used == len(self._blocks[-1]):
                self._blocks.append(np.empty(self._block_values))
                self._last_used = 0
            take = min(len(values) - pos, len(self._blocks[-1]) - self._last_used)
            self._blocks[-1][self._last_used : self._last_used + take] = values[pos : pos + take]
            self._last_used += take
            pos += take
        self._size += len(values)

    def array(self) -> np.ndarray:
        """The values in arrival order (module doc). The caller may reorder them in place (the
        summary partitions them for percentiles); values extended afterwards go to a new block."""
        if not self._blocks:
            return np.zeros(0)
        if len(self._blocks) == 1:
            return self._blocks[0][: self._last_used]
        joined = np.empty(self._size)
        pos = 0
        blocks = self._blocks
        blocks.reverse()  # pop from the end: each pop is O(1)
        while blocks:
            block = blocks.pop()
            used = len(block) if blocks else self._last_used
            joined[pos : pos + used] = block[:used]
            pos += used
            del block  # its mapping is released here, before the next block is copied
        self._blocks = [joined]
        self._last_used = len(joined)
        return joined
