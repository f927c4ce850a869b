"""The loader contract's settings, validated once, shared by every backend."""

from __future__ import annotations

import math
import numbers
import os
from dataclasses import dataclass

import numpy as np
import torch

from gpufeed.arguments import MAX_WORKERS
from gpufeed.machine import default_workers
from gpufeed.policies import OnError, StrOption

#: ImageNet statistics in [0, 1] units, the default normalisation.
IMAGENET_MEAN = (0.485, 0.456, 0.406)
IMAGENET_STD = (0.229, 0.224, 0.225)


#: The share of the resized image a validation centre crop keeps by default (timm's
#: ``crop_pct``): 224 of 256, the ImageNet convention torchvision's reference scripts follow.
VAL_CROP_FRACTION = 0.875


def default_val_resize(size: int) -> int:
    """The shorter side before a validation centre crop to ``size``: ``size / 0.875``
    rounded down, as timm's eval transform takes it (``math.floor(size / crop_pct)``):
    256 for 224, 182 for 160, 438 for 384. One place for every backend."""
    return math.floor(size / VAL_CROP_FRACTION)


_DTYPES = (torch.float32, torch.float16, torch.uint8)

#: Samples mixed together when shuffling a sharded source (WebDataset's usual buffer).
DEFAULT_SHUFFLE_BUFFER = 1024


class LastBatch(StrOption):
    """What happens to a shard's last, incomplete batch (DALI's ``LastBatchPolicy``).

    For a shard of 10 samples ``s0..s9`` and ``batch_size=4``:

    ========  ===========================================  =========  ================
    policy    batches                                      len()      samples yielded
    ========  ===========================================  =========  ================
    partial   [s0-s3] [s4-s7] [s8 s9]                      3          10 (each once)
    drop      [s0-s3] [s4-s7]                              2          8
    fill      [s0-s3] [s4-s7] [s8 s9 s0 s1]                3          12 (s0, s1 twice)
    ========  ===========================================  =========  ================

    ``fill`` pads with the first samples of the shard's own epoch order, so every batch
    has ``batch_size`` samples (what DALI's FILL does when the reader wraps around).

    With several shards (ranks), whose sizes differ by at most one sample, ``drop`` and
    ``fill`` give every shard the same number of batches, so the ranks of a distributed
    job step together: ``drop`` keeps the smallest shard's full batches on every shard,
    ``fill`` pads every shard to the largest shard's batch count. ``partial`` yields each
    sample once, and shards may then differ by one batch.
    """

    PARTIAL = "partial"
    DROP = "drop"
    FILL = "fill"

    @classmethod
    def _missing_(cls, value: object) -> LastBatch | None:
        # DALI's own LastBatchPolicy.DROP (an enum whose name is one of ours), so a script
        # written for DALI can pass what it has.
        name = getattr(value, "name", None)
        member = cls.__members__.get(name) if isinstance(name, str) else None
        return member if member is not None else super()._missing_(value)  # its error lists ours


class Cache(StrOption):
    """Where a loader keeps the dataset between epochs (``cache=``)."""

    NONE = "none"  # read from storage every epoch (the OS page cache permitting)
    RAM = "ram"  # read once into shared memory, used by every worker and thread


def default_shard() -> tuple[int, int]:
    """``(shard_id, num_shards)`` from torch.distributed, else from torchrun's env, else (0, 1)."""
    if torch.distributed.is_available() and torch.distributed.is_initialized():
        return torch.distributed.get_rank(), torch.distributed.get_world_size()
    rank, world = os.environ.get("RANK"), os.environ.get("WORLD_SIZE")
    if rank is not None and world is not None:
        try:
            return int(rank), int(world)
        except ValueError:
            raise ValueError(f"RANK={rank!r} and WORLD_SIZE={world!r} from the environment must be whole "
                             "numbers (torchrun sets both)") from None
    return 0, 1


def resolve_shard(shard_id: int | None, num_shards: int | None) -> tuple[int, int]:
    """``(shard_id, num_shards)``: as given, with what is not given from the launcher
    (:func:`default_shard`).

    Raises:
        ValueError: one of the two was given and a launcher sets the other: RANK=1 with
            ``num_shards=4`` would silently read shard 1 of 4 of a split the other ranks
            do not share. Or, with no launcher, a ``shard_id`` above 0 without
            ``num_shards`` (which is then 1): the error says to pass ``num_shards`` too.
            Or, with no launcher, a ``num_shards`` other than 1 without ``shard_id``
            (which would be 0 in every process, so each would read slice 0 only).
    """
    default_id, default_count = default_shard()
    if (shard_id is None) != (num_shards is None) and default_count > 1:
        given = f"shard_id={shard_id}" if shard_id is not None else f"num_shards={num_shards}"
        raise ValueError(f"{given} was given but not its partner, which would come from the launcher "
                         f"(rank {default_id} of {default_count}); pass both shard_id and num_shards, or neither")
    if (num_shards is None and isinstance(shard_id, numbers.Integral) and not isinstance(shard_id, bool)
            and shard_id >= default_count):
        # Without this, LoaderOptions' range check would report "num_shards=1", a value
        # the user never gave.
        raise ValueError(f"shard_id={shard_id} was given without num_shards, which is then {default_count} "
                         "(no launcher sets WORLD_SIZE): pass num_shards too, e.g. "
                         f"shard_id={shard_id}, num_shards={shard_id + 1} or more")
    if shard_id is None and num_shards is not None and num_shards != default_count:
        # Without this, every process would read slice 0 of num_shards: a run over
        # 1/num_shards of the data, repeated num_shards times.
        raise ValueError(f"num_shards={num_shards} was given without shard_id, which is then {default_id} "
                         "(no launcher sets RANK), so every process would read slice 0 only: pass both "
                         f"shard_id and num_shards (shard_id=rank, num_shards={num_shards}), or neither")
    return (default_id if shard_id is None else shard_id), (default_count if num_shards is None else num_shards)


@dataclass(frozen=True)
class LoaderOptions:
    """Validated loader settings, one field per setting of
    :func:`gpufeed.pipelines.classification_loader` (which holds the defaults and the
    meaning of each): string options are parsed and sequences made tuples here."""

    train: bool
    batch_size: int
    size: int
    dtype: torch.dtype
    layout: str
    shuffle: bool | None
    seed: int
    shard_id: int
    num_shards: int
    last_batch: LastBatch
    num_workers: int | None
    on_error: OnError
    mean: tuple[float, float, float]
    std: tuple[float, float, float]
    val_resize: int | None
    scale: tuple[float, float]
    ratio: tuple[float, float]
    shuffle_buffer: int = DEFAULT_SHUFFLE_BUFFER

    def __post_init__(self) -> None:
        def bad(name: str, value: object, want: str) -> ValueError:
            return ValueError(f"{name} must be {want}, got {value!r}")

        def integer(value: object) -> bool:  # numpy integers too, but not bools
            return isinstance(value, numbers.Integral) and not isinstance(value, (bool, np.bool_))

        def number(value: object) -> bool:  # a real number, not a bool (nor text)
            return isinstance(value, numbers.Real) and not isinstance(value, (bool, np.bool_))

        def setting(name: str, value: object) -> None:  # the dataclass is frozen
            object.__setattr__(self, name, value)

        setting("last_batch", LastBatch.parse(self.last_batch, "last_batch"))
        setting("on_error", OnError.parse(self.on_error, "on_error"))
        for name in ("mean", "std"):
            setting(name, tuple(getattr(self, name)))
        for name, want in (("scale", "(lo, hi) with 0 < lo <= hi <= 1"), ("ratio", "(lo, hi) with 0 < lo <= hi")):
            given = getattr(self, name)
            try:
                value = tuple(given)
            except TypeError:
                value = ()
            # One number, a 1-tuple or text had failed with an IndexError or a
            # comparison's TypeError that named nothing.
            if len(value) != 2 or not all(number(v) for v in value):
                raise bad(name, given, want)
            setting(name, value)

        if not isinstance(self.train, bool):
            raise bad("train", self.train, "True or False")
        if not integer(self.batch_size) or self.batch_size < 1:
            raise bad("batch_size", self.batch_size, "a positive int")
        if not integer(self.size) or self.size < 1:
            raise bad("size", self.size, "a positive int")
        if self.shuffle is not None and not isinstance(self.shuffle, bool):
            # a string such as "no" would be truthy and shuffle
            raise bad("shuffle", self.shuffle, "True, False or None (the default for train)")
        if not integer(self.seed) or self.seed < 0:
            raise bad("seed", self.seed, "a non-negative int (the same on every shard)")
        if self.num_workers is not None and (not integer(self.num_workers)
                                             or not 0 <= self.num_workers <= MAX_WORKERS):
            # 1.5 had failed at the first batch, "2" with a bare comparison error, and True
            # passed as 1 worker.
            raise bad("num_workers", self.num_workers, f"None or an int from 0 to {MAX_WORKERS}")
        if self.val_resize is not None and (not integer(self.val_resize) or self.val_resize < self.size):
            # 256.5 had failed inside a DataLoader worker, at the first batch.
            raise bad("val_resize", self.val_resize, f"None or an int >= size ({self.size})")
        # Plain ints from here on (numpy integers overflow in the seed arithmetic).
        for name in ("batch_size", "size", "seed", "num_workers", "val_resize"):
            value = getattr(self, name)
            setting(name, None if value is None else int(value))
        if self.dtype not in _DTYPES:
            raise bad("dtype", self.dtype, "torch.float32, torch.float16 or torch.uint8")
        if self.layout not in ("NCHW", "NHWC"):
            raise bad("layout", self.layout, "'NCHW' or 'NHWC'")
        if self.num_shards < 1 or not 0 <= self.shard_id < self.num_shards:
            raise ValueError(
                f"shard_id must be in [0, num_shards), got shard_id={self.shard_id}, num_shards={self.num_shards}"
            )
        if len(self.mean) != 3 or len(self.std) != 3 or any(s <= 0 for s in self.std):
            raise ValueError(f"mean and std need 3 values each, std > 0; got mean={self.mean}, std={self.std}")
        if any(m > 1 for m in self.mean) or any(s > 1 for s in self.std):
            # DALI's own normalisation takes 0..255 units: a DALI user's [123.7, 116.3, 103.5]
            # here would give batches of about -500 instead of roughly -2..2.6.
            raise ValueError(f"mean and std are in 0..1 units, as in torchvision (got mean={self.mean}, "
                             f"std={self.std}); divide DALI-style 0..255 values by 255")
        if not 0 < self.scale[0] <= self.scale[1] <= 1:
            raise bad("scale", self.scale, "(lo, hi) with 0 < lo <= hi <= 1")
        if not 0 < self.ratio[0] <= self.ratio[1]:
            raise bad("ratio", self.ratio, "(lo, hi) with 0 < lo <= hi")
        if not integer(self.shuffle_buffer) or self.shuffle_buffer < 1:
            raise bad("shuffle_buffer", self.shuffle_buffer, "a positive int")

    @property
    def shuffles(self) -> bool:
        """Shuffle by default when training, never by default for validation."""
        return self.train if self.shuffle is None else self.shuffle

    @property
    def resize_shorter(self) -> int:
        """Validation: the shorter side before the centre crop (256 for 224, as in ImageNet)."""
        return self.val_resize or default_val_resize(self.size)

    @property
    def workers(self) -> int:
        """``num_workers`` resolved: DataLoader worker processes (torch) or DALI threads;
        unless told, the usable cores, shared among the ranks on this machine
        (:func:`gpufeed.machine.default_workers`)."""
        return default_workers() if self.num_workers is None else self.num_workers

    @property
    def normalizes(self) -> bool:
        """uint8 output is the raw 0..255 pixels; float outputs are normalised."""
        return self.dtype != torch.uint8
