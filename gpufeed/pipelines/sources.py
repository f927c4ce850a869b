"""Where samples come from: ImageFolder trees and file lists (one file per sample; the
other storage formats are in :mod:`gpufeed.datasets.shards`), :func:`open_source` that
picks the format, and the byte-level checks that keep an undecodable file from ever
reaching a decoder.

Both backends read files here, so a file is judged the same way whichever one runs.
"""

from __future__ import annotations

import hashlib
import os
import warnings
from abc import ABC, abstractmethod
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from gpufeed.datasets.samples import IMAGE_EXTENSIONS, SampleSource
from gpufeed.datasets.storage import LOCAL, Storage
from gpufeed.policies import OnError


class BadImageError(ValueError):
    """A file that cannot be decoded as an image, with the reason (``on_error="raise"``)."""

    def __init__(self, path: str, reason: str) -> None:
        super().__init__(f"{path}: {reason}")
        self.path, self.reason = path, reason


@dataclass(frozen=True)
class Skipped:
    """A file left out of an epoch, and why."""

    path: str
    reason: str


@dataclass(frozen=True, eq=False)
class SampleList(SampleSource):
    """One file per sample: an image folder or a file list, with labels and class names."""

    paths: tuple[str, ...]
    labels: tuple[int, ...]
    classes: tuple[str, ...]
    storage: Storage = field(default=LOCAL, repr=False)
    #: Files in class folders that are not images (no image extension), left out.
    ignored: int = 0

    def read(self, index: int) -> np.ndarray:
        return self.storage.read_file(self.paths[index])

    def name(self, index: int) -> str:
        return self.paths[index]

    def fingerprint(self) -> dict:
        # Paths relative to the files' common folder: a copy of the dataset elsewhere (a
        # node's local disk, another mount point) is the same dataset to a saved state.
        try:
            root = os.path.commonpath(self.paths) if len(self.paths) > 1 else os.path.dirname(self.paths[0])
            names = [os.path.relpath(p, root) for p in self.paths]
        except ValueError:  # absolute and relative paths mixed (a file list): as given
            names = list(self.paths)
        digest = hashlib.sha1("\n".join(f"{p}\t{lbl}" for p, lbl in zip(names, self.labels, strict=True))
                              .encode()).hexdigest()
        return {"kind": "files", "samples": len(self.paths), "classes": len(self.classes), "digest": digest}

    def nbytes(self) -> int:
        return sum(os.path.getsize(p) for p in self.paths)

    @property
    def files(self) -> list[str]:
        return list(self.paths)


def open_source(source: str | os.PathLike[str] | Sequence | SampleSource | None, *,
                file_list: str | os.PathLike[str] | Sequence[tuple[str, int]] | None = None,
                storage: Storage = LOCAL, image_key: str | Sequence[str] | None = None,
                label_key: str | None = None) -> SampleSource:
    """The :class:`SampleSource` that ``source`` names.

    - a :class:`SampleSource`: itself;
    - with ``file_list``: that list, paths relative to ``source`` (:func:`read_file_list`);
    - WebDataset or TFRecord shards: a pattern (``train-{000000..000127}.tar``, a glob),
      a shard file (any existing file is taken for one), a folder of shards another tool
      wrote (no class subfolders, every file a shard by name or first bytes; hidden files
      and DALI's ``*.idx`` left out; read sorted by name) or a list of them
      (:func:`gpufeed.datasets.shards.open_shards`, which also says what ``image_key``
      and ``label_key`` name);
    - a folder written by ``gpufeed convert`` (shards or a raw cache; its manifest says
      which);
    - otherwise an ImageFolder tree (:func:`scan_image_folder`): a folder with class
      subfolders is always one, whatever files lie beside them.

    Raises:
        ValueError: ``image_key`` / ``label_key`` given for a source that is not shards
            (they name shard members or features; a folder's labels are its class
            folders); a folder holding shards and other files (the others are named,
            with a glob for the shards alone).
    """
    from gpufeed.datasets import shards

    keys = {"image_key": image_key, "label_key": label_key}
    given = [k for k, v in keys.items() if v is not None]
    if given and (isinstance(source, SampleSource) or file_list is not None or source is None
                  or not (shards.is_shard_spec(source) or shards.converted_format(source) in ("webdataset",
                                                                                             "tfrecord"))):
        what = (type(source).__name__ if isinstance(source, SampleSource) else "a file list"
                if file_list is not None else f"{source!r}, which is not WebDataset or TFRecord shards")
        # One key or both: "label_key names the label member", "image_key and label_key
        # name the image and label members".
        members = {"image_key": "the image member", "label_key": "the label member"}
        named = (f"{given[0]} names {members[given[0]]}" if len(given) == 1
                 else "image_key and label_key name the image and label members")
        raise ValueError(f"{named} of WebDataset or TFRecord shards; the source is {what}")
    if isinstance(source, SampleSource):
        return source
    if file_list is not None:
        return read_file_list(file_list, source, storage)
    if source is None:
        raise ValueError("give a source (an ImageFolder tree, shards or a raw cache) or file_list")
    if shards.is_shard_spec(source):
        return shards.open_shards(source, storage, **keys)
    if shards.converted_format(source) is not None:
        return shards.open_converted(source, storage, **keys)
    return scan_image_folder(source, storage)



def scan_image_folder(root: str | os.PathLike[str], storage: Storage = LOCAL) -> SampleList:
    """List ``root/<class>/**/<image>``: one label per class folder, in sorted order.

    A sample is a file that torchvision's ``ImageFolder`` would load: one with an image
    extension (:data:`IMAGE_EXTENSIONS`, any case), so ``len()`` matches it. Other files
    in class folders (``.DS_Store``, notes) are left out and counted in one warning; a
    file with an image extension that does not decode is still a sample, skipped and
    reported when it is read. Hidden class folders (``.ipynb_checkpoints``) are not
    classes (ImageFolder would make them one). Empty class folders keep their label (so
    label numbers do not shift) and raise one warning.

    Raises:
        FileNotFoundError: ``root`` does not exist.
        ValueError: ``root`` is not a folder, has no class folders or no images.
    """
    root = Path(root)
    if not root.exists():
        raise FileNotFoundError(f"image root {root} does not exist")
    if not root.is_dir():
        raise ValueError(f"image root {root} is not a folder")
    classes = sorted(d.name for d in root.iterdir() if d.is_dir() and not d.name.startswith("."))
    if not classes:
        raise ValueError(f"image root {root} has no class folders (expected root/<class>/<image>)")
    paths: list[str] = []
    labels: list[int] = []
    empty: list[str] = []
    others: list[str] = []
    for label, name in enumerate(classes):
        files: list[str] = []
        for folder, dirs, names in os.walk(root / name, followlinks=True):  # as ImageFolder walks
            dirs.sort()
            for file in sorted(names):
                (files if file.lower().endswith(IMAGE_EXTENSIONS) else others).append(os.path.join(folder, file))
        if not files:
            empty.append(name)
        paths += files
        labels += [label] * len(files)
    if others:
        shown = ", ".join(os.path.relpath(p, root) for p in others[:3]) + (" ..." if len(others) > 3 else "")
        # Name the types loaded: "without an image extension" read as a misjudged .gif.
        warnings.warn(f"gpufeed: {root}: left out {len(others)} file(s) whose extension is not one "
                      f"ImageFolder loads ({' '.join(IMAGE_EXTENSIONS)}; GIF is not): {shown}; "
                      f"{len(paths)} images kept", stacklevel=4)
    if empty:
        warnings.warn(
            f"gpufeed: {len(empty)} class folder(s) under {root} without images: {', '.join(empty)} "
            "(their labels are kept, no samples)", stacklevel=4,
        )
    loose = _loose_files(root)
    if loose and paths:
        shown = ", ".join(loose[:3]) + (" ..." if len(loose) > 3 else "")
        warnings.warn(f"gpufeed: {root}: left out {len(loose)} file(s) outside the class folders, as "
                      f"ImageFolder does: {shown}", stacklevel=4)
    if not paths:
        raise ValueError(f"image root {root} has class folders but no images ({', '.join(IMAGE_EXTENSIONS)})"
                         + _shard_hint(root, loose))
    return SampleList(tuple(paths), tuple(labels), tuple(classes), storage, ignored=len(others))


def _loose_files(root: Path) -> list[str]:
    """Names of the visible files directly in ``root``, beside its class folders."""
    with os.scandir(root) as entries:
        return sorted(e.name for e in entries if not e.name.startswith(".") and e.is_file())


def _shard_hint(root: Path, loose: list[str]) -> str:
    """Where an image root holds shard files beside its subfolders: how to read those."""
    from gpufeed.datasets import shards

    found = [n for n in loose if shards.format_of_name(n) is not None]
    if not found:
        return ""
    pattern = shards.shard_glob(str(root), found, [n for n in loose if n not in found])
    how = f"pass a glob, e.g. {pattern!r}" if pattern else "pass the shard files as a list"
    return (f"; it also holds {len(found)} shard file(s) ({', '.join(found[:3])}"
            f"{' ...' if len(found) > 3 else ''}) that a folder with subfolders is not read as: "
            f"to read the shards, {how}")


def read_file_list(
    file_list: str | os.PathLike[str] | Sequence[tuple[str, int]], root: str | os.PathLike[str] | None = None,
    storage: Storage = LOCAL,
) -> SampleList:
    """Samples from a file list: DALI's text format (``relative/path label`` per line) or
    a sequence of ``(path, label)`` pairs. Relative paths are taken from ``root``, by
    default the list file's folder.

    Raises:
        FileNotFoundError: the list file does not exist, or entries name files that do not
            exist or are not regular files (the first few are named with their line or
            index, and the count is given). Checked here, once, so a missing file is not
            found half-way through an epoch.
        ValueError: a line without a path and an integer label (its number is named).
    """
    pairs: list[tuple[str, int]] = []
    where: list[str] = []  # each entry's origin, for error messages: "list.txt:3" or "file_list[2]"
    if isinstance(file_list, (str, os.PathLike)):
        list_path = Path(file_list)
        if not list_path.is_file():
            raise FileNotFoundError(f"file list {list_path} does not exist")
        base = Path(root) if root is not None else list_path.parent
        for lineno, line in enumerate(list_path.read_text().splitlines(), 1):
            if not line.strip() or line.lstrip().startswith("#"):
                continue
            # Any whitespace before the label, as DALI's reader takes it (tabs too); the
            # path keeps its inner spaces.
            fields = line.strip().rsplit(None, 1)
            try:
                path, label = fields
                pairs.append((str(base / path.strip()), int(label)))
            except ValueError:
                raise ValueError(
                    f"{list_path}:{lineno}: expected '<path> <integer label>', got {line!r}"
                ) from None
            where.append(f"{list_path}:{lineno}")
    else:
        base = Path(root) if root is not None else Path()
        for k, (path, label) in enumerate(file_list):
            try:
                pairs.append((str(base / path), int(label)))
            except (TypeError, ValueError):
                raise ValueError(f"file_list[{k}]: label {label!r} of {path} is not an integer") from None
            where.append(f"file_list[{k}]")
    _check_files_exist([p for p, _ in pairs], where)
    if not pairs:
        raise ValueError(f"file list {file_list!r} has no samples")
    negative = [f"{w} ({lbl})" for w, (_, lbl) in zip(where, pairs, strict=True) if lbl < 0]
    if negative:
        raise ValueError(f"labels must be >= 0; {len(negative)} negative: {', '.join(negative[:5])}"
                         + (" ..." if len(negative) > 5 else ""))
    classes = tuple(str(i) for i in range(max(lbl for _, lbl in pairs) + 1))
    return SampleList(tuple(p for p, _ in pairs), tuple(lbl for _, lbl in pairs), classes, storage)


def _check_files_exist(paths: list[str], where: list[str]) -> None:
    """Raise one FileNotFoundError naming the entries whose path is not a regular file."""
    missing = [k for k, p in enumerate(paths) if not os.path.isfile(p)]
    if not missing:
        return

    def why(path: str) -> str:
        if os.path.isdir(path):
            return "is a folder"
        return "is not a regular file" if os.path.exists(path) else "does not exist"

    shown = "; ".join(f"{where[k]}: {paths[k]} {why(paths[k])}" for k in missing[:3])
    more = f"; and {len(missing) - 3} more" if len(missing) > 3 else ""
    raise FileNotFoundError(f"file list: {len(missing)} of {len(paths)} entries are not files: {shown}{more}")


_SIGNATURES = (
    (b"\xff\xd8\xff", "jpeg"),
    (b"\x89PNG\r\n\x1a\n", "png"),
    (b"BM", "bmp"),
    (b"II*\x00", "tiff"),
    (b"MM\x00*", "tiff"),
    (b"II+\x00", "tiff"),  # BigTIFF
    (b"MM\x00+", "tiff"),
)


def image_format(data: bytes | memoryview) -> str | None:
    """The image format named by the file's first bytes, or None."""
    head = bytes(data[:12])
    if head[:4] == b"RIFF" and head[8:12] == b"WEBP":
        return "webp"
    if len(head) > 2 and head[0:1] == b"P" and head[1] in b"123456" and head[2] in b" \t\r\n":
        return "pnm"  # Netpbm: .pbm, .pgm, .ppm (ImageFolder loads .pgm and .ppm)
    return next((fmt for sig, fmt in _SIGNATURES if head.startswith(sig)), None)


def undecodable_reason(data: bytes | memoryview) -> str | None:
    """Why these bytes cannot be an intact image, or None when they may be one.

    Cheap checks only (the bytes are already in memory): an empty file, an unknown
    signature, a JPEG cut short (no end-of-image marker near its end; in entropy-coded
    data 0xFF is always stuffed, so 0xFFD9 only appears as a real marker). What passes
    here can still fail in a decoder; the loaders handle that too.
    """
    if len(data) == 0:
        return "empty file (0 bytes)"
    fmt = image_format(data)
    if fmt is None:
        head = bytes(data[:6])
        if head in (b"GIF87a", b"GIF89a"):  # an image, but not one DALI decodes
            return "unsupported image format (GIF)"
        return "not an image (unknown file signature)"
    if fmt == "jpeg" and bytes(data[-1024:]).rfind(b"\xff\xd9") < 0 and not _jpeg_ends(memoryview(data).cast("B")):
        return "truncated JPEG (no end-of-image marker)"
    return None


def _jpeg_markers(mv: memoryview) -> Iterator[tuple[int, int]]:
    """``(marker, position)`` of a JPEG's header segments, in order, up to its first scan
    (0xDA, start of scan) or the first bytes that do not chain as segments."""
    pos, end = 2, len(mv) - 3
    while pos < end:
        if mv[pos] != 0xFF:
            return  # stray bytes between segments (some cameras write them)
        marker = mv[pos + 1]
        if marker == 0xFF:  # fill byte
            pos += 1
            continue
        yield marker, pos
        if marker == 0xDA:
            return
        if marker in (0xD8, 0x01) or 0xD0 <= marker <= 0xD7:  # markers without a length
            pos += 2
            continue
        pos += 2 + int.from_bytes(mv[pos + 2: pos + 4], "big")


def _jpeg_ends(mv: memoryview) -> bool:
    """Whether a JPEG's image data ends with an end-of-image marker somewhere after its
    first scan: phones append a video ("motion photos") or padding after it, which every
    decoder ignores. Searched from the scan on, so an EXIF thumbnail's own marker (in the
    header) does not count; a header that does not chain is searched whole."""
    start = next((pos for marker, pos in _jpeg_markers(mv) if marker == 0xDA), 2)
    return bytes(mv[start:]).find(b"\xff\xd9") >= 0


#: JPEG start-of-frame markers (baseline, progressive, lossless, arithmetic): they hold
#: the frame's height and width.
_JPEG_SOF = frozenset(range(0xC0, 0xD0)) - {0xC4, 0xC8, 0xCC}


def image_size(data: np.ndarray) -> tuple[int, int] | None:
    """``(height, width)`` of encoded image bytes from their header, or None if unreadable.

    JPEG (the start-of-frame segment) and PNG (IHDR) are read directly, a few
    microseconds; other formats, and JPEGs whose segments do not chain cleanly, go through
    PIL, which reads only the header. Sizes are as
    stored, before any EXIF rotation (neither backend applies EXIF orientation).
    """
    mv = memoryview(data).cast("B")
    fmt = image_format(mv)
    if fmt == "png" and len(mv) >= 24:
        return int.from_bytes(mv[20:24], "big"), int.from_bytes(mv[16:20], "big")
    if fmt == "jpeg":
        # Stray bytes between segments end the walk: PIL scans on.
        for marker, pos in _jpeg_markers(mv):
            if marker in _JPEG_SOF and pos + 9 <= len(mv):
                return int.from_bytes(mv[pos + 5: pos + 7], "big"), int.from_bytes(mv[pos + 7: pos + 9], "big")
    import io

    from PIL import Image

    try:
        with Image.open(io.BytesIO(mv.tobytes())) as img:
            return img.height, img.width
    except Exception:  # noqa: BLE001 - any header PIL cannot read means "no size"
        return None


def pil_reason(data: np.ndarray) -> str | None:
    """PIL's words for why ``data`` does not decode, or None when PIL decodes it.

    Used only after a decoder failed (DALI's messages name its codec's error code, not the
    fault), so the report says what is wrong with the file, e.g. "image file is truncated".
    """
    import io

    from PIL import Image

    try:
        with Image.open(io.BytesIO(data.tobytes())) as img:
            img.load()
    except Exception as exc:  # noqa: BLE001 - any failure is the diagnosis we want
        return (str(exc).splitlines() or [type(exc).__name__])[0]
    return None


def read_bytes(path: str) -> np.ndarray:
    """The file's bytes as a writable uint8 array (what DALI and torch both take without a copy)."""
    return np.fromfile(path, dtype=np.uint8)


class BadFileMemory(ABC):
    """Where a feed of files reports the bad ones: the ``on_error`` policy and the files
    found bad so far (so they are not decoded again).

    A feed (:class:`gpufeed.pipelines.feeds.FileFeed`) asks :meth:`known` before reading a
    file and calls :meth:`add` for one that cannot be decoded; a subclass decides where
    :meth:`add` files it (:class:`SkipLog`: the loader's epoch;
    :class:`gpufeed.pipelines.feeds.IteratorSkips`: the epoch a DALI iterator reads).
    """

    def __init__(self, on_error: OnError | str) -> None:
        self.on_error = OnError.parse(on_error, "on_error")
        self._known: dict[str, str] = {}

    def known(self, path: str) -> str | None:
        """The reason ``path`` was found bad before, or None."""
        return self._known.get(path)

    @abstractmethod
    def add(self, path: str, reason: str) -> None:
        """Record a bad file, or raise :class:`BadImageError` under ``on_error="raise"``
        (subclasses call :meth:`_remember` first)."""

    def _remember(self, path: str, reason: str) -> None:
        """Raise :class:`BadImageError` under ``on_error="raise"``, else remember the file."""
        if self.on_error == OnError.RAISE:
            raise BadImageError(path, reason)
        self._known[path] = reason


class SkipLog(BadFileMemory):
    """The files an epoch left out, and the policy that decides whether to skip or raise.

    Known-bad files are remembered across epochs (so they are not decoded again) and
    listed in every epoch's :attr:`skipped`, so that, with ``last_batch="partial"``,
    samples yielded + ``len(skipped)`` = files in the shard, every epoch.
    """

    def __init__(self, on_error: OnError | str) -> None:
        super().__init__(on_error)
        self.skipped: list[Skipped] = []
        self._this_epoch: set[str] = set()
        self._warned: set[str] = set()

    def start_epoch(self) -> None:
        """Forget the last epoch's list (the known-bad files stay known)."""
        self.skipped, self._this_epoch = [], set()

    def add(self, path: str, reason: str) -> None:
        """Record a bad file (once per epoch), or raise :class:`BadImageError` under ``raise``."""
        self._remember(path, reason)
        if path not in self._this_epoch:
            self._this_epoch.add(path)
            self.skipped.append(Skipped(path, reason))

    def warn_new(self, epoch: int, planned: int) -> None:
        """One warning line per epoch that found files not warned about before."""
        new = [s for s in self.skipped if s.path not in self._warned]
        if not new:
            return
        self._warned.update(s.path for s in new)
        shown = "; ".join(f"{s.path} ({s.reason})" for s in new[:3])
        more = f"; and {len(new) - 3} more" if len(new) > 3 else ""
        warnings.warn(
            f"gpufeed: epoch {epoch} skipped {len(self.skipped)} of {planned} files "
            f"(loader.skipped lists each with its reason): {shown}{more}", stacklevel=3,
        )
