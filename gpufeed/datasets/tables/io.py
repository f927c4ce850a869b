"""Read and write tables as CSV, Parquet, Feather, pickle, HDF5 and JSON on any backend.

The format comes from ``format=`` or the file suffix (:mod:`.formats`); the backend is
chosen once (``"auto"`` prefers cuDF on a GPU, then polars). Each format reads and writes
with a backend's own functions where they give what pandas gives (cuDF's GPU reader and
writer for Parquet, polars' for Parquet, Feather, CSV and JSON; cuDF writes CSV and reads
and writes JSON through polars) and through pandas otherwise.

Pickle runs code while loading: read only pickles you wrote yourself.
"""

from __future__ import annotations

import numbers
import os
import shutil
import tempfile
import warnings
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

from gpufeed.backends import choose_dataframe_backend
from gpufeed.datasets.tables.base import (
    MAX_LINES_IN_MESSAGE,
    NULLABLE_INTS,
    ReadOptions,
    ReadReport,
    WriteOptions,
    to_backend_naming,
)
from gpufeed.datasets.tables.formats import table_format
from gpufeed.gpu_transforms.tabular.errors import TabularError
from gpufeed.gpu_transforms.tabular.frames import Frame, backend_of, repeated
from gpufeed.policies import MixedTypes, OnError


def read_table_with_report(
    path: str | os.PathLike[str], *, format: str | None = None, backend: str = "auto",
    on_bad_lines: str = "raise", mixed_types: str = "raise", sep: str | None = None,
    encoding: str | None = None, decimal: str | None = None, na_values: Sequence[str] | None = None,
    keep_default_na: bool = True, dtype: Mapping[str, Any] | None = None, skiprows: int = 0,
    header: int | None = 0,
) -> tuple[Frame, ReadReport]:
    """Read a table and say what was read: like :func:`read_table`, plus a :class:`ReadReport`.

    Args:
        path, format, backend, on_bad_lines, mixed_types, sep, encoding, decimal, na_values,
            keep_default_na, dtype, skiprows, header: as in :func:`read_table`.

    Returns:
        ``(frame, report)``; ``report.bad_lines`` lists every skipped CSV line, numbered as
        the file's lines (lines skipped with ``skiprows`` counted).

    Example:
        >>> frame, report = read_table_with_report("readings.csv", on_bad_lines="skip")  # doctest: +SKIP
        >>> report.bad_lines  # doctest: +SKIP
        [(3, '4,5')]
    """
    bad_lines = OnError.parse(on_bad_lines, "on_bad_lines")
    mixed = MixedTypes.parse(mixed_types, "mixed_types")
    src = Path(path)
    fmt = table_format(src, format)
    if fmt.text_options is None and (sep is not None or encoding is not None or decimal is not None
                                     or na_values is not None or not keep_default_na or dtype
                                     or skiprows != 0 or header is None or header != 0):
        raise ValueError(f"{src}: sep=, encoding=, decimal=, na_values=, keep_default_na=, dtype=, skiprows= "
                         f"and header= apply to CSV files only, not {fmt.name}")
    missing_spellings, dtypes = _csv_reading(na_values, keep_default_na, dtype)
    has_header = _csv_layout(skiprows, header)
    if not src.exists():
        if any(ch in str(src) for ch in "*?["):
            raise FileNotFoundError(
                f"{src}: no such file; read_table takes no glob patterns: pass the directory of a "
                "Parquet dataset (read with its partition columns), or read the files one by one"
            )
        raise FileNotFoundError(f"{src}: no such file")
    if src.is_dir() and not fmt.reads_directories:
        raise TabularError(
            f"{src}: is a directory; only Parquet datasets are read as a directory, not {fmt.name} "
            "files: read them one by one and concatenate the frames"
        )
    target = choose_dataframe_backend(backend).name
    report = ReadReport(str(src), fmt.name, target)
    sep_given = sep is not None
    if fmt.text_options is not None:
        sep, encoding = fmt.text_options(src, sep, encoding)
        decimal = _decimal_mark(src, decimal, sep)
    options = ReadOptions(target, bad_lines, mixed, sep, encoding, decimal or ".", sep_given, missing_spellings, dtypes,
                          int(skiprows), has_header)
    frame = fmt.reader(target)(src, options, report)
    if backend_of(frame) == "pandas":
        frame = _text_names(frame, src)
    if backend_of(frame) != target:
        if backend_of(frame) == "pandas" and _index_holds_data(frame.index):
            # As for a Parquet file's stored pandas index (see binary.py): the same columns on every backend.
            warnings.warn(f"gpufeed: {src}: the pandas index stored in the file ({', '.join(map(str, frame.index.names))})"
                          f" is not read as a column on {target}, as on pandas, where it is the frame's index; "
                          "reset_index() before writing keeps it as data", stacklevel=3)
        # A pickled or HDF5 object column of numbers and text, or of ints no 64-bit type holds: named.
        frame = to_backend_naming(frame, target, src)
    report.rows = len(frame)
    return frame, report


def _csv_reading(na_values: Sequence[str] | None, keep_default_na: bool,
                 dtype: Mapping[str, Any] | None) -> tuple[tuple[str, ...] | None, tuple[tuple[str, str], ...]]:
    """The checked ``na_values``/``keep_default_na`` (the strings read as missing, None for
    pandas' own) and ``dtype`` (``(column, type name)`` pairs) of a CSV read."""
    from gpufeed.datasets.tables.csv import CSV_TYPES, PANDAS_NA_VALUES

    if isinstance(na_values, str) or (na_values is not None and not all(isinstance(v, str) for v in na_values)):
        raise TypeError(f"na_values must be a list of strings, got {na_values!r}")
    spellings = None
    if na_values is not None or not keep_default_na:
        spellings = tuple(dict.fromkeys([*(PANDAS_NA_VALUES if keep_default_na else ()), *(na_values or ())]))
    names = {str: "str", int: "int64", float: "float64", bool: "bool"}
    dtypes = []
    for column, kind in (dtype or {}).items():
        name = names.get(kind, kind) if not isinstance(kind, str) else kind
        if name not in CSV_TYPES:
            raise ValueError(f"dtype[{column!r}] must be one of str, int64, float64, bool (or the Python types "
                             f"str, int, float, bool), got {kind!r}")
        dtypes.append((str(column), name))
    return spellings, tuple(dtypes)


def _csv_layout(skiprows: int, header: int | None) -> bool:
    """Check ``skiprows`` and ``header`` of a CSV read; whether the file has a header line.

    Only pandas' ``header=0`` (the first line after the skipped ones names the columns) and
    ``header=None`` (no header line) are taken: a header further down is ``skiprows`` plus
    ``header=0``, and a multi-line header has no one meaning on every backend. ``True`` and
    ``False`` are refused as pandas refuses them: ``header=False`` equals 0 in Python and
    read the first line as the header, the opposite of what it says.
    """
    if isinstance(skiprows, bool) or not isinstance(skiprows, numbers.Integral):  # numpy ints too
        raise TypeError(f"skiprows must be a number of lines (an int), got {skiprows!r}")
    if skiprows < 0:
        raise ValueError(f"skiprows must be 0 or more lines, got {skiprows}")
    if header is not None and (isinstance(header, bool) or not isinstance(header, int) or header != 0):
        raise ValueError(f"header must be 0 (the first line after skiprows names the columns) or None (no "
                         f"header line: columns '0', '1', ...), got {header!r}; for a header further down "
                         "the file, pass skiprows= the lines above it")
    return header is not None


def read_table(
    path: str | os.PathLike[str], *, format: str | None = None, backend: str = "auto",
    on_bad_lines: str = "raise", mixed_types: str = "raise", sep: str | None = None,
    encoding: str | None = None, decimal: str | None = None, na_values: Sequence[str] | None = None,
    keep_default_na: bool = True, dtype: Mapping[str, Any] | None = None, skiprows: int = 0,
    header: int | None = 0,
) -> Frame:
    """Read a CSV, Parquet, Feather, pickle, HDF5 or JSON (records or lines) table onto ``backend``.

    In CSV files an empty field (quoted or not) and the usual NA spellings (``NA``,
    ``null``, ``NaN``, ...) are missing values in every column, as ``pandas.read_csv``
    reads them; a CSV or JSON column with no value at all is float64 (unless ``dtype=``
    says otherwise), as pandas reads it. JSON has no datetime type: a JSON text column whose every value is an ISO
    8601 date and time (``2024-01-01 10:00:00``, ``...T10:00:00.5+01:00``) is read as
    datetimes, in UTC when the values carry an offset; one whose every value is a bare
    date (``2024-01-01``) as dates (midnight datetimes on pandas).

    Column names are text on every backend and from every format: a frame stored with
    integer names (``0``, ``1``: made from a numpy array) in a Feather, pickle or HDF5 file
    reads back with the columns ``"0"``, ``"1"``, as from CSV, Parquet and JSON and as
    polars names them, so a recipe names the same columns whatever the file.

    Args:
        path: the file; its suffix gives the format unless ``format`` is passed. A CSV or
            JSON file may be compressed (``.csv.gz``, ``.jsonl.zst``, ``flights.csv.zip``
            with one file in it; also ``.bz2``, ``.xz``): told by its first bytes, so a
            compressed file under another name is decompressed too. A directory
            of Parquet files (a dataset as Spark or ``pyarrow.dataset.write_dataset`` write
            it, hive-partitioned ``year=2024/`` or not) is read as one table, with its
            partition columns and the columns of every file; ``_*`` and ``.*`` files are skipped.
        format: one of :data:`~gpufeed.datasets.tables.formats.FORMATS` (``csv``,
            ``parquet``, ``feather``, ``pickle``, ``hdf5``, ``json``).
        backend: ``"auto" | "cudf" | "polars" | "pandas"``.
        on_bad_lines: CSV lines with the wrong number of fields: ``"raise"`` raises
            :class:`MalformedCSVError` naming the lines; ``"skip"`` skips them and warns
            with their line numbers (use :func:`read_table_with_report` to get them back).
        mixed_types: ``"raise"`` raises :class:`MixedTypeError` for a CSV/JSON text column
            mixing numbers and words; ``"keep"`` leaves it as text (a JSON column's numbers
            in their JSON spelling: ``["1", "x"]``), on every backend.
        sep: CSV only: the one-character field delimiter (default ``","``; e.g. ``";"``, ``"\\t"``).
        encoding: CSV only: the text encoding (default UTF-8; e.g. ``"latin-1"``, ``"cp1252"``).
            A file that is not valid in it raises :class:`MalformedCSVError` naming the line.
        decimal: CSV only: the decimal mark, ``"."`` (default) or ``","`` (European exports,
            usually with ``sep=";"``: ``1,5`` is 1.5). Thousands separators (``1.234,5``)
            are not read: such values raise :class:`MixedTypeError` naming the column.
            Without it, a column of numbers written with a decimal comma raises
            :class:`MixedTypeError` suggesting ``decimal=","``.
        na_values: CSV only: more strings read as missing, besides pandas' spellings (as in
            ``pandas.read_csv``).
        keep_default_na: CSV only: False reads only ``na_values`` as missing (not even an
            empty field, as in pandas), so "NA" (Namibia, North America) and "None" stay text.
        dtype: CSV only: ``{column: type}`` read as that type instead of inferred: ``str``
            (zero-padded codes such as ``"02134"`` keep their zeros; no mixed-type check),
            ``"int64"``, ``"float64"``, ``"bool"``. A column the header lacks is an error.
        skiprows: CSV only: the number of lines skipped at the top of the file, before the
            header (a preamble describing the data), as pandas' integer ``skiprows``. Lines
            are the file's lines (blank ones included; a quoted field in them does not join
            lines), and the lines the errors and ``on_bad_lines`` report still count them.
            Skipping every line raises :class:`EmptyTableError`.
        header: CSV only: ``0`` (default): the first line after ``skiprows`` names the
            columns; ``None``: the file has no header line, every line is data and the
            columns are named ``"0"``, ``"1"``, ... (text, as everywhere; ``dtype=`` names
            them so). Other values raise ``ValueError``.

    Returns:
        A native frame of the chosen backend.

    Raises:
        UnknownFormatError, MalformedCSVError, MixedTypeError, EmptyTableError (an empty file
        of any format, or a CSV file ``skiprows`` skips to its end), TabularError (a file its
        format's reader cannot parse, a directory of a format other than Parquet, dataset
        files that disagree on a column's type, column names that are one as text, such as
        ``1`` and ``"1"`` in a pickle), FileNotFoundError; all name the file.

    Example:
        >>> df = read_table("readings.csv", backend="pandas", on_bad_lines="skip")  # doctest: +SKIP
        >>> df = read_table("export.csv", sep=";", encoding="cp1252", decimal=",")  # doctest: +SKIP
        >>> df = read_table("unemp.csv", skiprows=3)  # doctest: +SKIP
        >>> df = read_table("points.csv", header=None)  # doctest: +SKIP
        >>> df = read_table("warehouse/sales/", backend="polars")  # doctest: +SKIP
    """
    frame, report = read_table_with_report(
        path, format=format, backend=backend, on_bad_lines=on_bad_lines, mixed_types=mixed_types,
        sep=sep, encoding=encoding, decimal=decimal, na_values=na_values, keep_default_na=keep_default_na,
        dtype=dtype, skiprows=skiprows, header=header,
    )
    if report.bad_lines:
        lines = ", ".join(str(n) for n, _ in report.bad_lines[:MAX_LINES_IN_MESSAGE])
        warnings.warn(
            f"{report.path}: skipped {report.rows_skipped} malformed line(s) (lines {lines}"
            f"{' ...' if report.rows_skipped > MAX_LINES_IN_MESSAGE else ''}); kept {report.rows} rows",
            stacklevel=2,
        )
    return frame


def write_table(
    df: Frame, path: str | os.PathLike[str], *, format: str | None = None, sep: str | None = None
) -> Path:
    """Write ``df`` (pandas, polars or cuDF) in the format given or implied by ``path``.

    A CSV or JSON name ending in ``.gz``, ``.bz2``, ``.xz``, ``.zst`` or ``.zip`` (an archive of
    one file) is written compressed so, from every backend. Durations are written to CSV and
    JSON as ISO 8601 seconds (``PT1.5S``). JSON is written with floats exact and datetimes as ISO 8601 text: a ``.json`` file as one
    array of records (``[{...}, ...]``, what ``json.load``, ``pd.read_json`` and
    ``pl.read_json`` read), a ``.jsonl`` or ``.ndjson`` file as JSON lines (one record per
    line, the layout GPU and streaming readers expect). HDF5 uses the key ``"data"``, so
    ``pd.read_hdf(path)`` reads it without a key (and pandas' ``"table"`` layout when a
    column is categorical, which the default fixed layout cannot store), and refuses,
    naming them, columns pandas' HDFStore cannot store (integers or booleans with missing
    values: use Parquet or Feather). A pandas or cuDF index that holds data (named, several
    levels, or labels that are not integers, e.g. timestamps) is written as the first
    column(s); an unnamed integer index (row numbers) is not written. A polars or cuDF frame
    written through pandas (pickle, HDF5) keeps its integer columns with missing values
    integer. A multi-level column header (``pivot_table(aggfunc=["mean", "max"])``) is
    refused: no format stores it alike on every backend.

    Args:
        df: the frame.
        path: destination.
        format: overrides the suffix (see :data:`~gpufeed.datasets.tables.formats.FORMATS`).
        sep: CSV only: the one-character field delimiter (default ``","``).

    Returns:
        ``path`` as a :class:`~pathlib.Path`.

    Raises:
        TabularError: HDF5 asked to store a column it cannot (named, with its dtype);
            duplicate column names; a multi-level column header or tuple column names
            (``pivot_table(aggfunc=[...])``: flatten them to text first); any failure of
            the format's writer (a column mixing text and numbers for Parquet; a binary
            column for JSON); all name the file. A failed write leaves no partial file
            and an existing file at ``path`` as it was: the table is written to a
            temporary file beside it and renamed into place once complete.

    Example:
        >>> write_table(df, tmp_path / "readings.parquet")  # doctest: +SKIP
        >>> write_table(df, tmp_path / "readings.csv", sep=";")  # doctest: +SKIP
    """
    out = Path(path)
    fmt = table_format(out, format)
    if fmt.text_options is not None:
        sep, _ = fmt.text_options(out, sep, None)
    elif sep is not None:
        raise ValueError(f"{out}: sep= applies to CSV files only, not {fmt.name}")
    backend = backend_of(df)
    if backend in ("pandas", "cudf"):
        _refuse_tuple_names(df.columns, out)
        df = _index_as_columns(df, out)
    twice = repeated(str(c) for c in df.columns)
    if twice:  # pandas allows them; no format reads them back as one table on every backend
        raise TabularError(f"{out}: column name(s) {', '.join(map(repr, twice))} appear more than once: "
                           "rename them before writing")
    out.parent.mkdir(parents=True, exist_ok=True)
    takes, writer = fmt.writer(backend)
    frame = df if takes == backend else _to_pandas(df)
    # Written under the same name in a fresh folder beside the file (the same file system,
    # so the rename is atomic; the same name, so the writers see the suffixes, and a .zip
    # its member name, that ``out`` has), then renamed over it: a writer that fails half
    # way left a partial file (1 byte of JSON, an empty Feather file) in place of a good
    # one. A symbolic link is written through to the file it names (renaming over the link
    # replaced it); the replaced file keeps its permissions; in a folder that takes no new
    # entry, an existing file is written in place, as before.
    final = Path(os.path.realpath(out))
    try:
        staging: Path | None = Path(tempfile.mkdtemp(prefix=".gpufeed-", dir=final.parent))
    except PermissionError:
        staging = None
    written = final if staging is None else staging / out.name
    try:
        _write_with(writer, frame, written, out, fmt.name, sep)
        if staging is not None:
            if final.exists():
                shutil.copymode(final, written)
            os.replace(written, final)
    except OSError as exc:
        if staging is not None and exc.filename is not None and str(staging) in str(exc.filename):
            raise type(exc)(exc.errno, exc.strerror, str(out)) from exc  # the user's path, not the staging one
        raise
    finally:
        if staging is not None:
            shutil.rmtree(staging, ignore_errors=True)
    return out


def _write_with(writer: Callable[[Any, Path, WriteOptions], None], frame: Any, written: Path, out: Path,
                fmt: str, sep: str | None) -> None:
    """Run a format's writer into ``written``, its failures named by ``out`` (the user's path).

    Raises:
        TabularError: the writer's own error (which names the column), or a Rust library's
            panic (pyo3's ``PanicException``, e.g. polars on a type it cannot write: a
            ``BaseException``, which ``except Exception`` lets through).
    """
    try:
        writer(frame, written, WriteOptions(sep, target=out))
    except (OSError, MemoryError, ImportError, TabularError):
        raise
    except Exception as exc:  # noqa: BLE001 - the library's words (which name the column), with the file
        raise TabularError(f"{out}: cannot write the frame as {fmt}: "
                           f"{str(exc).replace(str(written), str(out))}") from exc
    except BaseException as exc:
        if type(exc).__name__ != "PanicException":  # by name: it belongs to no importable module
            raise
        raise TabularError(f"{out}: cannot write the frame as {fmt}: the writer failed "
                           f"({str(exc).strip()[:200]})") from exc


def convert(
    src: str | os.PathLike[str], dst: str | os.PathLike[str], *, src_format: str | None = None,
    dst_format: str | None = None, backend: str = "auto", on_bad_lines: str = "raise",
    mixed_types: str = "raise", **csv_options: Any,
) -> tuple[Path, ReadReport]:
    """Read ``src`` and write it to ``dst`` in another format, with the same bad-line
    reporting and format detection as :func:`read_table` and :func:`write_table`.

    Args:
        src: input file, or a Parquet dataset directory (format from its suffix unless
            ``src_format``).
        dst: output file (format from its suffix unless ``dst_format``).
        backend: backend that holds the table in between (``"auto"``: cuDF on a GPU).
        on_bad_lines, mixed_types: how ``src`` is read, as in :func:`read_table`.
        csv_options: :func:`read_table`'s options for a CSV ``src`` (``sep``, ``encoding``,
            ``decimal``, ``na_values``, ``keep_default_na``, ``dtype``, ``skiprows``,
            ``header``): a European export is ``sep=";", decimal=","``. A CSV ``dst`` is
            written with ``,`` and ``.``.

    Returns:
        ``(dst path, read report)``; the report counts rows kept and lines skipped.

    Example:
        >>> convert("readings.csv", "readings.parquet", backend="polars")  # doctest: +SKIP
        >>> convert("export.csv", "export.parquet", sep=";", decimal=",")  # doctest: +SKIP
    """
    frame, report = read_table_with_report(src, format=src_format, backend=backend, on_bad_lines=on_bad_lines,
                                           mixed_types=mixed_types, **csv_options)
    return write_table(frame, dst, format=dst_format), report


def _index_as_columns(df: Frame, out: Path) -> Frame:
    """A pandas or cuDF frame whose index holds data (a named index, several levels, or
    labels that are not integers: timestamps, ids) with that index as its first column(s),
    named as ``reset_index`` names them, so every format keeps it and every backend reads
    it as a column (polars has no index). An unnamed integer index (the row numbers a
    filter or a concatenation leaves) is not written, as with ``index=False``."""
    if not _index_holds_data(df.index):
        return df
    clash = [n for n in df.index.names if n is not None and n in df.columns]
    if clash:
        raise TabularError(f"{out}: the frame's index is named {clash[0]!r}, as one of its columns: rename "
                           "one, or reset_index(drop=True) to leave the index out")
    return df.reset_index()


def _text_names(frame: Frame, src: Path) -> Frame:
    """A pandas frame read from ``src`` with every column name as text (``str(name)``).

    Feather, pickle and HDF5 keep pandas' integer names (a frame made from a numpy array has
    columns 0, 1, ...) while CSV, Parquet, JSON and every polars or cuDF frame have ``"0"``,
    ``"1"``: a recipe naming ``"0"`` found the column in some files only.

    Raises:
        TabularError: a name given to two columns (a pickled or Feather pandas frame may hold
            them; polars refuses them, so the file read on one backend only, and a column
            picked by name was two), or two names that are one as text (``1`` and ``"1"``);
            both naming the file and the names.
    """
    same = repeated(frame.columns)
    if same:
        raise TabularError(f"{src}: column name(s) {', '.join(map(repr, same))} given to more than one column; "
                           "give every column its own name (pandas: df.columns = [...]) and write it again")
    if frame.columns.nlevels == 1 and all(isinstance(c, str) for c in frame.columns):
        return frame
    names = [str(c) for c in frame.columns]
    twice = repeated(names)
    if twice:
        raise TabularError(f"{src}: column names that are one name as text ({', '.join(map(repr, twice))}: "
                           "e.g. 1 and '1'): rename them in the file")
    return frame.set_axis(names, axis=1)


def _refuse_tuple_names(columns: object, out: Path) -> None:
    """Refuse a multi-level column header (a pandas MultiIndex, from ``pivot_table`` with
    several ``aggfunc``, ``groupby().agg([...])`` or ``unstack``) and tuple column names.

    No format stores them alike: CSV wrote a two-row header that no reader takes back as
    one, Parquet and JSON stringified the tuples, and Feather, pickle and HDF5 gave tuples
    on pandas but their text on polars; a recipe naming a column found it in some files only.
    """
    levels = getattr(columns, "nlevels", 1)
    tuples = [c for c in columns if isinstance(c, tuple)]
    if levels == 1 and not tuples:
        return
    shown = ", ".join(map(repr, tuples[:3])) + (" ..." if len(tuples) > 3 else "")
    header = f"a {levels}-level column header" if levels > 1 else "tuple column names"
    raise TabularError(
        f"{out}: the frame has {header} ({shown}), which no format stores alike on every backend: "
        "flatten the names to text first, e.g. df.columns = ['_'.join(map(str, c)).strip('_') for c in df.columns]"
    )


def _index_holds_data(index: object) -> bool:
    """Whether a pandas or cuDF index is data, not row numbers: named, several levels, or
    labels that are not integers."""
    return not (index.nlevels == 1 and index.name is None and index.dtype.kind in "iu")


def _decimal_mark(path: Path, decimal: str | None, sep: str) -> str:
    """The checked decimal mark of a CSV read: ``"."`` (default) or ``","``, not the delimiter."""
    if decimal is None:
        return "."
    if decimal not in (".", ","):
        raise ValueError(f"{path}: decimal must be '.' or ',', got {decimal!r}")
    if decimal == sep:
        raise ValueError(f"{path}: decimal={decimal!r} is also the field delimiter; pass sep=';' with decimal=','")
    return decimal


def _to_pandas(df: Frame) -> Frame:
    """A polars or cuDF frame as pandas for a pandas-only writer (pickle, HDF5), integer
    and boolean columns with missing values kept as pandas' nullable integers and booleans.

    ``to_pandas()`` turns such integers into float64 (a pickle written from polars read
    back as Float64, and integers beyond 2**53, ids, came back rounded) and such booleans
    into Python objects (which HDF5 stored without a word).
    """
    import narwhals as nw
    import pandas as pd

    frame = nw.from_native(df)
    pdf = df.to_pandas()
    for name, dtype in frame.collect_schema().items():
        column = frame.get_column(name)
        if (dtype.is_integer() or dtype == nw.Boolean) and column.null_count():
            values = nw.to_native(column).to_arrow()
            mapper = _nullable_int if dtype.is_integer() else lambda _: pd.BooleanDtype()
            pdf[name] = values.to_pandas(types_mapper=mapper).set_axis(pdf.index)
    return pdf


def _nullable_int(arrow_type: object) -> object:
    """pandas' nullable dtype for an Arrow integer type (a ``types_mapper``); None otherwise."""
    import pandas as pd

    name = NULLABLE_INTS.get(str(arrow_type))
    return pd.api.types.pandas_dtype(name) if name else None
