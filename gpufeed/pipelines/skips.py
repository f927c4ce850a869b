"""What a loader does with files that do not decode: the ``on_error`` policy, the files
found bad so far, and each epoch's list of the files it left out (``loader.skipped``)."""

from __future__ import annotations

import os
import warnings
from abc import ABC, abstractmethod
from dataclasses import dataclass

from gpufeed.policies import OnError

#: What identifies the version of a file that was judged: ``(device, inode, size, mtime_ns,
#: ctime_ns)`` from its stat (:func:`file_stamp`), or :data:`FIXED`.
FileStamp = tuple[int, int, int, int, int] | str

#: The stamp of a sample whose bytes cannot change while the loader runs (a shard's
#: member, a RAM cache's copy, a raw cache's pixels): what was found bad of it stays bad.
FIXED = "fixed"


def file_stamp(path: str, size: int | None = None) -> FileStamp | None:
    """The stamp of the file at ``path`` as it is now: its device, inode, size, and
    modification and change times in nanoseconds, so that a file rewritten (in place or by
    a rename), completed, or given other permissions stamps otherwise. None when it cannot
    be stat'ed, or when its size is not ``size``, the bytes judged: it changed while it was
    read (a copy still being written), so what was found is not about this version.
    """
    try:
        st = os.stat(path)
    except OSError:
        return None
    if size is not None and st.st_size != size:
        return None
    return (st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns, st.st_ctime_ns)


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
    found bad so far (so they are not read and decoded again while they stay as they were).

    A feed (:class:`gpufeed.pipelines.feeds.FileFeed`) asks :meth:`known` before reading a
    file and calls :meth:`add` for one that cannot be decoded; a subclass decides where
    :meth:`add` files it (:class:`SkipLog`: the loader's epoch;
    :class:`gpufeed.pipelines.feeds.IteratorSkips`: the epoch a DALI iterator reads).

    A file is remembered with the stamp of the version that was judged
    (:func:`file_stamp`), and :meth:`known` trusts the memory only while the file still
    stamps the same: a file missing or half-written in one epoch and whole in the next is
    read again, as the torch backend (which reads every file every epoch) reads it. A
    failed read is never trusted (it may not repeat: a network disk's hiccup), nor is a
    file without a stamp. What the memory saves is a DALI pipeline's recovery for each
    unchanged file DALI's decoder failed on, and a read of each unchanged bad file.
    """

    def __init__(self, on_error: OnError | str) -> None:
        self.on_error = OnError.parse(on_error, "on_error")
        self._known: dict[str, tuple[str, FileStamp | None]] = {}

    def known(self, path: str) -> str | None:
        """The reason ``path`` was found bad, while the file is as it was then; else None
        (and the file is forgotten: it is to be read and judged again)."""
        entry = self._known.get(path)
        if entry is None:
            return None
        reason, stamp = entry
        if stamp is not None and (stamp == FIXED or file_stamp(path) == stamp):
            return reason
        del self._known[path]
        return None

    @abstractmethod
    def add(self, path: str, reason: str, stamp: FileStamp | None = None) -> None:
        """Record a bad file, or raise :class:`BadImageError` under ``on_error="raise"``
        (subclasses call :meth:`_remember` first). ``stamp``: the judged version's
        (:func:`file_stamp`, or :data:`FIXED`); None for a failure that may not repeat
        (a failed read) or one reported again (a file already remembered for the same
        reason keeps its stamp)."""

    def _remember(self, path: str, reason: str, stamp: FileStamp | None = None) -> None:
        """Raise :class:`BadImageError` under ``on_error="raise"``, else remember the file."""
        if self.on_error == OnError.RAISE:
            raise BadImageError(path, reason)
        before = self._known.get(path)
        if stamp is None and before is not None and before[0] == reason:
            return  # reported again (a resumed epoch's list, a file met twice): what is known holds
        self._known[path] = (reason, stamp)


class SkipLog(BadFileMemory):
    """The files an epoch left out, and the policy that decides whether to skip or raise.

    Known-bad files are remembered across epochs (so they are not decoded again while
    unchanged: :class:`BadFileMemory`) and listed in every epoch that meets them, so that,
    with ``last_batch="partial"``, samples yielded + ``len(skipped)`` = files in the shard,
    every epoch; a file that reads again is no longer listed.
    """

    def __init__(self, on_error: OnError | str) -> None:
        super().__init__(on_error)
        self.skipped: list[Skipped] = []
        self._this_epoch: set[str] = set()
        self._warned: set[str] = set()

    def start_epoch(self) -> None:
        """Forget the last epoch's list (the known-bad files stay known)."""
        self.skipped, self._this_epoch = [], set()

    def add(self, path: str, reason: str, stamp: FileStamp | None = None) -> None:
        """Record a bad file (once per epoch), or raise :class:`BadImageError` under ``raise``
        (``stamp``: as :meth:`BadFileMemory.add`)."""
        self._remember(path, reason, stamp)
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
