"""Command-line option types shared by ``gpufeed`` and its benchmark suites."""

from __future__ import annotations

import argparse
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
