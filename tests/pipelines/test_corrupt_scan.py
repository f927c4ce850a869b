"""JPEGs damaged inside their entropy-coded data: libjpeg (torchvision, PIL) raises on a
marker it does not know there, where DALI's CPU decoder returned the image with garbage
in it. Both backends now skip and report such a file alike (the byte check of
:func:`gpufeed.datasets.image_bytes.jpeg_marker_fault`), and pass what libjpeg only
warns about."""

from __future__ import annotations

import io
import os

import numpy as np
import pytest
import torch
from PIL import Image

from gpufeed.backends import dali_installed
from gpufeed.datasets.image_bytes import (
    image_size,
    jpeg_marker_fault,
    jpeg_without_stray_bytes,
    undecodable_reason,
)
from gpufeed.pipelines import BadImageError
from gpufeed.pipelines.torch_loader import DECODE_ERRORS, decode_failure, decode_rgb
from tests.helpers import impossible_huffman
from tests.pipelines.test_loader_contract import BACKENDS, load

#: The torch backend's reason for the damaged file (libjpeg's words).
UNKNOWN_MARKER = "could not decode: Unsupported marker type 0x87"

#: Encoder settings of intact JPEGs -> PIL's save arguments (and the image mode).
ENCODINGS = {
    "baseline": {},
    "optimized": {"optimize": True},
    "progressive": {"progressive": True},
    "restarts per block": {"restart_marker_blocks": 3},
    "restarts per row": {"restart_marker_rows": 1},
    "progressive with restarts": {"progressive": True, "restart_marker_rows": 1},
    "4:4:4": {"subsampling": 0},
    "grayscale": {"mode": "L"},
    "CMYK with restarts": {"mode": "CMYK", "restart_marker_blocks": 5},
}


def _photo(mode: str = "RGB", width: int = 160, height: int = 96) -> Image.Image:
    """Gradients with noise: a scan of several kilobytes, as a photo's is."""
    yy, xx = np.mgrid[0:height, 0:width]
    pixels = np.stack([(xx * 3 + yy) % 256, (xx * yy) % 256, (xx ^ yy) % 256], -1)
    pixels = pixels + np.random.default_rng(0).integers(-30, 30, pixels.shape)
    return Image.fromarray(np.clip(pixels, 0, 255).astype(np.uint8)).convert(mode)


def _jpeg(mode: str = "RGB", **save) -> bytes:
    out = io.BytesIO()
    _photo(mode).save(out, "JPEG", quality=90, **save)
    return out.getvalue()


def _encoded(name: str) -> bytes:
    save = dict(ENCODINGS[name])
    return _jpeg(save.pop("mode", "RGB"), **save)


def _mid_scan(data: bytes) -> int:
    """A position halfway through the first scan's entropy-coded data."""
    sos = data.find(b"\xff\xda")
    start = sos + 2 + int.from_bytes(data[sos + 2: sos + 4], "big")
    end = data.find(b"\xff", start + 1)
    while data[end + 1] in (0x00, 0xFF) or 0xD0 <= data[end + 1] <= 0xD7:  # stuffing, fill, restarts
        end = data.find(b"\xff", end + 2)
    return (start + end) // 2


def _with_marker(data: bytes, at: int, marker: int = 0x87) -> bytes:
    out = bytearray(data)
    out[at: at + 2] = bytes((0xFF, marker))
    return bytes(out)


def _torch_reason(data: bytes) -> str | None:
    """The torch backend's decoder's reason for ``data``, or None when it decodes it."""
    try:
        decode_rgb(np.frombuffer(data, np.uint8).copy())
    except DECODE_ERRORS as exc:
        return decode_failure(exc)
    return None


@pytest.mark.parametrize("name", sorted(ENCODINGS))
def test_intact_jpegs_pass_the_marker_check(name):
    data = _encoded(name)
    assert jpeg_marker_fault(data) is None and undecodable_reason(data) is None
    assert _torch_reason(data) is None


def test_marker_bytes_outside_the_scans_are_not_read_as_markers():
    # APP and COM segments are skipped by their lengths, and what follows the image's end
    # (a phone's motion-photo video) is not read: 0xFF87 there is no marker.
    exif = Image.Exif()
    exif[0x010F] = "maker \xff\x87"
    data = _jpeg(exif=exif, comment=b"\xff\x87\xff\xd9", icc_profile=bytes(range(256)) * 4)
    tail = data + b"\x00\x00\x00\x18ftypmp42\xff\x87" + bytes(100)
    for ok in (data, tail):
        assert jpeg_marker_fault(ok) is None and undecodable_reason(ok) is None and _torch_reason(ok) is None


@pytest.mark.parametrize("name", ["baseline", "progressive", "grayscale"])
def test_an_unknown_marker_in_the_scan_is_refused_in_the_torch_backends_words(name):
    data = _encoded(name)
    bad = _with_marker(data, _mid_scan(data))
    assert jpeg_marker_fault(bad) == "Unsupported marker type 0x87"
    assert undecodable_reason(bad) == UNKNOWN_MARKER == _torch_reason(bad)


def test_with_restart_markers_libjpeg_passes_over_an_unknown_marker_short_of_the_last_interval():
    # libjpeg resynchronises at the next restart boundary (a warning, and the image), but
    # in the scan's last interval no boundary follows: there it stops as without restarts.
    data = _encoded("restarts per block")
    first_restart = data.find(b"\xff\xd0")
    last_restart = max(data.rfind(bytes((0xFF, m))) for m in range(0xD0, 0xD8))
    early = _with_marker(data, first_restart + 6)
    assert undecodable_reason(early) is None and _torch_reason(early) is None
    late = _with_marker(data, (last_restart + data.rfind(b"\xff\xd9")) // 2)
    assert undecodable_reason(late) == UNKNOWN_MARKER == _torch_reason(late)


@pytest.mark.parametrize(
    "marker",
    [0x02, 0xBF, 0xDE, 0xF3,  # no marker libjpeg knows
     0xC0, 0xC7, 0xD8,  # a second frame, a frame type libjpeg refuses, a second image start
     0xC4, 0xDB, 0xDD, 0xE1,  # segments read by a length the damage made up
     0x01, 0xD3],  # no fields: libjpeg only warns
)
@pytest.mark.parametrize("name", ["baseline", "progressive", "restarts per row"])
def test_the_check_refuses_what_libjpeg_refuses_and_in_its_words(marker, name):
    data = _encoded(name)
    bad = _with_marker(data, _mid_scan(data), marker)
    assert undecodable_reason(bad) == _torch_reason(bad)
    if marker in (0x01, 0xD3):
        assert undecodable_reason(bad) is None
    elif marker not in (0xC4, 0xDB, 0xDD, 0xE1) and not (marker < 0xC0 and "restarts" in name):
        assert undecodable_reason(bad) is not None


@pytest.fixture(scope="module")
def damaged_folder(tmp_path_factory):
    """One class: an intact JPEG and one with 0xFF87 written halfway through its scan."""
    root = tmp_path_factory.mktemp("scan") / "train"
    (root / "cls").mkdir(parents=True)
    data = _jpeg()
    (root / "cls" / "good.jpg").write_bytes(data)
    (root / "cls" / "corrupt.jpg").write_bytes(_with_marker(data, _mid_scan(data)))
    return root


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("train", [False, True])
def test_both_backends_skip_and_list_the_damaged_file(damaged_folder, backend, train):
    loader = load(damaged_folder, backend, train=train, batch_size=2, size=32)
    with pytest.warns(UserWarning, match="corrupt.jpg"):
        yielded = sum(len(y) for _, y in loader)
    assert yielded == 1
    assert [(os.path.basename(s.path), s.reason) for s in loader.skipped] == [("corrupt.jpg", UNKNOWN_MARKER)]


@pytest.mark.parametrize("backend", BACKENDS)
def test_on_error_raise_names_the_damaged_file(damaged_folder, backend):
    loader = load(damaged_folder, backend, train=False, batch_size=2, size=32, on_error="raise")
    with pytest.raises(BadImageError, match="corrupt.jpg") as info:
        list(loader)
    assert info.value.reason == UNKNOWN_MARKER


@pytest.mark.skipif(not dali_installed(), reason="DALI not installed")
def test_the_dali_iterator_skips_and_lists_it_too(damaged_folder):
    loader = load(damaged_folder, "dali", train=False, batch_size=2, size=32)
    it = loader.dali_iterator()
    batches = list(it)
    assert sum(len(b[0]["label"]) for b in batches) == 1
    assert [(os.path.basename(s.path), s.reason) for s in it.gpufeed_skipped.skipped] == [
        ("corrupt.jpg", UNKNOWN_MARKER)]


def _with_stray_bytes(data: bytes) -> bytes:
    """Two bytes that belong to no segment before the quantisation table (some cameras)."""
    dqt = data.find(b"\xff\xdb")
    return data[:dqt] + b"\x00\x12" + data[dqt:]


def test_stray_bytes_between_header_segments_are_dropped_and_nothing_else():
    data = _jpeg()
    assert jpeg_without_stray_bytes(data) is data  # nothing to drop: no copy
    assert jpeg_without_stray_bytes(_with_stray_bytes(data)) == data
    arr = np.frombuffer(_with_stray_bytes(data), dtype=np.uint8)  # what the loaders read
    assert np.array_equal(jpeg_without_stray_bytes(arr), np.frombuffer(data, dtype=np.uint8))
    assert image_size(arr) == (96, 160)  # read from the header past the stray bytes, not by PIL
    assert undecodable_reason(_with_stray_bytes(data)) is None  # libjpeg decodes it, with a warning

def test_fill_bytes_and_short_segments_are_kept_only_stray_bytes_go():
    data = _jpeg()
    dqt = data.find(b"\xff\xdb")
    stray_then_fill = data[:dqt] + b"\x00\x12\xff\xff" + data[dqt:]
    # The fill bytes before a marker are allowed: only the two stray bytes before them go.
    assert jpeg_without_stray_bytes(stray_then_fill) == data[:dqt] + b"\xff\xff" + data[dqt:]
    short_app = data[:dqt] + b"\xff\xe5\x00\x00" + data[dqt:]  # APP5 of length 0: libjpeg skips nothing more
    assert undecodable_reason(short_app) is None
    assert jpeg_without_stray_bytes(short_app) == data  # an empty segment DALI refuses: dropped whole
    short_com = data[:dqt] + b"\xff\xfe\x00\x01\x00\x12" + data[dqt:]  # COM of length 1, then stray bytes
    assert jpeg_without_stray_bytes(short_com) == data
    for variant in (stray_then_fill, short_app, short_com):
        cleaned = jpeg_without_stray_bytes(variant)
        assert np.array_equal(np.asarray(Image.open(io.BytesIO(cleaned))), np.asarray(Image.open(io.BytesIO(data))))
        assert image_size(np.frombuffer(variant, dtype=np.uint8)) == (96, 160)



@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("train", [False, True])
def test_both_backends_yield_a_jpeg_with_stray_bytes_between_segments(tmp_path, backend, train):
    """DALI's parser refused it ("Invalid marker") where libjpeg decodes it: the DALI backend
    skipped a file the torch backend yielded. In a batch DALI fails (a file no decoder
    reads), each file is tried again alone as the feed sends it: the stray-byte files
    are not blamed too."""
    root = tmp_path / "train"
    (root / "cls").mkdir(parents=True)
    data = _jpeg()
    dqt = data.find(b"\xff\xdb")
    (root / "cls" / "a.jpg").write_bytes(data)
    (root / "cls" / "b.jpg").write_bytes(_with_stray_bytes(data))
    (root / "cls" / "c.jpg").write_bytes(data[:dqt] + b"\x00\x12\xff\xff" + data[dqt:])  # stray, then fill
    (root / "cls" / "d.jpg").write_bytes(impossible_huffman(data))
    (root / "cls" / "e.jpg").write_bytes(data[:dqt] + b"\xff\xe1\x00\x01" + data[dqt:])  # APP1 of length 1
    loader = load(root, backend, train=train, batch_size=5, size=32, shuffle=False)
    (x, _), = list(loader)
    assert [os.path.basename(s.path) for s in loader.skipped] == ["d.jpg"]
    assert len(x) == 4
    if not train:  # the same pixels as the intact file
        assert all(torch.equal(x[0], x[k]) for k in (1, 2, 3))
