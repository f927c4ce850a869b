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
