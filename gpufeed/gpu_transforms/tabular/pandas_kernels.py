"""pandas fast paths of the elementwise numeric ops (``FillMissing``, ``Log``, ``MinMax``,
``Clip``), on numpy arrays.

Through narwhals, a one-column op on a 1M-row pandas table paid a few milliseconds of fixed
cost (expression parsing, a Series wrapper per step, a frame rebuilt by ``with_columns``)
plus passes the op does not need (``log(x) / log(e)``), which left the kit's ``FillMissing``,
``Log``, ``MinMax`` and ``Clip`` at 0.7-0.85x the same op written by hand in pandas on the
transactions table. Here the statistics come from pandas' own reductions and the
arithmetic runs on the columns' numpy arrays, the way the hand-written op does, with the
same operations in the same order as the narwhals form, so the values are bit for bit the
same. Only plain numpy columns take these paths (float64 only where the narwhals form
casts); nullable and Arrow columns keep the narwhals form.
"""

from __future__ import annotations

import math
import warnings
from collections.abc import Callable, Iterator, Mapping, Sequence
from typing import Any

import narwhals as nw
import numpy as np

from gpufeed.gpu_transforms.tabular.frames import NwFrame, is_missing, wrap
from gpufeed.gpu_transforms.tabular.numpy_kernels import (
    PIECE,
    affine,
    clip_to,
    fill_nan,
    has_nan,
    log_offset,
    lowest,
    nan_mean,
    spread,
    threads_for,
)


def numpy_columns(frame: NwFrame, columns: Sequence[str], *, nullable: bool = False) -> Any:
    """The native pandas frame when every one of ``columns`` is a plain numpy int or float
    column (or, with ``nullable``, one of pandas' nullable ``Int``/``UInt``/``Float``
    columns, for a kernel that reads them with :func:`float64_values`), else None."""
    native = nw.to_native(frame)
    dtypes = column_dtypes(native)
    if all((isinstance(dtypes[c], np.dtype) and dtypes[c].kind in "iuf") or (nullable and _masked(native[c]))
           for c in columns):
        return native
    return None


def column_dtypes(native: Any) -> dict[Any, Any]:
    """Each column's dtype by label (unique labels: a narwhals frame has no others), read
    once. Why: ``native.dtypes[c]`` and ``native[c].dtype`` cost 10-20 us a column, 80 ms of
    a ``FillMissing`` over the 2,000 columns of a wide table."""
    return dict(zip(native.columns.tolist(), native.dtypes.tolist(), strict=True))


def _masked(series: Any) -> bool:
    import pandas as pd

    return isinstance(series.array, (pd.arrays.IntegerArray, pd.arrays.FloatingArray))


def float64_values(series: Any) -> np.ndarray:
    """A plain numpy column's values as they are; a nullable one's as float64, missing as NaN."""
    return series.to_numpy(dtype=np.float64, na_value=np.nan) if _masked(series) else series.to_numpy()


def as_column(native: Any, values: np.ndarray) -> Any:
    """``values`` as a pandas Series on ``native``'s index, without a copy: pandas copies a
    bare numpy array it is given as a new column (a pass per column, ~0.18 s over 37
    columns of 1M rows), but keeps a Series' data."""
    import pandas as pd

    return pd.Series(values, index=native.index, copy=False)


def assign(native: Any, columns: Mapping[Any, Any]) -> Any:
    """``native.assign(**columns)`` for any column label: ``assign`` takes the labels as
    keyword arguments, so a real table's column named ``self`` (or a label that is not
    text) failed on pandas alone. The new columns are not copied, nor the kept ones under
    copy-on-write (pandas 3, or its option on pandas 2).

    Many columns make a new frame of the kept and the new columns at once: set one by one,
    each split pandas' block of the others again (2,000 columns of 500 rows: 0.5 s against
    0.04 s). Duplicate labels, which a dict cannot hold, are set one by one."""
    import pandas as pd

    # pandas 2 without copy-on-write: the kept columns copied, as pandas' own assign does
    # there (a write into the output's shared columns would change the caller's frame).
    views = copy_on_write()
    if len(columns) < 16 or not native.columns.is_unique:
        out = native.copy(deep=not views)
        with warnings.catch_warnings():
            # "DataFrame is highly fragmented" on a wide table (a block per column, past
            # 100): the columns are kept apart on purpose, since pandas' cure, a copy of the
            # frame, would copy every column the op did not touch.
            warnings.simplefilter("ignore", pd.errors.PerformanceWarning)
            for name, values in columns.items():
                out[name] = values
        return out
    out = pd.DataFrame({name: columns.get(name, kept if views else kept.copy()) for name, kept in native.items()},
                       index=native.index, copy=False)
    out.columns = native.columns  # its name and type: labels 0..n came back as a plain Index
    return out.__finalize__(native)  # attrs and flags, as copy() keeps them


#: New columns from which a short frame's (under :data:`.numpy_kernels.PIECE` rows) are
#: handed over as one 2-D block (:func:`placed`).
WIDE = 16


def placed(native: Any, columns: Sequence[str], make: Callable[[bool], Sequence[np.ndarray]]) -> NwFrame:
    """``native`` with ``columns`` replaced by the arrays ``make(block)`` returns (a
    :mod:`.numpy_kernels` kernel, one per column): asked for one 2-D ``block`` when the
    columns are many (:data:`WIDE`) and short (under :data:`.numpy_kernels.PIECE` rows) and
    placed by :func:`with_block`, else placed as Series by :func:`assign`; neither copied.

    Why a block: as 2,000 Series of 500 rows, a wide table's new columns cost ~70 us each
    to build and place (0.14 s), as one block 17 ms; for few or long columns the Series
    cost nothing next to the values."""
    if len(columns) >= WIDE and len(native) < PIECE:
        return wrap(with_block(native, columns, np.asarray(make(True))))
    outs = make(False)
    return wrap(assign(native, {c: as_column(native, x) for c, x in zip(columns, outs, strict=True)}))


def block_readable(native: Any, columns: Sequence[str]) -> bool:
    """Whether ``native[columns].to_numpy(dtype=float64, na_value=nan)`` reads ``columns`` as
    each one's own ``to_numpy`` would: numbers or booleans, numpy's or pandas' nullable
    ones, under unique labels."""
    if not native.columns.is_unique:
        return False
    dtypes = dict(zip(native.columns, native.dtypes, strict=True))
    return all(getattr(dtypes[c], "kind", "O") in "iufb" and (isinstance(dtypes[c], np.dtype) or _masked(native[c]))
               for c in columns)


#: Values per 2-D read of a wide frame's columns (:func:`float64_blocks`): 128 MB of float64.
BLOCK_VALUES = 1 << 24


def float64_blocks(native: Any, columns: Sequence[str]) -> Iterator[tuple[int, np.ndarray]]:
    """``(start, values)`` for runs of ``columns`` (:func:`block_readable` ones): ``values``
    the run ``columns[start:start + values.shape[1]]`` as one float64 array (rows x run,
    missing values NaN), at most :data:`BLOCK_VALUES` values unless one column is longer.

    Why: each read of a column set costs a pass over the frame's blocks, ~25 us per column
    on a frame of one block per column (what ops leave behind), whatever the rows: 2,000
    columns read in 4 runs cost 0.2 s, in one run 0.05 s."""
    for start, run in column_runs(len(native), columns):
        yield start, native[run].to_numpy(dtype=np.float64, na_value=np.nan)


def column_runs(rows: int, columns: Sequence[str]) -> Iterator[tuple[int, list[str]]]:
    """``(start, columns[start:...])``: ``columns`` in runs of at most :data:`BLOCK_VALUES`
    values of ``rows`` rows (one column at least), for reads as 2-D blocks."""
    per = max(1, BLOCK_VALUES // max(rows, 1))
    for start in range(0, len(columns), per):
        yield start, list(columns[start:start + per])


def with_block(native: Any, columns: Sequence[str], block: np.ndarray, drop: Sequence[str] = ()) -> Any:
    """``native`` with ``columns`` replaced by the rows of ``block`` (one row per column, in
    order) and the ``drop`` columns left out, in ``native``'s column order, neither
    ``block`` nor the other columns copied (labels unique).

    Why a block: handed over as 2,000 Series of 500 rows, the columns of a wide table cost
    ~75 us each to build and place (0.15 s); as one 2-D block, 6 ms."""
    import pandas as pd

    new = pd.DataFrame(block.T, index=native.index, columns=pd.Index(columns, dtype=object), copy=False)
    gone = {*columns, *drop}
    order = native.columns[[c not in drop for c in native.columns]]
    if copy_on_write():
        # drop keeps the other columns as views (copy-on-write guards the input); a
        # selection of them copied them all: 1M rows x 81 columns, 0.17 s against 2 ms
        kept = native.drop(columns=list(gone))
    else:  # pandas 2 without copy-on-write: views would let a write into the output change the input
        kept = native[[c for c in order if c not in gone]]
    out = pd.concat([kept, new], axis=1).reindex(columns=list(order))  # pandas 3: views (copy-on-write)
    out.columns = order  # its name and type, as the frame had them
    return out.__finalize__(native)


def min_max(native: Any, columns: Sequence[str]) -> dict[str, list[float]] | None:
    """``{column: [min, max]}`` skipping missing values (ints for an integer column); None
    when one is not finite (inf, or no value at all), for the caller's narwhals path to
    name the column."""
    out = {}
    for c in columns:
        series = native[c]
        low, high = series.min(), series.max()
        if series.dtype.kind in "iu" and not (is_missing(low) or is_missing(high)):
            out[c] = [int(low), int(high)]  # exact: beyond 2**53 a float would lose digits
            continue
        low, high = float(low), float(high)
        if not (math.isfinite(low) and math.isfinite(high)):
            return None
        out[c] = [low, high]
    return out


def column_moments(native: Any, columns: Sequence[str]) -> dict[str, Any]:
    """Each column's mean, standard deviation (``ddof=0``) and count of values, missing ones
    skipped, as ``m:COLUMN``, ``s:COLUMN`` and ``n:COLUMN``: pandas' own reductions of each
    column (narrow floats in float64, as :func:`.stats.f64` reads them), the ones
    narwhals' form calls, so the same values, without its cost of ~1 ms an expression
    (2,000 columns of 500 rows took 4 s to fit, pandas' own ``mean`` and ``std`` 0.03 s)."""
    out: dict[str, Any] = {}
    with np.errstate(invalid="ignore", over="ignore"):  # inf - inf, a variance beyond float64: the caller names or rescales
        for c in columns:
            series = native[c]
            if series.dtype.kind == "f" and series.dtype.itemsize < 8:
                series = series.astype("Float64" if _masked(series) else np.float64)
            out[f"m:{c}"], out[f"s:{c}"], out[f"n:{c}"] = series.mean(), series.std(ddof=0), series.count()
    return out


def scale_columns(native: Any, params: dict[str, tuple[float, float]]) -> NwFrame:
    """Each column ``c`` as float64 ``(x - sub) * (1 / div)`` for ``params[c] = (sub, div)``
    (:func:`.numpy_kernels.affine`, as on polars)."""
    return placed(native, list(params),
                  lambda block: affine([native[c].to_numpy() for c in params], list(params.values()), block))


def log_columns(native: Any, columns: Sequence[str], offset: float) -> NwFrame:
    """Each column as float64 ``log(x + offset)`` (:func:`.numpy_kernels.log_offset`, as on
    polars); a nullable column (a categorical of numbers with gaps reads as one) gives NaN
    where a value is missing, the float64 the recipe makes of narwhals' ``Float64`` output."""
    return placed(native, columns,
                  lambda block: log_offset([float64_values(native[c]) for c in columns], float(offset), block))


def column_lows(native: Any, columns: Sequence[str]) -> dict[str, float]:
    """Each plain numpy column's smallest value, NaN skipped (NaN when it has none)."""
    return {c: lowest(native[c].to_numpy()) for c in columns}


def clip_columns(native: Any, bounds: dict[str, list[float | None]]) -> NwFrame:
    """Each float64 column clipped to its ``[low, high]`` (None: no bound), NaN kept, as
    pandas' ``clip`` gives it, by :func:`.numpy_kernels.clip_to` (one pass per column on
    the usable cores: 1M values with gaps, 0.18 ms against 9.7 ms for pandas' ``clip``)."""
    return placed(native, list(bounds),
                  lambda block: clip_to([native[c].to_numpy() for c in bounds], list(bounds.values()), block))


def float64_columns(frame: NwFrame, columns: Sequence[str]) -> Any:
    """The native pandas frame when every one of ``columns`` is numpy float64, else None."""
    native = nw.to_native(frame)
    dtypes = column_dtypes(native)
    return native if all(dtypes[c] == np.float64 for c in columns) else None


def finite_means(native: Any, columns: Sequence[str]) -> dict[str, float] | None:
    """Each float64 column's mean skipping missing values, the bits pandas' ``mean`` gives
    (:func:`.numpy_kernels.nan_mean`), the columns spread over the usable cores; None when
    one is not finite (inf, or no value), for the caller's narwhals path to name the column.

    Why not ``Series.mean``: ~65 us of fixed cost a column, 0.12 s of a ``FillMissing``
    over the 2,000 columns of a wide table, and one core for the long columns."""
    arrays = [native[c].to_numpy() for c in columns]
    means = dict(zip(columns, spread(nan_mean, arrays, threads_for(sum(map(len, arrays)))), strict=True))
    return means if all(math.isfinite(m) for m in means.values()) else None


def fill_columns(native: Any, values: dict[str, float]) -> NwFrame:
    """Each float64 column with its missing values (NaN) replaced by ``values[column]``:
    what pandas' ``fillna`` gives. A column with a gap gets a new array
    (:func:`.numpy_kernels.fill_nan`, on the usable cores: ``fillna`` took 1.7 ms per
    million values, ``np.where`` 1.1 ms); one without is kept as it is, as polars'
    ``fill_null`` keeps it (real tables often have many gapless columns; a copy of each
    was most of the op's time)."""
    arrays = {c: native[c].to_numpy() for c in values}  # read once: ~20 us a column on a wide frame
    gaps = [c for c, x in arrays.items() if has_nan(x)]
    return placed(native, gaps, lambda block: fill_nan([arrays[c] for c in gaps], [float(values[c]) for c in gaps],
                                                       block))


def copy_on_write() -> bool:
    """Whether pandas copies a shared column before a write (always from pandas 3)."""
    import pandas as pd

    return int(pd.__version__.split(".")[0]) >= 3 or pd.get_option("mode.copy_on_write") is True
