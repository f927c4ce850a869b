"""Worker processes that read and check encoded images for the DALI backend's feed.

Why processes: the feed's per-file work (the read, the JPEG marker walk that matches
libjpeg, the header's size, the crop's draw) is Python, about 90 µs a file on one core.
In the Python thread that also schedules DALI, it capped the DALI GPU loader on an H200
with 16 cores at 2,700 images/s, where the same graph fed from memory ran 17,000 and
DALI's own file reader 20,000 (``bench/results/gpu-profile-*``). Threads do not help:
the work holds the GIL. The torch backend does this work in DataLoader worker processes;
these are the DALI backend's.

They are forked, as DataLoader's workers are on Linux (no re-import of the user's main
script, which ``spawn`` would need guarded), once per loader, just before its first DALI
pipeline is built, and shared by its ``dali_iterator()``: forking a process while DALI
pipelines run has crashed DataLoader workers here. They run no DALI and no CUDA, ignore
Ctrl-C (the terminal sends it to the whole process group: the loop decides), and die
with the training process. If one dies, the feed goes on in its own thread, with a
warning. Pure Python, no DALI import.
"""

from __future__ import annotations

import multiprocessing
import signal
import weakref
from concurrent.futures import BrokenExecutor, Future, ProcessPoolExecutor
from typing import Any

from gpufeed.datasets.samples import SampleSource
from gpufeed.machine import die_with_parent
from gpufeed.pipelines.options import LoaderOptions

#: What a worker holds: the loader's samples and options, inherited at the fork.
_STATE: dict[str, Any] = {}


def _hold(samples: SampleSource, options: LoaderOptions) -> None:
    die_with_parent()  # not orphaned, waiting for work, when the training process is killed
    # A terminal's Ctrl-C reaches every process of the group: a worker that died of it broke
    # the pool under a loop that had caught the KeyboardInterrupt and went on.
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    _STATE["samples"], _STATE["options"] = samples, options


def _prepare_batch(epoch: int, indices: list[int]) -> list[tuple]:
    from gpufeed.pipelines.feeds import prepare_read

    samples, options = _STATE["samples"], _STATE["options"]
    return [prepare_read(samples, options, epoch, i) for i in indices]


def _ready() -> bool:
    return True


class FeedWorkers:
    """``processes`` forked workers that prepare a batch's files as the feed would
    (:func:`gpufeed.pipelines.feeds.prepare_read` for each), ahead of the feed.

    Shut down by :meth:`close` or when dropped.
    """

    def __init__(self, samples: SampleSource, options: LoaderOptions, processes: int) -> None:
        self.processes = processes
        self._pool = ProcessPoolExecutor(processes, mp_context=multiprocessing.get_context("fork"),
                                         initializer=_hold, initargs=(samples, options))
        # Fork every worker now (a fork-context pool starts them all at its first task),
        # before the caller builds its DALI pipeline.
        self._pool.submit(_ready).result()
        self._closer = weakref.finalize(self, self._pool.shutdown, wait=False, cancel_futures=True)

    @property
    def closed(self) -> bool:
        """Whether :meth:`close` ran (or the pool was dropped)."""
        return not self._closer.alive

    def submit(self, epoch: int, indices: list[int]) -> Future:
        """Prepare the samples ``indices`` of ``epoch``: a future of their
        :func:`~gpufeed.pipelines.feeds.prepare_read` results, in order.

        Raises:
            BrokenExecutor: a worker died, or the workers were closed.
        """
        if self.closed:
            raise BrokenExecutor("the feed's worker processes were closed")
        return self._pool.submit(_prepare_batch, epoch, indices)

    def close(self) -> None:
        """Stop the workers (idempotent); batches still queued are cancelled."""
        self._closer()


def feed_processes(samples: SampleSource, options: LoaderOptions, on_gpu: bool) -> int:
    """How many worker processes prepare the DALI feed: ``options.workers`` on a GPU for
    encoded images (a folder, a file list, shards, a RAM cache of them), else none (the
    feed's own thread).

    In DALI's CPU-only mode the decoder's threads need every core, and the feed keeps up
    with them. A raw cache's decoded pixels need no check, and sending them from a worker
    would copy every pixel once more.
    """
    if not on_gpu or options.workers <= 1 or samples.kind == "pixels":
        return 0
    return options.workers
