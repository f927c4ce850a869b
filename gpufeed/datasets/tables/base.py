"""What a table format is: :class:`TableFormat` (suffixes, a reader and a writer per backend),
the options a read or write is given, and the :class:`ReadReport` a read fills in.
"""

from __future__ import annotations

import pickle
import sys
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path

from gpufeed.gpu_transforms.tabular.errors import EmptyTableError, TabularError
from gpufeed.gpu_transforms.tabular.frames import Frame
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
        return len(self.bad_lines)


@dataclass(frozen=True)
class ReadOptions:
    """The checked arguments of one read; ``sep`` and ``encoding`` are for text formats only."""

    backend: str  # the backend the frame is wanted on
    on_bad_lines: OnError = OnError.RAISE
    mixed_types: MixedTypes = MixedTypes.RAISE
    sep: str | None = None
    encoding: str | None = None


@dataclass(frozen=True)
class WriteOptions:
    """The checked arguments of one write: ``sep`` is a text format's delimiter."""

    sep: str | None = None


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
    """

    name: str
    suffixes: tuple[str, ...]
    readers: Mapping[str, Reader]
    writers: Mapping[str, Writer]
    text_options: TextOptions | None = None
    names_errors: bool = False

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
        if _is_blank(path):
            raise EmptyTableError(f"{path}: the {name} file is empty")
        try:
            return reader(path, options, report)
        except TabularError:
            raise
        except _reader_errors() as exc:
            detail = (str(exc).strip().splitlines() or [""])[0][:200]
            raise TabularError(f"{path}: cannot read it as {name} ({type(exc).__name__}: {detail})") from exc

    return read


def _is_blank(path: Path) -> bool:
    """No bytes, or only whitespace (an empty JSON file is often a lone newline)."""
    if path.stat().st_size == 0:
        return True
    with open(path, "rb") as fh:
        while chunk := fh.read(1 << 20):
            if chunk.strip():
                return False
    return True


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
