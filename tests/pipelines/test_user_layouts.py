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

from gpufeed.pipelines.sources import read_file_list, scan_image_folder
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


def _list_of(tmp_path, text: bytes, names: list[str]) -> list[str]:
    """Images named ``names`` (relative) and ``list.txt`` holding ``text``; the images' paths."""
    for name in names:
        path = tmp_path / os.fsdecode(name.encode("utf-8", "surrogateescape"))
        path.parent.mkdir(parents=True, exist_ok=True)
        _scene(8, 8).save(path, format="JPEG")
    (tmp_path / "list.txt").write_bytes(text)
    return [str(tmp_path / n) for n in names]


def test_a_file_list_as_editors_and_old_disks_write_it(tmp_path):
    # Windows Notepad: a byte-order mark and CRLF; a name in Latin-1 (not UTF-8); a name
    # holding U+0085, at which str.splitlines had cut the line; spaces, commas, '#',
    # unicode; blank lines; the last line without a line feed; an absolute path.
    names = ["a.jpg", "img/b c,d #1.jpg", "img/Zürich 写真.jpg", "img/caf\udce9.jpg", "img/x\u0085y.jpg"]
    paths = _list_of(tmp_path, b"", names)
    lines = [f"{n} {k + 3}".encode("utf-8", "surrogateescape") for k, n in enumerate(names[:-1])]
    lines[0] = f"{paths[0]}\t3".encode()  # absolute, tab-separated
    text = b"\xef\xbb\xbf" + b"\r\n".join(lines) + b"\r\n\r\n  \n" + f"{names[-1]} 7".encode()
    (tmp_path / "list.txt").write_bytes(text)
    found = read_file_list(tmp_path / "list.txt")
    assert list(found.paths) == paths and list(found.labels) == [3, 4, 5, 6, 7]
    assert len(found.classes) == 8  # labels are class indices: 0..7


@pytest.mark.parametrize("label", ["1_0", "\u0663", "1.0", "cat", "0x1f"])
def test_a_label_that_is_not_plain_digits_is_refused_by_line(tmp_path, label):
    # int() took "1_0" (10) and other scripts' digits ("\u0663", Arabic-Indic 3)
    _list_of(tmp_path, f"a.jpg 0\n\na.jpg {label}\n".encode(), ["a.jpg"])
    with pytest.raises(ValueError, match=r"list\.txt:3: expected '<path> <integer label>'"):
        read_file_list(tmp_path / "list.txt")


def test_a_label_far_beyond_any_class_count_is_refused_by_line(tmp_path):
    # an ID used as a label: 2**24 had built 16.7 million class names (10**9 ran out of
    # memory, and past 2**31 - 1 DALI's int32 labels overflow)
    _list_of(tmp_path, f"a.jpg 0\na.jpg {2**24}\n".encode(), ["a.jpg"])
    with pytest.raises(ValueError, match=r"list\.txt:2: label 16777216 would make 16,777,217 classes"):
        read_file_list(tmp_path / "list.txt")
    assert len(read_file_list([(tmp_path / "a.jpg", 2**24 - 1)]).classes) == 2**24


def test_a_webdataset_label_far_beyond_any_class_count_is_refused_by_sample(tmp_path):
    import webdataset as wds

    jpeg = io.BytesIO()
    _scene(8, 8).save(jpeg, format="JPEG")
    with wds.TarWriter(str(tmp_path / "train-0.tar")) as sink:
        sink.write({"__key__": "a", "jpg": jpeg.getvalue(), "cls": b"0"})
        sink.write({"__key__": "b", "jpg": jpeg.getvalue(), "cls": str(2**24).encode()})
    with pytest.raises(ValueError, match=r"train-0\.tar: sample b: label 16777216 would make"):
        load(str(tmp_path / "train-0.tar"), "torch", train=False, batch_size=2)


def test_pair_labels_must_be_whole_numbers(tmp_path):
    path = _list_of(tmp_path, b"", ["a.jpg"])[0]
    assert read_file_list([(path, 2.0), (path, np.int64(1)), (path, "3")]).labels == (2, 1, 3)
    with pytest.raises(ValueError, match=r"file_list\[1\]: label 1.7 of .*a\.jpg is not an integer"):
        read_file_list([(path, 0), (path, 1.7)])  # int() had cut it to 1
    # A binary task's labels from a boolean array (numpy's bool, as zip(paths, mask) gives
    # them) are 0/1 as Python's bool is, as int() took them.
    assert read_file_list([(path, np.bool_(True)), (path, np.array([False])[0]), (path, True)]).labels == (1, 0, 1)


def test_a_file_listed_twice_is_named_in_a_warning(tmp_path):
    _list_of(tmp_path, b"a.jpg 0\nb.jpg 1\n./a.jpg 1\n", ["a.jpg", "b.jpg"])
    with pytest.warns(UserWarning, match=r"1 entry names a file listed before: .*list\.txt:3 \(as .*list\.txt:1\)"):
        found = read_file_list(tmp_path / "list.txt")
    assert found.labels == (0, 1, 1)  # kept: each entry is a sample, as in DALI's reader


def test_convert_writes_what_dali_would_decode_otherwise_as_the_loaders_pixels(tmp_path):
    # shards are read by DALI's own readers (dali_iterator()) and by TensorFlow, which
    # decode a member themselves: a turned TIFF, a BMP and an APNG are written as PNGs of
    # the pixels the loaders yield
    import tarfile

    from gpufeed.datasets.shards.convert import convert

    root = tmp_path / "train" / "c"
    root.mkdir(parents=True)
    (root / "turned.tif").write_bytes(_oriented_tiff(6))
    (root / "rgb555.bmp").write_bytes(_rgb555_bmp(_scene()))
    red, blue = Image.new("RGB", (8, 8), "red"), Image.new("RGB", (8, 8), "blue")
    red.save(root / "anim.png", save_all=True, append_images=[blue], default_image=True)
    _scene().save(root / "plain.png")
    report = convert(tmp_path / "train", tmp_path / "wds", format="webdataset", shuffle=False, workers=0,
                     progress=False)
    assert report.written == 4 and not report.skipped
    with tarfile.open(tmp_path / "wds" / "shard-000000.tar") as tar:
        members = [m for m in tar.getmembers() if not m.name.endswith(".cls")]
        written = {m.name: tar.extractfile(m).read() for m in members}
    sources = sorted(root.iterdir())  # the folder's order: anim, plain, rgb555, turned
    assert [os.path.splitext(n)[1] for n in written] == [".png"] * 4
    for source, data in zip(sources, written.values(), strict=True):
        assert np.array_equal(_pil_rgb(data), _pil_rgb(source.read_bytes())), source.name
    assert written[next(n for n in written if n.startswith("000000001"))] == (root / "plain.png").read_bytes()


@pytest.mark.parametrize("backend", BACKENDS)
def test_a_png_with_text_pil_will_not_inflate_is_yielded_by_both_backends(tmp_path, backend):
    # a zTXt chunk inflating to 2 MB (a long XMP history): PIL refused the file
    # ("Decompressed data too large for PngImagePlugin.MAX_TEXT_CHUNK"), libpng (DALI) not
    import zlib

    plain = io.BytesIO()
    _scene().save(plain, "PNG")
    png = plain.getvalue()
    body = b"XML:com.adobe.xmp\0\0" + zlib.compress(b" " * (2 << 20))
    chunk = struct.pack(">I", len(body)) + b"zTXt" + body + struct.pack(">I", zlib.crc32(b"zTXt" + body))
    path = tmp_path / "xmp.png"
    path.write_bytes(png[:33] + chunk + png[33:])  # after the 8-byte signature and 25-byte IHDR
    loader = load(None, backend, file_list=[(str(path), 0)], train=False, batch_size=1, size=24, val_resize=24,
                  dtype=torch.uint8)
    (images, _), = list(loader)
    assert not loader.skipped
    expected = _pil_rgb(png)[:, 6:30]
    assert np.abs(images[0].permute(1, 2, 0).numpy().astype(int) - expected).max() <= 1
