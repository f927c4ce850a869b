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


@pytest.mark.parametrize(("n", "batch", "shards"), [(23, 4, 2), (23, 4, 3), (9, 2, 2), (11, 3, 2), (64, 8, 3)])
def test_drop_and_fill_give_every_shard_the_same_number_of_full_batches(n, batch, shards):
    """Shard sizes differ by one; a rank with one batch more would leave the others
    waiting in a collective at the end of the epoch (DDP hangs)."""
    for policy in ("drop", "fill"):
        group = plans(n, batch, shards, policy)
        counts = {len(p.batches(0)) for p in group} | {len(p) for p in group}
        assert len(counts) == 1, (policy, counts)
        for p in group:
            got = p.batches(0)
            assert all(len(b) == batch for b in got)
            if policy == "drop":  # the smallest shard's full batches
                assert len(got) == (n // shards) // batch
                assert set(np.concatenate(got)) <= set(p.shard_indices(0))
            else:  # every sample of the shard, padded from its own order
                assert set(np.concatenate(got)) == set(p.shard_indices(0))


@pytest.mark.parametrize("shards", [1, 2, 5])
def test_grouped_order_reads_units_whole_and_covers_every_sample(shards):
    """Shards of a sharded source: each unit's samples stay within a window of the
    buffer, units come in a new order each epoch, and every sample appears once."""
    groups = np.array([7, 10, 10, 3, 10, 10])
    make = [EpochPlan(50, 4, shuffle=True, seed=3, shard_id=i, num_shards=shards, last_batch=LastBatch.PARTIAL,
                      groups=groups, shuffle_buffer=4) for i in range(shards)]
    unit_of = np.repeat(np.arange(len(groups)), groups)
    for epoch in range(2):
        order = make[0].order(epoch)
        assert sorted(order.tolist()) == list(range(50))
        # a sample moves at most `buffer` places from where its unit's run puts it: the
        # units are read one after the other, not interleaved
        runs = np.flatnonzero(np.diff(unit_of[order]) != 0)
        assert len(runs) < 3 * len(groups)
        seen = np.concatenate([np.concatenate(p.batches(epoch)) for p in make])
        assert sorted(seen.tolist()) == list(range(50))
    assert not np.array_equal(make[0].order(0), make[0].order(1))


def test_more_ranks_than_samples_leaves_ranks_empty_and_fill_is_refused():
    # a small validation set under DDP: every sample once, the ranks beyond them get none
    made = plans(3, 2, 5, "partial")
    assert [len(p) for p in made] == [0, 1, 0, 1, 1]
    assert sorted(np.concatenate([np.concatenate(p.batches(0) or [np.array([], int)]) for p in made])) == [0, 1, 2]
    assert [len(p) for p in plans(3, 2, 5, "drop")] == [0] * 5
    with pytest.raises(ValueError, match="3 samples cannot fill 5 rank slices with last_batch='fill'.*'partial'"):
        plans(3, 1, 5, "fill")


def test_seed_streams_of_different_purposes_never_coincide():
    from gpufeed.pipelines.seeds import Stream, mix_seed

    assert len({mix_seed(purpose, 0, 0, 0, bits=64) for purpose in Stream}) == len(Stream)
    assert mix_seed(Stream.SAMPLE, 1, 2, 3, bits=64) == mix_seed(Stream.SAMPLE, 1, 2, 3, bits=64)
    assert mix_seed(Stream.SAMPLE, 1, 2, 3, bits=31) < 2**31
    # The same seeds on NumPy 1.x and 2.x (NumPy 1.x refused the uint64 >> int shift).
    assert mix_seed(Stream.SAMPLE, 1, 2, 3, bits=31) == 96705939
    assert mix_seed(Stream.SAMPLE, 1, 2, 3, bits=64) == 830697695207725437
