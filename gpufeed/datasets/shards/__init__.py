"""Image datasets stored in few large files: WebDataset tar shards, TFRecord shards and
pre-decoded raw caches (written by ``gpufeed convert``), read by index through
:class:`~gpufeed.datasets.samples.SampleSource`.

:func:`open_shards` picks the format from the file names; :func:`expand_shards` turns a
shard pattern into the file list.
"""

from __future__ import annotations

import glob
import json
import os
import re
from collections.abc import Sequence
from pathlib import Path

from gpufeed.datasets.samples import SampleSource
from gpufeed.datasets.storage import LOCAL, Storage

#: Shard file suffixes and the format they hold.
SHARD_SUFFIXES = {".tar": "webdataset", ".tfrecord": "tfrecord", ".tfrec": "tfrecord"}

#: The manifest ``gpufeed convert`` writes into its output folder: ``{"format":
#: "webdataset" | "tfrecord" | "raw", "samples": N, "classes": [...], "files": [...], ...}``
#: (file names relative to the folder).
MANIFEST = "gpufeed.json"

_BRACES = re.compile(r"\{(\d+)\.\.(\d+)\}")


def expand_shards(spec: str | os.PathLike[str] | Sequence[str | os.PathLike[str]]) -> list[str]:
    """The shard files a pattern names, in order.

    ``spec`` is a brace range as WebDataset writes it (``train-{000000..000127}.tar``;
    zero padding kept, several ranges expand as a product), a glob (``train-*.tar``,
    sorted), a single file, or a list of those.

    Raises:
        FileNotFoundError: a named file does not exist, or a glob matches nothing.
    """
    if not isinstance(spec, (str, os.PathLike)):
        return [p for item in spec for p in expand_shards(item)]
    text = os.fspath(spec)
    names = [text]
    while any(_BRACES.search(n) for n in names):
        out = []
        for name in names:
            m = _BRACES.search(name)
            if m is None:
                out.append(name)
                continue
            lo, hi = m.group(1), m.group(2)
            width = len(lo) if lo.startswith("0") else 0
            out += [name[: m.start()] + str(k).zfill(width) + name[m.end():] for k in range(int(lo), int(hi) + 1)]
        names = out
    files: list[str] = []
    for name in names:
        if glob.has_magic(name):
            found = sorted(glob.glob(name))
            if not found:
                raise FileNotFoundError(f"shard pattern {name} matches no file")
            files += found
        elif not os.path.isfile(name):
            raise FileNotFoundError(f"shard {name} does not exist" + (f" (from {text})" if name != text else ""))
        else:
            files.append(name)
    return files


def is_shard_spec(spec: object) -> bool:
    """Whether ``spec`` names shard files (a pattern, a shard file or a list of them)
    rather than an image folder or a raw cache."""
    if isinstance(spec, (str, os.PathLike)):
        text = os.fspath(spec)
        return bool(_BRACES.search(text)) or glob.has_magic(text) or Path(text).suffix.lower() in SHARD_SUFFIXES
    return isinstance(spec, Sequence) and len(spec) > 0 and all(is_shard_spec(s) for s in spec)


def open_shards(spec: str | os.PathLike[str] | Sequence[str | os.PathLike[str]],
                storage: Storage = LOCAL) -> SampleSource:
    """The sample source of a set of WebDataset or TFRecord shards.

    Raises:
        ValueError: the files mix formats or have no known shard suffix.
    """
    files = expand_shards(spec)
    formats = {SHARD_SUFFIXES.get(Path(f).suffix.lower()) for f in files}
    if None in formats or len(formats) != 1:
        shown = ", ".join(sorted({Path(f).suffix or "(none)" for f in files}))
        raise ValueError(f"shards must all be .tar (WebDataset) or all .tfrecord/.tfrec (TFRecord); got {shown}")
    if formats == {"webdataset"}:
        from gpufeed.datasets.shards.webdataset import WebDatasetShards

        return WebDatasetShards(files, storage)
    from gpufeed.datasets.shards.tfrecord import TFRecordShards

    return TFRecordShards(files, storage)


def read_manifest(folder: str | os.PathLike[str]) -> dict | None:
    """The manifest of a folder ``gpufeed convert`` wrote, or None."""
    path = Path(folder) / MANIFEST
    if not path.is_file():
        return None
    try:
        return json.loads(path.read_text())
    except json.JSONDecodeError as exc:
        raise ValueError(f"{path}: not a gpufeed manifest ({exc})") from None


def converted_format(path: object) -> str | None:
    """``"webdataset"``, ``"tfrecord"`` or ``"raw"`` for a folder ``gpufeed convert``
    wrote, else None."""
    if not isinstance(path, (str, os.PathLike)) or not os.path.isdir(path):
        return None
    manifest = read_manifest(path)
    return None if manifest is None else manifest.get("format")


def open_converted(folder: str | os.PathLike[str], storage: Storage = LOCAL) -> SampleSource:
    """The sample source of a folder ``gpufeed convert`` wrote (its manifest names the
    format and the files).

    Raises:
        ValueError: the manifest names an unknown format.
    """
    manifest = read_manifest(folder)
    fmt = None if manifest is None else manifest.get("format")
    if fmt == "raw":
        from gpufeed.datasets.shards.raw import RawCache

        return RawCache(folder, storage)
    if fmt in ("webdataset", "tfrecord"):
        return open_shards([str(Path(folder) / f) for f in manifest["files"]], storage)
    raise ValueError(f"{Path(folder) / MANIFEST}: unknown format {fmt!r} (webdataset, tfrecord or raw)")
