"""Statistics helpers shared by the table ops and their fast paths, written on narwhals.

One aggregation pass per call, inf named instead of spread into a mean, float32 columns
accumulated in float64, and the one error for a column with nothing to fit on.
"""

from __future__ import annotations

import datetime
import math
from collections.abc import Sequence
from typing import Any

import narwhals as nw
import numpy as np

from gpufeed.gpu_transforms.tabular.errors import ColumnTypeError, EmptyTableError, NonFiniteError
from gpufeed.gpu_transforms.tabular.frames import NwFrame, dtypes_of, first_row, is_missing


def aggregate(frame: NwFrame, exprs: list[nw.Expr]) -> dict[str, Any]:
    """One pass over ``frame`` computing every named aggregate in ``exprs``."""
    return first_row(frame.select(*exprs))


def check_finite(frame: NwFrame, columns: Sequence[str], op: str) -> None:
    """inf would poison a mean or a range silently; name the columns instead.

    Only columns that can hold inf are counted: integer and boolean ones cannot, and
    polars refused ``abs`` of a boolean column ("`abs` operation not supported for dtype
    `bool`") before the error could name the column holding inf beside it.
    """
    schema = dtypes_of(frame, columns)
    columns = [c for c in columns if not (schema[c].is_integer() or schema[c] == nw.Boolean)]
    if not columns:
        return
    counts = aggregate(frame, [(nw.col(c).abs() == math.inf).sum().alias(c) for c in columns])
    bad = {c: int(n) for c, n in counts.items() if n}
    if bad:
        raise NonFiniteError(
            f"{op}: column(s) hold inf values {bad} (count per column); clip them (Clip) or "
            "replace them with missing values before fitting"
        )


def aggregate_finite(frame: NwFrame, exprs: list[nw.Expr], columns: Sequence[str], op: str) -> dict[str, Any]:
    """:func:`aggregate` for statistics that an inf value turns into inf or NaN (mean, std,
    min, max), raising :class:`NonFiniteError` as :func:`check_finite` does.

    A finite result proves the columns hold no inf, so the separate counting pass (one more
    read of every column) only runs when some statistic is missing or not finite.
    """
    with np.errstate(invalid="ignore", over="ignore"):  # pandas warns on inf - inf (and a variance beyond
        # float64) before we can name the column or rescale it
        stats = aggregate(frame, exprs)
    return finite_stats(stats, frame, columns, op)


def finite_stats(stats: dict[str, Any], frame: NwFrame, columns: Sequence[str], op: str) -> dict[str, Any]:
    """``stats`` of ``columns`` as they are; when one is missing or not finite, the columns
    are counted for inf first (:func:`check_finite` raises naming them)."""
    if not all(is_finite(v) for v in stats.values()):
        check_finite(frame, columns, op)
    return stats


def f64_columns(columns: Sequence[str], schema: Any, backend: str) -> list[nw.Expr]:
    """``columns`` read as :func:`f64` reads each, as at most two expressions of many
    columns (those cast to float64, those read as they are), in which a statistic keeps
    each column's name.

    Why not an expression per column: narwhals parses each in ~0.3 ms, so one per column
    took 1.3 s to fit ``Standardize`` on 2,000 columns of 500 rows on polars (a real
    table's width), 0.13 s so.
    """
    cast = [c for c in columns if reads_as_f64(c, schema, backend)]
    casting = set(cast)
    plain = [c for c in columns if c not in casting]
    return [*([nw.col(*cast).cast(nw.Float64)] if cast else []), *([nw.col(*plain)] if plain else [])]


def moment_exprs(columns: Sequence[str], schema: Any, backend: str, factor: float = 1.0) -> list[nw.Expr]:
    """Each column's mean and standard deviation (``ddof=0``) of its values read as
    :func:`f64` reads them (times ``factor``), named ``m:COLUMN`` and ``s:COLUMN``
    (:func:`f64_columns`)."""
    values = [v * factor if factor != 1.0 else v for v in f64_columns(columns, schema, backend)]
    return [*[v.mean().name.prefix("m:") for v in values], *[v.std(ddof=0).name.prefix("s:") for v in values]]


def is_finite(value: Any) -> bool:
    """Whether ``value`` is a finite number (False for None, pandas' NA, text)."""
    try:
        return math.isfinite(float(value))
    except (TypeError, ValueError):  # None, pandas NA, a non-number: let the full check decide
        return False


def no_values(op: str, column: str) -> EmptyTableError:
    """The error for a column with no non-missing value to fit ``op`` on."""
    return EmptyTableError(f"{op}: column {column!r} has no non-missing value to fit on (empty table?)")


def number(value: Any, column: str, op: str) -> float:
    """A fitted statistic as a float; a missing one means the column had nothing to fit on."""
    if is_missing(value):
        raise no_values(op, column)
    return float(value)


#: Integers up to this magnitude are exact as float64 (2**53); beyond it ids and nanosecond
#: times lose digits as floats.
EXACT_FLOAT_INT = 2**53


def exact_number(value: Any, column: str, op: str) -> float | int:
    """:func:`number`, but an integer stays a Python int: a bound of an integer column
    (``MinMax``'s minimum and maximum) beyond 2**53 would lose digits as a float."""
    if isinstance(value, int | np.integer) and not isinstance(value, bool | np.bool_):
        return int(value)
    return number(value, column, op)


def sorted_keys(keys: list[Any], column: str, op: str) -> list[Any]:
    """``keys`` (:func:`json_key` values: categories, groups) in order, as a recipe keeps them.

    Raises:
        ColumnTypeError: a mix of text and numbers (an object column from a spreadsheet),
            which has no order: named, with the cast to text.
    """
    try:
        return sorted(keys)
    except TypeError:
        kinds = sorted({type(k).__name__ for k in keys})
        raise ColumnTypeError(
            f"{op}: column {column!r} mixes {' and '.join(kinds)} values, e.g. "
            f"{[next(k for k in keys if type(k).__name__ == t) for t in kinds]}; keys need "
            f"one type: cast the column to text first (pandas: df[{column!r}].astype('string'))"
        ) from None


def json_key(value: Any, column: str, op: str) -> Any:
    """A fitted key (a category, a group) as the plain value a recipe's JSON stores: numpy
    scalars (a pandas boolean group's ``np.True_``) as Python's.

    Raises:
        ColumnTypeError: a value JSON cannot store (dates, times, bytes), named with its
            column at fit time instead of when the recipe is saved.
    """
    if isinstance(value, np.generic):
        value = value.item()
    if isinstance(value, bool | int | float | str):
        return value
    if isinstance(value, datetime.date | datetime.time | datetime.timedelta | np.datetime64 | np.timedelta64):
        # One name on every backend (pandas gives Timestamp, polars datetime or date).
        if isinstance(value, datetime.timedelta | np.timedelta64):
            kind, cast = "durations", "to seconds (pandas `s.dt.total_seconds()`, polars `pl.col(c).dt.total_seconds()`)"
        elif isinstance(value, datetime.time):
            kind, cast = "times of day", "to ISO text (pandas `s.astype(str)`, polars `pl.col(c).dt.to_string()`)"
        else:
            kind, cast = "dates", ("to its year (pandas `s.dt.year`, polars `pl.col(c).dt.year()`) or to ISO text "
                                   "(`s.dt.strftime('%Y-%m-%d')`, `pl.col(c).dt.to_string()`)")
        raise ColumnTypeError(
            f"{op}: column {column!r} holds {kind}, which a recipe does not keep as {op} keys (its state is "
            f"JSON: numbers, booleans and text); cast the column first, e.g. {cast}"
            + (", or hash it with HashBucket" if op == "Categorify" else ""))
    raise ColumnTypeError(f"{op}: column {column!r} holds {type(value).__name__} values, which a recipe does not "
                          "keep (its state is JSON: numbers, booleans and text); cast the column to text or "
                          "integers first")


def scale(std: Any, mean: float = 0.0, count: float = 1.0) -> float:
    """A std to divide by: 1 for a constant column, so it maps to 0 (up to the mean's
    rounding) instead of inf/NaN, or to +-1 from rounding noise.

    Constant: the std is missing (a single row), 0, or no larger than the rounding of
    ``count`` values of about ``mean`` can make it; the bound is scikit-learn's
    (``StandardScaler``): a column of 50,000 values 39.1 has a float64 std of 7.1e-15, not
    0, and dividing by it sent every row to -1 on one backend and 0 on another.
    """
    if is_missing(std) or std == 0:
        return 1.0
    std, n = float(std), float(count)
    # rounding_noise's bound in plain floats (numpy's scalars cost ~1.5 us a call, and a
    # per-group fit calls this per group and column).
    if std * math.sqrt(max(1.0 - n * _EPS, 0.0)) <= abs(n * float(mean) * _EPS):
        return 1.0
    return std


def scales(std: np.ndarray, mean: np.ndarray, count: np.ndarray) -> np.ndarray:
    """:func:`scale` of arrays of statistics (NaN: missing), element by element, the same
    operations in the same order (the same bits)."""
    with np.errstate(invalid="ignore", over="ignore"):
        noise = std * np.sqrt(np.maximum(1.0 - count * _EPS, 0.0)) <= np.abs(count * mean * _EPS)
    return np.where(np.isnan(std) | (std == 0) | noise, 1.0, std)


def rounding_noise(std: Any, mean: Any, count: Any) -> Any:
    """Whether a std (numbers, or numpy arrays of them) is no larger than the rounding of
    ``count`` float64 values of about ``mean`` can make it: scikit-learn's bound
    (``StandardScaler``) for a constant column, ``var <= n*eps*var + (n*mean*eps)**2``.

    Compared as ``std * sqrt(1 - n*eps) <= |n*mean*eps|``, the same bound without squaring:
    the square of a std beyond ~1.3e154 is inf, and such a column (``[2e160, -2e160, 0]``)
    was taken for a constant one and left unscaled.
    """
    room = np.sqrt(np.maximum(1.0 - np.asarray(count, dtype=np.float64) * _EPS, 0.0))
    return np.asarray(std) * room <= np.abs(count * np.asarray(mean) * _EPS)


_EPS = float(np.finfo(np.float64).eps)


#: Columns are multiplied by this (a power of two: exact) when their variance overflows
#: float64 (values beyond ~1.3e154), and their std by its inverse afterwards.
TINY = 2.0**-600


def wrapping_sums(backend: str) -> bool:
    """Whether ``backend`` sums an integer column in its own integer type, so that a mean
    (or a group's) wraps round once the sum passes int64/uint64: Dask's ``mean`` is a sum
    per partition in int64 (epoch-nanosecond stamps wrapped from 6 rows on), and libcudf's
    group-by mean is its integer SUM over COUNT. pandas and polars accumulate in float64."""
    return backend in ("dask", "cudf")


def f64(column: str, schema: Any, backend: str = "") -> nw.Expr:
    """``column`` with float32 values as float64, for statistics and arithmetic; integers
    too on the backends whose sums would wrap (:func:`wrapping_sums`).

    A float32 column (after a downcast) would otherwise be summed in float32 by some
    backends, which then disagree with each other and with the float64 truth in the 7th
    digit (scikit-learn accumulates in float64 too). Other columns are used as they are:
    pandas and polars average integers in float64 already (a cast there would copy the
    column for nothing).
    """
    return nw.col(column).cast(nw.Float64) if reads_as_f64(column, schema, backend) else nw.col(column)


def reads_as_f64(column: str, schema: Any, backend: str = "") -> bool:
    """Whether :func:`f64` casts ``column`` to float64 (narrow floats; integers where sums wrap)."""
    return narrow_float(column, schema) or (wrapping_sums(backend) and schema[column].is_integer())


def narrow_float(column: str, schema: Any) -> bool:
    """True for a float column narrower than float64 (float32, float16)."""
    return schema[column].is_float() and schema[column] != nw.Float64


def lookup(expr: nw.Expr, old: list[Any], new: list[Any], default: Any, dtype: Any) -> nw.Expr:
    """``expr.replace_strict(old, new, default=...)``; with nothing to look up (an empty
    vocabulary: every value rarer than ``min_count``, or an all-missing column) every value
    gets ``default`` (narwhals' pandas backend raises IndexError on an empty mapping)."""
    if not old:
        return nw.lit(default, dtype)
    return expr.replace_strict(old, new, default=default, return_dtype=dtype)


#: The integer types an op may widen a column to, smallest first; at each size the column's
#: own signedness is tried first (uint8 filled with 1000 becomes uint16, as polars does).
#: Not the 128-bit ones: pandas and cuDF have none, and the result must be one on every backend.
_WIDENINGS = ((nw.Int8, nw.UInt8), (nw.Int16, nw.UInt16), (nw.Int32, nw.UInt32), (nw.Int64, nw.UInt64))


def integer_range(dtype: Any) -> tuple[int, int] | None:
    """``(lowest, highest)`` value of a narwhals integer dtype; None for any other dtype."""
    if not dtype.is_integer():
        return None
    for bits in (8, 16, 32, 64, 128):
        if dtype == getattr(nw, f"Int{bits}"):
            return -(1 << (bits - 1)), (1 << (bits - 1)) - 1
        if dtype == getattr(nw, f"UInt{bits}"):
            return 0, (1 << bits) - 1
    return None


def widened_integer(dtype: Any, value: int) -> Any | None:
    """The integer dtype an integer column of ``dtype`` needs to hold ``value`` too: ``dtype``
    itself when the value fits, else the smallest type holding every value of ``dtype`` and
    ``value`` (uint8 and 1000: uint16; uint8 and -1: int16), the type polars' own
    ``fill_null`` promotes to; None when no 64-bit integer type holds both (uint64 and -1)."""
    own = integer_range(dtype)
    if own is None:
        return None
    if own[0] <= value <= own[1]:
        return dtype
    low, high = min(own[0], value), max(own[1], value)
    for pair in _WIDENINGS:
        for candidate in (pair[::-1] if own[0] == 0 else pair):
            lo, hi = integer_range(candidate)
            if lo <= low and high <= hi:
                return candidate
    return None


def decimal_numbers(frame: NwFrame, columns: Sequence[str], schema: Any = None) -> dict[str, Any]:
    """The number type each decimal column among ``columns`` is read as, ``{column: dtype}``
    (empty, with no pass over the data, when none is a decimal): int64 for whole-number
    decimals whose values fit, float64 otherwise, as pandas reads them
    (:func:`gpufeed.datasets.tables.read_table`); values beyond 2**53 of a float64 column
    then lose digits, as on pandas, where reading them warns.

    polars and cuDF keep Parquet's decimals, and an op on them differed from pandas in the
    backend's own decimal arithmetic: ``Clip`` rounded its quantile bounds to the scale
    (1.015 -> 1.02), ``Log`` failed on ``Decimal + float``, and a vocabulary or group key
    of ``Decimal`` values could not be stored in JSON. Every op reads a decimal column as
    these numbers instead, so statistics come from the same float64 (or int64) values on
    every backend. A ``DECIMAL(38, 0)`` id column (a warehouse's id type) keeps int64 where
    its values fit: through float64, distinct ids became one. ``schema``: the columns'
    dtypes when the caller already has them.
    """
    schema = schema if schema is not None else frame.collect_schema()
    decimals = [c for c in dict.fromkeys(columns) if schema[c] == nw.Decimal]
    if not decimals:
        return {}
    # An unknown scale counts as fractional: float64 never truncates a value.
    whole = [c for c in decimals if getattr(schema[c], "scale", None) is not None and schema[c].scale <= 0]
    # Precision over 18 digits may hold values beyond int64: their range decides (one pass,
    # only for such columns).
    wide = [c for c in whole if (getattr(schema[c], "precision", None) or 39) > 18]
    span = aggregate(frame, [*[nw.col(c).min().alias(f"lo:{c}") for c in wide],
                             *[nw.col(c).max().alias(f"hi:{c}") for c in wide]]) if wide else {}
    fits = {c for c in whole if c not in wide
            or all(is_missing(span[k]) or -2**63 <= int(span[k]) < 2**63 for k in (f"lo:{c}", f"hi:{c}"))}
    return {c: nw.Int64 if c in fits else nw.Float64 for c in decimals}


def decimal_number(frame: NwFrame, column: str, dtype: Any) -> nw.Expr:
    """The decimal ``column`` as ``dtype`` (from :func:`decimal_numbers`), each value the
    float64 nearest to it (``Decimal("1.15")`` is ``1.15``, as ``float()`` gives it).

    polars' cast rounds so; Arrow's decimal-to-float cast, which pandas' Arrow-backed
    decimals (``ArrowDtype(decimal128)``) take, multiplies by a rounded power of ten and
    is one unit off in the last bit for about 1 in 40 two-digit prices (1.15 became
    1.1500000000000001): there the decimal's text is parsed instead (correctly rounded).
    cuDF and Dask take their own cast.
    """
    expr = nw.col(column)
    if dtype == nw.Float64 and type(nw.to_native(frame)).__module__.split(".")[0] == "pandas":
        expr = expr.cast(nw.String)
    return expr.cast(dtype)


def decimals_as_numbers(frame: NwFrame, columns: Sequence[str], schema: Any = None) -> NwFrame:
    """``frame`` with its decimal ``columns`` cast to the numbers :func:`decimal_numbers`
    names; ``frame`` itself when none is a decimal (a schema check, no pass over the data)."""
    casts = decimal_numbers(frame, columns, schema)
    frame = frame.with_columns(*[decimal_number(frame, c, t) for c, t in casts.items()]) if casts else frame
    return _object_decimals(frame, columns, schema)


def _object_decimals(frame: NwFrame, columns: Sequence[str], schema: Any = None) -> NwFrame:
    """``frame`` with its pandas object columns of ``Decimal`` values among ``columns`` as
    the numbers polars reads them as (a pickled or HDF5 frame of prices, ``apply(Decimal)``):
    ``to_backend`` makes them a polars ``Decimal`` of the values' largest scale, which
    :func:`decimal_numbers` reads as int64 when that scale is 0 and every value fits, else
    as float64, each value the float nearest to it. ``frame`` itself when there is none (a
    schema check; an object column's first value).

    On pandas such a column failed inside the op in Python's words (``Standardize``:
    "unsupported operand type(s) for -: 'decimal.Decimal' and 'float'"), where polars ran.
    """
    import decimal

    if type(nw.to_native(frame)).__module__.split(".")[0] != "pandas":
        return frame
    schema = schema if schema is not None else frame.collect_schema()
    objects = [c for c in dict.fromkeys(columns) if schema[c] == nw.Object]
    if not objects:
        return frame
    import pandas as pd

    native = nw.to_native(frame)
    numbers = {}
    for c in objects:
        present = native[c].dropna()
        if not len(present) or not isinstance(present.iloc[0], decimal.Decimal):
            continue
        values = present.tolist()
        if not all(isinstance(v, decimal.Decimal) for v in values):
            continue  # mixed: left to the op, which names it
        exponents = [v.as_tuple().exponent for v in values]
        whole = all(isinstance(e, int) and e >= 0 for e in exponents) and all(-2**63 <= v < 2**63 for v in values)
        if whole:
            out = pd.array([None if is_missing(v) else int(v) for v in native[c]],
                           dtype="Int64" if len(present) < len(native) else "int64")
        else:
            out = np.array([np.nan if is_missing(v) else float(v) for v in native[c]], dtype="float64")
        numbers[c] = pd.Series(out, index=native.index, name=native[c].name)
    if not numbers:
        return frame
    out = native.copy(deep=False)
    for c, values in numbers.items():
        out[c] = values
    return nw.from_native(out, eager_only=True)
