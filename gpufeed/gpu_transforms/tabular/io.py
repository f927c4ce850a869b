"""Read and write tables as CSV, Parquet, Feather, pickle, HDF5 and JSON on any backend.

The format comes from ``format=`` or the file suffix; the backend is chosen once
(``"auto"`` prefers cuDF on a GPU, then polars). cuDF's GPU readers and writers are used for
Parquet, JSON and ORC. CSV is parsed on the CPU by Arrow's multi-threaded reader on every
backend, because it is the one reader that hands back each malformed line (so no row is
dropped without being counted and named); cuDF's reader would skip or fail silently.
Pickle and HDF5 exist only in pandas, so other backends go through it.

Pickle runs code while loading: read only pickles you wrote yourself.
"""

from __future__ import annotations

import csv
import io
import os
import warnings
from collections import defaultdict
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TextIO

import pandas as pd

from gpufeed.gpu_transforms.tabular.errors import (
    EmptyTableError,
    MalformedCSVError,
    MixedTypeError,
    UnknownFormatError,
)
from gpufeed.gpu_transforms.tabular.frames import Frame, backend_of, choose_backend, to_backend

#: Format name -> file suffixes it is recognised by.
FORMATS: dict[str, tuple[str, ...]] = {
    "csv": (".csv", ".csv.gz"),
    "parquet": (".parquet", ".pq"),
    "feather": (".feather", ".arrow", ".ipc"),
    "pickle": (".pkl", ".pickle"),
    "hdf5": (".h5", ".hdf5", ".hdf"),
    "json": (".json", ".jsonl", ".ndjson"),
}
_HDF_KEY = "table"
_MAX_LINES_IN_MESSAGE = 10


@dataclass
class ReadReport:
    """What a read did: rows kept, and every malformed line skipped (``(line, text)``)."""

    path: str
    format: str
    backend: str
    rows: int = 0
    bad_lines: list[tuple[int | None, str]] = field(default_factory=list)

    @property
    def rows_skipped(self) -> int:
        return len(self.bad_lines)


def detect_format(path: str | os.PathLike[str], format: str | None = None) -> str:
    """The storage format of ``path``: ``format`` when given, else from the suffix.

    Raises:
        UnknownFormatError: neither a known ``format`` nor a known suffix; names the file.

    Example:
        >>> detect_format("readings.parquet")
        'parquet'
    """
    if format is not None:
        if format not in FORMATS:
            raise UnknownFormatError(f"{os.fspath(path)}: unknown format {format!r}; known: {sorted(FORMATS)}")
        return format
    name = Path(path).name.lower()
    for fmt, suffixes in FORMATS.items():
        if name.endswith(suffixes):
            return fmt
    raise UnknownFormatError(
        f"{os.fspath(path)}: cannot tell the format from the suffix; pass format= one of {sorted(FORMATS)}"
    )


def _open_text(path: Path) -> TextIO:
    """The file as text, decompressed by suffix the way Arrow's CSV reader does it (.gz,
    .bz2, .lz4, .zst); ``newline=""`` as the csv module needs."""
    import pyarrow as pa

    return io.TextIOWrapper(pa.input_stream(str(path), compression="detect"), encoding="utf-8",
                            errors="replace", newline="")


def _text_lines(path: Path) -> Iterator[tuple[int, str]]:
    """``(line number, line)`` of a (possibly compressed) text file."""
    with _open_text(path) as fh:
        yield from enumerate(fh, start=1)


def _locate_lines(path: Path, bad: list[tuple[int | None, str]]) -> list[tuple[int | None, str]]:
    """Fill in physical line numbers Arrow's threaded parser could not give (bad rows only)."""
    if all(n is not None for n, _ in bad):
        return bad
    pending: dict[str, list[int]] = defaultdict(list)
    for i, (_, text) in enumerate(bad):
        pending[text].append(i)
    located = list(bad)
    for lineno, line in _text_lines(path):
        slots = pending.get(line.rstrip("\r\n"))
        if slots:
            located[slots.pop(0)] = (lineno, line.rstrip("\r\n"))
    return located


def _line_of_row(path: Path, row: int, skipped: list[tuple[int | None, str]]) -> int | None:
    """The file line where data row ``row`` (0-based, as Arrow counts rows) starts.

    Records are read as the csv module reads them (a quoted field may span lines); blank
    lines, the header (the first non-blank record) and the malformed lines skipped before
    the row are not rows. None when the file has fewer rows (the caller then names the row).
    Only run on the error path.
    """
    skip = {n for n, _ in skipped if n is not None}
    seen, end, header = -1, 0, True
    with _open_text(path) as fh:
        reader = csv.reader(fh)
        for record in reader:
            start, end = end + 1, reader.line_num
            if not record:
                continue
            if header:
                header = False
            elif start not in skip:
                seen += 1
                if seen == row:
                    return start
    return None


def _read_csv_arrow(path: Path, on_bad_lines: str, report: ReadReport) -> Any:
    import pyarrow.csv as pacsv
    from pyarrow import ArrowInvalid

    bad: list[tuple[int | None, str]] = []

    def handler(row: Any) -> str:
        bad.append((row.number, row.text))
        return "skip"

    try:
        table = pacsv.read_csv(path, parse_options=pacsv.ParseOptions(invalid_row_handler=handler))
    except ArrowInvalid as exc:
        if "Empty CSV file" in str(exc):
            raise EmptyTableError(f"{path}: the CSV file is empty (not even a header line)") from exc
        raise MalformedCSVError(f"{path}: cannot parse CSV: {exc}") from exc
    if bad:
        bad = sorted(_locate_lines(path, bad), key=lambda b: (b[0] is None, b[0] or 0))
        shown = "; ".join(f"line {n}: {t[:80]!r}" for n, t in bad[:_MAX_LINES_IN_MESSAGE])
        more = f" (and {len(bad) - _MAX_LINES_IN_MESSAGE} more)" if len(bad) > _MAX_LINES_IN_MESSAGE else ""
        if on_bad_lines == "error":
            raise MalformedCSVError(
                f"{path}: {len(bad)} malformed line(s) with the wrong number of fields: {shown}{more}. "
                "Pass on_bad_lines='report' to skip them and get them in the read report.",
                lines=bad,
            )
        report.bad_lines = bad
    return table


def _check_mixed_types(table: Any, path: Path, skipped: list[tuple[int | None, str]]) -> None:
    """Reject text columns that hold numbers and non-numbers alike (a typo in a numeric column)."""
    import pyarrow as pa
    import pyarrow.compute as pc

    for name, column in zip(table.column_names, table.columns, strict=True):
        if not (pa.types.is_string(column.type) or pa.types.is_large_string(column.type)):
            continue
        distinct = pd.Series(pc.unique(column).to_pylist(), dtype=object).dropna()
        distinct = distinct[distinct.str.strip() != ""]
        numeric = pd.to_numeric(distinct, errors="coerce").notna()
        if numeric.any() and not numeric.all():
            odd = distinct[~numeric] if numeric.mean() >= 0.5 else distinct[numeric]
            example = str(odd.iloc[0])
            row = pc.index(column, example).as_py()
            line = _line_of_row(path, row, skipped)
            where = f"on line {line}" if line is not None else f"in data row {row + 1}"
            raise MixedTypeError(
                f"{path}: column {name!r} mixes numbers and text ({int(numeric.sum())} numeric and "
                f"{int((~numeric).sum())} non-numeric distinct values); e.g. {example!r} {where}. "
                "Fix the values, or pass mixed_types='keep' to read the column as text."
            )


def read_table_with_report(
    path: str | os.PathLike[str], *, format: str | None = None, backend: str = "auto",
    on_bad_lines: str = "error", mixed_types: str = "error",
) -> tuple[Frame, ReadReport]:
    """Read a table and say what was read: like :func:`read_table`, plus a :class:`ReadReport`.

    Returns:
        ``(frame, report)``; ``report.bad_lines`` lists every skipped CSV line.
    """
    if on_bad_lines not in ("error", "report"):
        raise ValueError(f"on_bad_lines must be 'error' or 'report', got {on_bad_lines!r}")
    if mixed_types not in ("error", "keep"):
        raise ValueError(f"mixed_types must be 'error' or 'keep', got {mixed_types!r}")
    src = Path(path)
    fmt = detect_format(src, format)
    if not src.exists():
        raise FileNotFoundError(f"{src}: no such file")
    target = choose_backend(backend).name
    report = ReadReport(str(src), fmt, target)
    if fmt == "csv":
        table = _read_csv_arrow(src, on_bad_lines, report)
        if mixed_types == "error":
            _check_mixed_types(table, src, report.bad_lines)
        frame = _from_arrow(table, target)
    elif fmt == "json":
        frame = _read_json(src, target, mixed_types)
    elif fmt == "parquet":
        frame = _native_reader(target, "read_parquet")(src)
    elif fmt == "feather":
        frame = pd.read_feather(src) if target != "polars" else _native_reader("polars", "read_ipc")(src)
    elif fmt == "pickle":
        frame = pd.read_pickle(src)
    else:  # hdf5
        frame = pd.read_hdf(src, key=_HDF_KEY)
    frame = to_backend(frame, target) if backend_of(frame) != target else frame
    report.rows = len(frame)
    return frame, report


def read_table(
    path: str | os.PathLike[str], *, format: str | None = None, backend: str = "auto",
    on_bad_lines: str = "error", mixed_types: str = "error",
) -> Frame:
    """Read a CSV, Parquet, Feather, pickle, HDF5 or JSON-lines table onto ``backend``.

    Args:
        path: the file; its suffix gives the format unless ``format`` is passed.
        format: one of :data:`FORMATS` (``csv``, ``parquet``, ``feather``, ``pickle``,
            ``hdf5``, ``json``).
        backend: ``"auto" | "cudf" | "polars" | "pandas"``.
        on_bad_lines: CSV lines with the wrong number of fields: ``"error"`` raises
            :class:`MalformedCSVError` naming the lines; ``"report"`` skips them and warns
            with their line numbers (use :func:`read_table_with_report` to get them back).
        mixed_types: ``"error"`` raises :class:`MixedTypeError` for a CSV/JSON text column
            mixing numbers and words; ``"keep"`` leaves it as text.

    Returns:
        A native frame of the chosen backend.

    Raises:
        UnknownFormatError, MalformedCSVError, MixedTypeError, EmptyTableError, FileNotFoundError.

    Example:
        >>> df = read_table("readings.csv", backend="pandas", on_bad_lines="report")  # doctest: +SKIP
    """
    frame, report = read_table_with_report(
        path, format=format, backend=backend, on_bad_lines=on_bad_lines, mixed_types=mixed_types
    )
    if report.bad_lines:
        lines = ", ".join(str(n) for n, _ in report.bad_lines[:_MAX_LINES_IN_MESSAGE])
        warnings.warn(
            f"{report.path}: skipped {report.rows_skipped} malformed line(s) (lines {lines}"
            f"{' ...' if report.rows_skipped > _MAX_LINES_IN_MESSAGE else ''}); kept {report.rows} rows",
            stacklevel=2,
        )
    return frame


def _native_reader(backend: str, name: str) -> Any:
    if backend == "cudf":
        import cudf

        return getattr(cudf, name)
    if backend == "polars":
        import polars as pl

        return getattr(pl, name)
    return getattr(pd, name)


def _from_arrow(table: Any, backend: str) -> Frame:
    if backend == "polars":
        import polars as pl

        return pl.from_arrow(table)
    if backend == "cudf":
        import cudf

        return cudf.DataFrame.from_arrow(table)
    return table.to_pandas()


def _read_json(path: Path, backend: str, mixed_types: str) -> Frame:
    lines = path.suffix.lower() in (".jsonl", ".ndjson") or _looks_like_json_lines(path)
    if backend == "cudf":
        import cudf

        return cudf.read_json(path, lines=lines)
    frame = pd.read_json(path, lines=lines, orient=None if lines else "records", dtype=False)
    if mixed_types == "error":
        for name in frame.columns:
            col = frame[name]
            if col.dtype == object:
                kinds = {type(v) for v in col.dropna()}
                if str in kinds and kinds & {int, float}:
                    idx = next(i for i, v in enumerate(col) if isinstance(v, str))
                    raise MixedTypeError(
                        f"{path}: column {name!r} mixes numbers and text; e.g. {col.iloc[idx]!r} in record {idx + 1}"
                    )
    return frame


def _looks_like_json_lines(path: Path) -> bool:
    with open(path, encoding="utf-8", errors="replace") as fh:
        return fh.read(1).lstrip().startswith("{")


def write_table(df: Frame, path: str | os.PathLike[str], *, format: str | None = None) -> Path:
    """Write ``df`` (pandas, polars or cuDF) in the format given or implied by ``path``.

    JSON is written as JSON lines (one record per line), the layout GPU and streaming
    readers expect; HDF5 uses the key ``"table"``; CSV has no index column.

    Args:
        df: the frame.
        path: destination.
        format: overrides the suffix (see :data:`FORMATS`).

    Returns:
        ``path`` as a :class:`~pathlib.Path`.

    Example:
        >>> write_table(df, tmp_path / "readings.parquet")  # doctest: +SKIP
    """
    out = Path(path)
    fmt = detect_format(out, format)
    backend = backend_of(df)
    out.parent.mkdir(parents=True, exist_ok=True)
    if backend == "polars" and fmt in ("csv", "parquet", "feather", "json"):
        {"csv": df.write_csv, "parquet": df.write_parquet, "feather": df.write_ipc,
         "json": df.write_ndjson}[fmt](out)
        return out
    if backend == "cudf" and fmt in ("csv", "parquet", "json"):
        if fmt == "json":
            df.to_json(out, orient="records", lines=True)
        else:
            getattr(df, f"to_{fmt}")(out, index=False)
        return out
    pdf = df if backend == "pandas" else df.to_pandas()
    if fmt == "csv":
        pdf.to_csv(out, index=False)
    elif fmt == "parquet":
        pdf.to_parquet(out, index=False)
    elif fmt == "feather":
        pdf.reset_index(drop=True).to_feather(out)
    elif fmt == "pickle":
        pdf.to_pickle(out)
    elif fmt == "hdf5":
        pdf.to_hdf(out, key=_HDF_KEY, mode="w", format="fixed")
    else:
        pdf.to_json(out, orient="records", lines=True, date_format="iso")
    return out
