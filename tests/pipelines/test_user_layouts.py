"""A new user's own files and layouts, as torchvision's ImageFolder + PIL reads them: both
backends give the same samples, labels and pixels, and skip the same files."""

from __future__ import annotations

import io
import os
import struct

import numpy as np
import pytest
import torch
from PIL import Image, ImageDraw
from torchvision.datasets import ImageFolder

from gpufeed.pipelines.sources import scan_image_folder
from tests.pipelines.test_loader_contract import BACKENDS, load


def _scene(width: int = 36, height: int = 24) -> Image.Image:
    img = Image.new("RGB", (width, height), (20, 40, 120))
    draw = ImageDraw.Draw(img)
    draw.ellipse((4, 4, width // 2, height - 4), fill=(250, 160, 10))
    draw.rectangle((width * 3 // 4, 0, width - 1, height // 3), fill=(10, 200, 60))
    return img


def _bmp(width: int, height: int, bits: int, pixels: bytes = b"", palette: bytes = b"",
         compression: int = 0) -> bytes:
    """A BMP with a BITMAPINFOHEADER (what Windows tools write)."""
    offset = 14 + 40 + len(palette)
    info = struct.pack("<IiiHHIIiiII", 40, width, height, 1, bits, compression, len(pixels), 2835, 2835,
                       len(palette) // 4, 0)
    return b"BM" + struct.pack("<IHHI", offset + len(pixels), 0, 0, offset) + info + palette + pixels


def _rgb555_bmp(img: Image.Image) -> bytes:
    """A 16-bit BMP (5 bits a channel, no bit masks: the default 16-bit layout)."""
    rgb = np.array(img).astype(np.uint16) >> 3
    words = (rgb[..., 0] << 10) | (rgb[..., 1] << 5) | rgb[..., 2]
    rows = [words[y].astype("<u2").tobytes() for y in range(img.height - 1, -1, -1)]  # bottom-up
    pad = b"\0" * ((-2 * img.width) % 4)
    return _bmp(img.width, img.height, 16, b"".join(r + pad for r in rows))


def _pil_rgb(data: bytes) -> np.ndarray:
    with Image.open(io.BytesIO(data)) as img:
        return np.array(img.convert("RGB"))


@pytest.mark.parametrize("backend", BACKENDS)
def test_a_header_claiming_a_giant_image_is_skipped_not_fatal(tmp_path, backend):
    # PIL raises DecompressionBombError (not an OSError) on a header over twice its
    # pixel limit: it had ended the torch backend's epoch.
    good, giant = tmp_path / "good.png", tmp_path / "giant.bmp"
    _scene().save(good)
    giant.write_bytes(_bmp(1 << 20, 1 << 20, 24, b"\0" * 64))
    for train in (False, True):
        loader = load(None, backend, file_list=[(str(good), 0), (str(giant), 1)], train=train, batch_size=2,
                      size=16, shuffle=False, dtype=torch.uint8)
        (_, labels), = list(loader)
        assert labels.tolist() == [0]
        (skip,) = loader.skipped
        assert skip.path == str(giant) and "exceeds limit" in skip.reason, skip.reason


@pytest.mark.parametrize("backend", BACKENDS)
def test_bmps_give_pils_pixels_and_are_skipped_where_pil_refuses_them(tmp_path, backend):
    # DALI's BMP decoder failed on 16-bit and 4-bit RLE BMPs PIL reads, and read a
    # palette BMP whose palette is missing in other colours than PIL; a BMP PIL refuses
    # (2 bits a pixel) it decoded. Both backends now give what torchvision's PIL gives.
    scene = _scene()
    files = {"rgb555.bmp": _rgb555_bmp(scene)}
    out = io.BytesIO()
    scene.convert("P", palette=Image.Palette.ADAPTIVE, colors=16).save(out, "BMP")
    files["pal4.bmp"] = out.getvalue()
    # 8 bits a pixel, no palette before the pixels (they start right after the header):
    # PIL takes the 1,024 bytes there for the palette; DALI had read other colours
    rows = [bytes((x * 7 + y * 3) % 256 for x in range(scene.width)) for y in range(scene.height)]
    files["nopalette.bmp"] = _bmp(scene.width, scene.height, 8, b"".join(rows) + bytes(range(256)) * 4)
    # 2 bits a pixel, which PIL refuses ("Unsupported BMP pixel depth (2)")
    files["pal2.bmp"] = _bmp(16, 4, 2, b"\x1b\x1b\x1b\x1b" * 4, palette=b"\0\0\0\0\xff\xff\xff\0" * 2)
    for name, data in files.items():
        (tmp_path / name).write_bytes(data)
    names = sorted(files)
    listing = [(str(tmp_path / n), i) for i, n in enumerate(names)]
    loader = load(None, backend, file_list=listing, train=False, batch_size=len(names), size=24, val_resize=24,
                  shuffle=False, dtype=torch.uint8)
    (images, labels), = list(loader)
    assert [os.path.basename(s.path) for s in loader.skipped] == ["pal2.bmp"]
    assert "Unsupported BMP pixel depth" in loader.skipped[0].reason
    kept = [n for n in names if n != "pal2.bmp"]
    assert labels.tolist() == [names.index(n) for n in kept]
    for image, name in zip(images, kept, strict=True):
        expected = _pil_rgb(files[name])
        left = (expected.shape[1] - 24) // 2
        got = image.permute(1, 2, 0).numpy().astype(int)
        assert np.abs(got - expected[:, left:left + 24]).max() <= 1, name


def _oriented_tiff(orientation: int) -> bytes:
    exif = Image.Exif()
    exif[0x0112] = orientation
    out = io.BytesIO()
    _scene(36, 24).save(out, "TIFF", exif=exif)
    return out.getvalue()


@pytest.mark.parametrize("backend", BACKENDS)
def test_a_tiffs_orientation_tag_is_applied_as_pil_applies_it(tmp_path, backend):
    # PIL (so torchvision's ImageFolder) turns a TIFF by its Orientation tag on load, unlike
    # a JPEG's EXIF orientation; DALI's decoder, told not to, had kept the stored pixels.
    names = [f"orient{k}.tif" for k in range(1, 9)]
    for k, name in enumerate(names, 1):
        (tmp_path / name).write_bytes(_oriented_tiff(k))
    listing = [(str(tmp_path / n), i) for i, n in enumerate(names)]
    loader = load(None, backend, file_list=listing, train=False, batch_size=8, size=24, val_resize=24,
                  shuffle=False, dtype=torch.uint8)
    (images, labels), = list(loader)
    assert labels.tolist() == list(range(8)) and not loader.skipped
    for image, name in zip(images, names, strict=True):
        expected = _pil_rgb((tmp_path / name).read_bytes())  # 36 x 24, or 24 x 36 when turned
        top, left = (expected.shape[0] - 24) // 2, (expected.shape[1] - 24) // 2
        got = image.permute(1, 2, 0).numpy().astype(int)
        assert np.abs(got - expected[top:top + 24, left:left + 24]).max() <= 1, name
    # and the train crops, drawn from the image's size, fit the turned image on both
    loader = load(None, backend, file_list=listing, train=True, batch_size=8, size=16, seed=3,
                  shuffle=False, dtype=torch.uint8, scale=(1.0, 1.0), ratio=(1.5, 1.5))
    (images, _), = list(loader)
    for image, name in zip(images, names, strict=True):
        expected = torch.from_numpy(_pil_rgb((tmp_path / name).read_bytes())).permute(2, 0, 1)
        if expected.shape[1] > expected.shape[2]:  # a ratio-1.5 window of a portrait image:
            continue                               # cut short, not the whole image
        whole = torch.nn.functional.interpolate(expected[None].float(), size=(16, 16), mode="bilinear",
                                                antialias=True, align_corners=False)[0]
        flipped = whole.flip(-1)
        diff = min((image.float() - whole).abs().mean(), (image.float() - flipped).abs().mean())
        assert diff < 4, name


def test_a_folders_samples_come_in_torchvisions_order_with_its_labels(tmp_path):
    # ImageFolder sorts os.walk's folders by their whole path, so "a-b" ('-' < '/') comes
    # before "a/sub"; walking with each folder's subfolders sorted had put "a/sub" first.
    root = tmp_path / "train"
    names = ["n/z.jpg", "n/a/w.JPG", "n/a/sub/x.jpeg", "n/a-b/y.Png", "n/a b/v.webp", "Zürich café/é.jpg",
             "Zürich café/.hidden.jpg", "Ärger/1.bmp", "B/q.tif"]
    for name in names:
        (root / name).parent.mkdir(parents=True, exist_ok=True)
        _scene(8, 8).save(root / name)
    os.symlink(root / "n" / "a", root / "B" / "linked")  # a linked folder inside a class
    os.symlink(root / "n", root / "n2")                  # a class folder that is a link
    (root / "empty").mkdir()
    reference = ImageFolder(str(root), allow_empty=True)
    with pytest.warns(UserWarning, match="without images: empty"):
        found = scan_image_folder(root)
    assert list(found.paths) == [p for p, _ in reference.samples]
    assert list(found.labels) == [lbl for _, lbl in reference.samples]
    assert {c: i for i, c in enumerate(found.classes)} == reference.class_to_idx


@pytest.mark.parametrize("backend", BACKENDS)
def test_an_animated_png_gives_the_image_pil_gives(tmp_path, backend):
    # An APNG whose default image is not one of its frames: PIL (so ImageFolder) gives
    # the default image, DALI's decoder gave the first frame.
    path = tmp_path / "anim.png"
    red, blue, green = (Image.new("RGB", (8, 8), c) for c in ("red", "blue", "green"))
    red.save(path, save_all=True, append_images=[blue, green], default_image=True)
    loader = load(None, backend, file_list=[(str(path), 0)], train=False, batch_size=1, size=8, val_resize=8,
                  dtype=torch.uint8)
    (images, _), = list(loader)
    expected = torch.from_numpy(_pil_rgb(path.read_bytes())).permute(2, 0, 1)
    assert expected[:, 0, 0].tolist() == [255, 0, 0] and torch.equal(images[0], expected)
