"""JSON: read as records or JSON lines, written with floats exact: a ``.json`` file as one
array of records (what ``json.load``, ``pd.read_json`` and ``pl.read_json`` read), a
``.jsonl`` or ``.ndjson`` file as JSON lines (one record per line, the layout GPU and
streaming readers expect). JSON has no datetime type: a text column whose every value is
an ISO 8601 date and time is read back as datetimes (in UTC when the values carry an
offset). pandas reads through its parser, which tells columns mixing numbers and text;
polars through its own (several times faster), falling back on pandas' reading wherever
the two could differ; cuDF as polars reads, then moved to the GPU (cuDF's own reader has
neither check). A compressed file (``.jsonl.gz``, or told by its first bytes) is read from a
decompressed copy, and written compressed as its suffix says.
"""

from __future__ import annotations

import contextlib
import json
import re
import shutil
import tempfile
import warnings
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from gpufeed.datasets.compression import compression_of, strip_compression
from gpufeed.datasets.tables.base import (
    COMPRESSION_SUFFIXES,
    NULLABLE_INTS,
    ReadOptions,
    ReadReport,
    TableFormat,
    WriteOptions,
    decompression_errors,
    one_integer_type_holds,
    open_compressed,
    open_decompressed,
    to_backend_naming,
    warn_integers_as_text,
)
from gpufeed.gpu_transforms.tabular.errors import MixedTypeError, TabularError
from gpufeed.gpu_transforms.tabular.frames import Frame, keeping_names, to_backend
from gpufeed.policies import MixedTypes

#: A JSON text column whose every value matches this is read back as datetimes: JSON has no
#: datetime type, and this is how both writers (polars' and pandas' ISO format) store one.
#: Date and time are both required, so plain dates, codes and free text stay text.
_ISO_DATETIME = re.compile(r"\d{4}-\d{2}-\d{2}[T ]\d{2}:\d{2}:\d{2}(?:\.\d{1,9})?(?:Z|[+-]\d{2}:?\d{2})?")
_ISO_OFFSET = r"(?:Z|[+-]\d{2}:?\d{2})$"
#: A bare ISO date (``2024-01-01``): what polars writes for its Date type.
_ISO_DATE = re.compile(r"\d{4}-\d{2}-\d{2}")


#: The suffixes of JSON lines files: written so, and read so whatever the first character.
_LINES_SUFFIXES = (".jsonl", ".ndjson")


def _lines(path: Path) -> bool:
    return _lines_by_name(path) or _looks_like_json_lines(path)


def _lines_by_name(path: Path) -> bool:
    """Whether ``path``'s suffix names a JSON lines file (else a ``.json`` file is one JSON
    value), a compression suffix aside (``t.jsonl.gz``)."""
    return strip_compression(path.name).lower().endswith(_LINES_SUFFIXES)


def pandas_orient(path: Path) -> str | None:
    """The layout of a JSON file that is one object holding the whole table, as pandas'
    ``to_json`` writes it: ``"columns"`` (its default, ``{column: {row: value}}``),
    ``"index"`` (``{row: {column: value}}``), ``"split"`` or ``"table"``; None for records,
    JSON lines and anything else; ``"list"`` for ``{column: [values]}`` whose lists all have
    one length (a table's columns, as pandas reads such an object).

    Read as JSON lines, such a file was one row of dictionaries, silently. The layout is
    told by the object's structure (every value an object; ``columns`` and ``data``;
    ``schema`` and ``data``), parsed once the file is known to hold one value: a record
    that ends where the next begins, at a line start, makes it JSON lines.
    """
    if _lines_by_name(path):
        return None
    size = path.stat().st_size
    with open(path, "rb") as fh:
        head = fh.read(1 << 16)
        fh.seek(max(size - (1 << 16), 0))
        tail = fh.read()
    if not head.lstrip(b"\xef\xbb\xbf \t\r\n").startswith(b"{"):
        return None
    if any(re.search(rb"\}[ \t\r]*\n\{", part) for part in (head, tail)):
        return None  # JSON lines
    try:
        with open(path, encoding="utf-8-sig") as fh:
            doc = json.load(fh)
    except (ValueError, UnicodeDecodeError):
        return None  # not one JSON value: pandas' reading names the fault
    if not isinstance(doc, dict) or not doc:
        return None
    keys = set(doc)
    if {"schema", "data"} <= keys and isinstance(doc["schema"], dict) and "fields" in doc["schema"]:
        return "table"
    if {"columns", "data"} <= keys <= {"columns", "index", "data", "name"}:
        return "split"
    if all(isinstance(v, list) for v in doc.values()) and len({len(v) for v in doc.values()}) == 1:
        # {column: [values]}: a table's columns (json.dump(df.to_dict(orient="list")), R's
        # jsonlite with dataframe="columns"), which pandas reads as such; as one record it
        # was a row of lists, silently. (Lists of several lengths are no table: one record.)
        return "list"
    if not all(isinstance(v, dict) for v in doc.values()):
        return None
    # {row: {column: value}} (orient="index") has the same shape as pandas' default
    # {column: {row: value}}, and its labels cannot tell them apart (a frame made from an
    # array has columns "0", "1", ... and may have labelled rows). Read as pandas reads it,
    # by columns, unless that makes columns mixing kinds of value where reading by rows
    # does not: a table of text and numbers written with orient="index".
    # (One outer key: a one-column table, whose rows could never mix kinds.)
    if len(doc) < 2 or not _mixes_kinds(list(v.values()) for v in doc.values()):
        return "columns"
    by_rows: dict[str, list[Any]] = {}
    for row in doc.values():
        for column, value in row.items():
            by_rows.setdefault(column, []).append(value)
    return "columns" if _mixes_kinds(by_rows.values()) else "index"


def _mixes_kinds(columns: Iterable[list[Any]]) -> bool:
    """Whether one of ``columns`` holds values of more than one JSON kind (text, number,
    boolean, nested), missing values aside."""

    def kind(value: Any) -> str:
        if isinstance(value, bool):
            return "bool"
        return "number" if isinstance(value, int | float) else type(value).__name__

    return any(len({kind(v) for v in values if v is not None}) > 1 for values in columns)


def _read_json_cudf(path: Path, options: ReadOptions, report: ReadReport) -> Frame:
    """polars' reading, moved to the GPU: cuDF's JSON reader neither tells columns mixing
    numbers and text nor parses ISO datetimes, so the same file gave other columns and
    types on cuDF than on pandas and polars."""
    return to_backend(_read_json_polars(path, options, report), "cudf")


def _read_json_records(
    path: Path, options: ReadOptions, orient: str | None, name: Path | None = None
) -> tuple[pd.DataFrame, list[str]]:
    """The JSON file through pandas' parser, checked for columns mixing numbers and text,
    ISO datetimes parsed (see the module docstring), booleans with missing values as
    pandas' nullable ``boolean``; ``orient``: the file's :func:`pandas_orient`, worked out
    once by the caller (it parses a one-object file). ``name``: the file the errors name
    (the compressed file ``path`` was decompressed from), ``path`` by default.

    Returns:
        ``(frame, names of the columns of bare dates)``: pandas holds those as midnight
        datetimes, polars as ``Date``, as from the other formats.
    """
    shown = name or path
    lines = orient is None and _lines(path)
    try:
        # precise_float: the default parser can change a float64 in its last bit, so a
        # write/read round trip would not be exact. dtype=False: no guessing of types
        # (pandas would otherwise turn columns named like dates into datetimes).
        # convert_axes=False: column names stay the text they are ("2012" was made 2012,
        # and "1" beside "1.0" made two columns named 1).
        # pandas' "columns" layout also takes {column: [values]} (our "list").
        layout = "columns" if orient == "list" else orient or "records"
        frame = pd.read_json(path, lines=lines, orient=None if lines else layout, dtype=False,
                             precise_float=True, convert_axes=False)
    except ValueError as exc:
        if not any(refusal in str(exc) for refusal in _NUMBERS_PANDAS_REFUSES):
            raise TabularError(f"{shown}: not valid JSON{_json_error_location(path, lines)} ({exc})") from exc
        # pandas' parser refuses a subnormal float (|x| < 2.2e-308, e.g. 1e-310, which the
        # writers write) and an integer beyond int64 and uint64 (pd.read_json itself fails
        # on both): a valid file, read by Python's parser instead, exactly.
        frame = _read_json_python(path, lines, orient, shown)
    if orient is not None:
        frame = _row_labels_as_column(frame)
    numbers = []
    for column in frame.columns:
        col = frame[column]
        if col.dtype != object:
            continue
        kinds = {_scalar_kind(v) for v in col.dropna()}
        if kinds == {"numbers"}:
            numbers.append(column)  # Python ints no 64-bit type holds (pandas' parser too gives such columns)
        elif not kinds:
            # Every value missing: float64, as pd.read_json and pd.read_csv read such a
            # column (a float column that was all NaN when written), not Python objects.
            frame[column] = col.astype("float64")
        elif len(kinds & _SCALAR_KINDS) > 1:
            # Numbers and text, or booleans beside either (true and 0: pandas' reading made
            # true 1.0, polars' true 1 or an error, so no reading is the file's meaning).
            if options.mixed_types is MixedTypes.RAISE:
                first = _scalar_kind(col.dropna().iloc[0])
                idx = next(i for i, v in enumerate(col) if not _missing(v) and _scalar_kind(v) != first)
                mixed = " and ".join(sorted(kinds & _SCALAR_KINDS))
                raise MixedTypeError(
                    f"{shown}: column {column!r} mixes {mixed}; e.g. {json.dumps(col.iloc[idx])} in record "
                    f"{idx + 1}. Fix the values, or pass mixed_types='keep' to read the column as text"
                )
            frame[column] = _as_text(col)
    return _parse_iso_datetimes(_nullable_booleans(_wide_integers(frame, numbers, shown)))


#: The kinds of JSON value a column may not mix (:func:`_scalar_kind`).
_SCALAR_KINDS = {"booleans", "numbers", "text"}


def _scalar_kind(value: Any) -> str:
    """A parsed JSON value's kind: ``"booleans"``, ``"numbers"``, ``"text"``, else its type's name."""
    if isinstance(value, bool | np.bool_):
        return "booleans"
    if isinstance(value, int | float | np.number):
        return "numbers"
    return "text" if isinstance(value, str) else type(value).__name__


#: What pandas' JSON parser says of a valid number it cannot hold: a subnormal float, an
#: integer above uint64's range, an integer below int64's.
_NUMBERS_PANDAS_REFUSES = ("Range error", "Value is too big", "Value is too small")


def _as_text(col: pd.Series) -> pd.Series:
    """A column mixing numbers and text (``mixed_types="keep"``) as text, as a CSV column
    that mixes them is read: every value that is not text as its JSON spelling (``1``,
    ``2.5``, ``true``), missing values missing. Left as Python objects, it held ints beside
    strs on pandas and could not be moved to polars at all."""
    texts = [v if isinstance(v, str) else None if _missing(v) else json.dumps(v) for v in col]
    # The dtype pandas gives a text column (``str`` in pandas 3, ``object`` before).
    return pd.Series(texts, index=col.index, name=col.name, dtype=pd.Series(["a"]).dtype)


def _missing(value: Any) -> bool:
    return value is None or (isinstance(value, float) and value != value)


def _read_json_python(path: Path, lines: bool, orient: str | None, shown: Path) -> pd.DataFrame:
    """The JSON file through Python's parser, to the frame ``pd.read_json(dtype=False)``
    builds from its own parser's values (the same Python values: Python's parser reads
    every float64 exactly, subnormals included, where pandas' refuses those). Only used
    when pandas' parser refused a number, so other files keep its speed.

    Raises:
        TabularError: a file that is not valid JSON, or pandas' ``"table"`` layout (its
            schema is applied by pandas' parser only), naming the file.
    """
    try:
        with open(path, encoding="utf-8-sig") as fh:
            if lines:
                doc: Any = [json.loads(line) for line in fh if line.strip()]
            else:
                doc = json.load(fh)
    except ValueError as exc:
        raise TabularError(f"{shown}: not valid JSON{_json_error_location(path, lines)} ({exc})") from exc
    if orient == "table":
        raise TabularError(f"{shown}: a JSON table (orient='table') holding a number pandas' JSON parser "
                           "cannot hold (a subnormal float, below 2.2e-308, or an integer beyond 64 bits): "
                           "write the table as records or JSON lines")
    if orient == "index":
        frame = pd.DataFrame.from_dict(doc, dtype=None, orient="index")
    elif orient == "split":
        frame = pd.DataFrame(dtype=None, **{str(k): v for k, v in doc.items()})
    else:  # records, JSON lines, and pandas' default {column: {row: value}}
        frame = pd.DataFrame(doc, dtype=None)
    for name in frame.columns:  # as pandas' reading with dtype=False: NaN for the missing values
        if frame[name].isna().any():
            frame[name] = frame[name].fillna(np.nan)
    return frame


def _wide_integers(frame: pd.DataFrame, names: list[Any], shown: Path) -> pd.DataFrame:
    """``names``' columns (Python objects, every value a number) holding integers no one
    64-bit integer type holds (:func:`one_integer_type_holds`: ids beyond 64 bits, ``-1``
    beside a hash above int64) as CSV reads them: all integers, as their text, with the
    same warning naming them; numbers with a fraction among them, as float64, as polars'
    parser reads them. Left as Python ints, such a column was object on pandas and a bare
    OverflowError on polars."""
    wide = []
    for name in names:
        col = frame[name]
        ints = [v for v in col if type(v) is int]
        if not ints or one_integer_type_holds(min(ints), max(ints)):
            continue
        if len(ints) == col.count():
            frame[name] = _as_text(col)
            wide.append(str(name))
        else:
            frame[name] = col.astype("float64")
    if wide:
        warn_integers_as_text(shown, wide, stacklevel=8)
    return frame


def _nullable_booleans(frame: pd.DataFrame) -> pd.DataFrame:
    """Object columns of true/false with missing values as pandas' nullable ``boolean``: the
    parser leaves them Python objects, while CSV, Parquet and Feather give ``boolean``."""
    for name in frame.columns:
        col = frame[name]
        if col.dtype == object and col.hasnans:
            values = col.dropna()
            if len(values) and all(isinstance(v, bool) for v in values):
                frame[name] = col.astype("boolean")
    return frame


def _row_labels_as_column(frame: pd.DataFrame) -> pd.DataFrame:
    """A one-object JSON table's row labels: dropped when they are the default 0, 1, ...,
    else kept as a column (named as ``reset_index`` names it), the same on every backend
    (polars and cuDF have no index)."""
    # As text: pandas reads the default labels as numbers or as "0", "1", ... by layout.
    if frame.index.astype(str).equals(pd.RangeIndex(len(frame)).astype(str)):
        return frame.reset_index(drop=True)
    # Read with convert_axes=False (the column names stay text), so labels that are all
    # numbers are made numbers here, as pandas' default reading made them.
    numbers = pd.to_numeric(pd.Series(frame.index, dtype=object), errors="coerce")
    if len(frame) and numbers.notna().all():
        frame = frame.set_axis(pd.Index(numbers.to_numpy(), name=frame.index.name))
    return frame.reset_index()


def _whole_with_gaps(frame: pd.DataFrame, *, beyond: float = 0.0) -> list[str]:
    """The float64 columns pandas' parser may have made of integers: some values missing,
    every other one whole (and, with ``beyond``, one at least that large)."""
    out = []
    for name in frame.columns:
        col = frame[name]
        if col.dtype == "float64" and col.isna().any():
            values = col.dropna()
            if bool((values % 1 == 0).all()) and (not beyond or values.abs().max() >= beyond):
                out.append(name)
    return out


def _exact_integers(path: Path, names: list[str]) -> dict[str, Any]:
    """``names``' columns as polars' own parser reads them, for those it reads as integers.

    pandas' parser reads every number of a column with a missing value as a float, so an
    id above 2**53 came back rounded; polars' parser keeps it. Only such columns are read a
    second time; a float column that polars also reads as floats (``1.0``, ``null``) is
    not returned.
    """
    import polars as pl

    if not names:
        return {}
    try:
        # infer_schema_length=None: types from every record, not only the first hundred.
        exact = (pl.read_ndjson(path, infer_schema_length=None) if _lines(path)
                 else pl.read_json(path, infer_schema_length=None)).select(names)
    except (pl.exceptions.PolarsError, ValueError):
        return {}  # a file polars' parser refuses (pandas read it): keep pandas' reading
    out = {}
    for name in names:
        series = exact[name]
        if series.dtype == pl.Int128 and series.null_count() < len(series):
            # polars reads numbers beyond int64 as Int128: 64-bit hashes fit uint64
            low, high = series.min(), series.max()
            if low >= 0 and high < 2**64:
                series = series.cast(pl.UInt64)
        if series.dtype.is_integer():
            out[name] = series
    return out


@contextlib.contextmanager
def _decompressed(path: Path) -> Iterator[Path]:
    """``path`` itself, or, for a compressed file (``.jsonl.gz``, ``.json.zip``, or told by
    its first bytes: :func:`compression_of`), a decompressed copy in a temporary folder,
    named as ``path`` without its compression suffix (so ``t.jsonl.gz`` is JSON lines).

    Raises:
        TabularError: a file that cannot be decompressed, naming it.
    """
    kind = compression_of(path)
    if kind is None:
        yield path
        return
    with tempfile.TemporaryDirectory(prefix="gpufeed-json-") as folder:
        plain = Path(folder) / strip_compression(path.name)
        try:
            with open_decompressed(path) as source, open(plain, "wb") as sink:
                shutil.copyfileobj(source, sink, 1 << 20)
        except decompression_errors() as exc:
            raise TabularError(f"{path}: cannot decompress the {kind} file ({type(exc).__name__}: {exc}); "
                               "is it damaged or cut short?") from exc
        yield plain


def _read_json_pandas(path: Path, options: ReadOptions, report: ReadReport) -> Frame:
    """The JSON file on pandas. Integer columns with gaps are float64, as pandas reads
    them, except those holding values beyond 2**53 (ids): those are read exactly, as
    pandas' nullable integers, as from Parquet and CSV."""
    with _decompressed(path) as plain:
        return _read_plain_json_pandas(plain, options, path)


def _read_plain_json_pandas(path: Path, options: ReadOptions, name: Path) -> Frame:
    orient = pandas_orient(path)
    frame, _ = _read_json_records(path, options, orient, name)
    # A one-object file: pandas' reading stands (polars' parser reads records and lines).
    suspects = _whole_with_gaps(frame, beyond=2.0**53) if orient is None else []
    for name, series in _exact_integers(path, suspects).items():
        dtype = NULLABLE_INTS.get(str(series.dtype).lower())
        if dtype is not None:  # an Int128 column, beyond uint64, stays float64 on pandas
            frame[name] = pd.array(series.to_list(), dtype=dtype)  # a few id columns: a list is fine
    return frame


def _read_json_polars(path: Path, options: ReadOptions, report: ReadReport) -> Frame:
    """The JSON file on polars, as :func:`_read_json_pandas` reads it converted to polars,
    with integer columns that have missing values exact (Int64, as every other format
    gives polars).

    polars' own parser reads the file when its reading is sure to be pandas' (JSON lines
    or a records array; no text column holding a number, where pandas would have found
    numbers mixed with text; ISO datetimes parsed as pandas parses them): many times faster
    than pandas' parser. Else pandas' reading, with the integer columns from polars'.
    """
    with _decompressed(path) as plain:
        return _read_plain_json_polars(plain, options, path)


def _read_plain_json_polars(path: Path, options: ReadOptions, name: Path) -> Frame:
    import polars as pl

    orient = pandas_orient(path)
    if orient is None:
        frame = _read_json_native_polars(path)
        if frame is not None:
            return frame
    pdf, dates = _read_json_records(path, options, orient, name)
    integers = _exact_integers(path, _whole_with_gaps(pdf) if orient is None else [])  # as on pandas
    # Nested values of several types ([1, "a"]), which pandas keeps: named with the file.
    frame = to_backend_naming(pdf, "polars", name)
    # Bare dates are Date, as polars' own parser reads them here: through pandas they were
    # midnight datetimes, so a nested column beside them (which sends a file here) made them Datetime.
    columns = [*integers.values(), *(pl.col(name).cast(pl.Date) for name in dates)]
    return frame.with_columns(columns) if columns else frame


#: A JSON number or boolean: a text column holding one may have mixed numbers or booleans
#: and text in the file, which only pandas' parser tells apart (polars' reads all as text).
_JSON_NUMBER = r"^(?:-?(?:0|[1-9]\d*)(?:\.\d+)?(?:[eE][+-]?\d+)?|true|false)$"


def _read_json_native_polars(path: Path) -> Any | None:
    """The file through polars' parser, or None when only pandas' reading is sure to be
    right: a file polars refuses (``NaN`` literals, a byte order mark, clashing nested
    types), nested or untyped columns, integers beyond uint64, text holding numbers."""
    import polars as pl

    try:
        frame = (pl.read_ndjson(path, infer_schema_length=None) if _lines(path)
                 else pl.read_json(path, infer_schema_length=None))
    except (pl.exceptions.PolarsError, ValueError, OSError):
        return None
    if frame.width == 0 or frame.height == 0:
        return None  # pandas' reading names an empty file
    if frame.columns != _first_record_keys(path):
        return None  # a key the first record lacks: pandas puts it last, polars does not
    casts = []
    for name, kind in frame.schema.items():
        if kind == pl.Int128:  # numbers beyond int64: 64-bit hashes fit uint64
            low, high = frame[name].min(), frame[name].max()
            if low is None or low < 0 or high >= 2**64:
                return None
            casts.append(pl.col(name).cast(pl.UInt64))
        elif kind.is_nested() or kind == pl.Null or kind == pl.Object:
            return None
    text = [name for name, kind in frame.schema.items() if kind == pl.String]
    if text and frame.select(pl.any_horizontal(pl.col(text).str.contains(_JSON_NUMBER).any())).item():
        return None
    # One read of the file counts what both checks below need.
    booleans = not _lines(path) and _may_hide_booleans(frame)
    nulls = sum(frame.null_count().row(0)) > 0
    counts = _byte_counts(path, (b":", *((b"null",) if nulls else ()), *((b"true", b"false") if booleans else ())))
    if _names_a_key_twice(frame, counts) or (booleans and _hides_booleans(frame, counts)):
        return None
    frame = frame.with_columns(casts) if casts else frame
    parsed = {}
    for name in text:
        column = frame[name]
        first = column.drop_nulls().head(1)
        if not first.is_empty() and _ISO_DATE.fullmatch(first[0]):
            if column.drop_nulls().str.contains(f"^{_ISO_DATE.pattern}$").all():
                dates = column.str.to_date("%Y-%m-%d", strict=False)
                if dates.null_count() == column.null_count():  # not 2024-13-01: dates after all
                    parsed[name] = dates
            continue
        if first.is_empty() or not _ISO_DATETIME.fullmatch(first[0]):
            continue
        # polars' regex engine rules out a column that is not all datetimes, in parallel;
        # pandas parses those that are, exactly as :func:`_parse_iso_datetimes` does.
        if not column.drop_nulls().str.contains(f"^(?:{_ISO_DATETIME.pattern})$").all():
            continue
        datetimes = _iso_datetimes(column.to_pandas())
        if datetimes is not None:
            parsed[name] = pl.from_pandas(datetimes).alias(name)
    return frame.with_columns(list(parsed.values())) if parsed else frame


def _byte_counts(path: Path, words: tuple[bytes, ...]) -> dict[bytes, int]:
    """How often each of ``words`` occurs in the file: a byte scan, no parse, by numpy
    compares over the mapped file 1 MiB at a time, a pass per byte of a word (a 60 MB
    file: ``:`` in 5 ms, ``null`` in 15 ms, where ``bytes.count`` took 18 and 33 ms)."""
    found = dict.fromkeys(words, 0)
    if not path.stat().st_size:
        return found
    data = np.memmap(path, dtype=np.uint8, mode="r")
    step = 1 << 20
    for start in range(0, len(data), step):
        for word in words:
            # The words that start in this MiB, the last ones ending in the next.
            piece = data[start:start + step + len(word) - 1]
            starts = len(piece) - len(word) + 1
            if starts <= 0:
                continue
            hits = piece[:starts] == word[0]
            for i in range(1, len(word)):
                hits &= piece[i:i + starts] == word[i]
            found[word] += int(np.count_nonzero(hits))
    return found


def _names_a_key_twice(frame: Any, counts: dict[bytes, int]) -> bool:
    """Whether a record of the file polars' parser read into ``frame`` (scalar columns only)
    names a key twice, ``{"status": "retry", "status": "ok"}``: polars keeps the first
    value, pandas' parser (and ``json.load``, ``JSON.parse``, jq) the last.

    Such a file goes to pandas' reading, so every backend keeps the last value, as JSON
    readers do (RFC 8259 leaves the meaning to the reader; most keep the last): refusing
    it would need an exact key count on every read, which only a slow parse gives, while
    this check costs a count of the file's ``:`` and, where ``frame`` has nulls, ``null``
    (``counts``, :func:`_byte_counts`: ~5 % of polars' parse each). Every ``:`` in a file
    of scalar records ends a key or is inside a string, so the ``:`` beyond the keys whose
    value is there and those in text and names are keys whose value is ``null``, or keys
    named twice: more than there are ``null`` literals (at most the file's ``null`` and
    ``frame``'s nulls, which also count keys left out of a record) is a key twice. A
    false alarm only sends the file through pandas' slower reading.
    """
    import polars as pl

    text = [name for name, kind in frame.schema.items() if kind == pl.String]
    inside = frame.select(pl.sum_horizontal(pl.col(text).str.count_matches(":", literal=True).sum())).item() if text else 0
    inside += frame.height * sum(name.count(":") for name in frame.columns)
    spare = counts[b":"] - inside - sum(frame[name].count() for name in frame.columns)
    return spare > min(sum(frame.null_count().row(0)), counts.get(b"null", 0))


def _may_hide_booleans(frame: Any) -> bool:
    """Whether a numeric column of ``frame`` holds a 0 or a 1, which polars' parser of a
    JSON array may have read from ``true``/``false`` (:func:`_hides_booleans`)."""
    import polars as pl

    numbers = [name for name, kind in frame.schema.items() if kind.is_numeric()]
    return bool(numbers) and frame.select(
        pl.any_horizontal(((pl.col(numbers) == 0) | (pl.col(numbers) == 1)).any())).item()


def _hides_booleans(frame: Any, counts: dict[bytes, int]) -> bool:
    """Whether polars' parser of a JSON array may have read ``true``/``false`` in a column
    of numbers as 1/0 (it does so silently; its JSON lines parser refuses them), which
    pandas' reading names as a column mixing kinds.

    The file's ``true`` and ``false`` (``counts``, :func:`_byte_counts`) are set against
    those polars accounts for: boolean values, text holding the words, and column names
    holding them, once per record whose value under that name is there (not null); one
    more is a hidden one. A name was credited once per record: a key missing from some
    records (an exporter that leaves out empty keys) covered a hidden ``true``. A key
    whose value is ``null`` is not credited either: a false alarm, which only sends the
    file through pandas' slower reading.
    """
    import polars as pl

    found = counts[b"true"] + counts[b"false"]
    words = [name for name, kind in frame.schema.items() if kind == pl.String]
    held = sum(frame[name].count() for name, kind in frame.schema.items() if kind == pl.Boolean)
    if words:
        held += frame.select(pl.sum_horizontal(pl.col(words).str.count_matches("true|false").sum())).item()
    held += sum((name.count("true") + name.count("false")) * frame[name].count() for name in frame.columns)
    return found > held


def _first_record_keys(path: Path) -> list[str] | None:
    """The keys of the file's first record, in order (None when not found in its first 64 KiB)."""
    with open(path, "rb") as fh:
        head = fh.read(1 << 16).decode("utf-8", errors="replace")
    start = head.find("{")
    if start < 0 or "[" not in head[:start] and head[:start].strip():
        return None
    try:
        record, _ = json.JSONDecoder().raw_decode(head, start)
    except ValueError:
        return None
    return list(record) if isinstance(record, dict) else None


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


def _parse_iso_datetimes(frame: pd.DataFrame) -> tuple[pd.DataFrame, list[str]]:
    """Text columns whose every value is an ISO 8601 date-time, as datetimes (UTC with
    offsets), and the names of those that were bare dates (see :func:`_iso_datetimes`)."""
    dates = []
    for name in frame.columns:
        col = frame[name]
        if col.dtype == object or pd.api.types.is_string_dtype(col.dtype):
            parsed = _iso_datetimes(col)
            if parsed is not None:
                frame[name] = parsed
                if _ISO_DATE.fullmatch(col.dropna().iloc[0]):
                    dates.append(name)
    return frame, dates


def _iso_datetimes(col: pd.Series) -> pd.Series | None:
    """``col`` as datetimes when its every value is an ISO 8601 date-time, all with a zone
    (then in UTC) or all without, or every value a bare date (``2024-01-01``, at midnight:
    pandas has no date type, as for CSV); else None."""
    values = col.dropna()
    # The first value rules most columns out before the whole column is scanned.
    if values.empty or not isinstance(values.iloc[0], str):
        return None
    if _ISO_DATE.fullmatch(values.iloc[0]):
        if not values.astype(str).str.fullmatch(_ISO_DATE.pattern).all():
            return None
        try:
            return pd.to_datetime(col, format="%Y-%m-%d")
        except (ValueError, OverflowError):
            return None
    if not _ISO_DATETIME.fullmatch(values.iloc[0]):
        return None
    text = values.astype(str)
    if not text.str.fullmatch(_ISO_DATETIME.pattern).all():
        return None
    offsets = text.str.contains(_ISO_OFFSET)
    if offsets.any() and not offsets.all():
        return None  # some with and some without a zone: no one reading is right, keep the text
    try:
        return pd.to_datetime(col, format="ISO8601", utc=bool(offsets.all()))
    except (ValueError, OverflowError):
        return None  # e.g. month 13: not dates after all


def _looks_like_json_lines(path: Path) -> bool:
    with open(path, encoding="utf-8", errors="replace") as fh:
        return fh.read(1).lstrip().startswith("{")


def _write_json_pandas(pdf: pd.DataFrame, out: Path, options: WriteOptions) -> None:
    """A records array (``.json``) or JSON lines (``.jsonl``, ``.ndjson``) from pandas,
    through polars' writer when the frame converts.

    pandas' ``to_json`` keeps at most 15 significant digits, so float64 values would not
    survive a round trip; polars writes the shortest text that reads back to the same
    float, and datetimes as ISO 8601 at their own precision.
    """
    import polars as pl
    from pyarrow import ArrowException

    errors = (ArrowException, TypeError, ValueError)
    pdf = _periods_as_text(pdf)
    try:
        frame = keeping_names(pdf.reset_index(drop=True), pl.from_pandas)
    except errors:
        # Columns polars cannot type (e.g. Python objects mixing numbers and text): pandas'
        # writer still writes them, at its best float precision, which is said.
        floats = [str(c) for c in pdf.columns if pd.api.types.is_float_dtype(pdf[c].dtype)]
        if floats:
            untyped = []
            for c in pdf.columns:
                try:
                    pl.from_pandas(pdf[[c]].reset_index(drop=True))
                except errors:
                    untyped.append(str(c))
            warnings.warn(f"gpufeed: {options.shown(out)}: column(s) {untyped} mix types polars cannot write, so pandas' JSON "
                          f"writer wrote the file, with 15 significant digits: float column(s) {floats} may "
                          "not read back exactly", stacklevel=4)
        text = pdf.to_json(None, orient="records", lines=_lines_by_name(out), date_format="iso", date_unit="ns",
                           double_precision=15)
        with open_compressed(out) as fh:
            fh.write(text.encode("utf-8"))
        return
    _write_json_polars(frame, out, options)


def _periods_as_text(pdf: pd.DataFrame) -> pd.DataFrame:
    """``pdf`` with its period and interval columns as their text (``2024-01``, ``(0, 1]``),
    as the CSV writer writes them; missing values stay missing.

    Through Arrow a period became its ordinal (months since 1970: ``2024-01`` was written
    as ``648``) and an interval a ``{"left", "right"}`` object, silently; JSON has no such
    types.
    """
    special = [i for i, t in enumerate(pdf.dtypes) if isinstance(t, pd.PeriodDtype | pd.IntervalDtype)]
    if not special:
        return pdf
    out = pdf.copy(deep=False)
    for i in special:
        column = pdf.iloc[:, i]
        out.isetitem(i, column.astype(str).astype(object).where(column.notna(), None))
    return out


def _write_json_polars(df: Frame, path: Path, options: WriteOptions) -> None:
    """A records array (``.json``: JSON lines there were rejected by ``json.load``,
    ``pd.read_json`` and ``pl.read_json``) or JSON lines (``.jsonl``, ``.ndjson``)."""
    import polars as pl

    binary = [name for name, kind in df.schema.items() if _holds_binary(kind)]
    if binary:
        # polars' JSON writer panics on bytes ("not yet implemented"), after writing a byte.
        raise TabularError(
            f"{options.shown(path)}: column(s) {binary} hold binary values (bytes), which JSON has no type for: "
            "encode them as text first, e.g. base64 (pl.col(name).bin.encode('base64') on polars; "
            "df[name].map(lambda b: base64.b64encode(b).decode()) on pandas) or hex, or write Parquet or "
            "Feather, which keep bytes"
        )
    # JSON has no decimal type: polars writes decimals as strings ("12.34"), which read
    # back as text on polars and no op takes; as numbers instead, as pandas writes them.
    decimals = [name for name, kind in df.schema.items() if isinstance(kind, pl.Decimal)]
    frame = df.with_columns(pl.col(decimals).cast(pl.Float64)) if decimals else df
    with open_compressed(path) as fh:  # compressed as the suffix says (.jsonl.gz)
        if _lines_by_name(path):
            frame.write_ndjson(fh)
        else:
            frame.write_json(fh)


def _holds_binary(kind: Any) -> bool:
    """Whether a polars type is binary or nests binary values (a list or struct of bytes)."""
    import polars as pl

    if kind == pl.Binary:
        return True
    if isinstance(kind, pl.List | pl.Array):
        return _holds_binary(kind.inner)
    if isinstance(kind, pl.Struct):
        return any(_holds_binary(f.dtype) for f in kind.fields)
    return False


def _write_json_cudf(df: Frame, path: Path, options: WriteOptions) -> None:
    """Through polars' writer, as a polars frame is written: cuDF's ``to_json`` goes
    through pandas (15 significant digits) and writes datetimes as epoch milliseconds."""
    _write_json_polars(to_backend(df, "polars"), path, options)


JSON = TableFormat(
    "json", tuple(f"{name}{suffix}" for name in (".json", ".jsonl", ".ndjson") for suffix in ("", *COMPRESSION_SUFFIXES)),
    readers={"pandas": _read_json_pandas, "polars": _read_json_polars, "cudf": _read_json_cudf},
    writers={"pandas": _write_json_pandas, "polars": _write_json_polars, "cudf": _write_json_cudf},
)
