"""Where gpufeed keeps what it generates or derives: one folder for all of it.

Generated image sets and tables, the storage benchmark's conversions and the shard index
files that cannot sit beside read-only shards all go under ``$GPUFEED_CACHE`` (default
``~/.cache/gpufeed``), so one setting (a container's volume, a scratch disk) moves them all.
"""

from __future__ import annotations

import os
from pathlib import Path


def cache_dir(*parts: str) -> Path:
    """``$GPUFEED_CACHE`` (default ``~/.cache/gpufeed``), joined with ``parts``.

    Example:
        >>> cache_dir("tables").name
        'tables'
    """
    return Path(os.environ.get("GPUFEED_CACHE") or Path.home() / ".cache" / "gpufeed", *parts)
