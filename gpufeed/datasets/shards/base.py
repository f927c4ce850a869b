"""What WebDataset and TFRecord shard sources share: samples located as byte ranges of
shard files (read with one ``read_at`` each), their labels, names, plan groups and
fingerprint, class names from the ``gpufeed convert`` manifest, and DALI index files."""

from __future__ import annotations

import copy
import hashlib
import os
from abc import abstractmethod
from collections.abc import Callable, Sequence
from typing import ClassVar

import numpy as np

from gpufeed.datasets.cache import cache_dir
from gpufeed.datasets.samples import MAX_LABEL, SampleSource, numbered_classes
from gpufeed.datasets.storage import Storage


class ShardSource(SampleSource):
    """Samples stored as byte ranges of shard files, located when the source is made.

    A subclass indexes its shards in ``__init__`` and hands the result to
    :meth:`_located`; it names a sample within its shard (:meth:`_tag`) and writes a
    shard's DALI index (:meth:`_write_index`).
    """

    kind = "encoded"
    #: ``"webdataset"`` or ``"tfrecord"``: the fingerprint's kind and the index cache's name.
    format: ClassVar[str]

    def __init__(self, files: Sequence[str | os.PathLike[str]], storage: Storage) -> None:
        if not files:
            raise ValueError(f"{type(self).__name__} needs at least one shard file")
        self.storage = storage
        self._files = [os.fspath(f) for f in files]
        self._valid_index: list[bool] = []  # per shard: whether SHARD.idx matched the shard
        self._custom_keys: dict[str, str] = {}  # image_key / label_key where not the format's default
        self._fingerprint: dict | None = None  # computed once, on first use

    def _keys_differ(self, keys: dict[str, str], defaults: dict[str, str]) -> None:
        """Note the member / feature names read where they are not the format's defaults:
        the fingerprint names them (other keys, other labels), and only then, so states
        saved before the keys existed still match."""
        self._custom_keys = {k: v for k, v in keys.items() if v != defaults[k]}

    def _located(self, shard_of: list[int], offsets: list[int], sizes: list[int], labels: list[int],
                 counts: list[int]) -> None:
        """Keep where each sample's image bytes are (shard, offset, size), its label, and
        the samples per shard; check the labels; read the class names.

        Raises:
            ValueError: no samples, or a negative label.
        """
        if not labels:
            raise ValueError(f"shards {self._files[0]} ... hold no samples")
        self.labels = tuple(labels)
        self._shard = np.asarray(shard_of, dtype=np.int32)
        self._offsets = np.asarray(offsets, dtype=np.int64)
        self._sizes = np.asarray(sizes, dtype=np.int64)
        self._groups = np.asarray(counts, dtype=np.int64)
        if min(labels) < 0:
            first = next(k for k, label in enumerate(labels) if label < 0)
            raise ValueError(f"{self._where(first)} has the negative label {labels[first]} (labels are class "
                             "numbers, 0 and up)")
        manifest = _manifest_of(self._files)
        if manifest is not None:
            self._check_counts(*manifest, counts)
        top = max(labels)
        self.classes = _classes(manifest, top, lambda: self._where(labels.index(top)))

    def _check_counts(self, path: str, manifest: dict, counts: list[int]) -> None:
        """Compare the samples found with what ``gpufeed convert``'s manifest says was
        written: per shard where it lists ``counts``, else in all when these are all its
        files. A shard cut short at a sample boundary (a partial copy or sync) reads as a
        smaller valid shard (a tar even without its end blocks); this finds it for free.

        Raises:
            ValueError: a shard (or the set) holds other than the manifest's count.
        """
        if manifest.get("format") != self.format or not isinstance(manifest.get("files"), list):
            return
        names = [os.path.basename(f) for f in self._files]
        listed = manifest["files"]
        per_shard = manifest.get("counts")
        if isinstance(per_shard, list) and len(per_shard) == len(listed):
            said = dict(zip(listed, per_shard, strict=True))
            for file, name, count in zip(self._files, names, counts, strict=True):
                if name in said and said[name] != count:
                    raise ValueError(f"{file}: {count} sample{'s' if count != 1 else ''}, but {path} says "
                                     f"{said[name]}: {_CHANGED}")
        elif (sorted(names) == sorted(listed) and isinstance(manifest.get("samples"), int)
              and sum(counts) != manifest["samples"]):
            raise ValueError(f"{os.path.dirname(self._files[0])}: its shards hold {sum(counts)} samples, but "
                             f"{path} says {manifest['samples']}: {_CHANGED}")

    def _where(self, k: int) -> str:
        """Sample ``k`` as errors name it: its shard and key (or record number)."""
        return f"{self._files[self._shard[k]]}: sample {self._tag(k)}"

    def _entries(self, path: str, read_index: Callable[[str], list], fits: Callable[[list, int], bool],
                 scan: Callable[[str], list], span: Callable[[object], object]) -> list:
        """Shard ``path``'s entries from the DALI index beside it (``read_index``) when one
        parses and ``fits(entries, file size)``, else from ``scan(path)``; notes which, so
        :meth:`dali_index_files` rewrites only indexes that did not match.

        A stale index (of another version of the shard) would point into the wrong bytes:
        ``fits`` is the format's check that it still describes this file. An index that
        lists more than the file holds, where what the file holds is the index's start
        (``span``: an entry's byte ranges), is no stale one: the shard was cut short.

        Raises:
            ValueError: the shard was cut short (its index and what it holds are named).
        """
        idx = f"{path}.idx"
        listed: list = []
        if os.path.isfile(idx):
            try:
                listed = read_index(idx)
            except ValueError:
                listed = []
            if listed and fits(listed, self.storage.size(path)):
                self._valid_index.append(True)
                return listed
        self._valid_index.append(False)
        found = scan(path)
        if listed and len(found) < len(listed) and all(
                span(a) == span(b) for a, b in zip(found, listed, strict=False)):
            raise ValueError(f"{path}: cut short: its index {idx} lists {len(listed)} samples and the file holds "
                             f"{len(found)} (its {self.storage.size(path)} bytes): {_CHANGED}")
        return found

    @abstractmethod
    def _tag(self, index: int) -> str:
        """Sample ``index``'s name within its shard (a key, or ``#k``)."""

    @abstractmethod
    def _write_index(self, path: str, shard: int) -> None:
        """Write shard number ``shard``'s DALI index to ``path``."""

    def read(self, index: int) -> np.ndarray:
        return self.storage.read_at(self._files[self._shard[index]], int(self._offsets[index]),
                                    int(self._sizes[index]))

    def name(self, index: int) -> str:
        return f"{os.path.basename(self._files[self._shard[index]])}:{self._tag(index)}"

    @property
    def groups(self) -> np.ndarray:
        return self._groups

    def fingerprint(self) -> dict:
        if self._fingerprint is None:
            # Where each sample lies and its label, position by position: the same images
            # written in another order under the same shard names and counts (a re-shuffled
            # conversion, a fixed-count re-shard) have other offsets, sizes and labels, and a
            # state saved on one gave duplicates and losses on the other.
            layout = hashlib.sha1(np.asarray(self.labels, dtype=np.int64).tobytes())
            for column in (self._shard, self._offsets, self._sizes):
                layout.update(column.tobytes())
            self._fingerprint = {"kind": self.format, "samples": len(self.labels),
                                 "shards": [os.path.basename(f) for f in self._files],
                                 "counts": self._groups.tolist(), "bytes": int(self._sizes.sum()),
                                 "layout": layout.hexdigest(), **self._custom_keys}
        return copy.deepcopy(self._fingerprint)  # a state edited in place must not edit the cache

    def nbytes(self) -> int:
        return int(self._sizes.sum())

    @property
    def files(self) -> list[str]:
        return list(self._files)

    def dali_index_files(self) -> list[str]:
        """The DALI index of each shard (``index_paths=`` of DALI's readers): ``SHARD.idx``
        when it matched the shard, else one written beside the shard from the index made
        at open time (or into a cache folder where that is not writable; see
        :func:`index_file_for`).

        Returns:
            One index path per shard, in shard order.
        """
        return [index_file_for(path, valid, lambda p, k=k: self._write_index(p, k), self.format)
                for k, (path, valid) in enumerate(zip(self._files, self._valid_index, strict=True))]

    def __repr__(self) -> str:
        return f"{type(self).__name__}({len(self._files)} shards, {len(self.labels)} samples)"


#: What a shard whose samples disagree with its index or manifest went through, and the way out.
_CHANGED = ("the shard was cut short or changed since it was written (a partial copy or sync?): copy it again, or "
            "re-run `gpufeed convert` into an emptied folder")


def _manifest_of(files: list[str]) -> tuple[str, dict] | None:
    """``(path, manifest)`` of the ``gpufeed convert`` manifest in the one folder holding
    ``files``, or None (files in several folders, or no manifest)."""
    from gpufeed.datasets.shards import MANIFEST, read_manifest

    folders = {os.path.dirname(os.path.abspath(f)) for f in files}
    if len(folders) != 1:
        return None
    folder = folders.pop()
    manifest = read_manifest(folder)
    return None if not isinstance(manifest, dict) else (os.path.join(folder, MANIFEST), manifest)


def _classes(manifest: tuple[str, dict] | None, max_label: int, where: Callable[[], str]) -> tuple[str, ...]:
    """Class names from the ``gpufeed convert`` manifest of the shards' folder
    (:func:`_manifest_of`), else numbers (:func:`~gpufeed.datasets.samples.numbered_classes`;
    ``where()`` names the sample with the largest label, when it is too large)."""
    names = (manifest[1] if manifest is not None else {}).get("classes")
    if names and len(names) > max_label:
        return tuple(str(c) for c in names)
    return numbered_classes(max_label, where() if max_label > MAX_LABEL else "")


def index_file_for(shard: str, valid: bool, write: Callable[[str], None], kind: str) -> str:
    """The DALI index of ``shard``: ``SHARD.idx`` when it exists and was found ``valid``;
    otherwise one written by ``write(path)``, beside the shard or, where its folder is not
    writable, into the kit's cache folder (:func:`~gpufeed.datasets.cache.cache_dir`),
    ``<kind>-index/`` (named by a hash of the shard's path, size and modification time, so
    a changed shard gets a new index).

    Args:
        shard: the shard file.
        valid: whether an existing ``SHARD.idx`` matched the shard when it was indexed.
        write: writes the index to the path it is given.
        kind: ``"webdataset"`` or ``"tfrecord"`` (the cache folder's name).

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
    cache = cache_dir(f"{kind}-index")
    cache.mkdir(parents=True, exist_ok=True)
    path = str(cache / f"{tag}-{os.path.basename(shard)}.idx")
    if not os.path.isfile(path):
        write(path)
    return path
