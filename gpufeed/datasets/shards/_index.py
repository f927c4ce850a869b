"""Where a shard's DALI index file goes when the shard has none (shared by both formats)."""

from __future__ import annotations

import hashlib
import os
from collections.abc import Callable
from pathlib import Path


def index_file_for(shard: str, valid: bool, write: Callable[[str], None], kind: str) -> str:
    """The DALI index of ``shard``: ``SHARD.idx`` when it exists and was found ``valid``;
    otherwise one written by ``write(path)``, beside the shard or, where its folder is not
    writable, into ``$XDG_CACHE_HOME/gpufeed/<kind>-index`` (named by a hash of the
    shard's path, size and modification time, so a changed shard gets a new index).

    Args:
        shard: the shard file.
        valid: whether an existing ``SHARD.idx`` matched the shard when it was indexed.
        write: writes the index to the path it is given.
        kind: ``"wds"`` or ``"tfrecord"`` (the cache folder's name).

    Returns:
        The index path.
    """
    beside = f"{shard}.idx"
    if valid and os.path.isfile(beside):
        return beside
    try:
        write(beside)
        return beside
    except OSError:
        pass  # a read-only dataset folder: the cache holds the index instead
    stat = os.stat(shard)
    tag = hashlib.sha1(f"{os.path.abspath(shard)}|{stat.st_size}|{stat.st_mtime_ns}".encode()).hexdigest()[:16]
    cache = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "gpufeed" / f"{kind}-index"
    cache.mkdir(parents=True, exist_ok=True)
    path = str(cache / f"{tag}-{os.path.basename(shard)}.idx")
    if not os.path.isfile(path):
        write(path)
    return path
