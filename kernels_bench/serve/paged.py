"""Paged KV storage of the served model: FP8-584 rows in FlashMLA's MODEL1 layout, written row by row.

The engine owns blocks of ``block_tokens`` raw tokens (a multiple of 256, so a block boundary is also a CSA
(ratio 4) and an HCA (ratio 128) group boundary). The model maps engine block ``b`` to its own rows in every
layer's pools: raw (window) rows ``b·block_tokens + i``, compressed rows ``b·(block_tokens/ratio) + j`` and,
for CSA, index-key rows at the same numbers. ``RowPool`` keeps rows in the layout FlashMLA reads (pages of 64
rows: 64 × 576 data bytes, then 64 × 8 scale bytes, page padded to a multiple of 576; see
``kernels_bench.production.flashmla_layout``) and scatters freshly quantised rows into it, so the GPU kernels
read the pool directly and the reference reads the same bytes. Pure torch (CPU-tested).
"""

from __future__ import annotations

import torch

from kernels_bench.production import flashmla_layout as fl

PAGE_ROWS = 64  # FlashMLA page block (the V4 decode kernel's block size in kernels_bench)


class RowPool:
    """``rows`` FP8-584 rows (+ one scratch page whose first row absorbs writes of padding tokens)."""

    def __init__(self, rows: int, device):
        self.rows = rows
        self.pages = -(-rows // PAGE_ROWS) + 1
        self.scratch_row = (self.pages - 1) * PAGE_ROWS
        self.stride = fl.model1_block_stride(PAGE_ROWS)
        self.buf = torch.zeros(self.pages, self.stride, dtype=torch.uint8, device=device)
        self.view = self.buf[:, : PAGE_ROWS * fl.MODEL1_ROW_BYTES].view(
            self.pages, PAGE_ROWS, 1, fl.MODEL1_ROW_BYTES
        )
        self._data = torch.arange(fl.MODEL1_DATA_BYTES, device=device)
        self._scale = torch.arange(fl.MODEL1_SCALE_BYTES, device=device)

    @property
    def nbytes(self) -> int:
        return self.buf.numel()

    @staticmethod
    def row_bytes_with_padding() -> float:
        """HBM bytes per row, the page padding included (37,440 B per 64 rows: 585)."""
        return fl.model1_block_stride(PAGE_ROWS) / PAGE_ROWS

    def byte_offsets(self, rows: torch.Tensor) -> torch.Tensor:
        """[n] absolute rows -> [n, 584] flat byte offsets of each row's data then scale bytes."""
        r = rows.long()
        page = (r // PAGE_ROWS) * self.stride
        off = r % PAGE_ROWS
        data = (page + off * fl.MODEL1_DATA_BYTES)[:, None] + self._data[None, :]
        scale = (page + PAGE_ROWS * fl.MODEL1_DATA_BYTES + off * fl.MODEL1_SCALE_BYTES)[:, None] + self._scale
        return torch.cat([data, scale], dim=1)

    def write(self, rows: torch.Tensor, row_bytes: torch.Tensor) -> None:
        """Scatter [n, 584] project rows (``formats`` fp8_584) to absolute rows [n] (graph-capturable)."""
        flat = self.buf.view(-1)
        flat.index_put_((self.byte_offsets(rows).view(-1),), row_bytes.reshape(-1))

    def gather(self, rows: torch.Tensor) -> torch.Tensor:
        """[n] absolute rows -> [n, 584] project rows (invalid rows must be clamped by the caller)."""
        return self.buf.view(-1)[self.byte_offsets(rows)]


def paged_rows(bt: torch.Tensor, seq: torch.Tensor, entry: torch.Tensor, per_block: int) -> torch.Tensor:
    """Absolute pool row of entry ``entry`` (a raw position, or a compressed entry number) of the sequence
    in block-table row ``seq``: ``bt[seq, entry // per_block] · per_block + entry % per_block``. ``entry`` is
    [n] (with ``seq`` [n]) or [n, k]; a negative entry gives some row, which the caller masks."""
    e = entry.clamp_min(0)
    col = (e // per_block).clamp_max(bt.shape[1] - 1)
    blk = bt[seq, col] if e.dim() == 1 else torch.gather(bt[seq], 1, col)
    return blk * per_block + e % per_block
