"""WebDataset tar shards: a writer (``KEY.jpg`` + ``KEY.cls`` per sample, plain ustar
members, DALI's ``.idx`` index beside each shard) and :class:`WebDatasetShards`, which
reads them by index.

A shard is indexed once when opened (member offsets and sizes, from the ``.idx`` file
when there is one, else by walking the 512-byte tar headers), so reading a sample is one
``pread`` of exactly its image bytes, from whichever process decodes.
"""

from __future__ import annotations

import os
import tarfile
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from gpufeed.datasets.shards.base import ShardSource
from gpufeed.datasets.storage import LOCAL, Storage

#: Member extensions (lower case) that hold a sample's image, as WebDataset names them.
IMAGE_EXTENSIONS = ("jpg", "jpeg", "png", "webp", "bmp", "tif", "tiff", "ppm")

#: The index format DALI's ``wds2idx`` writes (and ``fn.readers.webdataset`` reads).
INDEX_VERSION = "v1.2"

_BLOCK = 512


def split_key(name: str) -> tuple[str, str]:
    """``(key, extension)`` of a member name, as WebDataset and DALI group members: the
    key is the path up to the first dot of the base name (``a/b.x.jpg`` -> ``a/b``, ``x.jpg``).
    """
    dot = name.find(".", name.rfind("/") + 1)
    return (name, "") if dot < 0 else (name[:dot], name[dot + 1:])


@dataclass(frozen=True)
class Member:
    """One regular file inside a tar: its name, where its data starts, and its size."""

    name: str
    offset: int
    size: int


class TarShardWriter:
    """Writes one WebDataset shard: ustar members ``KEY.<ext>`` (the image's encoded
    bytes) and ``KEY.cls`` (the label as ASCII decimal), then the end-of-archive blocks
    and DALI's index file ``PATH.idx``.

    Headers come from :meth:`tarfile.TarInfo.tobuf` in ustar format (so any tar reader
    takes them); the writer tracks member offsets itself, so the index costs nothing.

    Args:
        path: the shard file to write (replaced if it exists).
        index_path: where to write the index (default ``path + ".idx"``; None: no index).

    Example:
        >>> w = TarShardWriter(tmp / "shard-000000.tar")  # doctest: +SKIP
        >>> w.add("000000", jpeg_bytes, "jpg", 3); w.close()  # doctest: +SKIP
    """

    def __init__(self, path: str | os.PathLike[str], index_path: str | os.PathLike[str] | None = "") -> None:
        self.path = Path(path)
        self.index_path = None if index_path is None else Path(index_path or f"{self.path}.idx")
        self._file = open(self.path, "wb")  # noqa: SIM115 - closed in close()
        self._samples: list[list[Member]] = []
        self.nbytes = 0
        self.count = 0

    def add(self, key: str, image: bytes | np.ndarray, ext: str, label: int) -> None:
        """Append one sample.

        Args:
            key: the sample key (no dots, no spaces: WebDataset cuts names at the first dot,
                DALI's index at spaces).
            image: the encoded image bytes.
            ext: the image's extension without the dot (``"jpg"``, ``"png"``).
            label: the class number.

        Raises:
            ValueError: a key with a dot, a space or a slash at its end.
        """
        if not key or "." in key.rsplit("/", 1)[-1] or any(c.isspace() for c in key) or key.endswith("/"):
            raise ValueError(f"{self.path}: sample key {key!r} must be non-empty, without dots or spaces")
        self._samples.append([self._member(f"{key}.{ext}", bytes(image)),
                              self._member(f"{key}.cls", str(int(label)).encode("ascii"))])
        self.count += 1

    def _member(self, name: str, data: bytes) -> Member:
        info = tarfile.TarInfo(name)
        info.size, info.mode, info.mtime = len(data), 0o644, 0  # mtime 0: same input, same bytes
        info.uname = info.gname = ""
        header = info.tobuf(tarfile.USTAR_FORMAT, "utf-8", "strict")
        offset = self.nbytes + len(header)
        pad = -len(data) % _BLOCK
        self._file.write(header)
        self._file.write(data)
        self._file.write(b"\0" * pad)
        self.nbytes = offset + len(data) + pad
        return Member(name, offset, len(data))

    def close(self) -> None:
        """Write the end-of-archive blocks and the index, and close the file."""
        if self._file.closed:
            return
        self._file.write(b"\0" * (2 * _BLOCK))  # two zero blocks end a tar
        self.nbytes += 2 * _BLOCK
        self._file.close()
        if self.index_path is not None:
            write_index(self.index_path, self._samples)


def write_index(path: str | os.PathLike[str], samples: list[list[Member]]) -> None:
    """Write a DALI WebDataset index (the ``wds2idx`` v1.2 format): a line ``v1.2 N``, then
    one line per sample listing ``ext offset size name`` for each of its members.

    Args:
        path: the index file.
        samples: each sample's members, in file order.

    Raises:
        ValueError: a member name with whitespace (the format splits on it).
    """
    lines = [f"{INDEX_VERSION} {len(samples)}"]
    for members in samples:
        parts = []
        for m in members:
            if any(c.isspace() for c in m.name):
                raise ValueError(f"{path}: member {m.name!r} has whitespace, which DALI's index cannot hold")
            parts.append(f"{split_key(m.name)[1]} {m.offset} {m.size} {m.name}")
        lines.append(" ".join(parts))
    Path(path).write_text("\n".join(lines) + "\n")


def read_index(path: str | os.PathLike[str]) -> list[list[Member]]:
    """The members of each sample from a DALI WebDataset index (v1.1 or v1.2).

    v1.1 lines carry no member names; their members are named ``#k.<ext>`` (k = the sample's
    position), so grouping still works.

    Raises:
        ValueError: not a DALI WebDataset index, or its line count disagrees with its header.
    """
    lines = Path(path).read_text().splitlines()
    head = lines[0].split() if lines else []
    if len(head) != 2 or head[0] not in ("v1.1", "v1.2") or not head[1].isdigit():
        raise ValueError(f"{path}: not a DALI WebDataset index (expected a first line 'v1.2 N')")
    width = 4 if head[0] == "v1.2" else 3
    samples: list[list[Member]] = []
    for k, line in enumerate(lines[1:]):
        fields = line.split()
        if not fields:
            continue
        if len(fields) % width:
            raise ValueError(f"{path}:{k + 2}: expected groups of {width} fields, got {len(fields)} fields")
        members = []
        for j in range(0, len(fields), width):
            ext, offset, size = fields[j], int(fields[j + 1]), int(fields[j + 2])
            members.append(Member(fields[j + 3] if width == 4 else f"#{k}.{ext}", offset, size))
        samples.append(members)
    if len(samples) != int(head[1]):
        raise ValueError(f"{path}: header says {head[1]} samples, the index lists {len(samples)}")
    return samples


def scan_tar(path: str, storage: Storage = LOCAL) -> list[Member]:
    """The regular-file members of a tar, found by walking its 512-byte headers through
    ``storage.read_at`` (one header read per member; the data is skipped, not read).

    Handles ustar and GNU headers, base-256 sizes, PAX ``path``/``size`` records and GNU
    long names.

    Raises:
        ValueError: a header whose checksum is wrong (not a tar, or a corrupt one).
        EOFError: the tar is cut short.
    """
    end = storage.size(path)
    members: list[Member] = []
    pos = 0
    long_name: str | None = None
    pax: dict[str, str] = {}
    while pos + _BLOCK <= end:
        header = storage.read_at(path, pos, _BLOCK).tobytes()
        if header == b"\0" * _BLOCK:
            break  # end-of-archive marker
        stored = header[148:156]
        try:
            checksum = int(stored.replace(b"\0", b" ").strip() or b"0", 8)
        except ValueError:
            checksum = -1
        actual = sum(header[:148]) + 8 * 32 + sum(header[156:])
        if checksum != actual:
            raise ValueError(f"{path}: bad tar header at offset {pos} (not a tar file, or a corrupt one)")
        size = _tar_number(header[124:136])
        kind = header[156:157]
        name = header[:100].split(b"\0", 1)[0]
        if header[257:262] == b"ustar" and header[345:500].strip(b"\0"):
            name = header[345:500].split(b"\0", 1)[0] + b"/" + name
        data_at = pos + _BLOCK
        pos = data_at + size + (-size % _BLOCK)
        if kind in (b"x", b"L"):  # a PAX extended header or a GNU long name: for the next member
            body = storage.read_at(path, data_at, size).tobytes()
            if kind == b"L":
                long_name = body.split(b"\0", 1)[0].decode("utf-8", "surrogateescape")
            else:
                pax = _pax_records(body)
            continue
        if kind in (b"0", b"\0", b"7"):  # regular files (contiguous files are regular too)
            size = int(pax.get("size", size))
            full = pax.get("path") or long_name or name.decode("utf-8", "surrogateescape")
            members.append(Member(full, data_at, size))
            pos = data_at + size + (-size % _BLOCK)
        long_name, pax = None, {}
    if pos > end:
        raise EOFError(f"{path}: the tar ends inside a member (cut short at {end} bytes)")
    return members


def _tar_number(field: bytes) -> int:
    if field[:1] in (b"\x80", b"\xff"):  # GNU base-256, for sizes of 8 GiB and up
        value = int.from_bytes(field[1:], "big")
        return value - (1 << (8 * len(field) - 8)) if field[:1] == b"\xff" else value
    return int(field.replace(b"\0", b" ").strip() or b"0", 8)


def _pax_records(body: bytes) -> dict[str, str]:
    out: dict[str, str] = {}
    pos = 0
    while pos < len(body):
        space = body.find(b" ", pos)
        if space < 0:
            break
        length = int(body[pos:space])
        key, _, value = body[space + 1: pos + length - 1].partition(b"=")
        out[key.decode()] = value.decode("utf-8", "surrogateescape")
        pos += length
    return out


def _index_fits(samples: list[list[Member]], size: int) -> bool:
    """Whether a read index can describe a tar of ``size`` bytes (a stale one would point
    into the wrong bytes): its last sample names members, not bare ``#k`` records, and
    ends inside the file."""
    last = samples[-1][-1] if samples[-1] else None
    return last is not None and not last.name.startswith("#") and last.offset + last.size <= size


class WebDatasetShards(ShardSource):
    """The samples of WebDataset tar shards, one image and one ``.cls`` label per key.

    Each shard is indexed when the source is made: from its DALI index ``SHARD.idx`` when
    there is one, else by walking the tar headers (one open per shard). Labels are read
    then too (one small read per ``.cls`` member). :meth:`read` is then one ``read_at`` of
    the image bytes.

    Args:
        files: the shard paths, in order (:func:`~gpufeed.datasets.shards.expand_shards`
            makes them from a pattern).
        storage: how bytes are read.

    Raises:
        ValueError: a sample without an image member or without a ``.cls`` member, or a
            ``.cls`` that is not an integer (shard and key named); no shards; no samples.
    """

    format = "webdataset"

    def __init__(self, files: list[str], storage: Storage = LOCAL) -> None:
        super().__init__(files, storage)
        shard_of: list[int] = []
        keys: list[str] = []
        offsets: list[int] = []
        sizes: list[int] = []
        labels: list[int] = []
        counts: list[int] = []
        self._indexed: list[list[list[Member]]] = []  # per shard, per sample: members (for dali_index_files)
        for s, path in enumerate(self._files):
            samples = self._index(path)
            self._indexed.append(samples)
            for members in samples:
                key = split_key(members[0].name)[0]
                image = next((m for m in members if split_key(m.name)[1].lower() in IMAGE_EXTENSIONS), None)
                cls = next((m for m in members if split_key(m.name)[1].lower() == "cls"), None)
                if image is None or cls is None:
                    what = "an image member (" + ", ".join(IMAGE_EXTENSIONS) + ")" if image is None else "a .cls member"
                    raise ValueError(f"{path}: sample {key!r} has no {what}; it has "
                                     + ", ".join(m.name for m in members))
                text = storage.read_at(path, cls.offset, cls.size).tobytes()
                try:
                    labels.append(int(text.strip()))
                except ValueError:
                    raise ValueError(f"{path}: {cls.name} holds {text[:20]!r}, not an integer label") from None
                shard_of.append(s)
                keys.append(key)
                offsets.append(image.offset)
                sizes.append(image.size)
            counts.append(len(samples))
        self._keys = keys
        self._located(shard_of, offsets, sizes, labels, counts)

    def _index(self, path: str) -> list[list[Member]]:
        """Members grouped by key, from the DALI index when it fits the file, else the tar."""
        return self._entries(path, read_index, _index_fits, self._scan)

    def _scan(self, path: str) -> list[list[Member]]:
        grouped: list[list[Member]] = []
        previous = None
        for member in scan_tar(path, self.storage):
            key = split_key(member.name)[0]
            if not key or key.endswith("/"):
                continue  # hidden files (".DS_Store"): no key, as WebDataset skips them
            if key != previous:
                grouped.append([])
                previous = key
            grouped[-1].append(member)
        return grouped

    def _tag(self, index: int) -> str:
        return self._keys[index]

    def _write_index(self, path: str, shard: int) -> None:
        write_index(path, self._indexed[shard])
