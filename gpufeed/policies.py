"""String options, checked by one helper, and the one vocabulary for bad input.

Every argument that says what to do with bad input uses ``"raise"`` for failing, and a
named alternative for going on:

==================  ======================  ===========================================
argument            values                  the alternative does
==================  ======================  ===========================================
``on_error``        ``"skip"``, ``"raise"``  image loaders: leave the file out, list it in
                                            ``loader.skipped``, warn once
``on_bad_lines``    ``"skip"``, ``"raise"``  CSV readers: leave the line out, list it in
                                            the read report
``mixed_types``     ``"keep"``, ``"raise"``  table readers: keep a mixed column as text
``on_unseen``       ``"index"``, ``"raise"`` ``Categorify``: map an unseen value to the
                                            reserved index
==================  ======================  ===========================================
"""

from __future__ import annotations

from enum import Enum
from typing import Any, TypeVar

_O = TypeVar("_O", bound="StrOption")


class StrOption(str, Enum):
    """A string option whose error names the argument and lists the valid values."""

    @classmethod
    def _missing_(cls, value: object) -> None:
        raise ValueError(f"{value!r} is not a valid {cls.__name__}: use one of {cls._valid()}")

    @classmethod
    def _valid(cls) -> str:
        return ", ".join(repr(m.value) for m in cls)

    @classmethod
    def parse(cls: type[_O], value: Any, argument: str) -> _O:
        """``value`` as a member of this option, or a ValueError naming ``argument``.

        Example:
            >>> OnError.parse("skip", "on_error")
            <OnError.SKIP: 'skip'>
        """
        try:
            return cls(value)
        except ValueError:
            raise ValueError(f"{argument} must be one of {cls._valid()}, got {value!r}") from None


class OnError(StrOption):
    """Bad files (image loaders) and bad lines (CSV readers)."""

    SKIP = "skip"  # leave it out, report it (``loader.skipped``, the read report)
    RAISE = "raise"  # raise an error naming the file (and line)


class MixedTypes(StrOption):
    """A column whose values have more than one type."""

    KEEP = "keep"  # keep the column as text
    RAISE = "raise"  # raise MixedTypeError naming the column and a line


class OnUnseen(StrOption):
    """A category value that the fitted vocabulary does not hold."""

    INDEX = "index"  # map it to the reserved unseen index
    RAISE = "raise"  # raise UnseenCategoryError naming the column and value
