"""Test helpers: small image trees with known contents, and waiting for processes to end."""

from __future__ import annotations

import struct
import time
import zlib
from pathlib import Path

import numpy as np

from gpufeed.datasets.images import generate_image_folder


def running(pid: int) -> bool:
    """Whether process ``pid`` still runs (a zombie waiting to be reaped has ended)."""
    try:
        with open(f"/proc/{pid}/stat") as stat:
            return stat.read().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False


def still_running(pids: set[int] | list[int], timeout: float) -> list[int]:
    """The ``pids`` still running after waiting up to ``timeout`` seconds for them to end."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline and any(map(running, pids)):
        time.sleep(0.2)
    return [p for p in pids if running(p)]


def indexed_file_list(root: Path, n: int = 23) -> list[tuple[str, int]]:
    """``n`` JPEGs under ``root``, each with its own label (label == sample number), so a
    batch's labels say exactly which samples it holds."""
    generate_image_folder(root, num_images=n, num_classes=1, seed=3, min_side=48, max_side=64)
    files = sorted(str(p) for p in root.rglob("*.jpg"))
    return [(f, i) for i, f in enumerate(files)]


def png16_bytes(pixels: np.ndarray) -> bytes:
    """A 16-bit RGB PNG of ``(H, W, 3)`` uint16 ``pixels`` (PIL cannot write one)."""
    h, w, _ = pixels.shape
    raw = b"".join(b"\x00" + pixels[y].astype(">u2").tobytes() for y in range(h))  # filter 0 per row

    def chunk(kind: bytes, body: bytes) -> bytes:
        return struct.pack(">I", len(body)) + kind + body + struct.pack(">I", zlib.crc32(kind + body))

    header = struct.pack(">IIBBBBB", w, h, 16, 2, 0, 0, 0)  # 16 bits, colour type 2 (RGB)
    return (b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", header) + chunk(b"IDAT", zlib.compress(raw))
            + chunk(b"IEND", b""))


def with_png_crcs(png: bytes | bytearray) -> bytes:
    """The PNG with every chunk's CRC recomputed: corrupt bytes a CRC check cannot see."""
    out, pos = bytearray(png), 8
    while pos + 12 <= len(out):
        end = pos + 8 + int.from_bytes(out[pos: pos + 4], "big")
        out[end: end + 4] = zlib.crc32(bytes(out[pos + 4: end])).to_bytes(4, "big")
        pos = end + 4
    return bytes(out)


def impossible_huffman(jpeg: bytes) -> bytes:
    """``jpeg`` with a Huffman table whose segment adds up but whose codes cannot exist
    (two more of length 1 than fit): the byte checks pass it, every decoder refuses it."""
    data = bytearray(jpeg)
    dht = data.find(b"\xff\xc4")  # its 16 code counts follow the length and table number
    counts = data[dht + 5: dht + 21]
    counts[0] += 2
    counts[max(i for i, n in enumerate(counts) if n >= 2)] -= 2
    data[dht + 5: dht + 21] = counts
    return bytes(data)
