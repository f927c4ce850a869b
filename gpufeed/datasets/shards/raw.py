"""The pre-decoded raw cache: every image decoded and resized once, stored as uint8 pixels
in one memory-mapped file (FFCV's raw mode; the ``.pt`` pre-processing that DataLoader
tuning guides recommend).

A loader then reads pixels instead of decoding JPEGs: the decode, usually most of a CPU
pipeline's work, is paid once at conversion. The price is disk: ``size * size * 3``
bytes per image (196 KB at 256), several times a JPEG.

Layout of a raw cache folder (written by :class:`RawWriter`, read by :class:`RawCache`):

- ``images.u8``: ``N x size x size x 3`` uint8, row-major, no header (memory-mapped);
- ``labels.npy``: ``N`` int64 labels;
- ``extents.npy`` (mode ``"pad"`` only): ``N x 2`` int32, each image's true ``(h, w)``;
- ``done.npy``: which samples were written (packed bits), so a stopped conversion resumes;
- ``raw-progress.json``: the writer's settings, so a resumed run cannot mix two sizes;
- ``gpufeed.json``: the manifest, written by the caller once :meth:`RawWriter.close`
  returned (see :data:`gpufeed.datasets.shards.MANIFEST`).
"""

from __future__ import annotations

import hashlib
import json
import os
import threading
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import BinaryIO

import numpy as np
import torch
from torchvision.transforms.v2 import functional as TF

from gpufeed.datasets.samples import SampleSource
from gpufeed.datasets.storage import LOCAL, Storage

#: The file names inside a raw cache folder.
IMAGES, LABELS, EXTENTS, DONE, PROGRESS = "images.u8", "labels.npy", "extents.npy", "done.npy", "raw-progress.json"

#: How images are fitted into the ``size x size`` square.
RAW_MODES = ("crop", "pad")


def fit_image(pixels: torch.Tensor, size: int, mode: str = "crop") -> torch.Tensor:
    """Resize one image as a raw cache stores it.

    Args:
        pixels: ``(H, W, 3)`` uint8 pixels.
        size: the stored square's side.
        mode: ``"crop"``: shorter side to ``size`` (antialiased bilinear, torchvision's
            resize), then the centre ``size x size``; ``"pad"``: longer side to ``size``
            (the shorter one ``floor(size * short / long)``, as torchvision's
            ``max_size``), nothing cut.

    Returns:
        ``(h, w, 3)`` uint8 pixels: ``size x size`` for ``"crop"``, ``h`` or ``w`` less
        than ``size`` for ``"pad"``.
    """
    h, w = int(pixels.shape[0]), int(pixels.shape[1])
    # (1, 3, H, W) channels-last: the layout torch's uint8 antialiased kernel is fast on.
    image = pixels.permute(2, 0, 1).unsqueeze(0)
    if mode == "crop":
        image = TF.center_crop(TF.resize(image, [size], antialias=True), [size, size])
    else:
        out_h, out_w = (size, max(1, int(size * w / h))) if h >= w else (max(1, int(size * h / w)), size)
        if (out_h, out_w) != (h, w):
            image = TF.resize(image, [out_h, out_w], antialias=True)
    return image[0].permute(1, 2, 0)


class RawWriter:
    """Write a raw cache folder, one sample at a time, in any order, resumably.

    Samples may be added in any order, from several threads, and added again (the last
    write wins): a conversion that stopped is re-run with the same arguments and skips
    what :meth:`done` says is written. Progress is saved (``done.npy``) only after the
    pixels it covers were flushed to disk, at most every ``flush_s`` seconds and on
    :meth:`flush` / :meth:`close`, so after a crash a re-run redoes at most those seconds.
    One writer per folder: two processes writing one folder would overwrite each other's
    progress.

    Args:
        dst: the output folder (created).
        count: the number of samples, indices ``0..count-1``.
        size: the stored square's side.
        mode: ``"crop"`` or ``"pad"`` (see :func:`fit_image`).
        classes: class names, copied into the manifest :meth:`close` returns.
        flush_s: the most seconds between two progress saves.

    Raises:
        ValueError: bad arguments, or ``dst`` holds a conversion started with another
            ``count``, ``size`` or ``mode`` (its progress file is named).

    Example:
        >>> writer = RawWriter(Path("out"), count=len(files), size=256)   # doctest: +SKIP
        >>> for i, (path, label) in enumerate(files):
        ...     if not writer.done(i):
        ...         writer.add(i, decode_rgb(read_bytes(path)), label)
        >>> manifest = writer.close()
    """

    def __init__(self, dst: Path, count: int, size: int, mode: str = "crop", *,
                 classes: Sequence[str] | None = None, flush_s: float = 5.0) -> None:
        if int(count) < 1:
            raise ValueError(f"count must be >= 1, got {count}")
        if int(size) < 1:
            raise ValueError(f"size must be >= 1, got {size}")
        if mode not in RAW_MODES:
            raise ValueError(f"mode must be one of {', '.join(RAW_MODES)}, got {mode!r}")
        self.dst, self.count, self.size, self.mode = Path(dst), int(count), int(size), mode
        self.classes = None if classes is None else [str(c) for c in classes]
        self.flush_s = flush_s
        self.dst.mkdir(parents=True, exist_ok=True)
        settings = {"count": self.count, "size": self.size, "mode": self.mode}
        progress = self.dst / PROGRESS
        resume = False
        if progress.is_file():
            try:
                before = json.loads(progress.read_text())
            except json.JSONDecodeError:
                before = None
            if before is not None and before != settings:
                raise ValueError(
                    f"{progress}: this folder holds a raw cache being written with {before}, not "
                    f"{settings}; use the same settings to resume, or another (or emptied) folder"
                )
            resume = before is not None and self._files_complete()
        file_mode = "r+" if resume else "w+"
        shape = (self.count, self.size, self.size, 3)
        self._images = np.memmap(self.dst / IMAGES, dtype=np.uint8, mode=file_mode, shape=shape)
        self._labels = np.lib.format.open_memmap(self.dst / LABELS, mode=file_mode, dtype=np.int64,
                                                 shape=(self.count,))
        self._extents = None
        if mode == "pad":
            self._extents = np.lib.format.open_memmap(self.dst / EXTENTS, mode=file_mode, dtype=np.int32,
                                                      shape=(self.count, 2))
        if resume:
            self._done = np.unpackbits(np.load(self.dst / DONE), count=self.count).astype(bool)
        else:
            self._done = np.zeros(self.count, dtype=bool)
            self._save_done()
            progress.write_text(json.dumps(settings))
        self._lock = threading.Lock()
        self._pending = 0  # samples added since the last progress save
        self._last_flush = time.monotonic()

    def _files_complete(self) -> bool:
        """Whether every file of a started conversion is there, at its full size."""
        n, s = self.count, self.size
        try:
            if os.path.getsize(self.dst / IMAGES) != n * s * s * 3:
                return False
            if np.load(self.dst / LABELS, mmap_mode="r").shape != (n,):
                return False
            if self.mode == "pad" and np.load(self.dst / EXTENTS, mmap_mode="r").shape != (n, 2):
                return False
            return np.load(self.dst / DONE).shape == ((n + 7) // 8,)
        except (OSError, ValueError):
            return False

    def done(self, index: int) -> bool:
        """Whether sample ``index`` was added (in this run or one before it)."""
        return bool(self._done[self._check_index(index)])

    def add(self, index: int, pixels: torch.Tensor | np.ndarray, label: int) -> None:
        """Resize sample ``index`` (:func:`fit_image`) and store it with its label.

        Args:
            index: the sample's position, ``0 <= index < count``.
            pixels: its decoded ``(H, W, 3)`` uint8 pixels.
            label: its class.

        Raises:
            IndexError: ``index`` is out of range.
            ValueError: ``pixels`` are not ``(H, W, 3)`` uint8, or ``label`` is negative.
        """
        index = self._check_index(index)
        if isinstance(pixels, np.ndarray):
            pixels = torch.from_numpy(np.ascontiguousarray(pixels))
        if pixels.dtype != torch.uint8 or pixels.ndim != 3 or pixels.shape[2] != 3 or min(pixels.shape[:2]) < 1:
            raise ValueError(f"sample {index}: pixels must be (H, W, 3) uint8, got "
                             f"{tuple(pixels.shape)} {pixels.dtype}")
        if int(label) < 0:
            raise ValueError(f"sample {index}: label must be >= 0, got {label}")
        fitted = fit_image(pixels, self.size, self.mode).numpy()
        h, w = fitted.shape[:2]
        row = self._images[index]
        row[:h, :w] = fitted
        if self._extents is not None:
            # Zero the margin: a re-added sample may be smaller than the one written before.
            row[h:] = 0
            row[:h, w:] = 0
            self._extents[index] = (h, w)
        self._labels[index] = int(label)
        with self._lock:
            self._done[index] = True
            self._pending += 1
            due = time.monotonic() - self._last_flush >= self.flush_s
        if due:
            self.flush()

    def copy(self, source: int, target: int) -> None:
        """Store sample ``source``'s pixels, label and extent at ``target`` too, without
        marking ``target`` written: a conversion fills the place of an image that stopped
        decoding with its last one, then :meth:`shrink` cuts the cache."""
        source, target = self._check_index(source), self._check_index(target)
        self._images[target] = self._images[source]
        self._labels[target] = self._labels[source]
        if self._extents is not None:
            self._extents[target] = self._extents[source]

    @staticmethod
    def shrink(dst: str | os.PathLike[str], count: int, size: int, mode: str = "crop") -> None:
        """Cut a cache being written (no writer open on it) to its first ``count`` samples,
        all of them written: the next :class:`RawWriter` with ``count`` resumes it, finds
        every sample done and closes. Each file is cut or rewritten (aside, then renamed),
        so a run stopped half-way does it again with the same result.

        Raises:
            ValueError: a file holds fewer than ``count`` samples.
        """
        dst, count = Path(dst), int(count)
        images = dst / IMAGES
        if os.path.getsize(images) > count * size * size * 3:
            os.truncate(images, count * size * size * 3)
        for name, width in ((LABELS, ()), *(((EXTENTS, (2,)),) if mode == "pad" else ())):
            array = np.load(dst / name, mmap_mode="r")
            if array.shape != (count, *width):
                if array.shape[0] < count:
                    raise ValueError(f"{dst / name}: {array.shape[0]} samples, fewer than the {count} kept")
                _save_aside(dst / name, lambda f, a=array: np.save(f, np.array(a[:count])))
                del array
        _save_aside(dst / DONE, lambda f: np.save(f, np.packbits(np.ones(count, dtype=bool))))
        (dst / PROGRESS).write_text(json.dumps({"count": count, "size": int(size), "mode": mode}))

    def flush(self) -> None:
        """Write the pixels to disk, then the progress that counts them."""
        with self._lock:
            done = self._done.copy()  # what is written now; later adds wait for the next flush
            self._pending = 0
            self._last_flush = time.monotonic()
        self._images.flush()
        self._labels.flush()
        if self._extents is not None:
            self._extents.flush()
        self._save_done(done)

    def _save_done(self, done: np.ndarray | None = None) -> None:
        packed = np.packbits(self._done if done is None else done)
        _save_aside(self.dst / DONE, lambda f: np.save(f, packed))

    def close(self) -> dict:
        """Flush everything and return the manifest's fields.

        Returns:
            ``{"format": "raw", "samples": N, "size": size, "mode": mode, "files": [...],
            "classes": [...]}`` (``classes`` only when given; file names relative to the
            folder), for the caller to write as ``gpufeed.json``.

        Raises:
            ValueError: some samples were never added (their count and the first few
                indices are named); the progress is saved, so adding them and closing
                again finishes the cache.
        """
        self.flush()
        missing = np.flatnonzero(~self._done)
        if len(missing):
            shown = ", ".join(map(str, missing[:5])) + (" ..." if len(missing) > 5 else "")
            raise ValueError(f"{self.dst}: {len(missing)} of {self.count} samples were never added "
                             f"(indices {shown}); add them, then close() again")
        if self.classes is not None and int(self._labels.max()) >= len(self.classes):
            raise ValueError(f"{self.dst}: label {int(self._labels.max())} has no class name "
                             f"({len(self.classes)} classes given)")
        files = [IMAGES, LABELS] + ([EXTENTS] if self._extents is not None else [])
        manifest = {"format": "raw", "samples": self.count, "size": self.size, "mode": self.mode,
                    "files": files}
        if self.classes is not None:
            manifest["classes"] = list(self.classes)
        return manifest

    def __enter__(self) -> RawWriter:
        return self

    def __exit__(self, *exc: object) -> None:
        self.flush()  # keep what was written, also when the conversion failed half-way

    def _check_index(self, index: int) -> int:
        index = int(index)
        if not 0 <= index < self.count:
            raise IndexError(f"sample index {index} out of range for {self.count} samples ({self.dst})")
        return index


def _save_aside(path: Path, write: Callable[[BinaryIO], object]) -> None:
    """``write(file)`` into a file beside ``path``, then rename it over ``path``: a crash
    mid-write leaves the old file, not a torn one."""
    tmp = path.with_name(path.name + ".tmp")
    with open(tmp, "wb") as f:
        write(f)
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)


class RawCache(SampleSource):
    """A raw cache folder as a sample source: ``(h, w, 3)`` uint8 pixels by index.

    The pixels are read through a memory map, opened lazily in each process (the source
    is pickled into DataLoader workers without it), so reads come from the page cache
    and cost no decode. Through ``storage`` a
    :class:`~gpufeed.datasets.storage.SimulatedRemote` charges one open per process and
    each read's bytes, as it does for the other formats.

    The map is opened copy-on-write: its arrays are writable (``torch.from_numpy`` of a
    read-only array warns) yet never change the file, and cost no copy while nobody
    writes into them (the loaders only read them).

    Args:
        folder: the folder :class:`RawWriter` wrote, with its ``gpufeed.json``.
        storage: how bytes are charged (local files unless told).

    Raises:
        FileNotFoundError: the manifest or a data file is missing.
        ValueError: the manifest is not a raw cache's, or a file's size disagrees with it
            (a conversion cut short); the file is named.
    """

    kind = "pixels"

    def __init__(self, folder: str | os.PathLike[str], storage: Storage = LOCAL) -> None:
        from gpufeed.datasets.shards import MANIFEST, read_manifest

        self.folder = Path(folder)
        self.storage = storage
        manifest = read_manifest(self.folder)
        where = self.folder / MANIFEST
        if manifest is None:
            raise FileNotFoundError(f"{where} does not exist: {self.folder} is not a converted raw cache")
        if manifest.get("format") != "raw":
            raise ValueError(f"{where}: format {manifest.get('format')!r} is not a raw cache")
        try:
            self.count, self.size = int(manifest["samples"]), int(manifest["size"])
            self.mode = manifest.get("mode", "crop")
        except (KeyError, TypeError, ValueError) as exc:
            raise ValueError(f"{where}: a raw cache manifest needs integer 'samples' and 'size' ({exc})") from None
        if self.mode not in RAW_MODES:
            raise ValueError(f"{where}: unknown raw mode {self.mode!r} ({', '.join(RAW_MODES)})")
        self.path = str(self.folder / IMAGES)
        self.labels = self._load(LABELS, (self.count,))
        self.extents = self._load(EXTENTS, (self.count, 2)) if self.mode == "pad" else None
        expected = self.count * self.size * self.size * 3
        try:
            got = os.path.getsize(self.path)
        except FileNotFoundError:
            raise FileNotFoundError(f"{self.path} does not exist (named by {where})") from None
        if got != expected:
            raise ValueError(f"{self.path}: {got} bytes, but {self.count} images of {self.size}x{self.size}x3 "
                             f"are {expected} (a conversion cut short?)")
        done = self.folder / DONE
        if done.is_file():
            written = int(np.unpackbits(np.load(done), count=self.count).sum())
            if written != self.count:
                raise ValueError(f"{done}: only {written} of {self.count} samples were written; "
                                 "re-run the conversion to finish it")
        classes = manifest.get("classes")
        if classes is None:
            classes = [str(k) for k in range(int(self.labels.max()) + 1)]
        self.classes = tuple(str(c) for c in classes)
        self._images: np.ndarray | None = None
        self._pid = -1

    def _load(self, name: str, shape: tuple[int, ...]) -> np.ndarray:
        path = self.folder / name
        try:
            array = np.load(path)
        except FileNotFoundError:
            raise FileNotFoundError(f"{path} does not exist (named by {self.folder / 'gpufeed.json'})") from None
        except ValueError as exc:
            raise ValueError(f"{path}: not a numpy array file ({exc})") from None
        if array.shape != shape:
            raise ValueError(f"{path}: shape {array.shape}, expected {shape}")
        array.flags.writeable = False  # shared by every reader: nobody changes a label
        return array

    def _map(self) -> np.ndarray:
        """This process's memory map of ``images.u8`` (opened on first use)."""
        if self._images is None or self._pid != os.getpid():
            self.storage._opened(self.path)
            self._images = np.memmap(self.path, dtype=np.uint8, mode="c",
                                     shape=(self.count, self.size, self.size, 3))
            self._pid = os.getpid()
        return self._images

    def read(self, index: int) -> np.ndarray:
        """Sample ``index``'s pixels, ``(h, w, 3)`` uint8: a view of the memory map (in
        ``"pad"`` mode, of the image's own rows and columns, without the padding)."""
        image = self._map()[index]
        if self.extents is not None:
            h, w = self.extents[index]
            image = image[:h, :w]
        self.storage._transferred(image.nbytes)
        return image

    def name(self, index: int) -> str:
        return f"{self.folder}/{IMAGES}:#{index}"

    def fingerprint(self) -> dict:
        digest = hashlib.sha1(self.labels.tobytes())
        if self.extents is not None:
            digest.update(self.extents.tobytes())
        # The first row of up to 64 images spread over the cache: a cache of other images
        # with the same labels (a re-conversion of other photos) was taken for this one.
        images = self._map()
        for i in np.unique(np.linspace(0, self.count - 1, min(64, self.count)).astype(np.int64)):
            digest.update(images[i, 0].tobytes())
        return {"kind": "raw", "samples": self.count, "classes": len(self.classes), "size": self.size,
                "mode": self.mode, "digest": digest.hexdigest()}

    def nbytes(self) -> int:
        if self.extents is None:
            return self.count * self.size * self.size * 3
        return int(self.extents.astype(np.int64).prod(axis=1).sum()) * 3

    @property
    def files(self) -> list[str]:
        names = [IMAGES, LABELS] + ([EXTENTS] if self.extents is not None else [])
        return [str(self.folder / n) for n in names]

    def __getstate__(self) -> dict:
        state = dict(self.__dict__)
        state["_images"], state["_pid"] = None, -1  # a map belongs to the process that opened it
        return state

    def __repr__(self) -> str:
        return f"RawCache({str(self.folder)!r}, samples={self.count}, size={self.size}, mode={self.mode!r})"
