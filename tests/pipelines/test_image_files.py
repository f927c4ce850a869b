"""Image files as cameras, scanners and other tools write them: every file torchvision's
ImageFolder loads gives the same pixels on both backends."""

from __future__ import annotations

import io
import struct
import zlib

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
    add("still.webp", None, scene, still, lossless=True)
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


def _tiff16(pixels: np.ndarray, planar: bool) -> bytes:
    """A Deflate-compressed little-endian 16-bit RGB or RGBA TIFF (as scanners and raw
    converters write them; PIL cannot write one), chunky or plane by plane."""
    height, width, channels = pixels.shape
    planes = [pixels[:, :, c].astype("<u2").tobytes() for c in range(channels)] if planar else \
        [pixels.astype("<u2").tobytes()]
    planes = [zlib.compress(plane) for plane in planes]
    entries = 10 + (channels == 4)
    ifd_at = 8
    extra_at = ifd_at + 2 + 12 * entries + 4  # BitsPerSample, StripOffsets, StripByteCounts values
    data_at = extra_at + 2 * channels + 8 * len(planes)
    offsets, at = [], data_at
    for plane in planes:
        offsets.append(at)
        at += len(plane)

    def entry(tag: int, kind: int, count: int, value: int) -> bytes:
        return struct.pack("<HHII", tag, kind, count, value)

    strips = extra_at + 2 * channels
    tags = [entry(256, 3, 1, width), entry(257, 3, 1, height), entry(258, 3, channels, extra_at),
            entry(259, 3, 1, 8), entry(262, 3, 1, 2),
            entry(273, 4, len(planes), strips) if len(planes) > 1 else entry(273, 4, 1, offsets[0]),
            entry(277, 3, 1, channels), entry(278, 3, 1, height),
            entry(279, 4, len(planes), strips + 4 * len(planes)) if len(planes) > 1
            else entry(279, 4, 1, len(planes[0])),
            entry(284, 3, 1, 2 if planar else 1)]
    if channels == 4:
        tags.append(entry(338, 3, 1, 1))  # associated (premultiplied) alpha
    head = b"II*\x00" + struct.pack("<I", ifd_at) + struct.pack("<H", len(tags)) + b"".join(tags) + bytes(4)
    values = struct.pack(f"<{channels}H", *[16] * channels)
    if len(planes) > 1:
        values += struct.pack(f"<{len(planes)}I", *offsets) + struct.pack(f"<{len(planes)}I", *map(len, planes))
    else:
        values += bytes(8 * len(planes))
    assert len(head) + len(values) <= data_at
    return (head + values).ljust(data_at, b"\0") + b"".join(planes)


@pytest.mark.parametrize("backend", BACKENDS)
def test_tiffs_dali_decodes_in_other_colours_give_the_torch_backends_pixels(tmp_path, backend):
    """16-bit RGB stored plane by plane, 16-bit premultiplied RGBA and CIELab TIFFs: DALI's
    decoder returned other colours than PIL (the torch backend), with no error."""
    rng = np.random.default_rng(3)
    rgba = (rng.integers(0, 256, (SIZE, SIZE, 4)) * 257).astype(np.uint16)
    (tmp_path / "planar16.tif").write_bytes(_tiff16(rgba[:, :, :3], planar=True))
    premultiplied = rgba.copy()
    premultiplied[:, :, :3] = (rgba[:, :, :3].astype(np.uint32) * rgba[:, :, 3:] // 65535).astype(np.uint16)
    (tmp_path / "rgba16.tif").write_bytes(_tiff16(premultiplied, planar=False))
    Image.new("LAB", (SIZE, SIZE), (60, 150, 100)).save(tmp_path / "lab.tif")
    names = ["planar16.tif", "rgba16.tif", "lab.tif"]
    from gpufeed.datasets.image_bytes import tiff_beyond_dali

    assert all(tiff_beyond_dali((tmp_path / n).read_bytes()) for n in names)
    eight = (rgba[:, :, :3] >> 8).astype(np.uint8)
    assert np.array_equal(np.array(Image.open(tmp_path / "planar16.tif").convert("RGB")), eight)
    files = [(str(tmp_path / n), i) for i, n in enumerate(names)]
    kw = dict(file_list=files, train=False, batch_size=3, size=SIZE, val_resize=SIZE, dtype=torch.uint8)
    kit = load(None, backend, **kw)
    (x, y), = list(kit)
    assert y.tolist() == [0, 1, 2] and not kit.skipped, [(s.path, s.reason) for s in kit.skipped]
    (x_torch, _), = list(load(None, "torch", **kw))
    assert (x[0].permute(1, 2, 0).int() - torch.from_numpy(eight).int()).abs().max() <= 1
    for i, name in enumerate(names):
        assert (x[i].int() - x_torch[i].int()).abs().float().mean() < 1, name


def _png_with_bad_text_chunk() -> bytes:
    """A PNG whose text chunk's CRC does not match (a tool that edited the text in place):
    libpng ignores the chunk, PIL refused the file ("cannot identify image file")."""
    out = io.BytesIO()
    _scene().save(out, "PNG")
    data = out.getvalue()
    body = b"tEXtComment\0edited"
    chunk = struct.pack(">I", len(body) - 4) + body + struct.pack(">I", (zlib.crc32(body) + 1) & 0xFFFFFFFF)
    return data[:33] + chunk + data[33:]  # after the signature and the header chunk


@pytest.mark.parametrize("backend", BACKENDS)
def test_a_png_with_a_bad_ancillary_chunk_is_yielded_by_both_backends(tmp_path, backend):
    path = tmp_path / "edited.png"
    path.write_bytes(_png_with_bad_text_chunk())
    loader = load(None, backend, file_list=[(str(path), 0)], train=False, batch_size=1, size=SIZE,
                  val_resize=SIZE, dtype=torch.uint8)
    (x, _), = list(loader)
    assert not loader.skipped, [(s.path, s.reason) for s in loader.skipped]
    assert (x[0].permute(1, 2, 0).int() - torch.from_numpy(np.array(_scene())).int()).abs().max() <= 1


def test_a_png_whose_bytes_lost_their_chunk_layout_is_named_as_such():
    # the reason was "truncated PNG (its ô¨\x81á chunk is cut short)": four random bytes read as a name
    out = io.BytesIO()
    _scene().save(out, "PNG")
    data = out.getvalue()
    broken = data[:12] + b"\xf4\xa8\x81\xe1" + data[16:]
    assert undecodable_reason(broken) == "corrupt PNG (no chunk type at byte 12: b'\\xf4\\xa8\\x81\\xe1')"
