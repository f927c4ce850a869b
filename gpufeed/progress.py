"""Progress output that reads well both in a terminal and in a log.

In a terminal (stderr is a tty) a long loop shows a tqdm bar; anywhere else (CI, ``make
bench > log``, a pipe) it prints one line when it starts, a line at most every
``every_s`` seconds while it runs, and one line when it ends: never a carriage-return bar
redrawn per item. Every suite reports its stages through :func:`stage`.
"""

from __future__ import annotations

import sys
import time
from collections.abc import Iterable, Iterator
from typing import TextIO, TypeVar

T = TypeVar("T")


def is_interactive(stream: TextIO | None = None) -> bool:
    """True when ``stream`` (default: ``sys.stderr``) is a terminal.

    Example:
        >>> import io
        >>> is_interactive(io.StringIO())
        False
    """
    stream = sys.stderr if stream is None else stream
    isatty = getattr(stream, "isatty", None)
    try:
        return bool(isatty and isatty())
    except ValueError:  # a closed stream
        return False


def stage(message: str, *, stream: TextIO | None = None) -> None:
    """Print one progress line (a stage starting or ending) to ``stream``, default stderr.

    Args:
        message: the line, without a trailing newline.
        stream: where to write (default: ``sys.stderr``, so results on stdout stay clean).

    Example:
        >>> stage("[images] running torch-pil ...")  # doctest: +SKIP
    """
    print(message, file=sys.stderr if stream is None else stream, flush=True)


def progress(
    items: Iterable[T],
    *,
    desc: str,
    total: int | None = None,
    unit: str = "it",
    stream: TextIO | None = None,
    every_s: float = 30.0,
) -> Iterator[T]:
    """Yield ``items``, showing progress: a tqdm bar in a terminal, lines in a log.

    Args:
        items: what to iterate over.
        desc: what is being done (``"generating /data/train"``).
        total: the number of items (default: ``len(items)`` when it has one).
        unit: the item's name (``"img"``).
        stream: where progress goes (default: ``sys.stderr``).
        every_s: in a log, the least time between two "still running" lines.

    Returns:
        An iterator over ``items``.

    Example:
        >>> import io
        >>> log = io.StringIO()
        >>> list(progress(range(3), desc="counting", stream=log))
        [0, 1, 2]
        >>> log.getvalue().splitlines()[0]
        'counting: 3 it ...'
    """
    if every_s <= 0:
        raise ValueError(f"every_s must be > 0, got {every_s}")
    stream = sys.stderr if stream is None else stream
    if total is None and hasattr(items, "__len__"):
        total = len(items)  # type: ignore[arg-type]
    if is_interactive(stream):
        from tqdm import tqdm

        yield from tqdm(items, desc=desc, total=total, unit=unit, file=stream)
        return
    of = f"/{total}" if total is not None else ""
    stage(f"{desc}: {total if total is not None else '?'} {unit} ...", stream=stream)
    start = last = time.perf_counter()
    done = 0
    for item in items:
        yield item
        done += 1
        now = time.perf_counter()
        if now - last >= every_s:
            stage(f"{desc}: {done}{of} {unit}, {now - start:.0f} s", stream=stream)
            last = now
    stage(f"{desc}: done, {done} {unit} in {time.perf_counter() - start:.1f} s", stream=stream)


def counted(n: int | float, noun: str, plural: str | None = None) -> str:
    """``n`` and ``noun``, plural unless ``n`` is 1 (for progress and report lines): ``1 repeat``, ``3 repeats``, ``1,024 files``.

    Example:
        >>> counted(1, "timed pass", "timed passes"), counted(1024, "file")
        ('1 timed pass', '1,024 files')
    """
    return f"{n:,} {noun if n == 1 else plural or noun + 's'}"
