"""CSV: parsed by Arrow's multi-threaded reader on every backend, with every bad line named.

Arrow's is the one CSV reader that hands back each malformed line, so no row is dropped
without being counted and named; cuDF's reader would skip or fail silently. The table is
then handed to the backend asked for. An empty field (quoted or not) and the usual NA
spellings are missing values in every column, text included, as ``pandas.read_csv`` reads
them. A compressed file (``.csv.gz``, ``.csv.zip``... or told by its first bytes) is read
decompressed, its lines numbered as the decompressed file's. Writers: each backend's own,
compressed as the suffix says.
"""

from __future__ import annotations

import codecs
import csv
import io
import itertools
import re
import stat
import warnings
from collections import defaultdict
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any, TextIO

import numpy as np

from gpufeed.datasets.compression import compression_of
from gpufeed.datasets.tables.base import (
    COMPRESSION_SUFFIXES,
    MAX_LINES_IN_MESSAGE,
    ReadOptions,
    ReadReport,
    TableFormat,
    WriteOptions,
    arrow_to_pandas,
    decompression_errors,
    open_compressed,
    open_decompressed,
    slots_within,
    warn_integers_as_text,
)
from gpufeed.gpu_transforms.tabular.errors import EmptyTableError, MalformedCSVError, MixedTypeError
from gpufeed.gpu_transforms.tabular.frames import Frame, repeated, to_backend
from gpufeed.policies import MixedTypes, OnError


def _open_text(path: Path | bytes, encoding: str = "utf-8") -> TextIO:
    """The file as text, decompressed as the CSV reader reads it (:func:`open_decompressed`),
    or ``path``'s bytes themselves when it is bytes (a block of a file, already read);
    ``newline=""`` as the csv module needs. A UTF-8 byte-order mark is dropped, as Arrow
    drops it: kept, a BOM on a line of its own (``"\\ufeff\\n"`` before the header) was a
    record, so the header's line, the data rows' lines and the read again for big integers
    (which then took the header for data and kept rounded floats) were one line off."""
    encoding = "utf-8-sig" if encoding == "utf-8" else encoding
    raw = io.BytesIO(path) if isinstance(path, bytes) else open_decompressed(path)
    return io.TextIOWrapper(raw, encoding=encoding, errors="replace", newline="")


def _text_lines(path: Path, encoding: str = "utf-8", skiprows: int = 0) -> Iterator[tuple[int, str]]:
    """``(line number, line)`` of a (possibly compressed) text file, from line ``skiprows + 1``
    on (numbered as the file's lines)."""
    with _open_text(path, encoding) as fh:
        yield from itertools.islice(enumerate(fh, start=1), skiprows, None)


def _records(path: Path | bytes, sep: str, encoding: str, skiprows: int = 0) -> Iterator[tuple[int, int, list[str]]]:
    """``(first line, last line, fields)`` of each non-blank record after the first
    ``skiprows`` lines of a file (or of bytes, :func:`_open_text`), read as the csv module
    reads them (a quoted field may span lines).

    The skipped lines are lines, not records, as Arrow's ``skip_rows`` counts them: a quote
    in a preamble (``Source: "BLS``) opens no field. Line numbers are the file's.
    """
    with _open_text(path, encoding) as fh:
        for _ in range(skiprows):
            if not fh.readline():
                return
        reader = csv.reader(fh, delimiter=sep)
        end = skiprows
        for record in reader:
            start, end = end + 1, skiprows + reader.line_num
            if record:
                yield start, end, record


#: Arrow's CSV block size (its default): the skipped lines and the header must fit in the
#: first block, so a read that skips lines gets a block that much larger.
_BLOCK_SIZE = 1 << 20
#: The largest block a read grows to when a line or a quoted field does not fit in one
#: (a header of 70,000 gene names, a field holding a document): Arrow's limit is 2 GiB.
_MAX_BLOCK_SIZE = 1 << 30


def _skipped_size(path: Path, encoding: str, lines: int) -> int | None:
    """The size, in the UTF-8 bytes Arrow's reader parses, of the first ``lines`` lines of
    the file; None when no line follows them (they are the whole file). Counted with a
    byte-order mark's 3 bytes, which the text lines drop and Arrow's first block holds."""
    size = len(codecs.BOM_UTF8)
    for lineno, line in _text_lines(path, encoding):
        if lineno > lines:
            return size
        size += len(line.encode("utf-8"))
    return None


def _arrow_read_options(encoding: str, skiprows: int, size: int | None, block: int = _BLOCK_SIZE,
                        **names: Any) -> Any:
    """Arrow's read options for a file whose first ``skiprows`` lines (``size`` bytes, see
    :func:`_skipped_size`) are skipped: Arrow fails to skip more lines than its first block
    holds ("Could not skip initial N rows"), so the block grows by what is skipped."""
    import pyarrow.csv as pacsv

    return pacsv.ReadOptions(encoding="utf8" if encoding == "utf-8" else encoding, skip_rows=skiprows,
                             block_size=min(block + (size or 0), 2**31 - 1), **names)  # Arrow's int32


def _parse_options(sep: str, handler: Callable[[Any], str], quoted: bool = True) -> Any:
    """Arrow's parse options. ``newlines_in_values`` (where the file may quote, ``quoted``):
    a quoted field may hold line breaks (a comment, an address), as every CSV reader
    allows. Without it Arrow cuts the file into blocks at any line break, one inside quotes
    too: a file over a block (1 MiB) of such fields lost rows as "malformed", failed with
    "parser got out of sync", or (one column) came back with other values and no error.
    It costs 20-30 % of Arrow's parse (a 1M-row, 165 MB table: 240 -> 300 ms), so a file
    without a quote character is read without it (:func:`_scan_quotes_and_hex`)."""
    import pyarrow.csv as pacsv

    return pacsv.ParseOptions(delimiter=sep, newlines_in_values=quoted, invalid_row_handler=handler)


#: Bytes :func:`_blocks` reads at a time.
_SCAN_SIZE = 1 << 22


def _scan_quotes_and_hex(path: Path) -> tuple[bool, bool | None]:
    """``(may quote, holds hex)``, told by one read of the file.

    May quote: whether the file may hold a quoted field (so a quoted line break): False
    only for an uncompressed file without a ``"`` byte. A memchr scan of the file read 4 MiB
    at a time into one buffer (165 MB: about 17 ms, ending at the first quote where there
    is one) against the 60 ms that quote-aware parsing costs there; scanning the mapped
    file took 23-28 ms, most of it page faults and the unmapping.

    Holds hex: whether the file holds ``0x`` or ``0X`` (:func:`_hex_in`), which
    :func:`_hex_as_text` asks where the table has an integer column, told by the same read
    of a file without quotes (a read of its own cost as much again as the quote scan);
    None where the read ends before (at a quote) or there is none (a compressed file, a
    pipe): :func:`_holds_hex` reads the file then, where an integer column asks.
    """
    if compression_of(path) is not None:
        return True, None
    hexadecimal = False
    try:
        if not stat.S_ISREG(path.stat().st_mode):  # a pipe: scanning it would consume it
            return True, None
        with open(path, "rb", buffering=0) as fh:
            for buffer, size in _blocks(fh):
                if buffer.find(b'"', 0, size) != -1:
                    return True, hexadecimal or None
                hexadecimal = hexadecimal or _hex_in(buffer, size)
    except OSError:  # unreadable here: parse quote-aware (Arrow names the problem)
        return True, None
    return False, hexadecimal


def _blocks(fh: Any) -> Iterator[tuple[bytearray, int]]:
    """The bytes of the binary file ``fh``, ``_SCAN_SIZE`` at a time, read into one buffer:
    ``(buffer, size)``, the block its first ``size`` bytes, led by the block before's last
    byte (so a two-byte word across two blocks is in the second)."""
    buffer = bytearray(_SCAN_SIZE + 1)
    view = memoryview(buffer)
    kept = 0
    while read := fh.readinto(view[kept:]):
        size = kept + read
        yield buffer, size
        buffer[0] = buffer[size - 1]
        kept = 1


def _hex_in(buffer: bytearray, size: int) -> bool:
    """Whether ``buffer[:size]`` holds ``0x`` or ``0X``, the start of a hexadecimal number to
    Arrow's integer parser. A block without an ``x`` or ``X`` (memchr, as fast as the read)
    is passed over; any other is searched by Arrow's case-insensitive substring match,
    about 0.25 ms per MB (Python's ``in`` took 0.75 ms per MB and word)."""
    import pyarrow as pa
    import pyarrow.compute as pc

    if buffer.find(b"x", 0, size) == -1 and buffer.find(b"X", 0, size) == -1:
        return False
    offsets = pa.py_buffer(np.array([0, size], dtype=np.int32))
    block = pa.Array.from_buffers(pa.binary(), 1, [None, offsets, pa.py_buffer(memoryview(buffer)[:size])])
    return bool(pc.any(pc.match_substring(block, "0x", ignore_case=True)).as_py())


def _outgrows_block(exc: Exception, path: Path, block: int) -> bool:
    """Whether Arrow's error ``exc`` means a line or field longer than its ``block``: it
    says so for a field ("straddles two block boundaries") but calls a file whose header
    line does not fit in the first block "Empty CSV file" (error path only: reads up to
    ``block + 1`` bytes to tell a file that is not empty)."""
    text = str(exc)
    if "straddl" in text:
        return True
    if "Empty CSV file" not in text:
        return False
    with open_decompressed(path) as raw:
        return len(raw.read(block + 1)) > block


def _column_named(exc: Exception, path: Path, sep: str, encoding: str, skiprows: int, header: bool) -> str:
    """Arrow's conversion error ``exc`` with the column's name beside its number ("In CSV
    column #2": the position, counted from 0), read from the header (error path only)."""
    found = re.search(r"column #(\d+)", str(exc))
    if not found or not header:
        return str(exc)
    first = next(_records(path, sep, encoding, skiprows), None)
    index = int(found.group(1))
    if first is None or index >= len(first[2]):
        return str(exc)
    return f"column {first[2][index]!r}: {exc}"


def _first_undecodable_line(path: Path, encoding: str, skiprows: int = 0) -> tuple[int, bytes] | None:
    """``(line number, raw line)`` of the first line ``encoding`` cannot decode after the
    skipped ones, which Arrow does not parse (error path only)."""
    with open_decompressed(path) as raw:
        for lineno, line in enumerate(raw, start=1):
            if lineno <= skiprows:
                continue
            try:
                line.decode(encoding)
            except UnicodeDecodeError:
                return lineno, line.rstrip(b"\r\n")
    return None


def _locate_lines(
    path: Path, bad: list[tuple[int | None, str]], encoding: str = "utf-8", skiprows: int = 0
) -> list[tuple[int | None, str]]:
    """Fill in physical line numbers Arrow's threaded parser could not give (bad rows only).

    A bad record whose quoted field holds a line break spans lines: it is matched against
    as many lines joined, and numbered by the line it starts on (it was "line None").
    Lines skipped with ``skiprows`` are not looked at (a preamble line that reads like a bad
    one is no row) but counted: the numbers are the file's, as Arrow's own are.
    """
    if all(n is not None for n, _ in bad):
        return bad
    pending: dict[str, list[int]] = defaultdict(list)
    for i, (n, text) in enumerate(bad):
        if n is None:
            pending[text].append(i)
    # The spans to try, in lines: a record's line breaks, "\r\n" or "\n" (the csv module's
    # lines, as newline="" keeps them, end at each).
    spans = sorted({text.count("\n") + text.count("\r") - text.count("\r\n") + 1 for text in pending})
    recent: list[str] = []
    located = list(bad)
    for lineno, line in _text_lines(path, encoding, skiprows):
        recent = [*recent[1 - spans[-1]:], line] if spans[-1] > 1 else [line]
        for span in spans:
            if span > len(recent):
                break
            text = "".join(recent[-span:]).rstrip("\r\n")
            slots = pending.get(text)
            if slots:
                located[slots.pop(0)] = (lineno - span + 1, text)
    return located


def _line_of_row(
    path: Path, row: int, skipped: list[tuple[int | None, str]], sep: str = ",", encoding: str = "utf-8",
    skiprows: int = 0, header: bool = True,
) -> int | None:
    """The file line where data row ``row`` (0-based, as Arrow counts rows) starts.

    Records are read as the csv module reads them (a quoted field may span lines); the
    first ``skiprows`` lines, blank lines, the header (the first non-blank record after
    them, when there is one) and the malformed lines skipped before the row are not rows.
    None when the file has fewer rows (the caller then names the row). Only run on the
    error path.
    """
    skip = {n for n, _ in skipped if n is not None}
    records = _records(path, sep, encoding, skiprows)
    if header:
        next(records, None)
    seen = -1
    for start, _, _ in records:
        if start not in skip:
            seen += 1
            if seen == row:
                return start
    return None


def _header_end(path: Path | bytes, sep: str, encoding: str, skiprows: int) -> int:
    """The file line the header ends on (past the skipped lines, the blank lines Arrow
    passes over and a quoted name's line breaks): the lines a read given the column names
    skips to start at the first data row."""
    first = next(_records(path, sep, encoding, skiprows), None)
    return skiprows if first is None else first[1]


def csv_options(path: Path, sep: str | None, encoding: str | None) -> tuple[str, str]:
    """Checked ``(delimiter, codec name)``: ``","`` (a tab for a ``.tsv`` file) and UTF-8
    unless ``sep``/``encoding`` say otherwise."""
    if sep is None:
        sep = "\t" if Path(path).name.lower().endswith(_TSV_SUFFIXES) else ","
    if not isinstance(sep, str) or len(sep) != 1 or sep in "\r\n\"":
        raise ValueError(f"{path}: sep must be one character other than a quote or line end, got {sep!r}")
    try:
        name = codecs.lookup("utf-8" if encoding is None else encoding).name
    except LookupError as exc:
        raise ValueError(f"{path}: unknown encoding {encoding!r}") from exc
    return sep, name


#: Delimiters other than the one asked for that a header line holding none of that one
#: suggests: European exports use ``;``, database dumps tabs or ``|``, and a ``.tsv``
#: file (read with a tab) may hold commas.
_OTHER_DELIMITERS = (",", ";", "\t", "|")


def _delimiter_hint(path: Path, sep: str, encoding: str, skiprows: int = 0, header: bool = True) -> str:
    """A sentence suggesting ``sep=`` when the header line (the first non-blank line after
    the ``skiprows`` skipped ones) holds no ``sep`` but another common delimiter (a
    ``;``-separated export read with the default ``,``); else ``""``."""
    for _, line in _text_lines(path, encoding, skiprows):
        first = line.lstrip("\ufeff").rstrip("\r\n")
        if not first.strip():
            continue
        if sep in first:
            return ""
        found = [d for d in _OTHER_DELIMITERS if d in first]
        what = "header line" if header else "first line"
        return f" The {what} holds no {sep!r} but {found[0]!r}: pass sep={found[0]!r}." if found else ""
    return ""


#: The field values ``pandas.read_csv`` reads as missing by default (its
#: ``STR_NA_VALUES``); Arrow's default list lacks ``None`` and ``<NA>``, the words
#: ``str(None)`` and pandas' own ``to_csv`` of a nullable column write.
PANDAS_NA_VALUES = ("", "#N/A", "#N/A N/A", "#NA", "-1.#IND", "-1.#QNAN", "-NaN", "-nan", "1.#IND", "1.#QNAN",
                    "<NA>", "N/A", "NA", "NULL", "NaN", "None", "n/a", "nan", "null")


#: ``dtype=`` type names a CSV column can be read as, and their Arrow types' names.
CSV_TYPES = {"str": "string", "string": "string", "int64": "int64", "float64": "float64", "bool": "bool_"}


def _read_csv_arrow(
    path: Path, on_bad_lines: OnError, report: ReadReport, sep: str, encoding: str, decimal: str = ".",
    na_values: Sequence[str] | None = None, dtypes: Sequence[tuple[str, str]] = (), skiprows: int = 0,
    header: bool = True,
) -> Any:
    import pyarrow as pa
    import pyarrow.csv as pacsv
    from pyarrow import ArrowInvalid

    bad: list[tuple[int | None, str]] = []

    def handler(row: Any) -> str:
        bad.append((row.number, row.text))
        return "skip"

    empty = (f"{path}: the CSV file is empty ({'not even a header line' if header else 'not one line'}"
             f"{f' after the {skiprows} skipped by skiprows' if skiprows else ''})")
    size = None
    if skiprows:
        # Told here, not from Arrow's "Could not skip initial N rows", which also means
        # skipped lines longer than its first block (see _arrow_read_options).
        size = _skipped_size(path, encoding, skiprows)
        if size is None:
            raise EmptyTableError(empty)
    # Arrow decodes UTF-8 natively; any other codec is transcoded through Python. Without a
    # header Arrow names the columns f0, f1, ...: renamed "0", "1", ... below, as pandas'
    # integer names are text everywhere else in the kit; dtype= names them so.
    read_options = _arrow_read_options(encoding, skiprows, size, autogenerate_column_names=not header)
    in_file = {name: name if header else f"f{name}" for name, _ in dtypes if header or name.isdigit()}
    # strings_can_be_null: an empty field (quoted or not) and the usual NA spellings are
    # missing in text columns too, as pandas.read_csv reads them; by default Arrow keeps
    # them as text there, so a missing value written as an empty field came back as "".
    convert_options = pacsv.ConvertOptions(
        strings_can_be_null=True, decimal_point=decimal,
        null_values=list(PANDAS_NA_VALUES if na_values is None else na_values),
        column_types={in_file[name]: getattr(pa, CSV_TYPES[kind])() for name, kind in dtypes if name in in_file})
    # Decompressed as the file's first bytes say (.csv.gz, .csv.zip, ... or a compressed
    # file under another name), never parsed as text while compressed.
    block = _BLOCK_SIZE
    quoted, hexadecimal = _scan_quotes_and_hex(path)
    try:
        while True:
            try:
                with open_decompressed(path, arrow=True) as source:
                    table = pacsv.read_csv(source, read_options=read_options, convert_options=convert_options,
                                           parse_options=_parse_options(sep, handler, quoted))
                break
            except ArrowInvalid as exc:
                # A line or a quoted field longer than the block: read again with blocks
                # that hold it (the common file pays nothing for this).
                if block >= _MAX_BLOCK_SIZE or not _outgrows_block(exc, path, block + (size or 0)):
                    raise
                block = min(block * 8, _MAX_BLOCK_SIZE)  # 512 MiB * 8 passed Arrow's int32 limit
                bad.clear()
                read_options = _arrow_read_options(encoding, skiprows, size, block,
                                                   autogenerate_column_names=not header)
    except ArrowInvalid as exc:
        if "Empty CSV file" in str(exc) and block < _MAX_BLOCK_SIZE:
            raise EmptyTableError(empty) from exc
        if block >= _MAX_BLOCK_SIZE:
            raise MalformedCSVError(f"{path}: a line or quoted field is longer than {_MAX_BLOCK_SIZE >> 20} MiB, "
                                    f"more than the CSV reader holds at once ({exc})") from exc
        raise MalformedCSVError(
            f"{path}: cannot parse CSV: {_column_named(exc, path, sep, encoding, skiprows, header)}") from exc
    except decompression_errors() as exc:
        compression = compression_of(path)  # read again only here: open_decompressed read it to open the file
        if compression is None:
            raise
        raise MalformedCSVError(f"{path}: cannot decompress the {compression} file ({type(exc).__name__}: "
                                f"{exc}); is it damaged or cut short?") from exc
    except UnicodeError as exc:  # raised by the Python codec while transcoding
        raise MalformedCSVError(
            f"{path}: cannot decode the file as {encoding} ({exc}); pass the file's encoding=, "
            "e.g. encoding='latin-1' or 'cp1252'"
        ) from exc
    if not header:
        table = table.rename_columns([str(i) for i in range(table.num_columns)])
    try:
        file_names = table.column_names
    except UnicodeDecodeError as exc:  # Arrow keeps the header's bytes; Python cannot decode them
        with open_decompressed(path) as raw:
            bom = raw.read(2) in (codecs.BOM_UTF16_LE, codecs.BOM_UTF16_BE)
        suggestion = "encoding='utf-16' (the file starts with its byte-order mark)" if bom else (
            "e.g. encoding='latin-1' or 'cp1252'")
        raise MalformedCSVError(f"{path}: the header is not valid {encoding} ({exc}); pass the file's "
                                f"encoding=, {suggestion}") from exc
    # Arrow reads text that is not valid UTF-8 as a binary column instead of failing; a CSV
    # has no binary type, so such a column always means the wrong encoding.
    binary = [n for n, f in zip(table.column_names, table.schema, strict=True)
              if pa.types.is_binary(f.type) or pa.types.is_large_binary(f.type)]
    if binary:
        first = _first_undecodable_line(path, encoding, skiprows)
        where = f" (first on line {first[0]}: {first[1][:80]!r})" if first else ""
        raise MalformedCSVError(
            f"{path}: column(s) {binary} are not valid {encoding}{where}; pass the file's encoding=, "
            "e.g. encoding='latin-1' or 'cp1252'"
        )
    if header and bad and table.num_rows == 0:
        # Every data line one field longer than the header: R's write.table(sep=",") writes
        # row names with no name of their own in the header. pandas.read_csv takes those first fields as its index; here they become the blank-named
        # first column, as from R's write.csv (`"",...`), on every backend.
        named = _row_names_read(path, file_names, encoding, sep, skiprows, block, convert_options, quoted)
        if named is not None:
            table, file_names, bad = named, named.column_names, []
            warnings.warn(f"gpufeed: {path}: the header names {len(file_names) - 1} column(s) and every data line has "
                          f"{len(file_names)} fields (R's write.table row names): the first field of each "
                          "line is read as the column 'Unnamed: 0'", stacklevel=5)
    names = _header_names(file_names)
    unknown = [name for name, _ in dtypes if name not in table.column_names]
    if unknown:
        where = "the header does not have" if header else "the file does not have (header=None: '0', '1', ...)"
        raise ValueError(f"{path}: dtype= names column(s) {unknown} {where}; it has "
                         f"{table.column_names[:8]}{' ...' if table.num_columns > 8 else ''}")
    duplicated = repeated(names)
    if duplicated:
        # pandas would rename them (a, a.1) and polars refuse: one clear error on every backend.
        # Checked on the names the frame would have: a blank name beside a real "Unnamed: 0"
        # made two columns of one name on pandas and a polars DuplicateError naming no file.
        blank = (" (a blank name is read as 'Unnamed: <position>', as pandas.read_csv names it)"
                 if "" in table.column_names else "")
        raise MalformedCSVError(f"{path}: the header names column(s) {duplicated} more than once{blank}; "
                                "give every column its own name")
    # Renamed first: the read again for big integers picks columns by these names (by the
    # header's own, "" picked the first blank column for every blank one).
    table = table.rename_columns(names)
    table = _empty_columns_as_floats(table, typed={name for name, _ in dtypes})

    def again() -> Any:
        # Given the names, Arrow reads every line after the ones it skips as data: skip the
        # header too, and the blank lines before it (with skip_rows=1 a blank first line
        # was skipped and the header read as a row, which no integer column took).
        start = _header_end(path, sep, encoding, skiprows) if header else skiprows
        return _arrow_read_options(encoding, start, _skipped_size(path, encoding, start), block, column_names=names)

    read_again = _reader_again(path, table.num_rows, again, convert_options, sep, quoted)
    typed = {name for name, _ in dtypes}
    table = _unsigned_ids(_hex_as_text(table, path, read_again, hexadecimal, typed), path, read_again, typed)
    if bad:
        bad = sorted(_locate_lines(path, bad, encoding, skiprows), key=lambda b: (b[0] is None, b[0] or 0))
        shown = "; ".join(f"line {n}: {t[:80]!r}" for n, t in bad[:MAX_LINES_IN_MESSAGE])
        more = f" (and {len(bad) - MAX_LINES_IN_MESSAGE} more)" if len(bad) > MAX_LINES_IN_MESSAGE else ""
        if on_bad_lines is OnError.RAISE:
            # Every data line off: the header is what is wrong (pandas reads the extra leading
            # fields of such a file as its index, without a word).
            trailing = all(text.rstrip("\r\n").rstrip(" " if sep != " " else "").endswith(sep) for _, text in bad)
            fault = (f" Every data line is: the header names {table.num_columns} column(s) "
                     f"({', '.join(table.column_names[:6])}{' ...' if table.num_columns > 6 else ''})"
                     + (f", and every line ends with the separator {sep!r}: remove it at each line's end."
                        if trailing else ": is it missing a name?")) if table.num_rows == 0 else ""
            raise MalformedCSVError(
                f"{path}: {len(bad)} malformed line(s) with the wrong number of fields: {shown}{more}.{fault} "
                f"Pass on_bad_lines='skip' to skip them and get them in the read report."
                f"{_delimiter_hint(path, sep, encoding, skiprows, header)}",
                lines=bad,
            )
        report.bad_lines = bad
    return table


def _row_names_read(path: Path, header_names: list[str], encoding: str, sep: str, skiprows: int, block: int,
                    convert_options: Any, quoted: bool) -> Any | None:
    """The file read again with a blank name before the header's (``["", *header_names]``),
    when every data line then parses (a header one name short: row names); None otherwise."""
    import pyarrow.csv as pacsv
    from pyarrow import ArrowInvalid

    bad: list[Any] = []

    def handler(row: Any) -> str:
        bad.append(row)
        return "skip"

    start = _header_end(path, sep, encoding, skiprows)
    options = _arrow_read_options(encoding, start, _skipped_size(path, encoding, start), block,
                                  column_names=["", *header_names])
    try:
        with open_decompressed(path, arrow=True) as source:
            table = pacsv.read_csv(source, read_options=options, convert_options=convert_options,
                                   parse_options=_parse_options(sep, handler, quoted))
    except ArrowInvalid:
        return None
    if not table.num_rows or bad or _blank(table.column(table.num_columns - 1)):
        return None  # the last field empty on every line: a separator ending each line, not row names
    return table


def _blank(column: Any) -> bool:
    """Whether every value of an Arrow column is missing or white space alone."""
    import pyarrow as pa
    import pyarrow.compute as pc

    if column.null_count == len(column):
        return True
    return pa.types.is_string(column.type) and pc.all(pc.utf8_is_space(column.fill_null(" "))).as_py()


def _empty_columns_as_floats(table: Any, typed: set[str]) -> Any:
    """``table`` with every column that has no value at all (every field empty or an NA
    spelling: a float column that was all NaN when written, a sensor that never reported)
    as float64, as ``pandas.read_csv`` reads it, instead of Arrow's untyped null column
    (object on pandas, ``Null`` on polars, which no numeric op takes). Columns the caller
    typed with ``dtype=`` are left as asked, and so is a file without rows (a header
    alone), whose columns pandas reads as ``object``."""
    import pyarrow as pa

    if table.num_rows == 0:
        return table
    for i, (name, column) in enumerate(zip(table.column_names, table.columns, strict=True)):
        if pa.types.is_null(column.type) and name not in typed:
            table = table.set_column(i, name, column.cast(pa.float64()))
    return table


def _header_names(names: list[str]) -> list[str]:
    """The header's names with each blank one named as ``pandas.read_csv`` names it,
    ``Unnamed: <position>`` (0-based), on every backend: the index column pandas' ``to_csv``
    writes has a blank name, and polars called it ``column_0``, so a recipe found it on one
    backend only. A name of spaces stays as it is, as in pandas."""
    return [name or f"Unnamed: {i}" for i, name in enumerate(names)]


#: The largest float64 below 2**63: a float column within it holds no whole number
#: beyond int64 (:func:`_unsigned_ids`).
_BELOW_2_63 = float(np.nextafter(2.0**63, 0))


class _NotReadAgain(Exception):
    """A second read of a CSV file's columns that did not give the first read's rows."""


def _reader_again(path: Path, rows: int, read_options: Callable[[], Any], convert_options: Any, sep: str,
                  quoted: bool) -> Callable[[list[str], Any], Any]:
    """``read_again(names, kind)``: the Arrow table of ``names``' columns read again from the
    file's data rows as ``kind`` (an Arrow type), the same ``rows`` rows as the first read
    (its malformed lines skipped again), or None when a value is not of that kind.

    ``read_options()``: the read options of the data rows alone, under the table's names
    (made once, when a column is first read again: finding the header's end reads the
    file); ``quoted``: whether the file may quote (:func:`_scan_quotes_and_hex`). ``read_again``
    raises :class:`_NotReadAgain` when the second read fails otherwise or gives other rows
    (a file the two reads see differently), for the caller to say so: returning the first
    read's values silently kept, e.g., rounded floats for ids beyond int64.
    """
    import pyarrow as pa
    import pyarrow.csv as pacsv

    made: list[Any] = []

    def read_again(names: list[str], kind: Any) -> Any:
        if not made:
            made.append(read_options())
        options = pacsv.ConvertOptions(
            strings_can_be_null=True, decimal_point=convert_options.decimal_point,
            null_values=convert_options.null_values, column_types=dict.fromkeys(names, kind), include_columns=names,
            quoted_strings_can_be_null=convert_options.quoted_strings_can_be_null,
        )
        try:
            with open_decompressed(path, arrow=True) as source:
                found = pacsv.read_csv(source, read_options=made[0], convert_options=options,
                                       parse_options=_parse_options(sep, lambda _: "skip", quoted))
        except pa.ArrowInvalid as exc:
            if "conversion error" in str(exc) and not pa.types.is_string(kind):
                return None  # a value of another kind (a fraction beside big integers)
            raise _NotReadAgain(str(exc)) from exc
        if found.num_rows != rows:
            raise _NotReadAgain(f"{found.num_rows} rows read again, against {rows}")
        return found

    return read_again


def _unsigned_ids(table: Any, path: Path, read_again: Callable[[list[str], Any], Any],
                  typed: set[str] = frozenset()) -> Any:
    """``table`` with its whole-number columns beyond int64 read again exactly: up to
    2**64 - 1 (64-bit hashes, unsigned ids) as uint64, beyond that as their text.

    ``read_again``: see :func:`_reader_again`; a second read that fails is said in a
    warning naming the columns, read as float64 (it was silent: a BOM on a line of its own
    had the second read take the header for data, and the ids came back rounded).

    Arrow's CSV type inference knows no uint64 and no wider integer: such a column came
    back float64, every value rounded to 53 bits, silently (pandas keeps the wider ones as
    Python ints, object). Only columns whose largest magnitude is at least 2**63 are read
    again, so other files pay a look at each float column's buffers (:func:`slots_within`).
    """
    import pyarrow as pa
    import pyarrow.compute as pc

    unsigned, wide = [], []
    for name, column in zip(table.column_names, table.columns, strict=True):
        if name in typed:  # read as the caller asked (dtype=)
            continue
        # slots_within first: numpy's min and max of the buffers, a quarter of min_max's time.
        if (pa.types.is_floating(column.type) and len(column) > column.null_count
                and not slots_within(column, _BELOW_2_63)):
            low, high = (v.as_py() for v in pc.min_max(column).values())
            if low >= 0 and 2.0**63 <= high <= 2.0**64:  # 2**64 - 1 rounds up to 2**64
                unsigned.append(name)
            elif max(abs(low), abs(high)) >= 2.0**63:  # beyond any integer type, if integers
                wide.append(name)
    if not unsigned and not wide:
        return table
    exact = {}
    try:
        if unsigned:
            found = read_again(unsigned, pa.uint64())
            # One column that is not uint64 fails the read of all: then each is read alone.
            parts = [(unsigned, found)] if found is not None else [([n], read_again([n], pa.uint64())) for n in unsigned]
            for names, part in parts:
                if part is not None:
                    exact.update((name, part.column(name)) for name in names)
                else:  # a value just past 2**64 (it rounds to 2**64 too), or fractions: as wide ones
                    wide += names
        if wide:
            found = read_again(wide, pa.string())
            # Only all-integer text is kept as text; 1e30 or 2.5 beside them leaves floats.
            exact.update((name, found.column(name)) for name in wide
                         if pc.all(pc.match_substring_regex(found.column(name), r"^\s*[-+]?\d+\s*$")).as_py())
    except _NotReadAgain as exc:
        import warnings

        unread = [name for name in unsigned + wide if name not in exact]
        warnings.warn(f"gpufeed: {path}: column(s) {unread} hold whole numbers beyond int64, which could not be read "
                      f"again exactly ({exc}): read as float64, rounded to 53 bits; pass dtype={{name: str}} to "
                      "keep their text", stacklevel=6)
    for name, column in exact.items():
        table = table.set_column(table.column_names.index(name), name, column)
    kept_as_text = [name for name in wide if name in exact]
    if kept_as_text:
        warn_integers_as_text(path, kept_as_text, stacklevel=6)
    return table


def _hex_as_text(table: Any, path: Path, read_again: Callable[[list[str], Any], Any], hexadecimal: bool | None,
                 typed: set[str] = frozenset()) -> Any:
    """``table`` with each integer column that holds a hexadecimal code (``0x1A``,
    ``0X00FF``: register addresses, error codes) as its text, as ``pandas.read_csv`` and
    ``polars.read_csv`` read it: Arrow's integer parser takes a ``0x`` prefix, so such
    codes came back as 26 and 255, their text lost (and ``0x10`` beside ``16`` was 16
    twice). As text, such a column is then checked like any other (numbers beside codes
    are a mixed-type error).

    ``read_again``: see :func:`_reader_again`. The integer columns' text is read again only
    where the file holds ``0x`` or ``0X`` at all (``hexadecimal``, told by the scan for
    quotes, :func:`_scan_quotes_and_hex`; None: not told, :func:`_holds_hex` reads it
    here), so other files pay no more than a byte scan; ``typed``: columns read as the
    caller asked (``dtype=``)."""
    import pyarrow as pa
    import pyarrow.compute as pc

    names = [name for name, column in zip(table.column_names, table.columns, strict=True)
             if pa.types.is_integer(column.type) and name not in typed]
    if not names or not (_holds_hex(path) if hexadecimal is None else hexadecimal):
        return table
    try:
        found = read_again(names, pa.string())
    except _NotReadAgain as exc:
        raise MalformedCSVError(f"{path}: the file holds '0x', and its integer column(s) {names} could not be read "
                                f"again as text to tell hexadecimal codes ({exc}); pass dtype={{name: str}} for "
                                "columns of codes") from exc
    for name in names:
        text = found.column(name)
        if pc.any(pc.match_substring_regex(text, r"^\s*0[xX]")).as_py():
            table = table.set_column(table.column_names.index(name), name, text)
    return table


def _holds_hex(path: Path) -> bool:
    """Whether the (decompressed) file holds ``0x`` or ``0X`` (:func:`_hex_in`), for a file
    :func:`_scan_quotes_and_hex` does not read: a compressed file is decompressed a second
    time for it, where the table has an integer column."""
    with open_decompressed(path) as fh:
        return any(_hex_in(buffer, size) for buffer, size in _blocks(fh))


#: A number written with a decimal comma, optionally with ``.`` thousands separators:
#: ``1,5``, ``-0,25``, ``1.234,50``.
_DECIMAL_COMMA = r"[+-]?(?:\d+|\d{1,3}(?:\.\d{3})+)(?:,\d+)?"


#: A number as ``pd.to_numeric`` reads one (its text "nan" is no number to it), matched
#: in Arrow: no Python string per value.
_NUMBER = r"(?i)^\s*[+-]?(?:(?:\d+\.?\d*|\.\d+)(?:e[+-]?\d+)?|inf|infinity)\s*$"


def _numbers(values: Any, decimal: str) -> np.ndarray:
    """Which of the Arrow text ``values`` are numbers written with ``decimal`` as the
    decimal mark (``"1,5"`` with ``decimal=","``; then ``"1.5"`` and ``"1.234,5"``,
    thousands, are not)."""
    import pyarrow as pa
    import pyarrow.compute as pc

    if decimal == ",":
        values = pc.if_else(pc.match_substring(values, "."), pa.scalar(None, values.type),
                            pc.replace_substring(values, ",", "."))
    return pc.match_substring_regex(values, _NUMBER).fill_null(False).to_numpy(zero_copy_only=False)


#: The bytes a value that reads as a number (:data:`_NUMBER`, also with ``decimal=","``,
#: and :data:`_DECIMAL_COMMA`) can start with: a digit, a sign, a decimal mark, the ``i``
#: of ``inf``, ASCII white space, and any byte of a multi-byte UTF-8 character (Unicode
#: digits and spaces), so that no number is missed.
_NUMBER_START = np.zeros(256, dtype=bool)
_NUMBER_START[list(b"0123456789+-.,iI \t\n\v\f\r")] = True
_NUMBER_START[0x80:] = True


def _may_hold_numbers(column: Any) -> bool:
    """Whether a value of the Arrow text ``column`` may read as a number: False when no
    value starts with a byte of :data:`_NUMBER_START` (ids ``C0234831``, codes, names), told
    from the first byte of each value, gathered with numpy from the column's buffers: 2 ms
    for a million values, where hashing them (:func:`_distinct`) took 10 ms for a column of
    a few distinct values and matching them against :data:`_NUMBER` 40 ms for an id column
    (a 1M-row table of 7 text columns: the checks took 100 ms, a quarter of the read).

    An empty value or a gap starts where the next value does, so its "first byte" is that
    value's (those at a chunk's end are left out); a null slot that holds bytes (not from
    Arrow's CSV reader) is looked at as a value: a True may be wrong (the checks then
    tell), a False never is."""
    import pyarrow as pa

    offset_type = np.dtype(np.int64 if pa.types.is_large_string(column.type) else np.int32)
    for chunk in column.chunks:
        if not len(chunk):
            continue
        _, offsets, data = chunk.buffers()
        if offsets is None:
            return True
        if data is None or not data.size:
            continue  # every value empty or missing: none is a number
        offsets = np.frombuffer(offsets, offset_type, len(chunk) + 1, chunk.offset * offset_type.itemsize)
        starts = offsets[:offsets[:-1].searchsorted(offsets[-1])]  # the empty ones at the end left out
        if _NUMBER_START.take(np.frombuffer(data, np.uint8).take(starts)).any():
            return True
    return False


def _distinct(column: Any) -> tuple[Any, np.ndarray]:
    """``(values, rows)``: a text column's distinct values with their row counts, or, for a
    column of mostly distinct values (ids, names), every value with a count of 1: hashing a
    million distinct strings cost four times the checks made on them."""
    import pyarrow.compute as pc

    head = column.slice(0, 10_000)
    if len(head) and len(pc.unique(head)) > len(head) // 2:
        return column, np.ones(len(column), dtype=np.int64)
    counted = pc.value_counts(column)
    return counted.field("values"), counted.field("counts").to_numpy(zero_copy_only=False)


#: Records :func:`_written_as_text` reads at most.
_QUOTING_RECORDS = 2000


def _field_quoting(fh: TextIO, sep: str) -> Iterator[list[tuple[bool, str]]]:
    """Each record of ``fh`` as ``(quoted, text)`` per field: whether the field was quoted
    in the file and, for an unquoted one, its text (a quoted field may span lines; ``""``
    in quotes is a quote). What the csv module reads, plus the quoting it does not tell."""
    fields: list[tuple[bool, str]] = []
    text: list[str] = []
    quoted = in_quotes = False
    for line in fh:
        for ch in line:
            if in_quotes:
                in_quotes = ch != '"'  # a doubled quote closes and reopens: the same state
                continue
            if ch == '"' and not text and not quoted:
                quoted = in_quotes = True
            elif ch == sep:
                fields.append((quoted, "".join(text)))
                text, quoted = [], False
            elif ch not in "\r\n" and not quoted:
                text.append(ch)
        if not in_quotes:
            fields.append((quoted, "".join(text)))
            yield fields
            fields, text, quoted = [], [], False


def _written_as_text(path: Path, index: int, sep: str, encoding: str, skiprows: int, header: bool,
                     missing: Any) -> bool:
    """Whether the writer of the file at ``path`` meant column ``index`` as text: each of
    its values in the first records is quoted, missing values aside, while the file holds
    unquoted values elsewhere or has no other column. R's ``write.csv`` (and the kit's
    writers) quote every factor and string and no number, so a factor of codes (``"1"``,
    ``"9"``, ``"X"``) is text; a file of several columns that quotes every field says
    nothing. Only run on the error path."""
    saw_value = saw_unquoted = False
    single = True
    with _open_text(path, encoding) as fh:
        for _ in range(skiprows):
            fh.readline()
        records = _field_quoting(fh, sep)
        if header:
            next(records, None)
        for record in itertools.islice(records, _QUOTING_RECORDS):
            if record == [(False, "")]:
                continue  # a blank line
            single &= len(record) == 1
            for i, (quoted, text) in enumerate(record):
                if i == index:
                    if not quoted and text.strip() not in missing:
                        return False
                    saw_value |= quoted
                elif not quoted and text.strip() not in missing:
                    saw_unquoted = True
    return saw_value and (saw_unquoted or single)


def _check_mixed_types(
    table: Any, path: Path, skipped: list[tuple[int | None, str]], sep: str = ",", encoding: str = "utf-8",
    decimal: str = ".", skiprows: int = 0, header: bool = True, file_columns: Sequence[str] | None = None,
    missing: Any = frozenset(PANDAS_NA_VALUES),
) -> None:
    """Reject a numeric column with words in it (a typo: ``n/a?`` among the readings).

    A column is numeric here when numbers fill at least half of its non-empty rows. A text
    column in which a few values happen to parse as numbers (airport codes ``0E0`` and
    ``0E8`` among 3,376, zip codes, part numbers) stays text, as pandas and polars read it:
    nothing is lost, every value keeps its text.

    A column whose every value the file quotes, where other values are not quoted, is text
    as its writer meant it (:func:`_written_as_text`: R's factors of codes ``"1"``..``"X"``).

    Numbers are written with ``decimal`` as the decimal mark. With the default ``"."``, a
    text column whose every value is a number written with a decimal comma (``1,50``,
    ``1.234,50``: a European export) is rejected too, suggesting ``decimal=","``: read as
    text it would reach a numeric op as words.
    """
    import pyarrow as pa
    import pyarrow.compute as pc

    file_columns = list(table.column_names if file_columns is None else file_columns)  # the fields' order
    for name, column in zip(table.column_names, table.columns, strict=True):
        if not (pa.types.is_string(column.type) or pa.types.is_large_string(column.type)):
            continue
        if not _may_hold_numbers(column):
            continue  # no value can be a number (nor one with a decimal comma): plain text
        # In Arrow, not on Python strings: an id column of a million distinct values took
        # seconds through pandas (reading such a file was 15-40x slower than pandas).
        values, rows = _distinct(column)
        blank = pc.or_(pc.equal(values, ""), pc.utf8_is_space(values)).fill_null(True).to_numpy(zero_copy_only=False)
        values, rows = values.filter(pa.array(~blank)), rows[~blank]
        numeric = _numbers(values, decimal)
        # A decimal-comma column: every value one ("1,50"); the first rules most columns out.
        comma = f"^(?:{_DECIMAL_COMMA})$"
        comma_numbers = (len(values) > 0 and not numeric.any() and bool(re.match(comma, values[0].as_py()))
                         and pc.all(pc.match_substring_regex(values, comma)).as_py())
        # The mark that makes such numbers unreadable: "." (thousands) when the decimal
        # mark is ",", else the comma itself, but only where the delimiter is not a comma:
        # in a comma-separated file a quoted "38,40" is a pair or "1,234" US thousands,
        # text as pandas and polars read it.
        mark = "." if decimal == "," else "," if sep != "," else None
        marked = (np.flatnonzero(pc.match_substring(values, mark).to_numpy(zero_copy_only=False))
                  if comma_numbers and mark else [])
        if len(marked):
            example = values[int(marked[0])].as_py()
            line = _line_of_row(path, pc.index(column, example).as_py(), skipped, sep, encoding, skiprows, header)
            where = f" on line {line}" if line is not None else ""
            if decimal == ",":
                raise MixedTypeError(
                    f"{path}: column {name!r} holds numbers with thousands separators, e.g. {example!r}"
                    f"{where}, which cannot be read: remove them, or pass mixed_types='keep' to read "
                    "the column as text."
                )
            raise MixedTypeError(
                f"{path}: column {name!r} holds numbers written with a comma, e.g. {example!r}{where}: if "
                "it is a decimal comma, pass decimal=',' to read them as numbers; thousands separators "
                "(12,345 or 1.234,5) cannot be read: remove them; or pass mixed_types='keep' to read the "
                "column as text."
            )
        if (numeric.any() and not numeric.all() and rows[numeric].sum() >= rows[~numeric].sum()
                and not _written_as_text(path, file_columns.index(name), sep, encoding, skiprows, header, missing)):
            example = values[int(np.flatnonzero(~numeric)[0])].as_py()
            row = pc.index(column, example).as_py()
            line = _line_of_row(path, row, skipped, sep, encoding, skiprows, header)
            where = f"on line {line}" if line is not None else f"in data row {row + 1}"
            raise MixedTypeError(
                f"{path}: column {name!r} mixes numbers and text ({len(pc.unique(values.filter(numeric)))} "
                f"numeric and {len(pc.unique(values.filter(~numeric)))} non-numeric distinct values); e.g. "
                f"{example!r} {where}. "
                "Fix the values, or pass mixed_types='keep' to read the column as text."
            )


def _from_arrow(table: Any, backend: str, path: Path) -> Frame:
    if backend == "polars":
        import polars as pl
        import pyarrow as pa

        # Text handed over as Arrow string views, polars' own layout: Arrow's cast and
        # polars' import took half the time of polars converting the plain strings (1M rows,
        # 7 text columns: 26 against 50 ms), with the same frame. Only from pyarrow 25: the
        # views cast by pyarrow 19-24 crashed polars 2.0/2.1 (a segfault in pl.from_arrow of a
        # multi-block CSV's columns); there polars converts the plain strings.
        views = int(pa.__version__.split(".")[0]) >= 25
        for i, column in enumerate(table.columns):
            if views and (pa.types.is_string(column.type) or pa.types.is_large_string(column.type)):
                table = table.set_column(i, table.field(i).with_type(pa.string_view()), column.cast(pa.string_view()))
        return pl.from_arrow(table)
    if backend == "cudf":
        import cudf

        return cudf.DataFrame.from_arrow(table)
    # Arrow reads ``2024-01-01`` as a date, which pandas would hold as Python date objects:
    # datetime64 instead; ids with gaps beyond 2**53 stay exact (see arrow_to_pandas).
    return arrow_to_pandas(table, path)


def read_csv(path: Path, options: ReadOptions, report: ReadReport) -> Frame:
    """The CSV file on ``options.backend``; its ``sep``/``encoding`` checked by :func:`csv_options`."""
    table = _read_csv_arrow(path, options.on_bad_lines, report, options.sep, options.encoding, options.decimal,
                            options.na_values, options.dtypes, options.skiprows, options.header)
    if table.num_columns == 1 and not options.sep_given:
        # One column whose name holds ';' is almost always a ';'-separated file read with the
        # default ',': every row would be one text value.
        hint = _delimiter_hint(path, options.sep, options.encoding, options.skiprows, options.header)
        if hint:
            raise MalformedCSVError(f"{path}: read as a single column {table.column_names[0]!r}.{hint} "
                                    f"(Pass sep={options.sep!r} to read it as one column.)")
    if options.mixed_types is MixedTypes.RAISE:
        # Columns the caller typed are what they asked for: no guessing at mixed ones.
        typed = {name for name, _ in options.dtypes}
        _check_mixed_types(table.drop_columns([n for n in typed if n in table.column_names]) if typed else table,
                           path, report.bad_lines, options.sep, options.encoding, options.decimal,
                           options.skiprows, options.header, table.column_names,
                           frozenset(PANDAS_NA_VALUES if options.na_values is None else options.na_values))
    return _from_arrow(table, options.backend, path)


def _iso_durations(column: Any, unit: str) -> Any:
    """A polars duration expression as ISO 8601 text in seconds (``PT1.5S``, ``-PT90S``,
    ``PT172800.001S``, zero ``P0D``), the text polars' JSON writer gives a duration (null
    stays null)."""
    import polars as pl

    digits = {"ns": 9, "us": 6, "ms": 3}[unit]
    ticks = column.cast(pl.Int64)
    size = ticks.abs()
    fraction = size % 10**digits
    text = pl.concat_str([
        pl.when(ticks < 0).then(pl.lit("-")).otherwise(pl.lit("")), pl.lit("PT"),
        (size // 10**digits).cast(pl.String),
        pl.when(fraction == 0).then(pl.lit("")).otherwise(
            pl.lit(".") + fraction.cast(pl.String).str.zfill(digits).str.strip_chars_end("0")),
        pl.lit("S"),
    ])
    return pl.when(ticks == 0).then(pl.lit("P0D")).otherwise(text)  # as polars writes a zero


def _durations_as_text_polars(df: Any) -> Any:
    """A polars frame with its duration columns as ISO 8601 text (see :func:`_iso_durations`):
    polars' CSV writer refuses durations, naming no column, while pandas wrote its own
    ``0 days 00:00:01.5``; now both write what the JSON writer writes, which
    ``pd.to_timedelta`` reads back."""
    import polars as pl

    durations = {name: kind.time_unit for name, kind in df.schema.items() if isinstance(kind, pl.Duration)}
    if not durations:
        return df
    return df.with_columns(_iso_durations(pl.col(name), unit).alias(name) for name, unit in durations.items())


def _times_as_text_polars(df: Any) -> Any:
    """A polars frame with its time-of-day columns as the text pandas' writer gives Python
    times (``str(time)``): ``06:00:00``, with a fraction only where there is one
    (``06:00:00.500000``; nine digits for nanoseconds, which pandas' times cannot hold).
    polars wrote every time with nine digits (``06:00:00.000000000``), which Arrow's
    reader does not take for a time: the column read back as text on every backend."""
    import polars as pl

    times = [name for name, kind in df.schema.items() if kind == pl.Time]
    if not times:
        return df

    def text(column: Any) -> Any:
        fraction = column.dt.nanosecond()
        return (pl.when(fraction == 0).then(column.dt.to_string("%H:%M:%S"))
                .when(fraction % 1000 == 0).then(column.dt.to_string("%H:%M:%S%.6f"))
                .otherwise(column.dt.to_string("%H:%M:%S%.9f")))

    return df.with_columns(text(pl.col(name)).alias(name) for name in times)


def _durations_as_text_pandas(df: Any) -> Any:
    """A pandas frame with its timedelta columns as the text polars' frames get (see
    :func:`_durations_as_text_polars`)."""
    import pandas as pd
    import polars as pl

    durations = [name for name, kind in df.dtypes.items() if pd.api.types.is_timedelta64_dtype(kind)]
    if not durations:
        return df
    df = df.copy(deep=False)
    for name in durations:
        series = pl.from_pandas(df[name].reset_index(drop=True)).alias("d")
        text = pl.DataFrame([series]).select(_iso_durations(pl.col("d"), series.dtype.time_unit).alias("d"))["d"]
        df[name] = pd.Series(text.to_list(), index=df.index, dtype=object)
    return df


def _header_line(names: Sequence[Any], sep: str) -> str:
    """The header as every writer here writes it: names quoted only where they must be
    (a name holding ``sep``, a quote or a line break), so the names read plainly; the
    values below quote text (``QUOTE_NONNUMERIC``)."""
    line = io.StringIO()
    csv.writer(line, delimiter=sep, lineterminator="\n").writerow([str(n) for n in names])
    return line.getvalue()


def _numbers_in_text_pandas(df: Any) -> bool:
    """Whether a text column of ``df`` (pandas) holds a value the reader takes for a number
    (``"9"``, ``"1e5"``; the reader's own test, :func:`_numbers`): one regex pass in Arrow
    per text column. A column it cannot hand to Arrow (an object column of mixed values)
    counts as one."""
    import pandas as pd
    import pyarrow as pa

    for _, column in df.items():
        if isinstance(column.dtype, pd.CategoricalDtype):
            column = pd.Series(column.cat.categories)
        if not (pd.api.types.is_string_dtype(column.dtype) or column.dtype == object):
            continue
        try:
            values = pa.array(column, from_pandas=True)
        except (pa.ArrowInvalid, pa.ArrowTypeError):
            return True
        if (pa.types.is_string(values.type) or pa.types.is_large_string(values.type)) and _numbers(values, ".").any():
            return True
    return False


def _numbers_in_text_polars(df: Any) -> bool:
    """:func:`_numbers_in_text_pandas` for a polars frame."""
    import polars as pl

    texts = [c for c, t in df.schema.items() if t == pl.String or isinstance(t, (pl.Categorical, pl.Enum))]
    if not texts:
        return False
    found = df.select(pl.col(c).cast(pl.String).str.contains(_NUMBER).any() for c in texts)
    return any(found.row(0))


def _warn_missing_spellings(df: Frame, path: Path) -> None:
    """Warn, naming the columns, values and counts, where a text column holds a value that
    CSV readers read as missing (``"NA"``: Namibia, ``"None"``, ``"null"``, ``""``:
    :data:`PANDAS_NA_VALUES`, which pandas, the kit and R read so): written as it is, it
    reads back as a gap, and a round trip through CSV lost it without a word. One pass per
    text column."""
    import narwhals as nw

    frame = nw.from_native(df, eager_only=True)
    spellings = list(PANDAS_NA_VALUES)
    found = []
    for name, dtype in frame.schema.items():
        if dtype == nw.Object:  # pandas' object column: text, or anything
            column = nw.col(name)
        elif dtype in (nw.String, nw.Categorical, nw.Enum):
            column = nw.col(name).cast(nw.String)
        else:
            continue
        hits = frame.filter(column.is_in(spellings)).select(column.alias("v"))
        if len(hits):
            counts = hits.group_by("v").agg(nw.len()).sort("v").rows()
            found.append(f"{name!r} ({', '.join(f'{v!r} x{n}' for v, n in counts)})")
    if found:
        warnings.warn(f"gpufeed: {path}: text values that CSV readers read as missing were written as they are, "
                      f"so they read back as missing values: column(s) {'; '.join(found)}. Parquet or Feather keep "
                      "them as text", stacklevel=5)


def _write_csv(df: Frame, path: Path, options: WriteOptions) -> None:
    """No index column (write_table made an index that holds data a column); compressed
    as the suffix says (:func:`open_compressed`), as every backend writes it.

    Where a text column holds a value that reads as a number (codes ``"9"``, ``"10"``,
    ``"K"``), every text value is quoted and no number is, so the column reads back as
    text (:func:`_written_as_text`); unquoted it was refused as a numeric column with a
    word in it. Other tables are quoted only where a value needs it, as pandas writes
    them: quoting every text value made a 1M-row table 10 % larger and pandas' reading
    of it 20 % slower."""
    _warn_missing_spellings(df, options.shown(path))
    quoting = csv.QUOTE_NONNUMERIC if _numbers_in_text_pandas(df) else csv.QUOTE_MINIMAL
    with open_compressed(path) as fh, io.TextIOWrapper(fh, encoding="utf-8", newline="") as text:
        text.write(_header_line(df.columns, options.sep))
        _durations_as_text_pandas(df).to_csv(text, index=False, header=False, sep=options.sep, quoting=quoting)


def _write_csv_polars(df: Frame, path: Path, options: WriteOptions) -> None:
    """Compressed as the suffix says (polars itself refuses a ``.gz`` name for plain text
    and wrote other compressed names as plain text); text quoted where a text column holds
    numbers, as pandas' writer above; times and durations as :func:`_times_as_text_polars`
    and :func:`_durations_as_text_polars` write them. A one-column frame writes a missing
    value as ``""``, as pandas' writer does: as an empty field it made a blank line, which
    every CSV reader skips, so the row was lost."""
    _warn_missing_spellings(df, options.shown(path))
    quote = "non_numeric" if _numbers_in_text_polars(df) else "necessary"
    with open_compressed(path) as fh:
        fh.write(_header_line(df.columns, options.sep).encode("utf-8"))
        _times_as_text_polars(_durations_as_text_polars(df)).write_csv(
            fh, separator=options.sep, quote_style=quote, include_header=False,
            null_value='""' if df.width == 1 else "")


def _write_csv_cudf(df: Frame, path: Path, options: WriteOptions) -> None:
    """Through polars' writer: cuDF's writes floats with about 10 significant digits (a
    float64 did not read back equal) and writes a ``.csv.gz`` uncompressed."""
    _write_csv_polars(to_backend(df, "polars"), path, options)


#: Tab-separated files: CSV whose default delimiter is a tab.
_TSV_SUFFIXES = (".tsv", *(f".tsv{suffix}" for suffix in COMPRESSION_SUFFIXES))

CSV = TableFormat(
    "csv", (".csv", *(f".csv{suffix}" for suffix in COMPRESSION_SUFFIXES), *_TSV_SUFFIXES),
    readers=dict.fromkeys(("pandas", "polars", "cudf"), read_csv),
    writers={"pandas": _write_csv, "polars": _write_csv_polars, "cudf": _write_csv_cudf},
    text_options=csv_options,
    names_errors=True,
)
