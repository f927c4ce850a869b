"""TFRecord shards of ``tf.train.Example`` records: a writer (``image/encoded``,
``image/format``, ``image/class/label``; DALI's ``.idx`` index beside each shard) and
:class:`TFRecordShards`, which reads them by index.

The protobuf is encoded and parsed by hand (an Example is three nested length-delimited
messages), so neither TensorFlow nor ``protobuf`` is needed. Parsing at open time finds
where each record's image bytes start, so :meth:`TFRecordShards.read` is one ``pread``
of just those bytes.
"""

from __future__ import annotations

import os
import struct
from collections.abc import Iterator
from pathlib import Path

import google_crc32c
import numpy as np

from gpufeed.datasets.compression import compression_of_bytes
from gpufeed.datasets.shards.base import ShardSource
from gpufeed.datasets.storage import LOCAL, Storage

#: The Example features the writer sets and the reader looks for.
IMAGE_KEY = "image/encoded"
LABEL_KEY = "image/class/label"
FORMAT_KEY = "image/format"

_HEADER = 12  # uint64 length + masked crc32c of it
_FOOTER = 4  # masked crc32c of the data
_PREFIX = 512  # bytes of each record read at open: enough for the fields before the image


def masked_crc32c(data: bytes | memoryview) -> int:
    """TFRecord's masked CRC-32C of ``data`` (rotated right by 15 bits plus a constant, so
    a CRC stored inside CRC'd data does not cancel out)."""
    crc = google_crc32c.value(bytes(data))
    return (((crc >> 15) | (crc << 17)) + 0xA282EAD8) & 0xFFFFFFFF


# -- protobuf, just enough for tf.train.Example ---------------------------------------

def _varint(value: int) -> bytes:
    if value < 0:
        value += 1 << 64  # int64 negatives are ten-byte two's complement varints
    out = bytearray()
    while value >= 0x80:
        out.append((value & 0x7F) | 0x80)
        value >>= 7
    out.append(value)
    return bytes(out)


def _field(number: int, payload: bytes) -> bytes:
    """A length-delimited field (wire type 2)."""
    return _varint(number << 3 | 2) + _varint(len(payload)) + payload


class _Short(ValueError):
    """The part of a record read so far ends before a field the parser needs."""


def _read_varint(buf: bytes | memoryview, pos: int) -> tuple[int, int]:
    value = shift = 0
    while True:
        if pos >= len(buf):
            raise _Short("varint runs past the bytes read")
        b = buf[pos]
        pos += 1
        value |= (b & 0x7F) << shift
        if b < 0x80:
            return value, pos
        shift += 7
        if shift > 63:
            raise ValueError("varint longer than 10 bytes")


def _fields(buf: bytes | memoryview, start: int, end: int) -> Iterator[tuple[int, int, int, int]]:
    """Yield ``(field number, wire type, value or payload start, payload end)`` of a message."""
    pos = start
    while pos < end:
        tag, pos = _read_varint(buf, pos)
        number, wire = tag >> 3, tag & 7
        if wire == 0:
            value, pos = _read_varint(buf, pos)
            yield number, wire, value, pos
        elif wire == 2:
            length, pos = _read_varint(buf, pos)
            if pos + length > end:
                raise ValueError("a field runs past the end of its message")
            yield number, wire, pos, pos + length
            pos += length
        elif wire == 1:
            pos += 8
        elif wire == 5:
            pos += 4
        else:
            raise ValueError(f"unsupported protobuf wire type {wire}")


def encode_example(image: bytes, label: int, image_format: str) -> bytes:
    """A serialized ``tf.train.Example`` with ``image/encoded`` (bytes), ``image/format``
    (bytes, e.g. ``b"jpeg"``) and ``image/class/label`` (int64).

    Example:
        >>> len(encode_example(b"abc", 1, "jpeg")) > 0
        True
    """
    def entry(key: str, feature: bytes) -> bytes:
        return _field(1, _field(1, key.encode()) + _field(2, feature))  # Features.feature map entry

    def bytes_feature(value: bytes) -> bytes:
        return _field(1, _field(1, value))  # Feature.bytes_list{value}

    def int64_feature(value: int) -> bytes:
        return _field(3, _field(1, _varint(value)))  # Feature.int64_list{packed value}

    features = (entry(LABEL_KEY, int64_feature(int(label)))
                + entry(FORMAT_KEY, bytes_feature(image_format.encode()))
                + entry(IMAGE_KEY, bytes_feature(bytes(image))))
    return _field(1, features)  # Example.features


#: A Feature's kinds, by field number.
_KINDS = {1: "bytes_list", 2: "float_list", 3: "int64_list"}


def parse_example(record: bytes | memoryview, size: int | None = None, *, image_key: str = IMAGE_KEY,
                  label_key: str = LABEL_KEY) -> tuple[int, int, int]:
    """Where the image bytes lie in a serialized Example, and its label.

    Args:
        record: the serialized Example, or its first bytes.
        size: the Example's whole size when ``record`` holds only its first bytes (the
            image bytes themselves need not have been read, only the fields before them).
        image_key: the bytes feature holding the encoded image.
        label_key: the int64 feature holding the label (one value).

    Returns:
        ``(offset, size, label)``: the image bytes' offset and size within ``record``,
        and the label.

    Raises:
        ValueError: not an Example, one without those two features (the features it has
            are named), an image that is not one bytes value or a label that is not one
            int64 value (a subclass of it when ``record`` is a prefix that ends before a
            field the parse needs).
    """
    size = len(record) if size is None else size
    found: dict[str, tuple[int, int]] = {}
    names: list[str] = []
    for number, wire, fstart, fend in _fields(record, 0, size):
        if number != 1 or wire != 2:
            continue
        for n2, w2, estart, eend in _fields(record, fstart, fend):  # Features: map entries
            if n2 != 1 or w2 != 2:
                continue
            key, value = None, None
            for n3, w3, s3, e3 in _fields(record, estart, eend):
                if n3 == 1 and w3 == 2:
                    if e3 > len(record):
                        raise _Short("a feature name runs past the bytes read")
                    key = bytes(record[s3:e3]).decode("utf-8", "replace")
                elif n3 == 2 and w3 == 2:
                    value = (s3, e3)
            if key is not None:
                names.append(key)
            if key in (image_key, label_key) and value is not None:
                found[key] = value
    missing = [k for k in (image_key, label_key) if k not in found]
    if missing:
        shown = ", ".join(sorted(names)[:12]) + (" ..." if len(names) > 12 else "")
        raise ValueError(f"the Example has no {' or '.join(missing)} feature (its features: {shown or 'none'}); "
                         "name the image and label features with image_key= and label_key= (TensorFlow "
                         "Datasets' sets: image_key='image', label_key='label')")
    image = _values(record, *found[image_key])
    if image[0] != 1 or len(image[1]) != 1:
        raise ValueError(f"the Example's {image_key} is {_described(image)}, not one bytes value")
    offset, end = image[1][0]
    label = _values(record, *found[label_key])
    if label[0] != 3 or len(label[1]) != 1:
        raise ValueError(f"the Example's {label_key} is {_described(label)}, not one int64 value (a class number)")
    value = label[1][0]
    if value >= 1 << 63:
        value -= 1 << 64
    return offset, end - offset, value


def _values(record: bytes | memoryview, start: int, end: int) -> tuple[int, list]:
    """A Feature's kind (its field number: 1 bytes, 2 float, 3 int64; 0 when empty) and
    its values: ``(start, end)`` of each bytes value, or each int64."""
    kind, values = 0, []
    for number, wire, s, e in _fields(record, start, end):
        if wire != 2 or number not in _KINDS:
            continue
        kind = number
        for n2, w2, v2, e2 in _fields(record, s, e):
            if n2 != 1:
                continue
            if number == 1 and w2 == 2:
                values.append((v2, e2))
            elif number == 3 and w2 == 0:
                values.append(v2)
            elif number == 3 and w2 == 2:  # packed int64s
                pos = v2
                while pos < e2:
                    item, pos = _read_varint(record, pos)
                    values.append(item)
            elif number == 2:
                values += [0.0] * ((e2 - v2) // 4 if w2 == 2 else 1)
    return kind, values


def _described(feature: tuple[int, list]) -> str:
    kind, values = feature
    if kind in (0, 2):
        return "an empty feature" if kind == 0 else "a float_list"
    return f"an {_KINDS[kind]} of {len(values)} values" if kind == 3 else f"a {_KINDS[kind]} of {len(values)} values"


# -- files --------------------------------------------------------------------------

class TFRecordWriter:
    """Writes one TFRecord shard of Examples (:func:`encode_example`) and DALI's index
    file ``PATH.idx`` (``tfrecord2idx``'s format: ``offset size`` per record).

    Args:
        path: the shard file to write (replaced if it exists).
        index_path: where to write the index (default ``path + ".idx"``; None: no index).
    """

    def __init__(self, path: str | os.PathLike[str], index_path: str | os.PathLike[str] | None = "") -> None:
        self.path = Path(path)
        self.index_path = None if index_path is None else Path(index_path or f"{self.path}.idx")
        self._file = open(self.path, "wb")  # noqa: SIM115 - closed in close()
        self._records: list[tuple[int, int]] = []
        self.nbytes = 0
        self.count = 0

    def add(self, key: str, image: bytes | np.ndarray, ext: str, label: int) -> None:
        """Append one sample (``key`` is not stored: records are numbered).

        Args:
            key: unused (the same call as :class:`~gpufeed.datasets.shards.webdataset.TarShardWriter`).
            image: the encoded image bytes.
            ext: the image's extension (``"jpg"`` is stored as format ``"jpeg"``).
            label: the class number.
        """
        fmt = {"jpg": "jpeg", "tif": "tiff"}.get(ext.lower(), ext.lower())
        self.write_record(encode_example(bytes(image), label, fmt))
        self.count += 1

    def write_record(self, data: bytes) -> None:
        """Append one framed record (length, its masked CRC, data, its masked CRC)."""
        length = struct.pack("<Q", len(data))
        framed = length + struct.pack("<I", masked_crc32c(length)) + data + struct.pack("<I", masked_crc32c(data))
        self._file.write(framed)
        self._records.append((self.nbytes, len(framed)))
        self.nbytes += len(framed)

    def close(self) -> None:
        """Close the file and write the index."""
        if self._file.closed:
            return
        self._file.close()
        if self.index_path is not None:
            write_index(self.index_path, self._records)


def write_index(path: str | os.PathLike[str], records: list[tuple[int, int]]) -> None:
    """Write a DALI TFRecord index: one ``offset size`` line per record (whole framed
    record, header and CRCs included, as ``tfrecord2idx`` writes)."""
    Path(path).write_text("".join(f"{o} {s}\n" for o, s in records))


def read_index(path: str | os.PathLike[str]) -> list[tuple[int, int]]:
    """``(offset, size)`` per record from a DALI TFRecord index.

    Raises:
        ValueError: a line that is not two integers (its number is named).
    """
    out = []
    for lineno, line in enumerate(Path(path).read_text().splitlines(), 1):
        if not line.strip():
            continue
        try:
            offset, size = (int(x) for x in line.split())
        except ValueError:
            raise ValueError(f"{path}:{lineno}: expected 'offset size', got {line!r}") from None
        out.append((offset, size))
    return out


def looks_like_tfrecord(head: bytes) -> bool:
    """Whether ``head`` (a file's first bytes) starts with a TFRecord header: a length and
    its masked CRC."""
    return len(head) >= _HEADER and struct.unpack("<I", head[8:12])[0] == masked_crc32c(head[:8])


def scan_records(path: str, storage: Storage = LOCAL) -> list[tuple[int, int]]:
    """``(offset, size)`` of each framed record, by reading the 12-byte record headers.

    Raises:
        ValueError: a GZIP-compressed file (``TFRecordOptions(compression_type="GZIP")``),
            or a length whose CRC does not match (not a TFRecord file, or corrupt, or
            ZLIB-compressed).
        EOFError: the file ends inside a record.
    """
    end = storage.size(path)
    out = []
    pos = 0
    while pos < end:
        head = storage.read_at(path, pos, min(_HEADER, end - pos)).tobytes()
        # Compressed data is told only where the record header is wrong: a first record
        # whose length begins with gzip's two bytes (35,615 bytes, ...) is a record.
        if pos == 0 and not looks_like_tfrecord(head) and compression_of_bytes(head) == "gzip":
            from gpufeed.datasets.shards import compressed_shard_error

            raise compressed_shard_error(path, "GZIP-compressed TFRecords (compression_type='GZIP')")
        if len(head) < _HEADER:
            raise EOFError(f"{path}: the file ends inside the record header at offset {pos}")
        (length,) = struct.unpack("<Q", head[:8])
        if struct.unpack("<I", head[8:])[0] != masked_crc32c(head[:8]):
            if pos == 0 and head[:1] == b"\x78" and int.from_bytes(head[:2], "big") % 31 == 0:
                raise ValueError(f"{path}: not a TFRecord file: it looks ZLIB-compressed "
                                 "(compression_type='ZLIB'), which gpufeed and DALI's reader do not read; "
                                 "rewrite it uncompressed")
            raise ValueError(f"{path}: bad record length CRC at offset {pos} (not a TFRecord file, or corrupt)")
        size = _HEADER + length + _FOOTER
        if pos + size > end:
            raise EOFError(f"{path}: the file ends inside the record at offset {pos}")
        out.append((pos, size))
        pos += size
    return out


class TFRecordShards(ShardSource):
    """The samples of TFRecord shards of ``tf.train.Example`` records holding an encoded
    image (a bytes feature, ``image/encoded`` unless told) and a label (an int64 feature
    of one value, ``image/class/label`` unless told); other features (``image/height``,
    ``image/filename``, ``image/object/bbox/*`` ...) are ignored.

    Each shard is indexed when the source is made (record offsets from ``SHARD.idx`` when
    present, else from the record headers), and each record's Example is parsed then for
    the label and the image bytes' position, reading only its first bytes where the
    fields before the image hold the label (see :meth:`_parse`).
    :meth:`read` is then one ``read_at`` of just the image bytes.

    Args:
        files: the shard paths, in order.
        storage: how bytes are read.
        image_key: the image feature (default ``image/encoded``, TensorFlow's ImageNet
            conversion; ``image`` in TensorFlow Datasets' sets).
        label_key: the label feature (default ``image/class/label``; ``label`` in
            TensorFlow Datasets' sets).

    Raises:
        ValueError: a record with a bad CRC or an Example without the two features (shard
            and record named, with the features it has); compressed files; no shards; no
            records (no samples).
    """

    format = "tfrecord"

    def __init__(self, files: list[str], storage: Storage = LOCAL, *, image_key: str | None = None,
                 label_key: str | None = None) -> None:
        super().__init__(files, storage)
        for name, value in (("image_key", image_key), ("label_key", label_key)):
            if value is not None and (not isinstance(value, str) or not value.strip()):
                raise ValueError(f"{name} must be a TFRecord feature name such as 'image/encoded' or 'label'; "
                                 f"got {value!r}")
        self.image_key = IMAGE_KEY if image_key is None else image_key
        self.label_key = LABEL_KEY if label_key is None else label_key
        self._keys_differ({"image_key": self.image_key, "label_key": self.label_key},
                          {"image_key": IMAGE_KEY, "label_key": LABEL_KEY})
        shard_of, numbers, offsets, sizes, labels, counts = [], [], [], [], [], []
        self._records: list[list[tuple[int, int]]] = []
        for s, path in enumerate(self._files):
            records = self._index(path)
            self._records.append(records)
            for k, (offset, size) in enumerate(records):
                try:
                    start, nbytes, label = self._parse(path, k, offset, size)
                except ValueError as exc:
                    raise ValueError(f"{path}: record #{k} at offset {offset}: {exc}") from None
                shard_of.append(s)
                numbers.append(k)
                offsets.append(offset + _HEADER + start)
                sizes.append(nbytes)
                labels.append(label)
            counts.append(len(records))
        self._numbers = np.asarray(numbers, dtype=np.int64)
        self._located(shard_of, offsets, sizes, labels, counts)

    def _parse(self, path: str, k: int, offset: int, size: int) -> tuple[int, int, int]:
        """``(image offset in the data, image size, label)`` of one framed record.

        Only the record's first bytes are read when the fields before the image hold the
        label (as :func:`encode_example` orders them): opening a dataset does not read all
        its images. Records read whole (small ones, or ones whose image comes first) have
        their data CRC checked too; the length CRC is always checked.
        """
        head = self.storage.read_at(path, offset, min(size, _HEADER + _PREFIX))
        (length,) = struct.unpack("<Q", head[:8].tobytes())
        if (struct.unpack("<I", head[8:12].tobytes())[0] != masked_crc32c(head[:8])
                or length != size - _HEADER - _FOOTER):
            raise ValueError("the length or its CRC does not match (corrupt, or a stale .idx file)")
        if len(head) < size:
            try:
                return parse_example(memoryview(head)[_HEADER:], length, image_key=self.image_key,
                                     label_key=self.label_key)
            except _Short:
                pass  # a field lies beyond the prefix: read the whole record
        framed = self.storage.read_at(path, offset, size) if len(head) < size else head
        data = memoryview(framed)[_HEADER: size - _FOOTER]
        if struct.unpack("<I", framed[size - _FOOTER:].tobytes())[0] != masked_crc32c(data):
            raise ValueError("the data CRC does not match (corrupt)")
        return parse_example(data, image_key=self.image_key, label_key=self.label_key)

    def _index(self, path: str) -> list[tuple[int, int]]:
        # A stale index is refused by its last record not ending at the file's end, or by
        # the CRC checks on reading.
        return self._entries(path, read_index, lambda records, size: records[-1][0] + records[-1][1] == size,
                             lambda p: scan_records(p, self.storage), lambda record: record)

    def _tag(self, index: int) -> str:
        return f"#{self._numbers[index]}"

    def _write_index(self, path: str, shard: int) -> None:
        write_index(path, self._records[shard])
