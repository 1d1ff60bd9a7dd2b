"""The paged KV block pool with prefix caching (vLLM v1's block accounting, in our own words).

Every block has a reference count (sequences using it) and, once full, a chained hash naming its whole
prefix: ``hash_k = H(hash_{k-1}, tokens of block k)``, so equal hashes mean equal first ``k + 1`` blocks.
Blocks no sequence uses sit in one free queue in eviction order (least recently freed first); a full one
keeps its hash there and can still be hit. Allocating takes from the front of the queue; taking a block
that still holds a hash evicts that cached prefix block (counted). A sequence frees its blocks tail first,
so the end of a cached prefix is evicted before its start (a prefix stays usable as long as possible).

Allocation is check-then-act: ``can_allocate`` answers before anything changes, and ``allocate`` refuses
(returns None) without side effects when the queue is too short.
"""

from __future__ import annotations

import hashlib
from collections import OrderedDict
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

ROOT_HASH = 0


def chain_hash(parent: int, tokens: np.ndarray) -> int:
    """The hash of a full block whose predecessor's hash is ``parent`` (ROOT_HASH for the first block)."""
    h = hashlib.blake2b(parent.to_bytes(8, "little"), digest_size=8)
    h.update(np.ascontiguousarray(tokens, dtype=np.int64).tobytes())
    return int.from_bytes(h.digest(), "little")


def block_hashes(
    tokens: np.ndarray, block_tokens: int, parent: int = ROOT_HASH, start_block: int = 0
) -> list[int]:
    """Hashes of the full blocks of ``tokens`` from block ``start_block`` on (``parent`` = hash of the block
    before it)."""
    out: list[int] = []
    for k in range(start_block, len(tokens) // block_tokens):
        parent = chain_hash(parent, tokens[k * block_tokens : (k + 1) * block_tokens])
        out.append(parent)
    return out


@dataclass
class PoolStats:
    allocated_blocks: int = 0
    evicted_blocks: int = 0  # cached blocks whose hash was dropped to reuse them
    hit_blocks: int = 0


class BlockPool:
    def __init__(self, num_blocks: int, block_tokens: int) -> None:
        if num_blocks <= 0 or block_tokens <= 0:
            raise ValueError(f"num_blocks={num_blocks}, block_tokens={block_tokens}: both must be positive")
        self.num_blocks = num_blocks
        self.block_tokens = block_tokens
        self.ref = [0] * num_blocks
        self.hash: list[int | None] = [None] * num_blocks
        self.origin: list[int] = [-1] * num_blocks  # session that computed a cached block
        self.cached: dict[int, int] = {}  # hash -> block id
        self._free: OrderedDict[int, None] = OrderedDict.fromkeys(range(num_blocks))
        self._cached_free = 0  # blocks in the free queue that still hold a hash
        self.stats = PoolStats()

    @property
    def free_blocks(self) -> int:
        return len(self._free)

    @property
    def used_blocks(self) -> int:
        return self.num_blocks - len(self._free)

    @property
    def cached_free_blocks(self) -> int:
        """Unreferenced blocks still holding a prefix (what eviction can take back)."""
        return self._cached_free

    def match(self, hashes: Sequence[int]) -> list[int]:
        """Block ids of the longest cached prefix of ``hashes`` (nothing changes)."""
        out: list[int] = []
        for h in hashes:
            b = self.cached.get(h)
            if b is None:
                break
            out.append(b)
        return out

    def can_allocate(self, n: int, hit: Sequence[int] = ()) -> bool:
        """Whether ``n`` new blocks fit after the (possibly free) blocks of ``hit`` are taken by a sequence."""
        taken = sum(1 for b in hit if self.ref[b] == 0)
        return n <= len(self._free) - taken

    def take(self, blocks: Sequence[int]) -> None:
        """A sequence starts using already-filled blocks (a prefix hit)."""
        for b in blocks:
            if self.ref[b] == 0:
                del self._free[b]
                self._cached_free -= 1  # a hit block always holds its hash
            self.ref[b] += 1
        self.stats.hit_blocks += len(blocks)

    def allocate(self, n: int) -> list[int] | None:
        """``n`` empty blocks for one sequence, evicting cached ones from the front of the queue; None
        (nothing changed) when fewer than ``n`` are free."""
        if n > len(self._free):
            return None
        out: list[int] = []
        for _ in range(n):
            b, _ = self._free.popitem(last=False)
            h = self.hash[b]
            if h is not None:
                self._cached_free -= 1
                if self.cached.get(h) == b:
                    del self.cached[h]
                self.hash[b] = None
                self.origin[b] = -1
                self.stats.evicted_blocks += 1
            self.ref[b] = 1
            out.append(b)
        self.stats.allocated_blocks += n
        return out

    def commit(self, block: int, h: int, session: int) -> None:
        """A block became full: record its hash so later sequences can hit it. When another block already
        holds this prefix (two sequences computed it at once), the first stays the cached one."""
        if self.hash[block] is not None:
            return
        self.hash[block] = h
        if h not in self.cached:
            self.cached[h] = block
            self.origin[block] = session

    def free(self, blocks: Sequence[int]) -> None:
        """A sequence stops using ``blocks`` (in its order); they join the queue tail first, so its last
        block is evicted first."""
        for b in reversed(blocks):
            self.ref[b] -= 1
            if self.ref[b] < 0:
                raise RuntimeError(f"block {b} freed more often than taken")
            if self.ref[b] == 0:
                if self.hash[b] is not None and self.cached.get(self.hash[b]) != b:
                    self.hash[b] = None  # a duplicate of a cached block: plain free space
                self._free[b] = None
                if self.hash[b] is not None:
                    self._cached_free += 1
