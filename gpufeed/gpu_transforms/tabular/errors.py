"""Exceptions for bad tables: each names the file, line or column at fault.

Raised by the table ops here and by the readers and writers in
:mod:`gpufeed.datasets.tables`, which import them from this module.

All subclass :class:`TabularError`, itself a ``ValueError``, so callers that already catch
``ValueError`` keep working and callers that want to tell cases apart can.
"""

from __future__ import annotations


class TabularError(ValueError):
    """Base class of every bad-input error raised by the table ops, readers and writers."""


class UnknownFormatError(TabularError):
    """A file whose storage format is neither given nor recognisable from its suffix."""


class MalformedCSVError(TabularError):
    """A CSV line with the wrong number of fields; ``lines`` holds ``(line number, text)``."""

    def __init__(self, message: str, lines: list[tuple[int | None, str]] | None = None) -> None:
        super().__init__(message)
        self.lines = lines or []


class MixedTypeError(TabularError):
    """A text column where some values parse as numbers and others do not."""


class MissingColumnError(TabularError, KeyError):
    """A recipe, rule or hand-off asked for a column the table does not have."""

    def __str__(self) -> str:  # KeyError would quote the whole message
        return str(self.args[0])


class ColumnTypeError(TabularError, TypeError):
    """An op was given a column of a type it cannot work on (text or dates to a numeric op)."""


class EmptyTableError(TabularError):
    """Statistics were asked of a table (or column) with no rows or no non-missing value."""


class NonFiniteError(TabularError):
    """``inf`` (or a value outside an op's domain, e.g. log of a negative) in a column."""


class UnseenCategoryError(TabularError):
    """A category met at transform time that the fitted vocabulary lacks (``on_unseen='raise'``)."""


class DowncastError(TabularError):
    """A requested dtype would overflow or change a value."""


class BackendError(TabularError):
    """A frame of a kind the tabular tools do not handle, or an op a backend cannot run."""
