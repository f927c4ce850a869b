"""Declarative row rules that compile to vectorised ``isin`` / ``where`` / case-when.

Business rules are usually written as a Python function called per row
(``df.apply(f, axis=1)`` or a for-loop), which runs at Python speed. Written here as data,
the same rule compiles to one ``when/then/otherwise`` expression on pandas, polars, cuDF
or Dask, and can still be evaluated row by row (:meth:`Rule.evaluate_row`) as the
reference the vectorised result is tested against. Rules serialise to JSON.

Missing values (null, and NaN) never match a comparison or ``isin`` — ``!=`` included, as
in SQL — and ``~cond`` on a missing value is True, on every backend; test for them with
``col(name).is_missing()``. Combine conditions with ``&``, ``|`` and ``~``: Python's
``and``/``or``/``not`` and chained comparisons (``0 < col("x") < 3``) are refused, as in
pandas and polars, because Python would silently keep only one side.

Example:
    >>> weight = Rule("weight", [
    ...     (col("region").isin(["north", "east"]) & col("power").between(0, 50), 0.5),
    ...     (col("power") > 100, 2.0),
    ... ], default=1.0)
    >>> weight.evaluate_row({"region": "north", "power": 20})
    0.5
"""

from __future__ import annotations

import dataclasses
import datetime
import math
import operator
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import narwhals as nw
import numpy as np

from gpufeed.gpu_transforms.tabular.errors import ColumnTypeError
from gpufeed.gpu_transforms.tabular.frames import (
    Frame,
    backend_of,
    is_lazy,
    is_missing,
    nan_as_null,
    per_partition,
    require_columns,
    time_value,
    wrap,
    write_back,
)
from gpufeed.gpu_transforms.tabular.kernels import categories_as_numbers
from gpufeed.gpu_transforms.tabular.stats import integer_range

_OPS: dict[str, Callable[[Any, Any], bool]] = {
    "==": operator.eq, "!=": operator.ne, "<": operator.lt, "<=": operator.le, ">": operator.gt, ">=": operator.ge,
}


def _plain(value: Any) -> Any:
    """A numpy scalar (``df["x"].max()`` of an int column is ``np.int64``, not an ``int``)
    as the Python scalar it holds: the backends then type it alike, and
    :meth:`Rule.to_dict` stays JSON (``json.dumps`` refused ``np.int64``)."""
    if isinstance(value, np.bool_ | np.integer | np.floating):
        return value.item()
    if isinstance(value, np.str_):
        return str(value)
    return value


def _value_kind(value: Any) -> str:
    """What a rule's output value is, as the backends type it: ``bool``, ``number``,
    ``text``, ``datetime``, ``date`` or another type's name."""
    if isinstance(value, bool):
        return "bool"
    if isinstance(value, int | float):
        return "number"
    if isinstance(value, str):
        return "text"
    if isinstance(value, datetime.datetime | np.datetime64):
        return "datetime"
    return "date" if isinstance(value, datetime.date) else type(value).__name__


class Cond:
    """A boolean condition over a row; combine with ``&``, ``|`` and ``~``."""

    def to_expr(self) -> nw.Expr:
        """The condition as a narwhals boolean expression (null where an operand is missing)."""
        raise NotImplementedError

    def evaluate_row(self, row: Mapping[str, Any]) -> bool:
        raise NotImplementedError

    def columns(self) -> set[str]:
        raise NotImplementedError

    def to_dict(self) -> dict[str, Any]:
        raise NotImplementedError

    def __and__(self, other: Cond) -> Cond:
        return _Bool("and", (self, other))

    def __or__(self, other: Cond) -> Cond:
        return _Bool("or", (self, other))

    def __invert__(self) -> Cond:
        return _Bool("not", (self,))

    def __bool__(self) -> bool:
        raise TypeError(
            "a rule condition has no truth value: combine conditions with & | ~ (not and/or/not), "
            "and write 0 < col('x') < 3 as col('x').between(0, 3) or (col('x') > 0) & (col('x') < 3)"
        )


#: The comparisons that need an order (a categorical's order, not its text).
_ORDERED_OPS = ("<", "<=", ">", ">=")


@dataclass(frozen=True)
class _Compare(Cond):
    column: str
    op: str
    value: Any
    #: The categories, in order, of an ordered categorical column (set by :func:`_typed_rules`
    #: from the table's schema): the row-by-row reference compares positions in it, as the
    #: backends do. Not stored in JSON: it comes from the table.
    order: tuple[Any, ...] | None = dataclasses.field(default=None, compare=False, repr=False)

    def __post_init__(self) -> None:
        if is_missing(self.value):
            raise ValueError(f"col({self.column!r}) {self.op} {self.value!r}: a comparison with a missing value "
                             "never holds; use col(...).is_missing()")
        object.__setattr__(self, "value", _plain(self.value))

    def to_expr(self) -> nw.Expr:
        expr = _OPS[self.op](nw.col(self.column), self.value)
        # numpy (pandas) says NaN != 1 is True, and pandas' None != "a" too: missing values
        # match no comparison here, so mask them out of the one comparison they would pass.
        return expr & ~nw.col(self.column).is_null() if self.op == "!=" else expr

    def evaluate_row(self, row: Mapping[str, Any]) -> bool:
        v = row[self.column]
        if is_missing(v):
            return False
        if self.order is not None and self.op in _ORDERED_OPS:
            return bool(_OPS[self.op](self.order.index(v), self.order.index(self.value)))
        return bool(_OPS[self.op](v, self.value))

    def columns(self) -> set[str]:
        return {self.column}

    def to_dict(self) -> dict[str, Any]:
        return {"compare": self.op, "column": self.column, "value": self.value}


@dataclass(frozen=True)
class _IsIn(Cond):
    column: str
    values: tuple[Any, ...]

    def __post_init__(self) -> None:
        if any(is_missing(v) for v in self.values):
            raise ValueError(f"col({self.column!r}).isin({list(self.values)!r}): missing values never match isin "
                             "(backends disagree on None/NaN in the list); use col(...).is_missing() | col(...).isin(...)")
        object.__setattr__(self, "values", tuple(_plain(v) for v in self.values))

    def to_expr(self) -> nw.Expr:
        return nw.col(self.column).is_in(list(self.values))

    def evaluate_row(self, row: Mapping[str, Any]) -> bool:
        v = row[self.column]
        return not is_missing(v) and v in self.values

    def columns(self) -> set[str]:
        return {self.column}

    def to_dict(self) -> dict[str, Any]:
        return {"isin": list(self.values), "column": self.column}


@dataclass(frozen=True)
class _IsMissing(Cond):
    column: str

    def to_expr(self) -> nw.Expr:
        return nw.col(self.column).is_null()

    def evaluate_row(self, row: Mapping[str, Any]) -> bool:
        return is_missing(row[self.column])

    def columns(self) -> set[str]:
        return {self.column}

    def to_dict(self) -> dict[str, Any]:
        return {"is_missing": self.column}


@dataclass(frozen=True)
class _Bool(Cond):
    op: str
    parts: tuple[Cond, ...]

    def to_expr(self) -> nw.Expr:
        # fill_null(False): a comparison with a missing value is False, never null, so
        # that "not" and "or" agree with the row-by-row reference on every backend.
        exprs = [p.to_expr().fill_null(False) for p in self.parts]
        if self.op == "not":
            return ~exprs[0]
        return exprs[0] & exprs[1] if self.op == "and" else exprs[0] | exprs[1]

    def evaluate_row(self, row: Mapping[str, Any]) -> bool:
        if self.op == "not":
            return not self.parts[0].evaluate_row(row)
        if self.op == "and":
            return self.parts[0].evaluate_row(row) and self.parts[1].evaluate_row(row)
        return self.parts[0].evaluate_row(row) or self.parts[1].evaluate_row(row)

    def columns(self) -> set[str]:
        return set().union(*(p.columns() for p in self.parts))

    def to_dict(self) -> dict[str, Any]:
        return {self.op: [p.to_dict() for p in self.parts]}


@dataclass(frozen=True)
class col:  # noqa: N801 - reads like the polars / narwhals ``col`` it stands for
    """A column reference to build conditions: ``col("power") > 100``, ``col("region").isin([...])``."""

    name: str

    def isin(self, values: Sequence[Any]) -> Cond:
        """The value is one of ``values`` (a missing value never is)."""
        if isinstance(values, str):
            raise TypeError(f"col({self.name!r}).isin takes a list of values, got the string {values!r}")
        return _IsIn(self.name, tuple(values))

    def is_missing(self) -> Cond:
        """The value is missing (null, or NaN in a float column)."""
        return _IsMissing(self.name)

    def between(self, low: Any, high: Any) -> Cond:
        """``low <= value <= high`` (both ends included)."""
        return _Compare(self.name, ">=", low) & _Compare(self.name, "<=", high)

    def __eq__(self, value: Any) -> Cond:  # type: ignore[override]
        return _Compare(self.name, "==", value)

    def __ne__(self, value: Any) -> Cond:  # type: ignore[override]
        return _Compare(self.name, "!=", value)

    def __lt__(self, value: Any) -> Cond:
        return _Compare(self.name, "<", value)

    def __le__(self, value: Any) -> Cond:
        return _Compare(self.name, "<=", value)

    def __gt__(self, value: Any) -> Cond:
        return _Compare(self.name, ">", value)

    def __ge__(self, value: Any) -> Cond:
        return _Compare(self.name, ">=", value)

    __hash__ = object.__hash__


def cond_from_dict(d: Mapping[str, Any]) -> Cond:
    """Rebuild a condition from :meth:`Cond.to_dict` output."""
    if "compare" in d:
        if d["compare"] not in _OPS:
            raise ValueError(f"unknown comparison {d['compare']!r}; known: {sorted(_OPS)}")
        return _Compare(d["column"], d["compare"], d["value"])
    if "isin" in d:
        return _IsIn(d["column"], tuple(d["isin"]))
    if "is_missing" in d:
        return _IsMissing(d["is_missing"])
    for op in ("and", "or", "not"):
        if op in d:
            return _Bool(op, tuple(cond_from_dict(p) for p in d[op]))
    raise ValueError(f"not a rule condition: {dict(d)!r}")


@dataclass(frozen=True)
class Rule:
    """A new column from ordered cases: the first condition that holds gives the value.

    Args:
        output: name of the column the rule writes.
        cases: ``(condition, value)`` pairs, tried in order.
        default: value where no case holds.
    """

    output: str
    cases: Sequence[tuple[Cond, Any]]
    default: Any = None

    def __post_init__(self) -> None:
        if not self.cases:
            raise ValueError(f"rule {self.output!r} needs at least one (condition, value) case")
        for case in self.cases:
            if len(case) != 2 or not isinstance(case[0], Cond):
                raise TypeError(f"rule {self.output!r}: each case is (condition, value), got {case!r}")
        object.__setattr__(self, "cases", [(c, _plain(v)) for c, v in self.cases])
        object.__setattr__(self, "default", _plain(self.default))
        # None (missing) goes with any kind, as a case's value as well as the default.
        values = [v for v in [*(v for _, v in self.cases), self.default] if v is not None]
        kinds = {_value_kind(v) for v in values}
        if len(kinds) > 1:
            # pandas made an object column of them, polars one type (True and 0 as Int32,
            # 0 and "x" as the text "0"): one answer on every backend
            raise TypeError(f"rule {self.output!r} mixes values of kinds {sorted(kinds)} ({values!r}): give every "
                            "case and the default one kind (numbers, text, booleans or datetimes; None for missing)")
        if self.integer_output() and any(not -2**63 <= v < 2**63 for v in values):
            raise ValueError(f"rule {self.output!r}: integer values beyond int64 ({values!r}) would wrap round "
                             "on pandas and fail on polars; give them as floats or text")

    def columns(self) -> set[str]:
        """Columns the rule reads."""
        return set().union(*(c.columns() for c, _ in self.cases))

    def integer_output(self) -> bool:
        """True when every value and the default are integers (a None default: missing where
        no case holds): the output is then int64 on every backend (polars types integer
        literals Int32, pandas' ``np.select`` int64; with a None default, pandas' ``Int64``)."""
        values = [v for _, v in self.cases] + ([] if self.default is None else [self.default])
        return all(isinstance(v, int) and not isinstance(v, bool) for v in values)

    def to_expr(self) -> nw.Expr:
        """The vectorised form: one case-when expression."""
        dtype = nw.Int64 if self.integer_output() else None
        (first, value), *rest = self.cases
        chain = nw.when(first.to_expr().fill_null(False)).then(nw.lit(value, dtype))
        for cond, v in rest:
            chain = chain.when(cond.to_expr().fill_null(False)).then(nw.lit(v, dtype))
        # A None default stays untyped: the typed cases type it (narwhals' Dask backend
        # would cast the None itself to int64).
        return chain.otherwise(nw.lit(self.default, None if self.default is None else dtype)).alias(self.output)

    def evaluate_row(self, row: Mapping[str, Any]) -> Any:
        """The row-by-row reference: what a for-loop would compute for ``row``."""
        for cond, value in self.cases:
            if cond.evaluate_row(row):
                return value
        return self.default

    def to_dict(self) -> dict[str, Any]:
        """The rule as a JSON-ready dict (read back by :meth:`from_dict`)."""
        return {"output": self.output, "default": self.default,
                "cases": [{"when": c.to_dict(), "then": v} for c, v in self.cases]}

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> Rule:
        return cls(d["output"], [(cond_from_dict(c["when"]), c["then"]) for c in d["cases"]], d.get("default"))


def _typed_rules(rules: Sequence[Rule], schema: Mapping[str, Any]) -> list[Rule]:
    """``rules`` with ISO text compared with a datetime or date column made a datetime (or
    date), as pandas compares them: polars and cuDF refuse to compare text with times;
    order comparisons on an ordered categorical by its categories' order on every backend
    and row by row (:func:`_category_order`)."""
    def typed(cond: Cond, rule: str) -> Cond:
        if isinstance(cond, _Compare):
            what = f"col({cond.column!r}) {cond.op}"
            _check_kind(cond.value, schema[cond.column], cond.column, f"{what} {cond.value!r}")
            order = _category_order(cond, schema[cond.column], f"rule {rule!r}: {what} {cond.value!r}")
            return dataclasses.replace(cond, value=time_value(cond.value, schema[cond.column], cond.column, what),
                                       order=order)
        if isinstance(cond, _IsIn):
            what = f"col({cond.column!r}).isin"
            dtype = schema[cond.column]
            for v in cond.values:
                _check_kind(v, dtype, cond.column, f"{what}({list(cond.values)!r})")
            values = tuple(time_value(v, dtype, cond.column, what) for v in cond.values)
            return dataclasses.replace(cond, values=_numbers_as(values, dtype))
        if isinstance(cond, _Bool):
            return dataclasses.replace(cond, parts=tuple(typed(p, rule) for p in cond.parts))
        return cond

    return [dataclasses.replace(r, cases=[(typed(c, r.output), v) for c, v in r.cases]) for r in rules]


def _category_order(cond: _Compare, dtype: Any, what: str) -> tuple[Any, ...] | None:
    """The categories of an ordered categorical (narwhals' ``Enum``: polars' Enum, pandas'
    ordered categorical) that an order comparison (``<``, ``>=``, ``between``) compares by,
    as pandas, polars and cuDF do; None for any other column or comparison.

    Raises:
        ColumnTypeError: an order comparison on an unordered categorical (pandas and Dask
            raised pandas' own TypeError naming nothing, polars compared the text), or with
            a value that is not one of an ordered categorical's categories (no place in
            its order: pandas and polars refused it in their own words).
    """
    if cond.op not in _ORDERED_OPS:
        return None
    if dtype == nw.Categorical:
        raise ColumnTypeError(
            f"{what}: column {cond.column!r} is an unordered categorical, whose categories have no order: "
            f"compare it with ==, != or isin, make it ordered (pandas: df[{cond.column!r}].cat.as_ordered() "
            f"or .cat.reorder_categories([...], ordered=True); polars: cast to pl.Enum([...])), or cast it "
            "to text to compare the text")
    if dtype != nw.Enum:
        return None
    categories = tuple(getattr(dtype, "categories", None) or ())
    if categories and "__UNKNOWN_CATEGORIES__" not in categories and cond.value not in categories:
        raise ColumnTypeError(
            f"{what}: {cond.value!r} is not one of the categories {list(categories)} of column "
            f"{cond.column!r}, an ordered categorical compared by its categories' order: compare with one of them")
    return categories or None


def _check_kind(value: Any, dtype: Any, column: str, what: str) -> None:
    """Refuse text compared with a number column and a number with a text, datetime or
    boolean-``isin`` column, naming the condition: pandas said False on every row
    (``col("zip") == 2134`` over text zips) or raised numpy's ufunc error, polars raised its
    ComputeError naming no rule."""
    number = isinstance(value, int | float) and not isinstance(value, bool)
    if dtype.is_numeric() and isinstance(value, str):
        held = "numbers"
    elif dtype == nw.String and (number or isinstance(value, bool)):
        held = "text"
    elif dtype in (nw.Datetime, nw.Date, nw.Duration) and (number or isinstance(value, bool)):
        held = "times"
    else:
        return
    raise ColumnTypeError(f"{what}: column {column!r} holds {held} ({dtype}), and {value!r} "
                          f"({type(value).__name__}) is not one: compare with a value of the column's kind "
                          "(or cast the column first)")


def _numbers_as(values: tuple[Any, ...], dtype: Any) -> tuple[Any, ...]:
    """``isin`` numbers in the column's kind: polars' ``is_in`` refuses floats for an integer
    column and integers for a float one (pandas matched them by value); a fractional value
    matches no integer and is left out; booleans need True/False on every backend."""
    if dtype == nw.Boolean:
        odd = [v for v in values if not isinstance(v, bool)]
        if odd:
            raise ColumnTypeError(f"isin({list(values)!r}) over a boolean column holds {odd!r}: use True/False")
        return values
    if not dtype.is_numeric():
        return values
    numbers = [v for v in values if isinstance(v, int | float)]  # True as 1, as pandas matches it
    if dtype.is_integer():
        # A number beyond the column type's range matches no value and is left out too:
        # polars built [-1, 2**63] for a uint64 column as Int128 and failed.
        low, high = integer_range(dtype) or (-math.inf, math.inf)
        whole = (int(v) for v in numbers if isinstance(v, int) or (math.isfinite(v) and v.is_integer()))
        return tuple(v for v in whole if low <= v <= high)
    return tuple(float(v) for v in numbers)


def apply_rules(df: Frame, rules: Sequence[Rule]) -> Frame:
    """Add each rule's output column to ``df``, vectorised, on the frame's own backend.

    Args:
        df: a pandas, polars, cuDF or Dask frame.
        rules: rules to apply; later rules may not read earlier outputs (they run together).

    Returns:
        A new native frame with one extra column per rule.

    Raises:
        MissingColumnError: a rule reads a column the table lacks (names the rule).

    Example:
        >>> out = apply_rules(df, [weight])  # doctest: +SKIP
    """
    frame = wrap(df)
    for rule in rules:
        require_columns(frame, sorted(rule.columns()), f"rule {rule.output!r}")
    read = sorted(set().union(*(r.columns() for r in rules)))
    # Categoricals of numbers compared by their values, as polars holds them (Int64): an
    # order comparison on a pickled astype("category") column was refused on pandas alone.
    numbers, _ = categories_as_numbers(frame, read)
    rules = _typed_rules(rules, numbers.collect_schema())
    if backend_of(df) == "dask":
        # Partition by partition, on the partitions' own backend (pandas or cuDF): the same
        # outputs and dtypes as there. Dask's own case-when declared int64 and computed an
        # object column of pd.NA for a rule without a default, where pandas gives Int64.
        return nw.to_native(per_partition(frame, lambda part, _: wrap(apply_rules(nw.to_native(part), rules))))
    if backend_of(df) == "pandas":
        # Rule by rule: one rule of another kind (booleans, datetimes) sent them all
        # through narwhals' case-when, where pandas made an integer rule without a
        # default an object column instead of Int64 (and a datetime rule one of
        # Timestamps and NaN: typed there, :func:`_datetimes_typed`).
        return _apply_rules_numpy(numbers, rules, nw.to_native(frame))
    if backend_of(df) == "polars" and not is_lazy(frame):
        return _apply_rules_polars(frame, rules)
    exprs = [r.to_expr() for r in rules]
    # NaN counts as missing: rules read a NaN-as-null copy of their columns; an eager
    # frame keeps its own columns as they were and only gains the outputs.
    if is_lazy(frame) and backend_of(frame) == "polars":
        # No pass to look for NaN in a lazy query: keep each read column aside, read it
        # NaN-as-null, and put the original back after the rules.
        keep = {c: f"__gpufeed_keep_{c}" for c in read}
        return nw.to_native(
            frame.with_columns(*[nw.col(c).alias(k) for c, k in keep.items()])
            .pipe(lambda f: nan_as_null(f, read)).with_columns(*exprs)
            .with_columns(*[nw.col(k).alias(c) for c, k in keep.items()]).drop(*keep.values()))
    norm = nan_as_null(numbers, read)
    if norm is frame:
        return nw.to_native(frame.with_columns(*exprs))
    outputs = norm.select(*exprs)
    return nw.to_native(frame.with_columns(*[outputs.get_column(r.output) for r in rules]))


def _numpy_friendly(rule: Rule) -> bool:
    values = [v for _, v in rule.cases]
    numbers = all(isinstance(v, int | float) and not isinstance(v, bool) for v in values)
    bools = all(isinstance(v, bool) for v in values)
    if rule.default is None:  # missing where no case holds: NaN, or pandas' nullable types
        return numbers or bools
    return (numbers and isinstance(rule.default, int | float) and not isinstance(rule.default, bool)) or (
        bools and isinstance(rule.default, bool)) or all(isinstance(v, str) for v in [*values, rule.default])


def _apply_rules_numpy(frame: nw.DataFrame, rules: Sequence[Rule], base: Any) -> Frame:
    """pandas: conditions as numpy masks on ``frame``'s columns, then one ``np.select`` per
    rule, the outputs added to ``base`` (the caller's frame: ``frame`` may read some of its
    columns otherwise, e.g. categoricals of numbers as their values).

    narwhals' case-when on pandas chains a ``Series.where`` per case; ``np.select`` picks
    all cases in one pass, about twice as fast, with the same first-match semantics. The
    masks are computed on the columns' numpy arrays directly (:func:`_pandas_mask`): built
    through narwhals expressions, each comparison came back as a pandas Series that was
    null-filled, copied and cast again at every ``&``, which made the kit's rule ~1.8x
    slower than the same ``np.select`` written by hand.
    """
    import pandas as pd

    from gpufeed.gpu_transforms.tabular.pandas_kernels import as_column, assign

    df = nw.to_native(frame)
    out: dict[str, Any] = {}
    others = [r for r in rules if not _numpy_friendly(r)]
    if others:  # narwhals' case-when, over the columns they read NaN as null
        read = sorted(set().union(*(r.columns() for r in others)))
        done = nan_as_null(frame, read).select(*[r.to_expr() for r in others])
        out = {r.output: _datetimes_typed(r, nw.to_native(done.get_column(r.output))) for r in others}
    for rule in rules:
        if rule.output in out:
            out[rule.output] = out.pop(rule.output)  # the outputs in the rules' order
            continue
        masks = [_pandas_mask(c, df) for c, _ in rule.cases]
        values = [v for _, v in rule.cases]
        if rule.default is not None:
            out[rule.output] = np.select(masks, values, default=rule.default)
        else:
            out[rule.output] = _with_missing(np.select(masks, values, default=values[0]), ~np.logical_or.reduce(masks))
    return assign(base, {name: values if isinstance(values, pd.Series) else as_column(base, values)
                         for name, values in out.items()})


def _datetimes_typed(rule: Rule, column: Any) -> Any:
    """A pandas rule output of datetimes as a datetime column, not the object column of
    Python datetimes and NaN that the case-when left where no case held (``default=None``),
    in the unit pandas gives Python datetimes (and so a rule with a default, and Dask's
    declared type): microseconds on pandas 3, as polars; nanoseconds on pandas 2."""
    import datetime

    import pandas as pd

    values = [v for _, v in rule.cases] + ([] if rule.default is None else [rule.default])
    if column.dtype != object or not all(isinstance(v, datetime.date) for v in values):
        return column
    typed = pd.to_datetime(column)
    unit = np.datetime_data(pd.Series([datetime.datetime(2000, 1, 1)]).dtype)[0]
    return typed.astype(f"datetime64[{unit}]" if typed.dt.tz is None else f"datetime64[{unit}, {typed.dt.tz}]")


def _with_missing(values: Any, missing: Any) -> Any:
    """``values`` missing where ``missing`` holds, in the type the other backends give:
    float64 with NaN, pandas' nullable ``Int64`` or ``boolean`` (not an object column)."""
    import numpy as np
    import pandas as pd

    if values.dtype.kind == "f":
        values[missing] = np.nan
        return values
    if values.dtype.kind == "b":
        return pd.arrays.BooleanArray(values, missing)
    return pd.arrays.IntegerArray(values.astype(np.int64, copy=False), missing)


def _pandas_mask(cond: Cond, df: Any) -> Any:
    """``cond`` over a pandas frame as a numpy bool array; missing values (null, NaN, NaT)
    match nothing, as in :meth:`Cond.to_expr`."""
    import numpy as np

    if isinstance(cond, _Bool):
        masks = [_pandas_mask(p, df) for p in cond.parts]
        if cond.op == "not":
            return ~masks[0]
        return masks[0] & masks[1] if cond.op == "and" else masks[0] | masks[1]
    series = df[cond.columns().pop()]
    if isinstance(cond, _IsMissing):
        return series.isna().to_numpy()
    if isinstance(cond, _IsIn):
        return series.isin(list(cond.values)).to_numpy(dtype=bool, na_value=False)
    assert isinstance(cond, _Compare)
    if series.dtype.kind in "biuf" and isinstance(series.dtype, np.dtype):
        # Plain numpy columns: numpy's comparison is False for NaN except in `!=`.
        values = series.to_numpy()
        mask = _OPS[cond.op](values, cond.value)
        return mask & ~np.isnan(values) if cond.op == "!=" and values.dtype.kind == "f" else mask
    # Nullable, text and datetime columns: pandas' comparison, missing as False, and `!=`
    # masked where the value is missing (pandas says None != "a" and NaT != t are True).
    mask = _OPS[cond.op](series, cond.value)
    mask = np.asarray(mask.to_numpy(dtype=bool, na_value=False), dtype=bool)
    return mask & series.notna().to_numpy() if cond.op == "!=" else mask


#: ``isin`` over at most this many strings, on a text column, compiles to ``==`` tests
#: joined by ``|`` on polars, about twice as fast as polars' ``is_in`` there (1M rows,
#: streaming: 2 values 3.6 ms vs 8.3 ms, 8 values 12 vs 21 ms); from 12 values on, its
#: hashed ``is_in`` is the faster.
_EQ_CHAIN_MAX = 8


def _apply_rules_polars(frame: nw.DataFrame, rules: Sequence[Rule]) -> Frame:
    """polars: each rule as one native case-when (:func:`_polars_cond`) over the columns it
    reads, NaN as null, on polars' streaming engine (its morsels run on every thread; the
    in-memory engine evaluates one expression on one thread); the outputs are then
    written onto the frame."""
    import polars as pl

    read = sorted(set().union(*(r.columns() for r in rules)))
    norm = nw.to_native(nan_as_null(frame, read))
    exprs = []
    for rule in rules:
        dtype = pl.Int64 if rule.integer_output() else None
        (first, value), *rest = rule.cases
        chain = pl.when(_polars_cond(first, norm.schema)).then(pl.lit(value, dtype))
        for cond, v in rest:
            chain = chain.when(_polars_cond(cond, norm.schema)).then(pl.lit(v, dtype))
        exprs.append(chain.otherwise(pl.lit(rule.default, dtype)).alias(rule.output))
    outputs = norm.lazy().select(read).select(*exprs).collect(engine="streaming")
    return nw.to_native(write_back(frame, wrap(outputs)))


def _polars_cond(cond: Cond, schema: Any) -> Any:
    """``cond`` as a polars expression that is null where the condition reads a missing
    value and would otherwise be False.

    polars' ``when`` takes a null condition as False, and Kleene ``&``/``|`` keep that
    reading (``null & x`` is null or False, ``null | x`` is null or x): only ``~`` needs its
    operand's nulls made False first. So no ``fill_null`` pass per comparison.
    """
    import polars as pl

    if isinstance(cond, _Bool):
        parts = [_polars_cond(p, schema) for p in cond.parts]
        if cond.op == "not":
            return ~parts[0].fill_null(False)
        return parts[0] & parts[1] if cond.op == "and" else parts[0] | parts[1]
    name = next(iter(cond.columns()))
    column = pl.col(name)
    if isinstance(cond, _IsMissing):
        return column.is_null()
    if isinstance(cond, _IsIn):
        values = list(cond.values)
        if schema[name] == pl.String and 0 < len(values) <= _EQ_CHAIN_MAX and all(isinstance(v, str) for v in values):
            expr = column == values[0]
            for v in values[1:]:
                expr = expr | (column == v)
            return expr
        return column.is_in(values)
    assert isinstance(cond, _Compare)
    return _OPS[cond.op](column, cond.value)


def apply_rules_rowwise(df: Frame, rules: Sequence[Rule]) -> dict[str, list[Any]]:
    """The for-loop reference: evaluate each rule row by row in Python (slow; for tests and benchmarks).

    Returns:
        ``{output column: list of values}`` in row order.
    """
    frame = wrap(df)
    needed = sorted(set().union(*(r.columns() for r in rules)))
    require_columns(frame, needed, "rules")
    frame, _ = categories_as_numbers(frame, needed)  # as apply_rules reads them
    rules = _typed_rules(rules, frame.collect_schema())
    out: dict[str, list[Any]] = {r.output: [] for r in rules}
    for row in frame.select(needed).iter_rows(named=True):
        for rule in rules:
            out[rule.output].append(rule.evaluate_row(row))
    return out
