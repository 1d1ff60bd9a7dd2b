import numpy as np

from kernels_bench.serve.blocks import BlockPool, block_hashes


def test_allocate_free_evict_in_order() -> None:
    pool = BlockPool(num_blocks=6, block_tokens=256)
    a = pool.allocate(3)
    assert a == [0, 1, 2] and pool.free_blocks == 3
    for k, b in enumerate(a):
        pool.commit(b, 100 + k, session=1)
    pool.free(a)  # tail first: 2, 1, 0 join the queue behind 3, 4, 5
    assert list(pool._free) == [3, 4, 5, 2, 1, 0]
    assert pool.match([100, 101, 102, 999]) == [0, 1, 2]
    b = pool.allocate(4)  # takes 3, 4, 5, then evicts 2 (the prefix's tail)
    assert b == [3, 4, 5, 2] and pool.stats.evicted_blocks == 1
    assert pool.match([100, 101, 102]) == [0, 1]
    assert pool.allocate(3) is None and pool.free_blocks == 2  # refused, nothing changed
    assert pool.can_allocate(1, hit=[0]) and not pool.can_allocate(2, hit=[0])
    pool.take([0])
    assert pool.ref[0] == 1 and pool.free_blocks == 1


def test_duplicate_commit_keeps_first() -> None:
    pool = BlockPool(4, 256)
    x, y = pool.allocate(1)[0], pool.allocate(1)[0]
    pool.commit(x, 5, session=0)
    pool.commit(y, 5, session=1)
    assert pool.cached[5] == x and pool.origin[x] == 0
    pool.free([y])
    assert pool.hash[y] is None  # plain free space, not a second copy of the prefix


def test_chain_hash_names_the_whole_prefix() -> None:
    a = np.arange(1024)
    b = a.copy()
    b[10] = -1
    ha, hb = block_hashes(a, 256), block_hashes(b, 256)
    assert len(ha) == 4 and all(x != y for x, y in zip(ha, hb, strict=True))  # block 0 differs: all differ
    assert block_hashes(a[:600], 256) == ha[:2]


def test_cached_free_count_follows_the_queue() -> None:
    pool = BlockPool(5, 256)
    a = pool.allocate(3)
    pool.commit(a[0], 1, 0)
    pool.commit(a[1], 2, 0)
    pool.free(a)
    assert pool.cached_free_blocks == 2
    pool.take([a[0]])
    assert pool.cached_free_blocks == 1
    pool.allocate(4)  # 3, 4, then a[2] (no hash), a[1] (evicted)
    assert pool.cached_free_blocks == 0 == sum(1 for b in pool._free if pool.hash[b] is not None)
