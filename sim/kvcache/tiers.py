"""One cache tier in bytes: cached entries in LRU order with a TTL from last use, plus (for HBM)
bytes reserved by running sequences, which are never evicted.

Invariant, checked on every change: reserved + cached <= capacity. Operations that need room
check first and refuse without mutating (vLLM's check-then-act); eviction takes the least
recently used entries first and returns them so the caller can demote them. TTL expiry is lazy:
`expire(now)` is called by the owner at its own operations and by the periodic sampler, so no
event is scheduled per entry. The LRU head is always the oldest last use, so expiry stops at the
first entry still alive.
"""

from __future__ import annotations

from collections import OrderedDict

# (key, bytes) of the entries an operation pushed out, oldest first. Keys are ints
# (sim.cluster.request: lineage and shared-prefix keys).
Evicted = list[tuple[int, float]]


class TierFull(Exception):
    """Raised by a mutating call that was not checked first (a bug, not user input)."""


class ByteTier:
    __slots__ = (
        "name",
        "capacity_bytes",
        "ttl_s",
        "reserved_bytes",
        "cached_bytes",
        "peak_bytes",
        "evicted_bytes",
        "expired_bytes",
        "_lru",
    )

    def __init__(self, name: str, capacity_bytes: float, ttl_s: float = float("inf")) -> None:
        if capacity_bytes < 0.0:
            raise ValueError(f"tier {name}: capacity must be >= 0, got {capacity_bytes}")
        if not ttl_s > 0.0:
            raise ValueError(f"tier {name}: ttl must be > 0, got {ttl_s}")
        self.name = name
        self.capacity_bytes = float(capacity_bytes)
        self.ttl_s = float(ttl_s)
        self.reserved_bytes = 0.0
        self.cached_bytes = 0.0
        self.peak_bytes = 0.0
        self.evicted_bytes = 0.0  # cached bytes pushed out by capacity pressure
        self.expired_bytes = 0.0  # cached bytes dropped by TTL
        # key -> [bytes, last_use_s]; order = least recently used first
        self._lru: OrderedDict[int, list[float]] = OrderedDict()

    # --- reading ---

    @property
    def used_bytes(self) -> float:
        return self.reserved_bytes + self.cached_bytes

    @property
    def free_bytes(self) -> float:
        return self.capacity_bytes - self.reserved_bytes - self.cached_bytes

    def __contains__(self, key: int) -> bool:
        return key in self._lru

    def __len__(self) -> int:
        return len(self._lru)

    def cached(self, key: int) -> float:
        """Bytes cached under `key` (0 when absent)."""
        item = self._lru.get(key)
        return item[0] if item is not None else 0.0

    def last_use_s(self, key: int) -> float:
        return self._lru[key][1]

    def keys_lru_order(self) -> list[int]:
        return list(self._lru)

    def can_fit(self, nbytes: float) -> bool:
        """Whether `nbytes` can be cached once every cached entry is evicted if needed."""
        return nbytes <= self.capacity_bytes - self.reserved_bytes + 1e-6

    # --- cached entries ---

    def put(self, key: int, nbytes: float, now_s: float) -> Evicted:
        """Cache `key` with `nbytes` (replacing its previous size), most recently used; evicts the
        least recently used others as needed. Refuses (TierFull) if it cannot fit at all."""
        lru = self._lru
        old = lru.pop(key, None)
        if old is not None:
            self.cached_bytes -= old[0]
        if nbytes > self.capacity_bytes - self.reserved_bytes + 1e-6:
            if old is not None:  # restore: refuse without mutating
                lru[key] = old
                lru.move_to_end(key, last=False)
                self.cached_bytes += old[0]
            raise TierFull(
                f"{self.name}: {nbytes:.0f} B cannot fit beside {self.reserved_bytes:.0f} B reserved"
            )
        if self.reserved_bytes + self.cached_bytes + nbytes > self.capacity_bytes + 1e-6:
            evicted = self._make_room(nbytes)
        else:
            evicted = []
        lru[key] = [nbytes, now_s]
        self.cached_bytes += nbytes
        if self.reserved_bytes + self.cached_bytes > self.peak_bytes:
            self._note_peak()
        return evicted

    def touch(self, key: int, now_s: float) -> None:
        item = self._lru[key]
        item[1] = now_s
        self._lru.move_to_end(key)

    def remove(self, key: int) -> float:
        """Drop `key`; returns its bytes (0 when absent)."""
        item = self._lru.pop(key, None)
        if item is None:
            return 0.0
        self.cached_bytes -= item[0]
        if not self._lru:
            self.cached_bytes = 0.0  # no drift from repeated float subtraction
        return item[0]

    def expire(self, now_s: float) -> Evicted:
        """Drop entries whose last use is `ttl_s` or more ago; returns them, oldest first."""
        lru = self._lru
        limit = now_s - self.ttl_s
        if not lru or next(iter(lru.values()))[1] > limit:
            return []  # the common case: nothing expired
        out: Evicted = []
        while lru:
            key, item = next(iter(lru.items()))
            if item[1] > limit:
                break
            lru.popitem(last=False)
            self.cached_bytes -= item[0]
            self.expired_bytes += item[0]
            out.append((key, item[0]))
        if not lru:
            self.cached_bytes = 0.0
        return out

    # --- reservations (running sequences; never evicted) ---

    def can_reserve(self, nbytes: float) -> bool:
        return nbytes <= self.capacity_bytes - self.reserved_bytes + 1e-6

    def reserve(self, nbytes: float) -> Evicted:
        """Reserve `nbytes`, evicting cached entries (LRU first) as needed; check `can_reserve` first."""
        if not self.can_reserve(nbytes):
            raise TierFull(f"{self.name}: cannot reserve {nbytes:.0f} B")
        evicted = self._make_room(nbytes)
        self.reserved_bytes += nbytes
        if self.reserved_bytes + self.cached_bytes > self.peak_bytes:
            self._note_peak()
        return evicted

    def release(self, nbytes: float) -> None:
        self.reserved_bytes -= nbytes
        if self.reserved_bytes < 1e-6 * max(nbytes, 1.0):
            if self.reserved_bytes < -1.0:
                raise TierFull(f"{self.name}: released more than reserved ({self.reserved_bytes:.0f} B)")
            self.reserved_bytes = max(self.reserved_bytes, 0.0)

    def pin(self, key: int) -> float:
        """Turn a cached entry into reserved bytes (a running sequence now uses it); returns its bytes."""
        item = self._lru.pop(key)
        self.cached_bytes -= item[0]
        self.reserved_bytes += item[0]
        return item[0]

    # --- internals ---

    def _make_room(self, nbytes: float) -> Evicted:
        if self.reserved_bytes + self.cached_bytes + nbytes <= self.capacity_bytes + 1e-6:
            return []
        evicted: Evicted = []
        lru = self._lru
        while self.reserved_bytes + self.cached_bytes + nbytes > self.capacity_bytes + 1e-6 and lru:
            key, item = lru.popitem(last=False)
            self.cached_bytes -= item[0]
            self.evicted_bytes += item[0]
            evicted.append((key, item[0]))
        if not lru:
            self.cached_bytes = 0.0
        return evicted

    def _note_peak(self) -> None:
        """A new peak: record it, after checking the capacity invariant (only a new peak can
        break it)."""
        used = self.reserved_bytes + self.cached_bytes
        if used > self.capacity_bytes + 1e-3 * max(1.0, self.capacity_bytes * 1e-9):
            raise TierFull(f"{self.name}: {used:.0f} B used > capacity {self.capacity_bytes:.0f} B")
        if used > self.peak_bytes:
            self.peak_bytes = used
