"""Command-line option types shared by ``gpufeed`` and its benchmark suites."""

from __future__ import annotations

import argparse
import math
from collections.abc import Callable


def at_least(minimum: int) -> Callable[[str], int]:
    """An argparse ``type`` for a whole number no smaller than ``minimum``.

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
        return value

    parse.__name__ = f"whole number >= {minimum}"  # argparse's own messages name the type
    return parse


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


def results_folder(value: str) -> str:
    """An ``--out`` results folder anywhere but inside the gpufeed package (an argparse
    ``type``, so a run is refused before it starts; a default like ``gpufeed-results`` is
    relative to the current directory, which may be the package's own folder)."""
    from pathlib import Path

    import gpufeed

    out = Path(value).resolve()
    package = Path(gpufeed.__file__).resolve().parent
    if out == package or package in out.parents:
        raise argparse.ArgumentTypeError(f"{value} is inside the gpufeed package ({package}): write elsewhere")
    return value
