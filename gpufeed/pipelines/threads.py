"""Threads of the training process that loaders run on: a pool for a batch's samples,
and a background thread that makes batches ahead of the consumer."""

from __future__ import annotations

import queue
import threading
import weakref
from collections.abc import Callable, Iterable, Iterator
from concurrent.futures import ThreadPoolExecutor
from typing import TypeVar

import torch

T = TypeVar("T")
R = TypeVar("R")

_END = object()


def prefetched(items: Iterable[T], make: Callable[[T], R], depth: int) -> Iterator[R]:
    """``make(item)`` for each item in order, computed by a background thread up to
    ``depth`` results ahead of the consumer, as DataLoader workers run ahead of the
    training step.

    An exception in ``items`` or ``make`` is raised here, at the position it happened.
    Closing the iterator early (a ``break`` in the consumer's loop) stops the thread
    after the result it is making.
    """
    if depth < 1:
        raise ValueError(f"depth must be >= 1, got {depth}")
    results: queue.Queue = queue.Queue(depth)
    stop = threading.Event()

    def put(entry: tuple[bool, object]) -> bool:
        while not stop.is_set():
            try:
                results.put(entry, timeout=0.05)
                return True
            except queue.Full:
                continue
        return False

    def run() -> None:
        try:
            for item in items:
                if stop.is_set() or not put((True, make(item))):
                    return
        except BaseException as exc:  # noqa: BLE001 - handed to the consumer, raised there
            put((False, exc))
            return
        put((True, _END))

    thread = threading.Thread(target=run, name="gpufeed-prefetch", daemon=True)
    thread.start()
    try:
        while True:
            ok, value = results.get()
            if not ok:
                raise value  # type: ignore[misc]
            if value is _END:
                return
            yield value  # type: ignore[misc]
    finally:
        stop.set()
        thread.join()


class SamplePool:
    """``threads`` threads that run per-sample work of a batch (resize, normalise: torch's
    kernels and numpy release the GIL), each on a contiguous run of the batch's samples.

    Each thread runs torch with one intra-op thread (a per-thread setting; the process's
    own stays): the pool is the parallelism, and nested OpenMP teams spun against it,
    ~10x slower on 2 cores.
    """

    def __init__(self, threads: int, name: str) -> None:
        self.threads, self.name = max(1, threads), name
        self._executor: ThreadPoolExecutor | None = None

    def run(self, count: int, work: Callable[[int], None]) -> None:
        """``work(i)`` for every ``i`` in ``range(count)``; returns when all are done and
        raises the first error."""
        if self._executor is None:  # started on first use, closed with the pool
            self._executor = ThreadPoolExecutor(self.threads, thread_name_prefix=self.name,
                                                initializer=torch.set_num_threads, initargs=(1,))
            weakref.finalize(self, self._executor.shutdown, wait=False)
        step = -(-count // self.threads)  # ceil: one run of samples per thread

        def chunk(start: int) -> None:
            for i in range(start, min(start + step, count)):
                work(i)

        for done in [self._executor.submit(chunk, s) for s in range(0, count, step)]:
            done.result()
