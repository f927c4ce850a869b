"""Command-line option types shared by ``gpufeed`` and its benchmark suites."""

from __future__ import annotations

import argparse
import contextlib
import math
import os
import tempfile
from collections.abc import Callable
from pathlib import Path

#: The most workers/threads an option takes: a process or thread each, so a typo such as
#: ``--workers 99999999999`` hung starting them instead of being refused.
MAX_WORKERS = 1024


def at_least(minimum: int, maximum: int | None = None) -> Callable[[str], int]:
    """An argparse ``type`` for a whole number no smaller than ``minimum`` (and no larger
    than ``maximum``, when given).

    A bad value is a usage error naming the option (``argument --repeats: must be >= 1, got
    0``) before anything runs, instead of a traceback minutes into a benchmark, or a loop
    that runs zero times and reports nothing.

    Example:
        >>> parser = argparse.ArgumentParser()
        >>> _ = parser.add_argument("--repeats", type=at_least(1), default=3)
        >>> parser.parse_args(["--repeats", "2"]).repeats
        2
    """
    def parse(text: str) -> int:
        try:
            value = int(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"expected a whole number, got {text!r}") from None
        if value < minimum:
            raise argparse.ArgumentTypeError(f"must be >= {minimum}, got {value}")
        if maximum is not None and value > maximum:
            raise argparse.ArgumentTypeError(f"must be <= {maximum:,}, got {value:,}")
        return value

    parse.__name__ = f"whole number >= {minimum}"  # argparse's own messages name the type
    return parse


def byte_size(text: str) -> str:
    """An argparse type: a size of at least one byte, in bytes or with a unit (``"256MB"``,
    ``"1GiB"``), checked when the arguments are read and kept as given. A bad
    ``--shard-size`` had been found only by each conversion, after a whole benchmark ran."""
    from gpufeed.datasets.shards.convert import parse_size

    try:
        size = parse_size(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from exc
    if size < 1:
        raise argparse.ArgumentTypeError(f"must be at least 1 byte, got {text!r}")
    return text


def device_name(text: str) -> str:
    """An argparse type: ``auto``, ``cpu``, ``cuda`` or ``cuda:N``, spelled right (whether
    CUDA is there is the command's to check). A typo (``--device gpu``) had been found by
    each suite in turn, after the others had run for minutes."""
    if text in ("auto", "cpu", "cuda") or (text.startswith("cuda:") and text[5:].isdigit()):
        return text
    raise argparse.ArgumentTypeError(f"{text!r}: choose from auto, cpu, cuda, cuda:N")


def table_format_problem(path: str) -> str | None:
    """Why the kit cannot tell the table format of ``path`` (a file, or a folder such as a
    Parquet dataset), in the command line's words, or None. The library's own message ends
    "pass format=...", an argument the command line does not have."""
    from gpufeed.datasets.tables import FORMATS, detect_format

    try:
        detect_format(path)
    except ValueError as exc:
        suffixes = sorted({s for f in FORMATS.values() for s in f.suffixes if s.count(".") == 1})
        return f"{str(exc).split('; pass format=')[0]} (table suffixes: {', '.join(suffixes)})"
    return None


def number_at_least(minimum: float, *, above: bool = False) -> Callable[[str], float]:
    """An argparse ``type`` for a finite number ``>= minimum`` (``> minimum`` with ``above``),
    as :func:`at_least` is for whole numbers: ``--min-seconds -1`` or ``--open-latency-ms
    nan`` is a usage error naming the option before anything runs.

    Example:
        >>> parser = argparse.ArgumentParser()
        >>> _ = parser.add_argument("--seconds", type=number_at_least(0, above=True), default=1.0)
        >>> parser.parse_args(["--seconds", "0.5"]).seconds
        0.5
    """
    bound = f"> {minimum:g}" if above else f">= {minimum:g}"

    def parse(text: str) -> float:
        try:
            value = float(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"expected a number, got {text!r}") from None
        if not math.isfinite(value) or value < minimum or (above and value == minimum):
            raise argparse.ArgumentTypeError(f"must be a number {bound}, got {text}")
        return value

    parse.__name__ = f"number {bound}"
    return parse


def _why_not_a_folder_to_write(path: Path) -> str | None:
    """Why files cannot be written into the folder ``path``, or ``None`` when they can.

    Checked by doing it: the missing folders are created (parents too), a file is created
    and deleted in the folder, and the folders created here are removed again, so a run
    refused later for another reason leaves nothing behind (the command creates the folder
    when it writes). Takes milliseconds, where the write itself comes after the whole run.
    """
    if path.exists() and not path.is_dir():
        return "exists and is not a folder"
    missing = []
    existing = path
    while not existing.exists() and existing != existing.parent:
        missing.append(existing)
        existing = existing.parent
    if not existing.is_dir():
        return f"{existing} is a file, not a folder"
    created: list[Path] = []
    try:
        for folder in reversed(missing):
            try:
                folder.mkdir()
            except OSError as exc:
                return f"cannot create the folder {folder} ({exc.strerror or exc})"
            created.append(folder)
        try:
            handle, name = tempfile.mkstemp(dir=path, prefix=".gpufeed-write-check-")
        except OSError as exc:
            return f"cannot write into {path} ({exc.strerror or exc})"
        os.close(handle)
        os.unlink(name)
    finally:
        for folder in reversed(created):
            with contextlib.suppress(OSError):  # something else wrote there meanwhile: leave it
                folder.rmdir()
    return None


def output_folder(value: str) -> str:
    """An argparse ``type`` for a folder a command writes into (created when missing):
    an existing file, or a place where no folder can be created or written into, is a
    usage error naming the option at once (``argument --out: /proc/x: cannot create the
    folder /proc/x (No such file or directory)``), instead of an ``[Errno ...]`` after the work.

    Example:
        >>> parser = argparse.ArgumentParser()
        >>> _ = parser.add_argument("--out", type=output_folder)
        >>> parser.parse_args(["--out", "new/results"]).out  # not created yet: the command does
        'new/results'
    """
    why = _why_not_a_folder_to_write(Path(value))
    if why:
        raise argparse.ArgumentTypeError(f"{value}: {why}")
    return value


def table_output_file(value: str) -> str:
    """An argparse ``type`` for a generated table's file: ``.parquet`` or ``.csv``, not a
    folder, in a folder that can be created and written into (checked before generating)."""
    path = Path(value)
    if path.suffix.lower() not in (".parquet", ".csv"):
        raise argparse.ArgumentTypeError(f"{value}: must end in .parquet or .csv")
    if path.is_dir():
        raise argparse.ArgumentTypeError(f"{value}: is a folder: name the file to write")
    why = _why_not_a_folder_to_write(path.parent)
    if why:
        if why.startswith("exists"):
            why = f"{path.parent} is a file, not a folder"
        raise argparse.ArgumentTypeError(f"{value}: {why}")
    return value


def results_folder(value: str) -> str:
    """An ``--out`` results folder anywhere but inside the gpufeed package (an argparse
    ``type``, so a run is refused before it starts; a default like ``gpufeed-results`` is
    relative to the current directory, which may be the package's own folder), and one
    that can be written (:func:`output_folder`): an existing file, ``/proc/x`` or a
    read-only place is refused at once, not after the whole benchmark ran."""
    import gpufeed

    out = Path(value).resolve()
    package = Path(gpufeed.__file__).resolve().parent
    if out == package or package in out.parents:
        raise argparse.ArgumentTypeError(f"{value} is inside the gpufeed package ({package}): write elsewhere")
    return output_folder(value)


def add_training_loop_arguments(parser: argparse.ArgumentParser) -> None:
    """The options of a measured training loop, shared by ``gpufeed stall`` and ``gpufeed
    bench stalls``: ``--steps``, ``--warmup``, ``--batch-size``, ``--size``, ``--workers``
    and ``--device``."""
    parser.add_argument("--steps", type=at_least(1), default=30, help="steps measured per run (default: 30)")
    parser.add_argument("--warmup", type=at_least(0), default=2,
                        help="steps left out first (default: 2), after the loader runs have drawn the batches "
                             "the loader banks while it starts (its workers' prefetch)")
    parser.add_argument("--batch-size", type=at_least(1), default=32, help="default: 32")
    parser.add_argument("--size", type=at_least(1), default=224, help="image size (default: 224)")
    parser.add_argument("--workers", type=at_least(0, MAX_WORKERS), default=None,
                        help="loader workers/threads (default: all cores)")
    parser.add_argument("--device", default="auto", type=device_name, help="auto | cpu | cuda (default: auto)")
