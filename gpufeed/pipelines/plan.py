"""The epoch plan: which sample indices each shard gets, in which batches.

One plan drives every backend, so shuffling, sharding and the last-batch policy are the
same whichever decodes: within an epoch with ``partial`` every sample appears exactly
once across all shards (ranks), and with ``drop`` or ``fill`` every shard has the same
number of full batches, so no rank of a distributed job waits for another at the end of
an epoch. Bad files do not change that: under ``drop`` and ``fill`` a bad sample's place
is taken by a stand-in (:meth:`EpochPlan.stand_ins`); under ``partial`` it is left out.
"""

from __future__ import annotations

import warnings
from collections.abc import Callable, Iterator

import numpy as np

from gpufeed.pipelines.options import DEFAULT_SHUFFLE_BUFFER, LastBatch
from gpufeed.pipelines.seeds import shuffle_rng


def grouped_order(groups: np.ndarray, rng: np.random.Generator, buffer: int) -> np.ndarray:
    """A shuffled order of ``sum(groups)`` indices that reads storage units in turn.

    Units (shards of ``groups[k]`` consecutive samples) are read whole, in a random order,
    and samples are mixed within a sliding window: each position gets the key
    ``position + uniform(0, buffer)`` and the order sorts by key, so a sample moves at most
    ``buffer`` places and a reader only ever has about ``buffer`` samples of one or two
    shards in flight (WebDataset's shuffle buffer, computed ahead, so any epoch and any
    position in it can be replayed).
    """
    groups = np.asarray(groups, dtype=np.int64)
    starts = np.concatenate([[0], np.cumsum(groups)[:-1]])
    units = rng.permutation(len(groups))
    sizes = groups[units]
    # concatenated aranges of the units in their new order, without a Python loop
    offsets = np.repeat(starts[units] - np.concatenate([[0], np.cumsum(sizes)[:-1]]), sizes)
    order = np.arange(int(sizes.sum()), dtype=np.int64) + offsets
    if buffer > 1:
        keys = np.arange(len(order)) + rng.uniform(0, buffer, len(order))
        order = order[np.argsort(keys, kind="stable")]
    return order


class EpochPlan:
    """Shuffle, shard and batch ``num_samples`` indices for one shard.

    Every shard computes the same global order (seeded by ``seed`` and the epoch), then
    takes its contiguous slice ``[n*i//S, n*(i+1)//S)``: slices differ by at most one
    sample, and they partition the epoch. For a source stored in units read in order
    (``groups``: samples per shard file), the order permutes units and mixes samples
    within ``shuffle_buffer`` (:func:`grouped_order`), so each rank reads whole shard
    files, split only where there are fewer files than ranks.

    Args:
        num_samples: dataset size.
        batch_size: samples per batch.
        shuffle: permute the order every epoch.
        seed: the same on every shard (otherwise shards overlap).
        shard_id, num_shards: this shard and the shard count.
        last_batch: the :class:`LastBatch` policy.
        groups: samples per storage unit, in index order, or None (any order is cheap).
        shuffle_buffer: the window samples are mixed in when ``groups`` is given.
    """

    def __init__(self, num_samples: int, batch_size: int, *, shuffle: bool, seed: int,
                 shard_id: int, num_shards: int, last_batch: LastBatch,
                 groups: np.ndarray | None = None, shuffle_buffer: int = DEFAULT_SHUFFLE_BUFFER) -> None:
        if num_samples < num_shards and LastBatch(last_batch) == LastBatch.FILL:
            # partial and drop give such a rank no batch (a small validation set under DDP):
            # fill would have to pad a slice with no sample to repeat.
            raise ValueError(
                f"{num_samples} samples cannot fill {num_shards} rank slices with last_batch='fill': a rank "
                "would have no sample to repeat; use last_batch='partial' (a rank without samples then has "
                "no batch: wrap the loop in DDP's join()) or fewer ranks")
        if groups is not None and int(np.sum(groups)) != num_samples:
            raise ValueError(f"groups hold {int(np.sum(groups))} samples, not {num_samples}")
        self.num_samples, self.batch_size = num_samples, batch_size
        self.shuffle, self.seed = shuffle, seed
        self.shard_id, self.num_shards = shard_id, num_shards
        self.last_batch = LastBatch(last_batch)
        self.groups = None if groups is None else np.asarray(groups, dtype=np.int64)
        self.shuffle_buffer = shuffle_buffer
        self._share: tuple[int, np.ndarray] | None = None  # (epoch, its slice), for stand-ins

    @property
    def shard_start(self) -> int:
        """Where this shard's slice starts in an epoch's order."""
        return self.num_samples * self.shard_id // self.num_shards

    @property
    def shard_size(self) -> int:
        """Samples of this shard per epoch (the shards differ by at most one)."""
        n, s, i = self.num_samples, self.num_shards, self.shard_id
        return n * (i + 1) // s - self.shard_start

    @property
    def batch_counts(self) -> tuple[int, int]:
        """The fewest and the most batches an epoch that any shard takes: equal under
        ``drop`` and ``fill``; under ``partial`` a larger slice may take one more."""
        if self.last_batch != LastBatch.PARTIAL:
            return len(self), len(self)
        n, s, b = self.num_samples, self.num_shards, self.batch_size
        smallest, largest = n // s, -(-n // s)
        return -(-smallest // b), -(-largest // b)

    def warn_uneven_steps(self, setting: str, unit: str, remedy: str, stacklevel: int) -> None:
        """Warn when the shards take different numbers of batches an epoch
        (:attr:`batch_counts`). Under Lightning's DDP on CPU a rank with a step more paired
        its gradient sync with the others' next epoch, then died when they finished
        ("Connection closed by peer") while the job exited 0; under NCCL it would wait for
        ever. ``setting`` and ``unit`` name the caller's knob and samples, ``remedy`` what
        to do; ``stacklevel`` as the caller's own ``warnings.warn`` would take it."""
        fewest, most = self.batch_counts
        if fewest != most:
            warnings.warn(
                f"{setting} the {self.num_shards} rank slices of {self.num_samples} {unit} take {fewest} or "
                f"{most} batches of {self.batch_size} an epoch: under DDP a rank with a batch more waits at a "
                "gradient sync (or any per-step collective) the others never make, or pairs it with their "
                f"next epoch's. {remedy}", stacklevel=stacklevel + 1)

    def __len__(self) -> int:
        """Batches per epoch for this shard: with ``drop`` and ``fill`` the same on every
        shard (the smallest shard's full batches; the largest shard's, padded)."""
        n, s, b = self.num_samples, self.num_shards, self.batch_size
        if self.last_batch == LastBatch.DROP:
            return (n // s) // b
        if self.last_batch == LastBatch.FILL:
            largest = -(-n // s)
            return -(-largest // b)
        return -(-self.shard_size // b)

    def order(self, epoch: int) -> np.ndarray:
        """Every sample index, in ``epoch``'s global order (the same on every shard)."""
        n = self.num_samples
        if not self.shuffle:
            return np.arange(n)
        rng = shuffle_rng(self.seed, epoch)
        if self.groups is None:
            return rng.permutation(n)
        return grouped_order(self.groups, rng, self.shuffle_buffer)

    def shard_indices(self, epoch: int) -> np.ndarray:
        """This shard's sample indices for ``epoch``, in order."""
        start = self.shard_start
        return self.order(epoch)[start:start + self.shard_size]

    @property
    def replaces_bad(self) -> bool:
        """Whether a bad sample's place in its batch is taken by a stand-in: under ``drop``
        and ``fill``, whose promise is full batches and the same number of steps on every
        rank (a rank that ran a step short would leave the others waiting at their next
        collective: a hang under NCCL). ``partial`` leaves it out, every other sample
        still exactly once."""
        return self.last_batch != LastBatch.PARTIAL

    def stand_ins(self, epoch: int, number: int) -> Iterator[int]:
        """The samples that may take bad samples' places in batch ``number`` of ``epoch``, in
        the order to try them (endless: the caller stops): this shard's samples of the
        epoch after the batch, then round from the shard's start. The same on every run,
        so a resumed epoch gets the same stand-ins, and drawn from this shard only, so
        no other rank's reads change."""
        # The slice is kept per epoch: at ImageNet's size recomputing the epoch's order
        # took 16-93 ms, and a batch with a bad file needs it.
        if self._share is None or self._share[0] != epoch:
            self._share = (epoch, self.shard_indices(epoch))
        share = self._share[1]
        end = min((number + 1) * self.batch_size, len(share))
        while True:
            yield from map(int, share[end:])
            yield from map(int, share[:end])

    def fill_places(self, epoch: int, number: int, missing: int, take: Callable[[int], bool]) -> None:
        """Find stand-ins for ``missing`` bad samples of batch ``number`` of ``epoch``:
        ``take(i)`` tries sample ``i`` (:meth:`stand_ins` order) and says whether it was
        good and taken (a bad one is recorded by the caller, as any bad file).

        Raises:
            RuntimeError: a whole round of this shard's samples gave no good one.
        """
        misses = 0
        for i in self.stand_ins(epoch, number):
            if missing == 0:
                return
            if take(i):
                missing, misses = missing - 1, 0
            elif (misses := misses + 1) >= self.shard_size:
                raise RuntimeError(
                    f"rank slice {self.shard_id} of {self.num_shards}: no sample of epoch {epoch} could be read "
                    f"and decoded (each was tried in place of the bad files of batch {number})")

    def batches(self, epoch: int) -> list[np.ndarray]:
        """This shard's batches of sample indices for ``epoch``, after the last-batch policy."""
        idx = self.shard_indices(epoch)
        b, count = self.batch_size, len(self)
        if self.last_batch == LastBatch.FILL and len(idx) < count * b:
            idx = np.concatenate([idx, np.resize(idx, count * b - len(idx))])  # wraps round the shard
        return [idx[i * b: (i + 1) * b] for i in range(count)]
