"""The pre-decoded raw cache: RawWriter writes it, RawCache reads it, both loaders load it."""

from __future__ import annotations

import json
import pickle
import warnings
from pathlib import Path

import numpy as np
import pytest
import torch
from torchvision.transforms.v2 import functional as TF

from gpufeed.backends import dali_installed
from gpufeed.datasets.shards import MANIFEST, open_converted
from gpufeed.datasets.shards.raw import DONE, EXTENTS, IMAGES, RawCache, RawWriter, fit_image
from gpufeed.datasets.storage import SimulatedRemote
from gpufeed.pipelines import classification_loader
from gpufeed.pipelines.sources import scan_image_folder
from gpufeed.pipelines.torch_loader import decode_rgb

BACKENDS = [
    "torch",
    pytest.param("dali", marks=pytest.mark.skipif(not dali_installed(), reason="DALI not installed")),
]


def write_raw(src_folder: Path, dst: Path, size: int, mode: str = "crop", indexed: bool = False) -> Path:
    """A raw cache of ``src_folder``; ``indexed``: label = sample number, so batches say
    exactly which samples they hold."""
    src = scan_image_folder(src_folder)
    classes = [str(i) for i in range(len(src))] if indexed else src.classes
    writer = RawWriter(dst, len(src), size, mode, classes=classes)
    for i in range(len(src)):
        writer.add(i, decode_rgb(src.read(i)), i if indexed else src.labels[i])
    (dst / MANIFEST).write_text(json.dumps(writer.close()))
    return dst


@pytest.fixture(scope="module")
def raw_crop(image_folder, tmp_path_factory) -> Path:
    return write_raw(image_folder, tmp_path_factory.mktemp("raw") / "crop", 64, indexed=True)


@pytest.fixture(scope="module")
def raw_pad(image_folder, tmp_path_factory) -> Path:
    return write_raw(image_folder, tmp_path_factory.mktemp("raw") / "pad", 64, "pad", indexed=True)


def load(folder, backend, **kw):
    kw.setdefault("device", "cpu")
    kw.setdefault("dtype", torch.uint8)
    return classification_loader(folder, backend=backend, **kw)


# -- writing ---------------------------------------------------------------------------------
def test_crop_mode_stores_torchvisions_resize_and_centre_crop():
    pixels = torch.randint(0, 256, (90, 130, 3), dtype=torch.uint8)
    ref = TF.center_crop(TF.resize(pixels.permute(2, 0, 1).contiguous(), [64], antialias=True), [64, 64])
    out = fit_image(pixels, 64, "crop")
    assert out.shape == (64, 64, 3)
    assert (out.permute(2, 0, 1).int() - ref.int()).abs().max() <= 1  # channels-last kernel rounding


@pytest.mark.parametrize(("h", "w", "expected"), [(90, 130, (44, 64)), (130, 90, (64, 44)), (32, 32, (64, 64))])
def test_pad_mode_scales_the_longer_side_and_keeps_the_true_extent(tmp_path, h, w, expected):
    pixels = torch.randint(0, 256, (h, w, 3), dtype=torch.uint8)
    writer = RawWriter(tmp_path, 2, 64, "pad")
    writer.add(0, torch.full((64, 64, 3), 255, dtype=torch.uint8), 0)
    writer.add(0, pixels, 1)  # re-added smaller: the old pixels must not show in the margin
    writer.add(1, pixels, 0)
    (tmp_path / MANIFEST).write_text(json.dumps(writer.close()))
    cache = RawCache(tmp_path)
    image = cache.read(0)
    assert image.shape == (*expected, 3) and cache.labels[0] == 1
    ref = TF.resize(pixels.permute(2, 0, 1).contiguous(), list(expected), antialias=True).permute(1, 2, 0)
    assert np.abs(image.astype(int) - ref.numpy().astype(int)).max() <= 1
    square = np.memmap(tmp_path / IMAGES, dtype=np.uint8, mode="r", shape=(2, 64, 64, 3))[0]
    assert square[expected[0]:].sum() == 0 and square[:, expected[1]:].sum() == 0
    assert cache.nbytes() == 2 * expected[0] * expected[1] * 3


def test_the_writer_resumes_and_re_adding_is_idempotent(tmp_path, image_folder):
    src = scan_image_folder(image_folder)
    n = len(src)
    first = RawWriter(tmp_path, n, 48)
    for i in range(0, n, 2):  # any order, half of them
        first.add(i, decode_rgb(src.read(i)), src.labels[i])
    with pytest.raises(ValueError, match=f"{n // 2} of {n} samples were never added"):
        first.close()  # saves the progress too
    del first
    again = RawWriter(tmp_path, n, 48)
    assert [again.done(i) for i in range(n)] == [i % 2 == 0 for i in range(n)]
    for i in reversed(range(n)):  # everything again, the even ones a second time
        again.add(i, decode_rgb(src.read(i)), src.labels[i])
    manifest = again.close()
    assert manifest == {"format": "raw", "samples": n, "size": 48, "mode": "crop", "files": [IMAGES, "labels.npy"]}
    (tmp_path / MANIFEST).write_text(json.dumps({**manifest, "classes": list(src.classes)}))
    cache = RawCache(tmp_path)
    for i in range(n):
        assert np.array_equal(cache.read(i), fit_image(decode_rgb(src.read(i)), 48).numpy())
    assert list(cache.labels) == list(src.labels) and cache.classes == src.classes


def test_a_resumed_writer_with_other_settings_is_refused(tmp_path):
    RawWriter(tmp_path, 4, 32).add(0, torch.zeros(8, 8, 3, dtype=torch.uint8), 0)
    with pytest.raises(ValueError, match=r"raw-progress\.json.*'size': 32"):
        RawWriter(tmp_path, 4, 64)


def test_progress_is_saved_only_after_the_pixels(tmp_path):
    writer = RawWriter(tmp_path, 3, 16, flush_s=3600)
    writer.add(1, torch.zeros(20, 20, 3, dtype=torch.uint8), 0)
    saved = np.unpackbits(np.load(tmp_path / DONE), count=3)
    assert writer.done(1) and not saved.any()  # not flushed yet: a crash now redoes sample 1
    writer.flush()
    assert list(np.unpackbits(np.load(tmp_path / DONE), count=3)) == [0, 1, 0]


@pytest.mark.parametrize(("kwargs", "match"), [
    (dict(count=0, size=8), "count must be >= 1"), (dict(count=2, size=0), "size must be >= 1"),
    (dict(count=2, size=8, mode="stretch"), "mode must be one of crop, pad"),
])
def test_bad_writer_arguments_are_named(tmp_path, kwargs, match):
    with pytest.raises(ValueError, match=match):
        RawWriter(tmp_path, **kwargs)


def test_bad_samples_are_refused_with_their_index(tmp_path):
    writer = RawWriter(tmp_path, 2, 16)
    with pytest.raises(IndexError, match="sample index 2 out of range"):
        writer.add(2, torch.zeros(8, 8, 3, dtype=torch.uint8), 0)
    with pytest.raises(ValueError, match=r"sample 1: pixels must be \(H, W, 3\) uint8"):
        writer.add(1, torch.zeros(8, 8, dtype=torch.uint8), 0)


# -- reading ---------------------------------------------------------------------------------
def test_the_cache_reads_pixels_and_pickles_without_its_map(raw_crop):
    cache = open_converted(raw_crop)
    assert isinstance(cache, RawCache) and cache.kind == "pixels" and cache.groups is None
    image = cache.read(3)
    assert image.shape == (64, 64, 3) and image.dtype == np.uint8 and image.flags.writeable
    assert cache.name(3) == f"{raw_crop}/{IMAGES}:#3"
    assert cache.nbytes() == 40 * 64 * 64 * 3 and cache.files[0] == str(raw_crop / IMAGES)
    assert cache.fingerprint()["kind"] == "raw" and cache.fingerprint()["samples"] == 40
    blob = pickle.dumps(cache)
    assert len(blob) < 10_000  # labels and settings only, never the pixels or an open map
    assert np.array_equal(pickle.loads(blob).read(3), image)
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # torch warns on read-only arrays
        torch.from_numpy(image)


def test_a_simulated_remote_store_charges_one_open_per_process_and_every_byte(raw_pad):
    store = SimulatedRemote()
    cache = RawCache(raw_pad, store)
    total = sum(cache.read(i).nbytes for i in range(len(cache)))
    assert store.opens == 1 and store.bytes == total == cache.nbytes()


def test_a_cut_short_cache_is_refused_naming_the_file(raw_crop, tmp_path):
    for name in ("labels.npy", MANIFEST):
        (tmp_path / name).write_bytes((raw_crop / name).read_bytes())
    (tmp_path / IMAGES).write_bytes((raw_crop / IMAGES).read_bytes()[:1000])
    with pytest.raises(ValueError, match=rf"{IMAGES}: 1000 bytes, but 40 images of 64x64x3"):
        RawCache(tmp_path)
    (tmp_path / "labels.npy").unlink()
    with pytest.raises(FileNotFoundError, match="labels.npy does not exist"):
        RawCache(tmp_path)


def test_convert_writes_a_padded_raw_cache(image_folder, raw_pad, tmp_path):
    # The pad mode was reachable from RawWriter alone; gpufeed convert --raw-mode pad now.
    from gpufeed.datasets.shards.convert import convert

    out = tmp_path / "pad"
    convert(image_folder, out, format="raw", raw_size=64, raw_mode="pad", shuffle=False, workers=0, progress=False)
    assert json.loads((out / MANIFEST).read_text())["mode"] == "pad"
    assert (out / IMAGES).read_bytes() == (raw_pad / IMAGES).read_bytes()  # the same pixels, the same margins
    assert np.array_equal(np.load(out / EXTENTS), np.load(raw_pad / EXTENTS))
    with pytest.raises(ValueError, match="raw_mode"):  # another mode is another conversion
        convert(image_folder, out, format="raw", raw_size=64, shuffle=False, workers=0, progress=False)
    with pytest.raises(ValueError, match="raw_mode must be 'crop' or 'pad'"):
        convert(image_folder, tmp_path / "x", format="raw", raw_mode="letterbox", progress=False)


def test_an_unfinished_conversion_is_refused(tmp_path):
    writer = RawWriter(tmp_path, 2, 8)
    writer.add(0, torch.zeros(8, 8, 3, dtype=torch.uint8), 0)
    writer.flush()
    (tmp_path / MANIFEST).write_text(json.dumps({"format": "raw", "samples": 2, "size": 8}))
    with pytest.raises(ValueError, match="only 1 of 2 samples were written"):
        RawCache(tmp_path)


# -- through the loaders ---------------------------------------------------------------------
# Torch workers with DALI loaded in the process start through forkserver, 20 s or more
# per loader on a small machine: one case with workers per mode (DALI's are threads).
_NEEDS_DALI = pytest.mark.skipif(not dali_installed(), reason="DALI not installed")


def _case(backend: str, mode: str, train: bool, workers: int):
    return pytest.param(backend, mode, train, workers, marks=[_NEEDS_DALI] if backend == "dali" else [],
                        id=f"{backend}-{mode}-{'train' if train else 'val'}-{workers}")


CASES = [_case(b, m, t, 0) for b in ("torch", "dali") for m in ("crop", "pad") for t in (True, False)]
CASES += [_case("dali", m, t, 2) for m in ("crop", "pad") for t in (True, False)]
CASES += [_case("torch", "crop", True, 2), _case("torch", "pad", False, 2)]


@pytest.mark.parametrize(("backend", "mode", "train", "workers"), CASES)
def test_both_loaders_read_every_sample_once_per_epoch(raw_crop, raw_pad, backend, train, workers, mode):
    folder = raw_crop if mode == "crop" else raw_pad
    loader = load(folder, backend, train=train, shuffle=True, batch_size=16, size=48, num_workers=workers,
                  dtype=torch.float32)
    for _ in range(2):
        batches = list(loader)
        assert [len(y) for _, y in batches] == [16, 16, 8]
        for x, y in batches:
            assert x.shape[1:] == (3, 48, 48) and x.dtype == torch.float32 and y.dtype == torch.int64
        assert sorted(torch.cat([y for _, y in batches]).tolist()) == list(range(40))
    assert loader.skipped == []


@pytest.mark.parametrize(("mode", "dtype", "layout"), [("crop", torch.float32, "NCHW"),
                                                     ("pad", torch.float16, "NHWC")])
def test_torch_threads_on_a_raw_cache_give_the_single_threaded_batches(raw_crop, raw_pad, mode, dtype, layout):
    # num_workers on a raw cache means threads of this process, running ahead of the
    # consumer; every batch, kept or not, is the one a single-threaded loader yields.
    folder = raw_crop if mode == "crop" else raw_pad
    kw = dict(train=True, shuffle=True, batch_size=8, size=32, seed=3, dtype=dtype, layout=layout)
    single = list(load(folder, "torch", num_workers=0, **kw))
    threaded = load(folder, "torch", num_workers=2, **kw)
    for _ in threaded:  # an epoch cut short: the next starts clean
        break
    threaded.set_epoch(0)
    kept = list(threaded)
    assert len(kept) == len(single) == 5 and len({x.data_ptr() for x, _ in kept}) == 5
    for (xa, ya), (xb, yb) in zip(single, kept, strict=True):
        assert xb.dtype == dtype and torch.equal(xa, xb) and torch.equal(ya, yb)


def test_many_torch_workers_on_a_raw_cache_are_processes_giving_the_same_batches(raw_crop, monkeypatch):
    # Threads share one GIL: from PIXEL_PROCESSES_FROM workers up a raw cache's samples are
    # made in worker processes (16 threads on 16 cores made 2,029 images/s, half of what 16
    # processes made of the JPEGs), with the same crops as a single-threaded loader.
    from types import SimpleNamespace

    from gpufeed.pipelines import torch_loader

    pixels, files = SimpleNamespace(kind="pixels"), SimpleNamespace(kind="files")
    assert [torch_loader.pixel_threads(pixels, SimpleNamespace(workers=w)) for w in (0, 2, 7, 8, 16)] == [0, 2, 7, 0, 0]
    assert torch_loader.pixel_threads(files, SimpleNamespace(workers=2)) == 0
    kw = dict(train=True, shuffle=True, batch_size=8, size=32, seed=3)
    single = list(load(raw_crop, "torch", num_workers=0, **kw))
    monkeypatch.setattr(torch_loader, "PIXEL_PROCESSES_FROM", 2)  # 2 processes, not 8, in CI
    loader = load(raw_crop, "torch", num_workers=2, **kw)
    assert loader._threads == 0 and loader._loader.num_workers == 2
    for (xa, ya), (xb, yb) in zip(single, loader, strict=True):
        assert torch.equal(xa, xb) and torch.equal(ya, yb)
    loader.close()


@pytest.mark.skipif(not dali_installed(), reason="DALI not installed")
@pytest.mark.parametrize("mode", ["crop", "pad"])
def test_torch_and_dali_crop_a_raw_cache_alike(raw_crop, raw_pad, mode):
    folder = raw_crop if mode == "crop" else raw_pad

    def epoch(backend, seed):
        loader = load(folder, backend, train=True, batch_size=8, size=32, seed=seed,
                      num_workers=2 if backend == "dali" else 0)
        return [(x, y) for x, y in loader]

    dali, torch_ = epoch("dali", 4), epoch("torch", 4)
    for (xd, yd), (xt, yt) in zip(dali, torch_, strict=True):
        assert torch.equal(yd, yt)
        # The same window of the same pixels on both: DALI flips before the resize, torch
        # after, which moves a value by at most one level.
        assert (xd.int() - xt.int()).abs().max() <= 1
    other = epoch("torch", 5)
    assert not all(torch.equal(a, b) for (a, _), (b, _) in zip(torch_, other, strict=True))


@pytest.mark.parametrize("backend", BACKENDS)
def test_validation_of_a_256_cache_at_224_is_its_centre_crop(image_folder, tmp_path, backend):
    folder = write_raw(image_folder, tmp_path / "raw256", 256, indexed=True)
    cache = RawCache(folder)
    loader = load(folder, backend, train=False, batch_size=16, size=224, num_workers=2 if backend == "dali" else 0)
    for x, y in loader:
        ref = torch.stack([torch.from_numpy(np.array(cache.read(i)[16:240, 16:240])) for i in y.tolist()])
        assert torch.equal(x, ref.permute(0, 3, 1, 2))
