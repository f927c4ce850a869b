"""The epoch plan: which sample indices each shard gets, in which batches.

One plan drives every backend, so shuffling, sharding and the last-batch policy are the
same whichever decodes: within an epoch with ``partial`` every sample appears exactly
once across all shards.
"""

from __future__ import annotations

import numpy as np

from gpufeed.pipelines.options import LastBatch
from gpufeed.pipelines.seeds import shuffle_rng


class EpochPlan:
    """Shuffle, shard and batch ``num_samples`` indices for one shard.

    Every shard computes the same global order (seeded by ``seed`` and the epoch), then
    takes its contiguous slice ``[n*i//S, n*(i+1)//S)``: slices differ by at most one
    sample, and they partition the epoch.

    Args:
        num_samples: dataset size.
        batch_size: samples per batch.
        shuffle: permute the order every epoch.
        seed: the same on every shard (otherwise shards overlap).
        shard_id, num_shards: this shard and the shard count.
        last_batch: the :class:`LastBatch` policy.
    """

    def __init__(self, num_samples: int, batch_size: int, *, shuffle: bool, seed: int,
                 shard_id: int, num_shards: int, last_batch: LastBatch) -> None:
        if num_samples < num_shards:
            raise ValueError(f"{num_samples} samples cannot fill {num_shards} shards")
        self.num_samples, self.batch_size = num_samples, batch_size
        self.shuffle, self.seed = shuffle, seed
        self.shard_id, self.num_shards = shard_id, num_shards
        self.last_batch = LastBatch(last_batch)

    @property
    def shard_size(self) -> int:
        n, s, i = self.num_samples, self.num_shards, self.shard_id
        return n * (i + 1) // s - n * i // s

    def __len__(self) -> int:
        """Batches per epoch for this shard."""
        full, rest = divmod(self.shard_size, self.batch_size)
        return full + (rest > 0 and self.last_batch != LastBatch.DROP)

    def shard_indices(self, epoch: int) -> np.ndarray:
        """This shard's sample indices for ``epoch``, in order."""
        n = self.num_samples
        order = shuffle_rng(self.seed, epoch).permutation(n) if self.shuffle else np.arange(n)
        return order[n * self.shard_id // self.num_shards: n * (self.shard_id + 1) // self.num_shards]

    def batches(self, epoch: int) -> list[np.ndarray]:
        """This shard's batches of sample indices for ``epoch``, after the last-batch policy."""
        idx = self.shard_indices(epoch)
        out = [idx[i: i + self.batch_size] for i in range(0, len(idx), self.batch_size)]
        if out and len(out[-1]) < self.batch_size:
            if self.last_batch == LastBatch.DROP:
                out.pop()
            elif self.last_batch == LastBatch.FILL:
                pad = np.resize(idx, self.batch_size - len(out[-1]))  # wraps round the shard
                out[-1] = np.concatenate([out[-1], pad])
        return out
