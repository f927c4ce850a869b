"""How sample bytes are read from disk: whole files, or byte ranges of a shard.

Every sample source (image folders, WebDataset and TFRecord shards, raw caches) reads
through a :class:`Storage`, so the storage benchmark can put the same simulated remote
store (a latency per file open, a bandwidth cap) in front of every format alike
(:class:`SimulatedRemote`).

A storage keeps the files it opened open, per process (DataLoader workers each get their
own handles: a pickled storage carries no open file), so a worker reading a shard opens
it once, not once per sample.
"""

from __future__ import annotations

import contextlib
import os
import time
from collections import OrderedDict

import numpy as np


class Storage:
    """Local files, read with ``pread`` through a small per-process cache of open handles.

    Args:
        max_open: handles kept open per process (least recently used closed first).
    """

    def __init__(self, max_open: int = 64) -> None:
        self.max_open = max_open
        self._handles: OrderedDict[str, int] = OrderedDict()
        self._pid = os.getpid()

    # -- what a reader calls ---------------------------------------------------------
    def read_file(self, path: str) -> np.ndarray:
        """A whole file's bytes as a writable uint8 array (one open, closed after).

        A folder's files are opened once each per epoch, so keeping them open buys nothing.
        """
        self._opened(path)
        with open(path, "rb", buffering=0) as f:
            size = os.fstat(f.fileno()).st_size
            out = np.empty(size, dtype=np.uint8)
            got = f.readinto(memoryview(out))
        self._transferred(got)
        return out if got == size else out[:got]

    def read_at(self, path: str, offset: int, size: int) -> np.ndarray:
        """``size`` bytes of ``path`` from ``offset``, as a writable uint8 array.

        Raises:
            EOFError: the file ends before ``offset + size`` (a shard cut short).
        """
        fd = self._handle(path)
        out = np.empty(size, dtype=np.uint8)
        got = os.preadv(fd, [memoryview(out)], offset)
        self._transferred(got)
        if got != size:
            raise EOFError(f"{path}: wanted {size} bytes at offset {offset}, the file ends after {got}")
        return out

    def size(self, path: str) -> int:
        """The file's size in bytes."""
        return os.path.getsize(path)

    def close(self) -> None:
        """Close every handle this process holds."""
        if self._pid == os.getpid():
            for fd in self._handles.values():
                os.close(fd)
        self._handles.clear()

    # -- what a simulated store overrides --------------------------------------------
    def _opened(self, path: str) -> None:
        """Called once per file open (a seek on a disk, a request to an object store)."""

    def _transferred(self, nbytes: int) -> None:
        """Called after ``nbytes`` were read."""

    # -- handles ---------------------------------------------------------------------
    def _handle(self, path: str) -> int:
        if self._pid != os.getpid():  # a forked worker: the parent's handles are not ours
            self._handles = OrderedDict()
            self._pid = os.getpid()
        fd = self._handles.get(path)
        if fd is not None:
            self._handles.move_to_end(path)
            return fd
        self._opened(path)
        fd = os.open(path, os.O_RDONLY)
        self._handles[path] = fd
        if len(self._handles) > self.max_open:
            os.close(self._handles.popitem(last=False)[1])
        return fd

    def __getstate__(self) -> dict:
        state = dict(self.__dict__)
        state["_handles"] = OrderedDict()  # handles belong to the process that opened them
        return state

    def __setstate__(self, state: dict) -> None:
        self.__dict__.update(state)
        self._pid = os.getpid()

    def __del__(self) -> None:
        with contextlib.suppress(Exception):  # at interpreter shutdown there is nothing to close
            self.close()

    def __repr__(self) -> str:
        return f"{type(self).__name__}()"


class SimulatedRemote(Storage):
    """Local files behind a simulated remote store: ``open_latency_ms`` of waiting per
    file open (a disk seek, an object-store GET) and at most ``bandwidth_mb_s`` MB/s per
    reading thread or process.

    The waits are sleeps, so they cost wall time but no CPU, like real I/O waits; every
    format pays them the same way, once per open and per byte.
    """

    def __init__(self, open_latency_ms: float = 0.0, bandwidth_mb_s: float | None = None,
                 max_open: int = 64) -> None:
        super().__init__(max_open)
        if open_latency_ms < 0:
            raise ValueError(f"open_latency_ms must be >= 0, got {open_latency_ms}")
        if bandwidth_mb_s is not None and bandwidth_mb_s <= 0:
            raise ValueError(f"bandwidth_mb_s must be > 0 or None, got {bandwidth_mb_s}")
        self.open_latency_ms, self.bandwidth_mb_s = float(open_latency_ms), bandwidth_mb_s
        #: Opens and bytes this process read (for the benchmark's report).
        self.opens = 0
        self.bytes = 0

    def _opened(self, path: str) -> None:
        self.opens += 1
        if self.open_latency_ms:
            time.sleep(self.open_latency_ms / 1000)

    def _transferred(self, nbytes: int) -> None:
        self.bytes += nbytes
        if self.bandwidth_mb_s:
            time.sleep(nbytes / (self.bandwidth_mb_s * 1e6))

    def __repr__(self) -> str:
        return f"SimulatedRemote(open_latency_ms={self.open_latency_ms}, bandwidth_mb_s={self.bandwidth_mb_s})"


#: The storage sources use unless told otherwise.
LOCAL = Storage()


def drop_page_cache(paths: list[str]) -> int:
    """Ask the kernel to drop ``paths``' cached pages (``posix_fadvise(DONTNEED)``; no root
    needed), so the next read comes from the disk: a cold-cache run.

    Returns:
        The bytes advised (dirty pages are flushed first, as the advice only drops clean ones).
    """
    total = 0
    for path in paths:
        fd = os.open(path, os.O_RDONLY)
        try:
            os.fdatasync(fd)
            os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
            total += os.fstat(fd).st_size
        finally:
            os.close(fd)
    return total
