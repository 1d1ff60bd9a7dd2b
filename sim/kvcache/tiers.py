"""One cache tier in bytes: cached entries in LRU order with a TTL from last use, plus (for HBM)
bytes reserved by running sequences, which are never evicted.

Invariant, checked on every change: reserved + cached <= capacity. Operations that need room
check first and refuse without mutating (vLLM's check-then-act); eviction takes the least
recently used entries first and returns them so the caller can demote them. TTL expiry is lazy:
`expire(now)` is called by the owner at its own operations and by the periodic sampler, so no
event is scheduled per entry. The LRU head is always the oldest last use, so expiry stops at the
first entry still alive.

A tier built with `block_tokens` (HBM: the engine's KV block) holds prefixes that can lose their tail:
each entry is a run of blocks (a session's cached context, `tokens` long, at `token_bytes` per token
plus a fixed state), and capacity pressure takes blocks off the tail of the least recently used run
before it touches the next run, the order in which vLLM's free queue hands out a finished request's
blocks (freed tail first, sim.kvcache.store). A run cut short keeps its place in the LRU order and its
head still serves prefix hits. Its fixed state (the sliding-window ring, the compressor's partial
group: state at the sequence's end) goes with its first evicted block. One slot per run, never one
per block: a million-token context is one object, and a cut is arithmetic on its length.

A tier finds an entry's slot by its key through a map, unless built with `indexed=False`: the store's
tiers (sim.kvcache.store keeps every entry's slots and passes them to the `*_slot` methods), which
spare the map's upkeep; their key methods scan the cached entries (tests and checks only).

An entry can also be held: running sequences use it in place (a shared prompt's blocks, which every
sequence starting with that prompt references, as an engine's ref-counted blocks): while anyone holds
it, its bytes count as reserved and it is out of the LRU order; the last release makes it the most
recently used.
"""

from __future__ import annotations

from typing import Final

# (key, bytes) of the entries an operation pushed out, oldest first. Keys are ints
# (sim.core.request: lineage and shared-prefix keys).
Evicted = list[tuple[int, float]]
# what an operation that pushed nothing out returns (most do): one shared list, never mutated, so the
# common case allocates nothing
NOTHING: Final[Evicted] = []


class TierFull(Exception):
    """Raised by a mutating call that was not checked first (a bug, not user input)."""


class Slot:
    """A cached entry: its bytes and last use, linked in LRU order (a native class, so the
    compiled core moves an entry with a few pointer writes, no allocation). In a tier of blocks,
    also its length in tokens now and when it was put (where its sequence ended).

    The key methods find an entry's slot by its key; a caller that keeps the slot of its entry (the
    store: sim.kvcache.store) passes it to the `*_slot` methods instead, without that lookup."""

    __slots__ = ("key", "unit", "nbytes", "tokens", "whole_tokens", "cut_from", "holders", "last_use_s",
                 "member", "prev", "next")  # fmt: skip

    def __init__(self, key: int, nbytes: float, tokens: int, last_use_s: float, unit: int = 0) -> None:
        self.key = key
        self.unit = unit  # which of its owner's tiers holds it (the store: an HBM copy's instance)
        self.nbytes = nbytes
        self.tokens = tokens
        self.whole_tokens = tokens
        self.cut_from = tokens  # its length before the last cut of its tail
        self.holders = 0  # running sequences using it in place (out of the LRU ring while > 0)
        self.last_use_s = last_use_s
        self.member = False  # in its tier (False: new, or dropped, pinned or removed since)
        self.prev: Slot = self
        self.next: Slot = self


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
        "block_tokens",
        "token_bytes",
        "_slots",
        "_indexed",
        "count",
        "_head",
        "_recent",
        "_older",
    )

    def __init__(
        self,
        name: str,
        capacity_bytes: float,
        ttl_s: float = float("inf"),
        *,
        block_tokens: int = 0,  # > 0: entries are runs of blocks of this many tokens, cut from the tail
        token_bytes: float = 0.0,  # bytes per token of a run (its tokens' KV; the rest is fixed state)
        indexed: bool = True,  # False: no map from key to slot (the module doc)
    ) -> None:
        if capacity_bytes < 0.0:
            raise ValueError(f"tier {name}: capacity must be >= 0, got {capacity_bytes}")
        if not ttl_s > 0.0:
            raise ValueError(f"tier {name}: ttl must be > 0, got {ttl_s}")
        if block_tokens < 0 or (block_tokens > 0 and not token_bytes > 0.0):
            raise ValueError(f"tier {name}: block_tokens {block_tokens} needs token_bytes > 0, got {token_bytes}")
        self.name = name
        self.capacity_bytes = float(capacity_bytes)
        self.ttl_s = float(ttl_s)
        self.reserved_bytes = 0.0
        self.cached_bytes = 0.0
        self.peak_bytes = 0.0
        self.evicted_bytes = 0.0  # cached bytes pushed out by capacity pressure
        self.expired_bytes = 0.0  # cached bytes dropped by TTL
        self.block_tokens = block_tokens
        self.token_bytes = float(token_bytes)
        # key -> its slot (when `indexed`); the cached slots form a ring through the sentinel `_head`:
        # _head.next is the least recently used, _head.prev the most recently used
        self._slots: dict[int, Slot] = {}
        self._indexed = indexed
        self.count = 0  # entries in the tier (cached or held)
        self._head = Slot(0, 0.0, 0, 0.0)
        # the two slots found last (a request's context and its shared prompt): a request's path asks
        # for the same keys several times in a row, and a dict lookup boxes and hashes the key every
        # time (dropped from here when their slots leave)
        self._recent: Slot | None = None
        self._older: Slot | None = None

    # --- reading ---

    @property
    def used_bytes(self) -> float:
        return self.reserved_bytes + self.cached_bytes

    @property
    def free_bytes(self) -> float:
        return self.capacity_bytes - self.reserved_bytes - self.cached_bytes

    def __contains__(self, key: int) -> bool:
        return self._find(key) is not None

    def slot(self, key: int) -> Slot | None:
        """The slot of `key` (None when absent)."""
        return self._find(key)

    def _find(self, key: int) -> Slot | None:
        if not self._indexed:
            ring = self._head.next
            while ring is not self._head:
                if ring.key == key:
                    return ring
                ring = ring.next
            return None
        slot = self._recent
        if slot is not None and slot.key == key:
            return slot
        slot = self._older
        if slot is not None and slot.key == key:
            self._older, self._recent = self._recent, slot
            return slot
        slot = self._slots.get(key)
        if slot is not None:
            self._older, self._recent = self._recent, slot
        return slot

    def _get(self, key: int) -> Slot:
        slot = self._find(key)
        if slot is None:
            raise KeyError(key)
        return slot

    def _forget(self, slot: Slot) -> None:
        if self._indexed:
            del self._slots[slot.key]
        self.count -= 1
        slot.member = False
        if self._recent is slot:
            self._recent = None
        if self._older is slot:
            self._older = None

    def __len__(self) -> int:
        return self.count

    def cached(self, key: int) -> float:
        """Bytes cached under `key` (0 when absent)."""
        slot = self._find(key)
        return slot.nbytes if slot is not None else 0.0

    def tokens(self, key: int) -> int:
        """Tokens cached under `key` now (0 when absent; a run's head after its tail was cut)."""
        slot = self._find(key)
        return slot.tokens if slot is not None else 0

    def whole_tokens(self, key: int) -> int:
        """Tokens `key` held when it was put (its sequence's end; more than `tokens` once cut)."""
        return self._get(key).whole_tokens

    def last_use_s(self, key: int) -> float:
        return self._get(key).last_use_s

    def oldest_use_s(self) -> float:
        """The least recent last use among the cached entries (inf when none)."""
        first = self._head.next
        return first.last_use_s if first is not self._head else float("inf")

    def keys_lru_order(self) -> list[int]:
        out = []
        slot = self._head.next
        while slot is not self._head:
            out.append(slot.key)
            slot = slot.next
        return out

    def can_fit(self, nbytes: float) -> bool:
        """Whether `nbytes` can be cached once every cached entry is evicted if needed."""
        return nbytes <= self.capacity_bytes - self.reserved_bytes + 1e-6

    # --- cached entries ---

    def put(self, key: int, nbytes: float, now_s: float, tokens: int = 0) -> Evicted:
        """Cache `key` with `nbytes` (`tokens` long; replacing its previous size), most recently
        used; evicts the least recently used others as needed (in a tier of blocks, a run's tail
        first). Refuses (TierFull) if it cannot fit at all."""
        slot = self._find(key)
        return self.put_slot(slot if slot is not None else Slot(key, nbytes, tokens, now_s), nbytes, now_s, tokens)

    def put_slot(self, slot: Slot, nbytes: float, now_s: float, tokens: int = 0) -> Evicted:
        """`put` of the entry whose slot is `slot` (a new one, made by the caller, when it has none here)."""
        key = slot.key
        # a replaced entry keeps its slot (out of the LRU ring meanwhile)
        old = slot if slot.member else None
        if old is not None:
            if old.holders:
                raise TierFull(f"{self.name}: entry {key} is in use, it cannot be replaced")
            _unlink(old)
            self.cached_bytes -= old.nbytes
        if nbytes > self.capacity_bytes - self.reserved_bytes + 1e-6:
            if old is not None:  # restore (as the least recently used): refuse without mutating
                _link_after(self._head, old)
                self.cached_bytes += old.nbytes
            raise TierFull(
                f"{self.name}: {nbytes:.0f} B cannot fit beside {self.reserved_bytes:.0f} B reserved"
            )
        if self.reserved_bytes + self.cached_bytes + nbytes > self.capacity_bytes + 1e-6:
            evicted = self._make_room(nbytes, 0 if old is None else 1)
        else:
            evicted = NOTHING
        if old is None:
            old = slot
            old.nbytes = nbytes
            old.tokens = old.whole_tokens = old.cut_from = tokens
            old.last_use_s = now_s
            old.member = True
            self.count += 1
            if self._indexed:
                self._slots[key] = old
            self._older, self._recent = self._recent, old
        else:
            old.nbytes = nbytes
            old.tokens = old.whole_tokens = old.cut_from = tokens
            old.last_use_s = now_s
        _link_after(self._head.prev, old)
        self.cached_bytes += nbytes
        if self.reserved_bytes + self.cached_bytes > self.peak_bytes:
            self._note_peak()
        return evicted

    def touch(self, key: int, now_s: float) -> None:
        self.touch_slot(self._get(key), now_s)

    def touch_slot(self, slot: Slot, now_s: float) -> None:
        slot.last_use_s = now_s
        if slot.holders:
            return  # out of the LRU order until released
        last = self._head.prev
        if slot is not last:
            _unlink(slot)
            _link_after(last, slot)

    def remove(self, key: int) -> float:
        """Drop `key` (not held); returns its bytes (0 when absent)."""
        slot = self._find(key)
        return self.remove_slot(slot) if slot is not None else 0.0

    def remove_slot(self, slot: Slot) -> float:
        """`remove` of the entry whose slot is `slot` (in the tier)."""
        if slot.holders:
            raise TierFull(f"{self.name}: entry {slot.key} is in use, it cannot be removed")
        self._forget(slot)
        _unlink(slot)
        self.cached_bytes -= slot.nbytes
        if not self.count:
            self.cached_bytes = 0.0  # no drift from repeated float subtraction
        return slot.nbytes

    def expire(self, now_s: float) -> Evicted:
        """Drop entries whose last use is `ttl_s` or more ago; returns them, oldest first."""
        head = self._head
        limit = now_s - self.ttl_s
        slot = head.next
        if slot is head or slot.last_use_s > limit:
            return NOTHING  # the common case: nothing expired
        out: Evicted = []
        while slot is not head and slot.last_use_s <= limit:
            self._drop_oldest()
            self.expired_bytes += slot.nbytes
            out.append((slot.key, slot.nbytes))
            slot = head.next
        if not self.count:
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

    def holdable_bytes(self, key: int) -> float:
        """Bytes that holding `key` would move from cached to reserved (0 when absent or already held)."""
        slot = self._find(key)
        return slot.nbytes if slot is not None and not slot.holders else 0.0

    def hold(self, key: int) -> None:
        """One more running sequence uses `key` in place: the first takes it out of the LRU order and
        counts its bytes as reserved (the caller checked `can_reserve` for `holdable_bytes`)."""
        self.hold_slot(self._get(key))

    def hold_slot(self, slot: Slot) -> None:
        if not slot.holders:
            _unlink(slot)
            self.cached_bytes -= slot.nbytes
            self.reserved_bytes += slot.nbytes
            if self.reserved_bytes + self.cached_bytes > self.peak_bytes:
                self._note_peak()
        slot.holders += 1

    def unhold(self, key: int, now_s: float) -> None:
        """A sequence holding `key` is done with it; the last one makes it cached again, most
        recently used."""
        self.unhold_slot(self._get(key), now_s)

    def unhold_slot(self, slot: Slot, now_s: float) -> None:
        slot.holders -= 1
        if slot.holders:
            return
        self.reserved_bytes -= slot.nbytes
        self.cached_bytes += slot.nbytes
        slot.last_use_s = now_s
        _link_after(self._head.prev, slot)

    def pin(self, key: int) -> float:
        """Turn a cached entry into reserved bytes (a running sequence now uses it); returns its bytes."""
        return self.pin_slot(self._get(key))

    def pin_slot(self, slot: Slot) -> float:
        self._forget(slot)
        _unlink(slot)
        self.cached_bytes -= slot.nbytes
        self.reserved_bytes += slot.nbytes
        return slot.nbytes

    # --- internals ---

    def _make_room(self, nbytes: float, aside: int = 0) -> Evicted:
        """Evict until `nbytes` more fit: whole entries, least recently used first; in a tier of
        blocks, the least recently used run loses only the tail blocks it must (a cut run appears in
        the result with the bytes it lost, and stays cached with its head). `aside`: entries of the
        tier set aside by the caller (a slot being replaced), neither cached nor evictable now."""
        if self.reserved_bytes + self.cached_bytes + nbytes <= self.capacity_bytes + 1e-6:
            return NOTHING
        evicted: Evicted = []
        while (
            self.reserved_bytes + self.cached_bytes + nbytes > self.capacity_bytes + 1e-6
            and self.count > aside
        ):
            if self.block_tokens:
                cut = self._cut_oldest(self.reserved_bytes + self.cached_bytes + nbytes - self.capacity_bytes)
                if cut > 0.0:
                    self.evicted_bytes += cut
                    evicted.append((self._head.next.key, cut))
                    break
            slot = self._drop_oldest()
            self.evicted_bytes += slot.nbytes
            evicted.append((slot.key, slot.nbytes))
        if self.count == aside:
            self.cached_bytes = 0.0
        return evicted

    def _cut_oldest(self, excess_bytes: float) -> float:
        """Free at least `excess_bytes` by cutting whole blocks off the tail of the least recently
        used run, keeping the longest head that leaves room; returns the bytes freed (0.0 when the
        whole run must go: no head of at least one block is left)."""
        slot = self._head.next
        block = self.block_tokens
        block_bytes = block * self.token_bytes
        keep_bytes = slot.nbytes - excess_bytes  # what the run may still hold
        if keep_bytes < block_bytes:
            return 0.0
        keep = int(keep_bytes // block_bytes) * block
        if keep * self.token_bytes > keep_bytes:  # float rounding at an exact multiple
            keep -= block
        last = (slot.tokens - 1) // block * block  # the start of its last block: at least one goes
        if keep > last:
            keep = last
        if keep <= 0:
            return 0.0
        slot.cut_from = slot.tokens
        freed = slot.nbytes - keep * self.token_bytes
        slot.nbytes = keep * self.token_bytes
        slot.tokens = keep
        self.cached_bytes -= freed
        return freed

    def _drop_oldest(self) -> Slot:
        """Take the least recently used entry out (there is one); returns its slot."""
        slot = self._head.next
        _unlink(slot)
        self._forget(slot)
        self.cached_bytes -= slot.nbytes
        return slot

    def _note_peak(self) -> None:
        """A new peak: record it, after checking the capacity invariant (only a new peak can
        break it)."""
        used = self.reserved_bytes + self.cached_bytes
        if used > self.capacity_bytes + 1e-3 * max(1.0, self.capacity_bytes * 1e-9):
            raise TierFull(f"{self.name}: {used:.0f} B used > capacity {self.capacity_bytes:.0f} B")
        if used > self.peak_bytes:
            self.peak_bytes = used


def _unlink(slot: Slot) -> None:
    slot.prev.next = slot.next
    slot.next.prev = slot.prev


def _link_after(before: Slot, slot: Slot) -> None:
    after = before.next
    slot.prev = before
    slot.next = after
    before.next = slot
    after.prev = slot
