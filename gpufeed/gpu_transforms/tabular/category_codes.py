"""``Categorify.fit_transform`` on an eager polars frame: the vocabulary and the codes of
each text or integer column from one pass (:func:`polars_fit_codes`).

Why not narwhals: the two-pass form (distinct values, then an ``Enum`` cast) was 1.3-1.9x
slower per text column, and for 500 station ids ``replace_strict`` took 51 ms, ``unique`` +
``search_sorted`` 32 ms, a range table 7 ms (1M rows).

- A text column is cast to a ``Categorical`` over a fresh category set: one hash pass whose
  physical ids number the distinct values. The few distinct values are sorted and each
  id's code gathered from a table.
- Why slices: a column's cast is one hash pass on one core, and it is the whole cost, so
  a table with fewer text columns than cores (the sensor table has one) left cores idle
  (1M rows, 2 cores: 16 ms for the op before, 10.5-11.8 ms after). So when a table has fewer text columns than cores, each is cut into as
  many slices as it takes to give every core one (at least :data:`SLICE_ROWS` rows each),
  each slice cast over its own category set on a thread of its own (the cast releases the
  GIL), and the slices' distinct values are merged (a hash pass over the distinct values
  only) before the gather. (Four slices on two cores were no faster than two.) With a
  text column per core or more, one polars query casts them all and one more gathers
  the codes (:func:`_fit_whole_columns`), which beat the slices' threads there.
- An integer column over a narrow range (ids, codes) marks the values present in a table
  as long as the range (``np.bincount``) and gathers each row's code from its running
  count; a wide one takes its sorted distinct values and ``np.searchsorted``. It is
  fitted and coded on a thread beside the text slices.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import narwhals as nw
import numpy as np

from gpufeed.gpu_transforms.tabular.frames import NwFrame, wrap
from gpufeed.gpu_transforms.tabular.numpy_kernels import pooled_empty, spread
from gpufeed.machine import usable_cpus

#: Rows per slice at least when a text column is cut for the cores (a slice's thread and
#: category set cost ~0.1 ms).
SLICE_ROWS = 1 << 17


def polars_fit_codes(frame: NwFrame, columns: Sequence[str], missing: int,
                     start: int = 2) -> tuple[dict[str, list[Any]], NwFrame] | None:
    """Fit the sorted vocabulary of each text or integer column of an eager polars frame
    and write its int32 codes (``start + i`` for the ``i``-th value, ``missing`` for a
    missing value) in the same pass; None when a column is of another type.

    Every value present joins the vocabulary (``Categorify(min_count=1)``), so no code
    stands for an unseen value here.
    """
    import polars as pl

    native = nw.to_native(frame)
    schema = native.schema
    if not all(schema[c] == pl.String or schema[c].is_integer() for c in columns):
        return None
    texts = [c for c in columns if schema[c] == pl.String]
    rows = native.height
    cuts = max(1, min(math.ceil(usable_cpus() / max(len(texts), 1)), rows // SLICE_ROWS))
    if cuts == 1:
        return _fit_whole_columns(native, columns, texts, missing, start)
    bounds = [rows * i // cuts for i in range(cuts + 1)]
    slices = [(c, lo, hi) for c in texts for lo, hi in zip(bounds, bounds[1:], strict=False)]
    integers = [c for c in columns if c not in texts]

    def fit(task: tuple[str, int, int] | str) -> Any:
        if isinstance(task, str):  # an integer column, whole
            return _integer_codes(native.get_column(task), missing, start)
        c, lo, hi = task
        return _slice_ids(native.get_column(c).slice(lo, hi - lo))

    # The integer columns first: each is one task as long as several slices.
    fitted = spread(fit, [*integers, *slices])
    vocabularies: dict[str, list[Any]] = {}
    coded: dict[str, np.ndarray] = {}
    for c, (vocab, codes) in zip(integers, fitted, strict=False):
        vocabularies[c], coded[c] = vocab, codes
    sliced = fitted[len(integers):]
    tables: list[np.ndarray] = []
    for c in texts:
        parts = [i for i, task in enumerate(slices) if task[0] == c]
        vocabularies[c], column_tables = _merge_vocabularies([sliced[i][1] for i in parts], missing, start)
        tables.extend(column_tables)
    outs = {c: pooled_empty(rows, np.int32) for c in texts}

    def gather(i: int) -> None:
        c, lo, hi = slices[i]
        # "wrap": every id is in range, and "raise" would copy `out` first.
        np.take(tables[i], sliced[i][0], out=outs[c][lo:hi], mode="wrap")

    spread(gather, range(len(slices)))
    coded.update(outs)
    # numpy's buffers, not copies
    return ({c: vocabularies[c] for c in columns},
            wrap(native.with_columns(*[pl.Series(c, coded[c]) for c in columns])))


def _fit_whole_columns(native: Any, columns: Sequence[str], texts: Sequence[str], missing: int,
                       start: int) -> tuple[dict[str, list[Any]], NwFrame]:
    """:func:`polars_fit_codes` with a text column per core or more: every text column cast
    in one query (polars spreads the columns over its threads), every code gathered in one
    more. 10M transactions rows, 4 text columns, 2 cores: 0.27 s, against 0.31 s through
    the slices' Python threads and numpy's gather."""
    import polars as pl

    categories = {c: pl.Categories.random() for c in texts}
    # Cast only: a to_physical() in the same query leaves the category set unfilled.
    cast = native.with_columns(*[pl.col(c).cast(pl.Categorical(cats)) for c, cats in categories.items()])
    vocabularies: dict[str, list[Any]] = {}
    exprs = []
    for c in columns:
        if c in categories:
            vocabularies[c], (table,) = _merge_vocabularies([categories[c].to_series()], missing, start)
            index = pl.col(c).to_physical()
            if cast.get_column(c).null_count():
                index = index.fill_null(len(table) - 1)  # the slot holding `missing`
            exprs.append(pl.lit(pl.Series(table)).gather(index).alias(c))
        else:
            vocabularies[c], codes = _integer_codes(native.get_column(c), missing, start)
            exprs.append(pl.Series(c, codes))
    return vocabularies, wrap(cast.with_columns(*exprs))


def _slice_ids(part: Any) -> tuple[np.ndarray, Any]:
    """A text slice's ids over a category set of its own (``len(values)`` where a value is
    missing) and its distinct values, by id."""
    import polars as pl

    categories = pl.Categories.random()  # fresh ids 0..k-1
    cast = part.cast(pl.Categorical(categories))
    values = categories.to_series()  # read while `cast` keeps the set alive
    ids = cast.to_physical()
    if ids.null_count():
        ids = ids.fill_null(len(values))
    return ids.to_numpy(), values


def _merge_vocabularies(seen: Sequence[Any], missing: int, start: int) -> tuple[list[Any], list[np.ndarray]]:
    """The sorted vocabulary of the slices' distinct values ``seen``, and per slice a table
    from its ids to codes, with ``missing`` at the slot past its last id."""
    import polars as pl

    if len(seen) == 1:
        values, ids = seen[0], [np.arange(len(seen[0]))]
    else:
        categories = pl.Categories.random()
        cast = pl.concat(seen).cast(pl.Categorical(categories))
        values = categories.to_series()
        joined = cast.to_physical().to_numpy()
        ids = np.split(joined, np.cumsum([len(s) for s in seen])[:-1])
    # Sorted by polars: UTF-8 byte order is code-point order, Python's `sorted`.
    order = values.arg_sort().to_numpy()
    rank = np.empty(len(values), dtype=np.int32)
    rank[order] = np.arange(start, start + len(values), dtype=np.int32)
    return values.gather(order).to_list(), [np.append(rank[i], np.int32(missing)) for i in ids]


#: An integer column whose values span at most this many times its length (plus a floor)
#: gets its codes from a table as long as the range; a wider one is searched.
_RANGE_PER_ROW, _RANGE_FLOOR = 2, 1 << 16


def _integer_codes(series: Any, missing: int, start: int) -> tuple[list[int], np.ndarray]:
    """The sorted distinct values of a polars integer column and its int32 codes (numpy's
    gather: polars' took 3.4 ms of 1M rows' 6 ms)."""
    import polars as pl

    values = series.drop_nulls()
    if len(values) == 0:
        return [], np.full(len(series), missing, dtype=np.int32)  # every value is missing
    lo, hi = int(values.min()), int(values.max())
    nulls = len(values) < len(series)
    # In 64 bits: an Int8 column from -100 to 100 wrapped round in ``values - lo``.
    wide = np.uint64 if series.dtype == pl.UInt64 else np.int64
    filled = (series.fill_null(lo) if nulls else series).to_numpy().astype(wide, copy=False)
    if hi - lo < _RANGE_PER_ROW * len(series) + _RANGE_FLOOR:
        present = np.bincount(values.to_numpy().astype(wide, copy=False) - lo, minlength=hi - lo + 1) > 0
        table = np.cumsum(present, dtype=np.int32) + np.int32(start - 1)
        codes = np.take(table, filled - lo, mode="wrap")  # every index is in range
        vocab = (np.flatnonzero(present) + lo).tolist()
    else:
        distinct = np.unique(values.to_numpy())
        codes = (np.searchsorted(distinct, filled) + start).astype(np.int32)
        vocab = distinct.tolist()
    if nulls:
        codes[series.is_null().to_numpy()] = missing
    return vocab, codes
