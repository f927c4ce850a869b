"""Shards written by other tools, read as a user who brings them would: WebDataset tars
from the ``webdataset`` library (``ShardWriter`` / ``TarWriter``) and Python's
``tarfile`` (GNU and PAX long names, folder entries), TFRecords from TensorFlow itself
(the ImageNet conversion's suffixless ``train-00000-of-00002`` names and keys, TensorFlow
Datasets' ``image`` / ``label``, no DALI index files), labels under other keys, and the
compressed shards the kit refuses.

Every loader here runs in this process with ``num_workers=0`` on the torch backend (no
worker is forked after DALI's pipelines exist) and one DALI thread.
"""

from __future__ import annotations

import gzip
import hashlib
import io
import json
import os
import subprocess
import sys
import tarfile
import warnings
from collections import Counter
from pathlib import Path

import numpy as np
import pytest
from PIL import Image

from gpufeed.backends import dali_installed
from gpufeed.datasets.shards import open_shards

wds = pytest.importorskip("webdataset")

NUM = 14
LABELS = [(3 * k) % 5 for k in range(NUM)]  # 0..4, each several times, not in order
BACKENDS = ["torch", pytest.param("dali", marks=pytest.mark.skipif(not dali_installed(), reason="no DALI"))]


def sha(data: bytes | np.ndarray) -> str:
    return hashlib.sha1(bytes(data)).hexdigest()


def _image(k: int, fmt: str = "JPEG") -> bytes:
    """A real image of its own size: gradients plus noise."""
    rng = np.random.default_rng(k)
    h, w = 40 + 7 * k % 37, 48 + 11 * k % 41
    y, x = np.mgrid[0:h, 0:w]
    pixels = np.stack([x * 255 // w, y * 255 // h, np.full((h, w), 18 * k % 256)], -1)
    pixels = np.clip(pixels + rng.integers(0, 40, pixels.shape), 0, 255).astype(np.uint8)
    out = io.BytesIO()
    Image.fromarray(pixels).save(out, fmt)
    return out.getvalue()


@pytest.fixture(scope="module")
def images() -> list[bytes]:
    return [_image(k) for k in range(NUM)]


@pytest.fixture(scope="module")
def expected(images) -> Counter:
    return Counter((sha(b), label) for b, label in zip(images, LABELS, strict=True))


def _variant_ext(k: int) -> str:
    return ("jpg", "jpeg", "png", "JPG")[k % 4]


def _tar(path: Path, members: list[tuple[str, bytes]], fmt: int, folders: tuple[str, ...] = ()) -> None:
    with tarfile.open(path, "w", format=fmt) as tar:
        for folder in folders:
            info = tarfile.TarInfo(folder)
            info.type = tarfile.DIRTYPE
            tar.addfile(info)
        for name, data in members:
            info = tarfile.TarInfo(name)
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))


@pytest.fixture(scope="module")
def wds_dir(tmp_path_factory: pytest.TempPathFactory, images) -> Path:
    """The WebDataset layouts, each ``NUM`` samples with ``LABELS``."""
    d = tmp_path_factory.mktemp("foreign-wds")
    # ImageNet-style keys with a folder, extra members, several shards
    with wds.ShardWriter(str(d / "imagenet-%06d.tar"), maxcount=5, verbose=0) as sink:
        for k in range(NUM):
            sink.write({"__key__": f"n01440764/n01440764_{10026 + k}", "jpg": images[k], "cls": LABELS[k],
                        "json": {"label": LABELS[k], "width": 1}, "txt": f"a photo of a tench ({k})"})
    # .jpeg / .png / .JPG image members
    with wds.TarWriter(str(d / "variants.tar")) as sink:
        for k in range(NUM):
            ext = _variant_ext(k)
            sink.write({"__key__": f"s{k:04d}", ext: _image(k, "PNG") if ext == "png" else images[k],
                        "cls": LABELS[k]})
    # labels under other keys, as other writers store them (a trailing newline too)
    for key in ("label", "txt"):
        with wds.TarWriter(str(d / f"by-{key}.tar"), encoder=False) as sink:
            for k in range(NUM):
                sink.write({"__key__": f"s{k:04d}", "jpg": images[k], key: f"{LABELS[k]}\n".encode()})
    with wds.TarWriter(str(d / "by-json.tar")) as sink:
        for k in range(NUM):
            sink.write({"__key__": f"s{k:04d}", "jpg": images[k], "json": {"label": LABELS[k], "caption": "x"}})
    # tarfile, GNU and PAX long names (> 100 characters) under a folder entry
    folder = "train/" + "n" * 110
    members = [(f"{folder}/img_{k:04d}.{ext}", data) for k in range(NUM)
               for ext, data in (("jpg", images[k]), ("cls", str(LABELS[k]).encode()), ("json", b"{}"))]
    _tar(d / "gnu.tar", members, tarfile.GNU_FORMAT, ("train", folder))
    _tar(d / "pax.tar", members, tarfile.PAX_FORMAT, ("train", folder))
    # gzip-compressed: by name (webdataset compresses a .gz target) and disguised as .tar
    with wds.TarWriter(str(d / "packed.tar.gz")) as sink:
        for k in range(NUM):
            sink.write({"__key__": f"s{k:04d}", "jpg": images[k], "cls": LABELS[k]})
    (d / "packed.tgz").write_bytes((d / "packed.tar.gz").read_bytes())
    (d / "disguised.tar").write_bytes((d / "packed.tar.gz").read_bytes())
    # a plain folder of the ShardWriter's shards, as a user copies them, with what lies
    # beside shards in practice: DALI index files and hidden files
    folder = d / "folder"
    folder.mkdir()
    for shard in sorted(d.glob("imagenet-*.tar")):
        (folder / shard.name).write_bytes(shard.read_bytes())
    assert len(open_shards(str(folder / "*.tar")).dali_index_files()) == 3  # written beside the shards
    (folder / ".DS_Store").write_bytes(b"\0" * 64)
    return d


#: (name, shard pattern, loader keys) of the WebDataset layouts that read.
WDS_CASES = [
    ("shardwriter", "imagenet-{000000..000002}.tar", {}),
    ("variants", "variants.tar", {}),
    ("label", "by-label.tar", {"label_key": "label"}),
    ("txt", "by-txt.tar", {"label_key": "txt"}),
    ("json", "by-json.tar", {"label_key": "json:label"}),
    ("gnu", "gnu.tar", {"image_key": "jpg"}),
    ("pax", "pax.tar", {"image_key": ["jpg", "png"], "label_key": "cls"}),
    ("folder", "folder", {}),  # a folder of shards, no class subfolders
]


def test_the_webdataset_encoder_writes_labels_as_bare_digits(wds_dir):
    """What the library's ``cls`` encoder writes (and what the kit's sources parse)."""
    with tarfile.open(wds_dir / "imagenet-000000.tar") as tar:
        first = tar.getmembers()[:4]
        assert [m.name for m in first] == [f"n01440764/n01440764_10026.{e}" for e in ("cls", "jpg", "json", "txt")]
        assert tar.extractfile(first[0]).read() == str(LABELS[0]).encode()  # no newline


@pytest.mark.parametrize(("name", "pattern", "keys"), WDS_CASES, ids=[c[0] for c in WDS_CASES])
def test_webdataset_layouts_give_every_image_with_its_label(wds_dir, images, expected, name, pattern, keys):
    source = open_shards(str(wds_dir / pattern), **keys)
    if name == "variants":  # its .png members hold PNGs
        expected = Counter((sha(_image(k, "PNG") if _variant_ext(k) == "png" else b), LABELS[k])
                           for k, b in enumerate(images))
    assert Counter((sha(source.read(i)), source.labels[i]) for i in range(len(source))) == expected
    if name in ("shardwriter", "folder"):  # the folder's shards in name order, no .idx or hidden file
        assert source.name(0) == "imagenet-000000.tar:n01440764/n01440764_10026"
        assert source.groups.tolist() == [5, 5, 4]
        assert [Path(f).name for f in source.files] == [f"imagenet-00000{k}.tar" for k in range(3)]
    if keys:  # other keys: another dataset to a saved loader state
        assert {k: v for k, v in source.fingerprint().items() if k.endswith("_key")}


@pytest.fixture(scope="module")
def tf_dir(tmp_path_factory: pytest.TempPathFactory, images) -> Path:
    """TFRecords written by TensorFlow (in a process of its own), without DALI index files."""
    if importlib_find("tensorflow") is None:
        pytest.skip("tensorflow is not installed")
    d = tmp_path_factory.mktemp("foreign-tf")
    for k, data in enumerate(images):
        (d / f"{k}.jpg").write_bytes(data)
    code = r"""
import sys
from pathlib import Path
import tensorflow as tf
d, labels = Path(sys.argv[1]), [int(x) for x in sys.argv[2].split(",")]
B = lambda v: tf.train.Feature(bytes_list=tf.train.BytesList(value=v))
I = lambda v: tf.train.Feature(int64_list=tf.train.Int64List(value=v))
F = lambda v: tf.train.Feature(float_list=tf.train.FloatList(value=v))
def slim(k):  # TensorFlow's ImageNet conversion (build_imagenet_data.py), with boxes
    return {"image/encoded": B([(d / f"{k}.jpg").read_bytes()]), "image/format": B([b"JPEG"]),
            "image/class/label": I([labels[k]]), "image/class/synset": B([b"n01440764"]),
            "image/height": I([40]), "image/width": I([48]), "image/filename": B([b"n01440764_%d.JPEG" % k]),
            "image/object/bbox/xmin": F([0.1, 0.2]), "image/object/bbox/ymax": F([0.5, 0.9]),
            "image/object/bbox/label": I([labels[k], labels[k]])}
def tfds(k):  # TensorFlow Datasets' image classification features
    return {"image": B([(d / f"{k}.jpg").read_bytes()]), "label": I([labels[k]]), "file_name": B([b"x.jpg"])}
def write(name, make, ks, compression=None):
    with tf.io.TFRecordWriter(str(d / name), tf.io.TFRecordOptions(compression_type=compression)) as w:
        for k in ks:
            w.write(tf.train.Example(features=tf.train.Features(feature=make(k))).SerializeToString())
n = len(labels)
write("train-00000-of-00002", slim, range(0, 8))
write("train-00001-of-00002", slim, range(8, n))
write("ds-train.tfrecord-00000-of-00002", tfds, range(0, 6))
write("ds-train.tfrecord-00001-of-00002", tfds, range(6, n))
write("gzip.tfrecord", slim, range(n), "GZIP")
write("gzip.tfrecord.gz", slim, range(n), "GZIP")
two = lambda k: {**tfds(k), "label": I([labels[k], 1])}
write("two-labels.tfrecord", two, range(n))
"""
    run = subprocess.run([sys.executable, "-c", code, str(d), ",".join(map(str, LABELS))], capture_output=True,
                         text=True, timeout=300,
                         env={**os.environ, "TF_CPP_MIN_LOG_LEVEL": "2", "CUDA_VISIBLE_DEVICES": ""})
    assert run.returncode == 0, run.stderr[-2000:]
    assert not list(d.glob("*.idx"))
    # a plain folder of TF-slim's suffixless shards (their format comes from their bytes)
    (d / "slim").mkdir()
    for f in d.glob("train-*-of-00002"):
        (d / "slim" / f.name).write_bytes(f.read_bytes())
    return d


def importlib_find(name: str):
    import importlib.util

    return importlib.util.find_spec(name)


TF_CASES = [
    ("slim", "train-*-of-00002", {}),
    ("slim-folder", "slim", {}),
    ("tfds", "ds-train.tfrecord-{00000..00001}-of-00002", {"image_key": "image", "label_key": "label"}),
]


@pytest.mark.parametrize(("name", "pattern", "keys"), TF_CASES, ids=[c[0] for c in TF_CASES])
def test_tensorflow_records_give_every_image_with_its_label(tf_dir, expected, name, pattern, keys):
    source = open_shards(str(tf_dir / pattern), **keys)
    assert Counter((sha(source.read(i)), source.labels[i]) for i in range(len(source))) == expected
    assert source.groups.tolist() == ([8, NUM - 8] if name.startswith("slim") else [6, NUM - 6])


def _loader_labels(spec: str, backend: str, train: bool, **keys) -> tuple[Counter, object]:
    from gpufeed.pipelines import classification_loader

    loader = classification_loader(spec, train=train, batch_size=4, size=32, backend=backend, device="cpu",
                                   num_workers=0 if backend == "torch" else 1, **keys)
    got = Counter()
    for x, y in loader:
        assert x.shape[1:] == (3, 32, 32)
        got.update(y.tolist())
    return got, loader


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("train", [False, True])
def test_loaders_read_every_foreign_layout(wds_dir, tf_dir, backend, train):
    """Every sample once, with its label, nothing skipped, on both backends."""
    cases = [(wds_dir / p, k) for _, p, k in WDS_CASES] + [(tf_dir / p, k) for _, p, k in TF_CASES]
    for path, keys in cases:
        got, loader = _loader_labels(str(path), backend, train, **keys)
        assert got == Counter(LABELS), path.name
        assert loader.skipped == [] and len(loader.samples) == NUM


@pytest.mark.skipif(not dali_installed(), reason="no DALI")
@pytest.mark.parametrize(("where", "pattern", "keys", "reader"), [
    ("wds", "by-label.tar", {"label_key": "label"}, True),
    ("wds", "variants.tar", {}, True),  # .JPG: DALI matches extensions in any case too
    ("tf", "ds-train.tfrecord-*", {"image_key": "image", "label_key": "label"}, True),
    ("wds", "by-json.tar", {"label_key": "json:label"}, False),  # no JSON in DALI's graph: the kit's feed
])
def test_dali_iterator_reads_the_same_keys(wds_dir, tf_dir, where, pattern, keys, reader):
    from gpufeed.pipelines.dali_readers import ReaderIterator

    spec = str((wds_dir if where == "wds" else tf_dir) / pattern)
    _, loader = _loader_labels(spec, "dali", True, **keys)
    it = loader.dali_iterator(auto_reset=False)
    assert isinstance(it, ReaderIterator) == reader
    got = Counter(label for batch in it for label in batch[0]["label"].view(-1).tolist())
    assert got == Counter(LABELS)


def test_tfrecord_index_files_are_written_beside_or_into_the_cache(tf_dir, tmp_path, monkeypatch, expected):
    """TensorFlow writes no DALI index: the kit writes one beside each shard, or, where it
    cannot write there, into its cache folder; DALI's reader then reads every record."""
    folder = tmp_path / "shards"
    folder.mkdir()
    for f in tf_dir.glob("train-*-of-00002"):
        (folder / f.name).write_bytes(f.read_bytes())
    beside = open_shards(str(folder / "train-*")).dali_index_files()
    assert beside == [f"{f}.idx" for f in sorted(folder.glob("train-*-of-00002"))]
    assert len(open_shards(str(folder / "train-*")).files) == 2  # the glob leaves the .idx files out

    # A folder the kit cannot write into (a folder in the index's place stops root too).
    for f in beside:
        os.remove(f)
        os.mkdir(f)
    monkeypatch.setenv("GPUFEED_CACHE", str(tmp_path / "cache"))
    source = open_shards([str(f) for f in sorted(folder.glob("train-*-of-00002"))])
    cached = source.dali_index_files()
    assert all(Path(p).parent == tmp_path / "cache" / "tfrecord-index" for p in cached)
    assert [Path(p).read_text() for p in cached] == [Path(p).read_text() for p in
                                                     open_shards(str(tf_dir / "train-*")).dali_index_files()]
    if dali_installed():
        got, loader = _loader_labels([str(f) for f in source.files], "dali", False)
        assert got == Counter(LABELS)
        it = loader.dali_iterator(auto_reset=False)
        assert Counter(lbl for b in it for lbl in b[0]["label"].view(-1).tolist()) == Counter(LABELS)


@pytest.mark.parametrize("backend", BACKENDS)
def test_compressed_shards_are_refused_naming_the_file(wds_dir, tf_dir, backend):
    from gpufeed.pipelines import classification_loader

    for path, why in ((wds_dir / "packed.tar.gz", "compressed shard"), (wds_dir / "packed.tgz", "compressed shard"),
                      (wds_dir / "disguised.tar", "gzip-compressed tar"),
                      (tf_dir / "gzip.tfrecord", "GZIP-compressed TFRecords"),
                      (tf_dir / "gzip.tfrecord.gz", "compressed shard")):
        with pytest.raises(ValueError, match=rf"{path.name}: .*{why}.*decompress it first \(e\.g\. gzip -dc"):
            classification_loader(str(path), train=True, batch_size=4, backend=backend, device="cpu",
                                   num_workers=0)
    # what the advice says works: the decompressed tar reads
    plain = wds_dir / "packed.tar"
    plain.write_bytes(gzip.decompress((wds_dir / "packed.tar.gz").read_bytes()))
    assert len(open_shards(str(plain))) == NUM


def test_a_tfrecord_whose_first_length_starts_like_gzip_is_read_as_records(tmp_path):
    # A first record of 35,615 bytes (0x8b1f) starts the file with gzip's two bytes; it was
    # refused as GZIP-compressed (one shard in 65,536 of random lengths).
    import struct

    from gpufeed.datasets.shards import sniff_format
    from gpufeed.datasets.shards.tfrecord import masked_crc32c, scan_records

    def record(data: bytes) -> bytes:
        length = struct.pack("<Q", len(data))
        return length + struct.pack("<I", masked_crc32c(length)) + data + struct.pack("<I", masked_crc32c(data))

    path = tmp_path / "odd"
    path.write_bytes(record(b"x" * 35_615) + record(b"y" * 10))
    assert path.read_bytes()[:2] == b"\x1f\x8b"
    assert sniff_format(str(path)) == "tfrecord"
    assert scan_records(str(path)) == [(0, 12 + 35_615 + 4), (12 + 35_615 + 4, 12 + 10 + 4)]  # framed records


def test_bad_foreign_shards_are_refused_naming_file_key_and_option(wds_dir, tf_dir, images, tmp_path, image_folder):
    from gpufeed.pipelines import classification_loader

    # the label under another key, not named
    with pytest.raises(ValueError, match=r"by-label\.tar: sample 's0000' has no \.cls label member; its members: "
                                         r"s0000\.jpg, s0000\.label \(pass label_key="):
        open_shards(str(wds_dir / "by-label.tar"))
    with pytest.raises(ValueError, match=r"by-json\.tar: s0000\.json has no field 'lbl'"):
        open_shards(str(wds_dir / "by-json.tar"), label_key="json:lbl")
    with pytest.raises(ValueError, match=r"imagenet-000000\.tar: n01440764/n01440764_10026\.txt holds b'a photo of a tench \(', not an integer label"):
        open_shards(str(wds_dir / "imagenet-000000.tar"), label_key="txt")
    # keys with dots: WebDataset (and DALI) cut keys at the first dot
    with wds.TarWriter(str(tmp_path / "dots.tar")) as sink:
        for k in range(3):
            sink.write({"__key__": f"img.{k:04d}", "jpg": images[k], "cls": LABELS[k]})
    with pytest.raises(ValueError, match=r"dots\.tar: sample 'img' has no image member .*keys with dots run samples "
                                         "together"):
        open_shards(str(tmp_path / "dots.tar"))
    # the same key twice in a row: one of the two would be lost
    _tar(tmp_path / "twice.tar", [("a.jpg", images[0]), ("a.cls", b"1"), ("a.jpg", images[1]), ("a.cls", b"2")],
         tarfile.USTAR_FORMAT)
    with pytest.raises(ValueError, match=r"twice\.tar: sample 'a' has several members named a\.cls"):
        open_shards(str(tmp_path / "twice.tar"))
    # TensorFlow Datasets' keys, not named: the error lists the features there are
    with pytest.raises(ValueError, match=r"ds-train\.tfrecord-00000-of-00002: record #0 at offset 0: the Example has "
                                         r"no image/encoded or image/class/label feature \(its features: file_name, "
                                         r"image, label\); name .* image_key='image', label_key='label'"):
        open_shards(str(tf_dir / "ds-train.tfrecord-*"))
    with pytest.raises(ValueError, match=r"two-labels\.tfrecord: record #0 .*label is an int64_list of 2 values"):
        open_shards(str(tf_dir / "two-labels.tfrecord"), image_key="image", label_key="label")
    with pytest.raises(ValueError, match=r"no image/encoded feature"):
        open_shards(str(tf_dir / "ds-train.tfrecord-*"), label_key="label")
    # the keys are for shards only
    with pytest.raises(ValueError, match="label_key names the label member of WebDataset or TFRecord "
                                         "shards; the source is .*not WebDataset or TFRecord shards"):
        classification_loader(image_folder, train=True, batch_size=4, backend="torch", device="cpu",
                              label_key="label")
    with pytest.raises(ValueError, match="image_key must name member extensions"):
        open_shards(str(wds_dir / "variants.tar"), image_key=".jpg")
    # a file that is neither format
    (tmp_path / "notes-00000-of-00001").write_bytes(b"hello" * 200)
    with pytest.raises(ValueError, match=r"notes-00000-of-00001: neither a tar \(WebDataset\) nor a TFRecord"):
        classification_loader(str(tmp_path / "notes-00000-of-00001"), train=True, batch_size=4, backend="torch",
                              device="cpu")


def test_a_json_label_must_be_an_integer(tmp_path, images):
    with wds.TarWriter(str(tmp_path / "j.tar")) as sink:
        sink.write({"__key__": "a", "jpg": images[0], "json": {"label": "tench"}})
    with pytest.raises(ValueError, match=r"j\.tar: a\.json: field 'label' is 'tench', not an integer label"):
        open_shards(str(tmp_path / "j.tar"), label_key="json:label")
    with wds.TarWriter(str(tmp_path / "neg.tar")) as sink:
        sink.write({"__key__": "a", "jpg": images[0], "cls": -1})
    with pytest.raises(ValueError, match=r"neg\.tar: sample a has the negative label -1"):
        open_shards(str(tmp_path / "neg.tar"))


def test_keys_reach_the_loader_fingerprint_only_when_not_the_defaults(wds_dir):
    plain = open_shards(str(wds_dir / "imagenet-*.tar"))
    named = open_shards(str(wds_dir / "imagenet-*.tar"), image_key=None, label_key="cls")
    assert plain.fingerprint() == named.fingerprint() and "label_key" not in plain.fingerprint()
    assert json.dumps(open_shards(str(wds_dir / "imagenet-*.tar"), label_key="json:label").fingerprint())


def _torch_loader(source, **keys):
    """A torch-backend loader in this process (no worker forked beside DALI)."""
    from gpufeed.pipelines import classification_loader

    return classification_loader(source, train=False, batch_size=4, size=32, backend="torch", device="cpu",
                                 num_workers=0, **keys)


def _slim_records(path: Path, images: list[bytes], labels: list[int]) -> None:
    """A suffixless TFRecord shard (TF-slim's naming), without DALI's index beside it."""
    from gpufeed.datasets.shards.tfrecord import TFRecordWriter

    writer = TFRecordWriter(path, index_path=None)
    for k, (data, label) in enumerate(zip(images, labels, strict=True)):
        writer.add(str(k), data, "jpg", label)
    writer.close()


def test_a_folder_of_shards_loads_with_label_key_too(wds_dir, tmp_path):
    """A folder of shards is shards for image_key / label_key, as a pattern is."""
    folder = tmp_path / "json-wds"
    folder.mkdir()
    (folder / "train-000000.tar").write_bytes((wds_dir / "by-json.tar").read_bytes())
    loader = _torch_loader(str(folder), label_key="json:label")
    assert Counter(y for _, labels in loader for y in labels.tolist()) == Counter(LABELS)


def test_folders_of_shards_image_folders_and_converted_folders_keep_their_meaning(
        wds_dir, images, image_folder, tmp_path):
    from gpufeed.datasets.shards import MANIFEST, is_shard_spec
    from gpufeed.pipelines.sources import SampleList, open_source

    # suffixless TF-slim shards: their bytes say TFRecord; read sorted by name
    slim = tmp_path / "slim"
    slim.mkdir()
    _slim_records(slim / "train-00001-of-00002", images[8:], LABELS[8:])
    _slim_records(slim / "train-00000-of-00002", images[:8], LABELS[:8])
    source = open_source(str(slim))
    assert source.format == "tfrecord" and [Path(f).name for f in source.files] == [
        "train-00000-of-00002", "train-00001-of-00002"]
    assert list(source.labels) == LABELS

    # an ImageFolder tree stays one: classes are its subfolders, a tar beside them is not read
    assert not is_shard_spec(image_folder)
    tree = tmp_path / "tree"
    (tree / "tench").mkdir(parents=True)
    (tree / "tench" / "a.jpg").write_bytes(images[0])
    (tree / "stray.tar").write_bytes((wds_dir / "variants.tar").read_bytes())
    with pytest.warns(UserWarning, match=r"left out 1 file\(s\) outside the class folders.*stray.tar"):
        got = open_source(str(tree))
    assert isinstance(got, SampleList) and got.classes == ("tench",) and len(got) == 1
    # shards beside a subfolder without images: the error says how to read the shards
    (tree / "tench" / "a.jpg").unlink()
    with (pytest.raises(ValueError, match=r"no images .*1 shard file\(s\) \(stray.tar\).*glob, e.g. '.*\*\.tar'"),
          pytest.warns(UserWarning, match="without images: tench")):
        open_source(str(tree))
    # a flat folder of images is neither, and is refused as before
    flat = tmp_path / "flat"
    flat.mkdir()
    (flat / "a.jpg").write_bytes(images[0])
    with pytest.raises(ValueError, match="has no class folders"):
        open_source(str(flat))

    # a converted folder: its manifest wins over the files that lie in it
    converted = tmp_path / "converted"
    converted.mkdir()
    for name in ("shard-000000.tar", "shard-000001.tar"):
        (converted / name).write_bytes((wds_dir / "imagenet-000000.tar").read_bytes())
    (converted / MANIFEST).write_text(json.dumps({"format": "webdataset", "files": ["shard-000000.tar"]}))
    assert not is_shard_spec(converted)
    assert [Path(f).name for f in open_source(str(converted)).files] == ["shard-000000.tar"]


def test_a_folder_of_shards_and_other_files_is_refused_naming_them(wds_dir, images, tmp_path):
    from gpufeed.pipelines.sources import open_source

    wds_folder = tmp_path / "wds"
    wds_folder.mkdir()
    for k in range(2):
        (wds_folder / f"train-00000{k}.tar").write_bytes((wds_dir / f"imagenet-00000{k}.tar").read_bytes())
    (wds_folder / "README.md").write_text("my shards")
    (wds_folder / "stats.json").write_text("{}")
    with pytest.raises(ValueError, match=r"wds holds 2 shard file\(s\) and 2 other file\(s\) .*\(README\.md, "
                                         r"stats\.json\): move those out, or pass a glob .* e\.g\. '.*wds/\*\.tar'"):
        _torch_loader(str(wds_folder))
    # what the advice says works
    assert len(_torch_loader(str(wds_folder / "*.tar")).samples) == 10

    slim = tmp_path / "slim"
    slim.mkdir()
    _slim_records(slim / "train-00000-of-00001", images[:3], LABELS[:3])
    (slim / "labels.txt").write_text("tench\n")
    with pytest.raises(ValueError, match=r"\(labels\.txt\): .* e\.g\. '.*slim/train-\*'"):
        open_source(str(slim))


def test_a_mix_of_formats_names_a_file_of_each(wds_dir, images, tmp_path):
    slim = tmp_path / "train-00000-of-00002"
    _slim_records(slim, images[:3], LABELS[:3])
    with pytest.raises(ValueError, match=r"got a mix: .*imagenet-000000\.tar is WebDataset, "
                                         r".*train-00000-of-00002 is TFRecord$"):
        open_shards([str(wds_dir / "imagenet-000000.tar"), str(slim)])


def test_errors_read_as_sentences(image_folder, monkeypatch):
    """The keys' error for one key and for two, dali_iterator() on the torch backend, and
    shard_id without num_shards."""
    from gpufeed.backends import BackendChoice

    with pytest.raises(ValueError, match=r"^image_key names the image member of WebDataset or TFRecord shards; "):
        _torch_loader(image_folder, image_key="jpg")
    with pytest.raises(ValueError, match=r"^image_key and label_key name the image and label members of "):
        _torch_loader(image_folder, image_key="jpg", label_key="cls")

    loader = _torch_loader(image_folder)
    with pytest.raises(AttributeError, match=r"needs backend='dali'; this loader uses the torch backend "
                                             r"\(you asked for backend='torch'\)$"):
        loader.dali_iterator()
    loader.choice = BackendChoice("torch", "DALI is not installed")  # what backend="auto" records without DALI
    with pytest.raises(AttributeError, match=r"\(chosen by backend='auto': DALI is not installed\)$"):
        loader.dali_iterator()

    for name in ("RANK", "WORLD_SIZE"):
        monkeypatch.delenv(name, raising=False)
    with pytest.raises(ValueError, match=r"shard_id=1 was given without num_shards, .*pass num_shards too"):
        _torch_loader(image_folder, shard_id=1)
    with pytest.raises(ValueError, match=r"got shard_id=1, num_shards=1"):  # both given: the range check
        _torch_loader(image_folder, shard_id=1, num_shards=1)
    assert len(_torch_loader(image_folder, shard_id=1, num_shards=2).plan) > 0


@pytest.mark.skipif(not dali_installed(), reason="no DALI")
def test_the_feed_based_dali_iterator_of_json_labels_resumes_from_its_state(wds_dir):
    # JSON-field labels keep the kit's feed (DALI's graph parses no JSON), and its state.
    from gpufeed.pipelines import classification_loader

    def make():
        return classification_loader(str(wds_dir / "by-json.tar"), train=False, batch_size=2, size=32,
                                     backend="dali", device="cpu", num_workers=1, label_key="json:label")

    whole = [b[0]["label"].numpy().ravel().tolist() for b in make().dali_iterator()]
    it = make().dali_iterator()
    next(it)
    rest = [b[0]["label"].numpy().ravel().tolist() for b in make().dali_iterator(checkpoint=it.state_dict())]
    assert len(whole) > 1 and whole[1:] == rest


@pytest.mark.parametrize("backend", BACKENDS)
def test_bad_members_of_a_shard_are_skipped_and_reported_or_raised(images, tmp_path, backend):
    """A shard another tool wrote, holding a cut-short JPEG and a text file named .jpg:
    skipped and reported per epoch, every good sample kept; on_error="raise" names the first."""
    from gpufeed.pipelines import classification_loader
    from gpufeed.pipelines.skips import BadImageError

    members = []
    for k in range(6):
        data = images[k][: len(images[k]) // 2] if k == 2 else b"not an image at all" if k == 4 else images[k]
        members += [(f"s{k:03d}.jpg", data), (f"s{k:03d}.cls", str(LABELS[k]).encode())]
    _tar(tmp_path / "bad.tar", members, tarfile.GNU_FORMAT)
    spec = str(tmp_path / "bad.tar")
    threads = {"num_workers": 0 if backend == "torch" else 1}
    loader = classification_loader(spec, train=False, batch_size=2, size=32, backend=backend, device="cpu", **threads)
    for epoch in range(2):  # listed again every epoch; the warning names a file once
        with pytest.warns(UserWarning, match="skipped 2 of 6 files") if epoch == 0 else warnings.catch_warnings():
            got = Counter(y for _, labels in loader for y in labels.tolist())
        assert got == Counter(LABELS[k] for k in (0, 1, 3, 5))
        assert sorted(s.path.rsplit(":", 1)[-1] for s in loader.skipped) == ["s002", "s004"], loader.skipped
    strict = classification_loader(spec, train=False, batch_size=2, size=32, backend=backend, device="cpu",
                                   on_error="raise", **threads)
    with pytest.raises(BadImageError, match="s002"):
        for _ in strict:
            pass
