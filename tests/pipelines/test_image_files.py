"""Image files as cameras, scanners and other tools write them: every file torchvision's
ImageFolder loads gives the same pixels on both backends."""

from __future__ import annotations

import io

import numpy as np
import pytest
import torch
from PIL import Image, ImageDraw

from gpufeed.backends import dali_installed
from gpufeed.datasets.image_bytes import undecodable_reason
from tests.pipelines.test_loader_contract import BACKENDS, load

SIZE = 48


def _scene(mode: str = "RGB") -> Image.Image:
    img = Image.new("RGB", (SIZE, SIZE), (20, 40, 120))
    ImageDraw.Draw(img).ellipse((8, 12, 40, 30), fill=(250, 160, 10))
    return img.convert(mode)


def _jpeg(img: Image.Image, **kw) -> bytes:
    out = io.BytesIO()
    img.save(out, "JPEG", quality=95, **kw)
    return out.getvalue()


def _ramp16() -> np.ndarray:
    return np.tile(np.linspace(0, 65535, SIZE).astype(np.uint16), (SIZE, 1))


@pytest.fixture(scope="module")
def files(tmp_path_factory) -> dict[str, tuple[str, np.ndarray]]:
    """name -> (path, the uint8 RGB pixels every backend must give, SIZE x SIZE)."""
    root = tmp_path_factory.mktemp("photos")
    scene = np.array(_scene())
    gray = np.array(_scene("L"))
    out: dict[str, tuple[str, np.ndarray]] = {}

    def add(name: str, data: bytes | None, expected: np.ndarray, img: Image.Image | None = None, **kw) -> None:
        path = root / name
        if data is not None:
            path.write_bytes(data)
        else:
            img.save(path, **kw)
        out[name] = (str(path), expected)

    add("face.pgm", None, np.repeat(gray[:, :, None], 3, axis=2), _scene("L"))
    add("scene.ppm", None, scene, _scene())
    add("big.tif", None, scene, _scene(), big_tiff=True)
    ramp = _ramp16()
    add("gray16.tif", None, np.repeat((ramp >> 8).astype(np.uint8)[:, :, None], 3, axis=2), Image.fromarray(ramp))
    still = _scene()
    add("anim.webp", None, scene, still, save_all=True, lossless=True,
        append_images=[Image.new("RGB", (SIZE, SIZE), "blue")], duration=100)
    # a phone's "motion photo": a video appended after the JPEG's end-of-image marker
    jpeg = _jpeg(still)
    decoded = np.array(Image.open(io.BytesIO(jpeg)).convert("RGB"))
    add("motion.jpg", jpeg + b"\0\0\0\x18ftypmp42" + bytes(4096), decoded)
    # EXIF orientation 6 (a portrait phone photo): not applied, on either backend
    exif = Image.Exif()
    exif[0x0112] = 6
    wide = _scene().resize((SIZE * 3 // 2, SIZE))
    rotated = _jpeg(wide, exif=exif)
    pixels = np.array(Image.open(io.BytesIO(rotated)).convert("RGB"))
    left = (pixels.shape[1] - SIZE) // 2
    add("portrait.jpg", rotated, pixels[:, left:left + SIZE])
    return out


@pytest.mark.parametrize("backend", BACKENDS)
def test_every_file_imagefolder_loads_gives_its_pixels_on_both_backends(files, backend):
    names = sorted(files)
    listing = [(files[n][0], i) for i, n in enumerate(names)]
    loader = load(None, backend, file_list=listing, train=False, batch_size=len(names), size=SIZE,
                  val_resize=SIZE, dtype=torch.uint8, shuffle=False)
    (x, y), = list(loader)
    assert not loader.skipped, [(s.path, s.reason) for s in loader.skipped]
    assert y.tolist() == list(range(len(names)))
    for i, name in enumerate(names):
        got = x[i].permute(1, 2, 0).int()
        expected = torch.from_numpy(files[name][1].astype(np.int32))
        assert got.shape == expected.shape, name
        assert (got - expected).abs().float().mean() < 2.0, name  # decoders round a little apart


@pytest.mark.skipif(not dali_installed(), reason="DALI not installed")
def test_dali_iterator_keeps_the_stored_orientation_as_the_loader_does(files):
    path = files["portrait.jpg"][0]
    loader = load(None, "dali", file_list=[(path, 0)], train=False, batch_size=1, size=SIZE, val_resize=SIZE,
                  dtype=torch.uint8, shuffle=False)
    (x, _), = list(loader)
    batch = next(iter(loader.dali_iterator()))[0]["data"]
    assert batch.shape == x.shape and (batch.int() - x.int()).abs().max() <= 1


def test_a_jpeg_cut_short_is_still_caught_when_its_thumbnail_ends_in_a_marker():
    # EXIF thumbnails carry their own end-of-image marker, in the header: not the image's
    thumbed = io.BytesIO()
    _scene().resize((400, 300)).save(thumbed, "JPEG", exif=_exif_with_thumbnail())
    data = thumbed.getvalue()
    assert undecodable_reason(data) is None
    assert undecodable_reason(data[: len(data) * 2 // 3]) == "truncated JPEG (no end-of-image marker)"
    assert undecodable_reason(data + bytes(5000)) is None  # padding after the image


def _exif_with_thumbnail() -> bytes:
    thumb = _jpeg(_scene().resize((16, 12)))
    exif = Image.Exif()
    exif[0x0112] = 1
    raw = exif.tobytes()
    # a minimal IFD1 is awkward to build through PIL: a header segment holding a whole
    # JPEG (its own FFD8 ... FFD9) stands for the thumbnail, which is what matters here
    return raw + thumb
