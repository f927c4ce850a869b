"""The registry of table formats, and how a file's format is told.

A format is one :class:`~gpufeed.datasets.tables.base.TableFormat` entry here: its
suffixes, and its reader and writer per backend. Supported: CSV (:mod:`.csv`), JSON
(:mod:`.json`), Parquet, Feather, pickle and HDF5 (:mod:`.binary`).
"""

from __future__ import annotations

import os
from pathlib import Path

from gpufeed.datasets.tables.base import TableFormat
from gpufeed.datasets.tables.binary import FEATHER, HDF5, PARQUET, PICKLE
from gpufeed.datasets.tables.csv import CSV
from gpufeed.datasets.tables.json import JSON
from gpufeed.gpu_transforms.tabular.errors import UnknownFormatError

#: Format name -> :class:`TableFormat`; suffixes are matched in this order.
FORMATS: dict[str, TableFormat] = {f.name: f for f in (CSV, PARQUET, FEATHER, PICKLE, HDF5, JSON)}


def table_format(path: str | os.PathLike[str], format: str | None = None) -> TableFormat:
    """The :class:`TableFormat` of ``path``: ``format`` when given, else from the suffix; for
    a directory without a known suffix, from the suffixes of the data files in it.

    Raises:
        UnknownFormatError: neither a known ``format`` nor a known suffix; names the file.
    """
    if format is not None:
        if format not in FORMATS:
            raise UnknownFormatError(f"{os.fspath(path)}: unknown format {format!r}; known: {sorted(FORMATS)}")
        return FORMATS[format]
    name = Path(path).name.lower()
    for fmt in FORMATS.values():
        if name.endswith(fmt.suffixes):  # also a directory named so (Spark's ``out.parquet/``)
            return fmt
    if Path(path).is_dir():
        return _directory_format(Path(path))
    raise UnknownFormatError(
        f"{os.fspath(path)}: cannot tell the format from the suffix; pass format= one of {sorted(FORMATS)}"
    )


def _directory_format(path: Path) -> TableFormat:
    """The format of a dataset directory: the one format its data files' suffixes name.

    Files and folders whose names start with ``_`` or ``.`` (``_SUCCESS``, ``.crc``
    checksums) are not data, as Spark and Arrow skip them.

    Raises:
        UnknownFormatError: no data file with a known suffix, or files of several formats.
    """
    found: dict[str, int] = {}
    unknown: list[str] = []
    for root, dirs, files in os.walk(path):
        dirs[:] = [d for d in dirs if not d.startswith(("_", "."))]
        for file in files:
            if file.startswith(("_", ".")):
                continue
            fmt = next((f for f in FORMATS.values() if file.lower().endswith(f.suffixes)), None)
            if fmt is None:
                unknown.append(os.path.relpath(os.path.join(root, file), path))
            else:
                found[fmt.name] = found.get(fmt.name, 0) + 1
    if len(found) == 1 and not unknown:
        return FORMATS[next(iter(found))]
    if not found and not unknown:
        raise UnknownFormatError(f"{path}: the directory holds no data files (names starting with _ or . are skipped)")
    detail = f"files of formats {found}" if found else "no file with a known suffix"
    if unknown:
        detail += f", and files without a known suffix (e.g. {unknown[0]!r})"
    raise UnknownFormatError(
        f"{path}: cannot tell the format of the directory: it holds {detail}; pass format='parquet' "
        "for a Parquet dataset whose files have no suffix, or read the files one by one"
    )


def detect_format(path: str | os.PathLike[str], format: str | None = None) -> str:
    """The name of ``path``'s storage format: ``format`` when given, else from the suffix.

    Raises:
        UnknownFormatError: neither a known ``format`` nor a known suffix; names the file.

    Example:
        >>> detect_format("readings.parquet")
        'parquet'
    """
    return table_format(path, format).name
