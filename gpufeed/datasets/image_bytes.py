"""Byte-level image checks: a file's format from its first bytes, the faults that keep it
from decoding (empty, truncated, an unknown format), its size from its header, and PIL's
words for a failure.

The loaders of both backends and ``gpufeed convert`` judge files here, so a file is found
bad the same way whichever one reads it, before any decoder sees it.
"""

from __future__ import annotations

import re
import zlib
from collections.abc import Iterator

import numpy as np

_SIGNATURES = (
    (b"\xff\xd8\xff", "jpeg"),
    (b"\x89PNG\r\n\x1a\n", "png"),
    (b"BM", "bmp"),
    (b"II*\x00", "tiff"),
    (b"MM\x00*", "tiff"),
    (b"II+\x00", "tiff"),  # BigTIFF
    (b"MM\x00+", "tiff"),
)


def image_format(data: bytes | memoryview) -> str | None:
    """The image format named by the file's first bytes, or None."""
    head = bytes(data[:12])
    if head[:4] == b"RIFF" and head[8:12] == b"WEBP":
        return "webp"
    if len(head) > 2 and head[0:1] == b"P" and head[1] in b"123456" and head[2] in b" \t\r\n":
        return "pnm"  # Netpbm: .pbm, .pgm, .ppm (ImageFolder loads .pgm and .ppm)
    return next((fmt for sig, fmt in _SIGNATURES if head.startswith(sig)), None)


def sample_fault(data: bytes | memoryview | str, pixels: bool) -> str | None:
    """Why a sample as read cannot be decoded, or None: a failed read's reason (text, as
    ``read_or_reason`` gives it), else :func:`undecodable_reason` for encoded images
    (``pixels``: decoded pixels of a raw cache, which have no bytes to check)."""
    if isinstance(data, str):
        return data
    return None if pixels else undecodable_reason(data)


def undecodable_reason(data: bytes | memoryview) -> str | None:
    """Why these bytes cannot be an intact image, or None when they may be one.

    Cheap checks only (the bytes are already in memory): an empty file, an unknown
    signature, a JPEG cut short (no end-of-image marker near its end; in entropy-coded
    data 0xFF is always stuffed, so 0xFFD9 only appears as a real marker). What passes
    here can still fail in a decoder; the loaders handle that too.
    """
    if len(data) == 0:
        return "empty file (0 bytes)"
    fmt = image_format(data)
    if fmt is None:
        head = bytes(data[:6])
        if head in (b"GIF87a", b"GIF89a"):  # an image, but not one DALI decodes
            return "unsupported image format (GIF)"
        return "not an image (unknown file signature)"
    if fmt == "jpeg" and bytes(data[-1024:]).rfind(b"\xff\xd9") < 0 and not _jpeg_ends(memoryview(data).cast("B")):
        return "truncated JPEG (no end-of-image marker)"
    if fmt == "png":
        return _png_fault(memoryview(data).cast("B"))
    return None


def _png_fault(mv: memoryview) -> str | None:
    """Why a PNG's chunks are not intact, or None: a chunk cut short, no end chunk, or a
    critical chunk (header, palette, image data) whose CRC does not match its bytes.

    Every chunk carries a CRC-32, so corrupt bytes are found for a tenth of a millisecond
    per megabyte, before any decoder sees them: libpng, under torchvision's PNG decoder,
    crashed the process on them ("IDAT: CRC error"). Ancillary chunks (text, colour
    profile) with a bad CRC are ignored, as libpng ignores them.
    """
    pos = 8
    while pos + 12 <= len(mv):
        length = int.from_bytes(mv[pos: pos + 4], "big")
        kind = bytes(mv[pos + 4: pos + 8])
        end = pos + 8 + length
        if end + 4 > len(mv):
            return f"truncated PNG (its {kind.decode('latin-1')} chunk is cut short)"
        critical = kind[:1].isupper()
        if critical and zlib.crc32(mv[pos + 4: end]) != int.from_bytes(mv[end: end + 4], "big"):
            return f"corrupt PNG (CRC error in its {kind.decode('latin-1')} chunk)"
        if kind == b"IEND":
            return None
        pos = end + 4
    return "truncated PNG (no IEND chunk)"


def _jpeg_markers(mv: memoryview) -> Iterator[tuple[int, int]]:
    """``(marker, position)`` of a JPEG's header segments, in order, up to its first scan
    (0xDA, start of scan) or the first bytes that do not chain as segments."""
    pos, end = 2, len(mv) - 3
    while pos < end:
        if mv[pos] != 0xFF:
            return  # stray bytes between segments (some cameras write them)
        marker = mv[pos + 1]
        if marker == 0xFF:  # fill byte
            pos += 1
            continue
        yield marker, pos
        if marker == 0xDA:
            return
        if marker in (0xD8, 0x01) or 0xD0 <= marker <= 0xD7:  # markers without a length
            pos += 2
            continue
        pos += 2 + int.from_bytes(mv[pos + 2: pos + 4], "big")


def _jpeg_ends(mv: memoryview) -> bool:
    """Whether a JPEG's image data ends with an end-of-image marker somewhere after its
    first scan: phones append a video ("motion photos") or padding after it, which every
    decoder ignores. Searched from the scan on, so an EXIF thumbnail's own marker (in the
    header) does not count; a header that does not chain is searched whole."""
    start = next((pos for marker, pos in _jpeg_markers(mv) if marker == 0xDA), 2)
    return bytes(mv[start:]).find(b"\xff\xd9") >= 0


#: JPEG start-of-frame markers (baseline, progressive, lossless, arithmetic): they hold
#: the frame's height and width.
_JPEG_SOF = frozenset(range(0xC0, 0xD0)) - {0xC4, 0xC8, 0xCC}


def image_size(data: np.ndarray) -> tuple[int, int] | None:
    """``(height, width)`` of encoded image bytes from their header, or None if unreadable.

    JPEG (the start-of-frame segment) and PNG (IHDR) are read directly, a few
    microseconds; other formats, and JPEGs whose segments do not chain cleanly, go through
    PIL, which reads only the header. Sizes are as
    stored, before any EXIF rotation (neither backend applies EXIF orientation).
    """
    mv = memoryview(data).cast("B")
    fmt = image_format(mv)
    if fmt == "png" and len(mv) >= 24:
        return int.from_bytes(mv[20:24], "big"), int.from_bytes(mv[16:20], "big")
    if fmt == "jpeg":
        # Stray bytes between segments end the walk: PIL scans on.
        for marker, pos in _jpeg_markers(mv):
            if marker in _JPEG_SOF and pos + 9 <= len(mv):
                return int.from_bytes(mv[pos + 5: pos + 7], "big"), int.from_bytes(mv[pos + 7: pos + 9], "big")
    import io

    from PIL import Image

    try:
        with Image.open(io.BytesIO(mv.tobytes())) as img:
            return img.height, img.width
    except Exception:  # noqa: BLE001 - any header PIL cannot read means "no size"
        return None


def pil_reason(data: np.ndarray) -> str | None:
    """PIL's words for why ``data`` does not decode, or None when PIL decodes it.

    Used only after a decoder failed (DALI's messages name its codec's error code, not the
    fault), so the report says what is wrong with the file, e.g. "image file is truncated".
    """
    import io

    from PIL import Image

    try:
        with Image.open(io.BytesIO(data.tobytes())) as img:
            img.load()
    except Exception as exc:  # noqa: BLE001 - any failure is the diagnosis we want
        return without_addresses((str(exc).splitlines() or [type(exc).__name__])[0])
    return None


def without_addresses(words: str) -> str:
    """A decoder's message without the memory addresses PIL puts in it ("cannot identify
    image file <_io.BytesIO object at 0x7f...>"): they differ per run, and so did the
    reason a file was skipped for."""
    return re.sub(r" <[^<>]* at 0x[0-9a-fA-F]+>", "", words)


def read_bytes(path: str) -> np.ndarray:
    """The file's bytes as a writable uint8 array (what DALI and torch both take without a copy)."""
    return np.fromfile(path, dtype=np.uint8)
