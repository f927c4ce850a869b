"""Compressed files, told apart by their names and by their first bytes: one home for the
table readers (which decompress CSV and JSON) and the shard readers (which refuse
compressed shards with advice)."""

from __future__ import annotations

import os
import re

#: Compression suffixes (lower case) and what they name, as pandas and tar name them.
SUFFIXES = {".gz": "gzip", ".tgz": "gzip", ".bz2": "bz2", ".xz": "xz", ".zst": "zstd", ".zip": "zip",
            ".lz4": "lz4"}

#: The first bytes of compressed data (bz2's, ``BZh``, is told with the block magic after
#: it; see :func:`compression_of_bytes`).
_MAGIC = ((b"\x1f\x8b", "gzip"), (b"PK\x03\x04", "zip"), (b"PK\x05\x06", "zip"),
          (b"\xfd7zXZ\x00", "xz"), (b"\x28\xb5\x2f\xfd", "zstd"), (b"\x04\x22\x4d\x18", "lz4"))
#: "BZh" + block size + the block (pi) or end-of-stream (sqrt pi) magic: not text.
_BZ2 = re.compile(rb"BZh[1-9](?:1AY&SY|\x17rE8P\x90)")


def compression_of_bytes(head: bytes) -> str | None:
    """The compression whose magic ``head`` (a file's first 10 bytes or more) starts with:
    ``"gzip"``, ``"zip"``, ``"bz2"``, ``"xz"``, ``"zstd"`` or ``"lz4"``; None otherwise.

    Example:
        >>> compression_of_bytes(b"\\x1f\\x8b\\x08\\x00")
        'gzip'
    """
    for magic, kind in _MAGIC:
        if head.startswith(magic):
            return kind
    return "bz2" if _BZ2.match(head) else None


def compression_of(path: str | os.PathLike[str]) -> str | None:
    """The compression of the file at ``path`` told by its first bytes, or None for a file
    that is not compressed: the bytes, not the name, decide, so a misnamed file is found."""
    with open(path, "rb") as fh:
        return compression_of_bytes(fh.read(10))


def compression_of_name(name: str | os.PathLike[str]) -> str | None:
    """The compression ``name``'s suffix says (``t.csv.gz``: ``"gzip"``), or None."""
    lower = os.fspath(name).lower()
    return next((kind for suffix, kind in SUFFIXES.items() if lower.endswith(suffix)), None)


def strip_compression(name: str) -> str:
    """``name`` without its compression suffix (``t.jsonl.gz`` -> ``t.jsonl``, ``s.tgz`` ->
    ``s.tar``); ``name`` itself when it has none."""
    lower = name.lower()
    if lower.endswith(".tgz"):
        return name[:-4] + ".tar"
    suffix = next((s for s in SUFFIXES if lower.endswith(s)), None)
    return name[: -len(suffix)] if suffix else name
