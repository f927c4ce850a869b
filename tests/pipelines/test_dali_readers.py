"""``dali_iterator()`` on WebDataset and TFRecord shards: DALI's own readers, DALI's
checkpointing.

The shards are written here: WebDataset tars with the ``webdataset`` library's own
``TarWriter`` (indexed with DALI's ``wds2idx``, or not), TFRecords with a small local
writer (TFRecord framing, masked CRC-32C) and their DALI index. Every image's red channel
is one value that encodes its label (green and blue are ramps, so crops and flips show),
and every label is unique, so a batch shows which samples it holds and that each label
belongs to its image, through any crop.
"""

from __future__ import annotations

import hashlib
import io
import itertools
import json
import struct
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import torch
from PIL import Image

from gpufeed.backends import dali_installed
from gpufeed.datasets.samples import SampleSource
from gpufeed.datasets.storage import LOCAL

pytestmark = pytest.mark.skipif(not dali_installed(), reason="DALI not installed")

NUM_SAMPLES = 23  # odd, so the two shards differ by one sample
RED_STEP = 10  # red channel = label * RED_STEP


def _jpeg(label: int, rng: np.random.Generator) -> bytes:
    h, w = (int(v) for v in rng.integers(36, 64, 2))
    pixels = np.empty((h, w, 3), np.uint8)
    pixels[..., 0] = label * RED_STEP
    # green and blue ramps, so crops and flips show in the pixels
    pixels[..., 1] = np.linspace(0, 255, w, dtype=np.uint8)[None, :]
    pixels[..., 2] = np.linspace(0, 255, h, dtype=np.uint8)[:, None]
    out = io.BytesIO()
    Image.fromarray(pixels).save(out, "JPEG", quality=95)
    return out.getvalue()


# -- TFRecord writing: the framing TensorFlow reads, and the Example protobuf by hand ----


def _masked_crc(data: bytes) -> int:
    import google_crc32c

    crc = google_crc32c.value(data)
    return (((crc >> 15) | (crc << 17)) + 0xA282EAD8) & 0xFFFFFFFF


def _varint(n: int) -> bytes:
    out = bytearray()
    while True:
        low, n = n & 0x7F, n >> 7
        out.append(low | (0x80 if n else 0))
        if not n:
            return bytes(out)


def _field(number: int, payload: bytes) -> bytes:  # a length-delimited protobuf field
    return _varint(number << 3 | 2) + _varint(len(payload)) + payload


def _example(image: bytes, label: int) -> bytes:
    """A tf.train.Example with ``image/encoded`` (bytes) and ``image/class/label`` (int64)."""
    features = {
        "image/encoded": _field(1, _field(1, image)),  # Feature.bytes_list.value
        "image/class/label": _field(3, _field(1, _varint(label))),  # Feature.int64_list.value (packed)
    }
    entries = b"".join(_field(1, _field(1, k.encode()) + _field(2, v)) for k, v in features.items())
    return _field(1, entries)  # Example.features


def _write_tfrecord(path: Path, records: list[bytes]) -> Path:
    """Write ``records`` and DALI's index (``offset length`` of each record) beside them."""
    lines = []
    with open(path, "wb") as f:
        for data in records:
            header = struct.pack("<Q", len(data))
            framed = header + struct.pack("<I", _masked_crc(header)) + data + struct.pack("<I", _masked_crc(data))
            lines.append(f"{f.tell()} {len(framed)}")
            f.write(framed)
    index = path.with_suffix(".idx")
    index.write_text("\n".join(lines) + "\n")
    return index


class _TestShards(SampleSource):
    """A minimal shard source: what DALI's readers need of one (``files``,
    ``dali_index_files()``), and per-index reads for the interface."""

    def __init__(self, files: list[Path], index: list[Path], labels: list[int], images: list[bytes]) -> None:
        self._files, self._index = [str(f) for f in files], [str(i) for i in index]
        self.labels, self._images = labels, images
        self.classes = tuple(str(k) for k in range(NUM_SAMPLES))
        self.storage = LOCAL

    @property
    def files(self) -> list[str]:
        return self._files

    def dali_index_files(self) -> list[str]:
        return self._index

    def read(self, index: int) -> np.ndarray:
        return np.frombuffer(self._images[index], np.uint8)

    def name(self, index: int) -> str:
        return f"sample{index}"

    def fingerprint(self) -> dict:
        return {"kind": "test-shards", "samples": len(self), "files": self._files,
                "sha1": hashlib.sha1(b"".join(self._images)).hexdigest()}

    def nbytes(self) -> int:
        return sum(map(len, self._images))


def _shards(folder: Path, fmt: str) -> _TestShards:
    """``NUM_SAMPLES`` samples in 3 shard files of ``fmt``: ``webdataset`` (indexed by
    ``wds2idx``), ``webdataset-noindex`` or ``tfrecord``; labels 0..N-1."""
    rng = np.random.default_rng(3)
    images = [_jpeg(k, rng) for k in range(NUM_SAMPLES)]
    labels = list(range(NUM_SAMPLES))
    bounds = [0, 8, 15, NUM_SAMPLES]
    files, index = [], []
    for s in range(3):
        part = range(bounds[s], bounds[s + 1])
        if fmt == "tfrecord":
            pytest.importorskip("google_crc32c")
            path = folder / f"train-{s:03d}.tfrecord"
            index.append(_write_tfrecord(path, [_example(images[k], labels[k]) for k in part]))
        else:
            wds = pytest.importorskip("webdataset")
            path = folder / f"train-{s:03d}.tar"
            with wds.TarWriter(str(path)) as writer:
                for k in part:
                    writer.write({"__key__": f"{k:06d}", "jpg": images[k], "cls": labels[k]})
            if fmt == "webdataset":
                pytest.importorskip("wds2idx")
                idx = path.with_suffix(".idx")
                subprocess.run([sys.executable, "-m", "wds2idx", str(path), str(idx)], check=True,
                               capture_output=True)
                index.append(idx)
        files.append(path)
    return _TestShards(files, index, labels, images)


@pytest.fixture(scope="module", params=["webdataset", "webdataset-noindex", "tfrecord"])
def shards(request, tmp_path_factory) -> _TestShards:
    return _shards(tmp_path_factory.mktemp(request.param), request.param)


def _loader(source, **kw):
    from gpufeed.pipelines.loader import classification_loader

    settings = dict(backend="dali", device="cpu", train=True, batch_size=4, size=24, seed=5,
                    dtype=torch.uint8, num_workers=1)
    return classification_loader(source, **{**settings, **kw})


def _epoch(it) -> list[tuple[np.ndarray, np.ndarray]]:
    """One epoch's batches as ``(labels, images)`` numpy arrays, after checking the labels
    come as from DALI's own iterators (and the feed-based one): ``(B, 1)`` int32."""
    out = []
    for batch in it:
        labels, images = batch[0]["label"], batch[0]["data"]
        assert labels.dtype == torch.int32 and labels.shape == (len(images), 1)
        out.append((labels.numpy().ravel().copy(), images.numpy().copy()))
    return out


def _check_labels_match_images(labels: np.ndarray, images: np.ndarray) -> None:
    red = images[:, 0].reshape(len(labels), -1).astype(np.float64).mean(axis=1)  # NCHW uint8
    np.testing.assert_allclose(red, labels * RED_STEP, atol=4)


def test_shard_sources_read_with_dalis_own_reader(shards, image_folder):
    from gpufeed.pipelines.dali_readers import ReaderIterator, shard_format

    assert shard_format(shards) == ("tfrecord" if shards.files[0].endswith(".tfrecord") else "webdataset")
    assert isinstance(_loader(shards).dali_iterator(), ReaderIterator)
    folder = _loader(image_folder)
    assert shard_format(folder.samples) is None  # an image folder keeps the kit's feed
    assert not isinstance(folder.dali_iterator(), ReaderIterator)


@pytest.mark.parametrize("train", [True, False])
def test_every_sample_once_per_epoch_across_two_shards(shards, train):
    iterators = [_loader(shards, train=train, shuffle=True, shard_id=i, num_shards=2,
                         last_batch="partial").dali_iterator() for i in range(2)]
    for epoch in range(2):
        seen = []
        for it in iterators:
            batches = _epoch(it)
            assert len(batches) == len(it), epoch  # DALI's len(), from the reader
            assert all(len(lbl) == 4 for lbl, _ in batches[:-1])
            for labels, images in batches:
                assert images.shape[1:] == (3, 24, 24) and images.dtype == np.uint8
                _check_labels_match_images(labels, images)
                seen += labels.tolist()
        assert sorted(seen) == list(range(NUM_SAMPLES)), epoch


@pytest.mark.parametrize("last_batch", ["drop", "fill"])
def test_drop_and_fill_give_full_batches(shards, last_batch):
    it = _loader(shards, last_batch=last_batch, shard_id=1, num_shards=2).dali_iterator()
    for epoch in range(2):
        batches = _epoch(it)
        assert len(batches) == len(it) == (3 if last_batch == "fill" else 2)  # shards of 11 and 12
        assert all(len(lbl) == 4 for lbl, _ in batches)
        # fill: the whole slice, which DALI moves this rank on from every epoch (12, then 11)
        distinct = len({x for lbl, _ in batches for x in lbl.tolist()})
        assert distinct == ([12, 11][epoch] if last_batch == "fill" else 8)


@pytest.mark.parametrize("shuffle", [False, True])
def test_fill_gives_every_rank_the_loaders_batches_every_epoch(shards, shuffle):
    # Slices of 11 and 12 samples in batches of 5: 3 batches a rank, the last one padded
    # (4 and 3 repeats), in every epoch, with every sample of the epoch in one of them.
    loaders = [_loader(shards, batch_size=5, shuffle=shuffle, shard_id=i, num_shards=2, last_batch="fill")
               for i in range(2)]
    iterators = [loader.dali_iterator() for loader in loaders]
    for epoch in range(3):
        seen = []
        for loader, it in zip(loaders, iterators, strict=True):
            assert len(loader) == 3
            assert (len(it), it.size) == (3, 15), epoch
            batches = _epoch(it)
            assert [len(lbl) for lbl, _ in batches] == [5, 5, 5], epoch
            assert (len(it), it.size) == (3, 15), epoch  # after DALI's reset for the next epoch too
            for labels, images in batches:
                _check_labels_match_images(labels, images)
            seen += [x for lbl, _ in batches for x in lbl.tolist()]
        assert len(seen) == 30 and sorted(set(seen)) == list(range(NUM_SAMPLES)), epoch  # repeats, no loss
    # the loader itself (the plan, as on the torch backend): the same counts
    seen = []
    for loader in loaders:
        labels = [y.tolist() for _, y in loader]
        assert [len(y) for y in labels] == [5, 5, 5]
        seen += sum(labels, [])
    assert sorted(set(seen)) == list(range(NUM_SAMPLES))


@pytest.fixture(scope="module")
def fed_sources(image_folder, tmp_path_factory) -> dict[str, dict]:
    """Sources ``dali_iterator()`` reads through the kit's feed, labelled by sample number:
    39 of the image folder's files as a file list, and a raw cache of all 40."""
    from tests.datasets.test_raw_cache import write_raw

    files = sorted(p for p in image_folder.rglob("*") if p.is_file())[:39]
    raw = write_raw(image_folder, tmp_path_factory.mktemp("fed") / "raw", 32, indexed=True)
    return {"folder": dict(source=None, file_list=[(str(f), i) for i, f in enumerate(files)]),
            "raw": dict(source=raw)}


def _fed_fill_loaders(fed_sources, kind):
    """Both ranks' ``fill`` loaders of a fed source in batches of 8 (slices of 19 and 20,
    or 20 and 20: 3 batches a rank), and its sample count."""
    kw = fed_sources[kind]
    loaders = [_loader(kw["source"], **{k: v for k, v in kw.items() if k != "source"}, batch_size=8, shuffle=True,
                       shard_id=i, num_shards=2, last_batch="fill") for i in range(2)]
    return loaders, 39 if kind == "folder" else 40


@pytest.mark.parametrize("kind", ["folder", "raw"])
def test_fill_on_the_kits_feed_gives_the_loaders_batches(fed_sources, kind):
    loaders, n = _fed_fill_loaders(fed_sources, kind)
    iterators = [loader.dali_iterator() for loader in loaders]
    for epoch in range(2):
        seen, direct = [], []
        for loader, it in zip(loaders, iterators, strict=True):
            batches = _epoch(it)
            assert len(batches) == len(it) == len(loader) == 3, epoch
            assert all(len(lbl) == 8 for lbl, _ in batches), epoch
            seen += [x for lbl, _ in batches for x in lbl.tolist()]
            labels = [y.tolist() for _, y in loader]
            assert [len(y) for y in labels] == [8, 8, 8], epoch
            direct += sum(labels, [])
        assert sorted(set(seen)) == sorted(set(direct)) == list(range(n)), epoch


@pytest.mark.parametrize("kind", ["folder", "raw"])
def test_fill_on_the_kits_feed_sizes_the_padded_batches(fed_sources, kind):
    loaders, _ = _fed_fill_loaders(fed_sources, kind)
    for loader in loaders:
        assert loader.dali_iterator().size == len(loader) * 8  # as a reader iterator's (above)


@pytest.mark.parametrize(("last_batch", "batches", "size"), [("partial", 5, 39), ("drop", 4, 39), ("fill", 5, 40)])
def test_the_fed_iterators_private_size_is_minus_one_and_len_and_size_say_what_comes(
        fed_sources, last_batch, batches, size):
    """What the README tells a script written for DALI: ``_size`` is -1 on the fed iterator
    (DALI's check that every batch is full would refuse a partial last one), so NVIDIA's
    ``ceil(_size / batch_size)`` gives no steps; ``len(it)`` and ``it.size`` are right, and
    with ``fill`` ``size`` counts the padded samples (DALI's own iterator over a padded
    reader would say 39)."""
    it = _fed(fed_sources, "folder", train=False, shuffle=False, last_batch=last_batch).dali_iterator()
    assert it._size == -1
    assert (len(it), it.size) == (batches, size)
    assert sum(len(d[0]["label"]) for d in it) == (size if last_batch != "drop" else batches * 8)


def _fed(fed_sources, kind, **kw):
    """A training loader of a fed source in batches of 8, shuffled (5 batches an epoch)."""
    given = {k: v for k, v in fed_sources[kind].items() if k != "source"}
    return _loader(fed_sources[kind]["source"], **{**given, "batch_size": 8, "shuffle": True, **kw})


def _same(batches, others) -> None:
    assert len(batches) == len(others)
    for (labels, images), (labels2, images2) in zip(batches, others, strict=True):
        np.testing.assert_array_equal(labels2, labels)
        np.testing.assert_array_equal(images2, images)  # the crops and flips too


def test_a_loop_that_counts_its_batches_checkpoints_mid_epoch_not_at_an_epochs_end(shards):
    """A step-capped loop takes ``len(it)`` batches a pass and never asks for the
    ``StopIteration`` (``zip(range(len(it)), it)``). The shard iterator counted on across
    passes, so a state after epoch 1's first batch said "epoch_end" and, resumed, the
    rest of epoch 1 came a pass late."""
    kw = dict(shuffle=True, shuffle_buffer=6)
    run = _loader(shards, **kw).dali_iterator()
    epochs = [_epoch(run), _epoch(run)]
    it = _loader(shards, **kw).dali_iterator()
    for _ in zip(range(len(it)), it, strict=False):  # the loop stops at its count
        pass
    for _ in zip(range(1), it, strict=False):
        pass
    state = it.state_dict()
    assert not state["epoch_end"]
    resumed = _loader(shards, **kw).dali_iterator(checkpoint=state)
    _same(epochs[1][1:], _epoch(resumed))


@pytest.mark.parametrize("kind", ["folder", "shards"])
def test_an_iterator_loads_a_state_in_place_as_lightning_resumes_a_loader(fed_sources, shards, kind):
    """PyTorch Lightning resumes a loader that has ``state_dict()`` and ``load_state_dict()``:
    it calls the second on the new ``train_dataloader()`` before its first ``iter()``. The
    iterators had no ``load_state_dict`` (only ``dali_iterator(checkpoint=state)``), so a
    Lightning run over them restarted its epoch. Loaded in place, the iterator goes on with
    the rest of the epoch and the next, as one resumed by ``checkpoint=``; another
    dataset's state is refused."""
    def make():
        return (_fed(fed_sources, "folder") if kind == "folder" else _loader(shards, shuffle=True, shuffle_buffer=6))
    run = make().dali_iterator()
    epochs = [_epoch(run), _epoch(run)]
    it = make().dali_iterator()
    for _ in range(2):
        next(it)
    state = json.loads(json.dumps(it.state_dict()))
    resumed = make().dali_iterator()
    next(resumed)  # a pass begun: loading replaces it
    resumed.load_state_dict(state)
    _same(epochs[0][2:], _epoch(resumed))
    _same(epochs[1], _epoch(resumed))
    with pytest.raises(ValueError, match="another|other"):
        resumed.load_state_dict({**state, "dataset": {"files": "elsewhere"}})


@pytest.mark.parametrize("kind", ["folder", "raw"])
@pytest.mark.parametrize("last_batch", ["partial", "fill"])
def test_the_fed_iterator_resumes_from_its_state_with_the_same_batches(fed_sources, kind, last_batch):
    # Image folders, file lists and caches are fed to DALI by the kit, which draws the crops
    # from (seed, epoch, sample): a new process resumes with the same samples, crops and flips.
    run = _fed(fed_sources, kind, last_batch=last_batch).dali_iterator()
    epochs = [_epoch(run), _epoch(run)]
    n = len(epochs[0])
    assert n == 5
    for cut in (2, n):  # mid-epoch; after the epoch's last batch (its end: an empty pass, then epoch 1)
        it = _fed(fed_sources, kind, last_batch=last_batch).dali_iterator()
        taken = [next(it) for _ in range(cut)]
        assert len(taken) == cut
        state = json.loads(json.dumps(it.state_dict()))  # plain data
        assert (state["epoch"], state["batch"]) == (0, cut)
        resumed = _fed(fed_sources, kind, last_batch=last_batch).dali_iterator(checkpoint=state)
        _same(epochs[0][cut:], _epoch(resumed))
        _same(epochs[1], _epoch(resumed))
    # Taken after the epoch's StopIteration: the next epoch's start.
    state = run.state_dict()
    assert (state["epoch"], state["batch"]) == (2, 0)
    again = _fed(fed_sources, kind, last_batch=last_batch).dali_iterator(checkpoint=_fed(
        fed_sources, kind, last_batch=last_batch).dali_iterator(checkpoint={**state, "epoch": 1}).state_dict())
    _same(epochs[1], _epoch(again))


def test_the_fed_iterator_and_the_loader_resume_from_each_others_state(fed_sources):
    # One state format: a loader's state resumes the iterator, and the iterator's the loader.
    labels_of = lambda batches: [x for lbl, _ in batches for x in lbl.tolist()]  # noqa: E731
    full = labels_of(_epoch(_fed(fed_sources, "folder").dali_iterator()))
    loader = _fed(fed_sources, "folder")
    first = [lbl.tolist() for _, lbl in itertools.islice(iter(loader), 2)]
    rest = labels_of(_epoch(_fed(fed_sources, "folder").dali_iterator(checkpoint=loader.state_dict())))
    assert sum(first, []) + rest == full
    it = _fed(fed_sources, "folder").dali_iterator()
    next(it)
    resumed = _fed(fed_sources, "folder")
    resumed.load_state_dict(it.state_dict())
    assert full[:8] + [x for _, lbl in resumed for x in lbl.tolist()] == full


def test_the_fed_iterator_carries_the_files_it_skipped_over_a_resume(image_folder, tmp_path):
    files = sorted(p for p in image_folder.rglob("*") if p.is_file())[:23]
    bad = tmp_path / "cut-short.jpg"
    bad.write_bytes(files[0].read_bytes()[:200])
    listed = [(str(f), i) for i, f in enumerate(files)] + [(str(bad), 23)]

    def make(**kw):
        return _loader(None, file_list=listed, batch_size=8, shuffle=True, **kw)

    whole = make().dali_iterator()
    labels = [x for lbl, _ in _epoch(whole) for x in lbl.tolist()]
    assert sorted(labels) == list(range(23)) and [s.path for s in whole.gpufeed_skipped.skipped] == [str(bad)]
    for cut in (1, 2, 3):  # 3: after the epoch's last batch, its end
        it = make().dali_iterator()
        before = [x for _ in range(cut) for x in next(it)[0]["label"].numpy().ravel().tolist()]
        resumed = make().dali_iterator(checkpoint=it.state_dict())
        after = [x for lbl, _ in _epoch(resumed) for x in lbl.tolist()]
        assert before + after == labels  # nothing twice, nothing lost
        assert resumed.gpufeed_skipped.skipped == whole.gpufeed_skipped.skipped


def test_the_fed_iterator_resumed_where_nothing_is_left_of_the_epoch_goes_on_with_the_next(image_folder, tmp_path):
    # 16 good files, then 4 cut short: the epoch's 5th batch is all bad and never delivered
    # (partial), so a state after the 4th, or after the epoch's last batch, leaves nothing
    # of the epoch: an empty pass, that epoch's skipped files still listed, then the next.
    files = sorted(p for p in image_folder.rglob("*") if p.is_file())[:16]
    bad = []
    for i in range(4):
        bad.append(tmp_path / f"cut-{i}.jpg")
        bad[-1].write_bytes(files[i].read_bytes()[:200])
    listed = [(str(f), i) for i, f in enumerate([*files, *bad])]

    def make():
        return _loader(None, file_list=listed, batch_size=4, shuffle=False)

    whole = make().dali_iterator()
    epochs = [_epoch(whole)]
    whole_skipped = whole.gpufeed_skipped.skipped
    epochs.append(_epoch(whole))
    assert len(epochs[0]) == 4
    it = make().dali_iterator()
    for _ in range(4):
        next(it)
    state = it.state_dict()
    assert (state["epoch"], state["batch"]) == (0, 4)
    resumed = make().dali_iterator(checkpoint=state)  # DALI refused a first epoch with no batch
    assert resumed.state_dict() == state
    assert _epoch(resumed) == []
    assert sorted(s.path for s in resumed.gpufeed_skipped.skipped) == sorted(map(str, bad))
    assert resumed.gpufeed_skipped.skipped == whole_skipped
    _same(epochs[1], _epoch(resumed))


def test_the_fed_iterator_refuses_a_state_of_another_plan_or_a_reader(fed_sources, shards):
    it = _fed(fed_sources, "folder").dali_iterator()
    next(it)
    state = it.state_dict()
    with pytest.raises(ValueError, match="seed"):
        _fed(fed_sources, "folder", seed=6).dali_iterator(checkpoint=state)
    with pytest.raises(ValueError, match="dataset"):
        _fed(fed_sources, "raw").dali_iterator(checkpoint=state)
    reader = _loader(shards).dali_iterator()
    next(reader)
    with pytest.raises(ValueError, match="a DALI reader state .* fed by the kit"):
        _fed(fed_sources, "folder").dali_iterator(checkpoint=reader.state_dict())


@pytest.mark.parametrize("last_batch", ["partial", "fill"])
def test_a_checkpoint_resumes_with_the_same_samples_crops_and_flips(shards, last_batch):
    kw = dict(shuffle=True, shuffle_buffer=6, shard_id=0, num_shards=2, last_batch=last_batch)
    it = _loader(shards, **kw).dali_iterator()
    first = [next(it) for _ in range(2)]
    assert len(first) == 2
    state = json.loads(json.dumps(it.state_dict()))  # plain data
    rest = _epoch(it) + _epoch(it)  # the rest of epoch 0, and epoch 1

    resumed = _loader(shards, **kw).dali_iterator(checkpoint=state)
    again = _epoch(resumed) + _epoch(resumed)
    assert len(again) == len(rest)
    for (labels, images), (labels2, images2) in zip(rest, again, strict=True):
        np.testing.assert_array_equal(labels2, labels)
        np.testing.assert_array_equal(images2, images)  # the crops and flips too


@pytest.mark.parametrize("last_batch", ["partial", "drop"])
@pytest.mark.parametrize("auto_reset", [True, False])
def test_a_checkpoint_after_an_epochs_last_batch_resumes_with_its_empty_rest(shards, last_batch, auto_reset):
    """A step-based checkpoint right after an epoch's last batch is that epoch's end, as
    the loader's and the fed iterator's: resumed, the first pass is empty, then epoch 1
    (DALI's own checkpoint there is epoch 1's start, so a loop over range(saved_epoch, E)
    ran one epoch too many, each one labelled one off). After the epoch's StopIteration
    the state is the next epoch's start."""
    kw = dict(shuffle=True, shuffle_buffer=6, last_batch=last_batch)

    def passes(it, count):
        out = []
        for _ in range(count):
            out.append([labels.tolist() for labels, _ in _epoch(it)])
            if not auto_reset:
                it.reset()
        return out

    whole = passes(_loader(shards, **kw).dali_iterator(auto_reset=auto_reset), 2)
    it = _loader(shards, **kw).dali_iterator(auto_reset=auto_reset)
    for _ in range(len(it)):
        next(it)
    state = json.loads(json.dumps(it.state_dict()))
    resumed = _loader(shards, **kw).dali_iterator(checkpoint=state, auto_reset=auto_reset)
    assert json.loads(json.dumps(resumed.state_dict()))["epoch_end"]  # checkpointed again before the empty pass
    assert passes(resumed, 2) == [[], whole[1]]
    assert next(it, None) is None  # the epoch's end asked for
    if not auto_reset:
        it.reset()
    resumed = _loader(shards, **kw).dali_iterator(checkpoint=it.state_dict(), auto_reset=auto_reset)
    assert passes(resumed, 1) == [whole[1]]


@pytest.mark.parametrize("last_batch", ["partial", "fill"])
def test_a_state_from_before_fill_padded_the_reader(shards, last_batch):
    # States of then did not record the reader's padding: fill's is refused (its epochs had
    # other lengths), partial's and drop's (padded then too) go on.
    it = _loader(shards, last_batch=last_batch).dali_iterator()
    next(it)
    old = {k: v for k, v in it.state_dict().items() if k != "pad_last_batch"}
    if last_batch == "fill":
        with pytest.raises(ValueError, match="reader padding: saved with pad_last_batch=False"):
            _loader(shards, last_batch=last_batch).dali_iterator(checkpoint=old)
    else:
        resumed = _loader(shards, last_batch=last_batch).dali_iterator(checkpoint=old)
        assert len(_epoch(resumed)) == len(it) - 1


def test_dali_draws_the_crops_from_the_seed(shards):
    def first_epoch(seed):
        return _epoch(_loader(shards, seed=seed, shuffle=False).dali_iterator())

    run, again, other = first_epoch(5), first_epoch(5), first_epoch(6)
    for (labels, images), (labels2, images2), (labels3, _) in zip(run, again, other, strict=True):
        np.testing.assert_array_equal(labels2, labels)  # no shuffling: file order
        np.testing.assert_array_equal(labels3, labels)
        np.testing.assert_array_equal(images2, images)  # a fresh start repeats the crops
    assert any(not np.array_equal(a[1], b[1]) for a, b in zip(run, other, strict=True))


def test_a_checkpoint_is_refused_by_another_pipeline(shards, image_folder):
    it = _loader(shards).dali_iterator()
    next(it)
    state = it.state_dict()
    with pytest.raises(ValueError, match="seed: saved 5, this loader 6"):
        _loader(shards, seed=6).dali_iterator(checkpoint=state)
    with pytest.raises(ValueError, match="not a gpufeed DALI reader state"):
        _loader(shards).dali_iterator(checkpoint=_loader(shards).state_dict())
    with pytest.raises(ValueError, match="load_state_dict"):
        _loader(image_folder).dali_iterator(checkpoint=state)
    assert state["decoder"] == "cpu"
    with pytest.raises(ValueError, match="decoder: saved on 'mixed', this pipeline decodes on 'cpu'"):
        _loader(shards).dali_iterator(checkpoint={**state, "decoder": "mixed"})  # a GPU run's state


def test_tfrecord_shards_need_their_dali_index(tmp_path):
    source = _shards(tmp_path, "tfrecord")
    source._index = []
    with pytest.raises(ValueError, match="3 tfrecord shard files but 0 DALI index files"):
        _loader(source).dali_iterator()


def test_decimal_labels_are_parsed_in_the_graph():
    import nvidia.dali.fn as fn
    import nvidia.dali.types as types
    from nvidia.dali import pipeline_def

    from gpufeed.pipelines.dali_readers import decimal_label

    texts = [b"0", b"7", b"42", b"999\n", b" 5 ", b"123456789", b"1000\r\n"]

    @pipeline_def
    def parse():
        text = fn.external_source(source=lambda: [np.frombuffer(t, np.uint8) for t in texts], batch=True,
                                  dtype=types.UINT8, ndim=1)
        return decimal_label(text)

    pipe = parse(batch_size=len(texts), num_threads=1, device_id=None)
    pipe.build()
    (labels,) = pipe.run()
    assert np.asarray(labels.as_tensor()).tolist() == [0, 7, 42, 999, 5, 123456789, 1000]


# -- the GPU graph ------------------------------------------------------------------------

_TRACE = r"""
import json, sys, torch
from gpufeed.pipelines.dali_readers import build_reader_pipeline, shard_files
from tests.pipelines.test_dali_readers import _loader, _shards
from pathlib import Path
results = {}
for fmt in ("webdataset", "tfrecord"):
    folder = Path(sys.argv[1]) / fmt
    folder.mkdir()
    source = _shards(folder, fmt)
    for train in (True, False):
        loader = _loader(source, train=train, dtype=torch.float16, layout="NHWC")
        try:
            build_reader_pipeline(shard_files(source), loader.options, 0)
            results[f"{fmt} train={train}"] = "built"
        except Exception as exc:
            results[f"{fmt} train={train}"] = f"{type(exc).__name__}: {str(exc).splitlines()[0]}"
print(json.dumps(results))
"""


def test_the_gpu_reader_graph_traces_before_the_backend_refuses(tmp_path):
    # In a child process, as in test_dali_gpu: a process that tried a GPU pipeline must
    # not fork DataLoader workers later.
    out = subprocess.run([sys.executable, "-c", _TRACE, str(tmp_path)], capture_output=True, text=True,
                         timeout=300, cwd=Path(__file__).parents[2])
    assert out.returncode == 0, out.stderr[-2000:]
    results = json.loads(out.stdout.strip().splitlines()[-1])
    assert len(results) == 4
    for key, outcome in results.items():
        if torch.cuda.is_available():
            assert outcome == "built", key
        else:  # traced through the mixed decoders; only the missing GPU stopped it
            assert "CUDA is not available" in outcome, (key, outcome)


@pytest.mark.gpu
@pytest.mark.parametrize("fmt", ["webdataset", "tfrecord"])
def test_the_reader_pipeline_runs_on_the_gpu(tmp_path, fmt):
    source = _shards(tmp_path, fmt)
    kw = dict(device="cuda", shuffle=True, shard_id=0, num_shards=1, dtype=torch.uint8)
    it = _loader(source, **kw).dali_iterator()
    next(it)
    state = it.state_dict()
    rest = [(b[0]["label"].cpu().numpy().ravel(), b[0]["data"].cpu().numpy()) for b in it]
    seen = [x for lbl, _ in rest for x in lbl.tolist()]
    for labels, images in rest:
        assert images.shape[1:] == (3, 24, 24)
        _check_labels_match_images(labels, images)
    resumed = _loader(source, **kw).dali_iterator(checkpoint=state)
    again = [(b[0]["label"].cpu().numpy().ravel(), b[0]["data"].cpu().numpy()) for b in resumed]
    assert [x for lbl, _ in again for x in lbl.tolist()] == seen
    for (_, images), (_, images2) in zip(rest, again, strict=True):
        np.testing.assert_array_equal(images2, images)
