"""Reading an image's size from its header: what the DALI feed draws crop windows from."""

from __future__ import annotations

import io

import numpy as np
import pytest
from PIL import Image

from gpufeed.datasets.image_bytes import image_size


def encoded(fmt: str, mode: str = "RGB", **save) -> bytes:
    out = io.BytesIO()
    Image.new(mode, (123, 77)).save(out, fmt, **save)
    return out.getvalue()


@pytest.mark.parametrize("fmt, mode, save", [
    ("JPEG", "RGB", {}), ("JPEG", "RGB", {"progressive": True}), ("JPEG", "L", {}), ("JPEG", "CMYK", {}),
    ("PNG", "RGB", {}), ("PNG", "I;16", {}), ("BMP", "RGB", {}), ("TIFF", "RGB", {}), ("WEBP", "RGB", {}),
])
def test_the_size_comes_from_the_header_of_every_format(fmt, mode, save):
    assert image_size(np.frombuffer(encoded(fmt, mode, **save), np.uint8)) == (77, 123)


def test_a_jpeg_with_a_large_exif_block_and_stray_bytes_between_segments():
    raw = encoded("JPEG", exif=Image.Exif().tobytes() + b"\0" * 30_000)
    cut = 4 + int.from_bytes(raw[4:6], "big")  # after the first segment
    for data in (raw, raw[:cut] + b"\x00\x00" + raw[cut:]):
        assert image_size(np.frombuffer(data, np.uint8)) == (77, 123)


def test_no_size_from_a_broken_header():
    assert image_size(np.frombuffer(b"\xff\xd8\xff\xe0garbage", np.uint8)) is None
    assert image_size(np.frombuffer(b"not an image", np.uint8)) is None
