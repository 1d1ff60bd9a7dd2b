"""Where every session's KV is: one `Entry` per lineage (a session's main agent or one of its
sub-agents) or shared prompt prefix, with copies in instances' HBM (cached, LRU + keep-TTL) and in
the tiers below it, and, for V4.1, the SWA ring in a node's host-DRAM pool (TTL).

The tiers below HBM are data (sim.config.cache `tiers`, built by sim.cluster.build): an ordered list
of `StoreTier`s, fastest first, each with its units (one per instance, node, cluster pool or one for
the cluster: its scope), a TTL, the per-request and per-segment software cost of its read and write
paths (sim.kvcache.paths), the write links a copy arrives by, and how copies arrive:
- `demote` tiers form the demotion chain: a copy pushed out of HBM (keep-TTL or capacity) goes to the
  first of them, a copy leaving one (TTL or capacity) to the next (default: host DRAM, then the RDMA
  pool when it is enabled);
- `write_through` tiers receive the new part of every completed context (default: SSD, the family's
  persisted prefixes), and keep it for the family's retention guarantee (an earlier eviction is
  counted as a violation).
A copy in a tier is usable from an instance when the instance reaches the copy's unit and the write
that made it has finished. Writes go through FIFO links, so they cost bandwidth and set when the
copy becomes readable, without events.

The store owns the tiers; engines call its methods. Lookup is a pure query (sim.kvcache.lookup);
using a hit pins the HBM copy or touches the lower tier.

A lineage's cached context always extends the one before it (an agent's context grows), so a
request that repeats p tokens of its parent hits min(p, cached) tokens (rounded to blocks).

HBM is block-granular, lower tiers hold whole prefixes. An instance's HBM copy of a context is a run
of `block_tokens` blocks (sim.kvcache.tiers): capacity pressure cuts blocks off the tail of the least
recently used run, and the head left still hits. That is what the engines do: vLLM's KV cache manager
frees a finished request's blocks tail first into an LRU free queue and evicts from its front (the
served engine, kernels_bench/serve/blocks.py, likewise), SGLang's radix cache evicts least recently used
leaves (tails). A run is one slot with a length, not one object per block, and vLLM's order is kept
because a request's blocks are all freed at once: whole runs in LRU order, tail first inside a run. A
running request pins the run it hits (its bytes become the request's reservation); a session's next
turn extends the same lineage's run, so the context its turns share is held once. A cross-session
shared prompt is cached as its whole blocks and used in place: every running request that begins with
it holds that one copy (ref-counted, like an engine's shared blocks) and reserves only the rest of its
context, and each finishing request makes it the most recently used, so it outlives the sessions' runs
that begin with it, as in an engine that frees a request's blocks tail first. A session's cached run
still counts its own copy of those blocks [D: the engines hold them once; charging them per run
makes the cache hold up to one shared prompt less per cached session].
A cut sends the whole context the run held down the demotion chain (as a whole eviction did before),
and the copies below HBM stay whole prefixes of a lineage with whole-entry LRU, TTL and retention,
because (1) a lower-tier copy is only useful from its first token: LMCache and Mooncake chunk KV
(256 tokens) but key each chunk by the whole prefix before it, so a lookup stops at the first missing
chunk, and their LRU over chunks written together does not keep a useful head the way a free queue
filled tail first does; (2) host DRAM and SSD are 10-100x larger than HBM and drop copies mostly by TTL
(sim.config.cache DEFAULT_TIERS), where a context leaves whole; (3) one entry per lineage keeps the
store's cost per request independent of context length [D: a lower-tier LRU that cuts tails is not
modelled].
"""

from __future__ import annotations

from typing import Final, Protocol

from sim.kvcache.paths import PathCost, kv_segments
from sim.kvcache.policies import CachePolicy
from sim.kvcache.tiers import ByteTier, Slot


class WriteLink(Protocol):
    """A write queue the cluster hands the store (sim.cluster.link.FifoLink): writes are served in order,
    so a write's completion time is known when it is submitted. A protocol, so that the cache tiers do
    not import the cluster that uses them (style.md §7)."""

    def submit(self, now_s: float, nbytes: float, extra_s: float = 0.0) -> float: ...


_CACHE_MASK: Final = 4095  # the entry cache's size less one (sessions in flight: thousands)


class StoreTier:
    """One tier below HBM in a run (see the module doc)."""

    __slots__ = (
        "name",
        "pos",
        "scope",
        "units",
        "unit_of_instance",
        "unit_of_node",
        "demote",
        "retention_s",
        "read",
        "write",
        "write_links_instance",
        "write_links_node",
        "next_demote",
        "traffic",
    )

    def __init__(
        self,
        name: str,
        *,
        scope: str,
        capacity_bytes: list[float],  # per unit
        ttl_s: float,
        unit_of_instance: list[int],  # the unit an instance reaches (-1: none)
        unit_of_node: list[int],  # the unit a copy leaving a node-level tier goes to
        demote: bool,  # False: write-through
        retention_s: float,
        read: PathCost,
        write: PathCost,
        write_links_instance: list[WriteLink],  # per instance: writes from its HBM
        write_links_node: list[WriteLink],  # per node: writes of copies leaving the tier above
    ) -> None:
        self.name = name
        self.pos = -1  # position below HBM, set by the store
        self.scope = scope
        self.units = [ByteTier(f"{name}[{u}]", c, ttl_s, indexed=False) for u, c in enumerate(capacity_bytes)]
        self.unit_of_instance = unit_of_instance
        self.unit_of_node = unit_of_node
        self.demote = demote
        self.retention_s = retention_s
        self.read = read
        self.write = write
        self.write_links_instance = write_links_instance
        self.write_links_node = write_links_node
        self.next_demote: StoreTier | None = None
        self.traffic = Traffic()


class Copy:
    """An entry's copy in one unit of a tier below HBM."""

    __slots__ = ("unit", "node", "tokens", "ready_s", "written_s", "slot")

    def __init__(
        self, unit: int, node: int, tokens: int, ready_s: float, written_s: float, slot: Slot
    ) -> None:
        self.slot = slot  # its entry in the unit (sim.kvcache.tiers)
        self.unit = unit
        self.node = node  # the node it was written from (a copy leaving it goes on from there)
        self.tokens = tokens
        self.ready_s = ready_s  # readable from then on (its write has finished)
        self.written_s = written_s  # last written (retention counts from here)


class Entry:
    """A lineage's or shared prompt's KV in the store. It keeps its slots in the tiers (the cached
    copies' bytes, tokens and LRU places: sim.kvcache.tiers), so that using a copy finds it without a
    lookup by key."""

    __slots__ = (
        "key", "hbm", "copies", "swa_node", "swa_slot", "prompt_tokens", "junction_tokens", "chunk_from_tokens",
        "chunk_tokens", "pins", "live",
    )  # fmt: skip

    def __init__(self, key: int, tiers: int) -> None:
        self.key = key
        self.live = True  # False once the store forgot it (a later use of its key makes a new one)
        # its copies cached in instances' HBM (not pinned; `.unit`: the instance, `.tokens` long), few:
        # a list scanned (`hbm_slot`) costs less than a map's lookups and updates
        self.hbm: list[Slot] = []
        self.copies: list[Copy | None] = [None] * tiers  # by position below HBM
        self.swa_node = -1  # V4.1: node whose SWA pool holds this lineage's ring
        self.swa_slot: Slot | None = None  # its ring's slot in that pool
        self.prompt_tokens = 0  # where the last completed request's input ended (a saved window)
        self.junction_tokens = 0  # a window kept where its hit ended (sim.kvcache.lookup)
        self.chunk_from_tokens = 0  # where that request's prefill began, in chunks of `chunk_tokens`
        self.chunk_tokens = 0
        self.pins = 0  # running requests using this entry


def hbm_slot(e: Entry, inst: int) -> Slot | None:
    """`e`'s copy cached in instance `inst`'s HBM, if any."""
    for slot in e.hbm:
        if slot.unit == inst:
            return slot
    return None


def _drop_hbm(e: Entry, slot: Slot) -> None:
    """`slot` no longer holds a cached copy of `e` (pinned, or evicted whole)."""
    hbm = e.hbm
    for i in range(len(hbm)):
        if hbm[i] is slot:
            hbm[i] = hbm[len(hbm) - 1]  # the last one takes its place (their order means nothing)
            hbm.pop()
            return


class Traffic:
    """Cumulative cache traffic (bytes) of one tier (all its units) over all requests; kept per tier
    as plain floats, which compiled code adds to unboxed."""

    __slots__ = ("written_bytes", "evicted_bytes", "expired_bytes")

    def __init__(self) -> None:
        self.written_bytes = 0.0
        self.evicted_bytes = 0.0  # pushed out by capacity
        self.expired_bytes = 0.0  # dropped by TTL


class Counters:
    """Cumulative cache traffic (bytes), per tier name, over all requests (the recorder counts the
    measured requests' hits and loads): the store's `Traffic` records, read as dicts."""

    __slots__ = ("_tiers", "retention_violation_bytes")

    def __init__(self, tiers: dict[str, Traffic]) -> None:
        self._tiers = tiers  # hbm, the tiers below it, swa_pool
        self.retention_violation_bytes = 0.0

    @property
    def written_bytes(self) -> dict[str, float]:
        return {n: t.written_bytes for n, t in self._tiers.items() if n != "hbm"}

    @property
    def evicted_bytes(self) -> dict[str, float]:
        return {n: t.evicted_bytes for n, t in self._tiers.items()}

    @property
    def expired_bytes(self) -> dict[str, float]:
        return {n: t.expired_bytes for n, t in self._tiers.items()}


class KVStore:
    def __init__(
        self,
        policy: CachePolicy,
        *,
        hbm_capacity_bytes: list[float],  # per instance (KV part of HBM)
        instance_node: list[int],
        kv_replication: list[int],  # per instance
        tiers: list[StoreTier],  # below HBM, fastest first
        swa_pool_capacity_bytes: list[float],  # per node (V4.1's SWA pool; 0 = none)
        swa_write_links: list[WriteLink],  # per instance (HBM -> host DRAM)
    ) -> None:
        self.policy = policy
        p = policy
        # HBM: runs of blocks (the module doc), at the instance's replicated bytes per token
        self.hbm = [
            ByteTier(
                f"hbm[{i}]",
                c,
                p.hbm_keep_s,
                block_tokens=p.block_tokens,
                token_bytes=p.hbm_bytes(1, kv_replication[i]) - p.hbm_bytes(0, kv_replication[i]),
                indexed=False,
            )
            for i, c in enumerate(hbm_capacity_bytes)
        ]
        self.instance_node = instance_node
        self.kv_replication = kv_replication
        self.tiers = tiers
        self.tier_names = ["hbm", *(t.name for t in tiers)]  # by chain index (sim.kvcache.lookup Plan.tier)
        demoting = [t for t in tiers if t.demote]
        for pos, t in enumerate(tiers):
            t.pos = pos
        for upper, lower in zip(demoting, demoting[1:], strict=False):
            upper.next_demote = lower
        self.first_demote: StoreTier | None = demoting[0] if demoting else None
        self.write_through = [t for t in tiers if not t.demote]
        self.swa = [
            ByteTier(f"swa[{n}]", c, p.swa_ttl_s, indexed=False)
            for n, c in enumerate(swa_pool_capacity_bytes)
        ]
        self.swa_write_links = swa_write_links
        self.entries: dict[int, Entry] = {}
        # entries used lately, by a hash of their key (a direct-mapped cache in front of `entries`):
        # a request's path asks for the same few keys many times, and a dict lookup boxes and hashes
        # the key every time
        self._cache: list[Entry | None] = [None] * (_CACHE_MASK + 1)
        self.hbm_traffic = Traffic()
        self.swa_traffic = Traffic()
        self.counters = Counters(
            {"hbm": self.hbm_traffic, **{t.name: t.traffic for t in tiers}, "swa_pool": self.swa_traffic}
        )

    # --- queries ---

    def hbm_tokens(self, key: int, inst: int) -> int:
        """Tokens of `key` cached (not pinned) in instance `inst`'s HBM."""
        e = self.entry(key)
        if e is None:
            return 0
        slot = hbm_slot(e, inst)
        return slot.tokens if slot is not None else 0

    def hbm_copies(self, key: int) -> list[Slot] | None:
        """`key`'s copies cached in instances' HBM (`.unit` the instance, `.tokens` long; read only), or
        None when `key` is not stored."""
        e = self.entry(key)
        return e.hbm if e is not None else None

    def hbm_window_end(self, key: int, inst: int) -> int:
        """Where the sequence that left instance `inst`'s HBM copy of `key` ended: its live sliding
        window was there, in the blocks that overlap it (a copy cut short may have lost them)."""
        slot = hbm_slot(self._existing(key), inst)
        assert slot is not None  # the caller found it
        return slot.whole_tokens

    def demoted_node(self, key: int) -> int:
        """The node whose HBM the copy of `key` in the first demotion tier (host DRAM) came from, or -1."""
        e = self.entry(key)
        t = self.first_demote
        if e is None or t is None:
            return -1
        c = e.copies[t.pos]
        return c.node if c is not None else -1

    def swa_node_of(self, key: int, now_s: float) -> int:
        """Node whose SWA pool holds `key`'s ring now (-1: none or expired)."""
        e = self.entry(key)
        if e is None or e.swa_node < 0:
            return -1
        slot = e.swa_slot
        if slot is None or not slot.member or slot.last_use_s + self.swa[e.swa_node].ttl_s <= now_s:
            return -1
        return e.swa_node

    def segments(self, tokens: int) -> int:
        """KV segments a move of `tokens` touches (sim.kvcache.paths)."""
        p = self.policy
        return kv_segments(tokens, p.block_tokens, p.kv_regions_per_block)

    def read_overhead_s(self, tier: int, tokens: int) -> float:
        """Software seconds of loading `tokens` from chain tier `tier` (1 = the first below HBM)."""
        return self.tiers[tier - 1].read.overhead_s(self.segments(tokens))

    # --- using a hit ---

    def pin_hbm(self, key: int, inst: int) -> float:
        """Take instance `inst`'s cached copy of `key` for a running request; returns its bytes,
        now reserved by that request (0.0 when there is none)."""
        e = self.entry(key)
        if e is None:
            return 0.0
        slot = hbm_slot(e, inst)
        if slot is None:
            return 0.0
        _drop_hbm(e, slot)
        e.pins += 1
        return self.hbm[inst].pin_slot(slot)

    def touch_hbm(self, key: int, inst: int, now_s: float) -> None:
        """A hit served in place from instance `inst`'s HBM copy of `key` counts as a use (LRU order, TTL)."""
        slot = hbm_slot(self._existing(key), inst)
        assert slot is not None  # the lookup found it there
        self.hbm[inst].touch_slot(slot, now_s)

    def touch_lower(self, key: int, tier: int, now_s: float) -> None:
        """A hit served from chain tier `tier` below HBM counts as a use there (LRU order, TTL)."""
        t = self.tiers[tier - 1]
        c = self._existing(key).copies[t.pos]
        assert c is not None  # the lookup found it there
        t.units[c.unit].touch_slot(c.slot, now_s)

    def use_swa(self, key: int, now_s: float) -> None:
        e = self._existing(key)
        slot = e.swa_slot
        assert slot is not None  # the lookup found the ring there
        self.swa[e.swa_node].touch_slot(slot, now_s)

    def reserve_hbm(self, inst: int, nbytes: float, now_s: float) -> None:
        """Reserve `nbytes` of instance `inst`'s HBM for a running request (negative: give back),
        demoting cached copies pushed out (the caller checked `can_reserve`)."""
        tier = self.hbm[inst]
        if nbytes < 0.0:
            tier.release(-nbytes)
            return
        for k, b in tier.reserve(nbytes):
            self._evicted_from_hbm(k, inst, b, now_s, expired=False)

    def finish(
        self,
        key: int,
        inst: int,
        *,
        tokens: int,
        reserved_bytes: float,
        unpin_key: int | None,
        now_s: float,
        persist: bool,
        prompt_tokens: int = 0,
        junction_tokens: int = 0,
        chunk_from_tokens: int = 0,
        chunk_tokens: int = 0,
        shared_key: int | None = None,
        shared_held: bool = False,
    ) -> None:
        """A request on instance `inst` is done with its HBM: give back its reservation, keep
        `tokens` of `key` cached there, unpin the cached copy it used (`unpin_key`: the key it
        pinned, None when it pinned none), and with `persist` (at completion) write the new context
        through to the write-through tiers and put V4.1's SWA ring in the node's pool. The window
        state is saved at the end of the request's input (`prompt_tokens`) and of its output
        (hardware.md §4.1 [A]: prefix units at both), so a later hit may end at either
        (sim.kvcache.lookup); the window its own hit read, or an engine pinned where that hit was cut
        short, stays for the lineage too (`junction_tokens`), and so do those at its prefill's chunk ends
        (from `chunk_from_tokens` every `chunk_tokens`). The shared prompt the request began with (`shared_key`; used in place
        when `shared_held`), if cached there, becomes the most recently used: its blocks head every
        such request's context, so an engine frees them last (vLLM frees a request's blocks tail
        first) and they outlive the sessions' own runs."""
        tier = self.hbm[inst]
        tier.release(reserved_bytes)
        e = self._entry(key)  # looked up once: the entry stays while it holds a copy (checked below)
        self._retain_hbm(e, inst, tokens, now_s)
        if shared_held:
            assert shared_key is not None
            self._unhold_shared(shared_key, inst, now_s)
        elif shared_key is not None:
            s = self.entry(shared_key)
            if s is not None:
                slot = hbm_slot(s, inst)
                if slot is not None:
                    tier.touch_slot(slot, now_s)
        if unpin_key is not None:
            u = e if unpin_key == key and e.live else self.entry(unpin_key)
            if u is not None:
                self._unpin(u)
        if not persist:
            return
        if e.live:
            self._persist(e, inst, tokens, now_s)
            if self.policy.swa_pool:
                self._put_swa(e, inst, now_s)
            e.prompt_tokens = prompt_tokens
            e.junction_tokens = junction_tokens
            e.chunk_from_tokens, e.chunk_tokens = chunk_from_tokens, chunk_tokens
            return
        # forgotten by the unpin (no copy kept anywhere): by key, making an entry only where one is written
        self.persist(key, inst, tokens, now_s)
        self.put_swa(key, inst, now_s)
        f = self.entry(key)
        if f is not None:
            f.prompt_tokens = prompt_tokens
            f.junction_tokens = junction_tokens
            f.chunk_from_tokens, f.chunk_tokens = chunk_from_tokens, chunk_tokens

    def retain_shared(self, key: int, inst: int, tokens: int, now_s: float) -> None:
        """A shared prompt prefix of `tokens` just computed on `inst`: cache its whole blocks there
        (the part later requests can hit and use in place; no sequence state: it is the head of
        other sequences) and persist it once."""
        blocks = tokens - tokens % self.policy.block_tokens
        e = self.entry(key)
        tier = self.hbm[inst]
        slot = hbm_slot(e, inst) if e is not None else None
        held = slot.tokens if slot is not None else 0
        if slot is not None and held and (held >= blocks or slot.holders):
            tier.touch_slot(slot, now_s)  # enough of it, or in use by running sequences (kept as it is)
        elif blocks:
            e = self._entry(key)
            nbytes = blocks * tier.token_bytes
            if tier.can_fit(nbytes):
                if slot is None:
                    slot = Slot(key, nbytes, blocks, now_s, inst)
                    e.hbm.append(slot)
                for k, b in tier.put_slot(slot, nbytes, now_s, blocks):
                    self._evicted_from_hbm(k, inst, b, now_s, expired=False)
        self.persist(key, inst, tokens, now_s)

    # --- a shared prompt's blocks used in place ---

    def shared_hbm_tokens(self, key: int, inst: int, shared_tokens: int) -> int:
        """Tokens of a request's shared prompt (`shared_tokens` of `key`) that instance `inst`'s HBM
        holds as whole blocks: the request can use them in place instead of holding its own copy."""
        e = self.entry(key)
        slot = hbm_slot(e, inst) if e is not None else None
        if slot is None:
            return 0
        usable = min(slot.tokens, shared_tokens)
        return usable - usable % self.policy.block_tokens

    def shared_hold_bytes(self, key: int, inst: int) -> float:
        """HBM bytes a request starting to use `key`'s copy in place adds to the reserved ones (the
        whole copy when nobody uses it yet, else nothing)."""
        e = self.entry(key)
        slot = hbm_slot(e, inst) if e is not None else None
        return slot.nbytes if slot is not None and not slot.holders else 0.0

    def hold_shared(self, key: int, inst: int) -> None:
        """A request on `inst` uses `key`'s cached blocks in place until it finishes (`finish` with
        `shared_held`): they cannot be evicted meanwhile, and count once however many use them."""
        slot = hbm_slot(self._existing(key), inst)
        assert slot is not None  # the caller found it holdable
        self.hbm[inst].hold_slot(slot)

    def _unhold_shared(self, key: int, inst: int, now_s: float) -> None:
        """A request on `inst` is done using `key`'s cached blocks in place (`hold_shared`)."""
        held = hbm_slot(self._existing(key), inst)
        assert held is not None  # held slots stay cached
        self.hbm[inst].unhold_slot(held, now_s)

    def unpin(self, key: int) -> None:
        e = self.entry(key)
        if e is not None:
            self._unpin(e)

    def _unpin(self, e: Entry) -> None:
        e.pins -= 1
        self._maybe_forget(e)

    # --- after a request ---

    def retain_hbm(self, key: int, inst: int, tokens: int, now_s: float) -> None:
        """Keep `tokens` of `key` cached in instance `inst`'s HBM (the caller released its
        reservation just before, so the copy fits); older copies there are replaced."""
        self._retain_hbm(self._entry(key), inst, tokens, now_s)

    def _retain_hbm(self, e: Entry, inst: int, tokens: int, now_s: float) -> None:
        tier = self.hbm[inst]
        nbytes = self.policy.hbm_bytes(tokens, self.kv_replication[inst])
        if not tier.can_fit(nbytes):
            self._demote_from_hbm(e, inst, tokens, now_s)  # cannot stay: straight down the chain
            return
        slot = hbm_slot(e, inst)
        if slot is None:
            slot = Slot(e.key, nbytes, tokens, now_s, inst)
            e.hbm.append(slot)
        for k, b in tier.put_slot(slot, nbytes, now_s, tokens):
            self._evicted_from_hbm(k, inst, b, now_s, expired=False)

    def persist(self, key: int, inst: int, tokens: int, now_s: float) -> None:
        """Write the part of `key`'s context not yet in each write-through tier (plus persisted state),
        from instance `inst`; readable there once the write completes."""
        if self.policy.persist_prefixes:
            self._persist(self._entry(key), inst, tokens, now_s)

    def _persist(self, e: Entry, inst: int, tokens: int, now_s: float) -> None:
        p = self.policy
        if not p.persist_prefixes:
            return
        key = e.key
        node = self.instance_node[inst]
        for t in self.write_through:
            unit = t.unit_of_instance[inst]
            units = t.units[unit]
            c = e.copies[t.pos]
            same = c is not None and c.unit == unit
            held = c.tokens if c is not None and same else 0
            if c is not None and held and tokens <= held:
                units.touch_slot(c.slot, now_s)
                continue
            nbytes = p.persist_bytes(tokens)
            if not units.can_fit(nbytes):
                continue  # larger than the whole tier: not persisted
            if c is not None and not same:
                t.units[c.unit].remove_slot(c.slot)
            delta = (tokens - held) * p.global_kv_bytes_per_token + p.persisted_state_bytes
            extra = t.write.overhead_s(self.segments(tokens - held))
            ready = t.write_links_instance[inst].submit(now_s, delta, extra)
            if c is not None and same:  # grown in place
                slot = c.slot
                c.node, c.tokens, c.ready_s, c.written_s = node, tokens, ready, now_s
            else:
                slot = Slot(key, nbytes, 0, now_s)
                e.copies[t.pos] = Copy(unit, node, tokens, ready, now_s, slot)
            t.traffic.written_bytes += delta
            for k, b in units.put_slot(slot, nbytes, now_s):
                self._left(k, t, b, now_s, expired=False)

    def put_swa(self, key: int, inst: int, now_s: float) -> None:
        """V4.1: the finished sequence's SWA ring goes to its node's host-DRAM pool (TTL)."""
        if self.policy.swa_pool and self.swa[self.instance_node[inst]].can_fit(self.policy.swa_state_bytes):
            self._put_swa(self._entry(key), inst, now_s)

    def _put_swa(self, e: Entry, inst: int, now_s: float) -> None:
        p = self.policy
        if not p.swa_pool:
            return
        node = self.instance_node[inst]
        pool = self.swa[node]
        if not pool.can_fit(p.swa_state_bytes):
            return
        slot = e.swa_slot
        if slot is not None and e.swa_node != node:
            self.swa[e.swa_node].remove_slot(slot)
            slot = None
        if slot is None:
            slot = e.swa_slot = Slot(e.key, p.swa_state_bytes, 0, now_s)
        e.swa_node = node
        self.swa_write_links[inst].submit(now_s, p.swa_state_bytes)
        self.swa_traffic.written_bytes += p.swa_state_bytes
        for k, b in pool.put_slot(slot, p.swa_state_bytes, now_s):
            self.swa_traffic.evicted_bytes += b
            self._forget_swa(k)

    # --- time passing ---

    def sweep(self, now_s: float) -> None:
        """Apply every tier's TTL (lazy expiry; called by engines and the periodic sampler)."""
        for inst in range(len(self.hbm)):
            self.sweep_hbm(inst, now_s)
        for t in self.tiers:
            for unit in t.units:
                for k, b in unit.expire(now_s):
                    self._left(k, t, b, now_s, expired=True)
        for tier in self.swa:
            for k, b in tier.expire(now_s):
                self.swa_traffic.expired_bytes += b
                self._forget_swa(k)

    def sweep_hbm(self, inst: int, now_s: float) -> None:
        evicted = self.hbm[inst].expire(now_s)
        for k, b in evicted:
            self._evicted_from_hbm(k, inst, b, now_s, expired=True)

    # --- failures (sim.cluster.faults) ---

    def abandon(
        self,
        inst: int,
        *,
        reserved_bytes: float,
        unpin_key: int | None,
        shared_key: int | None,
        shared_held: bool,
        now_s: float,
    ) -> None:
        """A request leaves instance `inst` unfinished (its instance or its KV's source failed): its
        reservation, its pin and its hold of a shared prompt are given back; nothing of it is cached
        (`finish` without keeping a copy)."""
        self.hbm[inst].release(reserved_bytes)
        if shared_held:
            assert shared_key is not None
            self._unhold_shared(shared_key, inst, now_s)
        if unpin_key is not None:
            self.unpin(unpin_key)

    def lose_hbm(self, inst: int) -> float:
        """Instance `inst` failed: every copy cached in its HBM is gone (after its requests were
        abandoned, none is held). Returns the bytes lost."""
        tier = self.hbm[inst]
        lost = 0.0
        for key in tier.keys_lru_order():
            e = self._existing(key)
            slot = hbm_slot(e, inst)
            assert slot is not None
            lost += tier.remove_slot(slot)
            _drop_hbm(e, slot)
            self._maybe_forget(e)
        return lost

    def lose_node(self, node: int) -> float:
        """Node `node` failed: its units of the tiers below HBM that live in it (a node-scoped tier,
        host DRAM by default; an instance-scoped one of its instances) and its SWA pool are gone.
        Returns the bytes lost."""
        lost = 0.0
        for t in self.tiers:
            if t.scope == "node":
                units = [node]
            elif t.scope == "instance":
                units = [t.unit_of_instance[i] for i, n in enumerate(self.instance_node) if n == node]
            else:
                continue  # a pool or the cluster's: held elsewhere
            for u in units:
                unit = t.units[u]
                for key in unit.keys_lru_order():
                    e = self._existing(key)
                    c = e.copies[t.pos]
                    assert c is not None
                    lost += unit.remove_slot(c.slot)
                    e.copies[t.pos] = None
                    self._maybe_forget(e)
        if self.swa:
            pool = self.swa[node]
            for key in pool.keys_lru_order():
                e = self._existing(key)
                slot = e.swa_slot
                assert slot is not None
                lost += pool.remove_slot(slot)
                e.swa_node = -1
                e.swa_slot = None
                self._maybe_forget(e)
        return lost

    # --- internals ---

    def entry(self, key: int) -> Entry | None:
        """The entry of `key`, None when nothing of it is stored."""
        i = (key ^ (key >> 16)) & _CACHE_MASK
        e = self._cache[i]
        if e is not None and e.key == key:  # a live entry: a forgotten one leaves the cache
            return e
        e = self.entries.get(key)
        if e is not None:
            self._cache[i] = e
        return e

    def _existing(self, key: int) -> Entry:
        e = self.entry(key)
        assert e is not None  # callers hold a copy of it
        return e

    def _entry(self, key: int) -> Entry:
        e = self.entry(key)
        if e is None:
            e = self.entries[key] = Entry(key, len(self.tiers))
            self._cache[(key ^ (key >> 16)) & _CACHE_MASK] = e
        return e

    def _evicted_from_hbm(self, key: int, inst: int, nbytes: float, now_s: float, *, expired: bool) -> None:
        """`key`'s copy in instance `inst`'s HBM lost `nbytes`: all of it, or its tail when the
        tier cut the run (its head still cached there). Either way the context it held goes down
        the demotion chain whole (the module doc)."""
        if expired:
            self.hbm_traffic.expired_bytes += nbytes
        else:
            self.hbm_traffic.evicted_bytes += nbytes
        e = self._existing(key)
        slot = hbm_slot(e, inst)
        assert slot is not None
        if slot.member:  # cut: its head is left there
            tokens = slot.cut_from
        else:
            tokens = slot.tokens
            _drop_hbm(e, slot)
        self._demote_from_hbm(e, inst, tokens, now_s)
        self._maybe_forget(e)

    def _demote_from_hbm(self, e: Entry, inst: int, tokens: int, now_s: float) -> None:
        """A copy leaves instance `inst`'s HBM: into the first demotion tier, over the instance's lanes."""
        t = self.first_demote
        if t is not None:
            node = self.instance_node[inst]
            self._copy_into(e, t, t.unit_of_instance[inst], node, tokens, t.write_links_instance[inst], now_s)

    def _copy_into(
        self, e: Entry, t: StoreTier, unit: int, node: int, tokens: int, link: WriteLink, now_s: float
    ) -> None:
        """Write `tokens` of `e` into unit `unit` of demotion tier `t` over `link`, unless already there."""
        c = e.copies[t.pos]
        if c is not None and c.unit == unit and c.tokens >= tokens:
            return
        units = t.units[unit]
        nbytes = self.policy.persist_bytes(tokens)
        if not units.can_fit(nbytes):
            return
        if c is not None and c.unit != unit:
            t.units[c.unit].remove_slot(c.slot)
        ready = link.submit(now_s, nbytes, t.write.overhead_s(self.segments(tokens)))
        if c is not None and c.unit == unit:  # grown in place
            slot = c.slot
            c.node, c.tokens, c.ready_s, c.written_s = node, tokens, ready, now_s
        else:
            slot = Slot(e.key, nbytes, 0, now_s)
            e.copies[t.pos] = Copy(unit, node, tokens, ready, now_s, slot)
        t.traffic.written_bytes += nbytes
        for k, b in units.put_slot(slot, nbytes, now_s):
            self._left(k, t, b, now_s, expired=False)

    def _left(self, key: int, t: StoreTier, nbytes: float, now_s: float, *, expired: bool) -> None:
        """`key`'s copy left tier `t` (expired, or evicted by capacity): it goes on to the next
        demotion tier, if any, from the node it was written from."""
        if expired:
            t.traffic.expired_bytes += nbytes
        else:
            t.traffic.evicted_bytes += nbytes
        e = self._existing(key)
        c = e.copies[t.pos]
        assert c is not None
        if not expired and now_s - c.written_s < t.retention_s:
            self.counters.retention_violation_bytes += nbytes
        nxt = t.next_demote
        if nxt is not None:
            unit = nxt.unit_of_node[c.node]
            self._copy_into(e, nxt, unit, c.node, c.tokens, nxt.write_links_node[c.node], now_s)
        e.copies[t.pos] = None
        self._maybe_forget(e)

    def _forget_swa(self, key: int) -> None:
        e = self._existing(key)
        e.swa_node = -1
        e.swa_slot = None
        self._maybe_forget(e)

    def _maybe_forget(self, e: Entry) -> None:
        if e.hbm or e.swa_node >= 0 or e.pins > 0:
            return
        for c in e.copies:
            if c is not None:
                return
        del self.entries[e.key]
        e.live = False
        i = (e.key ^ (e.key >> 16)) & _CACHE_MASK
        if self._cache[i] is e:
            self._cache[i] = None

    # --- occupancy (for samples and invariants) ---

    def units_of(self, name: str) -> list[ByteTier]:
        """The units of the tier called `name` (HBM: one per instance; none for a tier not in the run)."""
        if name == "hbm":
            return self.hbm
        if name == "swa_pool":
            return self.swa
        for t in self.tiers:
            if t.name == name:
                return t.units
        return []

    def tier_bytes(self) -> dict[str, float]:
        out = {
            "hbm": sum(t.used_bytes for t in self.hbm),
            "hbm_cached": sum(t.cached_bytes for t in self.hbm),
        }
        for t in self.tiers:
            out[t.name] = sum(u.used_bytes for u in t.units)
        out["swa_pool"] = sum(t.used_bytes for t in self.swa)
        return out

    def check_capacities(self) -> None:
        """Raise if any tier holds more than its capacity (an invariant; cheap)."""
        units = [*self.hbm, *self.swa]
        for t in self.tiers:
            units.extend(t.units)
        for tier in units:
            if tier.used_bytes > tier.capacity_bytes * (1 + 1e-9) + 1.0:
                raise AssertionError(
                    f"{tier.name}: {tier.used_bytes:.0f} B > capacity {tier.capacity_bytes:.0f} B"
                )
