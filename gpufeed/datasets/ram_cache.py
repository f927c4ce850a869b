"""The RAM cache (``classification_loader(..., cache="ram")``): a dataset read once into
shared memory, which every DataLoader worker and DALI thread then reads.

One buffer holds every sample back to back (encoded file bytes, or a raw cache's
pixels). It is shared memory (``torch.UntypedStorage._new_shared``), so a worker forked
from the loader's process maps the same pages, and one started with forkserver or spawn
receives a handle to them when the cache is pickled by multiprocessing: the dataset is
in memory once, whatever the number of workers.
"""

from __future__ import annotations

import os

import numpy as np
import torch

from gpufeed.datasets.samples import SampleSource
from gpufeed.machine import available_memory, ranks_on_this_machine

#: The share of the available memory a cache may take: the rest is left to the
#: training process, its workers' batches and the page cache.
HEADROOM = 0.8

#: Datasets of at least this many samples show progress while they are read.
PROGRESS_FROM = 2000

_GB = 1e9


def shared_memory_free(path: str = "/dev/shm") -> int | None:
    """Free bytes of the shared-memory filesystem the cache is allocated in, or None where
    there is none (not Linux).

    Containers often mount a small one (Docker's default is 64 MB); touching shared
    memory beyond it kills the process with SIGBUS, so the cache checks it first.
    """
    try:
        stat = os.statvfs(path)
    except OSError:
        return None
    return stat.f_bavail * stat.f_frsize


class RamCache(SampleSource):
    """Any :class:`~gpufeed.datasets.samples.SampleSource`, read once into shared memory.

    Everything but where the bytes come from is the wrapped source's: ``kind``,
    ``labels``, ``classes``, ``name()``, ``groups`` (so the epoch order is the same) and
    ``fingerprint()`` (so a loader state saved without the cache resumes with it).

    Files that are not images are cached as they are: the loaders judge the bytes at
    read time, and report the skipped files per epoch as they do without a cache.

    Under torchrun every rank holds a whole copy (each rank's slice changes every epoch,
    so each needs every sample): the size check counts the copies of all the ranks on
    this machine (``LOCAL_WORLD_SIZE``), since each rank alone would pass it.

    Args:
        source: the dataset to cache.
        headroom: the share of the available memory (:func:`gpufeed.machine.available_memory`) the cache
            may take.

    Raises:
        ValueError: ``source.nbytes()`` does not fit in ``headroom`` of the available
            memory (:func:`gpufeed.machine.available_memory`) or of the free shared memory
            (:func:`shared_memory_free`); both sizes are given in GB, and nothing is read.
        OSError: a sample could not be read (it is named), other than a file of its own
            that the source says cannot be read (a dangling link): that one is cached as
            such, and the loaders skip and report it as without the cache.

    Example:
        >>> cached = RamCache(open_source("data/train"))   # doctest: +SKIP
        >>> loader = classification_loader(cached, train=True, batch_size=256)
    """

    def __init__(self, source: SampleSource, headroom: float = HEADROOM) -> None:
        if isinstance(source, RamCache):
            source = source.source  # caching a cache would hold the data twice
        self.source = source
        self.kind = source.kind  # type: ignore[misc]  # the wrapped source's, per instance
        self.labels, self.classes, self.storage = source.labels, source.classes, source.storage
        need = int(source.nbytes())
        copies = ranks_on_this_machine()
        # Each rank checks before any of them has filled its copy: all the copies must fit.
        total = need * copies
        of = f" ({copies} ranks on this machine, a copy each)" if copies > 1 else ""
        have = available_memory()
        if total > headroom * have:
            raise ValueError(
                f"cache='ram': the dataset needs {total / _GB:.2f} GB{of}, but only {have / _GB:.2f} GB of "
                f"memory are available ({headroom:.0%} of it may be used: {headroom * have / _GB:.2f} GB); "
                "use cache='none' (the page cache still helps), a raw cache on a fast disk, or fewer samples"
            )
        shm = shared_memory_free()
        if shm is not None and total > headroom * shm:
            raise ValueError(
                f"cache='ram': the dataset needs {total / _GB:.2f} GB of shared memory{of}, but /dev/shm has "
                f"only {shm / _GB:.2f} GB free ({headroom:.0%} of it may be used); give the container more "
                "(docker run --shm-size=...) or use cache='none'"
            )
        n = len(source)
        self._offsets = np.zeros(n + 1, dtype=np.int64)
        self._shapes = np.zeros((n, 2), dtype=np.int64) if self.kind == "pixels" else None
        # One shared-memory block: workers map it, none copies it (see the module's doc).
        self._buffer = torch.empty(0, dtype=torch.uint8).set_(torch.UntypedStorage._new_shared(max(1, need)))
        self._array: np.ndarray | None = self._buffer.numpy()
        #: Why samples could not be read when the cache was filled (a source of one file per
        #: sample says so, where a shard's read error raises).
        self._reasons: dict[int, str] = {}
        self._fill(need)

    def _fill(self, capacity: int) -> None:
        source, array, end = self.source, self._array, 0
        indices = range(len(source))
        if len(source) >= PROGRESS_FROM:
            from gpufeed.progress import progress

            indices = progress(indices, desc=f"caching {len(source)} samples in RAM "
                               f"({capacity / _GB:.2f} GB)", unit="sample")
        for i in indices:
            try:
                data = source.read_or_reason(i)
            except OSError as exc:
                raise OSError(f"{source.name(i)}: could not read it into the RAM cache: {exc}") from exc
            if isinstance(data, str):
                # A file's own fault (a dangling link, gone since the scan): no bytes cached,
                # and the loaders skip and report it each epoch, as without the cache.
                self._reasons[i] = data
                self._offsets[i + 1] = end
                continue
            if self._shapes is not None:
                self._shapes[i] = data.shape[:2]
            nbytes = data.nbytes
            if end + nbytes > capacity:
                raise ValueError(f"{source.name(i)}: the dataset holds more than the {capacity} bytes its "
                                 "nbytes() announced (did files change while caching?)")
            array[end: end + nbytes] = np.ascontiguousarray(data).reshape(-1)
            end += nbytes
            self._offsets[i + 1] = end

    def read(self, index: int) -> np.ndarray:
        """Sample ``index`` as the wrapped source gives it: a view of the shared buffer
        (writable, so torch takes it without a copy or a warning: readers must not write)."""
        if self._array is None:  # unpickled in a worker: view the shared block it received
            self._array = self._buffer.numpy()
        data = self._array[self._offsets[index]: self._offsets[index + 1]]
        if self._shapes is not None:
            h, w = self._shapes[index]
            data = data.reshape(int(h), int(w), 3)
        return data

    def read_or_reason(self, index: int) -> np.ndarray | str:
        """Sample ``index``, or why it could not be read into the cache."""
        return self._reasons.get(index) or self.read(index)

    def name(self, index: int) -> str:
        return self.source.name(index)

    @property
    def groups(self) -> np.ndarray | None:
        return self.source.groups

    def fingerprint(self) -> dict:
        return self.source.fingerprint()

    def nbytes(self) -> int:
        return int(self._offsets[-1])

    @property
    def files(self) -> list[str]:
        return self.source.files

    def __getstate__(self) -> dict:
        # The buffer travels as a tensor: multiprocessing's pickler (DataLoader workers)
        # sends a handle to the shared block, not its bytes. The numpy view is remade.
        state = dict(self.__dict__)
        state["_array"] = None
        return state

    def __repr__(self) -> str:
        return f"RamCache({self.source!r}, {self.nbytes() / _GB:.3f} GB)"

