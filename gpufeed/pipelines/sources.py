"""Where samples come from: ImageFolder trees and file lists (one file per sample; the
other storage formats are in :mod:`gpufeed.datasets.shards`) and :func:`open_source`,
which picks the format. Files are judged by :mod:`gpufeed.datasets.image_bytes` and left
out through :mod:`gpufeed.pipelines.skips`.
"""

from __future__ import annotations

import contextlib
import functools
import hashlib
import operator
import os
import warnings
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from gpufeed.datasets.samples import IMAGE_EXTENSIONS, SampleSource, numbered_classes
from gpufeed.datasets.storage import LOCAL, Storage

#: ImageFolder's attributes a :class:`SampleList` computes once (and leaves out of its
#: pickles: a DataLoader worker never reads them).
_IMAGE_FOLDER_VIEWS = ("class_to_idx", "targets", "samples")


@dataclass(frozen=True, eq=False)
class SampleList(SampleSource):
    """One file per sample: an image folder or a file list, with labels and class names.

    It is ``loader.dataset`` for such a source, and has torchvision ``ImageFolder``'s
    attributes with their meanings, for code written against it (a checkpoint's
    index-to-class map, class weights, a ``WeightedRandomSampler``): :attr:`class_to_idx`,
    :attr:`targets`, :attr:`samples` and :attr:`imgs`. They are copies: changing them does
    not change what a loader reads.
    """

    paths: tuple[str, ...]
    labels: tuple[int, ...]
    classes: tuple[str, ...]
    storage: Storage = field(default=LOCAL, repr=False)
    #: Files in class folders that are not images (no image extension), left out.
    ignored: int = 0

    def read(self, index: int) -> np.ndarray:
        return self.storage.read_file(self.paths[index])

    def read_or_reason(self, index: int) -> np.ndarray | str:
        """The file's bytes, or why it cannot be read: a file deleted since the list was
        made, a dangling link, no permission. One file is one sample, so it is that
        sample's fault (a shard's read error is the dataset's, and raises)."""
        try:
            return self.read(index)
        except OSError as exc:
            return f"could not read: {exc.strerror or exc}"

    def name(self, index: int) -> str:
        return self.paths[index]

    # cached_property writes the instance's __dict__ itself, which a frozen dataclass allows.
    @functools.cached_property
    def class_to_idx(self) -> dict[str, int]:
        """Class name -> label, as ImageFolder's ``class_to_idx``."""
        return {name: label for label, name in enumerate(self.classes)}

    @functools.cached_property
    def targets(self) -> list[int]:
        """Each sample's label, in sample order, as ImageFolder's ``targets``."""
        return list(self.labels)

    @functools.cached_property
    def samples(self) -> list[tuple[str, int]]:
        """Each sample's ``(path, label)``, in sample order, as ImageFolder's ``samples``."""
        return list(zip(self.paths, self.labels, strict=True))

    @property
    def imgs(self) -> list[tuple[str, int]]:
        """:attr:`samples`, under ImageFolder's older name."""
        return self.samples

    def __getstate__(self) -> dict:
        # Pickled into every DataLoader worker: ImageNet's 1.28M (path, label) pairs would
        # travel with it once a script had read them.
        return {k: v for k, v in self.__dict__.items() if k not in _IMAGE_FOLDER_VIEWS}

    def fingerprint(self) -> dict:
        # Computed once per list: the path work is O(files) in Python (10 s for ImageNet's
        # 1.28M files), and a training loop takes a state every few minutes.
        known = self.__dict__.get("_fingerprint")
        if known is None:
            known = self._identify()
            object.__setattr__(self, "_fingerprint", known)  # frozen: a cache, not a field
        return dict(known)

    def _identify(self) -> dict:
        # Paths relative to the files' common folder: a copy of the dataset elsewhere (a
        # node's local disk, another mount point) is the same dataset to a saved state.
        try:
            root = os.path.commonpath(self.paths) if len(self.paths) > 1 else os.path.dirname(self.paths[0])
            names = [os.path.relpath(p, root) for p in self.paths]
        except ValueError:  # absolute and relative paths mixed (a file list): as given
            names = list(self.paths)
        digest = hashlib.sha1("\n".join(f"{p}\t{lbl}" for p, lbl in zip(names, self.labels, strict=True))
                              .encode("utf-8", "surrogateescape")).hexdigest()
        return {"kind": "files", "samples": len(self.paths), "classes": len(self.classes), "digest": digest}

    def nbytes(self) -> int:
        total = 0
        for path in self.paths:
            # a dangling link, a file deleted since the scan: no bytes; reading it says why
            with contextlib.suppress(OSError):
                total += os.path.getsize(path)
        return total

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
            with a glob for the shards alone); the folder of a ``gpufeed convert`` that
            did not finish (:func:`gpufeed.datasets.shards.check_finished`: how far it got
            and the command that finishes it).
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
    if _is_pairs(source):  # a list source is shards: pairs would fail inside pathlib, unnamed
        raise ValueError(f"source is a sequence of (path, label) pairs ({source[0]!r}, ...): pass them as "
                         "file_list=, with source= the folder their relative paths start from")
    if shards.is_shard_spec(source):
        return shards.open_shards(source, storage, **keys)  # refuses an unfinished conversion itself
    if shards.converted_format(source) is not None:
        return shards.open_converted(source, storage, **keys)  # so does this
    if isinstance(source, (str, os.PathLike)):
        # An interrupted gpufeed convert whose folder is neither yet (no manifest, no whole
        # shard): refused with how far it got, not scanned as an image folder without classes.
        shards.check_finished(source)
    return scan_image_folder(source, storage)



def _is_pairs(source: object) -> bool:
    return (isinstance(source, Sequence) and not isinstance(source, str | bytes) and len(source) > 0
            and all(isinstance(p, Sequence) and not isinstance(p, str | bytes) and len(p) == 2 for p in source))


def scan_image_folder(root: str | os.PathLike[str], storage: Storage = LOCAL) -> SampleList:
    """List ``root/<class>/**/<image>``: one label per class folder, in sorted order.

    A sample is a file that torchvision's ``ImageFolder`` would load: one with an image
    extension (:data:`IMAGE_EXTENSIONS`, any case), so ``len()`` matches it. Other files
    in class folders (``.DS_Store``, notes) are left out and counted in one warning; a
    file with an image extension that does not decode is still a sample, skipped and
    reported when it is read. Class folders are ImageFolder's, so labels match its
    ``class_to_idx``: a hidden folder holding images is a class too, named in a warning
    (ImageFolder counts it). A hidden folder without images (``.ipynb_checkpoints``) is
    left out with a warning (ImageFolder refuses a tree with one). Empty visible class
    folders keep their label (so label numbers do not shift) and raise one warning.

    Raises:
        FileNotFoundError: ``root`` does not exist.
        ValueError: ``root`` is not a folder, has no class folders or no images.
    """
    root = Path(root)
    if not root.exists():
        raise FileNotFoundError(f"image root {root} does not exist")
    if not root.is_dir():
        raise ValueError(f"image root {root} is not a folder")
    folders = sorted(d.name for d in root.iterdir() if d.is_dir())
    found: dict[str, tuple[list[str], list[str]]] = {}  # class folder -> (images, other files)
    for name in folders:
        files: list[str] = []
        rest: list[str] = []
        # As ImageFolder walks: folders sorted by their whole path ("a-b" before "a/sub",
        # '-' < '/'), so samples come in its order, not only its count.
        for folder, _, names in sorted(os.walk(root / name, followlinks=True)):
            for file in sorted(names):
                (files if file.lower().endswith(IMAGE_EXTENSIONS) else rest).append(os.path.join(folder, file))
        found[name] = (files, rest)
    hidden = [n for n in folders if n.startswith(".")]
    classes = [n for n in folders if not n.startswith(".") or found[n][0]]
    if not classes:
        raise ValueError(f"image root {root} has no class folders (expected root/<class>/<image>)")
    if hidden:
        kept = [n for n in hidden if n in classes]
        left = [n for n in hidden if n not in classes]
        said = []
        if kept:
            said.append(f"{', '.join(kept)} hold images and are classes, as in ImageFolder (labels "
                        f"{', '.join(str(classes.index(n)) for n in kept)}): remove them if they are not")
        if left:
            said.append(f"{', '.join(left)} hold no image and are left out (ImageFolder would refuse the tree)")
        warnings.warn(f"gpufeed: {root}: hidden folder(s) " + "; ".join(said), stacklevel=4)
    paths: list[str] = []
    labels: list[int] = []
    empty: list[str] = []
    others: list[str] = []
    for label, name in enumerate(classes):
        files, rest = found[name]
        others += rest
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
        for lineno, line in enumerate(_list_lines(list_path), 1):
            if not line.strip():  # no comments: DALI's format has none, and "#1.jpg 0" is a file
                continue
            # Any whitespace before the label, as DALI's reader takes it (tabs too); the
            # path keeps its inner spaces.
            fields = line.strip().rsplit(None, 1)
            if len(fields) != 2 or not _is_integer(fields[1]):
                raise ValueError(f"{list_path}:{lineno}: expected '<path> <integer label>', got {line!r}")
            pairs.append((str(base / fields[0].strip()), int(fields[1])))
            where.append(f"{list_path}:{lineno}")
    else:
        base = Path(root) if root is not None else Path()
        for k, (path, label) in enumerate(file_list):
            try:
                pairs.append((str(base / path), _integer_label(label)))
            except (TypeError, ValueError):
                raise ValueError(f"file_list[{k}]: label {label!r} of {path} is not an integer") from None
            where.append(f"file_list[{k}]")
    _check_files_exist([p for p, _ in pairs], where)
    if not pairs:
        shown = os.fspath(file_list) if isinstance(file_list, (str, os.PathLike)) else "given"
        raise ValueError(f"file list {shown} has no samples (expected a line 'relative/path label' per image)")
    negative = [f"{w} ({lbl})" for w, (_, lbl) in zip(where, pairs, strict=True) if lbl < 0]
    if negative:
        raise ValueError(f"labels must be >= 0; {len(negative)} negative: {', '.join(negative[:5])}"
                         + (" ..." if len(negative) > 5 else ""))
    top = max(lbl for _, lbl in pairs)
    classes = numbered_classes(top, next(w for w, (_, lbl) in zip(where, pairs, strict=True) if lbl == top))
    duplicates = _listed_twice([p for p, _ in pairs], where)
    if duplicates:
        warnings.warn(f"gpufeed: file list: {duplicates}; each entry is a sample (DALI's file reader keeps "
                      "them too)", stacklevel=4)
    return SampleList(tuple(p for p, _ in pairs), tuple(lbl for _, lbl in pairs), classes, storage)


def _list_lines(list_path: Path) -> list[str]:
    """A list file's lines: UTF-8 (a byte-order mark, as Windows editors write, left out),
    names in other encodings kept as the bytes they are (surrogate escapes, as Python
    holds such file names), split at line feeds alone (a CR before one dropped): file
    names may hold the other characters ``str.splitlines`` splits at (U+0085, U+2028)."""
    text = list_path.read_bytes().decode("utf-8", "surrogateescape").removeprefix("\ufeff")
    return [line.removesuffix("\r") for line in text.split("\n")]


def _is_integer(text: str) -> bool:
    """A label as DALI's reader and C read one: ASCII digits, an optional sign (``int()``
    also took ``1_000`` and other scripts' digits)."""
    digits = text[1:] if text[:1] in "+-" else text
    return digits.isascii() and digits.isdigit()


def _integer_label(label: object) -> int:
    """A pair's label as an int: an integer (numpy's too), a float with no fraction (a
    pandas column with gaps is float), or digits as text; ``int()`` had cut 1.7 to 1."""
    if isinstance(label, str):
        if not _is_integer(label.strip()):
            raise ValueError(label)
        return int(label)
    if isinstance(label, float | np.floating):
        if not float(label).is_integer():
            raise ValueError(label)
        return int(label)
    if isinstance(label, np.bool_):  # as Python's bool: 0/1 (a binary task's labels from a mask)
        return int(label)
    return operator.index(label)


def _listed_twice(paths: list[str], where: list[str]) -> str:
    """The entries naming a file an earlier entry names, in words ("" for none)."""
    first: dict[str, int] = {}
    twice: list[str] = []
    for k, path in enumerate(paths):
        seen = first.setdefault(os.path.normpath(path), k)
        if seen != k:
            twice.append(f"{where[k]} (as {where[seen]})")
    if not twice:
        return ""
    return (f"{len(twice)} entr{'y names' if len(twice) == 1 else 'ies name'} a file listed before: "
            + ", ".join(twice[:3]) + (" ..." if len(twice) > 3 else ""))


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
