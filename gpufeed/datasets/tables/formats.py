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
    """The :class:`TableFormat` of ``path``: ``format`` when given, else from the suffix.

    Raises:
        UnknownFormatError: neither a known ``format`` nor a known suffix; names the file.
    """
    if format is not None:
        if format not in FORMATS:
            raise UnknownFormatError(f"{os.fspath(path)}: unknown format {format!r}; known: {sorted(FORMATS)}")
        return FORMATS[format]
    name = Path(path).name.lower()
    for fmt in FORMATS.values():
        if name.endswith(fmt.suffixes):
            return fmt
    raise UnknownFormatError(
        f"{os.fspath(path)}: cannot tell the format from the suffix; pass format= one of {sorted(FORMATS)}"
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
