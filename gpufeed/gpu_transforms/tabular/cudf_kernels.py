"""cuDF's fast paths for the table ops, written on the pandas API that cuDF mirrors.

Why not narwhals' expressions on cuDF: narwhals runs cuDF as an eager "pandas-like"
backend, and there every Python number in an expression (a fill value, a clip bound, a
mean to subtract) becomes a one-row device Series that is read back to the host before
cuDF uses it, and every ``with_columns`` rebuilds the frame from all its columns. On an
H200 at 1M rows the kit on cuDF ran at hand-written pandas' speed (MinMax 8.6 ms a
column, a column being 8 MB; bench/README.md, the fourth GPU run). These functions call
the same cuDF column methods with the same scalars (so the same bits) and write only the
changed columns into a shallow copy of the frame.

Each function takes a native frame and works on pandas too (with ``xp`` numpy where it
takes an array module): the CPU tests run them on pandas against the narwhals
expressions they replace, and the gpu-marked tests on cuDF against polars.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any


def with_columns(native: Any, columns: Mapping[str, Any]) -> Any:
    """A shallow copy of ``native`` (no column copied) with ``columns`` written over its
    own: the input frame is left as it was."""
    out = native.copy(deep=False)
    for name, values in columns.items():
        out[name] = values
    return out


def fill(native: Any, values: Mapping[str, Any]) -> Any:
    """Each column's missing values filled with ``values[column]`` (``fillna``)."""
    return with_columns(native, {c: native[c].fillna(v) for c, v in values.items()})


def clip(native: Any, bounds: Mapping[str, Sequence[Any]]) -> Any:
    """Each float column clipped to ``bounds[column] = (lower, upper)`` (None: no bound),
    the bounds as floats: cuDF makes each an Arrow float64 scalar, which refuses a Python
    int beyond 2**53 (a bound from JSON or the user)."""
    def bound(value: Any) -> float | None:
        return None if value is None else float(value)

    return with_columns(native, {c: native[c].clip(bound(lo), bound(hi)) for c, (lo, hi) in bounds.items()})


def affine(native: Any, params: Mapping[str, Sequence[float]]) -> Any:
    """Each column as float64 ``(x - sub) * (1 / div)`` for ``params[column] = (sub, div)``,
    times the reciprocal as on every other backend (:func:`.ops.affine_columns`)."""
    return with_columns(native, {c: (float64(native[c]) - sub) * (1.0 / div) for c, (sub, div) in params.items()})


def standardize_by_code(native: Any, code: str, tables: Mapping[str, tuple[Sequence[float], Sequence[float]]],
                        xp: Any) -> Any:
    """``(x - mean[code]) / std[code]`` per column as float64, the per-code means and stds
    of ``tables`` gathered by the integer ``code`` column (no missing codes) with the array
    module ``xp`` (cupy on cuDF): one gather of each table per column, where narwhals'
    ``replace_strict`` did a hash join of the codes twice per column."""
    codes = xp.asarray(native[code].values)
    out = {}
    for c, (means, stds) in tables.items():
        gathered_mean = xp.asarray(means, dtype=xp.float64)[codes]
        gathered_std = xp.asarray(stds, dtype=xp.float64)[codes]
        out[c] = (float64(native[c]) - gathered_mean) / gathered_std
    return with_columns(native, out)


def log(native: Any, columns: Sequence[str], offset: float) -> Any:
    """``log(x + offset)`` of ``columns`` in float64, missing values kept missing: ``np.log``
    dispatches to cuDF's ``__array_ufunc__``, which runs cupy on the values and puts the
    null mask back (cuDF's Series has had no ``.log()`` since 22.04)."""
    import numpy as np

    return with_columns(native, {c: np.log(float64(native[c]) + offset) for c in columns})


def float64(series: Any) -> Any:
    """``series`` as float64: itself when it is float64 already (``astype`` copies the whole
    column even then)."""
    return series if str(series.dtype) == "float64" else series.astype("float64")


def nans_as_nulls(native: Any, columns: Sequence[str]) -> Any:
    """cuDF: NaN in the float ``columns`` made null, writing only the columns that hold a
    NaN (``nans_to_nulls`` copies a column without any too). cuDF's ``isna`` counts NaN
    and null, its ``null_count`` the nulls alone: they differ where a NaN is."""
    holding = [c for c in columns if int(native[c].isna().sum()) != native[c].null_count]
    return with_columns(native, {c: native[c].nans_to_nulls() for c in holding}) if holding else native


def reductions(native: Any, wanted: Mapping[str, tuple[str, str]]) -> dict[str, Any]:
    """``{name: native[column].<how>()}`` for ``wanted[name] = (column, how)`` ("min",
    "max", "mean", "median", "count", or "std": the population's, ``ddof=0``): the call
    narwhals makes for each statistic, without its one-row device Series per value and
    the reading back of each (one value from the device per statistic)."""
    return {name: native[column].std(ddof=0) if how == "std" else getattr(native[column], how)()
            for name, (column, how) in wanted.items()}


def vocabulary_codes(native: Any, vocabularies: Mapping[str, Sequence[Any]], unseen: int, missing: int,
                     start: int, names: Mapping[str, str], xp: Any, index: Any) -> Any:
    """Int32 codes of each column of ``vocabularies`` written into ``names[column]``:
    ``start + i`` for the vocabulary's ``i``-th value, ``missing`` for a missing value,
    ``unseen`` for any other, from one hash lookup per column (``index(vocabulary)
    .get_indexer``; ``index``: cuDF's ``Index`` with ``xp`` cupy, where narwhals'
    ``replace_strict`` added a literal, a default and a ``where`` round trip each)."""
    out = {}
    for c, vocabulary in vocabularies.items():
        values = native[c]
        found = xp.asarray(index(list(vocabulary)).get_indexer(values))
        codes = xp.where(found < 0, unseen, found + start)
        out[names[c]] = xp.where(xp.asarray(values.isna().values), missing, codes).astype(xp.int32)
    return with_columns(native, out)
