"""Worker processes that read and check encoded images for the DALI backend's feed.

Why processes: the feed's per-file work (the read, the JPEG marker walk that matches
libjpeg, the header's size, the crop's draw) is Python, about 90 µs a file on one core.
In the Python thread that also schedules DALI, it capped the DALI GPU loader on an H200
with 16 cores at 2,700 images/s, where the same graph fed from memory ran 17,000 and
DALI's own file reader 20,000 (``bench/results/gpu-profile-*``). Threads do not help:
the work holds the GIL. The torch backend does this work in DataLoader worker processes;
these are the DALI backend's.

They are forked, as DataLoader's workers are on Linux (no re-import of the user's main
script, which ``spawn`` would need guarded), once per loader, when it is made (before
training starts, in a script that makes its loaders first), and shared by its
``dali_iterator()``: forking a process while DALI pipelines run has crashed DataLoader
workers here. They run no DALI and no CUDA, ignore
Ctrl-C (the terminal sends it to the whole process group: the loop decides), and die
with the training process. If one dies, the feed goes on in its own thread, with a
warning. Pure Python, no DALI import.

The images' bytes come back through memory shared with the workers (an anonymous shared
mapping made before the fork, cut into one slot per batch in flight), not through the
pool's result pipe: there each byte was pickled, sent and unpickled by one thread of the
training process, 41 µs of its CPU per 52 KiB image on this 2-core box, near what capped
the H200 run (9,383 images/s). Only the verdicts, crops and offsets are pickled.
"""

from __future__ import annotations

import contextlib
import mmap
import multiprocessing
import os
import signal
import threading
import time
import weakref
from collections import deque
from concurrent.futures import BrokenExecutor, Future, ProcessPoolExecutor
from typing import Any, NamedTuple

import numpy as np

from gpufeed.datasets.samples import SampleSource
from gpufeed.machine import die_with_parent
from gpufeed.pipelines.options import LoaderOptions

#: Bytes of one batch's slot in the shared memory: a batch's images beyond it (a batch of
#: very large files) come back through the pipe instead.
SLOT_BYTES = 32 << 20
#: Slots beyond the workers': the batch being taken and the two before it, which DALI may
#: still be copying, and one spare.
SPARE_SLOTS = 4

#: What a worker holds: the loader's samples and options and the shared memory, inherited
#: at the fork.
_STATE: dict[str, Any] = {}


class InShared(NamedTuple):
    """Where a prepared image's bytes lie in the workers' shared memory."""

    offset: int
    size: int


def _watch_parent(parent: int) -> None:
    """Exit once the training process is gone (reparented: another parent id)."""
    while os.getppid() == parent:
        time.sleep(1.0)
    os._exit(1)


def _hold(samples: SampleSource, options: LoaderOptions, shared: mmap.mmap, from_main_thread: bool) -> None:
    # Not orphaned, waiting for work, when the training process is killed. PR_SET_PDEATHSIG
    # fires when the forking *thread* ends: forked from another thread (a loader first used
    # there), the workers died with it; a watch on the parent's id serves there.
    if from_main_thread:
        die_with_parent()
    else:
        threading.Thread(target=_watch_parent, args=(os.getppid(),), daemon=True).start()
    # A terminal's Ctrl-C reaches every process of the group: a worker that died of it broke
    # the pool under a loop that had caught the KeyboardInterrupt and went on.
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    _STATE["samples"], _STATE["options"], _STATE["shared"] = samples, options, shared


def _prepare_batch(epoch: int, indices: list[int], slot: int | None) -> list[tuple]:
    """The prepared samples, each image's bytes written into ``slot`` of the shared memory
    while they fit (:class:`InShared` in its place), the others as they are."""
    from gpufeed.pipelines.feeds import prepare_read

    samples, options, shared = _STATE["samples"], _STATE["options"], _STATE["shared"]
    out = [prepare_read(samples, options, epoch, i) for i in indices]
    if slot is None:
        return out
    at, end = slot * SLOT_BYTES, (slot + 1) * SLOT_BYTES
    for k, (reason, crop, fed, stamp) in enumerate(out):
        if fed is None:
            continue
        data = np.frombuffer(fed, dtype=np.uint8)
        if at + data.size > end:
            continue
        shared[at: at + data.size] = data
        out[k] = (reason, crop, InShared(at, data.size), stamp)
        at += data.size
    return out


def _ready() -> bool:
    return True


class FeedWorkers:
    """``processes`` forked workers that prepare a batch's files as the feed would
    (:func:`gpufeed.pipelines.feeds.prepare_read` for each), ahead of the feed.

    Shut down by :meth:`close` or when dropped.
    """

    def __init__(self, samples: SampleSource, options: LoaderOptions, processes: int) -> None:
        self.processes = processes
        slots = processes + SPARE_SLOTS
        # Anonymous and shared: inherited by the forked workers, no file in /dev/shm (64 MB
        # in a default Docker container); pages are only taken as batches are written.
        self._shared = mmap.mmap(-1, slots * SLOT_BYTES)
        self._free = deque(range(slots))
        self._lock = threading.Lock()  # slots come back from the pool's thread too
        main = threading.current_thread() is threading.main_thread()
        self._pool = ProcessPoolExecutor(processes, mp_context=multiprocessing.get_context("fork"),
                                         initializer=_hold, initargs=(samples, options, self._shared, main))
        # Fork every worker now (a fork-context pool starts them all at its first task),
        # before the caller builds its DALI pipeline.
        self._pool.submit(_ready).result()
        self._closer = weakref.finalize(self, self._pool.shutdown, wait=False, cancel_futures=True)

    @property
    def closed(self) -> bool:
        """Whether :meth:`close` ran (or the pool was dropped)."""
        return not self._closer.alive

    def submit(self, epoch: int, indices: list[int], shared: bool = True) -> tuple[Future, int | None]:
        """Prepare the samples ``indices`` of ``epoch``: a future of their
        :func:`~gpufeed.pipelines.feeds.prepare_read` results, in order (their bytes as
        :class:`InShared` where they went to the shared memory: :meth:`bytes_of`), and the
        slot they use (None when all are taken, or not ``shared``: the bytes come through
        the pipe). Give the slot back with :meth:`release` once nothing reads its bytes.

        Raises:
            BrokenExecutor: a worker died, or the workers were closed.
        """
        if self.closed:
            raise BrokenExecutor("the feed's worker processes were closed")
        with self._lock:
            slot = self._free.popleft() if self._free and shared else None
        try:
            return self._pool.submit(_prepare_batch, epoch, indices, slot), slot
        except BaseException:
            self.release(slot)
            raise

    def bytes_of(self, fed: Any) -> Any:
        """What DALI is given of a prepared sample's ``fed``: a view of the shared memory
        for :class:`InShared`, else ``fed`` itself."""
        if isinstance(fed, InShared):
            if self.closed:  # results that arrived before close(): their memory is gone
                raise BrokenExecutor("the feed's worker processes were closed")
            return np.frombuffer(self._shared, dtype=np.uint8, count=fed.size, offset=fed.offset)
        return fed

    def release(self, slot: int | None) -> None:
        """Give ``slot`` back (None: nothing to give; one already free, given back twice, is
        not freed again)."""
        if slot is not None:
            with self._lock:
                if slot not in self._free:
                    self._free.append(slot)

    def close(self) -> None:
        """Stop the workers (idempotent); batches still queued are cancelled. The shared
        memory is unmapped once no batch view is left (its pages stay resident till then)."""
        self._closer()
        with contextlib.suppress(BufferError):  # a batch handed out still views it: unmapped when that is gone
            self._shared.close()


#: In DALI's CPU-only mode the feed moves to worker processes from this many workers up.
CPU_FEED_MIN_WORKERS = 8


def feed_processes(samples: SampleSource, options: LoaderOptions, on_gpu: bool) -> int:
    """How many worker processes prepare the DALI feed for encoded images (a folder, a file
    list, shards, a RAM cache of them): ``options.workers`` on a GPU, and in DALI's
    CPU-only mode from :data:`CPU_FEED_MIN_WORKERS` workers up; else none (the feed's own
    thread).

    Measured with ``bench/feed_ab.py``, 2026-11-27: on the GPU workers 3.70x the thread
    (train), 1.97x (val); in CPU-only mode 1.48x (train) on 16 cores, but 1.05x (train) and
    1.28x (val) on 2, where the fork buys little. So a small machine, CI's included (whose
    test processes hold many DALI pipelines, and a fork of such a process has crashed here:
    DataLoader workers), keeps the thread. A raw cache's decoded pixels need no check, and
    sending them from a worker would copy every pixel once more.
    """
    if options.workers <= 1 or samples.kind == "pixels":
        return 0
    return options.workers if on_gpu or options.workers >= CPU_FEED_MIN_WORKERS else 0
