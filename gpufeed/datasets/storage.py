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

import os
import threading
import time
from collections import OrderedDict

import numpy as np


class _Handle:
    """An open file descriptor and the reads using it (closed only when none is)."""

    __slots__ = ("fd", "users", "closing")

    def __init__(self, fd: int) -> None:
        self.fd, self.users, self.closing = fd, 0, False


class Storage:
    """Local files, read with ``pread`` through a small per-process cache of open handles.

    Thread-safe: the DALI backend's feed reads a batch's files on several threads. A
    handle is closed (least recently used first, or by :meth:`close`) only once no read
    is using it, so a read never sees its descriptor closed or reused under it; opens
    happen outside the lock, so a slow open does not hold up reads of other files.

    Args:
        max_open: handles kept open per process (least recently used closed first).
    """

    def __init__(self, max_open: int = 64) -> None:
        self.max_open = max_open
        self._handles: OrderedDict[str, _Handle] = OrderedDict()
        self._lock = threading.Lock()
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
        handle = self._acquire(path)
        try:
            out = np.empty(size, dtype=np.uint8)
            got = os.preadv(handle.fd, [memoryview(out)], offset)
        finally:
            self._release(handle)
        self._transferred(got)
        if got != size:
            raise EOFError(f"{path}: wanted {size} bytes at offset {offset}, the file ends after {got}")
        return out

    def size(self, path: str) -> int:
        """The file's size in bytes."""
        return os.path.getsize(path)

    def close(self) -> None:
        """Close every handle this process holds (those in use, when their reads end)."""
        if self._pid != os.getpid():
            self._forget_parent()
            return
        with self._lock:
            for handle in self._handles.values():
                if handle.users == 0:
                    os.close(handle.fd)
                else:
                    handle.closing = True
            self._handles.clear()

    # -- what a simulated store overrides --------------------------------------------
    def _opened(self, path: str) -> None:
        """Called once per file open (a seek on a disk, a request to an object store)."""

    def _transferred(self, nbytes: int) -> None:
        """Called after ``nbytes`` were read."""

    # -- handles ---------------------------------------------------------------------
    def _forget_parent(self) -> None:
        # A forked child: the parent's descriptors and lock state are not ours to use.
        self._handles = OrderedDict()
        self._lock = threading.Lock()
        self._pid = os.getpid()

    def _acquire(self, path: str) -> _Handle:
        if self._pid != os.getpid():
            self._forget_parent()
        with self._lock:
            handle = self._handles.get(path)
            if handle is not None:
                self._handles.move_to_end(path)
                handle.users += 1
                return handle
        self._opened(path)  # outside the lock: a slow open must not stall other reads
        fd = os.open(path, os.O_RDONLY)
        with self._lock:
            handle = self._handles.get(path)
            if handle is not None:  # another thread opened it meanwhile: use theirs
                os.close(fd)
            else:
                handle = self._handles[path] = _Handle(fd)
                idle = [p for p, h in self._handles.items() if h.users == 0 and p != path]
                for old in idle[: max(0, len(self._handles) - self.max_open)]:
                    os.close(self._handles.pop(old).fd)
            self._handles.move_to_end(path)
            handle.users += 1
            return handle

    def _release(self, handle: _Handle) -> None:
        with self._lock:
            handle.users -= 1
            if handle.closing and handle.users == 0:
                os.close(handle.fd)

    def __getstate__(self) -> dict:
        state = dict(self.__dict__)
        state["_handles"] = OrderedDict()  # handles belong to the process that opened them
        del state["_lock"]
        return state

    def __setstate__(self, state: dict) -> None:
        self.__dict__.update(state)
        self._lock = threading.Lock()
        self._pid = os.getpid()

    def __del__(self) -> None:
        # try/except, not contextlib.suppress: at interpreter shutdown the module may be gone
        try:  # noqa: SIM105 - see above
            self.close()
        except Exception:  # noqa: BLE001, S110 - nothing to close, or nothing left to close it with
            pass

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
