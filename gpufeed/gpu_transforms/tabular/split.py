"""Train/validation/test splits: random, by group, or by time, with every row accounted for.

Splitting comes before fitting: fit a :class:`~gpufeed.gpu_transforms.tabular.recipe.Recipe`
on ``split.train`` only, so no validation or test statistic leaks into training features.

- ``split_random``: rows shuffled with a seed (eager frames).
- ``split_by_group``: whole groups (stations, users) go to one split, so a model is judged
  on groups it never saw; works on Dask too.
- ``split_by_time``: the earliest rows train, the latest test (forecasting); on Dask pass
  the ``cutoffs``.
"""

from __future__ import annotations

import datetime
import numbers
import warnings
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import narwhals as nw
import numpy as np

from gpufeed.gpu_transforms.tabular.errors import BackendError, ColumnTypeError, EmptyTableError
from gpufeed.gpu_transforms.tabular.frames import (
    Frame,
    NwFrame,
    backend_of,
    collect_small,
    datetime_dtype,
    first_value,
    in_zone,
    is_lazy,
    is_missing,
    nan_as_null,
    require_columns,
    row_count,
    series_values,
    time_value,
    wrap,
)


@dataclass
class Split:
    """The three parts, on the input's backend, and how many rows each got."""

    train: Frame
    val: Frame
    test: Frame
    rows: dict[str, int]
    how: str

    def report(self) -> str:
        """One line: how the table was split and the rows (and share) of each part."""
        total = sum(self.rows.values())
        return f"{self.how} split of {total} rows: " + ", ".join(
            f"{k} {v} ({v / total:.1%})" if total else f"{k} 0" for k, v in self.rows.items())


def _check_fractions(fractions: Sequence[float]) -> tuple[float, float, float]:
    """``(train, val, test)`` shares; two, ``(train, val)``, mean an empty test part (the
    :class:`Split` still has its ``test`` frame, with no row)."""
    if isinstance(fractions, str) or not hasattr(fractions, "__len__"):
        raise ValueError(f"fractions must be (train, val) or (train, val, test), got {fractions!r}")
    # not (f >= 0): NaN passed the old `f < 0` test and failed later in round()
    if len(fractions) not in (2, 3) or any(not (f >= 0) for f in fractions) or abs(sum(fractions) - 1.0) > 1e-9:
        raise ValueError("fractions must be two (train, val) or three (train, val, test) non-negative numbers "
                         f"summing to 1, got {tuple(fractions)}")
    return float(fractions[0]), float(fractions[1]), float(fractions[2]) if len(fractions) == 3 else 0.0


def _part_sizes(n: int, fractions: tuple[float, float, float]) -> tuple[int, int]:
    """How many of ``n`` rows (or groups) go to train and to val; test takes the rest.

    Each share is rounded on its own, as before, but a part with a share of 0 gets
    nothing: train and val rounded up together (5 rows at (0.5, 0.5, 0): 3 + 3) had
    clipped val, and both rounded down (2 + 2, or 0 + 0 for 1 row) had left test rows
    though its share was 0."""
    n_train = min(round(n * fractions[0]), n)
    n_val = min(round(n * fractions[1]), n - n_train)
    if fractions[2] == 0:
        if fractions[1] > 0:
            n_val = n - n_train
        else:
            n_train = n
    return n_train, n_val


def _finish(frame: NwFrame, masks: Sequence[Any], how: str, expected: int | None) -> Split:
    parts = [frame.filter(m) for m in masks]
    rows = [row_count(p) for p in parts]
    if expected is not None and sum(rows) != expected:  # a row lost would bias evaluation silently
        raise RuntimeError(f"{how} split lost rows: {expected} in, {sum(rows)} out ({rows})")
    natives = [nw.to_native(p) for p in parts]
    return Split(*natives, rows=dict(zip(("train", "val", "test"), rows, strict=True)), how=how)


def split_random(df: Frame, fractions: Sequence[float] = (0.8, 0.1, 0.1), *, seed: int = 0) -> Split:
    """Shuffle rows with ``seed`` and cut them by ``fractions`` (train, val, test).

    Args:
        df: a pandas, polars or cuDF frame.
        fractions: shares of rows for train, val and test (sum to 1); two, ``(train, val)``,
            leave the test part empty.
        seed: the same seed gives the same split.

    Returns:
        A :class:`Split`; rows keep their original order inside each part.

    Example:
        >>> split = split_random(table, (0.8, 0.1, 0.1), seed=0)  # doctest: +SKIP
        >>> split.rows  # doctest: +SKIP
        {'train': 800, 'val': 100, 'test': 100}
    """
    shares = _check_fractions(fractions)
    frame = wrap(df)
    if is_lazy(frame):
        raise BackendError("split_random needs row positions, which Dask does not have; "
                           "use split_by_group or split_by_time on Dask")
    n = len(frame)
    order = np.random.default_rng(seed).permutation(n)
    part = np.empty(n, np.int8)
    n_train, n_val = _part_sizes(n, shares)
    part[order[:n_train]], part[order[n_train:n_train + n_val]], part[order[n_train + n_val:]] = 0, 1, 2
    ns = nw.get_native_namespace(frame)
    if ns.__name__ == "cudf":  # narwhals makes a cuDF series from Python lists only: one copy to the GPU instead
        masks = [nw.from_native(ns.Series(part == k, name="mask"), series_only=True) for k in range(3)]
    else:
        masks = [nw.new_series("mask", part == k, nw.Boolean, backend=ns) for k in range(3)]
    return _finish(frame, masks, "random", n)


def split_by_group(df: Frame, column: str, fractions: Sequence[float] = (0.8, 0.1, 0.1), *,
                   seed: int = 0) -> Split:
    """Assign whole groups of ``column`` to train, val or test (by share of groups).

    Rows whose group is missing go to train and are counted there.

    Raises:
        MissingColumnError: ``column`` is absent; EmptyTableError: no groups.

    Example:
        >>> split = split_by_group(table, "station_id", seed=1)  # doctest: +SKIP
    """
    shares = _check_fractions(fractions)
    frame = wrap(df)
    require_columns(frame, [column], "split_by_group")
    # NaN keys are missing too (pandas reports a missing text key as NaN; polars keeps NaN).
    keys = nan_as_null(frame.select(nw.col(column)), [column])
    groups = series_values(collect_small(keys.unique()).get_column(column))  # cuDF: through Arrow
    groups = [g for g in groups if not is_missing(g)]
    try:
        groups.sort()
    except TypeError:  # a pandas object column mixing kinds (1 and "a"): by kind, then value
        groups.sort(key=lambda g: (type(g).__name__, g))
    if not groups:
        raise EmptyTableError(f"split_by_group: column {column!r} has no groups (empty table?)")
    order = [groups[i] for i in np.random.default_rng(seed).permutation(len(groups))]
    n_train, n_val = _part_sizes(len(groups), shares)
    val, test = order[n_train:n_train + n_val], order[n_train + n_val:]
    empty = [name for name, share, part in zip(("train", "val", "test"), shares,
                                               (order[:n_train], val, test), strict=True) if share > 0 and not part]
    if empty:
        warnings.warn(f"split_by_group: {len(groups)} groups of {column!r} are too few for fractions "
                      f"{tuple(fractions)}: {', '.join(empty)} got no group", stacklevel=2)
    key = nw.col(column)
    in_val, in_test = key.is_in(val).fill_null(False), key.is_in(test).fill_null(False)
    masks = [~(in_val | in_test), in_val, in_test]
    return _finish(frame, masks, f"by-group ({column})", None if is_lazy(frame) else len(frame))


def _object_kind(frame: NwFrame, column: str) -> str | None:
    """What an untyped (object) column holds, by its first value: ``"str"``, ``"date"`` (a
    ``datetime.date`` that is no datetime), another type's name; None when it has no value."""
    first = first_value(frame, column)
    if not len(first):
        return None
    value = first.item(0)
    if isinstance(value, str):
        return "str"
    if isinstance(value, datetime.date) and not isinstance(value, datetime.datetime):
        return "date"
    return type(value).__name__


def _cutoff(value: Any, dtype: Any, column: str, what: str) -> Any:
    """A cutoff as the column compares with it, the same on every backend.

    On a datetime column: ISO text (:func:`.frames.time_value`), a ``date`` (midnight), a
    naive ``datetime``/``pd.Timestamp``/``np.datetime64`` (wall-clock time) are read in the
    column's time zone, as ISO text without an offset is; an aware one is the same instant
    in the column's zone (pandas compared instants, polars refused two zones, and read a
    ``date`` as UTC midnight). On a date column the date of any of them, as of ISO text.
    On a number column, numbers. None: that part (and the next) is empty.

    Raises:
        ColumnTypeError: a cutoff of another kind, or an aware time for a column without
            a zone; ValueError: text that is no date, NaT, or a wall-clock time a
            daylight-saving change skips or repeats. Each names ``what`` and the column's dtype.
    """
    if value is None:
        return None
    if dtype == nw.Duration and isinstance(value, str):  # "PT2S", "2s": a pd.Timedelta
        return time_value(value, dtype, column, what)
    if dtype in (nw.Datetime, nw.Date):
        if isinstance(value, str):
            return time_value(value, dtype, column, what)
        if not isinstance(value, datetime.date | np.datetime64):  # datetime and pd.Timestamp are dates too
            raise ColumnTypeError(f"{what} {value!r} ({type(value).__name__}) cannot cut the {_kind(dtype)} column "
                                  f"{column!r} ({dtype}): pass a datetime, pd.Timestamp, date, np.datetime64 or "
                                  "ISO text ('2024-03-10', '2024-03-10T06:00')")
        import pandas as pd

        stamp = pd.Timestamp(value)
        if stamp is pd.NaT:
            raise ValueError(f"{what} is missing (NaT); pass None for an empty part")
        return stamp.date() if dtype == nw.Date else in_zone(stamp, dtype, column, what, value)
    if dtype.is_numeric() and not (isinstance(value, numbers.Number) and not isinstance(value, bool)):
        raise ColumnTypeError(f"{what} {value!r} ({type(value).__name__}) cannot cut column {column!r} ({dtype}), "
                              "which holds numbers: pass numbers")
    return value


def _kind(dtype: Any) -> str:
    """How an error names a time column: ``date``, ``datetime`` or ``datetime (time zone Z)``."""
    if dtype == nw.Date:
        return "date"
    zone = getattr(dtype, "time_zone", None)
    return f"datetime (time zone {zone})" if zone else "datetime (no time zone)"


def split_by_time(df: Frame, column: str, fractions: Sequence[float] = (0.8, 0.1, 0.1), *,
                  cutoffs: tuple[Any, Any] | None = None) -> Split:
    """Earliest rows to train, then val, then the latest to test.

    Args:
        df: any supported frame.
        column: a sortable time (or sequence) column.
        fractions: target shares (train, val, test), or (train, val) with no test part;
            rows sharing the cut timestamp stay together, so the
            shares are approximate when timestamps repeat.
        cutoffs: ``(val_start, test_start)``; computed from ``fractions`` when omitted
            (eager frames only). For a datetime column: ``datetime``, ``pd.Timestamp``,
            ``np.datetime64``, ``date`` or ISO text; a time-zone-aware one is an instant,
            a naive one (or a date: midnight) is read in the column's time zone. For a
            number column: numbers. ``None`` leaves that part (and the next) empty.

    Returns:
        A :class:`Split` with ``train: t < val_start``, ``val: val_start <= t < test_start``,
        ``test: t >= test_start``; rows with a missing time go to train and are counted.

    Raises:
        ColumnTypeError: a cutoff of another kind than the column, or a time-zone-aware
            cutoff for a column without one; ValueError: text that is no ISO date/time.

    Warns:
        UserWarning: computed cutoffs left a part with a non-zero share empty (a column of
        a few distinct times, such as a year).
    """
    fractions = _check_fractions(fractions)
    frame = wrap(df)
    require_columns(frame, [column], "split_by_time")
    dtype = datetime_dtype(frame, column, frame.collect_schema()[column])
    held = _object_kind(frame, column) if dtype == nw.Object else None
    if dtype in (nw.String, nw.Categorical, nw.Enum) or held == "str":
        # Text sorts alphabetically: "1/10/2024" before "1/2/2024", a split in no time order.
        raise ColumnTypeError(f"split_by_time: column {column!r} holds text ({dtype}), which sorts "
                              "alphabetically, not in time: parse it to datetimes first "
                              "(read_table parses ISO dates in JSON; pd.to_datetime / str.to_datetime)")
    if held is not None and not (held == "date" and backend_of(frame) == "pandas"):
        # A pandas object column of datetime.date (what .dt.date gives) sorts in time; other
        # objects, or polars' Object type (which it cannot sort), do not.
        raise ColumnTypeError(f"split_by_time: column {column!r} holds {held} objects ({dtype}), which do not "
                              "sort in time here: convert it to datetimes or dates first (pd.to_datetime; "
                              "polars: pl.Date)")
    if held == "date":
        dtype = nw.Date  # text cutoffs are read as dates, as for a date column
    t = nw.col(column)
    # A NaN time is missing (as on pandas): train, not the latest rows (polars orders NaN
    # above every number). Told in the masks, so the parts keep the rows as they came.
    missing = (t.is_null() | t.is_nan()) if dtype.is_float() else t.is_null()
    computed = cutoffs is None
    if cutoffs is None:
        if is_lazy(frame):
            raise BackendError("split_by_time on Dask needs cutoffs=(val_start, test_start)")
        times = nan_as_null(frame.select(t), [column]).get_column(column).drop_nulls().sort()
        if len(times) == 0:
            raise EmptyTableError(f"split_by_time: column {column!r} has no values (empty table?)")
        # A cut past the last row means that part (and what follows it) is empty.
        at = [round(len(times) * fractions[0]), round(len(times) * (fractions[0] + fractions[1]))]
        cutoffs = tuple(times[i] if i < len(times) else None for i in at)
    if computed:
        start_val, start_test = (_cutoff(c, dtype, column, "split_by_time: cutoff") for c in cutoffs)
    else:
        if isinstance(cutoffs, str) or len(cutoffs) != 2:
            raise ValueError(f"split_by_time: cutoffs is (val_start, test_start), got {cutoffs!r}")
        start_val, start_test = (_cutoff(c, dtype, column, f"split_by_time: cutoffs[{i}]")
                                 for i, c in enumerate(cutoffs))
    every = t.is_null() | ~t.is_null()  # a row-wise True (filter refuses a literal)
    if start_val is None:
        masks = [every, ~every, ~every]
    elif start_test is None:
        masks = [(t < start_val) | missing, (t >= start_val) & ~missing, ~every]
    else:
        masks = [(t < start_val) | missing, (t >= start_val) & (t < start_test) & ~missing,
                 (t >= start_test) & ~missing]
    split = _finish(frame, masks, f"by-time ({column})", None if is_lazy(frame) else len(frame))
    empty = [name for (name, n), share in zip(split.rows.items(), fractions, strict=True) if share > 0 and not n]
    if empty and computed:
        # Rows sharing a time stay together, so a column of a few distinct times (a year)
        # can leave a part empty; say so, as split_by_group does for too few groups.
        warnings.warn(f"split_by_time: the times of {column!r} repeat too much for fractions "
                      f"{tuple(fractions)} (cutoffs {cutoffs}): {', '.join(empty)} got no row; "
                      "pass cutoffs=(val_start, test_start) or split on a finer time column", stacklevel=2)
    return split
