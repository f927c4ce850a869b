"""WebDataset tar shards: a writer (``KEY.jpg`` + ``KEY.cls`` per sample, plain ustar
members, DALI's ``.idx`` index beside each shard) and :class:`WebDatasetShards`, which
reads them by index.

A shard is indexed once when opened (member offsets and sizes, from the ``.idx`` file
when there is one, else by walking the 512-byte tar headers), so reading a sample is one
``pread`` of exactly its image bytes, from whichever process decodes.
"""

from __future__ import annotations

import json
import os
import re
import tarfile
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from gpufeed.datasets.compression import compression_of_bytes
from gpufeed.datasets.samples import IMAGE_EXTENSIONS as IMAGE_SUFFIXES
from gpufeed.datasets.shards.base import ShardSource
from gpufeed.datasets.storage import LOCAL, Storage

#: Member extensions (lower case, no dot) that hold a sample's image, as WebDataset names them.
IMAGE_EXTENSIONS = tuple(e.lstrip(".") for e in IMAGE_SUFFIXES)
#: The member extension that holds a sample's label unless told (``label_key``).
LABEL_EXTENSION = "cls"
#: ``label_key`` prefix naming an integer field of the sample's ``.json`` member.
JSON_LABEL = "json:"

#: A label member's text: a decimal integer, whitespace around it allowed (WebDataset's
#: encoder writes ``str(label)``; other writers add a newline).
_DECIMAL = re.compile(rb"\s*[+-]?[0-9]+\s*")

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


def _checksum_ok(header: bytes) -> bool:
    stored = header[148:156]
    try:
        checksum = int(stored.replace(b"\0", b" ").strip() or b"0", 8)
    except ValueError:
        return False
    return checksum == sum(header[:148]) + 8 * 32 + sum(header[156:])


def looks_like_tar(head: bytes) -> bool:
    """Whether ``head`` (a file's first 512 bytes) is a tar header: its checksum matches."""
    return len(head) == _BLOCK and head != b"\0" * _BLOCK and _checksum_ok(head)


def scan_tar(path: str, storage: Storage = LOCAL) -> list[Member]:
    """The regular-file members of a tar, found by walking its 512-byte headers through
    ``storage.read_at`` (one header read per member; the data is skipped, not read).

    Handles ustar and GNU headers, base-256 sizes, PAX ``path``/``size`` records and GNU
    long names; folders, links and other non-regular members are left out (as WebDataset
    and DALI leave them out).

    Raises:
        ValueError: a gzip-compressed tar (``.tar.gz`` under any name), or a header whose
            checksum is wrong (not a tar, or a corrupt one).
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
        if pos == 0 and not _checksum_ok(header) and (kind := compression_of_bytes(header)) is not None:
            from gpufeed.datasets.shards import compressed_shard_error

            raise compressed_shard_error(path, f"a {kind}-compressed tar")
        if not _checksum_ok(header):
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
        if kind in (b"K", b"g"):  # a GNU long link target, a PAX global header: not the next name
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


def parse_image_key(image_key: str | Sequence[str] | None) -> tuple[str, ...]:
    """The image member extensions ``image_key`` names, lower case: ``"jpg"``,
    ``"jpg;png"`` (WebDataset's and DALI's spelling) or a list; None: any of
    :data:`IMAGE_EXTENSIONS`.

    Raises:
        ValueError: an empty extension, or one with whitespace or a leading dot.
    """
    if image_key is None:
        return IMAGE_EXTENSIONS
    parts = image_key.split(";") if isinstance(image_key, str) else list(image_key)
    exts = tuple(str(e).strip().lower() for e in parts)
    if not exts or any(not e or e.startswith(".") or any(c.isspace() for c in e) for e in exts):
        raise ValueError(f"image_key must name member extensions without the dot, e.g. 'jpg' or 'jpg;png'; "
                         f"got {image_key!r}")
    return exts


def parse_label_key(label_key: str | None) -> str:
    """The label member extension ``label_key`` names (lower case; default ``cls``), or
    ``"json:FIELD"``.

    Raises:
        ValueError: an empty extension or field, whitespace, a leading dot.
    """
    if label_key is None:
        return LABEL_EXTENSION
    key = str(label_key).strip()
    if key.startswith(JSON_LABEL):
        if not key[len(JSON_LABEL):]:
            raise ValueError(f"label_key {label_key!r}: name the JSON field, e.g. 'json:label'")
        return key
    if not key or key.startswith(".") or any(c.isspace() for c in key):
        raise ValueError(f"label_key must name a member extension without the dot (e.g. 'cls', 'label', "
                         f"'txt') or a JSON field ('json:label'); got {label_key!r}")
    return key.lower()


def _shown(members: list[Member], limit: int = 6) -> str:
    names = ", ".join(m.name for m in members[:limit])
    return names + (f" ... ({len(members)} members)" if len(members) > limit else "")


def _missing(path: str, key: str, members: list[Member], what: str, wanted: tuple[str, ...], option: str) -> str:
    """The error for a sample without its image or label member: the members it has,
    and the way out (``option``, or keys without dots)."""
    message = f"{path}: sample {key!r} has no {what}; its members: {_shown(members)}"
    exts = [split_key(m.name)[1] for m in members]
    if len({e.rsplit(".", 1)[-1].lower() for e in exts}) < len(exts):
        # "img.0001.jpg" is key "img", extension "0001.jpg" to WebDataset and DALI alike,
        # so every "img.*" member lands in one sample
        return (message + ". A sample key ends at the first dot of a member's name, so keys with dots run "
                "samples together (in WebDataset and DALI too): rename the members without dots in their keys")
    dotted = sorted({e for e in exts if "." in e and e.rsplit(".", 1)[1].lower() in wanted})
    if dotted:
        return (message + ". A member's extension is everything after the first dot of its name (here "
                + ", ".join(repr(e) for e in dotted[:3]) + f"): name it with {option}=")
    return message + f" (pass {option}= to name the member that holds it)"


class WebDatasetShards(ShardSource):
    """The samples of WebDataset tar shards, one image and one label member per key.

    Members are grouped into samples as WebDataset and DALI group them: consecutive
    members with the same key, the name up to the first dot of its base name (so
    ``n01440764/n01440764_10026.jpg`` is key ``n01440764/n01440764_10026``, extension
    ``jpg``). Members of other extensions (``.json``, ``.txt``) are ignored, and so are
    folders and other non-regular entries. The image is the first member, in file order,
    whose extension (any case) is one of ``image_key`` (as DALI's reader picks).

    Each shard is indexed when the source is made: from its DALI index ``SHARD.idx`` when
    there is one, else by walking the tar headers (one open per shard). Labels are read
    then too (one small read per label member). :meth:`read` is then one ``read_at`` of
    the image bytes.

    Args:
        files: the shard paths, in order (:func:`~gpufeed.datasets.shards.expand_shards`
            makes them from a pattern).
        storage: how bytes are read.
        image_key: the image member's extension(s): ``"jpg"``, ``"jpg;png"`` or a list
            (default: any of :data:`IMAGE_EXTENSIONS`).
        label_key: the label member's extension (default ``"cls"``; ``"label"``,
            ``"class"``, ``"txt"`` ...), holding a decimal integer as text, or
            ``"json:FIELD"``: an integer field of the sample's ``.json`` member.

    Raises:
        ValueError: a sample without an image member or without its label member, or a
            label that is not an integer (shard, key and member named); gzip-compressed
            shards; no shards; no samples.
    """

    format = "webdataset"

    def __init__(self, files: list[str], storage: Storage = LOCAL, *, image_key: str | Sequence[str] | None = None,
                 label_key: str | None = None) -> None:
        super().__init__(files, storage)
        self.image_key = parse_image_key(image_key)
        self.label_key = parse_label_key(label_key)
        self._keys_differ({"image_key": ";".join(self.image_key), "label_key": self.label_key},
                          {"image_key": ";".join(IMAGE_EXTENSIONS), "label_key": LABEL_EXTENSION})
        json_field = self.label_key[len(JSON_LABEL):] if self.label_key.startswith(JSON_LABEL) else None
        label_ext = "json" if json_field is not None else self.label_key
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
                exts = [split_key(m.name)[1].lower() for m in members]
                if len(set(exts)) < len(exts):
                    # WebDataset refuses this too; taking the first would drop the others
                    twice = sorted({e for e in exts if exts.count(e) > 1})
                    raise ValueError(f"{path}: sample {key!r} has several members named {key}.{twice[0]}: "
                                     "the same key twice in a row (every sample needs a key of its own)")
                image = next((m for m in members if split_key(m.name)[1].lower() in self.image_key), None)
                label = next((m for m in members if split_key(m.name)[1].lower() == label_ext), None)
                if image is None:
                    raise ValueError(_missing(path, key, members, "image member (."
                                              + ", .".join(self.image_key) + ")", self.image_key, "image_key"))
                if label is None:
                    raise ValueError(_missing(path, key, members, f".{label_ext} label member", (label_ext,),
                                              "label_key"))
                text = storage.read_at(path, label.offset, label.size).tobytes()
                labels.append(self._label(path, label, text, json_field))
                shard_of.append(s)
                keys.append(key)
                offsets.append(image.offset)
                sizes.append(image.size)
            counts.append(len(samples))
        self._keys = keys
        self._located(shard_of, offsets, sizes, labels, counts)

    @staticmethod
    def _label(path: str, member: Member, text: bytes, json_field: str | None) -> int:
        """The integer label a label member holds (decimal text, or a JSON field)."""
        if json_field is None:
            if not _DECIMAL.fullmatch(text):
                raise ValueError(f"{path}: {member.name} holds {text[:20]!r}, not an integer label")
            return int(text)
        try:
            value = json.loads(text)[json_field]
        except (ValueError, UnicodeDecodeError) as exc:
            raise ValueError(f"{path}: {member.name} is not JSON ({exc})") from None
        except (KeyError, TypeError):
            raise ValueError(f"{path}: {member.name} has no field {json_field!r} (label_key='json:{json_field}')"
                             ) from None
        if not isinstance(value, int) or isinstance(value, bool):
            raise ValueError(f"{path}: {member.name}: field {json_field!r} is {value!r}, not an integer label")
        return value

    def _index(self, path: str) -> list[list[Member]]:
        """Members grouped by key, from the DALI index when it fits the file, else the tar."""
        return self._entries(path, read_index, _index_fits, self._scan,
                             lambda members: [(m.offset, m.size) for m in members])

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
