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
    """Each column clipped to ``bounds[column] = (lower, upper)`` (None: no bound)."""
    return with_columns(native, {c: native[c].clip(lo, hi) for c, (lo, hi) in bounds.items()})


def affine(native: Any, params: Mapping[str, Sequence[float]]) -> Any:
    """Each float64 column as ``(x - sub) * (1 / div)`` for ``params[column] = (sub, div)``,
    times the reciprocal as on every other backend (:func:`.ops.affine_columns`)."""
    return with_columns(native, {c: (native[c] - sub) * (1.0 / div) for c, (sub, div) in params.items()})


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
        out[c] = ((native[c].astype("float64") - gathered_mean) / gathered_std).astype("float64")
    return with_columns(native, out)


def nans_as_nulls(native: Any, columns: Sequence[str]) -> Any:
    """cuDF: NaN in the float ``columns`` made null (``nans_to_nulls``, which counts the
    NaN itself and gives a column without any back as it is)."""
    return with_columns(native, {c: native[c].nans_to_nulls() for c in columns})


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
