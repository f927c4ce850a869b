"""Convert a table between storage formats (CSV, Parquet, Feather, pickle, HDF5, JSON lines).

A thin pairing of :func:`~gpufeed.gpu_transforms.tabular.io.read_table` and
:func:`~gpufeed.gpu_transforms.tabular.io.write_table`, so conversions get the same
bad-line reporting and format detection as everything else.
"""

from __future__ import annotations

import os
from pathlib import Path

from gpufeed.gpu_transforms.tabular.io import ReadReport, read_table_with_report, write_table


def convert(
    src: str | os.PathLike[str], dst: str | os.PathLike[str], *, src_format: str | None = None,
    dst_format: str | None = None, backend: str = "auto", on_bad_lines: str = "error",
) -> tuple[Path, ReadReport]:
    """Read ``src`` and write it to ``dst`` in another format.

    Args:
        src: input file (format from its suffix unless ``src_format``).
        dst: output file (format from its suffix unless ``dst_format``).
        backend: backend that holds the table in between (``"auto"``: cuDF on a GPU).
        on_bad_lines: ``"error"`` or ``"report"`` for malformed CSV lines (see ``read_table``).

    Returns:
        ``(dst path, read report)``; the report counts rows kept and lines skipped.

    Example:
        >>> convert("readings.csv", "readings.parquet", backend="polars")  # doctest: +SKIP
    """
    frame, report = read_table_with_report(src, format=src_format, backend=backend, on_bad_lines=on_bad_lines)
    return write_table(frame, dst, format=dst_format), report
