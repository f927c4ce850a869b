"""What a table format is: :class:`TableFormat` (suffixes, a reader and a writer per backend),
the options a read or write is given, and the :class:`ReadReport` a read fills in.
"""

from __future__ import annotations

import pickle
import sys
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from gpufeed.datasets.compression import (
    SUFFIXES,
    compression_of,
    compression_of_name,
    strip_compression,
)
from gpufeed.gpu_transforms.tabular.errors import EmptyTableError, MixedTypeError, TabularError
from gpufeed.gpu_transforms.tabular.frames import Frame, to_backend
from gpufeed.gpu_transforms.tabular.stats import EXACT_FLOAT_INT
from gpufeed.policies import MixedTypes, OnError

#: Malformed lines named in an error or warning before "(and N more)".
MAX_LINES_IN_MESSAGE = 10


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
        """Lines left out (``on_bad_lines="skip"``)."""
        return len(self.bad_lines)


@dataclass(frozen=True)
class ReadOptions:
    """The checked arguments of one read; ``sep``, ``encoding`` and ``decimal`` are for text
    formats only (``sep_given``: the caller chose ``sep``, it is not the default)."""

    backend: str  # the backend the frame is wanted on
    on_bad_lines: OnError = OnError.RAISE
    mixed_types: MixedTypes = MixedTypes.RAISE
    sep: str | None = None
    encoding: str | None = None
    decimal: str = "."
    sep_given: bool = False
    #: CSV: the strings read as missing (pandas' spellings unless the caller chose), and
    #: ``(column, type name)`` pairs read as that type instead of inferred.
    na_values: tuple[str, ...] | None = None
    dtypes: tuple[tuple[str, str], ...] = ()
    #: CSV: the lines skipped at the top of the file (a preamble), and whether the first
    #: line after them is the header (``header=0``); without one (``header=None``) the
    #: columns are named ``"0"``, ``"1"``, ...
    skiprows: int = 0
    header: bool = True


@dataclass(frozen=True)
class WriteOptions:
    """The checked arguments of one write: ``sep`` is a text format's delimiter.

    ``target``: the file the caller asked for, which errors and warnings name. A writer is
    handed a temporary file of the same name in a folder beside it (renamed into place once
    written, so a failed write leaves no partial file and keeps an earlier good one).
    """

    sep: str | None = None
    target: Path | None = None

    def shown(self, path: Path) -> Path:
        """The file to name in a message about writing ``path``: :attr:`target`, else ``path``."""
        return self.target or path


#: ``reader(path, options, report)``: the table in ``path``, on ``options.backend`` or on
#: pandas (converted afterwards); may add skipped lines to ``report``.
Reader = Callable[[Path, ReadOptions, ReadReport], Frame]
#: ``writer(frame, path, options)``: ``frame`` (of the writer's backend) written to ``path``.
Writer = Callable[[Frame, Path, WriteOptions], None]
#: ``text_options(path, sep, encoding)``: a text format's checked ``(delimiter, codec name)``.
TextOptions = Callable[[Path, str | None, str | None], tuple[str, str]]


@dataclass(frozen=True)
class TableFormat:
    """One storage format: the suffixes it is recognised by, and its reader and writer per backend.

    ``readers`` and ``writers`` map a backend (``"pandas" | "polars" | "cudf"``) to the
    function that reads a file onto it or writes a frame of it. ``"pandas"`` is required:
    a backend without its own reader reads through pandas (the frame is converted after),
    and a frame of a backend without its own writer is written through pandas.

    ``text_options``: checks the ``sep=`` and ``encoding=`` a text format (CSV) takes;
    None for formats that take neither. ``names_errors``: the readers name an empty or
    unparsable file themselves; otherwise :meth:`reader` wraps them in :func:`checked`.
    ``reads_directories``: the readers also take a directory of such files (a dataset).
    """

    name: str
    suffixes: tuple[str, ...]
    readers: Mapping[str, Reader]
    writers: Mapping[str, Writer]
    text_options: TextOptions | None = None
    names_errors: bool = False
    reads_directories: bool = False

    def __post_init__(self) -> None:
        if "pandas" not in self.readers or "pandas" not in self.writers:
            raise ValueError(f"table format {self.name!r} needs a pandas reader and writer (the fallback)")

    def reader(self, backend: str) -> Reader:
        """The reader for ``backend``, else pandas'."""
        reader = self.readers.get(backend, self.readers["pandas"])
        return reader if self.names_errors else checked(self.name, reader)

    def writer(self, backend: str) -> tuple[str, Writer]:
        """``(backend the writer takes, writer)``: ``backend``'s own, else pandas'."""
        return (backend, self.writers[backend]) if backend in self.writers else ("pandas", self.writers["pandas"])


def checked(name: str, reader: Reader) -> Reader:
    """``reader`` with the errors of a file it cannot read named: an empty file raises
    :class:`EmptyTableError` and a parser's error becomes a :class:`TabularError`, both
    naming the file (the parsers' own messages often do not).

    Every reader fails differently on an empty file (pyarrow's ArrowInvalid, polars'
    ComputeError without the name, pandas' "Expected object or value") or, for JSON lines,
    returns a 0x0 frame: one clear error instead, as for an empty CSV.
    """

    def read(path: Path, options: ReadOptions, report: ReadReport) -> Frame:
        if path.is_file() and _is_blank(path):  # a directory is a dataset: its reader checks it
            raise EmptyTableError(f"{path}: the {name} file is empty")
        try:
            frame = reader(path, options, report)
        except TabularError:
            raise
        except _reader_errors() as exc:
            detail = (str(exc).strip().splitlines() or [""])[0][:200]
            raise TabularError(f"{path}: cannot read it as {name} ({type(exc).__name__}: {detail})") from exc
        if len(frame.columns) == 0 and len(frame) == 0:
            # A JSON array without records (`[]`): JSON keeps no column names without rows,
            # so the table read back would have lost them; as an empty file, named.
            raise EmptyTableError(f"{path}: the {name} file holds no record (and so no column names)")
        return frame

    return read


def _is_blank(path: Path) -> bool:
    """No bytes, or only whitespace (an empty JSON file is often a lone newline), once
    decompressed (see :func:`open_decompressed`)."""
    if path.stat().st_size == 0:
        return True
    try:
        with open_decompressed(path) as fh:
            while chunk := fh.read(1 << 20):
                if chunk.strip():
                    return False
    except (TabularError, *decompression_errors()):
        return False  # an archive the reader names (several files in one zip, cut short)
    return True


#: The compressions a text table (CSV, JSON) may come in, by the suffix that names them,
#: as ``pandas.read_csv`` and ``pandas.read_json`` infer them: ``readings.csv.gz``,
#: ``flights.csv.zip`` (one file in the archive), ``events.jsonl.zst``. A file read with
#: ``format=`` under another name is still found compressed by its first bytes
#: (:func:`~gpufeed.datasets.compression.compression_of`), never parsed as text.
COMPRESSION_SUFFIXES = {s: SUFFIXES[s] for s in (".gz", ".bz2", ".xz", ".zst", ".zip")}


def _zip_member(path: Path, archive: Any) -> str:
    """The one table file in a zip archive, as pandas reads one (macOS' ``__MACOSX/`` and
    ``.DS_Store`` entries and folders are not files of the table)."""
    names = [n for n in archive.namelist()
             if not n.endswith("/") and not n.startswith("__MACOSX/") and n.rsplit("/", 1)[-1] != ".DS_Store"]
    if len(names) != 1:
        shown = ", ".join(map(repr, names[:5])) + (" ..." if len(names) > 5 else "")
        held = f"{len(names)} files ({shown})" if names else "no file"
        raise TabularError(f"{path}: the zip archive holds {held}; a table is read from an archive of one "
                           "file: extract the file you want and read it")
    return names[0]


def open_decompressed(path: Path, *, arrow: bool = False) -> Any:
    """``path`` opened for reading bytes, decompressed when :func:`compression_of` finds it
    compressed (gzip, bz2, zstd and lz4 by Arrow's codecs, xz by Python's ``lzma``, a zip
    archive's one file by ``zipfile``): a Python binary file, read by lines or blocks.

    ``arrow=True``: an Arrow stream where Arrow decompresses (and for a plain file), which
    Arrow's readers take without going through Python for every block.

    Raises:
        TabularError: a zip archive holding no file or several, naming the file and them.
    """
    import io

    import pyarrow as pa

    kind = compression_of(path)
    if kind is None:
        return pa.input_stream(str(path), compression=None) if arrow else open(path, "rb")
    if kind == "xz":
        import lzma

        return lzma.open(path, "rb")
    if kind == "zip":
        import zipfile

        try:
            with zipfile.ZipFile(path) as archive:
                # The member stays readable after the archive is closed (it holds the file).
                return archive.open(_zip_member(path, archive))
        except zipfile.BadZipFile as exc:
            raise TabularError(f"{path}: cannot read it as a zip archive ({exc})") from exc
    stream = pa.input_stream(str(path), compression=kind)
    return stream if arrow else io.BufferedReader(stream)


def decompression_errors() -> tuple[type[BaseException], ...]:
    """What reading a damaged compressed file raises (a truncated gzip: EOFError; bad data:
    zlib's, lzma's, zipfile's or Arrow's errors, which are OSErrors)."""
    import lzma
    import zipfile
    import zlib

    return (OSError, EOFError, zlib.error, lzma.LZMAError, zipfile.BadZipFile)


def open_compressed(path: Path) -> Any:
    """``path`` opened for writing bytes, compressed as its suffix says (see
    :data:`COMPRESSION_SUFFIXES`; a ``.zip`` archive holds one file named as the archive
    without ``.zip``, as pandas writes one), or plain. A context manager."""
    import contextlib

    kind = compression_of_name(path.name)
    if kind not in COMPRESSION_SUFFIXES.values():
        return open(path, "wb")
    if kind == "gzip":
        import gzip

        return gzip.open(path, "wb")
    if kind == "bz2":
        import bz2

        return bz2.open(path, "wb")
    if kind == "xz":
        import lzma

        return lzma.open(path, "wb")
    if kind == "zip":
        import zipfile

        @contextlib.contextmanager
        def member() -> Any:
            with zipfile.ZipFile(path, "w", zipfile.ZIP_DEFLATED) as archive, \
                    archive.open(strip_compression(path.name), "w", force_zip64=True) as fh:
                yield fh

        return member()
    import pyarrow as pa

    return pa.output_stream(str(path), compression=kind)


def _reader_errors() -> tuple[type[BaseException], ...]:
    """What the readers raise for a file they cannot parse (not I/O or memory errors):
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


def one_integer_type_holds(low: int, high: int) -> bool:
    """Whether one 64-bit integer type holds every whole number from ``low`` to ``high``:
    int64, or uint64 where none is negative (64-bit hashes). A column of ``-1`` beside a
    hash above int64 fits neither, though each value fits one."""
    return (low >= -(2**63) and high < 2**63) or (low >= 0 and high < 2**64)


def warn_integers_as_text(path: Path, names: list[str], stacklevel: int) -> None:
    """Say that ``names``' whole numbers, which no 64-bit integer type holds, were read as
    their text (CSV and JSON alike, on every backend); ``stacklevel`` as the caller's own
    ``warnings.warn`` would take it."""
    import warnings

    warnings.warn(f"gpufeed: {path}: column(s) {names} hold integers beyond 64 bits, or that no one 64-bit "
                  "integer type holds (negative ones beside ones above int64's range; ids?): read as text to keep "
                  "them exact (as floats they were rounded); HashBucket or Categorify take them",
                  stacklevel=stacklevel + 1)


def to_backend_naming(frame: Frame, backend: str, path: Path) -> Frame:
    """``to_backend(frame, backend)`` of a pandas frame read from ``path``, the columns it
    cannot move named with the file and ``backend='pandas'``, which reads the file as it is.

    Raises:
        MixedTypeError: an object column of numbers beside text (or nested values of
            several types), which Arrow cannot type.
        TabularError: an object column of Python ints no one 64-bit integer type holds
            (``-1`` beside a hash above int64), where polars raised a bare OverflowError
            ("Python int too large to convert to C long") naming nothing.
    """
    try:
        return to_backend(frame, backend)
    except MixedTypeError as exc:
        raise MixedTypeError(f"{path}: {exc}; backend='pandas' reads the file as it is") from exc
    except OverflowError as exc:
        wide = []
        for name in frame.columns:
            if frame[name].dtype == object:
                ints = [v for v in frame[name] if type(v) is int]
                if ints and not one_integer_type_holds(min(ints), max(ints)):
                    wide.append(str(name))
        what = f"column(s) {wide} hold" if wide else "a column holds"
        raise TabularError(
            f"{path}: {what} integers that no one 64-bit integer type holds (negative ones beside ones above "
            f"int64's range, or beyond 64 bits), which {backend} cannot hold ({exc}): cast them to text first "
            "(df[column].astype(str)), or backend='pandas' reads the file as it is"
        ) from exc


#: Arrow integer types -> pandas' nullable integer dtypes (which keep missing values exact).
NULLABLE_INTS = {"int8": "Int8", "int16": "Int16", "int32": "Int32", "int64": "Int64",
                 "uint8": "UInt8", "uint16": "UInt16", "uint32": "UInt32", "uint64": "UInt64"}


def slots_within(column: Any, bound: float) -> bool:
    """Whether every value slot of the Arrow integer or float ``column`` lies within
    ``-bound..bound``, read off its data buffers with numpy: True only when every value
    does; null slots (whatever they hold) and NaN count against it, so False means "look
    closer" (``pc.min_max``). A quick test before the exact one: min_max took 4 ms per
    million floats, the buffers' max and min 1 ms."""
    import numpy as np

    for chunk in column.chunks:
        buffers = chunk.buffers()
        if not len(chunk):
            continue
        if len(buffers) != 2 or buffers[1] is None:
            return False
        values = np.frombuffer(buffers[1], chunk.type.to_pandas_dtype())[chunk.offset:chunk.offset + len(chunk)]
        low, high = values.min().item(), values.max().item()  # Python numbers: exact comparisons
        if not (-bound <= low and high <= bound):  # NaN fails both
            return False
    return True


def arrow_to_pandas(table: Any, path: Path) -> Frame:
    """An Arrow table as the pandas frame every reader hands back, with the same meaning as
    the table polars gets from the same file.

    ``Table.to_pandas()`` alone (what ``pd.read_parquet`` does) changes what some columns
    mean, which files from Spark, DuckDB or a warehouse often hold:

    - dates become Python ``date`` objects (no ``.dt``): ``datetime64`` instead, as CSV dates;
    - decimals become Python ``Decimal`` objects, which no numeric op takes: ``int64`` for
      whole-number decimals that fit (warehouse ids are ``DECIMAL(38, 0)``), ``float64``
      otherwise, with a warning naming the column when a value is not exact in float64;
    - integers with missing values become float64, which rounds values beyond 2**53 (ids,
      hashes, uint64): those columns keep pandas' nullable integer dtype (``Int64``,
      ``UInt64``...); smaller ones stay float64, as pandas reads them;
    - booleans with missing values become an object column of True/False/None: pandas'
      nullable ``boolean`` instead, a boolean column as on polars.
    """
    import pandas as pd
    import pyarrow as pa
    import pyarrow.compute as pc

    nullable: dict[int, Any] = {}  # column position -> pandas dtype
    for i, field_ in enumerate(table.schema):
        column, kind = table.column(i), field_.type
        if pa.types.is_decimal(kind):
            column = _decimal_as_number(column, field_.name, path)
            table = table.set_column(i, field_.name, column)
            kind = column.type
        if not column.null_count:
            continue
        if pa.types.is_boolean(kind):
            nullable[i] = pd.BooleanDtype()
        elif (pa.types.is_integer(kind) and len(column) > column.null_count
              and not slots_within(column, EXACT_FLOAT_INT)):
            low, high = pc.min_max(column).values()
            if max(abs(low.as_py()), abs(high.as_py())) > EXACT_FLOAT_INT:
                nullable[i] = pd.api.types.pandas_dtype(NULLABLE_INTS[str(kind)])
    frame = table.to_pandas(date_as_object=False)
    # types_mapper is asked per Arrow type, not per column (an int64 column of small counts
    # with gaps stays float64 while an id column of the same type needs Int64): the columns
    # that need a nullable dtype are converted again, one by one.
    # By name: a pandas index stored as a column (``__index_level_0__``) is not a column here.
    # Columns pandas stored as the frame's index (``__index_level_0__``, a named index) are
    # the index after to_pandas(), not data columns: left as to_pandas() made them.
    meta = table.schema.pandas_metadata or {}
    index_names = {c for c in meta.get("index_columns", []) if isinstance(c, str)}
    for i, dtype in nullable.items():
        if table.schema[i].name in index_names:
            continue
        column = table.column(i)
        converted = pa.table({"c": column}).to_pandas(types_mapper={column.type: dtype}.get)["c"]
        frame[table.schema[i].name] = converted.set_axis(frame.index)
    return frame


def _decimal_as_number(column: Any, name: str, path: Path) -> Any:
    """A decimal column as int64 (whole numbers that fit) or float64 (see :func:`arrow_to_pandas`)."""
    import warnings

    import pyarrow as pa
    import pyarrow.compute as pc

    if column.type.scale <= 0:
        try:
            return pc.cast(column, pa.int64())  # safe cast: raises if a value does not fit
        except (pa.ArrowInvalid, pa.ArrowNotImplementedError):
            pass
    # Through the decimal's text: Arrow's decimal -> float cast multiplies by a rounded power
    # of ten and is one unit off in the last bit for about 1 in 40 two-digit prices (1.15 came
    # back 1.1500000000000001, where polars' cast and float() give 1.15), so the backends fitted
    # statistics that differed in the last bit. Parsing the text rounds correctly (~5x the
    # cast's time, on decimal columns only).
    floats = pc.cast(pc.cast(column, pa.string()), pa.float64())
    # Arrow's float -> decimal cast rounds to the column's scale: a value comes back equal
    # exactly when float64 held it to its last digit.
    exact = pc.equal(pc.cast(floats, column.type, safe=False), column)
    inexact = len(column) - column.null_count - pc.sum(exact).as_py() if len(column) > column.null_count else 0
    if inexact:
        example = column.filter(pc.invert(exact))[0]
        warnings.warn(
            f"{path}: decimal column {name!r} ({column.type}) read as float64 on pandas; {inexact} "
            f"value(s) are not exact in float64 (e.g. {example}); read with backend='polars' to keep "
            "them exact", stacklevel=4,
        )
    return floats
