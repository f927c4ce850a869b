"""Storage formats under warm, cold and simulated-remote storage: folder, WebDataset and TFRecord shards, raw cache, RAM cache.

The same images in every format (converted once, outside the timed region, with the
conversion time reported apart), read by the kit's loaders on each backend, beside
DataLoader + PIL + transforms.v2 over the folder. Every contender runs in its own
process with the same cores and yields the train pipeline's output: float32 normalised
NCHW batches, ``size`` x ``size``.

Storage conditions:

- ``warm``: every file in the page cache (the checked, untimed epoch first reads them all);
- ``cold``: every file's pages dropped (``posix_fadvise(DONTNEED)``) before each timed
  epoch, checked to work on this filesystem first (``mincore`` residency and read time);
- ``remote``: every read goes through :class:`~gpufeed.datasets.storage.SimulatedRemote`
  (a wait per file open, a bandwidth cap per reader): the baseline's ``ImageFolder``
  reads through it too, so every contender pays the same per open and per byte.
"""

from __future__ import annotations

import argparse
import ctypes
import dataclasses
import hashlib
import io
import json
import mmap
import multiprocessing as mp
import os
import shutil
import statistics
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from gpufeed.arguments import at_least, byte_size, number_at_least
from gpufeed.bench.harness import (
    Timing,
    add_loader_arguments,
    markdown_table,
    pool_rounds,
    results_line,
    round_ratios,
    rounds_text,
    run_isolated,
    spread,
    synchronize,
    write_results,
)
from gpufeed.bench.images import (
    _checked_epoch,
    _verify,
    baseline_dataset,
    baseline_loader,
    clean_image_tree,
)
from gpufeed.datasets.storage import SimulatedRemote, Storage, drop_page_cache
from gpufeed.progress import stage

BASELINE = "torch-pil/folder"
CONDITIONS = ("warm", "cold", "remote")
KIT_BACKENDS = ("torch-cpu", "dali-cpu", "dali-gpu", "torch-gpu")
#: Storage formats the kit's loaders read, and what each is.
FORMATS = {
    "folder": "the ImageFolder tree itself, one file per image",
    "webdataset": "WebDataset tar shards (gpufeed convert --format webdataset)",
    "tfrecord": "TFRecord shards (gpufeed convert --format tfrecord)",
    "raw": "pre-decoded raw cache: uint8 pixels, short side resized ahead of time (gpufeed convert --format raw)",
    "folder+ram": "the folder read once into shared memory (cache='ram'); the fill is the setup time",
    "raw+ram": "the raw cache read once into shared memory (cache='ram')",
    "webdataset+reader": "the WebDataset shards read by DALI's own fn.readers.webdataset (loader.dali_iterator(); "
                         "DALI backends only)",
    "tfrecord+reader": "the TFRecord shards read by DALI's own fn.readers.tfrecord (loader.dali_iterator(); "
                       "DALI backends only)",
}
#: Formats read by DALI's own readers: they open the files themselves, so no simulated
#: store can sit in front of them (not run under ``remote``), and only DALI runs them.
READER = "+reader"
#: Formats written by ``convert``, and the format each contender reads from.
CONVERTED = ("webdataset", "tfrecord", "raw")
SHARDS = ("webdataset", "tfrecord")
#: Shard target size: convert's own default (256 MiB) would put the default set (~50 MB)
#: in a single shard, which no real dataset of shards looks like.
DEFAULT_SHARD_SIZE = "8MB"
#: Bump when the conversion settings here change, so cached conversions are redone.
_CONVERT_VERSION = 1


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Options of ``gpufeed bench storage``."""
    parser.add_argument("--data", help="ImageFolder tree (default: a generated, cached ImageNet-like set)")
    parser.add_argument("--images", type=at_least(1), default=1024, help="size of the generated default set (default: 1024)")
    parser.add_argument("--storage", nargs="+", choices=CONDITIONS, default=None, metavar="CONDITION",
                        help="warm, cold, remote (default: all three; cold only where dropping pages works)")
    parser.add_argument("--formats", nargs="+", choices=sorted(FORMATS), default=None, metavar="FORMAT",
                        help=f"kit formats to read (default: all): {', '.join(FORMATS)}")
    parser.add_argument("--backends", nargs="+", choices=KIT_BACKENDS, default=None, metavar="BACKEND",
                        help=f"the kit's backends to run (default: every one this machine has): "
                             f"{', '.join(KIT_BACKENDS)}")
    parser.add_argument("--open-latency-ms", type=number_at_least(0), default=20.0,
                        help="remote: wait per file open, ms (default: 20; 5 is a fast object store)")
    parser.add_argument("--bandwidth-mb-s", type=number_at_least(0), default=200.0,
                        help="remote: MB/s per reading process or thread (default: 200; 0 = unlimited)")
    parser.add_argument("--shard-size", default=DEFAULT_SHARD_SIZE, type=byte_size,
                        help=f"target shard size in bytes or with a unit, e.g. 64MB (default: {DEFAULT_SHARD_SIZE}: "
                             f"several shards even for the default 1024 images, so workers read different ones)")
    parser.add_argument("--raw-size", type=at_least(1), default=256, help="raw cache short side (default: 256)")
    add_loader_arguments(parser, "contender")


# -- reading through a storage, counted across processes ------------------------------------


class CountingRemote(SimulatedRemote):
    """:class:`SimulatedRemote` whose opens and bytes are also added to counters shared
    with the DataLoader workers it is handed to (``SimulatedRemote.opens`` counts per
    process only), so a report can give opens and bytes per epoch for every backend.

    The counters are shared memory from the ``spawn`` context, which crosses into forked,
    forkserver and spawned workers alike; a copy pickled outside a process start (where
    shared memory cannot travel) counts only in its own process.
    """

    def __init__(self, open_latency_ms: float = 0.0, bandwidth_mb_s: float | None = None) -> None:
        super().__init__(open_latency_ms, bandwidth_mb_s)
        self._shared: Any = mp.get_context("spawn").Array("q", 3)  # opens, bytes, epoch
        self._epoch_seen = 0

    def new_epoch(self) -> None:
        """Make every process sharing the counters reopen its files from now on.

        A storage keeps shard files open across epochs (handles per process, and the
        workers persist), so without this only the first epoch would pay the remote's
        open latency: here each epoch pays one open per shard per reader, as streaming
        shards from an object store does.
        """
        if self._shared is not None:
            with self._shared.get_lock():
                self._shared[2] += 1

    def _acquire(self, path: str) -> Any:
        if self._shared is not None:
            epoch = self._shared[2]
            if epoch != self._epoch_seen:
                self._epoch_seen = epoch
                self.close()  # handles in use close when their reads end
        return super()._acquire(path)

    def _opened(self, path: str) -> None:
        super()._opened(path)
        if self._shared is not None:
            with self._shared.get_lock():
                self._shared[0] += 1

    def _transferred(self, nbytes: int) -> None:
        super()._transferred(nbytes)
        if self._shared is not None:
            with self._shared.get_lock():
                self._shared[1] += nbytes

    def totals(self) -> tuple[int, int]:
        """``(opens, bytes)`` of every process sharing the counters (this one's alone when
        the counters did not travel)."""
        if self._shared is None:
            return self.opens, self.bytes
        with self._shared.get_lock():
            return int(self._shared[0]), int(self._shared[1])

    def __getstate__(self) -> dict:
        from multiprocessing.context import get_spawning_popen

        state = super().__getstate__()
        if get_spawning_popen() is None:  # not a process start: shared memory cannot be pickled
            state["_shared"] = None
        return state


class StorageImageLoader:
    """``ImageFolder``'s ``loader=``: the file's bytes through a :class:`Storage`, decoded
    by PIL, so the baseline pays what the kit's readers pay under a simulated remote.

    Args:
        storage: how bytes are read.
    """

    def __init__(self, storage: Storage) -> None:
        self.storage = storage

    def __call__(self, path: str) -> Any:
        """The RGB ``PIL.Image`` at ``path``."""
        from PIL import Image

        with Image.open(io.BytesIO(self.storage.read_file(path).tobytes())) as img:
            return img.convert("RGB")


# -- does dropping pages work here? ---------------------------------------------------------


def _resident_fraction(paths: Sequence[str]) -> float | None:
    """The fraction of ``paths``' pages in the page cache (``mincore``), or None where
    it cannot be asked (no libc ``mincore``)."""
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        libc.mmap.restype = ctypes.c_void_p
        libc.mmap.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int, ctypes.c_int, ctypes.c_int,
                              ctypes.c_long]
        libc.munmap.argtypes = [ctypes.c_void_p, ctypes.c_size_t]
        libc.mincore.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_void_p]
    except (OSError, AttributeError):
        return None
    resident = total = 0
    for path in paths:
        size = os.path.getsize(path)
        if size == 0:
            continue
        fd = os.open(path, os.O_RDONLY)
        try:
            addr = libc.mmap(None, size, mmap.PROT_READ, mmap.MAP_SHARED, fd, 0)
            if addr in (None, ctypes.c_void_p(-1).value):
                return None
            pages = (size + mmap.PAGESIZE - 1) // mmap.PAGESIZE
            vec = (ctypes.c_ubyte * pages)()
            failed = libc.mincore(addr, size, vec)
            libc.munmap(addr, size)
            if failed:
                return None
            resident += sum(v & 1 for v in vec)
            total += pages
        finally:
            os.close(fd)
    return resident / total if total else None


def _read_all(paths: Sequence[str]) -> float:
    start = time.perf_counter()
    for path in paths:
        with open(path, "rb", buffering=0) as f:
            while f.read(1 << 20):
                pass
    return time.perf_counter() - start


def page_cache_check(paths: Sequence[str], *, sample: int = 200) -> dict[str, Any]:
    """Whether :func:`~gpufeed.datasets.storage.drop_page_cache` empties the page cache here.

    Reads up to ``sample`` of ``paths`` twice (warm), drops their pages, then reads them
    again: the residency (``mincore``) before and after the drop, and the warm and cold
    read times. Overlay and tmpfs filesystems may ignore the advice; then a "cold" run is
    a warm one and the report must say so.

    Args:
        paths: the dataset's files.
        sample: how many of them to try (spread over the list).

    Returns:
        ``{"works", "method", "resident_warm", "resident_dropped", "warm_read_s",
        "cold_read_s", "slowdown", "files", "bytes"}``; ``works`` is judged on residency
        where ``mincore`` answers, else on a read at least 20 % slower.
    """
    step = max(1, len(paths) // max(1, sample))
    picked = list(paths)[::step][:sample]
    _read_all(picked)
    warm_s = _read_all(picked)
    resident_warm = _resident_fraction(picked)
    drop_page_cache(picked)
    resident_dropped = _resident_fraction(picked)
    cold_s = _read_all(picked)
    slowdown = cold_s / warm_s if warm_s > 0 else None
    if resident_warm is not None and resident_dropped is not None:
        method, works = "mincore", resident_dropped < 0.1 and resident_warm > 0.5
    else:
        method, works = "read time", bool(slowdown and slowdown > 1.2)
    return {"works": works, "method": method, "resident_warm": resident_warm, "resident_dropped": resident_dropped,
            "warm_read_s": warm_s, "cold_read_s": cold_s, "slowdown": slowdown, "files": len(picked),
            "bytes": sum(os.path.getsize(p) for p in picked)}


# -- conversions, once per dataset ----------------------------------------------------------


def conversion_folder(root: Path) -> Path:
    """Where converted copies of ``root`` are cached: beside a generated dataset, else in
    the cache folder under a digest of the path (a user's data folder may be read-only)."""
    from gpufeed.datasets.cache import cache_dir

    root = root.resolve()
    cache = cache_dir().resolve()
    if cache in root.parents:
        return root.parent / "converted"
    return cache / "converted" / hashlib.sha1(str(root).encode()).hexdigest()[:12]


def _convert(src: str, dst: str, fmt: str, shard_size: str, raw_size: int, workers: int) -> dict[str, Any]:
    """Convert ``src`` into ``dst`` (runs in a fresh process); the wall time and the report."""
    from gpufeed.datasets.shards.convert import convert

    start = time.perf_counter()
    report = convert(src, dst, format=fmt, shard_size=shard_size, seed=0, shuffle=True, raw_size=raw_size,
                     workers=workers, progress=False)
    seconds = time.perf_counter() - start
    if dataclasses.is_dataclass(report) and not isinstance(report, type):
        detail = dataclasses.asdict(report)
    else:
        detail = {"report": str(report)}
    return {"seconds": seconds, "report": json.loads(json.dumps(detail, default=str))}


def converted_copy(root: Path, fmt: str, *, files: int, nbytes: int, shard_size: str, raw_size: int,
                   workers: int) -> dict[str, Any]:
    """``root`` converted to ``fmt`` (done once, then reused while the settings match).

    A marker written after ``convert`` returns holds the settings and the conversion's
    time, so an interrupted conversion is redone rather than trusted.

    Returns:
        ``{"format", "path", "seconds", "cached", "report"}``, or ``{"format", "error"}``.
    """
    spec = {"format": fmt, "shard_size": str(shard_size), "raw_size": raw_size, "seed": 0, "source": str(root.resolve()),
            "files": files, "bytes": nbytes, "version": _CONVERT_VERSION}
    key = hashlib.sha1(json.dumps(spec, sort_keys=True).encode()).hexdigest()[:8]
    dst = conversion_folder(root) / f"{fmt}-{key}"
    marker = dst / "bench-storage.json"
    if marker.is_file():
        done = json.loads(marker.read_text())
        if done.get("spec") == spec:
            return {"format": fmt, "path": str(dst), "seconds": done["seconds"], "cached": True,
                    "report": done.get("report")}
    if dst.exists():
        shutil.rmtree(dst)  # a partial conversion from an interrupted run
    dst.parent.mkdir(parents=True, exist_ok=True)
    stage(f"[storage] converting {files} images to {fmt} (once; cached in {dst}) ...")
    out = run_isolated(_convert, str(root), str(dst), fmt, shard_size, raw_size, workers)
    if "error" in out:
        return {"format": fmt, "error": out["error"]}
    marker.write_text(json.dumps({"spec": spec, **out}, indent=2))
    return {"format": fmt, "path": str(dst), "seconds": out["seconds"], "cached": False, "report": out["report"]}


# -- one contender under one condition (in its own process) ---------------------------------


def _iqr(rates: list[float]) -> tuple[float, float]:
    if len(rates) < 2:
        return rates[0], rates[0]
    q1, _, q3 = statistics.quantiles(rates, n=4, method="inclusive")
    return q1, q3


def _contender(name: str, condition: str, spec: str, *, root: str, batch_size: int, size: int, workers: int,
               device: str, repeats: int, open_latency_ms: float, bandwidth_mb_s: float | None) -> dict[str, Any]:
    """Build contender ``name`` (``backend/format``) over ``spec`` and time it under
    ``condition``; runs in a fresh process."""
    import torch

    from gpufeed.pipelines.sources import open_source, scan_image_folder

    torch.set_num_threads(1)  # the work belongs to the workers/threads, as configured
    backend, fmt = name.split("/")
    # Imports before the setup clock starts: setup_s is building the loader (scanning,
    # DALI pipelines, a RAM cache's fill), not loading Python modules.
    import torchvision.datasets  # noqa: F401

    from gpufeed.pipelines import classification_loader
    if backend.startswith("dali"):  # only there: DALI in this process makes the torch backend use forkserver
        import gpufeed.pipelines.dali_loader  # noqa: F401
    remote = CountingRemote(open_latency_ms, bandwidth_mb_s) if condition == "remote" else None
    storage = remote if remote is not None else Storage()
    start = time.perf_counter()
    if backend == "torch-pil":
        dataset = baseline_dataset(root, train=True, size=size)
        if remote is not None:
            dataset.loader = StorageImageLoader(storage)
        loader = baseline_loader(dataset, train=True, batch_size=batch_size, num_workers=workers,
                                 pin_memory=device.startswith("cuda"))
        files = scan_image_folder(root).files
    else:
        source = open_source(spec, storage=storage)
        files = source.files
        kit_backend, where = backend.split("-")
        loader = classification_loader(source, train=True, batch_size=batch_size, size=size, backend=kit_backend,
                                       device="cuda" if where == "gpu" else "cpu", num_workers=workers,
                                       cache="ram" if fmt.endswith("+ram") else "none")
        if fmt.endswith(READER):
            loader = _ReaderBatches(loader.dali_iterator())
    setup_s = time.perf_counter() - start
    at_setup = remote.totals() if remote is not None else (0, 0)  # a RAM cache's fill reads everything here
    # The untimed first epoch warms the cache, starts the workers and records the output checks.
    check = _checked_epoch(loader, device)
    if hasattr(loader, "skipped"):
        check["skipped"] = len(loader.skipped)
    counted_from = remote.totals() if remote is not None else (0, 0)
    target = torch.device(device)
    seconds, work = [], 0
    for _ in range(repeats):
        if condition == "cold":
            drop_page_cache(files)  # outside the clock: only the reads it makes slower count
        if remote is not None:
            remote.new_epoch()
        t0 = time.perf_counter()
        work = 0
        for images, _ in loader:
            work += images.to(target, non_blocking=True).shape[0]
        synchronize()
        seconds.append(time.perf_counter() - t0)
    timing = Timing(seconds, float(work))
    row: dict[str, Any] = {"name": name, "condition": condition, **timing.as_dict(),
                           "setup_s": setup_s, "files": len(files), "check": check}
    if remote is not None:
        opens, nbytes = remote.totals()
        per_epoch = (opens - counted_from[0]) / repeats
        row["opens_per_epoch"] = int(per_epoch) if per_epoch.is_integer() else per_epoch  # "64", not "64.00"
        row["mb_per_epoch"] = (nbytes - counted_from[1]) / repeats / 1e6
        row["setup_opens"], row["setup_mb"] = at_setup[0], at_setup[1] / 1e6
    return row


def _contender_conditions(name: str, conditions: Sequence[str], spec: str, **settings: Any) -> dict[str, Any]:
    """Contender ``name`` under each condition in turn, in one fresh process (starting a
    process with torch costs seconds here; each condition still builds its own loader,
    and the last one's workers are gone before the next starts). A condition that fails
    is reported as such and the others still run."""
    import gc
    import traceback

    rows = []
    for condition in conditions:
        try:
            rows.append(_contender(name, condition, spec, **settings))
        except Exception as exc:  # noqa: BLE001 - one condition's failure must not lose the others
            rows.append({"name": name, "condition": condition,
                         "error": f"{type(exc).__name__}: {exc}\n{traceback.format_exc()}"})
        gc.collect()  # the loader (its workers, DALI pipelines, shared memory) goes before the next
    return {"rows": rows}


# -- the suite ------------------------------------------------------------------------------


def _runs_under(fmt: str, condition: str) -> bool:
    """Whether format ``fmt`` is read under ``condition``: DALI's own readers open the files
    themselves, so no simulated store sits in front of them."""
    return not (fmt.endswith(READER) and condition == "remote")


def contender_names(formats: Sequence[str], backends: Sequence[str]) -> list[str]:
    """The baseline, then every ``backend/format`` pair, formats outermost (DALI's own
    readers, ``*+reader``, with the DALI backends only)."""
    return [BASELINE, *(f"{b}/{f}" for f in formats for b in backends
                        if not f.endswith(READER) or b.startswith("dali"))]


class _ReaderBatches:
    """``loader.dali_iterator()``'s outputs (DALI's own shard readers) as ``(images,
    labels)`` pairs, an epoch per ``for`` (the iterator resets itself after each)."""

    def __init__(self, iterator: Any) -> None:
        self.iterator = iterator

    def __iter__(self) -> Any:
        for out in self.iterator:
            yield out[0]["data"], out[0]["label"].view(-1)


def _ratio(rows: dict[tuple[str, str], dict], condition: str, name: str, over: str) -> tuple[float | None, str]:
    """``rate(name) / rate(over)`` under ``condition`` and the numbers, or None and why not."""
    a, b = rows.get((condition, name), {}), rows.get((condition, over), {})
    for r, n in ((a, name), (b, over)):
        if "rate" not in r or r.get("verdict") not in (None, "ok"):
            why = r.get("skipped") or r.get("verdict") or "not run"
            return None, f"{n} under {condition}: {why}"
    per_round = round_ratios(a, b)
    rounds = f"; per round {spread(per_round)}" if len(per_round) > 1 else ""
    return a["rate"] / b["rate"], f"{a['rate']:,.0f} vs {b['rate']:,.0f} images/s{rounds}"


def evaluate_targets(rows: Sequence[dict[str, Any]], backends: Sequence[str], latency_ms: float) -> list[dict]:
    """The issue's targets, each met / missed with its numbers, or not measured and why.

    (a) remote at 20 ms per open: shards >= 10x the folder, same backend; (b) warm: shards
    >= the folder (0.95 allowed for noise); (c) warm: the raw cache >= 5x DataLoader +
    PIL + transforms.v2.
    """
    by = {(r["condition"], r["name"]): r for r in rows}
    out = []
    # The shard formats this run read (a format --formats left out is no target of it, not
    # "not measured"); all of them when it read none, so the shard targets still show.
    shards = [f for f in SHARDS if any(str(r["name"]).endswith(f"/{f}") for r in rows)] or list(SHARDS)

    def add(target: str, condition: str, name: str, over: str, threshold: float) -> None:
        value, detail = _ratio(by, condition, name, over)
        status = "not measured" if value is None else ("met" if value >= threshold else "missed")
        out.append({"target": target, "contender": name, "versus": over, "condition": condition,
                    "ratio": value, "threshold": threshold, "status": status, "detail": detail})

    for backend in backends:
        for fmt in shards:
            remote = f"(a) remote {latency_ms:g} ms/open: shards >= 10x folder"
            if latency_ms != 20:
                remote += " (target set at 20 ms)"
            add(remote, "remote", f"{backend}/{fmt}", f"{backend}/folder", 10.0)
    for backend in backends:
        for fmt in shards:
            add("(b) warm: shards >= folder (0.95 for noise)", "warm", f"{backend}/{fmt}", f"{backend}/folder", 0.95)
    for backend in backends:
        add("(c) warm: raw cache >= 5x DataLoader+PIL", "warm", f"{backend}/raw", BASELINE, 5.0)
    return out


def run(args: argparse.Namespace) -> int:
    """Run the suite, print the tables and the targets, write JSON + Markdown (+ figure)."""
    from gpufeed.backends import dali_installed, resolve_device
    from gpufeed.datasets.images import default_image_dataset
    from gpufeed.machine import cuda_available, usable_cpus

    # The device and the backends before the data: `--device cuda` without a GPU, or a backend
    # not here, is refused before the default set is generated or a tree is scanned.
    device = str(resolve_device(args.device))
    workers = args.workers or usable_cpus()
    bandwidth = args.bandwidth_mb_s or None
    backends = ["torch-cpu"]
    if dali_installed():
        backends.append("dali-cpu")
        if cuda_available() and device.startswith("cuda"):
            backends.append("dali-gpu")
    if cuda_available() and device.startswith("cuda"):
        backends.append("torch-gpu")
    if args.backends:
        absent = [b for b in args.backends if b not in backends]
        if absent:
            raise ValueError(f"--backends {' '.join(absent)}: not available here (DALI installed: "
                             f"{dali_installed()}, device {device}); available: {', '.join(backends)}")
        backends = [b for b in backends if b in args.backends]
    formats = list(args.formats or FORMATS)
    readers = [f for f in formats if f.endswith(READER)]
    if args.formats and readers and not any(b.startswith("dali") for b in backends):
        raise ValueError(f"--formats {' '.join(readers)}: DALI's own readers run on the DALI backends only, and "
                         f"none runs here (backends: {', '.join(backends)})")
    root = Path(args.data) if args.data else default_image_dataset(args.images)
    samples = clean_image_tree(root)
    files, classes = len(samples), len(samples.classes)
    nbytes = sum(os.path.getsize(p) for p in samples.paths)

    cache_check = page_cache_check(samples.paths)
    conditions = list(args.storage or [c for c in CONDITIONS if c != "cold" or cache_check["works"]])
    cold_note = (
        f"dropping pages works here ({cache_check['method']}: {100 * (cache_check['resident_warm'] or 0):.0f}% "
        f"resident warm, {100 * (cache_check['resident_dropped'] or 0):.0f}% after the drop; a cold read of "
        f"{cache_check['files']} files took {cache_check['slowdown']:.1f}x the warm read)"
        if cache_check["works"] and cache_check["method"] == "mincore" else
        f"dropping pages works here (by read time: {cache_check['slowdown']:.1f}x slower cold)"
        if cache_check["works"] else
        "**this filesystem ignores posix_fadvise(DONTNEED)**: 'cold' rows are warm reads"
        + (f" (after the drop {100 * (cache_check['resident_dropped'] or 0):.0f}% of pages stayed resident)"
           if cache_check["resident_dropped"] is not None else "")
    )
    print(f"gpufeed bench storage: {files} files ({nbytes / files / 1024:.0f} KiB mean) in {classes} classes at "
          f"{root}; train, batch {args.batch_size}, {args.size}px, {workers} workers/threads each, float32 NCHW on "
          f"{device}; conditions {', '.join(conditions)}; {cold_note}")

    conversions: dict[str, dict[str, Any]] = {}
    for fmt in CONVERTED:
        if any(f in (fmt, f"{fmt}+ram", f"{fmt}{READER}") for f in formats):
            conversions[fmt] = converted_copy(root, fmt, files=files, nbytes=nbytes, shard_size=args.shard_size,
                                              raw_size=args.raw_size, workers=workers)
    specs = {"folder": str(root), "folder+ram": str(root)}
    for fmt, conv in conversions.items():
        if "path" in conv:
            specs[fmt] = specs[f"{fmt}+ram"] = specs[f"{fmt}{READER}"] = conv["path"]

    names = contender_names(formats, backends)
    rounds: dict[tuple[str, str], list[dict[str, Any]]] = {}
    for turn in range(1, args.rounds + 1):  # contenders take turns, round after round
        for name in names:
            fmt = name.split("/")[1]
            if fmt not in specs:
                continue
            ran = [c for c in conditions if _runs_under(fmt, c)]
            if not ran:
                continue
            stage(f"[storage] {name}: {', '.join(ran)} (round {turn} of {args.rounds}) ...")
            got = run_isolated(_contender_conditions, name, ran, specs[fmt], root=str(root),
                               batch_size=args.batch_size, size=args.size, workers=workers, device=device,
                               repeats=args.repeats, open_latency_ms=args.open_latency_ms, bandwidth_mb_s=bandwidth)
            for condition in ran:
                row = next((r for r in got.get("rows", []) if r["condition"] == condition), None)
                row = row or {"error": got.get("error", "no result")}
                row.update(name=name, condition=condition)
                if "error" in row:
                    stage(f"[storage] {condition}: {name} failed: {row['error'].splitlines()[0]}")
                rounds.setdefault((condition, name), []).append(row)
    measured = {key: pool_rounds(got) for key, got in rounds.items()}
    rows: list[dict[str, Any]] = []
    for condition in conditions:  # grouped by condition, as the report shows them
        for name in names:
            fmt = name.split("/")[1]
            row = measured.get((condition, name), {"name": name, "condition": condition})
            if fmt not in specs:
                conv = conversions.get(fmt.removesuffix("+ram").removesuffix(READER), {})
                row["skipped"] = f"conversion failed: {(conv.get('error') or 'not converted').splitlines()[0]}"
            elif not _runs_under(fmt, condition):
                row["skipped"] = "not run: DALI's reader opens the files itself, no simulated store in front of it"
            rows.append(row)

    base = {r["condition"]: r for r in rows if r["name"] == BASELINE and "rate" in r}
    for r in rows:
        if "skipped" in r:
            r["verdict"] = "skipped"
        elif "rate" not in r:
            r["verdict"] = "failed"
        else:
            b = base.get(r["condition"])
            r["ratio"] = r["rate"] / b["rate"] if b else None
            r["ratio_rounds"] = spread(round_ratios(r, b)) if b else None
            r["rate_q1"], r["rate_q3"] = _iqr([r["work"] / s for s in r["seconds"]])
            r["iqr"] = f"{r['rate_q1']:.0f}–{r['rate_q3']:.0f}"
            r["verdict"] = _verify(r, files, classes, args.size)
        r["shown"] = r.get("skipped") or r["verdict"]
    targets = evaluate_targets(rows, backends, args.open_latency_ms)

    setup = {
        "data": str(root), "files": files, "classes": classes, "mean_file_kib": nbytes / files / 1024,
        "mode": "train", "batch_size": args.batch_size, "size": args.size, "workers": workers, "device": device,
        "repeats": args.repeats, "rounds": args.rounds, "conditions": conditions, "formats": formats, "backends": backends,
        "remote": {"open_latency_ms": args.open_latency_ms, "bandwidth_mb_s": bandwidth},
        "shard_size": args.shard_size, "raw_size": args.raw_size, "page_cache": cache_check,
        "baseline": f"{BASELINE}: torchvision ImageFolder (PIL) + transforms.v2 + DataLoader(num_workers={workers}, "
                    f"persistent_workers, prefetch_factor=4, pin_memory on CUDA); under remote its loader= reads "
                    f"through the same SimulatedRemote",
    }
    summary = _markdown(rows, targets, conversions, setup, cold_note)
    print(summary)
    ratios = {f"{r['condition']}: {r['name']}": r["ratio"] for r in rows
              if r.get("ratio") and r["name"] != BASELINE}
    payload = {"setup": setup, "rows": rows, "targets": targets, "conversions": conversions,
               "ratio_to_baseline": ratios, "headline": _headline(targets, rows)}
    json_path, md_path = write_results("storage", payload, summary, args.out)
    print(results_line(json_path))  # the JSON, the Markdown and the figures
    return 0 if all(r["verdict"] in ("ok", "skipped") for r in rows) else 1


def _headline(targets: Sequence[dict], rows: Sequence[dict]) -> dict[str, Any]:
    """What ``gpufeed bench all``'s summary shows: the targets met, and the best remote ratio."""
    measured = [t for t in targets if t["status"] != "not measured"]
    met = sum(t["status"] == "met" for t in measured)
    remote = [t for t in measured if t["condition"] == "remote"]
    if remote:
        best = max(remote, key=lambda t: t["ratio"])
        what, ratio = f"remote: {best['contender']} vs {best['versus']}", best["ratio"]
    else:
        kit = [r for r in rows if r.get("ratio") and r["name"] != BASELINE and r["condition"] == "warm"]
        best_row = max(kit, key=lambda r: r["ratio"]) if kit else None
        what = f"warm: {best_row['name']} vs {BASELINE}" if best_row else "no kit contender ran"
        ratio = best_row["ratio"] if best_row else None
    return {"what": what, "ratio": ratio, "detail": f"targets met {met} of {len(measured)} measured "
                                                    f"({len(targets) - len(measured)} not measured)"}


def _markdown(rows: Sequence[dict], targets: Sequence[dict], conversions: dict[str, dict], setup: dict,
              cold_note: str) -> str:
    remote = setup["remote"]
    bw = f"{remote['bandwidth_mb_s']:g} MB/s per reader" if remote["bandwidth_mb_s"] else "no bandwidth cap"
    # Only the conditions this run measured are described (a warm-only run had described
    # cold and remote too).
    described = {
        "warm": "- warm: files in the page cache.",
        "cold": f"- cold: every file's pages dropped before each timed epoch; {cold_note}. DALI prefetches the "
                "next epoch's first batches as an epoch ends, before the drop, so a few of its reads per epoch "
                "are warm.",
        "remote": f"- remote: SimulatedRemote, {remote['open_latency_ms']:g} ms per open, {bw}, for every "
                  "contender (the baseline's ImageFolder loader reads through it too); opens and MB per epoch "
                  "summed over workers/threads. Shard handles are closed between epochs, so every epoch pays one "
                  "open per shard per reader (the raw cache maps its one file once per reader for the whole run; "
                  "a RAM cache pays its opens once, in its setup time).",
    }
    parts = [
        f"train, {setup['files']} images ({setup['mean_file_kib']:.0f} KiB mean) in {setup['classes']} classes, "
        f"batch {setup['batch_size']}, {setup['size']}px, {setup['workers']} workers/threads each, float32 "
        f"normalised NCHW on {setup['device']}; {rounds_text(setup.get('rounds', 1), setup['repeats'])} (the "
        f"untimed one checked); IQR of the per-epoch rates. Ratios are to `{BASELINE}` under the same condition.",
        "\n".join(described[c] for c in setup["conditions"] if c in described),
    ]
    columns = [("name", "contender"), ("rate", "images/s (median)"), ("iqr", "IQR"), ("ratio", "× torch-pil"),
               ("ratio_rounds", "× per round"), ("setup_s", "setup s"), ("shown", "output check")]
    for condition in setup["conditions"]:
        cond_rows = [r for r in rows if r["condition"] == condition]
        cols = columns[:-1] + ([("opens_per_epoch", "opens/epoch"), ("mb_per_epoch", "MB/epoch")]
                               if condition == "remote" else []) + columns[-1:]
        parts.append(f"### {condition}\n\n{markdown_table(cond_rows, cols)}")
    parts.append("### Targets\n\n" + markdown_table(
        targets, [("target", "target"), ("contender", "contender"), ("versus", "versus"), ("ratio", "ratio"),
                  ("status", "status"), ("detail", "numbers")]))
    if conversions:
        conv_rows = [{"format": f, "seconds": c.get("seconds"), "cached": c.get("cached"),
                      "shards": (c.get("report") or {}).get("shards"),
                      "where": c.get("path") or (c.get("error") or "").splitlines()[0]} for f, c in conversions.items()]
        parts.append("### Conversions (once, untimed by the rows above)\n\n" + markdown_table(
            conv_rows, [("format", "format"), ("seconds", "convert s"), ("shards", "files"), ("cached", "reused"),
                        ("where", "folder")]))
    parts.append("Contenders: `torch-pil/folder` is the baseline (DataLoader + PIL + transforms.v2 over the "
                 "folder); `<backend>/<format>` is the kit's `classification_loader` on that backend. Formats:\n"
                 + "\n".join(f"- `{f}`: {FORMATS[f]}" for f in setup["formats"]))
    return "\n\n".join(parts)

