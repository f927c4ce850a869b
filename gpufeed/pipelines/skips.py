"""What a loader does with files that do not decode: the ``on_error`` policy, the files
found bad so far, and each epoch's list of the files it left out (``loader.skipped``)."""

from __future__ import annotations

import warnings
from abc import ABC, abstractmethod
from dataclasses import dataclass

from gpufeed.policies import OnError


class BadImageError(ValueError):
    """A file that cannot be decoded as an image, with the reason (``on_error="raise"``)."""

    def __init__(self, path: str, reason: str) -> None:
        super().__init__(f"{path}: {reason}")
        self.path, self.reason = path, reason


@dataclass(frozen=True)
class Skipped:
    """A file left out of an epoch, and why."""

    path: str
    reason: str


class BadFileMemory(ABC):
    """Where a feed of files reports the bad ones: the ``on_error`` policy and the files
    found bad so far (so they are not decoded again).

    A feed (:class:`gpufeed.pipelines.feeds.FileFeed`) asks :meth:`known` before reading a
    file and calls :meth:`add` for one that cannot be decoded; a subclass decides where
    :meth:`add` files it (:class:`SkipLog`: the loader's epoch;
    :class:`gpufeed.pipelines.feeds.IteratorSkips`: the epoch a DALI iterator reads).
    """

    def __init__(self, on_error: OnError | str) -> None:
        self.on_error = OnError.parse(on_error, "on_error")
        self._known: dict[str, str] = {}

    def known(self, path: str) -> str | None:
        """The reason ``path`` was found bad before, or None."""
        return self._known.get(path)

    @abstractmethod
    def add(self, path: str, reason: str) -> None:
        """Record a bad file, or raise :class:`BadImageError` under ``on_error="raise"``
        (subclasses call :meth:`_remember` first)."""

    def _remember(self, path: str, reason: str) -> None:
        """Raise :class:`BadImageError` under ``on_error="raise"``, else remember the file."""
        if self.on_error == OnError.RAISE:
            raise BadImageError(path, reason)
        self._known[path] = reason


class SkipLog(BadFileMemory):
    """The files an epoch left out, and the policy that decides whether to skip or raise.

    Known-bad files are remembered across epochs (so they are not decoded again) and
    listed in every epoch's :attr:`skipped`, so that, with ``last_batch="partial"``,
    samples yielded + ``len(skipped)`` = files in the shard, every epoch.
    """

    def __init__(self, on_error: OnError | str) -> None:
        super().__init__(on_error)
        self.skipped: list[Skipped] = []
        self._this_epoch: set[str] = set()
        self._warned: set[str] = set()

    def start_epoch(self) -> None:
        """Forget the last epoch's list (the known-bad files stay known)."""
        self.skipped, self._this_epoch = [], set()

    def add(self, path: str, reason: str) -> None:
        """Record a bad file (once per epoch), or raise :class:`BadImageError` under ``raise``."""
        self._remember(path, reason)
        if path not in self._this_epoch:
            self._this_epoch.add(path)
            self.skipped.append(Skipped(path, reason))

    def warn_new(self, epoch: int, planned: int) -> None:
        """One warning line per epoch that found files not warned about before."""
        new = [s for s in self.skipped if s.path not in self._warned]
        if not new:
            return
        self._warned.update(s.path for s in new)
        shown = "; ".join(f"{s.path} ({s.reason})" for s in new[:3])
        more = f"; and {len(new) - 3} more" if len(new) > 3 else ""
        warnings.warn(
            f"gpufeed: epoch {epoch} skipped {len(self.skipped)} of {planned} files "
            f"(loader.skipped lists each with its reason): {shown}{more}", stacklevel=3,
        )
