"""Running a batch through the stage in chunks: cache-sized on a CPU, one per core.

Every op is a pass over the batch. On a CPU a large float batch streams through memory
once per pass, while chunks of about 4 MB of float pixels stay in cache across the
passes of a recipe; the chunks run on one thread per torch intra-op thread, each op
single-threaded, because many small ops with intra-op threads pay a barrier each, which
on a busy machine costs more than the op. On a GPU the whole batch goes at once.
"""

from __future__ import annotations

import weakref
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager

import torch

#: Float elements per chunk on a CPU (4 MB).
CPU_CHUNK_ELEMENTS = 1 << 20


def chunk_parts(batch: int, sample_elements: int, device: torch.device, chunk_size: int | None = None) -> list[slice]:
    """The batch's samples in chunks: ``chunk_size`` samples each when given, else the
    whole batch on a GPU and about :data:`CPU_CHUNK_ELEMENTS` float elements on a CPU."""
    if chunk_size is not None:
        step = chunk_size
    elif device.type != "cpu":
        step = batch
    else:
        step = max(1, CPU_CHUNK_ELEMENTS // max(1, sample_elements))
    return [slice(i, min(batch, i + step)) for i in range(0, batch, step)]


@contextmanager
def intra_op_threads(n: int) -> Iterator[None]:
    """Run with ``n`` torch intra-op threads, restoring the process-wide setting after."""
    before = torch.get_num_threads()
    torch.set_num_threads(n)
    try:
        yield
    finally:
        torch.set_num_threads(before)


class ChunkRunner:
    """Runs ``work(part)`` for every part: on a CPU on a pool of one thread per torch
    intra-op thread (kept between calls, each op single-threaded meanwhile), elsewhere
    one part after another. A pickled copy starts without a pool."""

    def __init__(self) -> None:
        self._pool: ThreadPoolExecutor | None = None
        self._threads = 0

    def run(self, work: Callable[[slice], None], parts: list[slice], device: torch.device) -> None:
        threads = torch.get_num_threads()
        if device.type == "cpu" and threads > 1 and len(parts) > 1:
            with intra_op_threads(1):
                list(self._pool_of(threads).map(work, parts))
        else:
            for part in parts:
                work(part)

    def _pool_of(self, threads: int) -> ThreadPoolExecutor:
        if self._pool is None or self._threads != threads:
            if self._pool is not None:
                self._pool.shutdown(wait=False)
            self._pool = ThreadPoolExecutor(threads, thread_name_prefix="gpufeed-augment")
            self._threads = threads
            weakref.finalize(self, self._pool.shutdown, wait=False)  # no idle threads left behind
        return self._pool

    def __getstate__(self) -> dict:
        return {"_pool": None, "_threads": 0}
