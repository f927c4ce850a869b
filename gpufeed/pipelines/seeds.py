"""Every random stream of the image loaders, seeded through one mixer.

A stream is named by what it is for (:class:`Stream`) and the numbers that pick it out
(the run's ``seed``, the shard, the epoch, a sample or a batch). The same numbers always
give the same stream, whatever process or worker asks, so a run resumed at epoch ``k``
(or, later, mid-epoch) draws what an uninterrupted run drew; different numbers give
unrelated streams.
"""

from __future__ import annotations

import random
from enum import IntEnum

import numpy as np


class Stream(IntEnum):
    """What a seed is for. Mixed in first, so two purposes never share a stream."""

    SHUFFLE = 1  # an epoch's global sample order: (seed, epoch), the same on every shard
    SAMPLE = 2  # one sample's random crop and flip in the torch backend: (seed, epoch, index)
    DALI = 3  # a DALI pipeline's random ops: (seed, shard, epoch[, batch it restarts at])
    AUGMENT = 4  # a gpu_augment stage without a seed of its own: (seed, shard, epoch, batch)


def mix_seed(stream: Stream, *entropy: int, bits: int) -> int:
    """A ``bits``-bit seed for ``stream`` mixed from ``entropy`` by numpy's SeedSequence:
    distinct tuples give unrelated seeds (a sum such as ``seed + 7919 * shard + epoch``
    makes neighbouring runs collide).

    The tuple's length is mixed in too: SeedSequence pads with zeros, so ``(s, e)`` and
    ``(s, e, 0)`` would otherwise give the same seed.
    """
    words = [int(stream), *entropy]
    # A Python int before the shift: NumPy 1.x promotes a uint64 scalar with a Python int
    # to float64, which ``>>`` refuses (every DALI pipeline failed to build there).
    return int(np.random.SeedSequence([*words, len(words)]).generate_state(1, np.uint64)[0]) >> (64 - bits)


def shuffle_rng(seed: int, epoch: int) -> np.random.Generator:
    """The generator of epoch ``epoch``'s global order (every shard draws the same)."""
    return np.random.default_rng(mix_seed(Stream.SHUFFLE, seed, epoch, bits=64))


def sample_rng(seed: int, epoch: int, index: int) -> random.Random:
    """A generator for one sample of one epoch: the same draws whatever process or worker
    handles it (Python's generator: a torch generator costs far more to seed)."""
    return random.Random(mix_seed(Stream.SAMPLE, seed, epoch, index, bits=64))


def dali_seed(seed: int, shard_id: int, *stream: int) -> int:
    """A DALI pipeline's seed (DALI takes 31 bits) for ``stream``, e.g. ``(epoch,)``."""
    return mix_seed(Stream.DALI, seed, shard_id, *stream, bits=31)


def augment_seed(seed: int, shard_id: int, epoch: int, batch: int) -> int:
    """The seed a loader gives an unseeded ``gpu_augment`` stage for one batch of one
    epoch of one shard: a function of these numbers only, so a run resumed at any epoch
    or batch repeats it, and shards (which see different images) do not draw in lockstep."""
    return mix_seed(Stream.AUGMENT, seed, shard_id, epoch, batch, bits=62)
