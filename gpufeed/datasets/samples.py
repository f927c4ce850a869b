"""The interface every image-dataset storage format implements for the loaders."""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Sequence
from typing import ClassVar

import numpy as np

from gpufeed.datasets.storage import Storage

#: The extensions torchvision's ``ImageFolder`` loads (compared lower-case), so a folder
#: source counts the samples it would; WebDataset shards name image members by the same.
IMAGE_EXTENSIONS = (".jpg", ".jpeg", ".png", ".ppm", ".bmp", ".pgm", ".tif", ".tiff", ".webp")

#: The largest label numbered classes (a file list's, shards') may have: 2**24 - 1, some
#: 16.7 million classes, hundreds of times the widest classification heads trained (4
#: million face identities). A label is a class index, 0..N-1, and N is the output layer's
#: width: an ID used as a label (a WordNet offset, a database key) made millions to
#: billions of class names here (a label of 10**9 ran out of memory), and past 2**31 - 1
#: it does not fit DALI's int32 labels.
MAX_LABEL = 2**24 - 1


def numbered_classes(max_label: int, where: str) -> tuple[str, ...]:
    """Class names ``"0" .. str(max_label)`` for labels without names.

    Raises:
        ValueError: ``max_label`` is over :data:`MAX_LABEL`; ``where`` names the sample.
    """
    if max_label > MAX_LABEL:
        raise ValueError(f"{where}: label {max_label} would make {max_label + 1:,} classes; labels are class "
                         f"indices 0..N-1 (N, the model's output width, at most {MAX_LABEL + 1:,} here): "
                         "renumber them, e.g. index = sorted(set(labels)).index(label)")
    return tuple(str(i) for i in range(max_label + 1))


class SampleSource(ABC):
    """The samples of a classification dataset, readable by index from any process.

    One interface for every kind of storage: an image folder or file list
    (:class:`SampleList`), WebDataset or TFRecord shards, a pre-decoded raw cache, a RAM
    cache. The loaders plan epochs over indices ``0..len-1`` and call :meth:`read` in
    whichever process decodes; a source is pickled into DataLoader workers, so it holds
    no open file (its :class:`~gpufeed.datasets.storage.Storage` reopens per process).

    Attributes:
        kind: ``"encoded"`` (:meth:`read` gives image file bytes) or ``"pixels"``
            (``(H, W, 3)`` uint8 pixels, decoded ahead of time).
        labels: one integer label per sample.
        classes: class names, index = label.
        storage: how bytes are read (local files unless told).
    """

    kind: ClassVar[str] = "encoded"
    labels: Sequence[int]
    classes: tuple[str, ...]
    storage: Storage

    def __len__(self) -> int:
        return len(self.labels)

    @abstractmethod
    def read(self, index: int) -> np.ndarray:
        """Sample ``index``'s encoded bytes (1-D uint8) or pixels (``(H, W, 3)`` uint8)."""

    def read_or_reason(self, index: int) -> np.ndarray | str:
        """Sample ``index`` as :meth:`read` gives it, or why it cannot be read, which the
        loaders report and skip like a file that does not decode. Here every read error
        raises; a source of one file per sample says why instead (see :class:`SampleList
        <gpufeed.pipelines.sources.SampleList>`)."""
        return self.read(index)

    @abstractmethod
    def name(self, index: int) -> str:
        """How reports name sample ``index`` (a path, or ``shard.tar:key``)."""

    @property
    def groups(self) -> np.ndarray | None:
        """Samples per storage unit (shard), in index order, when reading in order pays
        (shuffling then permutes shards and mixes within a buffer); None when any sample
        is as cheap to read as any other."""
        return None

    @abstractmethod
    def fingerprint(self) -> dict:
        """What identifies this dataset (kind, sample count, files): a loader state saved
        on one dataset is refused on another."""

    @abstractmethod
    def nbytes(self) -> int:
        """Bytes a RAM cache of this dataset would hold."""

    @property
    def files(self) -> list[str]:
        """The files the dataset is stored in (for page-cache control)."""
        return []
