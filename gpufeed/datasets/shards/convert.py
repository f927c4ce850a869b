"""``gpufeed convert``: an image folder or file list into WebDataset shards, TFRecord
shards or a pre-decoded raw cache.

Every image is checked once, here, by the strict decoder the torch loader uses (a JPEG
whose middle is corrupt decodes to garbage in lenient decoders, and fails here), so the
converted dataset holds only images that decode; the bad ones are listed in the report.
Samples are shuffled across shards before writing (WebDataset-style readers shuffle
shards and then only within a buffer, so a class-sorted folder written in order would
give class-sorted batches).

A conversion that stops (killed, a full disk) is re-run with the same arguments and goes
on from the last complete shard: shards are written as ``NAME.partial`` and renamed when
complete, and a progress record (``.gpufeed-convert.json``) lists the complete ones.
"""

from __future__ import annotations

import hashlib
import json
import multiprocessing
import os
import re
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from concurrent.futures import ProcessPoolExecutor
from concurrent.futures.process import BrokenProcessPool
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

from gpufeed.datasets.image_bytes import (
    image_format,
    jpeg_without_stray_bytes,
    png_text_beyond_pil,
    png_without_bad_ancillary_chunks,
    png_without_text,
    undecodable_reason,
    written_as_png,
)
from gpufeed.datasets.shards import MANIFEST, PROGRESS_FILE
from gpufeed.machine import usable_cpus, worker_start_method
from gpufeed.pipelines.sources import SampleList, read_file_list, scan_image_folder

if TYPE_CHECKING:  # torch is imported in the worker processes that decode, not at import
    import torch

#: The formats :func:`convert` writes.
FORMATS = ("webdataset", "tfrecord", "raw")

_SUFFIX = {"webdataset": ".tar", "tfrecord": ".tfrecord"}


@dataclass
class ConvertReport:
    """What a conversion did.

    Attributes:
        samples_in: samples in the source.
        written: samples written (``written + len(skipped) == samples_in``).
        skipped: ``(name, reason)`` of each sample left out, in source order.
        shards: files written: the shards, or a raw cache's pixel array and labels (2).
        seconds: wall time of this run (a resumed run counts only itself).
        dst: the output folder.
        format: ``"webdataset"``, ``"tfrecord"`` or ``"raw"``.
        already_complete: ``dst`` held this whole conversion before this run, which wrote
            nothing (``written``, ``skipped`` and ``shards`` are then the counts of the
            run that made it).
        already_written: of ``written``, the samples ``dst`` held before this run (a
            resumed conversion's complete shards, or raw images already stored).
        written_now: of ``written``, the samples this run wrote
            (``already_written + written_now == written``).

    ``written``, ``skipped`` and ``shards`` always describe the whole conversion in
    ``dst``, however many runs it took.
    """

    samples_in: int
    written: int
    skipped: list[tuple[str, str]] = field(default_factory=list)
    shards: int = 0
    seconds: float = 0.0
    dst: str = ""
    format: str = ""
    already_complete: bool = False
    already_written: int = 0
    written_now: int | None = None  # None: written - already_written

    def __post_init__(self) -> None:
        if self.written_now is None:
            self.written_now = self.written - self.already_written

    def summary(self, show: int = 5) -> str:
        """A few lines for a terminal: counts, the first ``show`` skipped files, shards, time;
        for a conversion that was already complete, that ``dst`` holds it, with its counts."""
        files = f"{self.shards} {'cache file(s)' if self.format == 'raw' else 'shard(s)'}"
        if self.already_complete:
            lines = [f"{self.dst} already holds this conversion ({self.format}) of {self.samples_in} samples: "
                     f"{self.written} written, {len(self.skipped)} skipped, {files}; nothing to do"]
        else:
            written = (f"{self.written} written ({self.already_written} already there, {self.written_now} now)"
                       if self.already_written else f"{self.written} written")
            lines = [f"converted {self.samples_in} samples into {self.dst} ({self.format}): "
                     f"{written}, {len(self.skipped)} skipped, {files}, {self.seconds:.1f} s"]
        lines += [f"  skipped {name}: {reason}" for name, reason in self.skipped[:show]]
        if len(self.skipped) > show:
            lines.append(f"  ... and {len(self.skipped) - show} more")
        return "\n".join(lines)


def parse_size(text: str | int) -> int:
    """Bytes from ``"256MB"``, ``"1.5GiB"``, ``"4096"`` (KB/MB/GB are powers of 1000, KiB/MiB/GiB of 1024).

    Raises:
        ValueError: not a size.

    Example:
        >>> parse_size("256MB"), parse_size("1KiB"), parse_size(10)
        (256000000, 1024, 10)
    """
    if isinstance(text, int):
        return text
    m = re.fullmatch(r"\s*(\d+(?:\.\d*)?|\.\d+)\s*([kmgt]?)(i?)b?\s*", str(text).lower())
    if m is None:
        raise ValueError(f"not a size: {text!r} (e.g. 256MB, 1GiB, 4096)")
    power = " kmgt".index(m.group(2) or " ")
    return int(float(m.group(1)) * (1024 if m.group(3) else 1000) ** power)


def open_input(src: str | os.PathLike[str]) -> SampleList:
    """The samples of ``src``: an ImageFolder tree (a folder) or a ``path label`` file list
    (a file; paths relative to its folder).

    Raises:
        FileNotFoundError: ``src`` does not exist.
    """
    src = Path(src)
    if not src.exists():
        raise FileNotFoundError(f"convert: source {src} does not exist")
    return read_file_list(src) if src.is_file() else scan_image_folder(src)


def _contents_digest(paths: list[str]) -> str:
    """A digest of the source files' sizes and modification times: the source's own
    fingerprint names the files and labels only, so a re-run after an image was replaced
    (or a bad one repaired) said "nothing to do" and kept the old bytes."""
    digest = hashlib.sha1()
    for path in paths:
        stat = os.stat(path)
        digest.update(f"{stat.st_size}:{stat.st_mtime_ns}\n".encode())
    return digest.hexdigest()


def convert(
    src: str | os.PathLike[str],
    dst: str | os.PathLike[str],
    *,
    format: str,  # noqa: A002 - the CLI's word for it
    shard_size: int | str = 256 * 2**20,
    seed: int = 0,
    shuffle: bool = True,
    raw_size: int = 256,
    raw_mode: str = "crop",
    workers: int | None = None,
    progress: bool = True,
    on_shard: Callable[[int, str], None] | None = None,
) -> ConvertReport:
    """Convert an image folder or file list into shards or a raw cache.

    Args:
        src: an ImageFolder tree (``src/<class>/<image>``) or a ``path label`` file list.
        dst: the output folder (created; must be empty, or hold a conversion of the same
            source with the same settings, which is then resumed).
        format: ``"webdataset"`` (``shard-NNNNNN.tar`` with ``KEY.jpg`` + ``KEY.cls``),
            ``"tfrecord"`` (``shard-NNNNNN.tfrecord`` of ``tf.train.Example``) or ``"raw"``
            (pixels resized to ``raw_size``; needs :mod:`gpufeed.datasets.shards.raw`).
        shard_size: target shard size in bytes (or ``"256MB"``); a shard is closed before a
            sample would take it past the target (a single sample larger than the target
            gets a shard of its own).
        seed: the seed of the pre-shuffle.
        shuffle: shuffle samples across shards (off: source order).
        raw_size: the raw cache's image side.
        raw_mode: ``"crop"`` (the shorter side resized to ``raw_size``, the centre square
            kept) or ``"pad"`` (the longer side to ``raw_size``, nothing cut, each image's
            true size kept beside it): see :func:`~gpufeed.datasets.shards.raw.fit_image`.
        workers: decoding processes (default: all cores; 0 or 1: in this process).
        progress: show a progress bar (a tqdm bar in a terminal, lines in a log).
        on_shard: shard formats: called ``on_shard(k, path)`` after shard ``k`` is complete and recorded
            (raising from it stops the conversion there, resumably).

    Returns:
        A :class:`ConvertReport`; ``dst/gpufeed.json`` holds the manifest.

    Raises:
        ValueError: an unknown format, a bad size, ``dst`` inside the ``src`` folder, or
            ``dst`` holding other files or a conversion with other settings.
        FileNotFoundError: ``src`` does not exist.

    Example:
        >>> report = convert("data/train", "data/train-wds", format="webdataset")  # doctest: +SKIP
        >>> print(report.summary())  # doctest: +SKIP
    """
    if format not in FORMATS:
        raise ValueError(f"format must be one of {', '.join(FORMATS)}, got {format!r}")
    shard_size = parse_size(shard_size)
    if shard_size < 1:
        raise ValueError(f"shard_size must be > 0, got {shard_size}")
    if raw_size < 1:
        raise ValueError(f"raw_size must be > 0, got {raw_size}")
    if raw_mode not in ("crop", "pad"):
        raise ValueError(f"raw_mode must be 'crop' or 'pad', got {raw_mode!r}")
    if Path(src).is_dir() and Path(dst).resolve().is_relative_to(Path(src).resolve()):
        # Written there, the output becomes one more class folder (or stray files) of the
        # source for every later reader: a loader on SRC saw a fifth, empty class.
        raise ValueError(f"convert: the output folder {dst} is inside the source tree {src}: write it "
                         "elsewhere (e.g. beside it), or every later reader of the source sees it as a class")
    start = time.perf_counter()
    source = open_input(src)
    n = len(source)
    order = np.random.default_rng(seed).permutation(n) if shuffle else np.arange(n)
    dst = Path(dst)
    settings = {"format": format, "seed": int(seed), "shuffle": bool(shuffle),
                "source": source.fingerprint()["digest"], "samples": n, "contents": _contents_digest(source.paths)}
    if format == "raw":
        settings["raw_size"] = int(raw_size)
        if raw_mode != "crop":  # a crop cache's settings stay as they were recorded before the option
            settings["raw_mode"] = raw_mode
    else:
        settings["shard_size"] = int(shard_size)
    record = _Progress.open(dst, settings)
    was_complete = bool(record.data.get("complete"))
    workers = usable_cpus() if workers is None else max(0, int(workers))
    if format == "raw":
        written_now = _convert_raw(source, order, dst, record, raw_size, raw_mode, workers, progress)
    else:
        written_now = _convert_shards(source, order, dst, record, format, shard_size, workers, progress, on_shard)
    manifest = {"format": format, "samples": record.written, "classes": list(source.classes),
                "files": record.files, "seed": int(seed), "shuffle": bool(shuffle),
                "skipped": len(record.skipped), "source": os.path.abspath(src)}
    if format == "raw":
        manifest.update(record.data.get("raw_manifest", {}))
    else:
        manifest["shard_size"] = int(shard_size)
        if "counts" in record.data:  # samples per shard: the loaders check each shard against it
            manifest["counts"] = record.data["counts"]
    _write_json(dst / MANIFEST, manifest)
    record.data["complete"] = True
    record.save()
    skipped = sorted(record.skipped, key=lambda s: s[2])
    return ConvertReport(samples_in=n, written=record.written, skipped=[(p, r) for p, r, _ in skipped],
                         shards=len(record.files), seconds=time.perf_counter() - start, dst=str(dst),
                         format=format, already_complete=was_complete and written_now == 0,
                         already_written=record.written - written_now, written_now=written_now)


# -- checking and decoding, in worker processes ----------------------------------------

def check_image(data: np.ndarray) -> str | None:
    """Why ``data`` is not an image the loaders can decode, or None: the loaders' cheap
    byte checks, then a full decode by the torch loader's decoder (``decode_rgb``), in
    the loaders' words.

    Stricter than the loaders in one way: libjpeg only *warns* about corrupt
    entropy-coded data ("Corrupt JPEG data: ...", printed on stderr) and returns an image
    with garbage in it, which every decoder (torchvision, PIL, DALI) then passes on. The
    warning is caught here and the file skipped, so no garbage goes into a converted set.

    Args:
        data: the file's bytes (1-D uint8).

    Returns:
        The reason, or None for a good image.
    """
    return decode_checked(data)[0]


def decode_checked(data: np.ndarray) -> tuple[str | None, torch.Tensor | None]:
    """``(None, (H, W, 3) uint8 pixels)`` for a good image, ``(reason, None)`` for a bad
    one, as :func:`check_image` judges it: each image is decoded once, whether it is only
    checked or also kept (the raw cache)."""
    reason = undecodable_reason(data)
    if reason is not None:
        return reason, None
    # Stray bytes between a JPEG's header segments (some cameras and editors write them)
    # make libjpeg warn "Corrupt JPEG data: N extraneous bytes before marker" about an
    # intact image: the loaders yield such a file (the DALI feed drops the bytes), so the
    # check judges it without them, as :func:`_load_and_check` writes it.
    return _decode_cleaned(_without_stray_bytes(data))


def _decode_cleaned(data: np.ndarray) -> tuple[str | None, torch.Tensor | None]:
    """:func:`decode_checked` of bytes already through :func:`_without_stray_bytes` and
    :func:`~gpufeed.datasets.image_bytes.undecodable_reason`: the decode alone."""
    from gpufeed.pipelines.torch_loader import DECODE_ERRORS, decode_failure, decode_rgb

    try:
        if image_format(data) != "jpeg":
            return None, decode_rgb(data)
        image, warning = _with_libjpeg_warning(decode_rgb, data)
    except DECODE_ERRORS as exc:
        return decode_failure(exc), None
    return (None, image) if warning is None else (f"could not decode: {warning}", None)


_LIBJPEG_WARNING = re.compile(r"(Corrupt JPEG data[^\n]*|Premature end of JPEG file|Invalid SOS parameters[^\n]*)")


def _with_libjpeg_warning(decode: Callable[[np.ndarray], torch.Tensor], data: np.ndarray,
                          ) -> tuple[torch.Tensor, str | None]:
    """Run ``decode(data)`` with file descriptor 2 redirected; return what it decoded and
    libjpeg's corrupt-data warning if it printed one (other output is passed on to stderr).

    The C library writes to the descriptor directly, so only a descriptor-level redirect
    sees it; conversions decode one image at a time per process, so nothing else is
    writing there meanwhile.
    """
    sys.stderr.flush()
    saved = os.dup(2)
    with tempfile.TemporaryFile() as log:
        os.dup2(log.fileno(), 2)
        try:
            image = decode(data)
        finally:
            os.dup2(saved, 2)
            os.close(saved)
        log.seek(0)
        text = log.read().decode("utf-8", "replace")
    found = _LIBJPEG_WARNING.search(text)
    if found is None and text:
        sys.stderr.write(text)
    return image, None if found is None else found.group(1)


def _without_stray_bytes(data: np.ndarray) -> np.ndarray:
    """The bytes without what decoders pass over and some readers refuse: a JPEG's stray
    bytes between header segments
    (:func:`~gpufeed.datasets.image_bytes.jpeg_without_stray_bytes`: DALI's parser refuses
    them), a PNG's ancillary chunks with a bad CRC
    (:func:`~gpufeed.datasets.image_bytes.png_without_bad_ancillary_chunks`: PIL refuses
    them), a PNG's text when PIL will not inflate it
    (:func:`~gpufeed.datasets.image_bytes.png_text_beyond_pil`); as a writable array
    (torch.from_numpy warns on a read-only one), ``data`` itself when nothing is dropped."""
    cleaned = png_without_bad_ancillary_chunks(jpeg_without_stray_bytes(data))
    if png_text_beyond_pil(cleaned):
        cleaned = png_without_text(cleaned)
    return data if cleaned is data else np.array(np.frombuffer(cleaned, dtype=np.uint8))


def _read(path: str) -> tuple[str | None, np.ndarray | None]:
    try:
        return None, np.fromfile(path, dtype=np.uint8)
    except OSError as exc:
        return f"could not read: {exc.strerror or exc}", None


def _load_and_check(path: str) -> tuple[str | None, bytes | None]:
    """Worker task: ``(reason, None)`` for a bad file, ``(None, its bytes)`` for a good one
    (a JPEG without the stray bytes between its header segments, which libjpeg passes
    over and DALI's parser, under ``fn.readers.*`` + ``fn.decoders.image``, refuses: the
    same image, readable by every reader of the shards)."""
    reason, data = _read(path)
    if reason is not None:
        return reason, None
    data = _without_stray_bytes(data)  # once: decode_checked would clean the cleaned bytes again
    reason = undecodable_reason(data)
    if reason is None:
        reason, image = _decode_cleaned(data)
    if reason is not None:
        return reason, None
    if written_as_png(data):
        # A BMP, an APNG, a TIFF DALI's decoder fails on or decodes to other pixels (1-bit,
        # 16-bit with alpha, CIELab, LZMA, an Orientation tag ...), or a 16-bit PNG or TIFF
        # (PIL-based readers clip it): written as a PNG of the pixels the loaders give, so
        # DALI's own readers (dali_iterator()), TensorFlow and the webdataset library see them.
        return None, _png(image.numpy())
    return None, data.tobytes()


def _png(rgb: np.ndarray) -> bytes:
    import io

    from PIL import Image

    out = io.BytesIO()
    Image.fromarray(rgb).save(out, format="PNG", compress_level=1)
    return out.getvalue()


def _decode_fitted(task: tuple[str, int, str]) -> tuple[str | None, np.ndarray | None]:
    """Worker task for the raw cache: the image decoded and fitted to ``size`` (so only
    the small square crosses the process boundary)."""
    import torch

    from gpufeed.datasets.shards.raw import fit_image

    path, size, mode = task
    reason, data = _read(path)
    if reason is None:
        reason, image = decode_checked(data)
    if reason is not None:
        return reason, None
    with torch.no_grad():
        return None, fit_image(image, size, mode).contiguous().numpy()


def _worker_init(parent: int) -> None:
    import torch

    torch.set_num_threads(1)  # one decode per process; the pool is the parallelism
    _exit_with(parent)


def _exit_with(parent: int) -> None:
    """End this worker process when the converting process ``parent`` is gone.

    A converting process killed outright (SIGKILL: the OOM killer, ``kill -9``, a
    scheduler's hard stop) cannot stop its pool, whose workers then wait for work forever,
    each holding its decoder's memory. A daemon thread looks once a second: when this
    process's parent changes (it was the converting process, or the forkserver, which ends
    with it) or ``parent`` is no longer there, it exits. Plain POSIX calls, so the same on
    every platform that runs the pool.
    """
    import threading

    first = os.getppid()

    def gone() -> bool:
        if os.getppid() != first:
            return True
        try:
            os.kill(parent, 0)
        except ProcessLookupError:
            return True
        except OSError:
            pass  # alive, under another user (a reused id, in theory): keep going
        return False

    def watch() -> None:
        while not gone():
            time.sleep(1.0)
        os._exit(1)

    threading.Thread(target=watch, name="gpufeed-convert-parent-watch", daemon=True).start()


def _map_ordered(fn: Callable, tasks: list, workers: int) -> Iterator:
    """``fn`` over ``tasks``, results in order, in a process pool when ``workers > 1``."""
    if workers <= 1 or len(tasks) < 2:
        yield from map(fn, tasks)
        return
    # The workers only decode, with torch's single-threaded codecs. An executor, not a
    # multiprocessing.Pool: a worker that dies (a decoder crash, the OOM killer) breaks the
    # executor, which raises, where a Pool waits forever for the lost results.
    pool = ProcessPoolExecutor(workers, mp_context=multiprocessing.get_context(worker_start_method()),
                               initializer=_worker_init, initargs=(os.getpid(),))
    try:
        yield from pool.map(fn, tasks, chunksize=max(1, min(16, len(tasks) // (workers * 8))))
    except BrokenProcessPool as exc:
        raise RuntimeError(
            "convert: a decoding process died (a file crashed its decoder, or memory ran out); the "
            "complete shards are kept: re-run the same command to go on") from exc
    finally:
        pool.shutdown(cancel_futures=True)  # a stopped conversion does not decode the rest first


def _progress(items: Iterator, total: int, desc: str, show: bool) -> Iterator:
    if not show or not total:  # nothing to do (a finished conversion run again): no lines
        return items
    from gpufeed.progress import progress

    return progress(items, desc=desc, total=total, unit="img")


# -- the progress record --------------------------------------------------------------

class _Progress:
    """The progress record of a conversion (``dst/.gpufeed-convert.json``): its settings,
    the complete shards, the next position in the shuffled order, the samples skipped."""

    def __init__(self, dst: Path, data: dict) -> None:
        self.dst, self.data = dst, data

    @classmethod
    def open(cls, dst: Path, settings: dict) -> _Progress:
        path = dst / PROGRESS_FILE
        if path.is_file():
            try:
                data = json.loads(path.read_text())
            except json.JSONDecodeError:
                data = None
            saved = data.get("settings") if data is not None else None
            if isinstance(saved, dict) and ("contents" not in saved or not data.get("complete")):
                # The files' contents matter to a finished conversion, which would keep old
                # bytes; an unfinished one resumes and checks each file as it comes (one
                # broken since is skipped), and records the contents it finishes with. Records
                # made before contents were kept have none.
                saved = data["settings"] = {**saved, "contents": settings.get("contents")}
            if saved != settings and {p.name for p in dst.iterdir()} == {PROGRESS_FILE}:
                # Nothing written under the other settings (a run whose images all failed to
                # decode, since repaired): nothing to resume or lose, so start afresh.
                data = None
            elif data is not None and saved != settings:
                saved = saved if isinstance(saved, dict) else {}
                if {k for k in saved.keys() | settings.keys() if saved.get(k) != settings.get(k)} == {"contents"}:
                    raise ValueError(f"{dst}: the source's files changed since this conversion (their sizes or "
                                     "modification times; in " f"{path}): convert into an emptied folder to take "
                                     "the changes in")
                differ = "; ".join(f"{k}: saved {saved.get(k)!r}, now {settings.get(k)!r}"
                                   for k in sorted(saved.keys() | settings.keys()) if saved.get(k) != settings.get(k))
                raise ValueError(f"{dst} holds a conversion with other settings ({differ}; in {path}); re-run with "
                                 f"those to resume, or convert into another (or an emptied) folder")
            if data is not None and all((dst / f).is_file() for f in data["files"]):
                return cls(dst, data)
        elif dst.is_dir() and any(dst.iterdir()):
            raise ValueError(f"convert: output folder {dst} is not empty and holds no conversion to resume")
        dst.mkdir(parents=True, exist_ok=True)
        progress = cls(dst, {"settings": settings, "files": [], "next": 0, "written": 0, "skipped": []})
        progress.save()
        return progress

    @property
    def files(self) -> list[str]:
        return self.data["files"]

    @property
    def written(self) -> int:
        return self.data["written"]

    @property
    def skipped(self) -> list[list]:
        return self.data["skipped"]  # [name, reason, source index]

    def save(self) -> None:
        _write_json(self.dst / PROGRESS_FILE, self.data)


def _write_json(path: Path, data: dict) -> None:
    """Write atomically (a temporary file renamed over the old one): a kill mid-write
    leaves the previous version, never half a file."""
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(json.dumps(data, indent=1))
    os.replace(tmp, path)


# -- shards ---------------------------------------------------------------------------

def _convert_shards(source: SampleList, order: np.ndarray, dst: Path, record: _Progress, fmt: str,
                    shard_size: int, workers: int, show: bool,
                    on_shard: Callable[[int, str], None] | None) -> int:
    """Write the shards from the record's next position on; return the samples written."""
    if fmt == "webdataset":
        from gpufeed.datasets.shards.webdataset import TarShardWriter as Writer
    else:
        from gpufeed.datasets.shards.tfrecord import TFRecordWriter as Writer
    for stale in dst.glob("*.partial"):  # an interrupted shard: rewritten from its first sample
        stale.unlink()
    first = record.data["next"]
    before = record.written
    if not record.files:
        record.data.setdefault("counts", [])  # a record from before counts were kept has none
    todo = [int(i) for i in order[first:]]
    if not todo:
        return 0
    # Keep every skip of a position before `next` (those shards are complete); a skip after
    # it belongs to the interrupted shard, which is redone.
    position_of = {int(i): p for p, i in enumerate(order)}
    record.data["skipped"] = [s for s in record.skipped if position_of[s[2]] < first]
    results = _map_ordered(_load_and_check, [source.paths[i] for i in todo], workers)
    results = _progress(results, len(todo), f"converting to {fmt} in {dst}", show)
    writer = None
    pending: list[list] = []  # skips in the open shard, recorded when it completes
    shard = len(record.files)

    def finish(next_position: int) -> None:
        nonlocal writer, shard, pending
        name = f"shard-{shard:06d}{_SUFFIX[fmt]}"
        writer.close()
        # The index goes first: a renamed shard always has its index beside it.
        os.replace(dst / f"{name}.idx.partial", dst / f"{name}.idx")
        os.replace(dst / f"{name}.partial", dst / name)
        record.files.append(name)
        if "counts" in record.data:
            record.data["counts"].append(writer.count)
        record.data["written"] += writer.count
        record.data["next"] = next_position
        record.skipped.extend(pending)
        record.save()
        writer, pending = None, []
        shard += 1
        if on_shard is not None:
            on_shard(shard - 1, str(dst / name))

    for position, i, (reason, data) in zip(range(first, len(order)), todo, results, strict=True):
        if reason is not None:
            pending.append([source.paths[i], reason, i])
            continue
        # The file's growth, exactly for a tar (the image's header and data padded to 512,
        # the .cls member's header and padded digits, the end blocks), bounded from above for
        # a TFRecord (framing + the Example's fields), so shards stay under target.
        cost = (512 + len(data) + -len(data) % 512 + 2 * 512 + 2 * 512 if fmt == "webdataset"
                else len(data) + 160)
        if writer is not None and writer.count and writer.nbytes + cost > shard_size:
            finish(position)
        if writer is None:
            name = f"shard-{shard:06d}{_SUFFIX[fmt]}"
            writer = Writer(dst / f"{name}.partial", dst / f"{name}.idx.partial")
        writer.add(f"{position:09d}", data, _extension(source.paths[i], data), source.labels[i])
    if writer is not None:
        finish(len(order))
    else:  # only skips since the last shard: nothing more to write
        record.skipped.extend(pending)
        record.data["next"] = len(order)
        record.save()
    if not record.written:
        raise ValueError(f"convert: no image in {len(order)} samples decodes")
    return record.written - before


#: The member extensions that name each format (the first: for a file named otherwise).
_EXTENSIONS = {"jpeg": ("jpg",), "png": ("png",), "webp": ("webp",), "tiff": ("tiff", "tif"), "bmp": ("bmp",),
               "pnm": ("ppm", "pgm")}


def _extension(path: str, data: bytes) -> str:
    """The WebDataset member extension (and TFRecord ``image/format``) of an image: by its
    bytes (a JPEG named ``x.png`` is ``jpg``), the file's own where it names that format
    (``tif`` stays ``tif``), ``jpg`` for any JPEG."""
    ext = os.path.splitext(path)[1].lower().lstrip(".")
    ext = "jpg" if ext in ("jpg", "jpeg", "jpe") else ext
    names = _EXTENSIONS.get(image_format(data[:12]))
    return ext if names is None or ext in names else names[0]


# -- raw --------------------------------------------------------------------------------

def _convert_raw(source: SampleList, order: np.ndarray, dst: Path, record: _Progress, size: int, mode: str,
                 workers: int, show: bool) -> int:
    """Two passes: check every image (the raw cache's sample count is fixed when it is
    created, so the bad ones must be known first), then decode and store the good ones
    (:class:`~gpufeed.datasets.shards.raw.RawWriter` resumes by itself); return the
    samples stored by this run.

    A file that stops decoding between the passes (changed by someone else, or before a
    resumed run) is skipped and reported as the shard formats do: the last images take
    the places it leaves (:func:`_leave_out`), so the others stay where they are.
    """
    from gpufeed.datasets.shards.raw import RawWriter

    if "good" not in record.data:
        results = _map_ordered(_load_and_check, [source.paths[int(i)] for i in order], workers)
        good, skipped = [], []
        for i, (reason, _) in zip(order, _progress(results, len(order), f"checking images for {dst}", show),
                                  strict=True):
            if reason is None:
                good.append(int(i))
            else:
                skipped.append([source.paths[int(i)], reason, int(i)])
        if not good:
            raise ValueError(f"convert: no image in {len(order)} samples decodes")
        record.data.update(good=good, skipped=skipped)
        record.save()
    if "leave_out" in record.data:  # a run stopped while leaving files out: finish that first
        _leave_out(dst, record, size, mode)
    good = record.data["good"]
    writer = RawWriter(dst, len(good), size, mode)
    todo = [k for k in range(len(good)) if not writer.done(k)]  # a resumed cache holds the others
    results = _map_ordered(_decode_fitted, [(source.paths[good[k]], size, mode) for k in todo], workers)
    import torch

    failed: list[tuple[int, str]] = []
    for k, (reason, pixels) in zip(todo, _progress(results, len(todo), f"writing raw cache {dst}", show),
                                   strict=True):
        if reason is not None:  # the file changed since the check
            failed.append((k, reason))
            continue
        writer.add(k, torch.from_numpy(pixels), source.labels[good[k]])
    if failed:
        if len(failed) == len(good):
            raise ValueError(f"convert: no image in {len(order)} samples decodes")
        lost = {k for k, _ in failed}
        keep = len(good) - len(lost)
        kept = list(good)
        # The last stored images fill the holes below `keep`: each is copied once, nothing
        # else moves, and a run stopped here redoes the same copies.
        for hole, last in zip(sorted(k for k in lost if k < keep),
                              (k for k in range(keep, len(good)) if k not in lost), strict=False):
            writer.copy(last, hole)
            kept[hole] = good[last]
        writer.flush()
        del writer  # its maps, before the files shrink
        record.data["leave_out"] = {"good": kept[:keep],
                                    "skipped": [[source.paths[good[k]], reason, good[k]] for k, reason in failed]}
        record.save()
        _leave_out(dst, record, size, mode)
        writer = RawWriter(dst, keep, size, mode)
    manifest = writer.close()
    record.data["raw_manifest"] = {key: v for key, v in manifest.items() if key not in ("samples", "classes")}
    record.data["files"] = list(manifest.get("files", []))
    record.data["written"] = len(record.data["good"])
    record.save()
    return len(todo) - len(failed)


def _leave_out(dst: Path, record: _Progress, size: int, mode: str) -> None:
    """Apply the record's ``leave_out`` plan (the images kept, in cache order, and the
    files left out): the cache shrinks to the kept ones
    (:meth:`~gpufeed.datasets.shards.raw.RawWriter.shrink`), then the record lists them.
    Both steps can be redone, so a run stopped in between finishes it next time."""
    from gpufeed.datasets.shards.raw import RawWriter

    plan = record.data["leave_out"]
    RawWriter.shrink(dst, len(plan["good"]), size, mode)
    record.data["good"] = plan["good"]
    record.skipped.extend(plan["skipped"])
    del record.data["leave_out"]
    record.save()
