"""The table op API: :class:`TableOp` and the numeric ops a :class:`~.recipe.Recipe` chains.

Each op is fitted on the training table (``fit``: one aggregation pass, statistics kept in
``state``) and applied to any table (``transform``: vectorised narwhals expressions), on
the frame's own backend, which the recipe works out once and passes in. Missing means
null or NaN (the recipe turns NaN into null in the columns an op reads).

Numeric ops: :class:`FillMissing`, :class:`Clip`, :class:`Log`, :class:`Standardize`
(optionally per group) and :class:`MinMax`; the categorical ones (:class:`~.categorical.Categorify`,
:class:`~.categorical.HashBucket`) are in :mod:`.categorical`.
"""

from __future__ import annotations

import math
import numbers
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, ClassVar

import narwhals as nw
import numpy as np

from gpufeed.gpu_transforms.tabular import cudf_kernels
from gpufeed.gpu_transforms.tabular.errors import ColumnTypeError, NonFiniteError
from gpufeed.gpu_transforms.tabular.frames import (
    NwFrame,
    backend_of,
    columns_of,
    dtypes_of,
    first_value,
    free_name,
    is_lazy,
    is_missing,
    nan_as_null,
    per_partition,
    repeated,
    schema_of,
    time_value,
    with_series,
    wrap,
)
from gpufeed.gpu_transforms.tabular.kernels import (
    GROUP_CODE,
    GroupStats,
    cudf_log,
    group_stats_f64,
    polars_affine,
    polars_clip,
    polars_log,
    polars_min_max,
    pooled_stats,
    quantile_bounds,
    standardize_by_code,
    vocabulary_codes,
    with_category,
)
from gpufeed.gpu_transforms.tabular.pandas_kernels import (
    as_column,
    assign,
    clip_columns,
    column_lows,
    column_moments,
    fill_columns,
    finite_means,
    float64_columns,
    log_columns,
    min_max,
    numpy_columns,
    scale_columns,
)
from gpufeed.gpu_transforms.tabular.stats import (
    EXACT_FLOAT_INT,
    TINY,
    aggregate,
    aggregate_finite,
    check_finite,
    decimal_number,
    decimal_numbers,
    decimals_as_numbers,
    exact_number,
    f64,
    f64_columns,
    finite_stats,
    integer_range,
    is_finite,
    json_key,
    moment_exprs,
    narrow_float,
    no_values,
    number,
    scale,
    scales,
    sorted_keys,
    widened_integer,
)

#: Every op by its ``kind``, the name a recipe's JSON stores (filled as ops are defined).
OPS: dict[str, type[TableOp]] = {}


@dataclass
class TableOp:
    """Base class of a table op: ``columns`` to work on, fitted ``state``, and how to
    (de)serialise both.

    ``fit``, ``transform`` and ``fit_transform`` take a narwhals frame and its backend name
    (``"pandas" | "polars" | "cudf" | "dask"``), worked out once by the recipe.
    """

    columns: list[str]
    # Keyword-only: each op's own parameters follow its columns, so that `HashBucket(cols, 64)`
    # is 64 buckets (it had been a fitted state of 64 and the default 1,024 buckets).
    state: dict[str, Any] = field(default_factory=dict, repr=False, kw_only=True)
    kind: ClassVar[str] = ""
    stateless: ClassVar[bool] = False
    #: True for an op with a fast path on eager polars frames: the recipe then hands an
    #: eager frame over as it is instead of the op's lazy query.
    polars_eager: ClassVar[bool] = False
    #: True for an op that, on an eager polars frame, makes NaN in the float columns it
    #: reads missing itself (:func:`.frames.nan_as_null`) where its fast path cannot prove
    #: there is none: the recipe then skips its own pass that looks for NaN.
    polars_finds_nan: ClassVar[bool] = False
    #: What :meth:`numeric_columns` must hold: ``"any"`` (no check), ``"numbers"`` (integers,
    #: floats) or ``"numbers or booleans"`` (read as 0/1, for ops that give float64 on
    #: every backend alike).
    takes: ClassVar[str] = "any"

    def __init_subclass__(cls, **kwargs: Any) -> None:
        """Register every op with a ``kind`` under it, so that a recipe saved with a
        user's own op (a ``TableOp`` subclass of theirs) loads again by that name."""
        super().__init_subclass__(**kwargs)
        if cls.kind:
            known = OPS.get(cls.kind)
            if known is not None and known.__qualname__ != cls.__qualname__:
                raise ValueError(f"TableOp kind {cls.kind!r} is taken by {known.__module__}.{known.__qualname__}")
            OPS[cls.kind] = cls

    def __post_init__(self) -> None:
        if isinstance(self.columns, str) or not self.columns:
            raise ValueError(f"{type(self).__name__}: columns must be a non-empty list of names, got {self.columns!r}")
        self.columns = list(self.columns)
        text_names(type(self).__name__, self.columns)
        twice = repeated(self.columns)
        if twice:  # pandas computed such a column twice, polars refused it in its own words
            raise ValueError(f"{type(self).__name__}: column(s) {twice} named more than once in columns")

    @property
    def fitted(self) -> bool:
        """True once the op holds its statistics (always for a stateless op)."""
        return self.stateless or bool(self.state)

    def needs(self) -> list[str]:
        """Columns the op reads."""
        return list(self.columns)

    def numeric_columns(self) -> list[str]:
        """Columns that must hold numbers (checked by :func:`require_numbers` before the op runs)."""
        return [] if self.takes == "any" else list(self.columns)

    def fit(self, frame: NwFrame, backend: str) -> None:
        """Compute ``state`` from the training table."""

    def transform(self, frame: NwFrame, backend: str) -> NwFrame:
        """Apply the fitted ``state`` to ``frame``: a frame with the op's columns replaced."""
        raise NotImplementedError

    def fit_transform(self, frame: NwFrame, backend: str) -> NwFrame:
        """``fit`` then ``transform`` on the same table; ops override it to skip repeated checks."""
        self.fit(frame, backend)
        return self.transform(frame, backend)

    def params(self) -> dict[str, Any]:
        """Constructor arguments other than ``columns`` (for JSON)."""
        return {}

    def to_dict(self) -> dict[str, Any]:
        """The op and its fitted state as a JSON-ready dict (the recipe's file format)."""
        return {"op": self.kind, "columns": self.columns, **self.params(), "state": self.state}

    @classmethod
    def from_dict(cls, spec: dict[str, Any]) -> TableOp:
        """Rebuild an op from :meth:`to_dict`'s output (without its ``"op"`` key)."""
        params = dict(spec)
        state = params.pop("state")
        op = cls(**params)
        op.state = state
        return op


def text_names(where: str, names: Sequence[Any]) -> None:
    """Refuse column names that are not text, naming them and the fix.

    Column names are text on every backend (polars' and Arrow's are; ``read_table`` gives
    ``"0"``, ``"1"`` for a frame saved with integer names). A pandas frame made from a bare
    numpy array has integer names: a recipe fitted on it failed on Dask ("keywords must be
    strings"), and, saved to JSON and loaded, with a bare KeyError (the state's keys became
    text, its ``columns`` stayed integers)."""
    odd = [n for n in names if not isinstance(n, str)]
    if odd:
        raise ValueError(
            f"{where}: column names must be text, got {odd!r} ({', '.join(sorted({type(n).__name__ for n in odd}))}): "
            "name the frame's columns as text first (pandas: df.columns = df.columns.astype(str); a frame made "
            "from a numpy array then has columns '0', '1', ...) and pass those names")


def require_numbers(frame: NwFrame, op: TableOp, where: str, *, fitting: bool = False,
                    schema: Mapping[str, Any] | None = None) -> None:
    """Raise :class:`ColumnTypeError` naming every column of ``op`` that should hold numbers
    and does not (text, categories, dates).

    Without it each backend fails in its own words, none naming the column ("can only
    concatenate str (not "float") to str" from ``Log`` on a text column), or not at all:
    polars clipped a datetime column to quantiles fitted as raw microseconds, which mean
    something else on a nanosecond column. pandas object columns may hold numbers and are
    left to the op. ``schema``: the dtypes of (at least) those columns, when the caller has them.
    """
    columns = op.numeric_columns()
    if not columns:
        return
    if schema is None:
        schema = dtypes_of(frame, columns)
    booleans = op.takes == "numbers or booleans"
    bad = {c: str(schema[c]) for c in columns
           if not (schema[c].is_numeric() or schema[c] in (nw.Object, nw.Unknown)
                   or (booleans and schema[c] == nw.Boolean))}
    # Untyped columns (pandas object, polars' all-null Null) are looked into: their first
    # value. Lists and dicts (nested Parquet on pandas) failed inside the op in numpy's
    # words, and an all-null polars column in its `abs`, neither naming the column.
    # An all-missing column has nothing to fit on (named here; at transform time it is
    # left to the op: a served batch of one row may have it).
    for c in columns:
        untyped = schema[c] in (nw.Object, nw.Unknown)
        if untyped or (schema[c] == nw.String and c in bad):
            held = _held(frame, c)
            if held == _NO_VALUES:
                if fitting:
                    bad[c] = held
                else:  # nothing to compute on: the op gives missing values (or its fill)
                    bad.pop(c, None)
            elif held is not None and untyped:
                bad[c] = held
    if bad:
        unknown = _unknown_categories(frame, [c for c in bad if schema[c] == nw.Categorical])
        hint = (f"; Dask does not know the categories of {unknown} (read_parquet's categoricals), which "
                "may be numbers: make them known first (ddf[c] = ddf[c].cat.as_known(): a categorical of "
                "numbers is then read as its values) or cast them") if unknown else ""
        raise ColumnTypeError(
            f"{where} works on {op.takes}; column(s) {bad} (name: dtype) are not: encode text or "
            f"categories with Categorify or HashBucket, or turn the column(s) into numbers first{hint}"
        )


def _unknown_categories(frame: NwFrame, categoricals: list[str]) -> list[str]:
    """The Dask categoricals among ``categoricals`` whose categories Dask does not know."""
    if not categoricals or backend_of(frame) != "dask":
        return []
    native = nw.to_native(frame)
    return [c for c in categoricals if not native[c].cat.known]


#: What :func:`_held` says of a column whose every value is missing.
_NO_VALUES = "no values (every row missing)"


def _held(frame: NwFrame, column: str) -> str | None:
    """What an untyped column holds when it is not numbers (for :func:`require_numbers`):
    :data:`_NO_VALUES`, ``"Object: list"``...; None for numbers. Reads up to its first value."""
    first = first_value(frame, column)
    if len(first) == 0:
        return _NO_VALUES
    value = first.item(0)
    return None if isinstance(value, numbers.Number) else f"{first.dtype}: {type(value).__name__}"


def all_missing_as_float(frame: NwFrame, op: TableOp) -> NwFrame:
    """``frame`` with the untyped columns ``op`` reads as numbers that hold no value at all
    (a served batch of one row with a gap: polars' Null, a pandas object column of None)
    cast to float64, so that the op gives missing values (or its fill) as for any float
    column, instead of failing in the backend's words or returning an object column."""
    schema = schema_of(frame)
    empty = [c for c in op.numeric_columns()
             if schema[c] in (nw.Object, nw.Unknown, nw.String) and _held(frame, c) == _NO_VALUES]
    return frame.with_columns(*[nw.col(c).cast(nw.Float64) for c in empty]) if empty else frame


def _plain_constant(value: Any) -> Any:
    """A fill value as the recipe's JSON stores it: a numpy number (``np.int64(0)``, a
    reduction's result) as its Python number, a date or time (``pd.Timestamp``,
    ``datetime``, ``date``, ``np.datetime64``) as ISO text, which is how a datetime column
    takes its fill on every backend; any other value as it is."""
    import datetime

    if isinstance(value, np.datetime64):
        import pandas as pd

        value = pd.Timestamp(value)
    if isinstance(value, datetime.datetime | datetime.date):
        return value.isoformat()
    return value.item() if isinstance(value, np.generic) else value


@dataclass
class FillMissing(TableOp):
    """Fill missing values with the training ``mean`` or ``median``, or a ``constant``.

    A whole-number fill an integer column's type cannot hold widens the column to the
    smallest integer type that does (int8 filled with 1000: int16), on every backend.
    On Dask the median is exact, as pandas gives it, up to 4,000,000 values a column (see
    :func:`.dask.quantile_bounds`); beyond that it is Dask's approximate one, with a warning.
    """

    strategy: str = "mean"
    value: float | str | bool | None = None
    kind: ClassVar[str] = "fill_missing"
    takes: ClassVar[str] = "numbers"

    def numeric_columns(self) -> list[str]:
        """A mean or median needs numbers; a constant fills text, boolean or date columns too."""
        return [] if self.strategy == "constant" else list(self.columns)

    def __post_init__(self) -> None:
        super().__post_init__()
        if self.strategy not in ("mean", "median", "constant"):
            raise ValueError(f"FillMissing: strategy must be 'mean', 'median' or 'constant', got {self.strategy!r}")
        if self.strategy == "constant" and self.value is None:
            raise ValueError("FillMissing: strategy='constant' needs value=")
        self.value = _plain_constant(self.value)

    def fit(self, frame: NwFrame, backend: str) -> None:
        if self.strategy == "constant":
            schema = schema_of(frame)
            for c in self.columns:
                self._check_constant(frame, schema[c], c)
            self.state = {c: self.value for c in self.columns}
            return
        if backend == "dask" and self.strategy == "median":
            # Exact, as Clip's quantiles: Dask's own median merges per-partition
            # percentiles (on a table sorted by species, the 78th percentile).
            from gpufeed.gpu_transforms.tabular.dask import quantile_bounds as dask_quantiles

            check_finite(frame, self.columns, "FillMissing")
            medians = dask_quantiles(nw.to_native(frame), self.columns, [0.5], op="FillMissing")
            self.state = {c: medians[c][0] for c in self.columns}
            return
        native = float64_columns(frame, self.columns) if backend == "pandas" and self.strategy == "mean" else None
        found = finite_means(native, self.columns) if native is not None else None
        if found is not None:
            self.state = found
            return
        schema = schema_of(frame)
        if backend == "cudf" and all(schema[c] == nw.Float64 for c in self.columns):
            # cuDF's own reductions (cudf_kernels says why); f64_columns reads float64 as it is
            if self.strategy != "mean":  # a median stays finite beside a few inf values: count them
                check_finite(frame, self.columns, "FillMissing")
            stats = cudf_kernels.reductions(nw.to_native(frame), {c: (c, self.strategy) for c in self.columns})
            if self.strategy == "mean":
                stats = finite_stats(stats, frame, self.columns, "FillMissing")
            self.state = {c: number(stats[c], c, "FillMissing") for c in self.columns}
            return
        exprs = [getattr(values, self.strategy)() for values in f64_columns(self.columns, schema, backend)]
        if self.strategy == "mean":
            stats = aggregate_finite(frame, exprs, self.columns, "FillMissing")
        else:  # a median stays finite beside a few inf values: count them
            check_finite(frame, self.columns, "FillMissing")
            stats = aggregate(frame, exprs)
        self.state = {c: number(stats[c], c, "FillMissing") for c in self.columns}

    def _check_constant(self, frame: NwFrame, dtype: Any, column: str) -> None:
        """A constant of the column's kind, or an error: pandas made a text column of
        numbers filled with a word (object), polars one of text (String), silently. A
        column with no value at all has no kind yet (pandas types it text): any fits."""
        value = self.value
        if dtype.is_numeric():
            fits, wanted = isinstance(value, int | float) and not isinstance(value, bool), "a number"
        elif dtype == nw.Boolean:
            fits, wanted = isinstance(value, bool), "True or False"
        elif dtype in (nw.String, nw.Categorical, nw.Enum):
            fits, wanted = isinstance(value, str), f"text (value={str(value)!r})"
        elif dtype in (nw.Datetime, nw.Date):
            fits, wanted = isinstance(value, str), "an ISO date/time text, e.g. '2024-01-01'"
            if fits:
                time_value(value, dtype, column, "FillMissing: value")  # refuses text that is no date
        else:
            fits, wanted = True, ""
        if not fits and not aggregate(frame, [nw.col(column).is_null().all().alias(column)])[column]:
            raise ColumnTypeError(f"FillMissing: constant {value!r} cannot fill column {column!r} ({dtype}): "
                                  f"it needs {wanted}")
        if fits and dtype.is_integer() and (whole := _whole(value)) is not None:
            self._integer_fill(column, dtype, whole)  # raises at fit time when no integer type holds it
        if dtype == nw.Enum:
            _check_category(column, dtype, value)


    def transform(self, frame: NwFrame, backend: str) -> NwFrame:
        native = float64_columns(frame, self.columns) if backend == "pandas" else None
        if native is not None and all(isinstance(self.state[c], float) for c in self.columns):
            return fill_columns(native, {c: self.state[c] for c in self.columns})
        schema = schema_of(frame)
        if backend == "dask" and any(schema[c].is_integer() for c in self.columns):
            # Each partition on its own backend's path (a fill depends on its row alone):
            # narwhals' cast on Dask made a nullable Int8 a numpy int16, which cannot hold
            # the gaps ("cannot convert NA to integer"), where pandas gives Int16.
            return per_partition(frame, self.transform)
        for c in self.columns:
            # An unordered categorical takes a new value as a category (added last): polars'
            # Categorical has no fixed set of categories and fills, and adding one is how
            # pandas users fill one ("unknown"), where pandas itself refused. An ordered one
            # (polars' Enum) has no place in its order for it: an error, as at fit time
            # (polars had left the gaps silently, pandas raised in its own words).
            if schema[c] == nw.Enum:
                _check_category(c, schema[c], self.state[c])
            elif schema[c] == nw.Categorical and isinstance(self.state[c], str):
                frame = with_category(frame, backend, c, self.state[c])
        if backend in ("polars", "cudf") and all(schema[c] == nw.Float64 and type(self.state[c]) is float
                                                  for c in self.columns):
            if backend == "cudf":  # cuDF's own fillna (cudf_kernels says why)
                return wrap(cudf_kernels.fill(nw.to_native(frame), {c: self.state[c] for c in self.columns}))
            # polars' own expressions, as affine_columns builds them: narwhals parsed each
            # in ~0.3 ms (2,000 columns: 0.75 s against 0.1 s)
            import polars as pl

            return wrap(nw.to_native(frame).with_columns(pl.col(c).fill_null(self.state[c]) for c in self.columns))
        exprs = []
        for c in self.columns:
            value = time_value(self.state[c], schema[c], c, "FillMissing: value")
            whole = _whole(value)
            if schema[c].is_integer() and isinstance(value, int | float) and not isinstance(value, bool) and whole is None:
                # A fractional fill makes an integer column float on every backend (pandas
                # would keep int64 when nothing is missing, polars always promotes).
                exprs.append(nw.col(c).cast(nw.Float64).fill_null(value))
            elif schema[c].is_integer() and whole is not None:
                exprs.append(self._integer_fill(c, schema[c], whole))
            elif (isinstance(value, int | float) and not isinstance(value, bool) and not schema[c].is_numeric()
                  and schema[c] != nw.Boolean):
                # A column with no value at all (pandas: object, polars: String or Null) filled
                # with a number: float64 on every backend, as all_missing_as_float makes it for
                # the other ops (pandas kept an object column of ints, polars made text).
                exprs.append(nw.col(c).cast(nw.Float64).fill_null(value))
            elif narrow_float(c, schema) and not _beyond_float32(value):
                # A float32 column stays float32 with its fill rounded to float32, as polars
                # does it; pandas made the column float64 around the float64 statistic.
                exprs.append(nw.col(c).fill_null(nw.lit(value, schema[c])))
            elif narrow_float(c, schema):
                # A fill beyond float32's range would be inf there: the column widens to
                # float64, as an integer column widens to hold its fill.
                exprs.append(nw.col(c).cast(nw.Float64).fill_null(value))
            else:
                exprs.append(nw.col(c).fill_null(value))
        return frame.with_columns(*exprs)

    @staticmethod
    def _integer_fill(column: str, dtype: Any, value: int) -> nw.Expr:
        """An integer column filled with a whole number, widened first to the smallest integer
        type that holds the number too (:func:`.stats.widened_integer`; an int8 column
        filled with 1000 becomes int16), whether or not a value is missing, so the dtype is
        the same on every backend and every split: polars promoted so, pandas raised
        numpy's OverflowError on a nullable column with a gap and kept a plain one narrow."""
        target = widened_integer(dtype, value)
        if target is None:
            raise ColumnTypeError(
                f"FillMissing: fill value {value} does not fit column {column!r} ({dtype}), and no integer "
                "type up to 64 bits holds both: cast the column (e.g. to float64) first, or fill another value")
        return (nw.col(column) if target == dtype else nw.col(column).cast(target)).fill_null(value)

    def params(self) -> dict[str, Any]:
        return {"strategy": self.strategy, "value": self.value}


def _check_category(column: str, dtype: Any, value: Any) -> None:
    """Raise :class:`ColumnTypeError` unless ``value`` is one of the categories of the
    ordered categorical (narwhals' ``Enum``: polars' Enum, pandas' ordered categorical)
    ``column``: a new value has no place in its order, and polars' Enum cannot hold it."""
    categories = list(getattr(dtype, "categories", None) or [])
    if value not in categories:
        raise ColumnTypeError(
            f"FillMissing: constant {value!r} is not one of the categories {categories} of column "
            f"{column!r}, an ordered categorical (polars Enum), whose categories are fixed and ordered: "
            f"fill with one of them, or cast the column to text first (pandas: "
            f"df[{column!r}].astype('string'), polars: pl.col({column!r}).cast(pl.String))")


def _beyond_float32(value: Any) -> bool:
    """True for a finite number that float32 cannot hold (it would round to inf)."""
    finite = isinstance(value, int) and not isinstance(value, bool) or isinstance(value, float) and math.isfinite(value)
    return finite and abs(value) > float(np.finfo(np.float32).max)


def _whole(value: Any) -> int | None:
    """A number with no fractional part as an int (``1000.0``: 1000); None for any other value
    (a fraction, inf or NaN, a boolean, text)."""
    if isinstance(value, bool) or not isinstance(value, int | float):
        return None
    if isinstance(value, int):
        return value
    return int(value) if math.isfinite(value) and value.is_integer() else None


@dataclass
class Clip(TableOp):
    """Clip to fixed ``lower``/``upper`` bounds, or to training ``quantiles=(low, high)``.

    On an integer column a whole-number bound beyond the type's range on its own side clips
    nothing (the column keeps its type); one beyond the other end widens the column to hold
    it (:func:`_clip_integers`). Fractional bounds make an integer column float64.

    Quantiles interpolate linearly: bit-identical on pandas and polars, to the last bit or so
    on cuDF; exact on Dask up to 4,000,000 values a column (:func:`.dask.quantile_bounds`;
    beyond that, Dask's approximate ones, with a warning).
    """

    lower: float | None = None
    upper: float | None = None
    quantiles: tuple[float, float] | None = None
    kind: ClassVar[str] = "clip"
    takes: ClassVar[str] = "numbers"
    polars_eager: ClassVar[bool] = True  # polars_clip reads the columns' Arrow buffers

    def __post_init__(self) -> None:
        super().__post_init__()
        for name in ("lower", "upper"):
            bound = getattr(self, name)
            if bound is not None and math.isnan(bound):
                raise ValueError(f"Clip: {name} is NaN; pass a number, or None for no bound")
            if bound is not None and math.isinf(bound):
                setattr(self, name, None)  # +-inf means no bound (and keeps the JSON strict)
        if self.quantiles is None and self.lower is None and self.upper is None:
            raise ValueError("Clip needs lower=, upper= or quantiles=(low, high)")
        if self.lower is not None and self.upper is not None and self.lower > self.upper:
            # pandas swaps such bounds, polars and numpy apply them in turn: three answers.
            raise ValueError(f"Clip: lower={self.lower} is above upper={self.upper}")
        if self.quantiles is not None:
            low, high = self.quantiles
            if not 0.0 <= low < high <= 1.0:
                raise ValueError(f"Clip: quantiles must satisfy 0 <= low < high <= 1, got {self.quantiles}")
            self.quantiles = (float(low), float(high))

    def fit(self, frame: NwFrame, backend: str) -> None:
        if self.quantiles is None:
            self.state = {c: [self.lower, self.upper] for c in self.columns}
            return
        self.state = quantile_bounds(frame, backend, self.columns, self.quantiles)
        bad = [c for c in self.columns if not all(math.isfinite(b) for b in self.state[c])]
        if bad:
            # inf at a tail makes the bound inf or NaN, which would clip nothing; a few inf
            # values beyond finite bounds are fine (they are clipped to the bound).
            check_finite(frame, bad, "Clip")
            raise NonFiniteError(f"Clip: column(s) {bad} gave non-finite quantile bounds {[self.state[c] for c in bad]}")

    def transform(self, frame: NwFrame, backend: str) -> NwFrame:
        # Integer and float32 columns need the casts below.
        native = float64_columns(frame, self.columns) if backend == "pandas" else None
        if native is not None:
            return clip_columns(native, {c: self.state[c] for c in self.columns})
        schema = schema_of(frame)
        columns = self.columns
        if backend in ("polars", "cudf") and not is_lazy(frame):
            floats = {c: self.state[c] for c in columns if schema[c] == nw.Float64}
            if floats:  # the backend's own clip (cuDF: cudf_kernels says why)
                frame = (polars_clip(frame, floats) if backend == "polars"
                         else wrap(cudf_kernels.clip(nw.to_native(frame), floats)))
            columns = [c for c in columns if c not in floats]
        exprs = []
        for c in columns:
            bounds = self.state[c]
            fractional = any(b is not None and not float(b).is_integer() for b in bounds)
            if schema[c].is_integer() and not fractional:
                exprs.append(_clip_integers(c, schema[c], bounds))
                continue
            # polars would round a fractional bound to the integer column's type (0.5 -> 0,
            # leaving 0 below the bound); clip integers to fractional bounds as floats, as pandas does.
            expr = nw.col(c).cast(nw.Float64) if fractional and schema[c].is_integer() else nw.col(c)
            # pandas computes a float32 column's clip in float64 (and keeps it), polars in
            # float32: keep float32 on both.
            exprs.append(expr.clip(*bounds).cast(nw.Float32) if schema[c] == nw.Float32 else expr.clip(*bounds))
        return frame.with_columns(*exprs) if exprs else frame

    def params(self) -> dict[str, Any]:
        return {"lower": self.lower, "upper": self.upper,
                "quantiles": list(self.quantiles) if self.quantiles else None}


def _clip_integers(column: str, dtype: Any, bounds: Sequence[float | None]) -> nw.Expr:
    """An integer column clipped to whole-number ``bounds`` (``[lower, upper]``, None: no
    bound), the same on every backend.

    A bound beyond the type's range on its own side clips nothing and is dropped, so the
    column keeps its type (``upper=1000`` on uint8; polars refused to make 1000 a uint8,
    and a pandas nullable column wrapped it round to 232). A bound beyond the other end
    (``lower=1000`` on uint8) sets every value to it: the column is widened first to the
    smallest integer type holding it (:func:`.stats.widened_integer`, as ``FillMissing`` does).
    """
    lowest, highest = integer_range(dtype) or (-math.inf, math.inf)
    low, high = (None if b is None else int(b) for b in bounds)
    low = None if low is not None and low <= lowest else low
    high = None if high is not None and high >= highest else high
    target = dtype
    for bound in (b for b in (low, high) if b is not None):
        target = widened_integer(target, bound)
        if target is None:
            raise ColumnTypeError(f"Clip: bound {bound} would set every value of column {column!r} ({dtype}) to "
                                  "a number no integer type up to 64 bits holds beside its values: cast the "
                                  "column (e.g. to float64) first")
    expr = nw.col(column) if target == dtype else nw.col(column).cast(target)
    return expr if low is None and high is None else expr.clip(low, high)


@dataclass
class Log(TableOp):
    """``log(x + offset)`` (``offset=1``: log1p). Values at or below ``-offset`` are an error."""

    offset: float = 1.0
    kind: ClassVar[str] = "log"
    stateless: ClassVar[bool] = True
    takes: ClassVar[str] = "numbers or booleans"
    polars_eager: ClassVar[bool] = True  # polars_log reads the columns' Arrow buffers
    polars_finds_nan: ClassVar[bool] = True  # polars_log's outputs show a NaN in the inputs

    def _check_domain(self, frame: NwFrame, backend: str) -> None:
        # Each column's minimum decides (adding the offset is monotonic, rounding included):
        # a reduction with no temporary column; the values are counted only to name them.
        native = numpy_columns(frame, self.columns) if backend == "pandas" else None  # pandas' min: 12x numpy's
        if native is not None:
            lows = column_lows(native, self.columns)
        elif backend == "cudf":  # cuDF's own reductions (cudf_kernels says why)
            lows = cudf_kernels.reductions(nw.to_native(frame), {c: (c, "min") for c in self.columns})
        else:
            lows = aggregate(frame, [nw.col(c).min().alias(c) for c in self.columns])
        # In float64: cuDF's minimum of a uint8 column is a numpy uint8, in which `low - 1`
        # overflowed (NumPy 2 keeps the column's type against a Python int).
        if not any(not is_missing(low) and float(low) + float(self.offset) <= 0 for low in lows.values()):
            return
        # In float64, as the log itself: on a narrow or unsigned integer column `x + offset`
        # stayed in the column's type, wrapping round (uint8 255 + 1 gave 0, counted as bad).
        counts = aggregate(frame, [(nw.col(c).cast(nw.Float64) + float(self.offset) <= 0).sum().alias(c)
                                   for c in self.columns])
        bad = {c: int(n) for c, n in counts.items() if n}
        if bad:
            raise NonFiniteError(
                f"Log(offset={self.offset}): column(s) have values <= {-self.offset}, whose log is undefined: "
                f"{bad} (count per column); clip them first or raise the offset"
            )

    def _nan_as_null(self, frame: NwFrame, backend: str) -> NwFrame:
        # The recipe left NaN to this op on an eager polars frame (polars_finds_nan).
        return nan_as_null(frame, self.columns, backend=backend) if backend == "polars" and not is_lazy(frame) else frame

    def fit(self, frame: NwFrame, backend: str) -> None:
        self._check_domain(self._nan_as_null(frame, backend), backend)

    def transform(self, frame: NwFrame, backend: str) -> NwFrame:
        if backend == "dask":  # lazily: each partition checks its own domain when computed
            return per_partition(frame, self.fit_transform)
        return self.fit_transform(frame, backend)  # stateless: the same checks, the same log

    def fit_transform(self, frame: NwFrame, backend: str) -> NwFrame:
        """Check the domain once (fit and transform would check the same table), then log.

        On an eager polars frame the log comes first: when its outputs hold no NaN and no
        ``-inf`` they prove both the domain and the absence of NaN, and the two passes
        that check them are skipped (:func:`.kernels.polars_log`)."""
        if backend == "polars" and not is_lazy(frame):
            if (logged := polars_log(frame, self.columns, self.offset, checked=True)) is not None:
                return logged
            frame = self._nan_as_null(frame, backend)
        self._check_domain(frame, backend)
        return self._log(frame, backend)

    def _log(self, frame: NwFrame, backend: str) -> NwFrame:
        if backend == "dask":  # each partition by its backend's kernel, as in memory
            return per_partition(frame, self._log)
        # pandas' nullable columns too: narwhals' log is log(x) / log(e), and NumPy 1.x's
        # log(e) is one ulp under 1, so it differed from the kernel polars runs by an ulp
        # (log(10): ...0455 on polars, ...046 so); NumPy 2 gives log(e) == 1.
        native = numpy_columns(frame, self.columns, nullable=True) if backend == "pandas" else None
        if native is not None:
            return log_columns(native, self.columns, self.offset)
        if backend == "cudf":
            return cudf_log(frame, self.columns, self.offset)
        if backend == "polars" and (logged := polars_log(frame, self.columns, self.offset)) is not None:
            return logged
        return frame.with_columns(*[(nw.col(c).cast(nw.Float64) + self.offset).log() for c in self.columns])

    def params(self) -> dict[str, Any]:
        return {"offset": self.offset}

    def inverse(self, column: str, values: Any) -> Any:
        """Undo the log of ``column``: ``exp(values) - offset``; ``values`` as in
        :meth:`Standardize.inverse`."""
        if column not in self.columns:
            raise KeyError(f"Log: column {column!r} is not one of its columns {self.columns}")
        x, back = _float_values(values, f"Log.inverse({column!r})")
        return back((x.exp() if hasattr(x, "exp") else np.exp(x)) - self.offset)


@dataclass
class Standardize(TableOp):
    """``(x - mean) / std`` with training statistics (population std; a constant column gives
    0, up to its mean's rounding: a std within float64 rounding of 0 counts as 0, by
    scikit-learn's bound).

    With ``by=``, mean and std are fitted per group (e.g. per station); groups unseen at fit
    time use the global statistics.
    """

    by: str | None = None
    kind: ClassVar[str] = "standardize"
    takes: ClassVar[str] = "numbers or booleans"

    def __post_init__(self) -> None:
        super().__post_init__()
        if self.by is not None:
            text_names("Standardize: by", [self.by])

    def needs(self) -> list[str]:
        return [*self.columns, *([self.by] if self.by else [])]

    @property
    def polars_eager(self) -> bool:  # type: ignore[override]
        """With ``by=``, eager on polars: a short frame is standardised by the group as 2-D
        numpy blocks (a lazy query would be collected once per block); a long one's group-by
        goes lazy again. Without, lazy (its statistics are one query)."""
        return self.by is not None

    def fit(self, frame: NwFrame, backend: str) -> None:
        self._fit(frame, backend)

    def fit_transform(self, frame: NwFrame, backend: str) -> NwFrame:
        """With ``by=`` on pandas, and on an eager polars frame with a text or integer key
        (or short columns), each row's group is read from the fit's own factorisation of
        the key (a gather per row) instead of the key hashed again by ``transform``: the
        same codes, so the same output bit for bit."""
        groups = self._fit(frame, backend, coded=True)
        if groups is None or groups.key is None:
            return self.transform(frame, backend)
        keys = self._group_keys()
        codes = groups.row_codes({k: i for i, k in enumerate(keys)}, len(keys))
        native = nw.to_native(frame)
        name = free_name(GROUP_CODE, columns_of(frame))  # beside the user's columns
        if backend == "polars":
            import polars as pl

            coded = with_series(native, [pl.Series(name, codes)])
        else:
            coded = assign(native, {name: as_column(native, codes)})
        return standardize_by_code(wrap(coded), backend, self._tables(keys), name)

    def _fit(self, frame: NwFrame, backend: str, coded: bool = False) -> GroupStats | None:
        """:meth:`fit`, returning the group statistics (None without ``by=``); ``coded``:
        as :func:`.kernels.group_stats_f64`."""
        schema = schema_of(frame)
        groups = None
        if self.by:
            # The global statistics (for unseen groups) pooled from the groups' own: one
            # pass over the table instead of two.
            # A decimal group column groups by its numbers, as pandas reads it (JSON cannot
            # store a Decimal key); the frame's own column is left as it is.
            keyed = decimals_as_numbers(frame, [self.by], schema)
            groups = group_stats_f64(keyed, backend, self.by, self.columns, schema, coded)
            pooled = pooled_stats(groups, self.columns)
            bad = [c for c, p in pooled.items() if p is None or not all(math.isfinite(v) for v in p)]
            if bad:
                check_finite(frame, bad, "Standardize")  # names inf columns, or:
                pooled.update(self._huge_group_stats(keyed, backend, bad, groups))
                if empty := [c for c in bad if pooled[c] is None]:
                    raise no_values("Standardize", empty[0])
            state: dict[str, Any] = {"global": {c: [m, scale(sd, m, n)] for c, (m, sd, n) in pooled.items()}}
        else:
            native = numpy_columns(frame, self.columns, nullable=True) if backend == "pandas" else None
            if native is not None:
                stats = finite_stats(column_moments(native, self.columns), frame, self.columns, "Standardize")
            elif backend == "cudf" and all(schema[c] == nw.Float64 for c in self.columns):
                # cuDF's own reductions (cudf_kernels says why); moment_exprs reads float64 as it is
                stats = finite_stats(cudf_kernels.reductions(nw.to_native(frame), {
                    f"{key}:{c}": (c, how) for key, how in (("m", "mean"), ("s", "std"), ("n", "count"))
                    for c in self.columns}), frame, self.columns, "Standardize")
            else:
                stats = aggregate_finite(frame, [*moment_exprs(self.columns, schema, backend),
                                                 nw.col(*self.columns).count().name.prefix("n:")],
                                         self.columns, "Standardize")
            huge = [c for c in self.columns if not is_missing(stats[f"m:{c}"]) and not (
                is_finite(stats[f"m:{c}"]) and (is_missing(stats[f"s:{c}"]) or is_finite(stats[f"s:{c}"])))]
            if huge:
                # No inf in them (aggregate_finite checked): values whose sum or squares
                # overflow float64 (beyond ~1.3e154). Their statistics times TINY (a power
                # of two: exact), scaled back.
                stats.update({k: v / TINY for k, v in aggregate(frame, moment_exprs(huge, schema, backend, TINY)).items()})
            means = {c: number(stats[f"m:{c}"], c, "Standardize") for c in self.columns}
            state = {"global": {c: [means[c], scale(stats[f"s:{c}"], means[c], stats[f"n:{c}"])]
                                for c in self.columns}}
        if self.by:
            # Rows with a missing group use the global statistics (as unseen groups do).
            present = [i for i, k in enumerate(groups.keys) if k is not None]
            keys = [json_key(groups.keys[i], self.by, "Standardize") for i in present]
            try:
                order = sorted(range(len(present)), key=keys.__getitem__)
            except TypeError:  # text and numbers: no order; named by sorted_keys
                sorted_keys(keys, self.by, "Standardize")
                raise
            rows = [present[j] for j in order]
            keys = [keys[j] for j in order]
            # Each group's [key, mean, std to divide by], a group with no value of a column
            # taking the global ones; all the columns at once (per group and column in
            # Python, 2,000 columns of 40 groups took 0.8 s).
            means = groups.m[rows]
            divisors = scales(groups.s[rows], means, groups.n[rows])
            overall = np.array([state["global"][c] for c in self.columns], dtype=np.float64).reshape(-1, 2)
            none = np.isnan(means)  # no value of the column in the group
            means, divisors = np.where(none, overall[:, 0], means), np.where(none, overall[:, 1], divisors)
            state["groups"] = {c: [list(g) for g in zip(keys, m, d, strict=True)] for c, m, d in
                               zip(self.columns, means.T.tolist(), divisors.T.tolist(), strict=True)}
        self.state = state
        return groups

    def _huge_group_stats(self, keyed: NwFrame, backend: str, columns: list[str],
                          groups: GroupStats) -> dict[str, tuple[float, float, float] | None]:
        """The pooled statistics of ``columns`` (holding no inf) whose variance overflowed
        float64, from their values times :data:`.stats.TINY` (exact), scaled back; their
        statistics in ``groups`` are replaced so too. None: no value at all."""
        schema = schema_of(keyed)
        small = keyed.with_columns(*[(f64(c, schema, backend) * TINY).alias(c) for c in columns])
        tiny = group_stats_f64(small, backend, self.by, columns, schema_of(small))
        where = {k: i for i, k in enumerate(tiny.keys)}
        rows, at = [where[k] for k in groups.keys], [self.columns.index(c) for c in columns]
        groups.m, groups.s = groups.m.copy(), groups.s.copy()  # pandas may give read-only views
        groups.m[:, at], groups.s[:, at] = tiny.m[rows] / TINY, tiny.s[rows] / TINY
        pooled = pooled_stats(tiny, columns)
        return {c: None if p is None else (p[0] / TINY, p[1] / TINY, p[2]) for c, p in pooled.items()}

    def transform(self, frame: NwFrame, backend: str) -> NwFrame:
        if not self.by:
            return affine_columns(frame, backend, self.state["global"])  # {column: [mean, std]}
        if backend == "dask":
            # Each partition on its own backend's path (a row's output depends on that row
            # and the fitted tables alone). narwhals' group lookup on Dask is pandas'
            # ``Series.replace(text -> code)``, which pandas 2.2 refused on an Arrow string
            # column ("Scalar must be NA or str": it writes the codes into the text column).
            return per_partition(frame, self.transform)
        # Look each row's group up once (text keys hash slowly) as a small integer code;
        # code k (after the k known groups) stands for unseen or missing groups and picks
        # the global statistics appended at the end of each table.
        keys = self._group_keys()
        key = nw.col(self.by)
        if cast := decimal_numbers(frame, [self.by]).get(self.by):
            key = decimal_number(frame, self.by, cast)  # by its numbers, as fitted
        name = free_name(GROUP_CODE, columns_of(frame))  # beside the user's columns
        frame = vocabulary_codes(frame, backend, {self.by: key}, {self.by: keys}, len(keys), len(keys),
                                 start=0, names={self.by: name})
        return standardize_by_code(frame, backend, self._tables(keys), name)

    def _group_keys(self) -> list[Any]:
        """The fitted groups' keys, sorted: group code ``i`` is ``keys[i]``'s."""
        return sorted({g[0] for c in self.columns for g in self.state["groups"][c]})

    def _tables(self, keys: list[Any]) -> dict[str, tuple[list[float], list[float]]]:
        """Each column's means and stds by group code (``keys``' order), the global ones
        last (for unseen and missing groups)."""
        tables = {}
        for c in self.columns:
            overall, fitted = self.state["global"][c], self.state["groups"][c]
            found, means, stds = (list(v) for v in zip(*fitted, strict=True)) if fitted else ([], [], [])
            if found != keys:  # a column fitted without some group (a hand-edited state)
                stats = {g[0]: g[1:] for g in fitted}
                means, stds = (list(v) for v in zip(*[stats.get(k, overall) for k in keys], strict=True)) \
                    if keys else ([], [])
            tables[c] = ([*means, overall[0]], [*stds, overall[1]])
        return tables

    def inverse(self, column: str, values: Any, groups: Any = None) -> Any:
        """Undo the standardisation of ``column``: ``values * std + mean`` with the fitted
        statistics (model outputs back in the column's units, to report an RMSE), exact to
        float rounding.

        Args:
            column: one of the op's columns.
            values: standardised values: a torch tensor (kept on its device; a floating one
                keeps its dtype, computed in float64), a numpy array, a list or a number.
            groups: with ``by=``, each row's group (the ``by`` column of the same rows before
                the recipe: a Series of any backend, an array, a list); an unseen or missing
                group uses the global statistics, as ``transform`` does.

        Raises:
            KeyError: ``column`` is not one of the op's; RuntimeError: not fitted;
            ValueError: ``by=`` without ``groups`` (or ``groups`` of another length).
        """
        mean, std = _fitted(self, column, "global")
        where = f"Standardize.inverse({column!r})"
        x, back = _float_values(values, where)
        if not self.by:
            if groups is not None:
                raise ValueError(f"{where}: groups= is for Standardize(by=...); this op has no by")
            return back(x * std + mean)
        if groups is None:
            raise ValueError(f"{where}: the op scaled {column!r} per group of {self.by!r}: pass groups= (each "
                             f"row's {self.by!r} value before the recipe, e.g. val[{self.by!r}])")
        codes, keys = _group_keys(groups, int(x.shape[0]) if x.ndim else 1, where)
        stats = {g[0]: g[1:] for g in self.state["groups"][column]}
        rows = [stats.get(k, [mean, std]) if not is_missing(k) else [mean, std] for k in keys] + [[mean, std]]
        table = np.asarray(rows, dtype=np.float64).reshape(-1, 2)
        picked = table[np.where(codes < 0, len(keys), codes)]  # -1 (missing): the global row
        kind = type(x).__module__.split(".")[0]
        if kind == "torch":
            import torch

            picked = torch.from_numpy(picked).to(x.device)
        elif kind in ("cupy", "cudf"):  # on the GPU beside the values: cupy refuses numpy operands
            import cupy

            picked = cupy.asarray(picked)
        shape = tuple(x.shape[:1]) + (1,) * (x.ndim - 1)  # one row's statistics across its other axes
        return back(x * picked[:, 1].reshape(shape) + picked[:, 0].reshape(shape))

    def params(self) -> dict[str, Any]:
        return {"by": self.by}


def _float_values(values: Any, where: str) -> tuple[Any, Callable[[Any], Any]]:
    """``values`` (a torch tensor on any device, a numpy or cupy array, a cuDF Series, a list
    or a number) as float64 for an inverse, and how to give the result back in their kind:
    a floating tensor keeps its dtype and device (computed in float64, rounded once), any
    other tensor becomes float64; cupy and cuDF data stay on the GPU as float64; arrays and
    lists come back as float64 numpy arrays, a number as a float."""
    if type(values).__module__.split(".")[0] == "torch":
        dtype = values.dtype if values.is_floating_point() else None
        import torch

        def back(out: Any) -> Any:
            return out if dtype is None else out.to(dtype)

        return values.detach().to(torch.float64), back
    if isinstance(values, numbers.Number) and not isinstance(values, bool):
        return np.float64(values), float
    if type(values).__module__.split(".")[0] in ("cupy", "cudf"):
        # On the GPU, as they are: np.asarray refuses device data (cupy raises, and the
        # error read "values must be numbers ... got ndarray").
        return values.astype("float64"), lambda out: out
    try:
        array = np.asarray(values, dtype=np.float64)
    except (TypeError, ValueError) as exc:
        raise TypeError(f"{where}: values must be numbers (a tensor, an array or a list), got "
                        f"{type(values).__name__}") from exc
    return array, lambda out: out


def group_values(groups: Any) -> list[Any]:
    """``groups`` (a Series of any backend, an array, a list, a tensor) as a Python list."""
    if type(groups).__module__.split(".")[0] in ("polars", "cudf"):  # cuDF has no tolist
        return groups.to_arrow().to_pylist()
    return groups.tolist() if hasattr(groups, "tolist") else list(groups)


def _group_keys(groups: Any, rows: int, where: str) -> tuple[np.ndarray, list[Any]]:
    """``(codes per row, distinct keys)`` of ``groups`` (a Series of any backend, an array, a
    list, a tensor): pandas' factorisation, -1 for a missing key."""
    import pandas as pd

    keys = group_values(groups)
    if len(keys) != rows:
        raise ValueError(f"{where}: groups has {len(keys)} values for {rows} rows; pass one group per row")
    codes, uniques = pd.factorize(pd.Series(keys, dtype=object))
    return codes, [u.item() if isinstance(u, np.generic) else u for u in uniques]


def _fitted(op: TableOp, column: str, key: str | None = None) -> Any:
    """``op``'s fitted statistics of ``column`` (under ``state[key]`` when given), or an error
    naming the op and column."""
    name = type(op).__name__
    if column not in op.columns:
        raise KeyError(f"{name}: column {column!r} is not one of its columns {op.columns}")
    state = op.state.get(key, {}) if key else op.state
    if column not in state:
        raise RuntimeError(f"{name}: not fitted (no statistics for column {column!r}): fit the recipe first")
    return state[column]


#: An integer column's span beyond this overflows int64 when its minimum is taken off.
_INT64_MAX = 2**63 - 1


@dataclass
class MinMax(TableOp):
    """Scale to [0, 1] with the training minimum and maximum (a constant column gives 0)."""

    kind: ClassVar[str] = "minmax"
    takes: ClassVar[str] = "numbers or booleans"
    polars_eager: ClassVar[bool] = True  # polars_min_max reads the columns' Arrow buffers

    def fit(self, frame: NwFrame, backend: str) -> None:
        native = numpy_columns(frame, self.columns) if backend == "pandas" else None
        found = (min_max(native, self.columns) if native is not None
                 else polars_min_max(frame, self.columns) if backend == "polars" and not is_lazy(frame) else None)
        if found is not None:
            self.state = found
            return
        schema = schema_of(frame)
        if backend == "cudf" and all(schema[c].is_integer() or schema[c].is_float() for c in self.columns):
            # cuDF's own reductions (cudf_kernels says why)
            stats = finite_stats(cudf_kernels.reductions(nw.to_native(frame), {
                **{f"lo:{c}": (c, "min") for c in self.columns}, **{f"hi:{c}": (c, "max") for c in self.columns}}),
                frame, self.columns, "MinMax")
        else:
            stats = aggregate_finite(frame, [*[nw.col(c).min().alias(f"lo:{c}") for c in self.columns],
                                              *[nw.col(c).max().alias(f"hi:{c}") for c in self.columns]],
                                      self.columns, "MinMax")
        self.state = {c: [exact_number(stats[f"lo:{c}"], c, "MinMax"), exact_number(stats[f"hi:{c}"], c, "MinMax")]
                      for c in self.columns}

    def transform(self, frame: NwFrame, backend: str) -> NwFrame:
        params = {c: (low, (high - low) or 1.0) for c, (low, high) in self.state.items()}
        schema = schema_of(frame)
        # Integers beyond 2**53 (ids, nanosecond times) lose digits as floats: a column of
        # -2**60 + 0..4 became all 0. Their minimum is taken off in integers first, exactly,
        # as pandas by hand does; other columns go the float way (exact there, and fast).
        big = {c: p for c, p in params.items() if schema[c].is_integer() and isinstance(p[0], int)
               and max(abs(p[0]), abs(p[0] + p[1])) > EXACT_FLOAT_INT and p[1] < _INT64_MAX}
        if big:
            frame = frame.with_columns(*[((nw.col(c) - low).cast(nw.Float64) * (1.0 / span)).alias(c)
                                         for c, (low, span) in big.items()])
        # A float range beyond float64 (max - min = inf: [1.7e308, -1.7e308]) made every
        # value NaN or 0: such a column is scaled in halves, (x/2 - min/2) / (max/2 - min/2),
        # exact halvings, so the differences stay finite.
        wide = {c: (float(low) * 0.5, 1.0 / (float(high) * 0.5 - float(low) * 0.5))
                for c, (low, high) in self.state.items() if c not in big and math.isinf(float(params[c][1]))}
        if wide:
            frame = frame.with_columns(*[((f64(c, schema) * 0.5 - half_low) * inverse).alias(c)
                                         for c, (half_low, inverse) in wide.items()])
        # Float bounds for the rest: an int bound would keep a narrow column's arithmetic in
        # its own type on polars (int8 minus -128 wrapped round).
        rest = {c: (float(low), float(span)) for c, (low, span) in params.items() if c not in big and c not in wide}
        return affine_columns(frame, backend, rest) if rest else frame

    def inverse(self, column: str, values: Any) -> Any:
        """Undo the scaling of ``column``: ``values * (max - min) + min`` (a constant column's
        0 gives its value back), exact to float rounding; ``values`` as in
        :meth:`Standardize.inverse` (a tensor keeps its device and floating dtype)."""
        low, high = _fitted(self, column)
        x, back = _float_values(values, f"MinMax.inverse({column!r})")
        if math.isinf(float(high - low)):  # a range beyond float64: in halves, as transform scales it
            return back((x * (float(high) * 0.5 - float(low) * 0.5) + float(low) * 0.5) * 2.0)
        return back(x * (float(high - low) or 1.0) + float(low))


def affine_columns(frame: NwFrame, backend: str, params: Mapping[str, Sequence[float]]) -> NwFrame:
    """Each column ``c`` as float64 ``(x - sub) * (1 / div)`` for ``params[c] = (sub, div)``:
    numpy's kernel on pandas' numpy columns and on an eager polars frame's buffers
    (:func:`.kernels.polars_affine` says why), the expression elsewhere (times the
    reciprocal on every backend, so the bits agree: see :func:`.numpy_kernels.affine`)."""
    native = numpy_columns(frame, list(params)) if backend == "pandas" else None
    if native is not None:
        return scale_columns(native, params)
    if backend == "polars" and (scaled := polars_affine(frame, params)) is not None:
        return scaled
    schema = schema_of(frame)
    if backend == "polars":
        # polars' own expressions (a lazy frame, booleans), the same query narwhals builds:
        # narwhals' parsing of the expressions cost ~0.13 ms a call (MinMax of 2 columns:
        # 0.53 -> 0.40 ms at 1,000 rows).
        import polars as pl

        def column(c: str) -> Any:
            return pl.col(c).cast(pl.Float64) if narrow_float(c, schema) else pl.col(c)

        return wrap(nw.to_native(frame).with_columns(
            ((column(c) - sub) * (1.0 / div)).alias(c) for c, (sub, div) in params.items()))
    if backend == "cudf" and not is_lazy(frame):
        # float64 and integer columns (read as float64, as f64 reads them: MinMax took the
        # integers beyond 2**53 off before) through cuDF's own arithmetic (cudf_kernels says
        # why); float32, booleans and decimals cast below
        floats = {c: p for c, p in params.items() if schema[c] == nw.Float64 or schema[c].is_integer()}
        frame = wrap(cudf_kernels.affine(nw.to_native(frame), floats)) if floats else frame
        params = {c: p for c, p in params.items() if c not in floats}
        if not params:
            return frame
    return frame.with_columns(*[((f64(c, schema) - sub) * (1.0 / div)).alias(c) for c, (sub, div) in params.items()])
