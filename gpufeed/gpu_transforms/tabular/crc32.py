"""CRC32 (zlib's, bit for bit ``zlib.crc32``) of every value of an Arrow text array, in numpy,
or of a cuDF text column's device buffers in cupy with the same code (:func:`array_module`):
the kernel of :class:`~gpufeed.gpu_transforms.tabular.categorical.HashBucket`'s vectorised path.

How: CRC32 is affine over GF(2). For a text of ``L`` bytes,
``crc32(text) == crc32(bytes(L)) ^ XOR_j E[j][byte at distance j from its end]``, where
``E[0]`` is zlib's byte table and ``E[j+1] = E[0][E[j] & 0xFF] ^ (E[j] >> 8)`` (the
contribution of one byte, shifted through ``j`` zero bytes). So no value waits on the one
before it: one numpy step per distance from the end, each a gather of that byte of every
text still long enough (the texts are ordered longest first, so those are a prefix, which
shrinks as short texts finish), one table look-up and one XOR. The few longest texts go to
``zlib.crc32`` itself when that costs less than the steps they alone would need (a column of
short ids with one 1 MB text takes one zlib call, not a million steps).

Measured (1M values, the kernel alone, this 2-core machine): 8-byte ids ~16 ms, integers of
1 to 6 digits cast to text ~21 ms (the cast ~12 ms more). The forward form (one step per
byte position, ``T[(crc ^ b) & 0xFF] ^ (crc >> 8)``) took ~23 ms; two bytes per step (a
65536-entry table per distance) gained nothing once the byte pairs were built; one flat pass
over every byte with ``bitwise_xor.reduceat`` took 35-44 ms.

On cupy each numpy call is its cupy namesake (checked against cupy 14.2's sources:
``argsort`` takes ``kind="stable"`` and is always stable, thrust's ``stable_sort_by_key``;
``partition`` may sort the whole array, which is a partition too; ``bincount(minlength=)``,
``take`` with uint8 indices, ``cumsum``, in-place XOR on a slice). The byte tables go to the
GPU once; the texts left to ``zlib.crc32`` are copied to the host, those alone. Not yet run
on a GPU (none here): correct by reading, its speed unmeasured.
"""

from __future__ import annotations

import functools
import zlib
from collections.abc import Iterator
from typing import Any

import numpy as np

#: zlib's CRC32 polynomial, reflected.
_POLY = 0xEDB88320


def _byte_table() -> np.ndarray:
    table = np.arange(256, dtype=np.uint32)
    for _ in range(8):
        table = np.where(table & 1, (table >> 1) ^ np.uint32(_POLY), table >> 1).astype(np.uint32)
    return table


_TABLE = _byte_table()
#: Rows of E (module docstring) and CRCs of zero bytes computed once, on first use.
_CACHED = 256


@functools.cache
def _cached_rows() -> np.ndarray:
    rows = np.empty((_CACHED, 256), dtype=np.uint32)
    rows[0] = _TABLE
    for j in range(1, _CACHED):
        rows[j] = _TABLE[rows[j - 1] & 0xFF] ^ (rows[j - 1] >> 8)
    return rows


@functools.cache
def _cached_zeros() -> np.ndarray:
    return _zero_crcs(_CACHED, [0])


def _zero_crcs(longest: int, start: list[int]) -> np.ndarray:
    crcs = list(start)
    while len(crcs) <= longest:
        crcs.append(zlib.crc32(b"\0", crcs[-1]))
    return np.asarray(crcs, dtype=np.uint32)


def _zeros(longest: int) -> np.ndarray:
    """``zlib.crc32(bytes(L))`` for L in 0 .. longest, as uint32 (numpy)."""
    cached = _cached_zeros()
    if longest < len(cached):
        return cached[:longest + 1]
    return _zero_crcs(longest, cached.tolist())


def array_module(array: Any) -> Any:
    """The array module of ``array``: cupy for a cupy array (imported only then), numpy for
    anything else. :func:`crc32_buffers` runs the same code with either."""
    if type(array).__module__.partition(".")[0] == "cupy":
        import cupy

        return cupy
    return np


def _host(array: Any) -> np.ndarray:
    """``array`` in host memory: a numpy array as it is, a cupy array copied (``.get()``)."""
    return array if array_module(array) is np else array.get()


@functools.cache
def _device_rows(device: int) -> Any:
    """:func:`_cached_rows` copied once to that GPU (256 kB)."""
    import cupy

    with cupy.cuda.Device(device):
        return cupy.asarray(_cached_rows())


def _cached_rows_on(xp: Any) -> Any:
    if xp is np:
        return _cached_rows()
    return _device_rows(xp.cuda.Device().id)


def _rows(count: int, xp: Any = np) -> Iterator[Any]:
    """E[0], E[1], ... E[count - 1]: each byte value's CRC contribution at that distance from
    the text's end, as arrays of ``xp``."""
    cached = _cached_rows_on(xp)
    yield from cached[:count]
    table, row = cached[0], cached[-1]
    for _ in range(len(cached), count):
        row = table[row & 0xFF] ^ (row >> 8)
        yield row


#: Rough costs behind the choice of texts left to ``zlib.crc32``: one numpy step (its fixed
#: part) and one zlib call from Python, in the same unit (measured with numpy; on cupy a
#: step is a few kernel launches and a zlib call also copies its text to the host, a
#: ratio not measured: no GPU here).
_STEP_COST, _ZLIB_COST = 5.0, 1.0
#: At most this many of the longest texts are considered for ``zlib.crc32``.
_MOST_ZLIB = 4096


def crc32_buffers(offsets: Any, data: Any) -> Any:
    """``zlib.crc32`` of each text ``data[offsets[i]:offsets[i + 1]]`` (offsets as in an Arrow
    string array, any start), as uint32; numpy arrays or cupy arrays (both on one GPU: the
    result is a cupy array there, computed by the same code, :func:`array_module`).

    On cupy the few texts left to ``zlib.crc32`` are copied to the host one by one (those
    alone); a handful of scalars (the longest length, the step counts) are read back too."""
    xp = array_module(data)
    offsets = offsets.astype(np.int64, copy=False)
    lengths = xp.diff(offsets)
    n = len(lengths)
    if n == 0:
        return xp.zeros(0, dtype=np.uint32)
    ends = offsets[1:] - 1  # each text's last byte
    longest = int(lengths.max())
    # The `skip` longest texts go to zlib where the steps they alone need cost more.
    top = min(n, _MOST_ZLIB)
    # tallest[k]: the (k+1)-th longest length, what the steps still cost after k texts left
    # to zlib; 0 only past the last text (with more texts, a 0 at `top` left every text
    # after the `top` longest out of the steps: CRC 0).
    known = min(n, top + 1)
    tallest = np.zeros(top + 1, dtype=np.int64)
    tallest[:known] = _host(-xp.sort(-xp.partition(lengths, n - known)[n - known:]))
    skip = int(np.argmin(_ZLIB_COST * np.arange(top + 1) + _STEP_COST * tallest))
    steps = int(tallest[skip])
    if skip == 0 and int(lengths.min()) == longest:  # one length (ids): every text in every step
        out = xp.full(n, _zeros(longest)[longest], dtype=np.uint32)
        for j, row in enumerate(_rows(longest, xp)):
            out ^= xp.take(row, data[ends - j])
        return out
    # Longest first (a radix sort of the lengths capped at steps + 1, so that the texts
    # longer than `steps` come first, and go to zlib, even where others are `steps` long).
    key = xp.minimum(lengths, steps + 1)
    narrow = np.uint8 if steps < 255 else np.uint16 if steps < 65535 else np.int64
    order = xp.argsort((steps + 1 - key).astype(narrow), kind="stable")
    sorted_ends = ends[order]
    # active[j]: how many texts are longer than j, the first of the order.
    active = _host(n - xp.cumsum(xp.bincount(key, minlength=steps + 1)))
    zeros = _zeros(steps)
    acc = (zeros if xp is np else xp.asarray(zeros))[xp.minimum(key[order], steps)]
    for j, row in enumerate(_rows(steps, xp)):
        m = int(active[j])
        if m <= skip:
            break
        acc[skip:m] ^= xp.take(row, data[sorted_ends[skip:m] - j])
    out = xp.empty(n, dtype=np.uint32)
    out[order] = acc
    if skip:
        picked = order[:skip]
        starts, stops = _host(offsets[picked]).tolist(), _host(offsets[picked + 1]).tolist()
        out[picked] = xp.asarray([zlib.crc32(_host(data[a:b])) for a, b in zip(starts, stops, strict=True)],
                                 dtype=np.uint32)
    return out


def arrow_text_crc32(array: Any) -> np.ndarray:
    """``zlib.crc32`` of each value's UTF-8 bytes of an Arrow string (or binary) array, chunked
    or not, ``string``/``large_string``/``string_view``; uint32, whatever a missing slot gives."""
    import pyarrow as pa

    chunks = array.chunks if isinstance(array, pa.ChunkedArray) else [array]
    parts = [_chunk_crc32(chunk) for chunk in chunks]
    if not parts:
        return np.zeros(0, dtype=np.uint32)
    return parts[0] if len(parts) == 1 else np.concatenate(parts)


def _chunk_crc32(array: Any) -> np.ndarray:
    import pyarrow as pa

    kind = array.type
    if pa.types.is_string_view(kind) or pa.types.is_binary_view(kind):
        array = array.cast(pa.large_binary())
    elif not (pa.types.is_string(kind) or pa.types.is_large_string(kind)
              or pa.types.is_binary(kind) or pa.types.is_large_binary(kind)):
        raise TypeError(f"arrow_text_crc32: a string or binary array, got {kind}")
    wide = pa.types.is_large_string(array.type) or pa.types.is_large_binary(array.type)
    offset_type = np.int64 if wide else np.int32
    _, offsets_buffer, data_buffer = array.buffers()
    if len(array) == 0:
        return np.zeros(0, dtype=np.uint32)
    offsets = np.frombuffer(offsets_buffer, dtype=offset_type, count=len(array) + 1, offset=array.offset *
                            np.dtype(offset_type).itemsize)
    data = np.frombuffer(data_buffer, dtype=np.uint8) if data_buffer is not None else np.zeros(0, np.uint8)
    return crc32_buffers(offsets, data)
