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

import codecs
import csv
import io
import json
import os
import pickle
import re
import sys
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
    TabularError,
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
#: A JSON text column whose every value matches this is read back as datetimes: JSON has no
#: datetime type, and this is how both writers (polars' and pandas' ISO format) store one.
#: Date and time are both required, so plain dates, codes and free text stay text.
_ISO_DATETIME = re.compile(r"\d{4}-\d{2}-\d{2}[T ]\d{2}:\d{2}:\d{2}(?:\.\d{1,9})?(?:Z|[+-]\d{2}:?\d{2})?")
_ISO_OFFSET = r"(?:Z|[+-]\d{2}:?\d{2})$"


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


def _open_text(path: Path, encoding: str = "utf-8") -> TextIO:
    """The file as text, decompressed by suffix the way Arrow's CSV reader does it (.gz,
    .bz2, .lz4, .zst); ``newline=""`` as the csv module needs."""
    import pyarrow as pa

    return io.TextIOWrapper(pa.input_stream(str(path), compression="detect"), encoding=encoding,
                            errors="replace", newline="")


def _text_lines(path: Path, encoding: str = "utf-8") -> Iterator[tuple[int, str]]:
    """``(line number, line)`` of a (possibly compressed) text file."""
    with _open_text(path, encoding) as fh:
        yield from enumerate(fh, start=1)


def _first_undecodable_line(path: Path, encoding: str) -> tuple[int, bytes] | None:
    """``(line number, raw line)`` of the first line ``encoding`` cannot decode (error path only)."""
    import pyarrow as pa

    with pa.input_stream(str(path), compression="detect") as raw:
        for lineno, line in enumerate(io.BufferedReader(raw), start=1):
            try:
                line.decode(encoding)
            except UnicodeDecodeError:
                return lineno, line.rstrip(b"\r\n")
    return None


def _locate_lines(
    path: Path, bad: list[tuple[int | None, str]], encoding: str = "utf-8"
) -> list[tuple[int | None, str]]:
    """Fill in physical line numbers Arrow's threaded parser could not give (bad rows only)."""
    if all(n is not None for n, _ in bad):
        return bad
    pending: dict[str, list[int]] = defaultdict(list)
    for i, (_, text) in enumerate(bad):
        pending[text].append(i)
    located = list(bad)
    for lineno, line in _text_lines(path, encoding):
        slots = pending.get(line.rstrip("\r\n"))
        if slots:
            located[slots.pop(0)] = (lineno, line.rstrip("\r\n"))
    return located


def _line_of_row(
    path: Path, row: int, skipped: list[tuple[int | None, str]], sep: str = ",", encoding: str = "utf-8"
) -> int | None:
    """The file line where data row ``row`` (0-based, as Arrow counts rows) starts.

    Records are read as the csv module reads them (a quoted field may span lines); blank
    lines, the header (the first non-blank record) and the malformed lines skipped before
    the row are not rows. None when the file has fewer rows (the caller then names the row).
    Only run on the error path.
    """
    skip = {n for n, _ in skipped if n is not None}
    seen, end, header = -1, 0, True
    with _open_text(path, encoding) as fh:
        reader = csv.reader(fh, delimiter=sep)
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


def _csv_options(path: Path, sep: str | None, encoding: str | None) -> tuple[str, str]:
    """Checked ``(delimiter, codec name)``; UTF-8 unless ``encoding`` says otherwise."""
    sep = "," if sep is None else sep
    if not isinstance(sep, str) or len(sep) != 1 or sep in "\r\n\"":
        raise ValueError(f"{path}: sep must be one character other than a quote or line end, got {sep!r}")
    try:
        name = codecs.lookup("utf-8" if encoding is None else encoding).name
    except LookupError as exc:
        raise ValueError(f"{path}: unknown encoding {encoding!r}") from exc
    return sep, name


def _read_csv_arrow(path: Path, on_bad_lines: str, report: ReadReport, sep: str, encoding: str) -> Any:
    import pyarrow as pa
    import pyarrow.csv as pacsv
    from pyarrow import ArrowInvalid

    bad: list[tuple[int | None, str]] = []

    def handler(row: Any) -> str:
        bad.append((row.number, row.text))
        return "skip"

    # Arrow decodes UTF-8 natively; any other codec is transcoded through Python.
    read_options = pacsv.ReadOptions(encoding="utf8" if encoding == "utf-8" else encoding)
    # strings_can_be_null: an empty field (quoted or not) and the usual NA spellings are
    # missing in text columns too, as pandas.read_csv reads them; by default Arrow keeps
    # them as text there, so a missing value written as an empty field came back as "".
    convert_options = pacsv.ConvertOptions(strings_can_be_null=True)
    try:
        table = pacsv.read_csv(path, read_options=read_options, convert_options=convert_options,
                               parse_options=pacsv.ParseOptions(delimiter=sep, invalid_row_handler=handler))
    except ArrowInvalid as exc:
        if "Empty CSV file" in str(exc):
            raise EmptyTableError(f"{path}: the CSV file is empty (not even a header line)") from exc
        raise MalformedCSVError(f"{path}: cannot parse CSV: {exc}") from exc
    except UnicodeError as exc:  # raised by the Python codec while transcoding
        raise MalformedCSVError(
            f"{path}: cannot decode the file as {encoding} ({exc}); pass the file's encoding=, "
            "e.g. encoding='latin-1' or 'cp1252'"
        ) from exc
    # Arrow reads text that is not valid UTF-8 as a binary column instead of failing; a CSV
    # has no binary type, so such a column always means the wrong encoding.
    binary = [n for n, f in zip(table.column_names, table.schema, strict=True)
              if pa.types.is_binary(f.type) or pa.types.is_large_binary(f.type)]
    if binary:
        first = _first_undecodable_line(path, encoding)
        where = f" (first on line {first[0]}: {first[1][:80]!r})" if first else ""
        raise MalformedCSVError(
            f"{path}: column(s) {binary} are not valid {encoding}{where}; pass the file's encoding=, "
            "e.g. encoding='latin-1' or 'cp1252'"
        )
    names = table.column_names
    duplicated = sorted({n for n in names if names.count(n) > 1})
    if duplicated:
        # pandas would rename them (a, a.1) and polars refuse: one clear error on every backend.
        raise MalformedCSVError(f"{path}: the header names column(s) {duplicated} more than once; "
                                "give every column its own name")
    if bad:
        bad = sorted(_locate_lines(path, bad, encoding), key=lambda b: (b[0] is None, b[0] or 0))
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


def _check_mixed_types(
    table: Any, path: Path, skipped: list[tuple[int | None, str]], sep: str = ",", encoding: str = "utf-8"
) -> None:
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
            line = _line_of_row(path, row, skipped, sep, encoding)
            where = f"on line {line}" if line is not None else f"in data row {row + 1}"
            raise MixedTypeError(
                f"{path}: column {name!r} mixes numbers and text ({int(numeric.sum())} numeric and "
                f"{int((~numeric).sum())} non-numeric distinct values); e.g. {example!r} {where}. "
                "Fix the values, or pass mixed_types='keep' to read the column as text."
            )


def read_table_with_report(
    path: str | os.PathLike[str], *, format: str | None = None, backend: str = "auto",
    on_bad_lines: str = "error", mixed_types: str = "error", sep: str | None = None,
    encoding: str | None = None,
) -> tuple[Frame, ReadReport]:
    """Read a table and say what was read: like :func:`read_table`, plus a :class:`ReadReport`.

    Args:
        path, format, backend, on_bad_lines, mixed_types, sep, encoding: as in :func:`read_table`.

    Returns:
        ``(frame, report)``; ``report.bad_lines`` lists every skipped CSV line.

    Example:
        >>> frame, report = read_table_with_report("readings.csv", on_bad_lines="report")  # doctest: +SKIP
        >>> report.bad_lines  # doctest: +SKIP
        [(3, '4,5')]
    """
    if on_bad_lines not in ("error", "report"):
        raise ValueError(f"on_bad_lines must be 'error' or 'report', got {on_bad_lines!r}")
    if mixed_types not in ("error", "keep"):
        raise ValueError(f"mixed_types must be 'error' or 'keep', got {mixed_types!r}")
    src = Path(path)
    fmt = detect_format(src, format)
    if fmt != "csv" and (sep is not None or encoding is not None):
        raise ValueError(f"{src}: sep= and encoding= apply to CSV files only, not {fmt}")
    if not src.exists():
        raise FileNotFoundError(f"{src}: no such file")
    target = choose_backend(backend).name
    report = ReadReport(str(src), fmt, target)
    if fmt == "csv":
        delimiter, codec = _csv_options(src, sep, encoding)
        table = _read_csv_arrow(src, on_bad_lines, report, delimiter, codec)
        if mixed_types == "error":
            _check_mixed_types(table, src, report.bad_lines, delimiter, codec)
        frame = _from_arrow(table, target)
    else:
        frame = _read_other(src, fmt, target, mixed_types)
    frame = to_backend(frame, target) if backend_of(frame) != target else frame
    report.rows = len(frame)
    return frame, report


def read_table(
    path: str | os.PathLike[str], *, format: str | None = None, backend: str = "auto",
    on_bad_lines: str = "error", mixed_types: str = "error", sep: str | None = None,
    encoding: str | None = None,
) -> Frame:
    """Read a CSV, Parquet, Feather, pickle, HDF5 or JSON-lines table onto ``backend``.

    In CSV files an empty field (quoted or not) and the usual NA spellings (``NA``,
    ``null``, ``NaN``, ...) are missing values in every column, as ``pandas.read_csv``
    reads them. JSON has no datetime type: a JSON text column whose every value is an ISO
    8601 date and time (``2024-01-01 10:00:00``, ``...T10:00:00.5+01:00``) is read as
    datetimes, in UTC when the values carry an offset.

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
        sep: CSV only: the one-character field delimiter (default ``","``; e.g. ``";"``, ``"\\t"``).
        encoding: CSV only: the text encoding (default UTF-8; e.g. ``"latin-1"``, ``"cp1252"``).
            A file that is not valid in it raises :class:`MalformedCSVError` naming the line.

    Returns:
        A native frame of the chosen backend.

    Raises:
        UnknownFormatError, MalformedCSVError, MixedTypeError, EmptyTableError (an empty file
        of any format), TabularError (a file its format's reader cannot parse), FileNotFoundError;
        all name the file.

    Example:
        >>> df = read_table("readings.csv", backend="pandas", on_bad_lines="report")  # doctest: +SKIP
        >>> df = read_table("export.csv", sep=";", encoding="cp1252")  # doctest: +SKIP
    """
    frame, report = read_table_with_report(
        path, format=format, backend=backend, on_bad_lines=on_bad_lines, mixed_types=mixed_types,
        sep=sep, encoding=encoding,
    )
    if report.bad_lines:
        lines = ", ".join(str(n) for n, _ in report.bad_lines[:_MAX_LINES_IN_MESSAGE])
        warnings.warn(
            f"{report.path}: skipped {report.rows_skipped} malformed line(s) (lines {lines}"
            f"{' ...' if report.rows_skipped > _MAX_LINES_IN_MESSAGE else ''}); kept {report.rows} rows",
            stacklevel=2,
        )
    return frame


def _reader_errors() -> tuple[type[BaseException], ...]:
    """What the non-CSV readers raise for a file they cannot parse (not I/O or memory errors):
    Arrow's errors (ArrowInvalid is a ValueError), polars', pickle's, and tables' HDF5ExtError
    (a RuntimeError); pandas raises KeyError for an HDF5 file without our key."""
    errors: list[type[BaseException]] = [ValueError, EOFError, pickle.UnpicklingError, RuntimeError, KeyError]
    if "pyarrow" in sys.modules:
        from pyarrow import ArrowException

        errors.append(ArrowException)
    if "polars" in sys.modules:
        from polars.exceptions import PolarsError

        errors.append(PolarsError)
    return tuple(errors)


def _read_other(src: Path, fmt: str, target: str, mixed_types: str) -> Frame:
    """Read a non-CSV file; an empty or unparsable one raises an error that names it."""
    if _is_blank(src):
        # Every reader fails differently on an empty file (pyarrow's ArrowInvalid, polars'
        # ComputeError without the name, pandas' "Expected object or value") or, for JSON
        # lines, returns a 0x0 frame: one clear error instead, as for an empty CSV.
        raise EmptyTableError(f"{src}: the {fmt} file is empty")
    try:
        if fmt == "json":
            return _read_json(src, target, mixed_types)
        if fmt == "parquet":
            return _native_reader(target, "read_parquet")(src)
        if fmt == "feather":
            if target == "polars":
                import polars as pl
                import pyarrow.feather as pf

                # pandas writes a categorical's missing values as dictionary index -1 under
                # a null bit; polars' own IPC reader rejects that ("dictionary key must fit
                # in a usize"), while Arrow reads it and polars takes Arrow's table as is.
                return pl.from_arrow(pf.read_table(src))
            return pd.read_feather(src)
        if fmt == "pickle":
            return pd.read_pickle(src)
        return pd.read_hdf(src, key=_HDF_KEY)
    except TabularError:
        raise
    except _reader_errors() as exc:
        detail = (str(exc).strip().splitlines() or [""])[0][:200]
        raise TabularError(f"{src}: cannot read it as {fmt} ({type(exc).__name__}: {detail})") from exc


def _is_blank(path: Path) -> bool:
    """No bytes, or only whitespace (an empty JSON file is often a lone newline)."""
    if path.stat().st_size == 0:
        return True
    with open(path, "rb") as fh:
        while chunk := fh.read(1 << 20):
            if chunk.strip():
                return False
    return True


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
    try:
        # precise_float: the default parser can change a float64 in its last bit, so a
        # write/read round trip would not be exact. dtype=False: no guessing of types
        # (pandas would otherwise turn columns named like dates into datetimes).
        frame = pd.read_json(path, lines=lines, orient=None if lines else "records", dtype=False,
                             precise_float=True)
    except ValueError as exc:
        raise TabularError(f"{path}: not valid JSON{_json_error_location(path, lines)} ({exc})") from exc
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
    return _parse_iso_datetimes(frame)


def _json_error_location(path: Path, lines: bool) -> str:
    """``" on line N: 'text'"`` for the first line Python's json module rejects (error path only)."""
    with open(path, encoding="utf-8", errors="replace") as fh:
        if not lines:
            try:
                json.load(fh)
            except json.JSONDecodeError as exc:
                return f" on line {exc.lineno}"
            return ""
        for lineno, line in enumerate(fh, start=1):
            if not line.strip():
                continue
            try:
                json.loads(line)
            except json.JSONDecodeError:
                return f" on line {lineno}: {line.rstrip()[:80]!r}"
    return ""


def _parse_iso_datetimes(frame: pd.DataFrame) -> pd.DataFrame:
    """Text columns whose every value is an ISO 8601 date-time, as datetimes (UTC with offsets)."""
    for name in frame.columns:
        col = frame[name]
        if not (col.dtype == object or pd.api.types.is_string_dtype(col.dtype)):
            continue
        values = col.dropna()
        # The first value rules most columns out before the whole column is scanned.
        if values.empty or not all(isinstance(v, str) for v in values.iloc[:1]):
            continue
        if not _ISO_DATETIME.fullmatch(values.iloc[0]):
            continue
        text = values.astype(str)
        if not text.str.fullmatch(_ISO_DATETIME.pattern).all():
            continue
        offsets = text.str.contains(_ISO_OFFSET)
        if offsets.any() and not offsets.all():
            continue  # some with and some without a zone: no one reading is right, keep the text
        try:
            frame[name] = pd.to_datetime(col, format="ISO8601", utc=bool(offsets.all()))
        except (ValueError, OverflowError):
            continue  # e.g. month 13: not dates after all
    return frame


def _looks_like_json_lines(path: Path) -> bool:
    with open(path, encoding="utf-8", errors="replace") as fh:
        return fh.read(1).lstrip().startswith("{")


def _write_json_lines(pdf: pd.DataFrame, out: Path) -> None:
    """JSON lines from pandas, through polars' writer when the frame converts.

    pandas' ``to_json`` keeps at most 15 significant digits, so float64 values would not
    survive a round trip; polars writes the shortest text that reads back to the same
    float, and datetimes as ISO 8601 at their own precision.
    """
    import polars as pl
    from pyarrow import ArrowException

    try:
        frame = pl.from_pandas(pdf.reset_index(drop=True))
    except (ArrowException, TypeError, ValueError):
        # Columns polars cannot type (e.g. Python objects mixing numbers and text): pandas'
        # writer still writes them, at its best float precision.
        pdf.to_json(out, orient="records", lines=True, date_format="iso", date_unit="ns", double_precision=15)
        return
    frame.write_ndjson(out)


def write_table(
    df: Frame, path: str | os.PathLike[str], *, format: str | None = None, sep: str | None = None
) -> Path:
    """Write ``df`` (pandas, polars or cuDF) in the format given or implied by ``path``.

    JSON is written as JSON lines (one record per line), the layout GPU and streaming
    readers expect, with floats written exactly and datetimes as ISO 8601 text; HDF5 uses
    the key ``"table"`` (and pandas' ``"table"`` layout when a column is categorical, which
    the default fixed layout cannot store); CSV has no index column.

    Args:
        df: the frame.
        path: destination.
        format: overrides the suffix (see :data:`FORMATS`).
        sep: CSV only: the one-character field delimiter (default ``","``).

    Returns:
        ``path`` as a :class:`~pathlib.Path`.

    Example:
        >>> write_table(df, tmp_path / "readings.parquet")  # doctest: +SKIP
        >>> write_table(df, tmp_path / "readings.csv", sep=";")  # doctest: +SKIP
    """
    out = Path(path)
    fmt = detect_format(out, format)
    if fmt == "csv":
        sep, _ = _csv_options(out, sep, None)
    elif sep is not None:
        raise ValueError(f"{out}: sep= applies to CSV files only, not {fmt}")
    backend = backend_of(df)
    out.parent.mkdir(parents=True, exist_ok=True)
    if backend == "polars" and fmt in ("csv", "parquet", "feather", "json"):
        if fmt == "csv":
            df.write_csv(out, separator=sep)
        else:
            {"parquet": df.write_parquet, "feather": df.write_ipc, "json": df.write_ndjson}[fmt](out)
        return out
    if backend == "cudf" and fmt in ("csv", "parquet", "json"):
        if fmt == "json":
            df.to_json(out, orient="records", lines=True)
        elif fmt == "csv":
            df.to_csv(out, index=False, sep=sep)
        else:
            df.to_parquet(out, index=False)
        return out
    pdf = df if backend == "pandas" else df.to_pandas()
    if fmt == "csv":
        pdf.to_csv(out, index=False, sep=sep)
    elif fmt == "parquet":
        pdf.to_parquet(out, index=False)
    elif fmt == "feather":
        pdf.reset_index(drop=True).to_feather(out)
    elif fmt == "pickle":
        pdf.to_pickle(out)
    elif fmt == "hdf5":
        categorical = any(isinstance(t, pd.CategoricalDtype) for t in pdf.dtypes)
        pdf.to_hdf(out, key=_HDF_KEY, mode="w", format="table" if categorical else "fixed")
    else:
        _write_json_lines(pdf, out)
    return out
