"""Byte-level image checks: a file's format from its first bytes, the faults that keep it
from decoding (empty, truncated, an unknown format, a JPEG marker libjpeg refuses), its
size from its header, and PIL's words for a failure.

The loaders of both backends and ``gpufeed convert`` judge files here, so a file is found
bad the same way whichever one reads it, before any decoder sees it.
"""

from __future__ import annotations

import re
import zlib
from bisect import bisect_left
from collections.abc import Iterator
from typing import NamedTuple

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


#: TIFF tags read by :func:`tiff_beyond_dali`.
_COMPRESSION, _PHOTOMETRIC, _SAMPLES_PER_PIXEL, _PLANAR = 259, 262, 277, 284
_BITS_PER_SAMPLE, _SAMPLE_FORMAT, _ORIENTATION = 258, 339, 274
#: Compressions DALI's TIFF decoder reads: none, CCITT fax (2, 3, 4), LZW, JPEG,
#: Deflate (Adobe and old), PackBits. Others (old-style JPEG 6, LZMA 34925, ZSTD 50000,
#: WebP 50001, JPEG 2000 ...) failed there on files PIL reads.
_DALI_TIFF_COMPRESSIONS = frozenset((1, 2, 3, 4, 5, 7, 8, 32773, 32946))
#: Photometric interpretations DALI decodes to the RGB PIL gives: WhiteIsZero,
#: BlackIsZero, RGB, palette, CMYK (8-bit), YCbCr. CIELab (8) and the like came out as
#: other colours than PIL's, a missing tag failed.
_DALI_TIFF_PHOTOMETRIC = frozenset((0, 1, 2, 3, 5, 6))


def tiff_beyond_dali(data: bytes | memoryview | np.ndarray) -> bool:
    """Whether ``data`` is a classic TIFF that DALI's decoder fails on, or decodes to other
    pixels than PIL (the torch backend's decoder), so that the DALI backend hands it over
    decoded by PIL instead (:func:`gpufeed.pipelines.feeds.dali_input`).

    Beyond DALI: samples that are not unsigned 8 or 16 bits nor float32 (bilevel,
    2/4-bit, 32-bit or signed integers: "nvImageCodec failure", "Invalid sample_type");
    16-bit images with an alpha or extra channel or stored plane by plane (DALI returned
    wrong colours for them, no error); a palette with an alpha channel; 16-bit CMYK;
    photometric interpretations other than those in :data:`_DALI_TIFF_PHOTOMETRIC`
    (CIELab came out in other colours), or none; compressions DALI does not read
    (:data:`_DALI_TIFF_COMPRESSIONS`); an Orientation tag other than 1 (top-left), which
    PIL, and so torchvision's ImageFolder, applies on load (a TIFF's own tag, unlike a
    JPEG's EXIF orientation) and DALI's decoder, told not to apply EXIF orientation, did
    not. Only the first image's header is read (a few dozen bytes); BigTIFF and anything
    unreadable answer False (DALI then decides, as before).
    """
    tags = _tiff_tags(data)
    if tags is None:
        return False
    if tags.get(_ORIENTATION, {1}) != {1}:
        return True  # PIL turns the image by it on load; DALI (adjust_orientation=False) did not
    bits = tags.get(_BITS_PER_SAMPLE, {1})  # absent: 1 bit per sample (the TIFF default)
    formats = tags.get(_SAMPLE_FORMAT, {1})
    samples = max(tags.get(_SAMPLES_PER_PIXEL, {1}))
    photometric = tags.get(_PHOTOMETRIC, set())
    if not tags.get(_COMPRESSION, {1}) <= _DALI_TIFF_COMPRESSIONS:
        return True
    if len(photometric) != 1 or not photometric <= _DALI_TIFF_PHOTOMETRIC:
        return True
    if bits == {32} and formats == {3}:  # float32: DALI decodes it as PIL does
        return False
    if not bits <= {8, 16} or not formats <= {1}:
        return True
    if 16 in bits and samples > 1 and (samples != 3 or tags.get(_PLANAR, {1}) != {1} or photometric == {5}):
        return True  # 16-bit with alpha, plane by plane, or CMYK: wrong colours in DALI
    return photometric == {3} and samples > 1  # a palette with alpha


def _tiff_tags(data: bytes | memoryview | np.ndarray) -> dict[int, set[int]] | None:
    """The first image's tags :func:`tiff_beyond_dali` reads (SHORT values, or one LONG),
    each as a set of its values; None for anything but a classic TIFF with a readable
    first directory (BigTIFF included: None)."""
    mv = memoryview(data).cast("B")
    head = bytes(mv[:8])
    if head[:4] not in (b"II*\x00", b"MM\x00*"):
        return None
    order = "little" if head[:2] == b"II" else "big"

    def number(at: int, size: int) -> int:
        if at < 0 or at + size > len(mv):
            raise IndexError(at)
        return int.from_bytes(mv[at:at + size], order)

    wanted = (_BITS_PER_SAMPLE, _SAMPLE_FORMAT, _COMPRESSION, _PHOTOMETRIC, _SAMPLES_PER_PIXEL, _PLANAR,
              _ORIENTATION)
    try:
        ifd = number(4, 4)
        tags = {}
        for k in range(number(ifd, 2)):
            entry = ifd + 2 + 12 * k
            tag, kind, count = number(entry, 2), number(entry + 2, 2), number(entry + 4, 4)
            if tag in wanted and kind == 3:  # SHORT values
                where = entry + 8 if count <= 2 else number(entry + 8, 4)
                tags[tag] = {number(where + 2 * i, 2) for i in range(min(count, 16))}
            elif tag in wanted and kind == 4 and count == 1:  # one LONG value
                tags[tag] = {number(entry + 8, 4)}
    except IndexError:
        return None
    return tags


def wider_than_8_bits(data: bytes | memoryview | np.ndarray) -> bool:
    """Whether ``data`` is a PNG, a TIFF or a Netpbm file (.pgm, .ppm) of more than 8 bits a
    sample (16-bit, float).
    The loaders, DALI and TensorFlow give such an image's pixels scaled to 8 bits; a reader
    that converts with PIL (the ``webdataset`` library's ``decode("rgb8")``) clips them
    instead (a 16-bit 100 * 257 reads 255), so ``gpufeed convert`` writes it as an 8-bit
    PNG (:func:`written_as_png`). Only the header is read."""
    fmt = image_format(data)
    if fmt == "png":
        mv = memoryview(data).cast("B")
        return len(mv) > 24 and bytes(mv[12:16]) == b"IHDR" and mv[24] > 8  # IHDR's bit depth
    if fmt == "tiff":
        tags = _tiff_tags(data)
        return tags is not None and max(tags.get(_BITS_PER_SAMPLE, {1})) > 8
    if fmt == "pnm":
        return (_pnm_maxval(data) or 0) > 255
    return False


def _pnm_maxval(data: bytes | memoryview | np.ndarray) -> int | None:
    """A Netpbm file's largest sample value (its header's maxval: above 255, 16 bits a
    sample); None for bilevel P1/P4 files, which have none, or a header it cannot read."""
    head = bytes(memoryview(data).cast("B")[:512])
    if head[:2] not in (b"P2", b"P3", b"P5", b"P6"):
        return None
    # magic, width, height, maxval: whitespace-separated, '#' comments to the end of a line
    tokens = re.sub(rb"#[^\n\r]*", b" ", head[2:]).split()
    return int(tokens[2]) if len(tokens) > 2 and tokens[2].isdigit() else None


def written_as_png(data: bytes | memoryview | np.ndarray) -> bool:
    """Whether ``gpufeed convert`` writes ``data`` as a PNG of the pixels the loaders yield
    rather than as it is: what the DALI backend hands over decoded by PIL
    (:func:`beyond_dali`: BMPs, animated PNGs, TIFFs DALI misreads) and images of more
    than 8 bits a sample (:func:`wider_than_8_bits`), so that every reader of the shards
    (DALI's own, TensorFlow, the ``webdataset`` library) sees the loaders' pixels."""
    return beyond_dali(data) or wider_than_8_bits(data)


def beyond_dali(data: bytes | memoryview | np.ndarray) -> bool:
    """Whether the DALI backend hands ``data`` over decoded by the torch backend's decoder
    (PIL) rather than to DALI's decoder: a TIFF :func:`tiff_beyond_dali` names, every
    BMP and every animated PNG. DALI's BMP decoder failed on BMPs PIL reads (16 bits a pixel, 4-bit RLE, an RLE
    row running over), read a palette BMP with its palette missing in other colours, and
    decoded BMPs PIL refuses (bit masks PIL does not take): one decoder for BMP keeps the
    backends to the same pixels and the same skipped files. BMPs are uncompressed or
    RLE, so PIL's decode costs little. And every animated PNG (APNG): where its default
    image is not a frame of the animation DALI gave the first frame and PIL the default
    image; DALI failed on some APNGs PIL reads and read some PIL refuses."""
    fmt = image_format(data)
    if fmt == "png":
        return _png_animated(memoryview(data).cast("B"))
    return fmt == "bmp" or tiff_beyond_dali(data)


def _png_animated(mv: memoryview) -> bool:
    """Whether a PNG has an animation control chunk (``acTL``) before its image data."""
    for kind, _, _ in _png_chunks(mv):
        if kind == b"acTL":
            return True
        if kind == b"IDAT":
            return False
    return False


def _png_chunks(mv: memoryview) -> Iterator[tuple[bytes, int, int]]:
    """``(kind, start, end)`` of a PNG's chunks in order, up to ``IEND`` or the first chunk
    the file cuts short: the chunk is ``mv[start:end + 4]``, its data ``mv[start + 8:end]``,
    its CRC the 4 bytes at ``end``."""
    pos = 8
    while pos + 12 <= len(mv):
        end = pos + 8 + int.from_bytes(mv[pos: pos + 4], "big")
        kind = bytes(mv[pos + 4: pos + 8])
        if end + 4 > len(mv) or kind == b"IEND":
            return
        yield kind, pos, end
        pos = end + 4


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
    data 0xFF is always stuffed, so 0xFFD9 only appears as a real marker), a JPEG whose
    markers libjpeg stops on (:func:`jpeg_marker_fault`; the reason is then the torch
    backend's for the same file, ``"could not decode: <libjpeg's words>"``). What passes
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
    if fmt == "jpeg":
        mv = memoryview(data).cast("B")
        if bytes(mv[-1024:]).rfind(b"\xff\xd9") < 0 and not _jpeg_ends(mv):
            return "truncated JPEG (no end-of-image marker)"
        fault = jpeg_marker_fault(mv)
        return None if fault is None else f"could not decode: {fault}"
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
        if not kind.isalpha():  # not a chunk type: the bytes lost their chunk boundaries
            return f"corrupt PNG (no chunk type at byte {pos + 4}: {kind!r})"
        if end + 4 > len(mv):
            return f"truncated PNG (its {kind.decode('latin-1')} chunk is cut short)"
        critical = kind[:1].isupper()
        if critical and zlib.crc32(mv[pos + 4: end]) != int.from_bytes(mv[end: end + 4], "big"):
            return f"corrupt PNG (CRC error in its {kind.decode('latin-1')} chunk)"
        if kind == b"IEND":
            return None
        pos = end + 4
    return "truncated PNG (no IEND chunk)"


def _without(data: bytes | memoryview | np.ndarray, mv: memoryview,
             gaps: list[tuple[int, int]]) -> bytes | memoryview | np.ndarray:
    """``data`` without the byte ranges ``gaps`` (sorted, ``[lo, hi)`` of ``mv``, its bytes),
    as the same kind of object; ``data`` itself, uncopied, when there are none."""
    if not gaps:
        return data
    pieces, last = [], 0
    for lo, hi in gaps:
        pieces.append(mv[last:lo])
        last = hi
    pieces.append(mv[last:])
    joined = b"".join(pieces)
    return np.frombuffer(joined, dtype=np.uint8) if isinstance(data, np.ndarray) else joined


def png_without_bad_ancillary_chunks(data: bytes | memoryview | np.ndarray) -> bytes | memoryview | np.ndarray:
    """A PNG's bytes without the ancillary chunks (text, colour profile, ...) whose CRC does
    not match, or ``data`` itself when it has none (no copy; other formats too).

    Why: libpng (DALI's decoder) ignores such a chunk with a warning and decodes the
    image, while PIL (the torch backend's PNG decoder, and ``gpufeed convert``'s) refused
    the whole file ("cannot identify image file", "broken PNG file"), so the torch backend
    skipped photos the DALI backend yielded. Neither backend uses what those chunks hold.
    Critical chunks are judged by :func:`undecodable_reason` before this is called.
    """
    mv = memoryview(data).cast("B")
    if image_format(mv) != "png":
        return data
    gaps = [(pos, end + 4) for kind, pos, end in _png_chunks(mv)
            if kind[:1].islower() and zlib.crc32(mv[pos + 4: end]) != int.from_bytes(mv[end: end + 4], "big")]
    return _without(data, mv, gaps)


#: PNG chunks of text (tEXt, zTXt, iTXt): metadata no loader reads.
_PNG_TEXT = frozenset((b"tEXt", b"zTXt", b"iTXt"))


def png_without_text(data: bytes | memoryview | np.ndarray) -> bytes | memoryview | np.ndarray:
    """A PNG's bytes without its text chunks, or ``data`` itself when it has none.

    Why: PIL refuses a PNG whose compressed text inflates past ``MAX_TEXT_CHUNK`` (1 MB;
    "Decompressed data too large", e.g. a long XMP history) and libpng (DALI) decodes it;
    the torch backend retries such a file without its text (:func:`gpufeed.pipelines.torch_loader.decode_rgb`).
    """
    mv = memoryview(data).cast("B")
    if image_format(mv) != "png":
        return data
    return _without(data, mv, [(pos, end + 4) for kind, pos, end in _png_chunks(mv) if kind in _PNG_TEXT])


def png_text_beyond_pil(data: bytes | memoryview | np.ndarray) -> bool:
    """Whether PIL refuses a PNG for its text: a compressed chunk (``zTXt``, or ``iTXt`` with
    its compression flag) that inflates past ``PngImagePlugin.MAX_TEXT_CHUNK`` (1 MB), or
    text chunks that together pass ``MAX_TEXT_MEMORY`` (64 MB), counted as PIL counts them
    (each value's characters once decoded; chunks PIL passes over do not count; of an
    animated PNG, the text up to frame 1's ``fcTL``, as PIL loads frame 0 only). The torch
    backend then decodes it without its text, and ``gpufeed convert`` writes it so
    (:func:`png_without_text`), as readers that decode with PIL (``webdataset`` + PIL)
    refuse it otherwise. Inflates each chunk up to the per-chunk limit and no further."""
    mv = memoryview(data).cast("B")
    if image_format(mv) != "png":
        return False
    from PIL import PngImagePlugin

    used, animated, image_data = 0, _pil_animated(mv), False
    for kind, pos, end in _png_chunks(mv):
        if kind in (b"IDAT", b"fdAT"):
            image_data = True
        elif kind == b"fcTL" and animated and image_data:
            break  # PIL loads frame 0 and stops at the next frame's control chunk: no text past it
        if kind not in (b"tEXt", b"zTXt", b"iTXt"):
            continue
        found = _png_text_length(kind, bytes(mv[pos + 8: end]), PngImagePlugin.MAX_TEXT_CHUNK)
        if found is None:  # inflates past the per-chunk limit
            return True
        used += found
        if used > PngImagePlugin.MAX_TEXT_MEMORY:
            return True
    return False


def _pil_animated(mv: memoryview) -> bool:
    """Whether PIL opens a PNG as animated (``is_animated``), by its rules: an ``acTL``
    chunk before the image data with a frame count in 1 .. 2**31 (a second one voids it),
    whose frames, with the default image when no ``fcTL`` comes before the image data (not
    part of the animation), are more than one."""
    frames: int | None = None
    control = False
    for kind, pos, end in _png_chunks(mv):
        if kind in (b"IDAT", b"fdAT"):
            break
        if kind == b"acTL" and end - pos - 8 >= 8:
            count = int.from_bytes(mv[pos + 8: pos + 12], "big")
            frames = None if frames is not None else count if 0 < count <= 0x80000000 else None
        elif kind == b"fcTL":
            control = True
    return frames is not None and frames + (not control) > 1


def _png_text_length(kind: bytes, body: bytes, limit: int) -> int | None:
    """The characters PIL counts against ``MAX_TEXT_MEMORY`` for one text chunk (0 for a
    chunk it passes over), None when its compressed text inflates past ``limit``."""
    keyword, sep, rest = body.partition(b"\0")
    if kind == b"tEXt":
        return len(rest) if keyword else 0  # latin-1: a character a byte
    if kind == b"zTXt":
        if not sep or rest[:1] != b"\0":  # no text, or a method PIL refuses the file for
            return 0
        text = _inflated(rest[1:], limit)
        return None if text is None else len(text) if keyword else 0
    if len(rest) < 2 or rest[2:].count(b"\0") < 2:  # iTXt PIL passes over
        return 0
    flag, method = rest[0], rest[1]
    language, translated, text = rest[2:].split(b"\0", 2)
    if flag:
        if method:
            return 0
        text = _inflated(text, limit)
        if text is None:
            return None
    try:
        language.decode("utf-8"), translated.decode("utf-8")
        return len(text.decode("utf-8"))
    except UnicodeError:
        return 0


def _inflated(packed: bytes, limit: int) -> bytes | None:
    """``packed`` inflated, None past ``limit`` bytes; b"" where it does not inflate (PIL then
    keeps no text)."""
    inflater = zlib.decompressobj()
    try:
        text = inflater.decompress(packed, limit)
    except zlib.error:
        return b""
    return None if inflater.unconsumed_tail else text


def _jpeg_markers(mv: memoryview) -> Iterator[tuple[int, int, tuple[int, int]]]:
    """``(marker, position, stray)`` of a JPEG's header segments, in order, up to its first
    scan (0xDA, start of scan): the bytes ``mv[stray[0]:stray[1]]`` before the marker
    (empty: none) belong to no segment; the fill bytes (0xFF) after them and before the
    marker are allowed. Some cameras write such bytes between segments; libjpeg passes
    over them with a warning ("N extraneous bytes before marker"), as this walk does. Ends
    early where the lengths run past the bytes."""
    pos, end = 2, len(mv) - 3
    raw: bytes | None = None  # a copy to search in, made at the first stray byte only
    while pos < end:
        start = pos
        while pos < end and not (mv[pos] == 0xFF and mv[pos + 1] not in (0x00, 0xFF)):
            if mv[pos] != 0xFF:  # stray: jump to the next 0xFF (a broken header may lose
                raw = raw if raw is not None else mv.tobytes()  # sync for megabytes)
                found = raw.find(b"\xff", pos, end)
                pos = found if found >= 0 else end
            else:
                pos += 1  # fill bytes (0xFF before a marker), or 0xFF00
        if pos >= end:
            return
        fill = pos
        while fill > start and mv[fill - 1] == 0xFF:
            fill -= 1  # fill bytes before a marker are allowed: not stray
        marker = mv[pos + 1]
        yield marker, pos, (start, fill)
        if marker == 0xDA:
            return
        if marker in (0xD8, 0x01) or 0xD0 <= marker <= 0xD7:  # markers without a length
            pos += 2
            continue
        # A length under 2 (which counts itself) skips nothing more, as libjpeg reads it:
        # the length field is the segment's, not stray bytes.
        pos += 2 + max(int.from_bytes(mv[pos + 2: pos + 4], "big"), 2)


def jpeg_without_stray_bytes(data: bytes | memoryview | np.ndarray) -> bytes | memoryview | np.ndarray:
    """A JPEG's bytes without the stray bytes between its header segments, or ``data``
    itself when it has none (no copy; other formats too).

    Why: libjpeg (torchvision, PIL) decodes such a file with a warning, while DALI's
    parser refuses it ("Invalid marker"), so the DALI backend skipped files the torch
    backend yielded. Removing bytes that belong to no segment changes nothing libjpeg
    decodes; nor does removing an APPn or comment segment whose length field is under 2,
    which DALI's parser refuses too.
    """
    mv = memoryview(data).cast("B")
    if image_format(mv) != "jpeg":
        return data
    gaps = []
    for marker, pos, (lo, hi) in _jpeg_markers(mv):
        if hi > lo:
            gaps.append((lo, hi))
        if (0xE0 <= marker <= 0xEF or marker == 0xFE) and int.from_bytes(mv[pos + 2: pos + 4], "big") < 2:
            # An APPn or comment segment whose length field is under 2 (it counts itself):
            # libjpeg skips nothing more, DALI's parser refuses the file. It holds nothing.
            gaps.append((pos, pos + 4))
    return _without(data, mv, gaps)


def _jpeg_ends(mv: memoryview) -> bool:
    """Whether a JPEG's image data ends with an end-of-image marker somewhere after its
    first scan: phones append a video ("motion photos") or padding after it, which every
    decoder ignores. Searched from the scan on, so an EXIF thumbnail's own marker (in the
    header) does not count; a header that does not chain is searched whole."""
    start = next((pos for marker, pos, _ in _jpeg_markers(mv) if marker == 0xDA), 2)
    return bytes(mv[start:]).find(b"\xff\xd9") >= 0


#: libjpeg's words (libjpeg-turbo's jerror.h) for a segment whose length does not match
#: its fields.
_BAD_LENGTH = "Bogus marker length"
#: torchvision's words when libjpeg reads past the end of the bytes: its source manager
#: raises there, where libjpeg's own (DALI's) inserts an end-of-image marker and goes on.
_INCOMPLETE = "Image is incomplete or truncated"
#: Start-of-frame markers libjpeg decodes (sequential, progressive, lossless; Huffman or
#: arithmetic coded), and those it refuses (differential; 0xC8 is reserved).
_SOF_READ = frozenset((0xC0, 0xC1, 0xC2, 0xC3, 0xC9, 0xCA, 0xCB))
_SOF_REFUSED = frozenset((0xC5, 0xC6, 0xC7, 0xC8, 0xCD, 0xCE, 0xCF))
#: Segments libjpeg skips by their length: APP0-APP15, COM, DNL.
_SKIPPED = frozenset(range(0xE0, 0xF0)) | {0xFE, 0xDC}


class _Refused(Exception):
    """libjpeg's error on a marker, in its words (raised and caught inside
    :func:`jpeg_marker_fault`)."""


def jpeg_marker_fault(data: bytes | memoryview | np.ndarray) -> str | None:
    """The error libjpeg stops on when it reads this JPEG's markers, in its words, or None.

    libjpeg (under torchvision and PIL) raises on a marker it does not know ("Unsupported
    marker type 0x87": 0xFF then 0x02-0xBF, 0xDE, 0xDF or 0xF0-0xFD), a second
    start-of-image or start-of-frame, a table segment whose fields do not add up, a second
    scan in a one-scan image, and bytes that end before the end-of-image marker. In a
    baseline JPEG it meets them only after the last row is decoded, and DALI's CPU decoder
    returns that image (garbage from the damage on; libjpeg's error only printed on
    stderr): a folder gave the two backends different samples until both checked here.
    Damage libjpeg only warns about (corrupt entropy-coded data, a wrong restart marker)
    passes, as it passes every decoder.

    Markers are read as libjpeg reads them (libjpeg-turbo 3.1's ``jdmarker.c``, which
    torchvision's wheels bundle): segments by their lengths (and their fields even past a
    length too short for them), each scan's entropy-coded data up to the next 0xFF that is
    neither stuffing (0xFF00) nor fill (0xFFFF), up to the end-of-image marker (what
    follows it, such as a phone's motion-photo video, is not read). In a scan with restart
    markers an unknown marker before the scan's last restart interval is passed over, as
    libjpeg passes over it when it resynchronises at the next restart boundary (the
    interval is counted by the restart markers before it: damage that wiped out the later
    ones leaves the decoder's boundaries in place). Table contents checked later
    (undefined tables, sampling factors) are not checked here: every decoder fails on
    those, DALI's included.

    Cost: one numpy pass finds the 0xFF bytes, then the walk visits only the markers
    outside the entropy-coded data (and unknown ones). On the 300 real photos of
    ``bench/real_photos.py`` (51 KB mean, 29 progressive) it takes 29 µs per image (35 µs
    per 100 KB; progressive ones 48 µs) on one core, 4 % of torchvision's decode of them
    (690 µs).

    Args:
        data: a JPEG file's bytes, from its start-of-image marker.

    Returns:
        libjpeg's message (torchvision's for bytes that end too soon), or None.

    Example:
        >>> data = bytearray(open("photo.jpg", "rb").read())  # a baseline JPEG
        >>> data[len(data) // 2: len(data) // 2 + 2] = b"\xff\x87"
        >>> jpeg_marker_fault(bytes(data))
        'Unsupported marker type 0x87'
    """
    a = np.frombuffer(data, dtype=np.uint8)
    ff = np.flatnonzero(a[:-1] == 0xFF)
    codes = a[ff + 1]
    real = (codes != 0x00) & (codes != 0xFF)  # 0xFF00 is a stuffed 0xFF data byte, 0xFFFF fill
    ff, codes = ff[real], codes[real]
    # Restart markers (0xD0-0xD7) and TEM (0x01) have no fields: libjpeg passes over them.
    walked = ((codes < 0xD0) | (codes > 0xD7)) & (codes != 0x01)
    try:
        return _walk_markers(memoryview(a), ff[walked].tolist(), codes[walked].tolist(), ff, codes)
    except _Refused as exc:
        return str(exc)
    except IndexError:  # a segment's fields run past the end of the bytes
        return _INCOMPLETE


def _walk_markers(mv: memoryview, positions: list[int], kinds: list[int],
                  all_positions: np.ndarray, all_kinds: np.ndarray) -> str | None:
    """libjpeg's reading of the markers at ``positions`` (of kinds ``kinds``; restart
    markers left out, all markers in ``all_*``): None at the end-of-image marker, else the
    reason; raises :class:`_Refused` or IndexError (past the end)."""
    pos, j = 2, 0  # after the start-of-image marker
    frame: _Frame | None = None  # once its SOF is read
    multi_scan: bool | None = None  # known from the first scan on
    restart = 0  # the restart interval (DRI), in MCUs
    scan: tuple[int, int] | None = None  # in a scan with restarts: (its start, its restart intervals)
    while True:
        j = bisect_left(positions, pos, j)
        if j == len(positions):
            return _INCOMPLETE  # libjpeg looks for the next marker past the end
        at, marker = positions[j], kinds[j]
        body = at + 2
        if marker < 0xC0 and scan is not None and _resynced(all_positions, all_kinds, scan, at):
            pos = body
            continue
        scan = None
        if marker == 0xD9:  # end of image
            if multi_scan is None:
                raise _Refused("Invalid JPEG file structure: missing SOS marker" if frame is not None
                               else "JPEG datastream contains no image")
            return None
        if marker == 0xDA:
            pos, chosen, params = _sos(mv, body, frame)
            if multi_scan is None:
                multi_scan = len(chosen) < len(frame.ids) or frame.progressive
            elif not multi_scan:
                raise _Refused("Didn't expect more than one scan")
            if frame.progressive:
                _check_progression(len(chosen), *params)
            if restart:
                scan = (pos, -(-frame.mcus(chosen) // restart))
        elif marker in _SOF_READ:
            if frame is not None:
                raise _Refused("Invalid JPEG file structure: two SOF markers")
            pos, frame = _sof(mv, body, marker)
        elif marker == 0xC4:
            pos = _dht(mv, body)
        elif marker == 0xDB:
            pos = _dqt(mv, body)
        elif marker == 0xCC:
            pos = _dac(mv, body)
        elif marker == 0xDD:
            if _u16(mv, body) != 4:
                raise _Refused(_BAD_LENGTH)
            pos, restart = body + 4, _u16(mv, body + 2)
        elif marker in _SKIPPED:
            pos = body + 2 + max(_u16(mv, body) - 2, 0)
        elif marker == 0xD8:
            raise _Refused("Invalid JPEG file structure: two SOI markers")
        elif marker in _SOF_REFUSED:
            raise _Refused(f"Unsupported JPEG process: SOF type 0x{marker:02x}")
        else:
            raise _Refused(f"Unsupported marker type 0x{marker:02x}")


def _resynced(positions: np.ndarray, kinds: np.ndarray, scan: tuple[int, int], at: int) -> bool:
    """Whether libjpeg passes over the unknown marker at ``at`` in a scan with restarts
    (``scan``: where its data starts, how many restart intervals it has): whether a restart
    boundary follows it, i.e. the restart markers before it leave it short of the scan's
    last interval. At that boundary libjpeg resynchronises: it passes over markers below
    0xC0 up to a restart marker or a known one."""
    start, intervals = scan
    first, last = np.searchsorted(positions, (start, at))
    passed = kinds[first:last]
    return int(np.count_nonzero((passed >= 0xD0) & (passed <= 0xD7))) < intervals - 1


def _u16(mv: memoryview, at: int) -> int:
    return mv[at] << 8 | mv[at + 1]


def _take(mv: memoryview, at: int, count: int) -> memoryview:
    """``count`` bytes from ``at``; IndexError where the bytes end first."""
    if at + count > len(mv):
        raise IndexError(at + count)
    return mv[at: at + count]


class _Frame(NamedTuple):
    """What libjpeg keeps of a start-of-frame segment, as far as the marker walk needs it."""

    ids: list[int]  # component ids
    sampling: list[tuple[int, int]]  # (horizontal, vertical) sampling factors per component
    height: int
    width: int
    progressive: bool
    unit: int  # pixels per block side: 8, or 1 in a lossless frame

    def mcus(self, chosen: list[int]) -> int:
        """MCUs in a scan of the components at ``chosen`` (libjpeg's ``per_scan_setup``)."""
        hmax = max(max(h for h, _ in self.sampling), 1)
        vmax = max(max(v for _, v in self.sampling), 1)
        if len(chosen) == 1:  # non-interleaved: one block per MCU
            h, v = self.sampling[chosen[0]]
            return -(-self.width * h // (hmax * self.unit)) * -(-self.height * v // (vmax * self.unit))
        return -(-self.width // (hmax * self.unit)) * -(-self.height // (vmax * self.unit))


def _sof(mv: memoryview, at: int, marker: int) -> tuple[int, _Frame]:
    """A start-of-frame segment (length field at ``at``): where it ends, and the frame."""
    length, height, width, count = _u16(mv, at), _u16(mv, at + 3), _u16(mv, at + 5), mv[at + 7]
    if height == 0 or width == 0 or count == 0:
        raise _Refused("Empty JPEG image (DNL not supported)")
    if length - 8 != count * 3:
        raise _Refused(_BAD_LENGTH)
    fields = _take(mv, at + 8, 3 * count)
    frame = _Frame(list(fields[::3]), [(f >> 4, f & 15) for f in fields[1::3]], height, width,
                   progressive=marker in (0xC2, 0xCA), unit=1 if marker in (0xC3, 0xCB) else 8)
    return at + 8 + 3 * count, frame


def _sos(mv: memoryview, at: int, frame: _Frame | None) -> tuple[int, list[int], tuple[int, int, int, int]]:
    """A start-of-scan segment: where its header ends, the indices of its components in
    the frame and its ``(Ss, Se, Ah, Al)``."""
    if frame is None:
        raise _Refused("Invalid JPEG file structure: SOS before SOF")
    length, n = _u16(mv, at), mv[at + 2]
    if length != n * 2 + 6 or not 1 <= n <= 4:
        raise _Refused(_BAD_LENGTH)
    fields = _take(mv, at + 3, 2 * n + 3)
    chosen: list[int] = []
    for i in range(n):
        cc = fields[2 * i]
        # libjpeg looks for the id among the frame's components from the i-th on, and
        # refuses one listed twice.
        ci = next((c for c in range(i, min(len(frame.ids), 4)) if frame.ids[c] == cc), None)
        if ci is None or ci in chosen:
            raise _Refused(f"Invalid component ID {cc} in SOS")
        chosen.append(ci)
    ss, se, approx = fields[2 * n], fields[2 * n + 1], fields[2 * n + 2]
    return at + length, chosen, (ss, se, approx >> 4, approx & 15)


def _check_progression(n: int, ss: int, se: int, ah: int, al: int) -> None:
    """libjpeg's check of a progressive scan's spectral band and approximation bits."""
    bad = se != 0 if ss == 0 else (ss > se or se >= 64 or n != 1)
    if bad or (ah != 0 and al != ah - 1) or al > 13:
        raise _Refused(f"Invalid progressive/lossless parameters Ss={ss} Se={se} Ah={ah} Al={al}")


def _dht(mv: memoryview, at: int) -> int:
    """A Huffman table segment: where it ends."""
    length, at = _u16(mv, at) - 2, at + 2
    while length > 16:
        head = _take(mv, at, 17)
        count = sum(head[1:])
        length, at = length - 17, at + 17
        if count > 256 or count > length:
            raise _Refused("Bogus Huffman table definition")
        _take(mv, at, count)
        length, at = length - count, at + count
        index = head[0] - 0x10 if head[0] & 0x10 else head[0]
        if index >= 4:
            raise _Refused(f"Bogus DHT index {index}")
    if length != 0:
        raise _Refused(_BAD_LENGTH)
    return at


def _dqt(mv: memoryview, at: int) -> int:
    """A quantisation table segment: where it ends."""
    length, at = _u16(mv, at) - 2, at + 2
    while length > 0:
        spec = mv[at]
        if spec & 0x0F >= 4:
            raise _Refused(f"Bogus DQT index {spec & 0x0F}")
        size = 128 if spec >> 4 else 64  # 16-bit or 8-bit values
        _take(mv, at + 1, size)
        length, at = length - 1 - size, at + 1 + size
    if length != 0:
        raise _Refused(_BAD_LENGTH)
    return at


def _dac(mv: memoryview, at: int) -> int:
    """An arithmetic-coding conditioning segment: where it ends."""
    length, at = _u16(mv, at) - 2, at + 2
    while length > 0:
        index, value = _take(mv, at, 2)
        length, at = length - 2, at + 2
        if index >= 32:
            raise _Refused(f"Bogus DAC index {index}")
        if index < 16 and value & 0x0F > value >> 4:
            raise _Refused(f"Bogus DAC value 0x{value:x}")
    if length != 0:
        raise _Refused(_BAD_LENGTH)
    return at


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
        for marker, pos, _ in _jpeg_markers(mv):
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
