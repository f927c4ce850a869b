"""The epoch plan: sharding and last-batch policies, exactly as documented."""

import numpy as np
import pytest

from gpufeed.pipelines.options import LastBatch
from gpufeed.pipelines.plan import EpochPlan


def plans(n, batch, shards, policy, shuffle=True, seed=0):
    return [EpochPlan(n, batch, shuffle=shuffle, seed=seed, shard_id=i, num_shards=shards,
                      last_batch=LastBatch(policy)) for i in range(shards)]


@pytest.mark.parametrize("shards", [1, 2, 3])
@pytest.mark.parametrize("n", [10, 23, 64])
def test_partial_covers_every_sample_exactly_once_across_shards(n, shards):
    for epoch in range(3):
        seen = np.concatenate([np.concatenate(p.batches(epoch)) for p in plans(n, 4, shards, "partial")])
        assert sorted(seen.tolist()) == list(range(n))


def test_shuffle_changes_order_per_epoch_and_repeats_with_the_seed():
    a, b = plans(50, 8, 1, "partial")[0], plans(50, 8, 1, "partial")[0]
    assert all(np.array_equal(x, y) for x, y in zip(a.batches(0), b.batches(0), strict=True))
    assert not np.array_equal(np.concatenate(a.batches(0)), np.concatenate(a.batches(1)))
    other = plans(50, 8, 1, "partial", seed=1)[0]
    assert not np.array_equal(np.concatenate(a.batches(0)), np.concatenate(other.batches(0)))


def test_documented_table_for_ten_samples_batch_four():
    def batches(policy):
        p = EpochPlan(10, 4, shuffle=False, seed=0, shard_id=0, num_shards=1, last_batch=LastBatch(policy))
        return [b.tolist() for b in p.batches(0)], len(p)

    assert batches("partial") == ([[0, 1, 2, 3], [4, 5, 6, 7], [8, 9]], 3)
    assert batches("drop") == ([[0, 1, 2, 3], [4, 5, 6, 7]], 2)
    assert batches("fill") == ([[0, 1, 2, 3], [4, 5, 6, 7], [8, 9, 0, 1]], 3)


@pytest.mark.parametrize("shards", [2, 3])
def test_drop_and_fill_counts_per_shard(shards):
    for p in plans(23, 4, shards, "drop"):
        assert sum(len(b) for b in p.batches(0)) == (p.shard_size // 4) * 4
        assert len(p.batches(0)) == len(p)
    for p in plans(23, 4, shards, "fill"):
        got = np.concatenate(p.batches(0))
        assert len(got) == len(p) * 4 and set(got) == set(p.shard_indices(0))


def test_more_shards_than_samples_is_refused():
    with pytest.raises(ValueError, match="cannot fill 5 shards"):
        plans(3, 1, 5, "partial")


def test_seed_streams_of_different_purposes_never_coincide():
    from gpufeed.pipelines.seeds import Stream, mix_seed

    assert len({mix_seed(purpose, 0, 0, 0, bits=64) for purpose in Stream}) == len(Stream)
    assert mix_seed(Stream.SAMPLE, 1, 2, 3, bits=64) == mix_seed(Stream.SAMPLE, 1, 2, 3, bits=64)
    assert mix_seed(Stream.SAMPLE, 1, 2, 3, bits=31) < 2**31
