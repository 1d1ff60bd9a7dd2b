"""Where every session's KV is: one `Entry` per lineage (a session's main agent or one of its
sub-agents) or shared prompt prefix, with copies in instances' HBM (cached, LRU + keep-TTL),
a node's host DRAM (LRU + TTL), an RDMA-attached DRAM pool shared by nodes (Mooncake-store-like,
LRU + TTL; only when `cache.tiers.rdma_pool` is enabled), the cluster's SSD tier (LRU + retention)
and, for V4.1, the SWA ring in a node's host-DRAM pool (TTL).

The store owns the tiers; engines call its methods. Lookup is a pure query
(sim.kvcache.lookup); using a hit pins the HBM copy or touches the lower tier. Copies leave HBM by keep-TTL or capacity
pressure and are demoted to the node's DRAM (a PCIe write), copies leaving DRAM to the RDMA pool
(a NIC write) when there is one; completions persist the new part
of the context to SSD (an SSD write). Writes go through FIFO links, so they cost bandwidth and
set when the copy becomes readable, without events.

A lineage's cached context always extends the one before it (an agent's context grows), so a
request that repeats p tokens of its parent hits min(p, cached) tokens (rounded to blocks).
"""

from __future__ import annotations

from sim.cluster.link import FifoLink
from sim.kvcache.policies import CachePolicy
from sim.kvcache.tiers import ByteTier


class Entry:
    __slots__ = (
        "key",
        "hbm",
        "dram_node",
        "dram_tokens",
        "dram_ready_s",
        "ssd_tokens",
        "ssd_ready_s",
        "ssd_written_s",
        "swa_node",
        "pool_unit",
        "pool_tokens",
        "pool_ready_s",
        "prompt_tokens",
        "pins",
    )

    def __init__(self, key: int) -> None:
        self.key = key
        self.hbm: dict[int, int] = {}  # instance index -> cached tokens (not pinned)
        self.dram_node = -1
        self.dram_tokens = 0
        self.dram_ready_s = 0.0
        self.ssd_tokens = 0
        self.ssd_ready_s = 0.0
        self.ssd_written_s = 0.0
        self.swa_node = -1  # V4.1: node whose SWA pool holds this lineage's ring
        self.pool_unit = -1  # RDMA pool unit holding a copy (-1: none)
        self.pool_tokens = 0
        self.pool_ready_s = 0.0
        self.prompt_tokens = 0  # where the last completed request's input ended (a saved window)
        self.pins = 0  # running requests using this entry


class Counters:
    """Cumulative cache traffic (bytes) and hits (tokens), per tier."""

    __slots__ = (
        "hit_tokens",
        "loaded_bytes",
        "written_bytes",
        "evicted_bytes",
        "expired_bytes",
        "retention_violation_bytes",
        "swa_hits",
        "swa_misses",
        "replayed_tokens",
    )

    def __init__(self) -> None:
        self.hit_tokens = {"hbm": 0, "dram": 0, "rdma_pool": 0, "ssd": 0}
        self.loaded_bytes = {"hbm": 0.0, "dram": 0.0, "rdma_pool": 0.0, "ssd": 0.0, "swa_pool": 0.0}
        self.written_bytes = {"dram": 0.0, "rdma_pool": 0.0, "ssd": 0.0, "swa_pool": 0.0}
        self.evicted_bytes = {"hbm": 0.0, "dram": 0.0, "rdma_pool": 0.0, "ssd": 0.0, "swa_pool": 0.0}
        self.expired_bytes = {"hbm": 0.0, "dram": 0.0, "rdma_pool": 0.0, "ssd": 0.0, "swa_pool": 0.0}
        self.retention_violation_bytes = 0.0
        self.swa_hits = 0
        self.swa_misses = 0
        self.replayed_tokens = 0


class KVStore:
    def __init__(
        self,
        policy: CachePolicy,
        *,
        hbm_capacity_bytes: list[float],  # per instance (KV part of HBM)
        instance_node: list[int],
        kv_replication: list[int],  # per instance
        d2h_links: list[FifoLink],  # per instance (HBM -> host DRAM writes)
        dram_capacity_bytes: list[float],  # per node (global-KV part of host DRAM)
        swa_pool_capacity_bytes: list[float],  # per node (V4.1's SWA pool; 0 = none)
        ssd_capacity_bytes: float,  # cluster SSD tier
        ssd_write_links: list[FifoLink],  # per node
        pool_capacity_bytes: list[float] | None = None,  # per RDMA pool unit (none: no pool)
        pool_unit_of_node: list[int] | None = None,  # node -> its pool unit
        pool_write_links: list[FifoLink] | None = None,  # per node (its NICs)
    ) -> None:
        self.policy = policy
        p = policy
        self.hbm = [ByteTier(f"hbm[{i}]", c, p.hbm_keep_s) for i, c in enumerate(hbm_capacity_bytes)]
        self.instance_node = instance_node
        self.kv_replication = kv_replication
        self.d2h_links = d2h_links
        self.dram = [ByteTier(f"dram[{n}]", c, p.dram_ttl_s) for n, c in enumerate(dram_capacity_bytes)]
        self.swa = [ByteTier(f"swa[{n}]", c, p.swa_ttl_s) for n, c in enumerate(swa_pool_capacity_bytes)]
        self.ssd = ByteTier("ssd", ssd_capacity_bytes, min(p.ssd_ttl_s, float("inf")))
        self.ssd_write_links = ssd_write_links
        self.pool = [
            ByteTier(f"rdma_pool[{u}]", c, p.pool_ttl_s) for u, c in enumerate(pool_capacity_bytes or [])
        ]
        self.pool_unit_of_node: list[int] = pool_unit_of_node or []
        self.pool_write_links: list[FifoLink] = pool_write_links or []
        self.entries: dict[int, Entry] = {}
        self.counters = Counters()

    # --- queries ---

    def swa_node_of(self, key: int, now_s: float) -> int:
        """Node whose SWA pool holds `key`'s ring now (-1: none or expired)."""
        e = self.entries.get(key)
        if e is None or e.swa_node < 0:
            return -1
        pool = self.swa[e.swa_node]
        if key not in pool or pool.last_use_s(key) + pool.ttl_s <= now_s:
            return -1
        return e.swa_node

    # --- using a hit ---

    def pin_hbm(self, key: int, inst: int) -> float:
        """Take instance `inst`'s cached copy of `key` for a running request; returns its bytes,
        now reserved by that request (0.0 when there is none)."""
        e = self.entries.get(key)
        if e is None or inst not in e.hbm:
            return 0.0
        del e.hbm[inst]
        e.pins += 1
        return self.hbm[inst].pin(key)

    def touch_lower(self, key: int, tier: str, now_s: float) -> None:
        """A hit served from DRAM or SSD counts as a use there (LRU order, TTL)."""
        e = self.entries[key]
        if tier == "dram":
            self.dram[e.dram_node].touch(key, now_s)
        elif tier == "ssd":
            self.ssd.touch(key, now_s)
        elif tier == "rdma_pool":
            self.pool[e.pool_unit].touch(key, now_s)

    def use_swa(self, key: int, now_s: float) -> None:
        e = self.entries[key]
        self.swa[e.swa_node].touch(key, now_s)

    def reserve_hbm(self, inst: int, nbytes: float, now_s: float) -> None:
        """Reserve `nbytes` of instance `inst`'s HBM for a running request (negative: give back),
        demoting cached copies pushed out (the caller checked `can_reserve`)."""
        tier = self.hbm[inst]
        if nbytes < 0.0:
            tier.release(-nbytes)
            return
        for k, b in tier.reserve(nbytes):
            self._evicted_from_hbm(k, inst, b, now_s, expired=False)

    def count_hit(self, plan) -> None:
        """Cumulative hit tokens and bytes loaded per tier, all requests (the recorder keeps the
        measured ones); `plan` is a sim.kvcache.lookup plan."""
        _key, tokens, tier, hbm_tokens, load_bytes, swa_node, replay, _shared = plan
        c = self.counters
        c.hit_tokens["hbm"] += hbm_tokens
        if tier != "hbm":
            c.hit_tokens[tier] += tokens - hbm_tokens
        if load_bytes:
            c.loaded_bytes[tier] += load_bytes
        if swa_node >= 0:
            c.loaded_bytes["swa_pool"] += self.policy.swa_state_bytes
            c.swa_hits += 1
        elif replay:
            c.swa_misses += 1
            c.replayed_tokens += replay

    def finish(
        self,
        key: int,
        inst: int,
        tokens: int,
        reserved: float,
        pinned: int | None,
        now_s: float,
        persist: bool,
        prompt_tokens: int = 0,
    ) -> None:
        """A request on instance `inst` is done with its HBM: give back its reservation, keep
        `tokens` of `key` cached there, unpin the copy it used, and (at completion) persist the
        new context to SSD and put V4.1's SWA ring in the node's pool. The window state is saved
        at the end of the request's input (`prompt_tokens`) and of its output (hardware.md §4.1
        [A]: prefix units at both), so a later hit may end at either (sim.kvcache.lookup)."""
        self.hbm[inst].release(reserved)
        self.retain_hbm(key, inst, tokens, now_s)
        if pinned is not None:
            self.unpin(pinned)
        if persist:
            self.persist(key, inst, tokens, now_s)
            if self.policy.swa_pool:
                self.put_swa(key, inst, now_s)
            e = self.entries.get(key)
            if e is not None:
                e.prompt_tokens = prompt_tokens

    def retain_shared(self, key: int, inst: int, tokens: int, now_s: float) -> None:
        """A shared prompt prefix just computed on `inst`: cache it there (and persist it once)."""
        e = self.entries.get(key)
        if e is not None and e.hbm.get(inst, 0) >= tokens:
            self.hbm[inst].touch(key, now_s)
            return
        self.retain_hbm(key, inst, tokens, now_s)
        self.persist(key, inst, tokens, now_s)

    def unpin(self, key: int) -> None:
        e = self.entries.get(key)
        if e is not None:
            e.pins -= 1
            self._maybe_forget(e)

    # --- after a request ---

    def retain_hbm(self, key: int, inst: int, tokens: int, now_s: float) -> None:
        """Keep `tokens` of `key` cached in instance `inst`'s HBM (the caller released its
        reservation just before, so the copy fits); older copies there are replaced."""
        e = self._entry(key)
        tier = self.hbm[inst]
        nbytes = self.policy.hbm_bytes(tokens, self.kv_replication[inst])
        if not tier.can_fit(nbytes):
            self._demote(e, inst, tokens, now_s)  # cannot stay: straight to host DRAM
            return
        e.hbm[inst] = tokens
        for k, b in tier.put(key, nbytes, now_s):
            self._evicted_from_hbm(k, inst, b, now_s, expired=False)

    def persist(self, key: int, inst: int, tokens: int, now_s: float) -> None:
        """Write the part of `key`'s context not yet on SSD (plus persisted state), from the node
        of instance `inst`; readable from SSD once the write completes."""
        p = self.policy
        if not p.persist_to_ssd:
            return
        e = self._entry(key)
        if tokens <= e.ssd_tokens and e.ssd_tokens:
            self.ssd.touch(key, now_s)
            return
        delta = (tokens - e.ssd_tokens) * p.global_kv_bytes_per_token + p.persisted_state_bytes
        nbytes = p.persist_bytes(tokens)
        if not self.ssd.can_fit(nbytes):
            return  # larger than the whole tier: not persisted
        node = self.instance_node[inst]
        extra = p.move_extra_s(p.write_cost, "ssd", tokens - e.ssd_tokens)
        e.ssd_ready_s = self.ssd_write_links[node].submit(now_s, delta, extra)
        e.ssd_tokens = tokens
        e.ssd_written_s = now_s
        self.counters.written_bytes["ssd"] += delta
        for k, b in self.ssd.put(key, nbytes, now_s):
            self._drop_ssd(k, b, now_s, expired=False)

    def put_swa(self, key: int, inst: int, now_s: float) -> None:
        """V4.1: the finished sequence's SWA ring goes to its node's host-DRAM pool (TTL)."""
        p = self.policy
        if not p.swa_pool:
            return
        node = self.instance_node[inst]
        pool = self.swa[node]
        if not pool.can_fit(p.swa_state_bytes):
            return
        e = self._entry(key)
        if e.swa_node >= 0 and e.swa_node != node:
            self.swa[e.swa_node].remove(key)
        e.swa_node = node
        self.d2h_links[inst].submit(now_s, p.swa_state_bytes)
        self.counters.written_bytes["swa_pool"] += p.swa_state_bytes
        for k, b in pool.put(key, p.swa_state_bytes, now_s):
            self.counters.evicted_bytes["swa_pool"] += b
            self._forget_swa(k)

    # --- time passing ---

    def sweep(self, now_s: float) -> None:
        """Apply every tier's TTL (lazy expiry; called by engines and the periodic sampler)."""
        for inst in range(len(self.hbm)):
            self.sweep_hbm(inst, now_s)
        for tier in self.dram:
            for k, b in tier.expire(now_s):
                self.counters.expired_bytes["dram"] += b
                self._leave_dram(k, now_s)
        for tier in self.pool:
            for k, b in tier.expire(now_s):
                self.counters.expired_bytes["rdma_pool"] += b
                self._forget_pool(k)
        for k, b in self.ssd.expire(now_s):
            self._drop_ssd(k, b, now_s, expired=True)
        for tier in self.swa:
            for k, b in tier.expire(now_s):
                self.counters.expired_bytes["swa_pool"] += b
                self._forget_swa(k)

    def sweep_hbm(self, inst: int, now_s: float) -> None:
        evicted = self.hbm[inst].expire(now_s)
        for k, b in evicted:
            self._evicted_from_hbm(k, inst, b, now_s, expired=True)

    # --- internals ---

    def _entry(self, key: int) -> Entry:
        e = self.entries.get(key)
        if e is None:
            e = self.entries[key] = Entry(key)
        return e

    def _evicted_from_hbm(self, key: int, inst: int, nbytes: float, now_s: float, *, expired: bool) -> None:
        (self.counters.expired_bytes if expired else self.counters.evicted_bytes)["hbm"] += nbytes
        e = self.entries[key]
        tokens = e.hbm.pop(inst)
        self._demote(e, inst, tokens, now_s)
        self._maybe_forget(e)

    def _demote(self, e: Entry, inst: int, tokens: int, now_s: float) -> None:
        """Copy `tokens` of `e` from instance `inst`'s HBM to its node's DRAM, unless already there."""
        p = self.policy
        node = self.instance_node[inst]
        if not p.demote_to_dram or (e.dram_node == node and e.dram_tokens >= tokens):
            return
        tier = self.dram[node]
        nbytes = p.persist_bytes(tokens)
        if not tier.can_fit(nbytes):
            return
        if e.dram_node >= 0 and e.dram_node != node:
            self.dram[e.dram_node].remove(e.key)
        e.dram_node = node
        e.dram_tokens = tokens
        e.dram_ready_s = self.d2h_links[inst].submit(
            now_s, nbytes, p.move_extra_s(p.write_cost, "dram", tokens)
        )
        self.counters.written_bytes["dram"] += nbytes
        for k, b in tier.put(e.key, nbytes, now_s):
            self.counters.evicted_bytes["dram"] += b
            self._leave_dram(k, now_s)

    def _leave_dram(self, key: int, now_s: float) -> None:
        """A copy leaves host DRAM (evicted or expired): to the RDMA pool when there is one."""
        e = self.entries[key]
        if self.pool and e.dram_node >= 0:
            self._to_pool(e, e.dram_node, e.dram_tokens, now_s)
        self._forget_dram(key)

    def _to_pool(self, e: Entry, node: int, tokens: int, now_s: float) -> None:
        """Write `tokens` of `e` from `node` into its RDMA pool unit, unless already there."""
        p = self.policy
        unit = self.pool_unit_of_node[node]
        if e.pool_unit == unit and e.pool_tokens >= tokens:
            return
        tier = self.pool[unit]
        nbytes = p.persist_bytes(tokens)
        if not tier.can_fit(nbytes):
            return
        if e.pool_unit >= 0 and e.pool_unit != unit:
            self.pool[e.pool_unit].remove(e.key)
        e.pool_unit = unit
        e.pool_tokens = tokens
        extra = p.move_extra_s(p.write_cost, "rdma_pool", tokens)
        e.pool_ready_s = self.pool_write_links[node].submit(now_s, nbytes, extra)
        self.counters.written_bytes["rdma_pool"] += nbytes
        for k, b in tier.put(e.key, nbytes, now_s):
            self.counters.evicted_bytes["rdma_pool"] += b
            self._forget_pool(k)

    def _forget_pool(self, key: int) -> None:
        e = self.entries[key]
        e.pool_unit = -1
        e.pool_tokens = 0
        self._maybe_forget(e)

    def _forget_dram(self, key: int) -> None:
        e = self.entries[key]
        e.dram_node = -1
        e.dram_tokens = 0
        self._maybe_forget(e)

    def _forget_swa(self, key: int) -> None:
        e = self.entries[key]
        e.swa_node = -1
        self._maybe_forget(e)

    def _drop_ssd(self, key: int, nbytes: float, now_s: float, *, expired: bool) -> None:
        e = self.entries[key]
        (self.counters.expired_bytes if expired else self.counters.evicted_bytes)["ssd"] += nbytes
        if not expired and now_s - e.ssd_written_s < self.policy.ssd_retention_s:
            self.counters.retention_violation_bytes += nbytes
        e.ssd_tokens = 0
        self._maybe_forget(e)

    def _maybe_forget(self, e: Entry) -> None:
        if (
            not e.hbm
            and e.dram_node < 0
            and e.pool_unit < 0
            and e.ssd_tokens == 0
            and e.swa_node < 0
            and e.pins <= 0
        ):
            del self.entries[e.key]

    # --- occupancy (for samples and invariants) ---

    def tier_bytes(self) -> dict[str, float]:
        return {
            "hbm": sum(t.used_bytes for t in self.hbm),
            "hbm_cached": sum(t.cached_bytes for t in self.hbm),
            "dram": sum(t.used_bytes for t in self.dram),
            "rdma_pool": sum(t.used_bytes for t in self.pool),
            "ssd": self.ssd.used_bytes,
            "swa_pool": sum(t.used_bytes for t in self.swa),
        }

    def check_capacities(self) -> None:
        """Raise if any tier holds more than its capacity (an invariant; cheap)."""
        for tier in (*self.hbm, *self.dram, *self.pool, *self.swa, self.ssd):
            if tier.used_bytes > tier.capacity_bytes * (1 + 1e-9) + 1.0:
                raise AssertionError(
                    f"{tier.name}: {tier.used_bytes:.0f} B > capacity {tier.capacity_bytes:.0f} B"
                )
