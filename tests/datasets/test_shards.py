"""WebDataset and TFRecord shards: the writers, the sample sources, ``gpufeed convert``
(checks, pre-shuffle, shard size, resume), the ecosystem's own readers (webdataset,
tarfile, DALI, TensorFlow) and the loaders on both backends."""

from __future__ import annotations

import hashlib
import importlib.util
import io
import json
import os
import shutil
import signal
import struct
import subprocess
import sys
import tarfile
import threading
from collections import Counter
from pathlib import Path

import numpy as np
import pytest

from gpufeed.cli import main
from gpufeed.datasets.images import generate_image_folder
from gpufeed.datasets.shards import MANIFEST, expand_shards, open_converted, open_shards
from gpufeed.datasets.shards.convert import PROGRESS_FILE, convert, parse_size
from gpufeed.datasets.shards.tfrecord import TFRecordShards, TFRecordWriter, masked_crc32c
from gpufeed.datasets.shards.webdataset import TarShardWriter, WebDatasetShards
from tests.helpers import running, still_running

SHARD_SIZE = 30_000  # a few small JPEGs per shard, so every test sees several shards
FORMATS = ("webdataset", "tfrecord")
SUFFIX = {"webdataset": ".tar", "tfrecord": ".tfrecord"}


def sha(data: bytes | np.ndarray) -> str:
    return hashlib.sha1(bytes(data)).hexdigest()


@pytest.fixture(scope="module")
def src(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """48 JPEGs in 4 classes (class-sorted on disk, as ImageFolder trees are)."""
    return generate_image_folder(tmp_path_factory.mktemp("shards") / "src", num_images=48, num_classes=4,
                                 seed=2, min_side=48, max_side=80)


@pytest.fixture(scope="module")
def expected(src: Path) -> Counter:
    """(image digest, label) of every source image."""
    classes = sorted(p.name for p in src.iterdir())
    return Counter((sha(p.read_bytes()), classes.index(p.parent.name)) for p in src.rglob("*.jpg"))


@pytest.fixture(scope="module")
def outputs(src: Path, tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """``src`` converted to each format."""
    out = {}
    for fmt in FORMATS:
        out[fmt] = tmp_path_factory.mktemp("out") / fmt
        report = convert(src, out[fmt], format=fmt, shard_size=SHARD_SIZE, workers=0, progress=False)
        assert report.written == report.samples_in == 48 and not report.skipped
    return out


@pytest.fixture(params=FORMATS)
def converted(request: pytest.FixtureRequest, outputs: dict[str, Path]) -> tuple[str, Path]:
    return request.param, outputs[request.param]


def contents(source) -> Counter:
    return Counter((sha(source.read(i)), source.labels[i]) for i in range(len(source)))


# -- round trip through our own sources -------------------------------------------------


@pytest.mark.parametrize("name", ["photos [v1]", "glob*star", "set{1..2}", "imagenet.tar"])
def test_folders_named_like_patterns_or_shards_are_what_they_hold(tmp_path, src, expected, name):
    # Such a folder was taken for a shard pattern ("matches no file") or refused as a
    # shard name, where torchvision's ImageFolder reads it; and the shards convert wrote
    # into "NAME out" could not be read back, by folder or by file.
    from gpufeed.datasets.shards import is_shard_spec
    from gpufeed.pipelines import classification_loader

    tree = tmp_path / name
    shutil.copytree(src, tree)
    assert not is_shard_spec(tree) and not is_shard_spec(str(tree))
    loader = classification_loader(tree, train=False, batch_size=16, size=32, backend="torch", device="cpu",
                                   num_workers=0)
    assert sum(len(y) for _, y in loader) == 48 and not loader.skipped
    out = tmp_path / f"{name} out"
    convert(tree, out, format="webdataset", shard_size=SHARD_SIZE, workers=0, progress=False)
    assert contents(open_converted(out)) == expected
    files = sorted(str(f) for f in out.glob("*.tar"))
    assert len(files) > 1 and expand_shards(files[0]) == [files[0]] and is_shard_spec(files[0])
    assert sum(contents(open_shards(f)).total() for f in files) == 48

def test_round_trip_gives_every_sample_once_with_its_label(converted, expected, src):
    fmt, dst = converted
    source = open_converted(dst)
    assert isinstance(source, WebDatasetShards if fmt == "webdataset" else TFRecordShards)
    assert contents(source) == expected
    assert source.classes == tuple(sorted(p.name for p in src.iterdir()))  # from the manifest
    assert source.groups.dtype == np.int64 and source.groups.sum() == len(source) and len(source.groups) > 2
    manifest = json.loads((dst / MANIFEST).read_text())
    assert manifest["format"] == fmt and manifest["samples"] == 48 and manifest["skipped"] == 0
    assert [os.path.basename(f) for f in source.files] == manifest["files"]
    fingerprint = source.fingerprint()
    assert fingerprint["kind"] == fmt and fingerprint["samples"] == 48
    assert fingerprint["shards"] == manifest["files"]
    assert source.nbytes() == sum(len(source.read(i)) for i in range(len(source)))
    first = manifest["files"][0]
    assert source.name(0) == (f"{first}:000000000" if fmt == "webdataset" else f"{first}:#0")


@pytest.mark.parametrize("with_index", [True, False])
def test_opening_opens_each_shard_once_and_reads_little(converted, tmp_path, with_index):
    from gpufeed.datasets.storage import SimulatedRemote

    fmt, dst = converted
    files = sorted(dst.glob(f"shard-*{SUFFIX[fmt]}"))
    if not with_index:
        for f in files:
            (tmp_path / f.name).write_bytes(f.read_bytes())
        files = sorted(tmp_path.glob(f"shard-*{SUFFIX[fmt]}"))
    storage = SimulatedRemote()
    source = open_shards([str(f) for f in files], storage)
    total = sum(f.stat().st_size for f in files)
    assert storage.opens == len(files)
    assert storage.bytes < total / 3  # headers and labels, not the images
    storage.bytes = 0
    source.read(len(source) - 1)
    assert storage.bytes == len(source.read(len(source) - 1)) and storage.opens == len(files)


def test_sources_index_shards_without_their_idx_files(converted, expected, tmp_path):
    """Walking the tar headers / TFRecord framing finds what the index says, and
    dali_index_files writes the missing index back, identical to the converter's."""
    fmt, dst = converted
    copy = tmp_path / "copy"
    copy.mkdir()
    originals = {}
    for f in sorted(dst.glob(f"shard-*{SUFFIX[fmt]}")):
        (copy / f.name).write_bytes(f.read_bytes())
        originals[f.name] = Path(f"{f}.idx").read_text()
    source = open_shards(str(copy / f"shard-*{SUFFIX[fmt]}"))
    assert contents(source) == expected
    assert source.classes == ("0", "1", "2", "3")  # no manifest here: numbers
    for idx in source.dali_index_files():
        assert Path(idx).read_text() == originals[Path(idx).name.removesuffix(".idx")]


def test_a_stale_index_is_not_trusted(tmp_path):
    images = [os.urandom(n) for n in (100, 700, 1300)]
    for fmt, Writer, Source in (("tar", TarShardWriter, WebDatasetShards), ("tfrecord", TFRecordWriter, TFRecordShards)):
        path = tmp_path / f"a.{fmt}"
        w = Writer(path)
        for k, b in enumerate(images):
            w.add(f"{k:03d}", b, "jpg", k)
        w.close()
        Path(f"{path}.idx").write_text("v1.2 1\njpg 99999 5 x.jpg cls 99999 1 x.cls\n" if fmt == "tar" else "0 5\n")
        source = Source([str(path)])
        assert [source.read(i).tobytes() for i in range(3)] == images and source.labels == (0, 1, 2)
        source.dali_index_files()  # the stale index is replaced
        assert Source([str(path)]).labels == (0, 1, 2)


def test_tars_written_by_tarfile_are_read_too(tmp_path):
    """PAX long names and a member that is not a sample part (a folder) are handled."""
    long = "d" * 120 + "/sample_a"
    path = tmp_path / "py.tar"
    with tarfile.open(path, "w", format=tarfile.PAX_FORMAT) as tar:
        folder = tarfile.TarInfo("d" * 120)
        folder.type = tarfile.DIRTYPE
        tar.addfile(folder)
        for name, data in ((f"{long}.jpg", b"\xff\xd8\xffjpeg"), (f"{long}.cls", b"7\n"),
                           ("b.png", b"\x89PNG\r\n\x1a\npng"), ("b.cls", b"2")):
            info = tarfile.TarInfo(name)
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
    source = WebDatasetShards([str(path)])
    assert source.labels == (7, 2)
    assert source.read(0).tobytes() == b"\xff\xd8\xffjpeg" and source.read(1).tobytes() == b"\x89PNG\r\n\x1a\npng"
    assert source.name(1) == "py.tar:b"


def test_a_sample_without_a_label_or_an_image_is_refused(tmp_path):
    for members, missing in (({"k1.jpg": b"\xff\xd8\xff"}, ".cls"), ({"k1.txt": b"x", "k1.cls": b"1"}, "image")):
        path = tmp_path / f"bad-{missing.strip('.')}.tar"
        with tarfile.open(path, "w", format=tarfile.USTAR_FORMAT) as tar:
            for name, data in members.items():
                info = tarfile.TarInfo(name)
                info.size = len(data)
                tar.addfile(info, io.BytesIO(data))
        with pytest.raises(ValueError, match=rf"{path.name}: sample 'k1' has no .*{missing}"):
            WebDatasetShards([str(path)])
    with pytest.raises(ValueError, match="not a tar"):
        (tmp_path / "junk.tar").write_bytes(b"x" * 1024)
        WebDatasetShards([str(tmp_path / "junk.tar")])
    with pytest.raises(ValueError, match="not a TFRecord"):
        (tmp_path / "junk.tfrecord").write_bytes(b"x" * 100)
        TFRecordShards([str(tmp_path / "junk.tfrecord")])


# -- the ecosystem's readers ------------------------------------------------------------

def test_webdataset_library_and_tarfile_read_every_sample(outputs, expected):
    dst = outputs["webdataset"]
    wds = pytest.importorskip("webdataset")
    files = [str(dst / f) for f in json.loads((dst / MANIFEST).read_text())["files"]]
    got, keys = Counter(), []
    for sample in wds.WebDataset(files, shardshuffle=False, empty_check=False):
        assert set(sample) >= {"__key__", "jpg", "cls"}
        got[(sha(sample["jpg"]), int(sample["cls"]))] += 1
        keys.append(sample["__key__"])
    assert got == expected and len(set(keys)) == 48
    for f in files:
        with tarfile.open(f) as tar:
            members = tar.getmembers()
        assert all(m.isfile() for m in members) and len(members) % 2 == 0
        with open(f, "rb") as raw:
            assert raw.read(512)[257:265] == b"ustar\x0000"  # POSIX ustar headers


def _run_dali(pipe_fn, n: int) -> list:
    pipe = pipe_fn()
    pipe.build()
    outs = pipe.run()
    return [[np.array(o[k]) for k in range(n)] for o in outs]


def test_dali_webdataset_reader_reads_every_sample(outputs, expected):
    dst = outputs["webdataset"]
    pytest.importorskip("nvidia.dali")
    from nvidia.dali import fn, pipeline_def

    source = open_converted(dst)
    n = len(source)

    @pipeline_def(batch_size=n, num_threads=1, device_id=None)
    def pipe():
        jpg, cls = fn.readers.webdataset(paths=source.files, index_paths=source.dali_index_files(),
                                         ext=["jpg", "cls"], missing_component_behavior="error")
        return jpg, cls

    jpgs, clss = _run_dali(pipe, n)
    got = Counter((sha(j), int(c.tobytes())) for j, c in zip(jpgs, clss, strict=True))
    assert got == expected


def test_dali_tfrecord_reader_reads_every_sample(outputs, expected):
    dst = outputs["tfrecord"]
    pytest.importorskip("nvidia.dali")
    import nvidia.dali.tfrecord as tfrec
    from nvidia.dali import fn, pipeline_def

    source = open_converted(dst)
    n = len(source)

    @pipeline_def(batch_size=n, num_threads=1, device_id=None)
    def pipe():
        out = fn.readers.tfrecord(path=source.files, index_path=source.dali_index_files(), features={
            "image/encoded": tfrec.FixedLenFeature((), tfrec.string, ""),
            "image/class/label": tfrec.FixedLenFeature([1], tfrec.int64, -1),
            "image/format": tfrec.FixedLenFeature((), tfrec.string, ""),
        })
        return out["image/encoded"], out["image/class/label"], out["image/format"]

    images, labels, formats = _run_dali(pipe, n)
    assert Counter((sha(i), int(lbl[0])) for i, lbl in zip(images, labels, strict=True)) == expected
    assert {f.tobytes() for f in formats} == {b"jpeg"}


def test_tensorflow_reads_every_record(outputs, expected, tmp_path):
    dst = outputs["tfrecord"]
    if importlib.util.find_spec("tensorflow") is None:
        pytest.skip("tensorflow is not installed")
    files = [str(dst / f) for f in json.loads((dst / MANIFEST).read_text())["files"]]
    # In a process of its own: TensorFlow and torch in one process is asking for trouble.
    code = (
        "import hashlib, json, sys, tensorflow as tf\n"
        "spec = {'image/encoded': tf.io.FixedLenFeature([], tf.string),\n"
        "        'image/class/label': tf.io.FixedLenFeature([], tf.int64),\n"
        "        'image/format': tf.io.FixedLenFeature([], tf.string)}\n"
        "out = []\n"
        "for rec in tf.data.TFRecordDataset(json.loads(sys.argv[1])):\n"  # checks both CRCs
        "    ex = tf.io.parse_single_example(rec, spec)\n"
        "    out.append([hashlib.sha1(ex['image/encoded'].numpy()).hexdigest(), int(ex['image/class/label']),\n"
        "                ex['image/format'].numpy().decode()])\n"
        "print('RESULT' + json.dumps(out))\n"
        # ...and writes records the other way round, for TFRecordShards to read.
        "with tf.io.TFRecordWriter(sys.argv[2]) as w:\n"
        "    for k in range(5):\n"
        "        f = {'image/encoded': tf.train.Feature(bytes_list=tf.train.BytesList(value=[bytes([k]) * (300 * k + 1)])),\n"
        "             'image/class/label': tf.train.Feature(int64_list=tf.train.Int64List(value=[k])),\n"
        "             'image/height': tf.train.Feature(int64_list=tf.train.Int64List(value=[7]))}\n"
        "        w.write(tf.train.Example(features=tf.train.Features(feature=f)).SerializeToString())\n"
    )
    written = tmp_path / "by-tf.tfrecord"
    run = subprocess.run([sys.executable, "-c", code, json.dumps(files), str(written)], capture_output=True,
                         text=True, timeout=300,
                         env={**os.environ, "TF_CPP_MIN_LOG_LEVEL": "2", "CUDA_VISIBLE_DEVICES": ""})
    assert run.returncode == 0, run.stderr[-2000:]
    rows = json.loads(run.stdout.split("RESULT", 1)[1])
    assert Counter((h, lbl) for h, lbl, _ in rows) == expected and {f for *_, f in rows} == {"jpeg"}
    theirs = TFRecordShards([str(written)])
    assert theirs.labels == (0, 1, 2, 3, 4)
    assert [theirs.read(k).tobytes() for k in range(5)] == [bytes([k]) * (300 * k + 1) for k in range(5)]


def test_records_whose_image_comes_first_are_read_whole(tmp_path):
    """Opening reads each record's first bytes when the label comes before the image (as
    gpufeed writes), the whole record otherwise (as other writers may order the fields)."""
    from gpufeed.datasets.shards.tfrecord import _field, _varint

    def entry(key: str, feature: bytes) -> bytes:
        return _field(1, _field(1, key.encode()) + _field(2, feature))

    images = [os.urandom(n) for n in (50, 5000, 20000)]
    w = TFRecordWriter(tmp_path / "a.tfrecord")
    for k, image in enumerate(images):
        image_first = entry("image/encoded", _field(1, _field(1, image))) + entry("x/other", _field(1, _field(1, b"z" * 700)))
        label_last = entry("image/class/label", _field(3, _field(1, _varint(k + 5))))
        w.write_record(_field(1, image_first + label_last))
    w.close()
    source = TFRecordShards([str(tmp_path / "a.tfrecord")])
    assert source.labels == (5, 6, 7) and [source.read(i).tobytes() for i in range(3)] == images
    data = bytearray((tmp_path / "a.tfrecord").read_bytes())
    data[-100] ^= 0xFF  # inside the last image: its data CRC no longer matches
    (tmp_path / "a.tfrecord").write_bytes(bytes(data))
    with pytest.raises(ValueError, match=r"a.tfrecord: record #2 .*data CRC"):
        TFRecordShards([str(tmp_path / "a.tfrecord")])


def test_tfrecord_framing_and_crc32c_known_vectors(tmp_path):
    import google_crc32c

    assert google_crc32c.value(b"123456789") == 0xE3069283  # the CRC-32C check value
    crc = 0xE3069283
    assert masked_crc32c(b"123456789") == (((crc >> 15) | (crc << 17)) + 0xA282EAD8) & 0xFFFFFFFF
    w = TFRecordWriter(tmp_path / "a.tfrecord")
    w.write_record(b"hello")
    w.close()
    data = (tmp_path / "a.tfrecord").read_bytes()
    assert data[:8] == struct.pack("<Q", 5) and data[12:17] == b"hello" and len(data) == 8 + 4 + 5 + 4
    assert struct.unpack("<I", data[8:12])[0] == masked_crc32c(data[:8])
    assert struct.unpack("<I", data[17:])[0] == masked_crc32c(b"hello")
    assert (tmp_path / "a.tfrecord.idx").read_text() == "0 21\n"


def test_crc32c_is_the_c_implementation():
    """pyproject promises google-crc32c's C implementation. 1.5 loads it through
    ``pkg_resources``, which setuptools 81+ no longer has (torch pulls in setuptools 84):
    it fell back to pure Python with only a RuntimeWarning, 0.2 s a MB against 0.2 ms,
    for every TFRecord framed or checked. Hence google-crc32c>=1.6."""
    import google_crc32c

    assert google_crc32c.implementation == "c"


# -- convert: checks, shuffle, sizes, resume ---------------------------------------------

def corrupt_mid_file(data: bytes) -> bytes:
    """A JPEG whose entropy-coded data has 64 bytes zeroed half-way: libjpeg only warns,
    and lenient decoders return an image with garbage in it."""
    start = data.find(b"\xff\xda")
    mid = (start + len(data)) // 2
    return data[:mid] + b"\0" * 64 + data[mid + 64:]


def test_bad_inputs_are_skipped_and_reported(tmp_path):
    from PIL import Image

    root = generate_image_folder(tmp_path / "src", num_images=12, num_classes=2, seed=5, min_side=48, max_side=64)
    files = sorted(root.rglob("*.jpg"))
    files[0].write_bytes(b"")
    files[1].write_bytes(files[1].read_bytes()[:300])
    bad = corrupt_mid_file(files[2].read_bytes())
    files[2].write_bytes(bad)
    with Image.open(io.BytesIO(bad)) as img:
        img.load()  # PIL decodes it without complaint: only a strict check catches it
    (root / "class_001" / "notes.png").write_bytes(b"not an image at all")
    for fmt in FORMATS:
        report = convert(root, tmp_path / fmt, format=fmt, workers=0, progress=False)
        reasons = dict(report.skipped)
        assert report.samples_in == 13 and report.written == 9
        assert report.written + len(report.skipped) == report.samples_in
        assert reasons == {
            str(files[0]): "empty file (0 bytes)",
            str(files[1]): "truncated JPEG (no end-of-image marker)",
            str(files[2]): reasons[str(files[2])],
            str(root / "class_001" / "notes.png"): "not an image (unknown file signature)",
        }
        assert reasons[str(files[2])].startswith("could not decode: Corrupt JPEG data")
        assert len(open_converted(tmp_path / fmt)) == 9
        assert json.loads((tmp_path / fmt / MANIFEST).read_text())["skipped"] == 4
        assert "4 skipped" in report.summary()


def test_corrupt_pngs_are_skipped_by_a_pool_of_decoders(tmp_path):
    from PIL import Image

    from tests.helpers import with_png_crcs

    root = generate_image_folder(tmp_path / "src", num_images=6, num_classes=2, seed=5, min_side=48, max_side=64)
    png = io.BytesIO()
    with Image.open(sorted(root.rglob("*.jpg"))[0]) as img:
        img.save(png, format="PNG")
    data = bytearray(png.getvalue())
    data[len(data) // 2: len(data) // 2 + 32] = bytes(range(100, 132))
    (root / "class_000" / "crc.png").write_bytes(bytes(data))
    # intact CRCs: libpng's error under torchvision's decoder crashed the worker, and the pool hung
    (root / "class_000" / "scrambled.png").write_bytes(with_png_crcs(data))
    report = convert(root, tmp_path / "out", format="webdataset", workers=2, progress=False)
    reasons = {os.path.basename(p): r for p, r in report.skipped}
    assert report.samples_in == 8 and report.written == 6
    assert reasons["crc.png"] == "corrupt PNG (CRC error in its IDAT chunk)"
    assert reasons["scrambled.png"].startswith("could not decode")


def _crash_on_three(i: int) -> int:
    if i == 3:
        os.kill(os.getpid(), signal.SIGKILL)  # what a segfaulting decoder does to its process
    return i


def test_a_decoding_process_that_dies_stops_the_conversion_with_an_error():
    from gpufeed.datasets.shards.convert import _map_ordered

    outcome: list[BaseException] = []

    def run() -> None:
        try:
            list(_map_ordered(_crash_on_three, list(range(40)), 2))
        except BaseException as exc:  # noqa: BLE001 - handed to the test's thread
            outcome.append(exc)

    worker = threading.Thread(target=run, daemon=True)
    worker.start()
    worker.join(timeout=120)
    assert not worker.is_alive(), "the conversion hung on a dead decoding process"
    assert len(outcome) == 1 and isinstance(outcome[0], RuntimeError)
    assert "decoding process died" in str(outcome[0]) and "re-run the same command" in str(outcome[0])


def test_decoding_in_a_process_pool_writes_the_same_shards(src, tmp_path):
    a = convert(src, tmp_path / "a", format="webdataset", shard_size=SHARD_SIZE, workers=0, progress=False)
    b = convert(src, tmp_path / "b", format="webdataset", shard_size=SHARD_SIZE, workers=2, progress=False)
    assert a.shards == b.shards
    for f in sorted((tmp_path / "a").glob("shard-*")):
        assert f.read_bytes() == (tmp_path / "b" / f.name).read_bytes()


@pytest.mark.parametrize("fmt", FORMATS)
def test_shards_stay_under_the_target_size(src, tmp_path, fmt):
    report = convert(src, tmp_path / "o", format=fmt, shard_size="20KB", workers=0, progress=False)
    source = open_converted(tmp_path / "o")
    sizes = [os.path.getsize(f) for f in source.files]
    assert report.shards == len(sizes) > 5
    for size, count in zip(sizes, source.groups, strict=True):
        assert size <= 20_000 or count == 1
    assert sum(sizes[:-1]) / (len(sizes) - 1) > 10_000  # and are filled, not cut early


def test_preshuffle_is_deterministic_and_mixes_classes(src, tmp_path):
    def shard_labels(dst: Path) -> list[list[int]]:
        source = open_converted(dst)
        bounds = np.cumsum([0, *source.groups])
        return [list(source.labels[a:b]) for a, b in zip(bounds[:-1], bounds[1:], strict=True)]

    for name, seed, shuffle in (("s0", 0, True), ("s0again", 0, True), ("s1", 1, True), ("plain", 0, False)):
        convert(src, tmp_path / name, format="tfrecord", shard_size=SHARD_SIZE, seed=seed, shuffle=shuffle,
                workers=0, progress=False)
    s0 = shard_labels(tmp_path / "s0")
    assert s0 == shard_labels(tmp_path / "s0again")
    for f in (tmp_path / "s0").glob("shard-*"):
        assert f.read_bytes() == (tmp_path / "s0again" / f.name).read_bytes()
    assert s0 != shard_labels(tmp_path / "s1")
    assert all(len(set(labels)) > 1 for labels in s0)  # every shard holds several classes
    flat = [lbl for labels in shard_labels(tmp_path / "plain") for lbl in labels]
    assert flat == sorted(flat)  # without shuffling: the source's class-sorted order


class Stop(Exception):
    pass


@pytest.mark.parametrize("fmt", FORMATS)
def test_an_interrupted_conversion_resumes_without_losing_or_repeating(src, expected, tmp_path, fmt):
    # One bad file, early in the shuffled order, must be reported once, not per run.
    root = tmp_path / "src"
    root.mkdir()
    for p in src.rglob("*.jpg"):
        (root / p.parent.name).mkdir(exist_ok=True)
        (root / p.parent.name / p.name).write_bytes(p.read_bytes())
    bad = sorted(root.rglob("*.jpg"))[5]
    bad.write_bytes(b"")
    classes = sorted(p.name for p in src.iterdir())
    original = src / bad.parent.name / bad.name
    want = expected - Counter({(sha(original.read_bytes()), classes.index(bad.parent.name)): 1})

    def stop_after(k: int):
        def hook(shard: int, path: str) -> None:
            assert os.path.isfile(path) and os.path.isfile(f"{path}.idx")
            if shard == k - 1:
                raise Stop
        return hook

    dst = tmp_path / "out"
    with pytest.raises(Stop):
        convert(root, dst, format=fmt, shard_size=SHARD_SIZE, workers=0, progress=False, on_shard=stop_after(2))
    assert len(list(dst.glob(f"shard-*{SUFFIX[fmt]}"))) == 2 and not (dst / MANIFEST).exists()
    # A crash half-way through the next shard leaves a partial file behind.
    (dst / f"shard-000002{SUFFIX[fmt]}.partial").write_bytes(b"half a shard")
    with pytest.raises(Stop):
        convert(root, dst, format=fmt, shard_size=SHARD_SIZE, workers=0, progress=False, on_shard=stop_after(4))
    report = convert(root, dst, format=fmt, shard_size=SHARD_SIZE, workers=2, progress=False)
    assert not list(dst.glob("*.partial"))
    assert report.samples_in == 48 and report.written == 47 and report.skipped == [(str(bad), "empty file (0 bytes)")]
    assert contents(open_converted(dst)) == want
    fresh = convert(root, tmp_path / "fresh", format=fmt, shard_size=SHARD_SIZE, workers=0, progress=False)
    assert fresh.shards == report.shards
    for f in (tmp_path / "fresh").glob("shard-*"):
        assert f.read_bytes() == (dst / f.name).read_bytes()  # resumed == written in one go
    # Done: a re-run has nothing to do; other settings are refused, not mixed in.
    assert convert(root, dst, format=fmt, shard_size=SHARD_SIZE, workers=0, progress=False).written == 47
    with pytest.raises(ValueError, match=r"other settings \(seed: saved 0, now 3; in "):
        convert(root, dst, format=fmt, shard_size=SHARD_SIZE, seed=3, workers=0, progress=False)


def test_a_finished_conversion_whose_source_changed_is_refused_and_one_that_wrote_nothing_starts_afresh(src,
                                                                                                      tmp_path):
    root = tmp_path / "src"
    shutil.copytree(src, root)
    dst = tmp_path / "out"
    convert(root, dst, format="webdataset", shard_size=SHARD_SIZE, workers=0, progress=False)
    replaced = sorted(root.rglob("*.jpg"))[3]
    replaced.write_bytes(sorted(root.rglob("*.jpg"))[4].read_bytes())  # another photo, same name
    # Said "nothing to do" and kept the old bytes.
    with pytest.raises(ValueError, match=r"the source's files changed since this conversion"):
        convert(root, dst, format="webdataset", shard_size=SHARD_SIZE, workers=0, progress=False)
    # No image decodes: refused, and once the images are repaired (another source, by
    # settings) the same output folder takes the conversion, since nothing was written.
    bad = tmp_path / "bad"
    (bad / "a").mkdir(parents=True)
    (bad / "a" / "x.jpg").write_bytes(b"not a jpeg at all")
    with pytest.raises(ValueError, match="no image in 1 samples decodes"):
        convert(bad, tmp_path / "bad-out", format="webdataset", workers=0, progress=False)
    shutil.copy(replaced, bad / "a" / "y.jpg")
    report = convert(bad, tmp_path / "bad-out", format="webdataset", workers=0, progress=False)
    assert report.written == 1 and report.skipped == [(str(bad / "a" / "x.jpg"), report.skipped[0][1])]


def test_a_killed_conversion_resumes(src, expected, tmp_path):
    """A real kill (SIGKILL after the first shard), then a re-run."""
    dst = tmp_path / "out"
    code = (
        "import os, signal, sys\n"
        "from gpufeed.datasets.shards.convert import convert\n"
        "def hook(k, path):\n"
        "    if k == 1: os.kill(os.getpid(), signal.SIGKILL)\n"
        f"convert({str(src)!r}, {str(dst)!r}, format='webdataset', shard_size={SHARD_SIZE}, workers=0,\n"
        "        progress=False, on_shard=hook)\n"
    )
    run = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300,
                         cwd=Path(__file__).parents[2])
    assert run.returncode == -9, run.stderr[-2000:]
    assert json.loads((dst / PROGRESS_FILE).read_text())["files"] == ["shard-000000.tar", "shard-000001.tar"]
    report = convert(src, dst, format="webdataset", shard_size=SHARD_SIZE, workers=0, progress=False)
    assert report.written == 48 and contents(open_converted(dst)) == expected


def test_convert_refuses_bad_arguments(src, tmp_path):
    with pytest.raises(ValueError, match="format must be"):
        convert(src, tmp_path / "a", format="zip")
    with pytest.raises(ValueError, match="not a size"):
        convert(src, tmp_path / "a", format="tfrecord", shard_size="lots")
    with pytest.raises(FileNotFoundError, match="does not exist"):
        convert(tmp_path / "nothing", tmp_path / "a", format="tfrecord")
    (tmp_path / "full").mkdir()
    (tmp_path / "full" / "precious.txt").write_text("keep me")
    with pytest.raises(ValueError, match="not empty"):
        convert(src, tmp_path / "full", format="tfrecord")
    assert parse_size("256MB") == 256_000_000 and parse_size("1GiB") == 2**30 and parse_size("4096") == 4096


def test_convert_reads_a_file_list(src, tmp_path):
    lines = [f"{p} {k}" for k, p in enumerate(sorted(src.rglob("*.jpg"))[:10])]
    (tmp_path / "list.txt").write_text("\n".join(lines) + "\n")
    report = convert(tmp_path / "list.txt", tmp_path / "o", format="webdataset", workers=0, progress=False)
    source = open_converted(tmp_path / "o")
    assert report.written == 10 and sorted(source.labels) == list(range(10))
    assert source.classes == tuple(str(k) for k in range(10))


@pytest.mark.skipif(importlib.util.find_spec("gpufeed.datasets.shards.raw") is None,
                    reason="the raw cache module (gpufeed/datasets/shards/raw.py) is not here yet")
def test_convert_to_a_raw_cache(src, tmp_path):
    root = tmp_path / "src"
    generate_image_folder(root, num_images=10, num_classes=2, seed=4, min_side=40, max_side=60)
    sorted(root.rglob("*.jpg"))[0].write_bytes(b"")
    report = convert(root, tmp_path / "raw", format="raw", raw_size=32, workers=0, progress=False)
    assert report.written == 9 and len(report.skipped) == 1
    manifest = json.loads((tmp_path / "raw" / MANIFEST).read_text())
    assert manifest["format"] == "raw" and manifest["samples"] == 9 and manifest["skipped"] == 1
    source = open_converted(tmp_path / "raw")
    assert len(source) == 9 and source.read(0).shape == (32, 32, 3)


# -- patterns ---------------------------------------------------------------------------

def test_expand_shards_braces_globs_and_lists(tmp_path):
    for k in range(4):
        (tmp_path / f"train-{k:06d}.tar").write_bytes(b"")
    (tmp_path / "val-000000.tar").write_bytes(b"")
    want = [str(tmp_path / f"train-{k:06d}.tar") for k in range(4)]
    assert expand_shards(str(tmp_path / "train-{000000..000003}.tar")) == want
    assert expand_shards(str(tmp_path / "train-*.tar")) == want
    assert expand_shards(tmp_path / "train-{000001..000002}.tar") == want[1:3]
    assert expand_shards([want[3], str(tmp_path / "val-*.tar")]) == [want[3], str(tmp_path / "val-000000.tar")]
    with pytest.raises(FileNotFoundError, match="train-000004.tar does not exist"):
        expand_shards(str(tmp_path / "train-{000000..000004}.tar"))
    with pytest.raises(FileNotFoundError, match="matches no file"):
        expand_shards(str(tmp_path / "test-*.tar"))


# -- the command line and the loaders ---------------------------------------------------

def test_cli_convert_end_to_end(src, tmp_path, capsys):
    dst = tmp_path / "wds"
    assert main(["convert", str(src), str(dst), "--format", "webdataset", "--shard-size", "30KB",
                 "--seed", "1", "--workers", "2"]) == 0
    out = capsys.readouterr().out
    assert "48 written, 0 skipped" in out and "shard(s)" in out
    manifest = json.loads((dst / MANIFEST).read_text())
    assert manifest["seed"] == 1 and len(manifest["files"]) > 2
    assert main(["convert", str(src), str(tmp_path / "tfr"), "--format", "tfrecord", "--no-shuffle",
                 "--workers", "0"]) == 0
    assert "1 shard(s)" in capsys.readouterr().out
    assert main(["convert", str(src), str(tmp_path / "raw"), "--format", "raw", "--raw-size", "32",
                 "--workers", "0"]) == 0
    assert "48 written, 0 skipped, 2 cache file(s)" in capsys.readouterr().out
    assert main(["convert", str(tmp_path / "missing"), str(tmp_path / "x"), "--format", "tfrecord"]) == 2
    assert "does not exist" in capsys.readouterr().err


@pytest.mark.parametrize("fmt", [*FORMATS, "raw"])
def test_a_finished_conversion_run_again_says_so_and_a_resumed_one_counts_both_runs(src, tmp_path, capsys,
                                                                                   monkeypatch, fmt):
    """Every format alike: a re-run of a finished conversion prints no progress line and says
    that DST already holds it, with the first run's counts; a resumed one says how many
    samples were there before and how many it wrote."""
    dst = tmp_path / "out"
    args = ["convert", str(src), str(dst), "--format", fmt, "--shard-size", "30KB", "--raw-size", "32",
            "--workers", "0"]
    assert main(args) == 0
    first = capsys.readouterr()
    assert "48 written, 0 skipped" in first.out and "already" not in first.out and "img" in first.err
    assert main(args) == 0
    again = capsys.readouterr()
    assert again.err == ""  # no "writing raw cache ...: 0 img" lines
    assert again.out.startswith(f"{dst} already holds this conversion ({fmt}) of 48 samples: 48 written, "
                                "0 skipped, ") and again.out.rstrip().endswith("; nothing to do")
    kw = {"format": fmt, "shard_size": SHARD_SIZE, "raw_size": 32, "workers": 0, "progress": False}
    report = convert(src, dst, **kw)
    assert (report.already_complete, report.already_written, report.written_now) == (True, 48, 0)
    assert report.written == 48 and report.skipped == []  # the finished conversion's counts, as before

    # Resumed: stopped after some samples, then run to its end.
    resumed = tmp_path / "resumed"
    if fmt == "raw":
        from gpufeed.datasets.shards.raw import RawWriter

        add, added = RawWriter.add, []

        def add_then_stop(self, index, pixels, label):
            add(self, index, pixels, label)
            added.append(index)
            if len(added) == 20:
                self.flush()  # what the periodic save would have recorded before a kill
                raise Stop

        monkeypatch.setattr(RawWriter, "add", add_then_stop)
        with pytest.raises(Stop):
            convert(src, resumed, **kw)
        monkeypatch.setattr(RawWriter, "add", add)
        there = 20
    else:
        def stop(shard: int, path: str) -> None:
            if shard == 1:
                raise Stop

        with pytest.raises(Stop):
            convert(src, resumed, on_shard=stop, **kw)
        there = json.loads((resumed / PROGRESS_FILE).read_text())["written"]
    assert 0 < there < 48
    report = convert(src, resumed, **kw)
    assert (report.already_complete, report.already_written, report.written_now) == (False, there, 48 - there)
    assert report.written == 48 and f"48 written ({there} already there, {48 - there} now), 0 skipped" in (
        report.summary())
    fresh = convert(src, tmp_path / "fresh", **kw)
    assert (fresh.already_complete, fresh.already_written, fresh.written_now) == (False, 0, 48)
    assert "already" not in fresh.summary()


@pytest.fixture(scope="module")
def numbered(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """23 images, label == sample number, converted to both formats (so the labels a
    loader yields say exactly which samples came out)."""
    base = tmp_path_factory.mktemp("numbered")
    root = generate_image_folder(base / "src", num_images=23, num_classes=1, seed=3, min_side=48, max_side=64)
    lines = [f"{p} {k}" for k, p in enumerate(sorted(root.rglob("*.jpg")))]
    (base / "list.txt").write_text("\n".join(lines) + "\n")
    out = {}
    for fmt in FORMATS:
        convert(base / "list.txt", base / fmt, format=fmt, shard_size=8_000, workers=0, progress=False)
        out[fmt] = base / fmt
    return out


@pytest.mark.parametrize("fmt", FORMATS)
@pytest.mark.parametrize(("backend", "workers"), [
    ("torch", 0),
    # Worker processes start by forkserver once DALI is imported (as it is by now), each
    # importing torch again: seconds per loader, so one loader here.
    pytest.param("torch", 2, marks=pytest.mark.slow),
    ("dali", 2),
])
def test_loaders_read_every_sample_once_per_epoch(numbered, fmt, backend, workers):
    if backend == "dali":
        pytest.importorskip("nvidia.dali")
    from gpufeed.pipelines import classification_loader

    dst = numbered[fmt]
    pattern = str(dst / f"shard-*{SUFFIX[fmt]}")
    for spec in (dst, pattern) if workers == 0 or backend == "dali" else (pattern,):
        loader = classification_loader(spec, train=True, batch_size=4, size=32, backend=backend, device="cpu",
                                       shuffle=True, last_batch="partial", num_workers=workers)
        for _ in range(2):
            labels = []
            for images, y in loader:
                assert images.shape[1:] == (3, 32, 32)
                labels += y.tolist()
            assert sorted(labels) == list(range(23))


def test_files_the_loaders_yield_are_written_so_every_reader_decodes_them(tmp_path):
    """A JPEG with stray bytes between its header segments (libjpeg warns "Corrupt JPEG
    data: 2 extraneous bytes before marker"), a PNG whose text chunk's CRC is wrong (PIL
    refused it) and a CIELab TIFF (DALI decoded other colours; TensorFlow reads no TIFF):
    the loaders yield all three, and convert skipped the first two. Now each is written
    in a form DALI's reader + decoder and PIL decode, with the loaders' pixels."""
    import zlib

    from PIL import Image

    root = tmp_path / "src" / "a"
    root.mkdir(parents=True)
    scene = Image.new("RGB", (40, 32), (20, 40, 120))
    out = io.BytesIO()
    scene.save(out, "JPEG", quality=95)
    jpeg = out.getvalue()
    dqt = jpeg.find(b"\xff\xdb")
    (root / "stray.jpg").write_bytes(jpeg[:dqt] + b"\x00\x12" + jpeg[dqt:])
    out = io.BytesIO()
    scene.save(out, "PNG")
    body = b"tEXtComment\0edited"
    chunk = struct.pack(">I", len(body) - 4) + body + struct.pack(">I", (zlib.crc32(body) + 1) & 0xFFFFFFFF)
    (root / "text.png").write_bytes(out.getvalue()[:33] + chunk + out.getvalue()[33:])
    Image.new("LAB", (40, 32), (60, 150, 100)).save(root / "lab.tif")
    expected = {"stray.jpg": np.array(Image.open(io.BytesIO(jpeg)).convert("RGB")),
                "text.png": np.array(scene), "lab.tif": np.array(Image.open(root / "lab.tif").convert("RGB"))}
    report = convert(tmp_path / "src", tmp_path / "wds", format="webdataset", workers=0, progress=False,
                     shuffle=False)
    assert (report.written, report.skipped) == (3, [])
    pytest.importorskip("nvidia.dali")
    from nvidia.dali import fn, pipeline_def, types

    source = open_converted(tmp_path / "wds")

    @pipeline_def(batch_size=3, num_threads=1, device_id=None)
    def pipe():
        image, cls = fn.readers.webdataset(paths=source.files, index_paths=source.dali_index_files(),
                                           ext=["jpg;png;tif", "cls"], missing_component_behavior="error")
        return image, fn.decoders.image(image, device="cpu", output_type=types.RGB)

    encoded, decoded = _run_dali(pipe, 3)
    for name, data, pixels in zip(sorted(expected), encoded, decoded, strict=True):  # lab, stray, text
        with Image.open(io.BytesIO(data.tobytes())) as img:
            assert np.abs(np.array(img.convert("RGB")).astype(int) - expected[name]).max() <= 1, name
        assert np.abs(pixels.astype(int) - expected[name]).max() <= 1, name


def _converted_pngs(tmp_path: Path, files: dict[str, bytes]) -> list[bytes]:
    """``files`` (PNG bytes by name) in one class folder, converted to WebDataset, every
    file written (none skipped): the PNG members' bytes."""
    for name, data in files.items():
        (tmp_path / "src" / "a").mkdir(parents=True, exist_ok=True)
        (tmp_path / "src" / "a" / f"{name}.png").write_bytes(data)
    report = convert(tmp_path / "src", tmp_path / "wds", format="webdataset", progress=False)
    assert report.written == len(files) and not report.skipped
    with tarfile.open(next((tmp_path / "wds").glob("*.tar"))) as tar:
        return [tar.extractfile(m).read() for m in tar.getmembers() if m.name.endswith(".png")]


def test_a_png_whose_text_chunks_pass_pils_total_is_decoded_and_written_without_its_text(tmp_path):
    # Text chunks that together pass PIL's MAX_TEXT_MEMORY (64 MiB), each under its 1 MiB
    # per-chunk limit: PIL refused the file ("Too much memory used in text chunks") and the
    # torch backend skipped it, while libpng (DALI) decodes it. The total is counted as PIL
    # counts it: tEXt, zTXt inflated, iTXt in characters (not bytes); a chunk PIL passes
    # over counts 0. 67 chunks of a million spaces deflate to a few kB.
    import zlib

    from PIL import Image, PngImagePlugin

    from gpufeed.datasets.image_bytes import png_text_beyond_pil
    from gpufeed.pipelines.torch_loader import decode_rgb

    assert PngImagePlugin.MAX_TEXT_MEMORY == 64 << 20  # the counts below are made for it

    def chunk(kind: bytes, body: bytes) -> bytes:
        return struct.pack(">I", len(body)) + kind + body + struct.pack(">I", zlib.crc32(kind + body))

    plain = io.BytesIO()
    Image.new("RGB", (40, 30), (200, 30, 90)).save(plain, "PNG")
    png = plain.getvalue()
    spaces = chunk(b"zTXt", b"Note\0\0" + zlib.compress(b" " * 1_000_000))
    accented = chunk(b"iTXt", b"Desc\0\0\0\0\0" + "é".encode() * 100_000)  # 100,000 characters, 200,000 bytes
    at = spaces * 67 + accented  # 67,100,000 characters: under 64 MiB (67,108,864), PIL reads it
    texts = {"at": at,
             "over": at + chunk(b"tEXt", b"More\0" + b"x" * 8_865),  # 67,108,865
             "skipped": at + chunk(b"zTXt", b"Bad\0\0" + b"not deflate" * 9_000)}  # PIL keeps no text
    files = {name: png[:33] + text + png[33:] for name, text in texts.items()}  # after the IHDR chunk
    assert [png_text_beyond_pil(d) for d in files.values()] == [False, True, False]
    with pytest.raises(ValueError, match="MAX_TEXT_MEMORY"):
        Image.open(io.BytesIO(files["over"]))
    for data in files.values():
        assert decode_rgb(np.frombuffer(data, dtype=np.uint8))[0, 0].tolist() == [200, 30, 90]
    members = _converted_pngs(tmp_path, files)
    assert sorted(map(len, members)) == sorted([len(png), len(files["at"]), len(files["skipped"])])
    for data in members:  # every member opens in PIL, as webdataset's decoder opens it
        assert Image.open(io.BytesIO(data)).convert("RGB").getpixel((0, 0)) == (200, 30, 90)


def test_a_png_whose_text_pil_will_not_inflate_is_written_without_its_text(tmp_path):
    # A zTXt chunk inflating past PIL's MAX_TEXT_CHUNK (a long XMP history): the loaders
    # yield the image (the torch backend drops the text), so convert keeps it, and writes
    # it without its text so that readers decoding members with PIL (webdataset + PIL) do
    # too; a PNG with ordinary text keeps its bytes.
    import zlib

    from PIL import Image

    from gpufeed.datasets.image_bytes import png_text_beyond_pil

    def with_text(png: bytes, kind: bytes, body: bytes) -> bytes:
        chunk = struct.pack(">I", len(body)) + kind + body + struct.pack(">I", zlib.crc32(kind + body))
        return png[:33] + chunk + png[33:]  # after the signature and the IHDR chunk

    plain = io.BytesIO()
    Image.new("RGB", (40, 30), (200, 30, 90)).save(plain, "PNG")
    big = zlib.compress(b" " * (2 << 20))
    files = {"ztxt": with_text(plain.getvalue(), b"zTXt", b"XML:com.adobe.xmp\0\0" + big),
             "itxt": with_text(plain.getvalue(), b"iTXt", b"XML:com.adobe.xmp\0\1\0\0\0" + big),
             "small": with_text(plain.getvalue(), b"zTXt", b"Comment\0\0" + zlib.compress(b"hello"))}
    assert [png_text_beyond_pil(d) for d in files.values()] == [True, True, False]
    members = _converted_pngs(tmp_path, files)
    assert sorted(map(len, members)) == sorted([len(plain.getvalue())] * 2 + [len(files["small"])])
    for data in members:  # every member opens in PIL, as webdataset's decoder opens it
        assert Image.open(io.BytesIO(data)).convert("RGB").getpixel((0, 0)) == (200, 30, 90)


@pytest.mark.parametrize(("where", "beyond"), [
    ("after frame 1's control chunk", False),  # PIL loads frame 0 and stops there: kept as it is
    ("after frame 0's image data", True),      # read when frame 0 loads: written without text
])
def test_an_animated_pngs_text_counts_up_to_the_frame_pil_loads(tmp_path, where, beyond):
    # PIL reads an animated PNG's chunks up to frame 1's fcTL when it loads frame 0, so text
    # past it never reaches MAX_TEXT_MEMORY. It was counted, and the torch backend dropped
    # the text of a file PIL reads as it is (no change in pixels: convert writes an APNG as a
    # still PNG of frame 0 either way).
    import zlib

    from PIL import Image, PngImagePlugin

    from gpufeed.datasets.image_bytes import png_text_beyond_pil
    from gpufeed.pipelines.torch_loader import decode_rgb

    def chunk(kind: bytes, body: bytes) -> bytes:
        return struct.pack(">I", len(body)) + kind + body + struct.pack(">I", zlib.crc32(kind + body))

    out = io.BytesIO()
    frames = [Image.new("RGB", (40, 30), c) for c in ((200, 30, 90), (10, 220, 40))]
    frames[0].save(out, "PNG", save_all=True, append_images=frames[1:])
    apng = out.getvalue()
    text = chunk(b"zTXt", b"Note\0\0" + zlib.compress(b" " * 1_000_000)) * 68  # 68 M characters
    chunks, pos = [], 8
    while pos < len(apng):
        end = pos + 12 + struct.unpack(">I", apng[pos:pos + 4])[0]
        chunks.append(apng[pos:end])
        pos = end
    kinds = [c[4:8] for c in chunks]
    assert kinds.count(b"fcTL") == 2 and kinds.index(b"IDAT") < len(kinds) - 1 - kinds[::-1].index(b"fcTL")
    cut = len(kinds) - kinds[::-1].index(b"fcTL") if beyond is False else kinds.index(b"IDAT") + 1
    data = apng[:8] + b"".join(chunks[:cut]) + text + b"".join(chunks[cut:])
    assert png_text_beyond_pil(data) is beyond
    if beyond:
        with pytest.raises(ValueError, match="MAX_TEXT_MEMORY"):
            Image.open(io.BytesIO(data)).load()
    else:
        with Image.open(io.BytesIO(data)) as im:
            assert im.is_animated and im.convert("RGB").getpixel((0, 0)) == (200, 30, 90)
        assert PngImagePlugin.MAX_TEXT_MEMORY < 68_000_000
    assert decode_rgb(np.frombuffer(data, dtype=np.uint8))[0, 0].tolist() == [200, 30, 90]
    (member,) = _converted_pngs(tmp_path, {"anim": data})
    assert Image.open(io.BytesIO(member)).convert("RGB").getpixel((0, 0)) == (200, 30, 90)


# -- unfinished, cut short or odd conversions ---------------------------------------------

def _pngs(root: Path, count: int, classes: int = 2) -> Path:
    """``count`` small PNGs (about 100 bytes each) in ``classes`` class folders."""
    from PIL import Image

    for k in range(count):
        (root / f"c{k % classes}").mkdir(parents=True, exist_ok=True)
        Image.fromarray(np.full((16, 16, 3), k, np.uint8)).save(root / f"c{k % classes}" / f"{k:03d}.png")
    return root


def _stop_on_add(monkeypatch, cls, count: int) -> None:
    """Make ``cls.add`` raise :class:`Stop` on its ``count``-th call: a conversion killed
    while it writes."""
    add, calls = cls.add, []

    def add_then_stop(self, *args, **kwargs):
        calls.append(1)
        if len(calls) == count:
            if hasattr(self, "flush"):
                self.flush()
            raise Stop
        return add(self, *args, **kwargs)

    monkeypatch.setattr(cls, "add", add_then_stop)


def _torch_loader(source):
    from gpufeed.pipelines import classification_loader

    return classification_loader(source, train=True, batch_size=8, size=16, backend="torch", device="cpu",
                                 num_workers=0)


@pytest.mark.parametrize("fmt", [*FORMATS, "raw"])
def test_the_folder_of_an_unfinished_conversion_is_refused_with_how_to_finish_it(tmp_path, monkeypatch, fmt):
    from gpufeed.datasets.shards.raw import RawWriter
    from gpufeed.pipelines.sources import open_source

    src = _pngs(tmp_path / "src", 30)
    dst = tmp_path / "out"
    writer = {"webdataset": TarShardWriter, "tfrecord": TFRecordWriter, "raw": RawWriter}[fmt]
    _stop_on_add(monkeypatch, writer, 12)  # killed in the first shard: only shard-000000.*.partial
    with pytest.raises(Stop):
        convert(src, dst, format=fmt, shard_size="1MB", raw_size=16, workers=0, progress=False)
    monkeypatch.undo()
    if fmt != "raw":
        assert [p.name for p in dst.glob("shard-*")] == [f"shard-000000{SUFFIX[fmt]}.partial"]
    done = 0 if fmt != "raw" else 11
    finish = rf"conversion not finished \({done} of 30 samples\): re-run `gpufeed convert SRC {dst} --format {fmt}"
    for opened in (open_source, _torch_loader):
        with pytest.raises(ValueError, match=rf"^{dst}: {finish}"):
            opened(str(dst))
    convert(src, dst, format=fmt, shard_size="1MB", raw_size=16, workers=0, progress=False)  # as it says
    assert len(open_source(str(dst))) == 30


@pytest.mark.parametrize("fmt", FORMATS)
def test_no_glob_reads_the_complete_shards_of_an_unfinished_conversion(tmp_path, fmt):
    src = _pngs(tmp_path / "src", 30)
    dst = tmp_path / "out"

    def stop(shard: int, path: str) -> None:
        if shard == 1:
            raise Stop

    with pytest.raises(Stop):
        convert(src, dst, format=fmt, shard_size=2000, workers=0, progress=False, on_shard=stop)
    partial = dst / f"shard-000002{SUFFIX[fmt]}.partial"
    partial.write_bytes((dst / f"shard-000000{SUFFIX[fmt]}").read_bytes())  # killed half-way: a readable start
    written = json.loads((dst / PROGRESS_FILE).read_text())["next"]
    finish = rf"conversion not finished \({written} of 30 samples\): re-run `gpufeed convert SRC"
    for spec in (dst, dst / f"*{SUFFIX[fmt]}", dst / "shard-{000000..000001}" f"{SUFFIX[fmt]}",
                 [str(dst / f"shard-000000{SUFFIX[fmt]}")]):
        with pytest.raises(ValueError, match=finish):
            _torch_loader(spec if isinstance(spec, list) else str(spec))
    # Without the progress record (copied without hidden files): a .partial is no shard, named.
    (dst / PROGRESS_FILE).unlink()
    for spec in (dst, partial, dst / "*"):
        with pytest.raises(ValueError, match=rf"{partial.name}.* unfinished shard"):
            _torch_loader(str(spec))


@pytest.mark.parametrize("backend", ["torch", pytest.param("dali", marks=pytest.mark.skipif(
    importlib.util.find_spec("nvidia.dali") is None, reason="no DALI"))])
@pytest.mark.parametrize("fmt", FORMATS)
def test_a_shard_cut_short_is_refused_naming_it(tmp_path, fmt, backend):
    from gpufeed.pipelines import classification_loader

    src = _pngs(tmp_path / "src", 40)
    dst = tmp_path / "out"
    convert(src, dst, format=fmt, shard_size={"webdataset": 10_000, "tfrecord": 2000}[fmt], workers=0,
            progress=False)
    manifest = json.loads((dst / MANIFEST).read_text())
    first = dst / manifest["files"][0]
    count = open_converted(dst).groups[0]
    assert count > 2
    # a partial copy: the shard ends at a sample boundary, here after its first sample
    cut = 4 * 512 if fmt == "webdataset" else int((dst / f"{first.name}.idx").read_text().split()[1])
    os.truncate(first, cut)

    def load():
        return classification_loader(str(dst), train=True, batch_size=8, size=16, backend=backend, device="cpu",
                                     num_workers=0)

    with pytest.raises(ValueError, match=rf"{first}: cut short: .*{count} samples.* holds 1"):
        load()
    # Without its index, the manifest's count catches it, naming the shard.
    os.remove(f"{first}.idx")
    with pytest.raises(ValueError, match=rf"{first}: 1 samples?, but {dst / MANIFEST} says {count}"):
        load()


@pytest.mark.parametrize("fmt", FORMATS)
def test_a_source_with_no_good_image_is_refused(tmp_path, fmt, capsys):
    src = tmp_path / "src" / "a"
    src.mkdir(parents=True)
    (src / "x.jpg").write_bytes(b"")
    (src / "y.png").write_text("hi")
    with pytest.raises(ValueError, match="convert: no image in 2 samples decodes"):
        convert(tmp_path / "src", tmp_path / "a", format=fmt, workers=0, progress=False)
    assert main(["convert", str(tmp_path / "src"), str(tmp_path / "b"), "--format", fmt, "--workers", "0"]) == 2
    assert "no image in 2 samples decodes" in capsys.readouterr().err
    with pytest.raises(ValueError, match="no shard files"):
        open_shards([])
    # a folder an earlier version converted so: a manifest of no files
    (tmp_path / "old").mkdir()
    (tmp_path / "old" / MANIFEST).write_text(json.dumps({"format": fmt, "samples": 0, "files": []}))
    with pytest.raises(ValueError, match=r"old/gpufeed.json lists no shard files"):
        open_converted(tmp_path / "old")


def test_a_raw_conversion_resumes_past_a_file_that_stopped_decoding(tmp_path, monkeypatch):
    from gpufeed.datasets.shards.raw import RawWriter
    from gpufeed.pipelines.sources import scan_image_folder

    src = _pngs(tmp_path / "src", 20)
    dst = tmp_path / "raw"
    _stop_on_add(monkeypatch, RawWriter, 3)  # killed after the check pass, while writing pixels
    with pytest.raises(Stop):
        convert(src, dst, format="raw", raw_size=16, workers=0, progress=False)
    monkeypatch.undo()
    good = json.loads((dst / PROGRESS_FILE).read_text())["good"]
    paths = scan_image_folder(src).paths  # the source's samples, as convert numbers them
    broken = paths[good[5]]  # not yet written: a hole in the middle of the cache
    Path(broken).write_bytes(b"")
    monkeypatch.setattr(RawWriter, "shrink", lambda *args: (_ for _ in ()).throw(Stop()))
    with pytest.raises(Stop):  # killed again, while leaving the file out
        convert(src, dst, format="raw", raw_size=16, workers=0, progress=False)
    monkeypatch.undo()
    for _ in range(2):  # resumed, then run again: the second run has nothing to do
        report = convert(src, dst, format="raw", raw_size=16, workers=0, progress=False)
        assert report.written == 19 and report.skipped == [(broken, "empty file (0 bytes)")]
    convert(src, tmp_path / "fresh", format="raw", raw_size=16, workers=0, progress=False)
    got, want = open_converted(dst), open_converted(tmp_path / "fresh")
    assert len(got) == len(want) == 19
    assert Counter((sha(got.read(i)), got.labels[i]) for i in range(19)) == Counter(
        (sha(want.read(i)), want.labels[i]) for i in range(19))
    # the last image took the hole's place: nothing else moved
    assert json.loads((dst / PROGRESS_FILE).read_text())["good"] == good[:5] + [good[19]] + good[6:19]


def _sleep_and_say(k: int) -> int:
    import time

    time.sleep(0.05)
    return os.getpid()


def test_decoding_processes_end_when_the_converting_process_is_killed(tmp_path):
    code = ("import sys\n"
            "from gpufeed.datasets.shards.convert import _map_ordered\n"
            "from tests.datasets.test_shards import _sleep_and_say\n"
            "for pid in _map_ordered(_sleep_and_say, list(range(100000)), 2):\n"
            "    print(pid, flush=True)\n")
    proc = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, text=True,
                            cwd=Path(__file__).parents[2])
    workers: set[int] = set()
    try:
        while len(workers) < 2:
            workers.add(int(proc.stdout.readline()))
    finally:
        proc.kill()
        proc.wait()

    try:
        assert not still_running(workers, timeout=15), "the decoding processes outlived the killed conversion"
    finally:
        for pid in workers:
            if running(pid):
                os.kill(pid, signal.SIGKILL)


def test_16_bit_images_are_written_as_the_8_bit_pixels_the_loaders_yield(tmp_path):
    from PIL import Image

    wds = pytest.importorskip("webdataset")

    from gpufeed.pipelines.torch_loader import decode_rgb

    root = tmp_path / "src" / "a"
    root.mkdir(parents=True)
    Image.fromarray(np.full((8, 8), 100 * 257, np.uint16)).save(root / "grey16.png")
    Image.fromarray(np.full((8, 8), 60 * 257, np.uint16)).save(root / "grey16.tif")
    Image.fromarray(np.full((8, 8), 30 * 257, np.uint16)).save(root / "grey16.pgm")  # maxval 65535
    loaders = {p.name: decode_rgb(np.fromfile(p, np.uint8)).numpy() for p in root.iterdir()}
    assert loaders["grey16.png"][0, 0].tolist() == [100] * 3 and loaders["grey16.tif"][0, 0].tolist() == [60] * 3
    assert loaders["grey16.pgm"][0, 0].tolist() == [30] * 3
    convert(tmp_path / "src", tmp_path / "wds", format="webdataset", shuffle=False, workers=0, progress=False)
    got = [s["png"] for s in wds.WebDataset(str(next((tmp_path / "wds").glob("*.tar"))), shardshuffle=False
                                           ).decode("rgb8")]
    assert [g[0, 0].tolist() for g in got] == [[30] * 3, [100] * 3, [60] * 3]  # sorted by name: pgm, png, tif


def test_shards_of_many_samples_stay_within_the_target_size(tmp_path):
    src = _pngs(tmp_path / "src", 24, classes=1)
    convert(src, tmp_path / "wds", format="webdataset", shard_size=9000, workers=0, progress=False)
    source = open_converted(tmp_path / "wds")
    sizes = [os.path.getsize(f) for f in source.files]
    assert len(sizes) > 2 and max(sizes) <= 9000
    assert min(sizes[:-1]) > 9000 - 2048  # full: one more sample (4 blocks) would pass the target


def test_members_are_named_by_their_bytes_not_their_file_names(tmp_path):
    from PIL import Image

    wds = pytest.importorskip("webdataset")

    root = tmp_path / "src"
    (root / "a").mkdir(parents=True)
    (root / "b").mkdir()
    Image.fromarray(np.full((16, 16, 3), 200, np.uint8)).save(root / "a" / "photo.png", "JPEG")
    Image.fromarray(np.full((16, 16, 3), 100, np.uint8)).save(root / "b" / "photo.jpg", "WEBP")
    Image.fromarray(np.full((16, 16, 3), 50, np.uint8)).save(root / "b" / "plain.jpeg", "JPEG")
    for fmt in FORMATS:
        convert(root, tmp_path / fmt, format=fmt, shuffle=False, workers=0, progress=False)
    with tarfile.open(next((tmp_path / "webdataset").glob("*.tar"))) as tar:
        names = [m.name for m in tar.getmembers() if not m.name.endswith(".cls")]
    assert names == ["000000000.jpg", "000000001.webp", "000000002.jpg"]
    assert [s["__key__"] for s in wds.WebDataset(str(next((tmp_path / "webdataset").glob("*.tar"))),
                                                 shardshuffle=False).decode("rgb8") if "webp" in s] == ["000000001"]
    if importlib.util.find_spec("tensorflow") is None:
        pytest.skip("tensorflow is not installed")
    code = ("import json, sys, tensorflow as tf\n"
            "spec = {'image/format': tf.io.FixedLenFeature([], tf.string)}\n"
            "print('RESULT' + json.dumps([tf.io.parse_single_example(r, spec)['image/format'].numpy().decode()\n"
            "                             for r in tf.data.TFRecordDataset(sys.argv[1:])]))\n")
    run = subprocess.run([sys.executable, "-c", code, *map(str, (tmp_path / "tfrecord").glob("*.tfrecord"))],
                         capture_output=True, text=True, timeout=300,
                         env={**os.environ, "TF_CPP_MIN_LOG_LEVEL": "2", "CUDA_VISIBLE_DEVICES": ""})
    assert run.returncode == 0, run.stderr[-2000:]
    assert json.loads(run.stdout.split("RESULT", 1)[1]) == ["jpeg", "webp", "jpeg"]


def test_an_output_folder_inside_the_source_tree_is_refused(image_folder, tmp_path, capsys):
    # Written there, the shards became a fifth, empty class of the source for every reader.
    import shutil

    src = tmp_path / "imgs"
    shutil.copytree(image_folder, src)
    with pytest.raises(ValueError, match=r"output folder .*shards is inside the source tree"):
        convert(src, src / "shards", format="webdataset")
    assert not (src / "shards").exists()
    assert main(["convert", str(src), str(src / "x" / "raw"), "--format", "raw"]) == 2
    assert "is inside the source tree" in capsys.readouterr().err
