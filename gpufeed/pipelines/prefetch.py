"""Work done ahead on a background thread, for loaders that run in this process."""

from __future__ import annotations

import queue
import threading
from collections.abc import Callable, Iterable, Iterator
from typing import TypeVar

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
