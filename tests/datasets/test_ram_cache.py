"""The RAM cache: one shared-memory copy of a dataset, the same batches as without it."""

from __future__ import annotations

import multiprocessing
import shutil
from pathlib import Path

import numpy as np
import pytest
import torch

from gpufeed.backends import dali_installed
from gpufeed.datasets import ram_cache
from gpufeed.datasets.ram_cache import RamCache
from gpufeed.datasets.samples import SampleSource
from gpufeed.datasets.storage import LOCAL
from gpufeed.machine import available_memory
from gpufeed.pipelines import classification_loader
from gpufeed.pipelines.sources import scan_image_folder
from tests.datasets.test_raw_cache import write_raw

# The bad files are reported once per run by a warning; the tests check loader.skipped.
pytestmark = pytest.mark.filterwarnings("ignore:gpufeed. epoch .* skipped:UserWarning")

BACKENDS = [
    "torch",
    pytest.param("dali", marks=pytest.mark.skipif(not dali_installed(), reason="DALI not installed")),
]


def load(source, backend, **kw):
    kw.setdefault("device", "cpu")
    kw.setdefault("dtype", torch.uint8)
    kw.setdefault("num_workers", 0 if backend == "torch" else 2)
    return classification_loader(source, backend=backend, **kw)


@pytest.fixture(scope="module")
def with_bad_files(image_folder, tmp_path_factory) -> Path:
    """The session's image folder plus an empty file and one that is not an image."""
    root = tmp_path_factory.mktemp("ram") / "train"
    shutil.copytree(image_folder, root)
    first = sorted(p for p in root.iterdir() if p.is_dir())[0]
    (first / "empty.jpg").write_bytes(b"")
    (first / "notes.jpg").write_bytes(b"not an image at all")
    return root


@pytest.fixture(scope="module")
def raw_folder(image_folder, tmp_path_factory) -> Path:
    return write_raw(image_folder, tmp_path_factory.mktemp("ram") / "raw", 64, "pad")


def batches(loader, epochs=2):
    out = []
    for _ in range(epochs):
        out += [(x.clone(), y.clone()) for x, y in loader]
        out.append(sorted(s.path for s in loader.skipped))
    return out


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("train", [True, False])
@pytest.mark.parametrize("kind", ["folder", "raw"])
def test_a_cached_dataset_gives_the_uncached_batches(with_bad_files, raw_folder, backend, train, kind):
    source = with_bad_files if kind == "folder" else raw_folder
    kw = dict(train=train, shuffle=True, batch_size=16, size=32)
    plain = batches(load(source, backend, **kw))
    cached_loader = load(source, backend, cache="ram", **kw)
    assert isinstance(cached_loader.samples, RamCache)
    cached = batches(cached_loader)
    assert len(plain) == len(cached)
    for a, b in zip(plain, cached, strict=True):
        if isinstance(a, list):  # the epoch's skipped files: the bad ones, every epoch
            assert a == b == ([] if kind == "raw" else sorted(str(p) for p in with_bad_files.rglob("*.jpg")
                                                               if p.stat().st_size < 100))
        else:
            assert torch.equal(a[0], b[0]) and torch.equal(a[1], b[1])


def test_torch_workers_read_the_cache(with_bad_files):
    kw = dict(train=True, batch_size=16, size=32, seed=3)
    plain = batches(load(with_bad_files, "torch", **kw), epochs=1)
    cached = batches(load(with_bad_files, "torch", cache="ram", num_workers=2, **kw), epochs=1)
    assert plain[-1] == cached[-1] and len(plain[-1]) == 2
    assert all(torch.equal(a[0], b[0]) and torch.equal(a[1], b[1]) for a, b in zip(plain[:-1], cached[:-1], strict=True))


def test_the_cache_keeps_the_sources_identity(with_bad_files, raw_folder):
    from gpufeed.datasets.shards.raw import RawCache

    for source in (scan_image_folder(with_bad_files), RawCache(raw_folder)):
        cache = RamCache(source)
        assert cache.kind == source.kind and cache.fingerprint() == source.fingerprint()
        assert list(cache.labels) == list(source.labels) and cache.classes == source.classes
        assert cache.name(5) == source.name(5) and cache.files == source.files
        assert cache.storage is source.storage and cache.groups is source.groups
        assert cache.nbytes() == source.nbytes()
        for i in range(len(source)):
            assert np.array_equal(cache.read(i), source.read(i))
        assert RamCache(cache).source is source  # a cache of a cache holds the data once


def test_a_state_saved_without_the_cache_resumes_with_it(image_folder):
    kw = dict(train=True, batch_size=8, size=32, seed=2)
    plain = load(image_folder, "torch", **kw)
    it = iter(plain)
    next(it)
    state = plain.state_dict()
    rest = [(x.clone(), y.clone()) for x, y in it]
    cached = load(image_folder, "torch", cache="ram", **kw)
    cached.load_state_dict(state)
    again = list(cached)
    assert len(again) == len(rest) and all(torch.equal(a[0], b[0]) for a, b in zip(again, rest, strict=True))


class _Huge(SampleSource):
    """A source that says it holds 5 GB (never read: the cache must refuse first)."""

    labels, classes, storage = (0,), ("a",), LOCAL

    def read(self, index: int) -> np.ndarray:
        raise AssertionError("read before the size check")

    def name(self, index: int) -> str:
        return "huge"

    def fingerprint(self) -> dict:
        return {}

    def nbytes(self) -> int:
        return 5_000_000_000


def test_a_dataset_too_big_for_memory_is_refused_up_front(monkeypatch, image_folder):
    monkeypatch.setattr(ram_cache, "available_memory", lambda: 2_000_000_000)
    with pytest.raises(ValueError, match=r"needs 5\.00 GB, but only 2\.00 GB of memory are available "
                                         r"\(80% of it may be used: 1\.60 GB\)"):
        RamCache(_Huge())
    monkeypatch.setattr(ram_cache, "available_memory", lambda: 20_000_000_000)
    monkeypatch.setattr(ram_cache, "shared_memory_free", lambda: 64_000_000)  # Docker's default
    with pytest.raises(ValueError, match=r"needs 5\.00 GB of shared memory, but /dev/shm has only 0\.06 GB"):
        RamCache(_Huge())
    monkeypatch.setattr(ram_cache, "available_memory", lambda: 1000)
    with pytest.raises(ValueError, match="cache='ram': the dataset needs"):
        load(image_folder, "torch", train=False, batch_size=8, cache="ram")


def test_under_torchrun_the_copies_of_every_rank_on_the_machine_must_fit(monkeypatch):
    # 5 GB fits in 80% of 10 GB once; four ranks each passing that check alone needed 20 GB.
    monkeypatch.setattr(ram_cache, "available_memory", lambda: 10_000_000_000)
    monkeypatch.setattr(ram_cache, "shared_memory_free", lambda: None)
    monkeypatch.setenv("LOCAL_WORLD_SIZE", "4")
    with pytest.raises(ValueError, match=r"needs 20\.00 GB \(4 ranks on this machine, a copy each\)"):
        RamCache(_Huge())


def test_available_memory_is_what_the_system_says():
    have = available_memory()
    meminfo = Path("/proc/meminfo").read_text().splitlines()
    total = int(next(ln for ln in meminfo if ln.startswith("MemTotal")).split()[1]) * 1024
    assert 0 < have <= total


def test_large_datasets_show_progress(monkeypatch, image_folder, capsys):
    monkeypatch.setattr(ram_cache, "PROGRESS_FROM", 10)
    RamCache(scan_image_folder(image_folder))
    assert "caching 40 samples in RAM" in capsys.readouterr().err


def _read_first_bytes(cache: RamCache, ready, out) -> None:
    ready.wait(120)
    out.put(bytes(cache.read(0)[:8]))


def test_a_spawned_worker_reads_the_parents_memory_not_a_copy(image_folder):
    cache = RamCache(scan_image_folder(image_folder))
    context = multiprocessing.get_context("spawn")  # pickles the cache, as forkserver workers get it
    ready, out = context.Event(), context.Queue()
    child = context.Process(target=_read_first_bytes, args=(cache, ready, out))
    child.start()
    try:
        # Written after the child got its pickle: it sees the change only through shared memory.
        cache.read(0)[:8] = np.frombuffer(b"SHARED!!", dtype=np.uint8)
        ready.set()
        assert out.get(timeout=180) == b"SHARED!!"
    finally:
        child.join(60)


def _with_a_broken_link(image_folder, root: Path) -> Path:
    shutil.copytree(image_folder, root)
    first = sorted(p for p in root.iterdir() if p.is_dir())[0]
    (first / "gone.jpg").symlink_to(root / "nowhere" / "gone.jpg")
    return first / "gone.jpg"


def test_a_broken_link_counts_no_bytes(image_folder, tmp_path):
    broken = _with_a_broken_link(image_folder, tmp_path / "train")
    source = scan_image_folder(tmp_path / "train")
    assert str(broken) in source.paths
    assert source.nbytes() == sum(p.stat().st_size for p in (tmp_path / "train").rglob("*.jpg") if p != broken)


def test_a_broken_link_is_skipped_and_reported_as_without_the_cache(image_folder, tmp_path):
    broken = _with_a_broken_link(image_folder, tmp_path / "train")
    loader = load(tmp_path / "train", "torch", train=False, batch_size=8, size=32, cache="ram")
    assert sum(len(y) for _, y in loader) == 40
    assert [s.path for s in loader.skipped] == [str(broken)]
