"""Image datasets stored in few large files: WebDataset tar shards, TFRecord shards and
pre-decoded raw caches (written by ``gpufeed convert``), read by index through
:class:`~gpufeed.datasets.samples.SampleSource`.

:func:`open_shards` picks the format from the file names; :func:`expand_shards` turns a
shard pattern (or a folder of shards) into the file list.
"""

from __future__ import annotations

import fnmatch
import glob
import json
import os
import re
import shlex
from collections.abc import Sequence
from pathlib import Path

from gpufeed.datasets.compression import (
    compression_of_bytes,
    compression_of_name,
    strip_compression,
)
from gpufeed.datasets.samples import SampleSource
from gpufeed.datasets.storage import LOCAL, Storage

#: Shard file suffixes and the format they hold.
SHARD_SUFFIXES = {".tar": "webdataset", ".tfrecord": "tfrecord", ".tfrecords": "tfrecord", ".tfrec": "tfrecord"}


#: TensorFlow Datasets' shard names: ``imagenet2012-train.tfrecord-00000-of-01024``.
_TFDS_NAME = re.compile(r"\.(tfrecords?|tfrec)-\d+-of-\d+$", re.IGNORECASE)

#: The manifest ``gpufeed convert`` writes into its output folder: ``{"format":
#: "webdataset" | "tfrecord" | "raw", "samples": N, "classes": [...], "files": [...], ...}``
#: (file names relative to the folder).
MANIFEST = "gpufeed.json"

#: The progress record ``gpufeed convert`` keeps in its output folder: its settings, how
#: far it got, and ``"complete": true`` once it finished.
PROGRESS_FILE = ".gpufeed-convert.json"

#: The suffix of a file ``gpufeed convert`` is still writing (``shard-000003.tar.partial``):
#: renamed without it once complete, so a file with it is never a shard.
PARTIAL = ".partial"

_BRACES = re.compile(r"\{(\d+)\.\.(\d+)\}")

#: How errors name each format.
_FORMAT_NAMES = {"webdataset": "WebDataset", "tfrecord": "TFRecord"}


def expand_shards(spec: str | os.PathLike[str] | Sequence[str | os.PathLike[str]]) -> list[str]:
    """The shard files a pattern names, in order.

    ``spec`` is a brace range as WebDataset writes it (``train-{000000..000127}.tar``;
    zero padding kept, several ranges expand as a product), a glob (``train-*.tar``,
    sorted; DALI index files, ``*.idx``, left out), a single file, a folder holding only
    shards (:func:`shard_folder_files`), or a list of those.

    Raises:
        FileNotFoundError: a named file does not exist, or a glob matches nothing.
        ValueError: a folder that is not a folder of shards (see :func:`shard_folder_files`).
    """
    if not isinstance(spec, (str, os.PathLike)):
        return [p for item in spec for p in expand_shards(item)]
    text = os.fspath(spec)
    names = [text]
    # A file or folder that exists is itself, not a pattern: "out [v1]/shard-000000.tar"
    # (a folder gpufeed convert wrote) read as a glob matched nothing.
    while not os.path.exists(text) and any(_BRACES.search(n) for n in names):
        out = []
        for name in names:
            m = _BRACES.search(name)
            if m is None:
                out.append(name)
                continue
            lo, hi = m.group(1), m.group(2)
            width = len(lo) if lo.startswith("0") else 0
            out += [name[: m.start()] + str(k).zfill(width) + name[m.end():] for k in range(int(lo), int(hi) + 1)]
        names = out
    files: list[str] = []
    for name in names:
        if glob.has_magic(name) and not os.path.exists(name):
            # DALI index files beside the shards are never shards (a glob such as
            # "train-*" for suffixless TensorFlow shards would also match them)
            found = sorted(f for f in glob.glob(name) if not f.endswith(".idx"))
            if not found:
                raise FileNotFoundError(f"shard pattern {name} matches no file")
            files += found
        elif os.path.isdir(name):
            files += shard_folder_files(name)
        elif not os.path.isfile(name):
            raise FileNotFoundError(f"shard {name} does not exist" + (f" (from {text})" if name != text else ""))
        else:
            files.append(name)
    for folder in dict.fromkeys(os.path.dirname(f) or "." for f in files):
        _check_progress(folder)
    partial = next((f for f in files if f.endswith(PARTIAL)), None)
    if partial is not None:
        raise _partial_error(partial)
    return files


def format_of_name(path: str | os.PathLike[str]) -> str | None:
    """``"webdataset"`` or ``"tfrecord"`` as a shard's file name says (its suffix, or
    TensorFlow Datasets' ``NAME.tfrecord-00000-of-01024``), else None."""
    name = os.path.basename(os.fspath(path))
    if _TFDS_NAME.search(name):
        return "tfrecord"
    return SHARD_SUFFIXES.get(Path(name).suffix.lower())


def is_compressed_name(path: str | os.PathLike[str]) -> bool:
    """Whether a shard's name says it is compressed (``.tar.gz``, ``.tgz``, ``.tfrecord.gz``
    ...): neither gpufeed (which reads each sample at its byte offset) nor DALI's readers
    read compressed shards, so they are refused by name."""
    return compression_of_name(path) is not None




def compressed_shard_error(path: str, what: str) -> ValueError:
    """The error for a compressed shard: which file, and how to make it readable."""
    return ValueError(
        f"{path}: {what}; gpufeed reads each sample at its byte offset and DALI's readers read "
        "uncompressed shards only, so compressed shards are not supported: decompress it first "
        f"(e.g. gzip -dc {path} > {_decompressed_name(path)}) and read that")


def _decompressed_name(path: str) -> str:
    if compression_of_name(path) is not None:
        return strip_compression(path)
    stem, suffix = os.path.splitext(path)
    return f"{stem}.uncompressed{suffix}"


def sniff_format(path: str, storage: Storage = LOCAL) -> str:
    """``"webdataset"`` or ``"tfrecord"`` from a shard's first bytes, for names that do
    not say (TensorFlow's ImageNet conversion writes ``train-00000-of-01024``).

    Raises:
        ValueError: the file is gzip-compressed, or neither a tar nor a TFRecord file.
    """
    head = storage.read_at(path, 0, min(512, storage.size(path))).tobytes()
    fmt = _format_of_head(head)
    if fmt in ("webdataset", "tfrecord"):
        return fmt
    if fmt is not None:
        raise compressed_shard_error(path, f"a {fmt}-compressed file")
    raise ValueError(f"{path}: neither a tar (WebDataset) nor a TFRecord file, by its first bytes (a file "
                     "source is a shard; an image folder source is a folder, a file list goes to file_list=)")


def _format_of_head(head: bytes) -> str | None:
    """``"webdataset"``, ``"tfrecord"`` or a compression (``"gzip"``, ``"zstd"`` ...: compressed
    data) from a file's first 512 bytes (fewer for a short file), else None. The formats'
    own checks (a tar header's checksum, a record length's CRC) come first: a TFRecord
    whose first length happens to begin with gzip's two bytes is a TFRecord."""
    from gpufeed.datasets.shards.tfrecord import looks_like_tfrecord
    from gpufeed.datasets.shards.webdataset import looks_like_tar

    if looks_like_tar(head):
        return "webdataset"
    if looks_like_tfrecord(head):
        return "tfrecord"
    return compression_of_bytes(head)


def _is_shard_file(path: str) -> bool:
    """Whether a file in a folder is a shard: by its name (compressed names too, so that
    :func:`open_shards` refuses them with advice), else by its first bytes (gzip data
    too, for the same reason); a name with an image extension is not one. Never raises:
    an unreadable file is not a shard."""
    if path.endswith(PARTIAL):
        return False  # a shard gpufeed convert did not finish (check_finished refuses the folder)
    if format_of_name(path) is not None or is_compressed_name(path):
        return True
    from gpufeed.datasets.shards.webdataset import IMAGE_EXTENSIONS

    if Path(path).suffix.lower().lstrip(".") in IMAGE_EXTENSIONS:
        return False  # no read: a flat folder of many images is refused without opening each
    try:
        with open(path, "rb") as f:
            return _format_of_head(f.read(512)) is not None
    except OSError:
        return False


def _folder_split(folder: str | os.PathLike[str]) -> tuple[list[str], list[str]] | None:
    """``(shard files, other files)`` of a plain folder, each sorted by name, or None
    when ``folder`` is no folder, a folder ``gpufeed convert`` wrote (its manifest says
    what it holds) or one with class subfolders (an ImageFolder tree).

    Hidden entries (``.DS_Store``, ``.ipynb_checkpoints``, convert's progress record) and
    DALI's ``*.idx`` index files (written beside shards, by DALI's tools or by the kit)
    are neither: they are left out, as a glob leaves index files out.
    """
    if not isinstance(folder, (str, os.PathLike)) or not os.path.isdir(folder):
        return None
    if os.path.isfile(os.path.join(folder, MANIFEST)):
        return None
    with os.scandir(folder) as entries:
        visible = sorted((e for e in entries if not e.name.startswith(".")), key=lambda e: e.name)
    if any(e.is_dir() for e in visible):
        return None  # root/<class>/<image>: an ImageFolder tree, read as before
    shards: list[str] = []
    others: list[str] = []
    for entry in visible:
        if entry.name.endswith(".idx") or not entry.is_file():
            continue
        path = os.path.join(os.fspath(folder), entry.name)
        (shards if _is_shard_file(path) else others).append(path)
    return shards, others


def is_shard_folder(folder: object) -> bool:
    """Whether ``folder`` is a folder of shards another tool wrote: no manifest, no class
    subfolders, and at least one shard file (by name or first bytes) in it. Whether all
    its files are shards is checked by :func:`shard_folder_files`, which says which are
    not."""
    split = _folder_split(folder) if isinstance(folder, (str, os.PathLike)) else None
    return split is not None and bool(split[0])


def shard_glob(folder: str, shards: list[str], others: list[str]) -> str | None:
    """A glob in ``folder`` that matches exactly ``shards`` among its files, or None."""
    names = [os.path.basename(p) for p in shards]
    suffixes = {Path(n).suffix for n in names}
    candidates = [f"*{suffixes.pop()}"] if len(suffixes) == 1 and "" not in suffixes else []
    # Up to the first digit: "train-*", which reads as the naming scheme, rather than
    # "train-0000*" (or a whole name when there is one shard).
    prefix = re.match(r"\D*", os.path.commonprefix(names)).group()
    if prefix:
        candidates.append(f"{prefix}*")
    for pattern in candidates:
        if not any(fnmatch.fnmatchcase(os.path.basename(p), pattern) for p in others):
            return os.path.join(folder, pattern)
    return None


def shard_folder_files(folder: str | os.PathLike[str]) -> list[str]:
    """The shard files of a folder holding only shards (no class subfolders, no
    ``gpufeed convert`` manifest), sorted by name: a folder of shards another tool wrote,
    e.g. ``wds/train-000000.tar``, ``wds/train-000001.tar`` or TF-slim's suffixless
    ``slim/train-00000-of-01024``. A file is a shard by its name
    (:func:`format_of_name`) or its first bytes (:func:`sniff_format`); hidden files and
    DALI's ``*.idx`` index files are left out.

    Raises:
        ValueError: the folder holds shards and other files (the others are named, with
            a glob that picks the shards alone), or no shards, or class subfolders; or a
            ``gpufeed convert`` that did not finish (:func:`check_finished`).
    """
    text = os.fspath(folder)
    check_finished(text)
    split = _folder_split(text)
    if split is None or not split[0]:
        what = ("has a gpufeed convert manifest" if os.path.isfile(os.path.join(text, MANIFEST))
                else "has subfolders (an ImageFolder tree)" if split is None else "holds no shard files")
        raise ValueError(f"{text} is not a folder of shards: it {what}")
    shards, others = split
    if others:
        shown = ", ".join(os.path.basename(p) for p in others[:5]) + (" ..." if len(others) > 5 else "")
        pattern = shard_glob(text, shards, others)
        hint = (f"pass a glob that names the shards alone, e.g. {pattern!r}" if pattern is not None
                else "pass the shard files as a list")
        raise ValueError(f"{text} holds {len(shards)} shard file(s) and {len(others)} other file(s) "
                         f"that are not WebDataset or TFRecord shards ({shown}): move those out, or {hint}")
    return shards


def is_shard_spec(spec: object) -> bool:
    """Whether ``spec`` names shard files (a pattern, a shard file, a folder of shards or a
    list of them) rather than an image folder or a raw cache.

    A name with a shard suffix (compressed ones too, so that they are refused by name) is
    one, and so is any existing file: a source that is one file can only be a shard. A
    folder is one when it has no class subfolders and no ``gpufeed convert`` manifest and
    holds shard files (:func:`is_shard_folder`; a folder with class subfolders stays an
    ImageFolder tree, and a converted folder is read by its manifest).
    """
    if isinstance(spec, (str, os.PathLike)):
        text = os.fspath(spec)
        # What exists is what it is, whatever its name: a folder "photos [v1]" or
        # "imagenet.tar" with class subfolders is an image folder, as torchvision reads it.
        if os.path.isdir(text):
            return is_shard_folder(text)
        return (os.path.isfile(text) or bool(_BRACES.search(text)) or glob.has_magic(text)
                or format_of_name(text) is not None or is_compressed_name(text))
    return isinstance(spec, Sequence) and len(spec) > 0 and all(is_shard_spec(s) for s in spec)


def open_shards(spec: str | os.PathLike[str] | Sequence[str | os.PathLike[str]],
                storage: Storage = LOCAL, *, image_key: str | Sequence[str] | None = None,
                label_key: str | None = None) -> SampleSource:
    """The sample source of a set of WebDataset or TFRecord shards.

    The format comes from the file names (``.tar``; ``.tfrecord``, ``.tfrecords``,
    ``.tfrec`` or TensorFlow Datasets' ``NAME.tfrecord-00000-of-01024``), or, for other
    names, from each file's first bytes.

    Args:
        spec: a pattern, a file, a folder of shards or a list (:func:`expand_shards`).
        storage: how bytes are read.
        image_key: WebDataset: the image member's extension(s) (``"jpg"``, ``"jpg;png"``
            or a list; default any image extension); TFRecord: the image feature (default
            ``image/encoded``; ``image`` in TensorFlow Datasets' sets).
        label_key: WebDataset: the label member's extension (default ``cls``), holding
            a decimal integer, or ``"json:FIELD"``, an integer field of the sample's
            ``.json`` member; TFRecord: the int64 label feature (default
            ``image/class/label``; ``label`` in TensorFlow Datasets' sets).

    Raises:
        ValueError: a compressed shard (``.tar.gz``, ``.tgz``, GZIP TFRecords: named,
            with how to decompress it), files that mix formats (a file of each is named),
            a file that is no shard, a folder holding other files beside its shards, no
            files at all, or shards of a ``gpufeed convert`` that did not finish
            (:func:`check_finished`; a ``NAME.partial`` file is refused by name).
    """
    files = expand_shards(spec)
    if not files:
        raise ValueError(f"no shard files in {spec!r}: give a shard pattern, a glob, a file, a folder of shards "
                         "or a list of them")
    first: dict[str, str] = {}  # each format found -> the first file of it, to name in errors
    for f in files:
        if is_compressed_name(f):
            raise compressed_shard_error(f, "a compressed shard (by its name)")
        first.setdefault(format_of_name(f) or sniff_format(f, storage), f)
    if len(first) != 1:
        # Name one file of each format: suffixes alone say nothing for TF-slim's names.
        shown = ", ".join(f"{path} is {_FORMAT_NAMES[fmt]}" for fmt, path in first.items())
        raise ValueError(f"shards must all be WebDataset tars or all TFRecord files; got a mix: {shown}")
    formats = set(first)
    keys = {"image_key": image_key, "label_key": label_key}
    if formats == {"webdataset"}:
        from gpufeed.datasets.shards.webdataset import WebDatasetShards

        return WebDatasetShards(files, storage, **keys)
    from gpufeed.datasets.shards.tfrecord import TFRecordShards

    return TFRecordShards(files, storage, **keys)


def read_manifest(folder: str | os.PathLike[str]) -> dict | None:
    """The manifest of a folder ``gpufeed convert`` wrote, or None."""
    path = Path(folder) / MANIFEST
    if not path.is_file():
        return None
    try:
        return json.loads(path.read_text())
    except json.JSONDecodeError as exc:
        raise ValueError(f"{path}: not a gpufeed manifest ({exc})") from None


def converted_format(path: object) -> str | None:
    """``"webdataset"``, ``"tfrecord"`` or ``"raw"`` for a folder ``gpufeed convert``
    wrote, else None."""
    if not isinstance(path, (str, os.PathLike)) or not os.path.isdir(path):
        return None
    manifest = read_manifest(path)
    return None if manifest is None else manifest.get("format")


def open_converted(folder: str | os.PathLike[str], storage: Storage = LOCAL, *,
                   image_key: str | Sequence[str] | None = None, label_key: str | None = None) -> SampleSource:
    """The sample source of a folder ``gpufeed convert`` wrote (its manifest names the
    format and the files); ``image_key`` and ``label_key`` as in :func:`open_shards`.

    Raises:
        ValueError: the manifest names an unknown format or no files, keys are given for a
            raw cache, or the conversion did not finish (:func:`check_finished`).
    """
    check_finished(folder)
    manifest = read_manifest(folder)
    fmt = None if manifest is None else manifest.get("format")
    if fmt == "raw":
        from gpufeed.datasets.shards.raw import RawCache

        if image_key is not None or label_key is not None:
            raise ValueError(f"{folder}: image_key / label_key name the members of WebDataset or TFRecord "
                             "shards; this folder is a raw cache (decoded pixels and labels.npy)")
        return RawCache(folder, storage)
    if fmt in ("webdataset", "tfrecord"):
        if not manifest.get("files"):
            raise ValueError(f"{Path(folder) / MANIFEST} lists no shard files: its conversion wrote no sample "
                             f"({manifest.get('skipped', 'every one')} skipped); convert a source with images "
                             "that decode")
        return open_shards([str(Path(folder) / f) for f in manifest["files"]], storage, image_key=image_key,
                           label_key=label_key)
    raise ValueError(f"{Path(folder) / MANIFEST}: unknown format {fmt!r} (webdataset, tfrecord or raw)")


# -- conversions that did not finish ----------------------------------------------------

def check_finished(folder: str | os.PathLike[str]) -> None:
    """Refuse a folder a ``gpufeed convert`` run is still writing or stopped writing (killed,
    a full disk): reading it would give some of the samples without a word.

    A folder is unfinished when its progress record (:data:`PROGRESS_FILE`) does not say
    ``complete``, or when it holds ``NAME.partial`` files (a shard being written) and no
    class subfolders (an ImageFolder tree is read whatever lies beside its classes). One
    ``stat`` and, with the record, one small read: no data is read.

    Raises:
        ValueError: the folder and how far the conversion got ("conversion not finished
            (N of M samples)") with the command that finishes it, or the ``.partial`` file.
    """
    text = os.fspath(folder)
    if not os.path.isdir(text):
        return
    _check_progress(text)
    with os.scandir(text) as entries:
        visible = [e for e in entries if not e.name.startswith(".")]
    if any(e.is_dir() for e in visible):
        return
    partial = sorted(e.name for e in visible if e.name.endswith(PARTIAL))
    if partial:
        raise _partial_error(os.path.join(text, partial[0]))


def _check_progress(folder: str) -> None:
    """Raise when ``folder`` holds a ``gpufeed convert`` progress record that is not complete."""
    path = os.path.join(folder, PROGRESS_FILE)
    if not os.path.isfile(path):
        return
    try:
        with open(path) as f:
            record = json.load(f)
    except (OSError, ValueError):
        record = {}
    if not isinstance(record, dict):
        record = {}
    if not record.get("complete"):
        raise ValueError(f"{folder}: {_unfinished(folder, record)}")


def _unfinished(folder: str, record: dict) -> str:
    """How far the conversion recorded in ``record`` got, and the command that finishes it."""
    settings = record.get("settings") if isinstance(record.get("settings"), dict) else {}
    total = settings.get("samples")
    done = record.get("next")
    if settings.get("format") == "raw":
        done = len(record.get("skipped", [])) + _raw_written(folder, len(record.get("good", [])))
    if isinstance(total, int) and total and done == total and record.get("written") == 0:
        return (f"conversion not finished: no image in its {total} samples decodes, so it wrote none; "
                "convert a source with images that decode")
    counts = f" ({done} of {total} samples)" if isinstance(done, int) and isinstance(total, int) else ""
    return (f"conversion not finished{counts}: re-run `{_convert_command(folder, settings)}` with the same SRC "
            "to finish it (what it wrote is kept)")


def _raw_written(folder: str, count: int) -> int:
    """Images a raw conversion has stored, from its ``done.npy`` (one bit each)."""
    import numpy as np

    from gpufeed.datasets.shards.raw import DONE

    try:
        return int(np.unpackbits(np.load(os.path.join(folder, DONE)), count=count).sum()) if count else 0
    except (OSError, ValueError):
        return 0


def _convert_command(folder: str, settings: dict) -> str:
    """The ``gpufeed convert`` command line of ``settings`` into ``folder`` (SRC for the source,
    which the record knows only by its digest)."""
    fmt = settings.get("format", "FORMAT")
    words = ["gpufeed", "convert", "SRC", shlex.quote(folder), "--format", str(fmt)]
    if fmt == "raw":
        if settings.get("raw_size", 256) != 256:
            words += ["--raw-size", str(settings["raw_size"])]
        if settings.get("raw_mode", "crop") != "crop":
            words += ["--raw-mode", str(settings["raw_mode"])]
    elif settings.get("shard_size", 256 * 2**20) != 256 * 2**20:
        words += ["--shard-size", str(settings["shard_size"])]
    if settings.get("seed", 0) != 0:
        words += ["--seed", str(settings["seed"])]
    if settings.get("shuffle", True) is False:
        words.append("--no-shuffle")
    return " ".join(words)


def _partial_error(path: str) -> ValueError:
    return ValueError(f"{path}: an unfinished shard (gpufeed convert writes NAME{PARTIAL} until a shard is complete, "
                      "then renames it), never read as one: finish the conversion that wrote it (re-run the same "
                      "`gpufeed convert`), or remove the file")
