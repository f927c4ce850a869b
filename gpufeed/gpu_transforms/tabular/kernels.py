"""Per-backend fast paths: where the table ops leave narwhals, and why.

:mod:`.frames` promises that every op is written once on narwhals. The kernels here break
that promise on purpose, each for a reason that narwhals cannot meet; every other backend
still takes the narwhals form in the same function, so results stay identical:

- :func:`quantile_bounds` (``Clip(quantiles=)``):

  - Dask: narwhals has no quantile across partitions; :func:`.dask.quantile_bounds` reads
    each quantile's tail exactly (Dask's own merge of partition percentiles is far off).
  - pandas and polars: :func:`.quantiles.exact_quantiles` on each column's values (on
    polars its own buffer), one thread per column (numpy releases the GIL): only the
    tails are read, and the order statistics are interpolated exactly as numpy does.
    polars' own ``quantile`` rounds the interpolation differently in the last bit now and
    then, so pandas and polars would fit different bounds; pandas' (and narwhals')
    quantile sorts the whole column.
  - cuDF: cuDF's linear quantile, on the GPU, both quantiles of a column from one sort (the
    same order statistics; the interpolation may round differently in the last bit).

- :func:`group_stats_f64` (``Standardize(by=)``): one narwhals group-by, except that on
  eager pandas and cuDF float32 columns are cast to float64 a chunk at a time, so the
  float64 copy never holds every column at once (it would double a downcast table's
  memory, or overflow a GPU); and that short columns of an eager pandas or polars frame
  are read as 2-D float64 blocks and grouped by pandas' group-by (the same bits on both):
  a wide table's cost there is per column or per expression, not per row.
- :func:`standardize_by_code` (``Standardize(by=)``): on polars and pandas each row's
  group statistics are gathered by an integer code, much faster than the hash lookup
  per column of narwhals' ``replace_strict``, which the other backends use; short
  columns as 2-D blocks, as their statistics.
- :func:`vocabulary_codes`, :func:`category_values` (``Categorify``): on pandas the column
  is factorised once (a hash pass, as ``pd.factorize``; ``fit_transform`` uses the one pass
  for both) and only its distinct values are looked up in the vocabulary;
  narwhals' ``replace_strict`` hashes every row against the mapping, ~6x slower on a text
  column with thousands of categories. On polars a text vocabulary becomes an ``Enum`` and
  the codes are its physical indices (~1.3x faster than ``replace_strict``). cuDF and
  Dask take the narwhals form.
- ``Categorify.fit_transform`` on an eager polars frame: :mod:`.category_codes`.
- :func:`cudf_log` (``Log``): narwhals' ``log`` on cuDF runs cupy on the column's
  values, which a column with missing values has none of; ``np.log`` of the Series goes
  through cuDF's ``__array_ufunc__``, which keeps them missing.

- ``HashBucket`` of text and integer columns on polars and pandas (and Dask's pandas
  partitions): CRC32 over the column's Arrow text in numpy (:mod:`.crc32`, called from
  ``categorical._bucket_column``), exactly ``stable_hash`` per value, instead of each
  distinct value hashed in Python (~30-60x faster on 1M-distinct ids). cuDF takes the
  narwhals form.

- :func:`with_category` (``FillMissing`` of an unordered categorical with a new value):
  pandas, cuDF and Dask keep a categorical's categories with the column and refuse a fill
  outside them; narwhals has no way to add one, so the backend's ``cat.add_categories`` does.

The pandas paths of the elementwise ops (``FillMissing``, ``Clip``, ``Log``, ``MinMax``) are
in :mod:`.pandas_kernels`. Measurements behind these choices: ``docs/tabular.md`` (Fast paths).
"""

from __future__ import annotations

import functools
import math
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import narwhals as nw
import numpy as np

from gpufeed.gpu_transforms.tabular import cudf_kernels
from gpufeed.gpu_transforms.tabular.frames import (
    NwFrame,
    backend_of,
    collect_small,
    dtypes_of,
    free_name,
    is_lazy,
    is_missing,
    small_rows,
    with_series,
    wrap,
)
from gpufeed.gpu_transforms.tabular.numpy_kernels import (
    PIECE,
    affine,
    clip_to,
    log_offset,
    log_offset_lows,
    pooled_empty,
    spread,
    standardize_gathered,
    threads_for,
)
from gpufeed.gpu_transforms.tabular.pandas_kernels import (
    as_column,
    assign,
    block_readable,
    column_runs,
    float64_blocks,
    with_block,
)
from gpufeed.gpu_transforms.tabular.quantiles import exact_quantiles
from gpufeed.gpu_transforms.tabular.stats import (
    aggregate,
    f64,
    lookup,
    narrow_float,
    no_values,
    number,
)
from gpufeed.machine import usable_cpus

#: polars types whose Arrow values numpy reads in place (not Int128, Decimal, Boolean).
_NUMPY_READABLE = ("Int8", "Int16", "Int32", "Int64", "UInt8", "UInt16", "UInt32", "UInt64", "Float32", "Float64")


def _numpy_readable(native: Any, columns: Sequence[str]) -> bool:
    """Whether every one of ``columns`` of the polars frame ``native`` has a numpy type."""
    schema = native.collect_schema()
    return all(str(schema[c]) in _NUMPY_READABLE for c in columns)


def polars_log(frame: NwFrame, columns: Sequence[str], offset: float, *, checked: bool = False) -> NwFrame | None:
    """``log(x + offset)`` of the int or float ``columns`` of a polars frame in float64, by
    :func:`.numpy_kernels.log_offset`, as on pandas, so the backends agree to the bit; None
    when a column is of another type (booleans, Int128: polars' own ``log`` then).

    An eager frame through :func:`_numpy_series`; a lazy one runs the same kernel per
    batch of the query.

    ``checked`` (an eager frame): None too unless the outputs prove, in the kernel's own
    pass, that no value was NaN or at or below ``-offset`` (:func:`.numpy_kernels.log_offset_lows`;
    a value under a missing slot can only raise a false alarm), so the caller skips its
    NaN and domain passes and makes them only after a None.
    """
    import polars as pl

    native = nw.to_native(frame)
    if not _numpy_readable(native, columns):
        return None
    offset = float(offset)
    lows: list[float] = []

    def kernel(values: list[np.ndarray]) -> list[np.ndarray]:
        if not checked:
            return log_offset(values, offset)
        outs, found = log_offset_lows(values, offset)
        lows.extend(found)
        return outs

    if is_lazy(frame):
        return wrap(native.with_columns(
            pl.col(c).map_batches(lambda s: _numpy_series([s], kernel)[0], return_dtype=pl.Float64,
                                  is_elementwise=True)
            for c in columns))
    logged = _numpy_series([native.get_column(c) for c in columns], kernel)
    if checked and not all(low > -math.inf for low in lows):  # NaN or -inf: a NaN or x <= -offset somewhere
        return None
    return wrap(with_series(native, logged))


def polars_clip(frame: NwFrame, bounds: dict[str, Sequence[float | None]]) -> NwFrame:
    """Each float64 column ``c`` of an eager polars frame clipped to ``bounds[c] = [low,
    high]`` (None: no bound) by numpy's clip (:func:`.numpy_kernels.clip_to`, as on pandas),
    missing values kept missing. Why: polars' own ``clip`` took 85 ms over 40 columns of 1M
    values, this 21 ms (2-core AMD EPYC, polars 2.1, numpy 2.4)."""
    return _per_column_kernel(frame, bounds, clip_to)


def polars_affine(frame: NwFrame, params: Mapping[str, Sequence[float]]) -> NwFrame | None:
    """Each column ``c`` of an eager polars frame as float64 ``(x - sub) * (1 / div)`` for
    ``params[c] = (sub, div)`` by :func:`.numpy_kernels.affine`, the kernel pandas runs (the
    same bits), missing values kept missing; None when a column is not of a numpy type.

    Why: polars' expression writes a new column per step (the difference, then the
    product: 1M values, one step 1.6 ms, both 3.8-5.0 ms) on one core per column, where
    the kernel writes one pooled output in place on every core: ``MinMax`` over 37
    columns of 1M values took 122 ms by the expression, 64 ms here; one column 4.0
    against 2.2 ms (2-core AMD EPYC Zen 3, polars 2.1, numpy 2.4; an earlier box had
    measured them even)."""
    if is_lazy(frame) or not _numpy_readable(nw.to_native(frame), list(params)):
        return None
    return _per_column_kernel(frame, params, affine)


def _per_column_kernel(frame: NwFrame, params: Mapping[str, Any],
                       kernel: Callable[[list[np.ndarray], list[Any]], Sequence[np.ndarray]]) -> NwFrame:
    """The columns ``params`` names of an eager polars frame replaced by ``kernel(values,
    per_chunk)`` through :func:`_numpy_series`, which hands the kernel every chunk of every
    column: ``per_chunk`` holds each chunk's column's parameters."""
    native = nw.to_native(frame)
    series = [native.get_column(c) for c in params]
    per_chunk = [params[s.name] for s in series for _ in range(s.n_chunks())]
    return wrap(with_series(native, _numpy_series(series, lambda values: kernel(values, per_chunk))))


def polars_min_max(frame: NwFrame, columns: Sequence[str]) -> dict[str, list[float]] | None:
    """``{column: [min, max]}`` of an eager polars frame's int or float ``columns``, missing
    values skipped, the columns spread over the usable cores. Integer columns by Arrow's
    ``min_max`` on the columns' own buffers: one read of each column (polars reads a column
    once for ``min`` and again for ``max``: 37 columns of 1M values took 12 ms against
    20 ms, 2 cores). Float columns by polars' ``min`` and ``max``: Arrow's float
    ``min_max`` minds NaN per value even where there is none, 2.9 ms per 1M values against
    polars' 0.25 ms for both (3.7 against 0.43 ms with gaps).

    None when a column is of another type or a bound is not finite (inf, or no value): the
    caller's narwhals path then names the column. NaN must be missing already.
    """
    import pyarrow as pa
    import pyarrow.compute as pc

    native = nw.to_native(frame)
    if not _numpy_readable(native, columns):
        return None

    def bounds(column: str) -> tuple[Any, Any]:
        series = native.get_column(column)
        if series.dtype.is_float():
            return series.min(), series.max()
        found = pc.min_max(pa.chunked_array([chunk.to_arrow() for chunk in series.get_chunks()]))
        return found["min"].as_py(), found["max"].as_py()

    found = spread(bounds, columns, threads_for(native.height * len(columns)))
    if not all(low is not None and high is not None and math.isfinite(low) and math.isfinite(high)
               for low, high in found):
        return None
    # Integer columns keep exact int bounds (beyond 2**53 a float would lose digits).
    return {c: [low, high] if isinstance(low, int) else [float(low), float(high)]
            for c, (low, high) in zip(columns, found, strict=True)}


def _numpy_series(series: Sequence[Any], kernel: Callable[[list[np.ndarray]], list[np.ndarray]]) -> list[Any]:
    """Float64 polars Series from ``kernel`` run on the values of ``series``, chunk by chunk
    (the same chunks out): every chunk of every Series in one ``kernel`` call, which gets
    the values (read in place from each chunk's Arrow buffer) and returns one float64
    array per chunk. Missing values stay missing: each chunk's validity mask is reused, so what
    the kernel computes in a masked-out slot is never seen.
    """
    import polars as pl
    import pyarrow as pa

    chunks = [(i, chunk.to_arrow()) for i, s in enumerate(series) for chunk in s.get_chunks()]
    # The values from the buffer's start: a sliced chunk's offset applies to the validity
    # mask and the values alike, so the result keeps it (a few values more are computed).
    values = [np.frombuffer(arr.buffers()[1], dtype=arr.type.to_pandas_dtype(), count=arr.offset + len(arr))
              for _, arr in chunks]
    parts: list[list[Any]] = [[] for _ in series]
    for (i, arr), out in zip(chunks, kernel(values), strict=True):
        parts[i].append(pl.from_arrow(pa.Array.from_buffers(
            pa.float64(), len(arr), [arr.buffers()[0], pa.py_buffer(out)], null_count=arr.null_count,
            offset=arr.offset)))
    return [(pl.Series(s.name, [], dtype=pl.Float64) if not p else p[0] if len(p) == 1
             else pl.concat(p, rechunk=False)).alias(s.name) for s, p in zip(series, parts, strict=True)]


def cudf_log(frame: NwFrame, columns: Sequence[str], offset: float) -> NwFrame:
    """``log(x + offset)`` of ``columns`` in float64 on a cuDF frame, missing values kept missing."""
    return wrap(cudf_kernels.log(nw.to_native(frame), columns, offset))


#: Temporary column holding each row's group code in ``Standardize(by=)``.
GROUP_CODE = "__gpufeed_group_code"
#: Float32 columns cast to float64 per group-by pass on eager pandas/cuDF.
_CAST_CHUNK = 16


def quantile_bounds(frame: NwFrame, backend: str, columns: Sequence[str],
                    qs: tuple[float, float]) -> dict[str, list[float]]:
    """``{column: [low, high]}``: the linear-interpolation quantiles ``qs`` of each column.

    Raises:
        EmptyTableError: a column has no non-missing value.
    """
    low, high = qs
    if backend == "dask":  # exact, as pandas gives them (Dask's own merge of partition percentiles is not)
        from gpufeed.gpu_transforms.tabular.dask import quantile_bounds as dask_quantiles

        return dask_quantiles(nw.to_native(frame), columns, (low, high))
    if backend == "polars":
        return _polars_quantiles(frame, columns, qs)
    if backend == "pandas":
        return _numpy_quantiles_threaded(frame, columns, qs)
    if backend == "cudf":
        # Both quantiles of a column from one sort (narwhals asks for each on its own, and
        # cuDF's quantile sorts the column each time); two values per column to the host.
        native = nw.to_native(frame)
        found = {c: native[c].quantile([low, high], interpolation="linear").to_arrow().to_pylist() for c in columns}
        return {c: [number(v, c, "Clip") for v in found[c]] for c in columns}  # None: no value
    stats = aggregate(frame, [
        *[nw.col(c).quantile(low, interpolation="linear").alias(f"lo:{c}") for c in columns],
        *[nw.col(c).quantile(high, interpolation="linear").alias(f"hi:{c}") for c in columns],
    ])
    return {c: [number(stats[f"lo:{c}"], c, "Clip"), number(stats[f"hi:{c}"], c, "Clip")] for c in columns}


def _numpy_quantiles_threaded(frame: nw.DataFrame, columns: Sequence[str],
                              qs: tuple[float, float]) -> dict[str, list[float]]:
    bounds = spread(lambda c: _numpy_quantiles(frame, c, qs), columns)
    return dict(zip(columns, bounds, strict=True))


def _numpy_quantiles(frame: nw.DataFrame, column: str, qs: tuple[float, float]) -> list[float]:
    values = frame.get_column(column).to_numpy()
    if values.dtype.kind == "f":  # missing values are NaN here (pandas, or polars' nulls)
        # A mask on the values: narwhals' drop_nulls on pandas took 6.0 ms per 1M values, this 0.5.
        values = values[~np.isnan(values)]
    elif values.dtype.kind not in "iu":  # nullable or object columns: the general way
        values = frame.get_column(column).drop_nulls().to_numpy()
    if len(values) == 0:
        raise no_values("Clip", column)
    return exact_quantiles(values, qs)


def _polars_quantiles(frame: NwFrame, columns: Sequence[str], qs: tuple[float, float]) -> dict[str, list[float]]:
    """numpy's linear quantiles of polars columns, bit for bit (:func:`.quantiles.exact_quantiles`
    on each int or float column's own buffer, no copy where it has no gap; the columns
    spread over the usable cores). Other columns (decimals) through :func:`_numpy_quantiles`."""
    native = nw.to_native(frame)
    schema = native.collect_schema()
    fast = [c for c in columns if schema[c].is_float() or schema[c].is_integer()]
    if is_lazy(frame):
        native = native.select(fast).collect()

    def bounds(column: str) -> list[float]:
        series = native.get_column(column)
        if series.null_count() == len(series):
            raise no_values("Clip", column)
        values = (series.drop_nulls() if series.null_count() else series).to_numpy()
        if values.dtype.kind == "f" and np.isnan(values).any():
            return [math.nan] * len(qs)  # numpy: any NaN makes every quantile NaN
        return exact_quantiles(values, qs)

    state = dict(zip(fast, spread(bounds, fast), strict=True))
    rest = [c for c in columns if c not in state]
    if rest:
        state |= _numpy_quantiles_threaded(collect_small(frame.select(*rest)), rest, qs)
    return {c: state[c] for c in columns}


@dataclass
class GroupStats:
    """Per-group statistics of some columns, from :func:`group_stats_f64`: group
    ``keys[i]``'s mean, population std and count of values of the ``j``-th column are
    ``m[i, j]``, ``s[i, j]`` and ``n[i, j]`` (float64, NaN where a group has no value of
    the column); the group of rows without a key has the key None. ``key``: the
    factorised key the groups came from, where there is one (:meth:`row_codes` reads each
    row's group from it), else None."""

    keys: list[Any]
    m: np.ndarray
    s: np.ndarray
    n: np.ndarray
    key: PandasKey | CodedKey | None = None

    def row_codes(self, positions: dict[Any, int], other: int) -> np.ndarray | None:
        """Each row's ``positions[its group's key]`` as int32 (``other`` for a row without
        a key, or whose key ``positions`` lacks), from the factorisation the groups came
        from: a gather per row instead of hashing the key again. None without ``key``."""
        if self.key is None:
            return None
        table = np.array([positions.get(label, other) for label in self.key.distinct()] + [other], dtype=np.int32)
        return table[self.key.values]  # a missing key's -1: the last slot

    @classmethod
    def from_rows(cls, rows: list[dict[str, Any]], by: str, columns: Sequence[str]) -> GroupStats:
        """From one dict per group, ``{by: key, "m:<col>": mean, "s:<col>": std, "n:<col>":
        count}`` (a missing statistic as None, NaN or pandas' NA)."""
        def values(kind: str) -> np.ndarray:
            keys = [f"{kind}:{c}" for c in columns]
            table = [[r[k] for k in keys] for r in rows]
            try:  # numbers, NaN and None (as NaN): numpy converts them at C speed
                return np.array(table, dtype=np.float64).reshape(len(rows), len(columns))
            except (TypeError, ValueError):  # pandas' NA, numbers of other types
                return np.array([[math.nan if is_missing(v) else float(v) for v in row] for row in table],
                                dtype=np.float64).reshape(len(rows), len(columns))

        return cls(_group_keys([r[by] for r in rows]), values("m"), values("s"), values("n"))

    def beside(self, other: GroupStats) -> GroupStats:
        """These columns, then ``other``'s (statistics of the same groups, in any order).

        Keys in the same order (one group-by's groups) are joined row by row: a key can come
        twice there (pandas keeps a NaN apart from a null in an Arrow or nullable float key,
        both read back as None), and joined by key the second group took the first's
        statistics, which made the pooled global mean and std wrong."""
        if self.keys == other.keys:
            return GroupStats(self.keys, *(np.hstack([getattr(self, k), getattr(other, k)]) for k in "msn"))
        where = {k: i for i, k in enumerate(other.keys)}
        rows = [where[k] for k in self.keys]
        return GroupStats(self.keys, *(np.hstack([getattr(self, k), getattr(other, k)[rows]]) for k in "msn"))


def _group_keys(keys: Sequence[Any]) -> list[Any]:
    """Group keys as Python values, a missing one (None, NaN, NA, NaT) as None."""
    return [None if is_missing(k) else (k.item() if isinstance(k, np.generic) else k) for k in keys]


def group_stats_f64(frame: NwFrame, backend: str, by: str, columns: Sequence[str], schema: Any,
                    coded: bool = False) -> GroupStats:
    """Per-group mean, population std and count of values of ``columns``, accumulated in
    float64, one row per group (missing keys included). pandas calls its own group-by
    (``mean``/``std``/``count``: ~1.7x faster than the named aggregations narwhals builds).

    ``coded`` (a caller that reads each row's group next, :meth:`GroupStats.row_codes`): an
    eager polars frame's text or integer key is numbered in one pass first
    (:class:`CodedKey`) and grouped by its codes, instead of grouped by its values and
    hashed again for the rows' groups.

    The statistics come back as arrays, not a dict per group: 2,000 columns of 40 groups
    made 240,000 Python values, built and then read back, 0.2 s of a fit that pandas does
    in 0.03 s."""
    narrow = [c for c in columns if narrow_float(c, schema)]
    if not narrow or backend == "polars" or is_lazy(frame):
        chunks = [list(columns)]  # polars fuses the cast into its group-by; Dask is lazy
    else:
        wide = [c for c in columns if c not in narrow]
        chunks = [wide] * bool(wide) + [narrow[i:i + _CAST_CHUNK] for i in range(0, len(narrow), _CAST_CHUNK)]
    parts = []
    key: PandasKey | CodedKey | None = None  # the key factorised once: the group-bys below take its codes
    if (blocks := _short_float64_blocks(frame, backend, columns)) is not None:
        # Short columns: grouped as 2-D float64 blocks by pandas' group-by, one call per
        # statistic and block (pandas runs its kernel per block of the frame, one per column
        # on a frame that ops left one block per column, 6,000 calls for 2,000 columns;
        # polars' group-by costs ~60 us per aggregation whatever the rows), the same values
        # on both bit for bit.
        # On polars a text or integer key by its own codes: converted to pandas, an Int64
        # key with a gap became float64, which merged the keys beyond 2**53.
        key = ((CodedKey.of(nw.to_native(frame), by) if backend == "polars" else None)
               or PandasKey(frame.get_column(by).to_pandas()))
        parts, chunks = _grouped_blocks(blocks, key), []
    elif backend == "polars" and not is_lazy(frame):
        if coded and (key := CodedKey.of(nw.to_native(frame), by)) is not None:
            import polars as pl

            by = free_name(GROUP_CODE, schema)
            frame = wrap(with_series(nw.to_native(frame), [pl.Series(by, key.values)]))
        frame = frame.lazy()  # polars' lazy group-by: ~2x faster than an eager call
    elif backend == "pandas":
        key = PandasKey(nw.to_native(frame)[by])
    if backend == "pandas" and chunks:
        native = nw.to_native(frame)

        def grouped_stats(run: list[str]) -> GroupStats:
            part = native[run]
            if casts := {c: "float64" for c in run if c in narrow}:
                # Only when there is a cast: astype copies every column it is given, each
                # into a block of its own (2,000 columns: 0.2 s, and a group-by 10x slower).
                part = part.astype(casts)
            grouped = part.groupby(key.values, dropna=False, sort=False)
            stats = [grouped.mean(), grouped.std(ddof=0), grouped.count()]
            return GroupStats(key.labels(stats[0].index), *(
                v.to_numpy(dtype=np.float64, na_value=np.nan) for v in stats))

    # The key under a name of its own in the group-bys below: it may be one of the columns too.
    grouped = free_name(_GROUPED, [*schema, by])
    for chunk in chunks:
        if backend == "pandas":
            # A run of the columns per core, grouped by the key's codes: pandas' group-by
            # kernels release the GIL, and on one thread they were most of the fit (sensor,
            # 40 columns of 1M rows: 0.83 of 0.95 s). Column by column the same bits.
            size = -(-len(chunk) // min(usable_cpus(), len(chunk)))
            runs = [chunk[i:i + size] for i in range(0, len(chunk), size)]
            parts.append(functools.reduce(GroupStats.beside, spread(grouped_stats, runs)))
            continue
        # Cast before grouping: Dask's group-by takes plain column aggregations only
        # (integers too there, and on cuDF: their group sums wrap round, .stats.f64).
        part = frame.select(nw.col(by).alias(grouped), *[f64(c, schema, backend) for c in chunk])
        if backend == "dask":
            # Each group's std around its own mean (two passes): Dask's one-pass group
            # std cancels for values far from 0 (see group_moments).
            from gpufeed.gpu_transforms.tabular.dask import group_moments

            parts.append(GroupStats.from_rows(group_moments(nw.to_native(part), grouped, chunk), grouped, chunk))
            continue
        # One expression per statistic for all the columns (narwhals parses each
        # expression in ~0.3 ms: one per column took seconds on 2,000 columns).
        values = nw.col(*chunk)
        table = collect_small(part.group_by(grouped).agg(values.mean().name.prefix("m:"),
                                                         values.std(ddof=0).name.prefix("s:"),
                                                         values.count().name.prefix("n:")))
        if backend == "polars":
            native = nw.to_native(table)
            found = native[grouped].to_list()
            parts.append(GroupStats(key.labels(found) if isinstance(key, CodedKey) else _group_keys(found), *(
                native.select([f"{k}:{c}" for c in chunk]).to_numpy().astype(np.float64, copy=False)
                for k in "msn")))
        else:
            parts.append(GroupStats.from_rows(small_rows(table), grouped, chunk))
    out = parts[0]
    for part_stats in parts[1:]:
        out = out.beside(part_stats)
    if len(chunks) > 1:  # back in the order of ``columns``
        at = {c: j for j, c in enumerate(c for chunk in chunks for c in chunk)}
        order = [at[c] for c in columns]
        out = GroupStats(out.keys, out.m[:, order], out.s[:, order], out.n[:, order])
    # A polars key read through pandas is not handed on: its values may have changed type.
    out.key = key if backend == "pandas" or isinstance(key, CodedKey) else None
    return out


#: The group key's name inside :func:`group_stats_f64`'s group-by (underscores added while
#: a column of the frame has it: :func:`.frames.free_name`).
_GROUPED = "__gpufeed_group_key"


class PandasKey:
    """A pandas column as a group-by key taken by position (not aligned on an index), and
    its groups' labels read back from the group-by's index as Python values (a missing key
    as None).

    A categorical groups by its codes (missing: -1), its categories labelling them: pandas
    recodes a categorical key for ``sort=False`` (16 ms a group-by at 1M rows) and groups
    numpy codes ~1.5x faster, with the groups in the same order of first appearance and the
    same sums (the same bits as the categorical or the same key as text). Another column is
    factorised once into such codes (its numpy array, or its extension array: pandas 2.2
    warned that factorising a numpy-backed ``.array`` is deprecated), so that group-bys of
    runs of columns on several threads hash integers, not the key's values each.
    """

    def __init__(self, series: Any) -> None:
        import pandas as pd

        if isinstance(series.dtype, pd.CategoricalDtype):
            self.values = series.cat.codes.to_numpy()
            self.categories: Any = series.cat.categories  # read for the groups found only
        else:
            self.values, uniques = pd.factorize(
                series.to_numpy() if isinstance(series.dtype, np.dtype) else series.array)
            self.categories = pd.Index(uniques)  # dates read back as Timestamps, as a group-by's index

    def labels(self, index: Any) -> list[Any]:
        """The keys of a group-by's result ``index`` (its groups, in its order)."""
        found = index.tolist()
        labels = iter(self.categories.take([k for k in found if k >= 0]).tolist())
        return _group_keys([next(labels) if k >= 0 else None for k in found])

    def distinct(self) -> list[Any]:
        """The key of each code (``values``), in code order, as Python values."""
        return _group_keys(self.categories.tolist())


class CodedKey:
    """A text or integer column of an eager polars frame as a group-by key by its codes:
    ``values`` (int32) each row's position in its sorted distinct values, -1 for a missing
    key, numbered in one pass (:func:`.category_codes.polars_fit_codes`, ``Categorify``'s).

    Why: ``Standardize(by=)``'s fit grouped by the text and its transform hashed every
    row's text again (an ``Enum`` cast) for the rows' groups; numbering the key once and
    grouping by the codes serves both (transactions, 1M rows, 60 countries: group-by 25.6
    against 22.1 ms by the codes, the cast 30 ms against the numbering's 14)."""

    def __init__(self, values: np.ndarray, sorted_keys: list[Any]) -> None:
        self.values = values
        self.sorted_keys = sorted_keys

    @classmethod
    def of(cls, native: Any, by: str) -> CodedKey | None:
        """``native``'s column ``by`` numbered; None when it is not text or integers."""
        from gpufeed.gpu_transforms.tabular.category_codes import polars_fit_codes

        fitted = polars_fit_codes(wrap(native.select(by)), [by], missing=-1, start=0)
        if fitted is None:
            return None
        vocabulary, coded = fitted
        return cls(nw.to_native(coded).get_column(by).to_numpy(), vocabulary[by])

    def labels(self, codes: Sequence[int]) -> list[Any]:
        """The keys of a group-by's groups by their ``codes`` (-1: None)."""
        return [self.sorted_keys[k] if k >= 0 else None for k in codes]

    def distinct(self) -> list[Any]:
        """The key of each code, in code order."""
        return self.sorted_keys


def _grouped_blocks(blocks: Iterable[tuple[int, np.ndarray]], key: PandasKey | CodedKey) -> list[GroupStats]:
    """Per-group mean, population std and count of each run of columns read as 2-D float64
    ``blocks`` (:func:`.pandas_kernels.float64_blocks`), grouped by ``key`` (missing keys
    one group) with pandas' group-by, one call per statistic and block: the values pandas
    gives column by column, bit for bit."""
    import pandas as pd

    parts = []
    for _, block in blocks:
        grouped = pd.DataFrame(block, copy=False).groupby(key.values, dropna=False, sort=False)
        stats = [grouped.mean(), grouped.std(ddof=0), grouped.count()]
        parts.append(GroupStats(key.labels(stats[0].index), *(v.to_numpy(dtype=np.float64) for v in stats)))
    return parts


def pooled_stats(groups: GroupStats, columns: Sequence[str]) -> dict[str, tuple[float, float, float] | None]:
    """Each column's mean, population std and count of values over the whole table from its
    per-group ones (no second pass over the table); None for a column where no group has a
    value or a statistic is not finite.

    All the columns at once, group by group: the same sums in the same order as one column
    at a time (the same bits), without Python's cost per group and column (2,000 columns of
    40 groups took 0.55 s so)."""
    n, m, s = groups.n, groups.m, groups.s
    used = (n > 0) & ~np.isnan(m)
    width = len(columns)
    total, weighted = np.zeros(width), np.zeros(width)
    with np.errstate(invalid="ignore", over="ignore"):
        for i in range(len(groups.keys)):
            total += np.where(used[i], n[i], 0.0)
            weighted += np.where(used[i], n[i] * m[i], 0.0)
        bad = (used & ~(np.isfinite(m) & np.isfinite(s))).any(axis=0) | (total == 0)
        mean = weighted / np.where(bad, 1.0, total)
        spread = np.zeros(width)
        for i in range(len(groups.keys)):
            spread += np.where(used[i], n[i] * (s[i] * s[i] + (m[i] - mean) ** 2), 0.0)
    std = np.sqrt(spread / np.where(bad, 1.0, total))
    return {c: None if bad[j] else (float(mean[j]), float(std[j]), float(total[j])) for j, c in enumerate(columns)}


def standardize_by_code(frame: NwFrame, backend: str, tables: dict[str, tuple[list[float], list[float]]],
                        code: str = GROUP_CODE) -> NwFrame:
    """``(x - mean[c]) / std[c]`` per column, ``c`` each row's group code, in the column
    named ``code`` (left out of the frame returned); ``tables`` maps each column to its
    per-code means and stds."""
    columns = list(tables)
    least = PANDAS_BLOCK_COLUMNS if backend == "pandas" else 2
    if (blocks := _short_float64_blocks(frame, backend, columns, least)) is not None:
        # Short columns as 2-D blocks, the same bits on pandas and polars: column by column
        # the cost is per column (pandas) or per expression (polars: 2,000 columns, 4,000
        # gathers), whatever the rows.
        out = _standardized_blocks(blocks, _take_codes(frame.get_column(code).to_numpy()), tables)
        native = nw.to_native(frame)
        if backend == "pandas":
            return wrap(with_block(native, columns, out, drop=[code]))
        return wrap(_with_float64_rows(native, columns, out).drop(code))
    if backend == "polars" and not is_lazy(frame) and _numpy_readable(nw.to_native(frame), columns):
        # numpy's gathers on the columns' buffers, the pandas kernel (polars_affine says why
        # not polars' expression: a new column per step, one core per column). Sensor, 40
        # columns of 1M rows, fit + transform: 571 -> 470 ms; transactions (2): 94 -> 84.
        native = nw.to_native(frame)
        codes = _take_codes(native.get_column(code).to_numpy())
        series = [native.get_column(c) for c in columns]
        tabled = [(np.asarray(m, dtype=np.float64), np.asarray(sd, dtype=np.float64)) for m, sd in tables.values()]
        chunks = _buffer_rows(series)

        def kernel(values: list[np.ndarray]) -> list[np.ndarray]:
            return standardize_gathered(values, [_codes_from(codes, start, len(v)) for (_, start), v in zip(
                chunks, values, strict=True)], *zip(*[tabled[i] for i, _ in chunks], strict=True))

        return wrap(with_series(native, _numpy_series(series, kernel)).drop(code))
    if backend == "polars":
        import polars as pl

        # Booleans, Int128, decimals: polars' gathers. Gather takes polars' index type
        # (UInt32); Int32 codes would be cast for every gather.
        native = nw.to_native(frame).with_columns(pl.col(code).cast(pl.get_index_type()))
        index = pl.col(code)
        return wrap(native.with_columns(*[
            ((pl.col(c) - pl.lit(pl.Series(m)).gather(index)) / pl.lit(pl.Series(sd)).gather(index))
            .cast(pl.Float64).alias(c) for c, (m, sd) in tables.items()]).drop(code))
    if backend == "pandas":
        native = nw.to_native(frame)
        codes = _take_codes(native[code].to_numpy())

        def standardized(column: str) -> Any:
            # Each column read as float64 in its own task: converted all at once, the
            # copies of nullable or integer columns were held together.
            means, stds = tables[column]
            values = native[column].to_numpy(dtype=np.float64, na_value=np.nan)
            return as_column(native, standardize_gathered(
                [values], [codes], [np.asarray(means, dtype=np.float64)], [np.asarray(stds, dtype=np.float64)])[0])

        placed_columns = spread(standardized, columns, threads_for(len(codes) * len(columns)))
        return wrap(assign(native, dict(zip(columns, placed_columns, strict=True)))).drop(code)
    if backend == "cudf":
        # The tables gathered on the GPU by cupy (cudf_kernels says why not narwhals)
        import cupy

        return wrap(cudf_kernels.standardize_by_code(nw.to_native(frame), code, tables, cupy)).drop(code)
    index = nw.col(code)
    ids = list(range(len(next(iter(tables.values()))[0])))
    return frame.with_columns(*[
        ((nw.col(c) - index.replace_strict(ids, m, default=m[-1], return_dtype=nw.Float64))
         / index.replace_strict(ids, sd, default=sd[-1], return_dtype=nw.Float64)).cast(nw.Float64).alias(c)
        for c, (m, sd) in tables.items()]).drop(code)


def _take_codes(codes: np.ndarray) -> np.ndarray:
    """Group codes as numpy's index type, converted once for all the gathers: ``np.take``
    converts int32 codes on every call (1M rows: 2.1 ms a gather against 1.1)."""
    return codes.astype(np.intp, copy=False)


def _with_float64_rows(native: Any, columns: Sequence[str], out: np.ndarray) -> Any:
    """The polars frame ``native`` with each of ``columns`` replaced by its row of ``out``
    (float64, computed from the column read with missing values as NaN), missing where
    the column is: polars tells a missing value from NaN, and the rows had given NaN where
    a null belonged.

    A row with as many NaN as its column has missing values has them exactly there (a
    missing value gives NaN, and the statistics are finite), so polars makes them missing
    as it builds the column; a row with more (the column held NaN too) gets the column's
    mask. Built one by one from the masks, a wide table's 2,000 columns of 500 rows took
    0.6 s; one query over them all, 0.12 s."""
    import polars as pl

    nans = np.count_nonzero(np.isnan(out), axis=1)

    def column(j: int, name: str) -> Any:
        source = native.get_column(name)
        missing = source.null_count()
        if nans[j] == missing:
            return pl.Series(name, out[j], nan_to_null=bool(missing))
        import pyarrow as pa

        return pl.from_arrow(pa.array(out[j], mask=source.is_null().to_numpy())).alias(name)

    return with_series(native, [column(j, c) for j, c in enumerate(columns)])


def _buffer_rows(series: Sequence[Any]) -> list[tuple[int, int]]:
    """``(i, row)`` for each chunk of each of ``series`` in :func:`_numpy_series`' order:
    ``i`` the Series, ``row`` the row (in it) of the first value of the chunk's buffer,
    which :func:`_numpy_series` hands over from the buffer's start (a sliced chunk's
    buffer starts its Arrow offset before its first row, before row 0 even)."""
    out = []
    for i, s in enumerate(series):
        row = 0
        for chunk in s.get_chunks():
            out.append((i, row - chunk.to_arrow().offset))
            row += len(chunk)
    return out


def _codes_from(codes: np.ndarray, row: int, length: int) -> np.ndarray:
    """``length`` of ``codes`` from ``row`` on; before row 0 (the slots of a slice's buffer
    before its first row, never read back) code 0."""
    if row >= 0:
        return codes[row:row + length]
    return np.concatenate([np.zeros(-row, dtype=codes.dtype), codes[:row + length]])


#: Below this many rows, and from two columns, :func:`_short_float64_blocks` reads columns
#: as 2-D blocks.
SHORT_BLOCK_ROWS = 1 << 16
#: From this many columns :func:`standardize_by_code` writes short columns back into a
#: pandas frame as one 2-D block: placing a block (:func:`.pandas_kernels.with_block`)
#: costs ~2 ms more than a few columns' own fixed costs. 20,000 rows, one process, the
#: two forms alternating: 2 columns 3.8 against 2.7 ms, 4: 5.1 / 4.4, 8: 5.6 / 6.3, 32:
#: 9.7 / 13.5 (the transactions table's 2: 3.8 / 1.7). On polars the block won from 2.
PANDAS_BLOCK_COLUMNS = 8


def _short_float64_blocks(frame: NwFrame, backend: str, columns: Sequence[str],
                          least: int = 2) -> Iterator[tuple[int, np.ndarray]] | None:
    """``columns`` as 2-D float64 blocks (:func:`.pandas_kernels.float64_blocks`) when they
    are short (under :data:`SHORT_BLOCK_ROWS` rows) and ``least`` or more, in an eager
    pandas or polars frame, else None: a wide table's cost there is per column or per
    expression, not per row.

    Why those bounds: ``Standardize(by=)`` fit and transform, 2-core box, block against
    column by column: one column, 2,000 rows, 19 against 8 ms on pandas; 32 columns of
    100,000 rows, 103 against 81 ms on pandas and 92 against 54 ms on polars; 2 to 32
    columns of 2,000 to 50,000 rows, the blocks as fast or faster on pandas, even on
    polars (the block's copy in and out costs per row, the columns' fixed costs per
    column)."""
    native = nw.to_native(frame)
    # The backend first: a lazy polars frame has no length, and Dask's computes the graph.
    if (backend not in ("pandas", "polars") or is_lazy(frame) or len(columns) < max(least, 2)
            or len(native) >= SHORT_BLOCK_ROWS):
        return None
    if backend == "pandas" and block_readable(native, columns):
        return float64_blocks(native, columns)
    if backend == "polars":
        return _polars_float64_blocks(native, columns)
    return None


def _standardized_blocks(blocks: Iterable[tuple[int, np.ndarray]], codes: np.ndarray,
                         tables: dict[str, tuple[list[float], list[float]]]) -> np.ndarray:
    """:func:`standardize_by_code`'s arithmetic on short columns read as 2-D float64
    ``blocks`` (``(first column, rows x run)``, as :func:`.pandas_kernels.float64_blocks`
    gives them): one output row per column, computed in pieces of at most :data:`PIECE`
    values spread over the usable cores, the same operations in the same order as the
    column-by-column path (the same bits).

    Why: column by column, a wide table's columns cost ~0.2 ms each in fixed costs (a
    Series read, two outputs, a Series built and placed) whatever their length: 2,000
    columns of 500 rows took 0.5 s on pandas, against 0.04 s as blocks."""
    columns = list(tables)
    means = np.array([m for m, _ in tables.values()], dtype=np.float64).reshape(len(columns), -1)
    stds = np.array([sd for _, sd in tables.values()], dtype=np.float64).reshape(len(columns), -1)
    rows = len(codes)
    out = pooled_empty(len(columns) * rows).reshape(len(columns), rows)
    per = max(1, PIECE // max(rows, 1))
    for first, block in blocks:
        values = block.T

        def run(start: int, values: np.ndarray = values, first: int = first) -> None:
            end = min(start + per, len(values))  # within this block
            at = slice(first + start, first + end)
            piece = out[at]
            np.take(means[at], codes, axis=1, out=piece, mode="clip")
            np.subtract(values[start:end], piece, out=piece)
            np.divide(piece, np.take(stds[at], codes, axis=1, mode="clip"), out=piece)

        spread(run, range(0, values.shape[0], per))
    return out


def _polars_float64_blocks(native: Any, columns: Sequence[str]) -> Iterator[tuple[int, np.ndarray]]:
    """:func:`.pandas_kernels.float64_blocks` of an eager polars frame: runs of ``columns``
    cast to float64 (missing as NaN), as :func:`.stats.f64` reads them."""
    import polars as pl

    for start, run in column_runs(native.height, columns):
        yield start, native.select([pl.col(c).cast(pl.Float64) for c in run]).to_numpy()


def pandas_factorize(series: Any, *, counts: bool = True) -> tuple[np.ndarray, np.ndarray, np.ndarray | None]:
    """``(codes, distinct values, counts)`` of a pandas column in one hash pass (missing
    values get code -1 and are not counted); categorical columns of text give their text
    values, categorical columns of numbers (or booleans) their numbers, as polars holds
    them (it has no such categoricals: ``to_backend`` makes them Int64). ``counts=False``
    skips the counting (three more passes over the codes) and gives None."""
    import pandas as pd

    found, uniques = pd.factorize(series)
    tally = np.bincount(found[found >= 0], minlength=len(uniques)) if counts else None
    return found, _distinct_values(series.dtype, uniques), tally


def pandas_text_codes(series: Any, missing: int, start: int = 2) -> tuple[list[str], np.ndarray] | None:
    """``(sorted vocabulary, int32 codes)`` of a pandas text column (a ``StringDtype``:
    pandas 3's ``str``, ``string``) from one sorted factorisation: ``start + i`` for the
    ``i``-th distinct value in sorted order, ``missing`` for a missing value; None for a
    column of another dtype. Every value joins the vocabulary (``min_count`` 1).

    Why: the unsorted factorisation, then the distinct values sorted in Python, checked one
    by one as JSON keys and looked up again, cost ~0.4 us a distinct value beside pandas'
    own sort: 20,000 transactions rows (5,000 cities) took 17.7 ms for 4 columns against
    7.2 ms for ``pd.factorize(sort=True)`` by hand. pandas sorts text by code point (Arrow
    by UTF-8 bytes, which is the same order), as Python's ``sorted`` does.
    """
    import pandas as pd

    if not isinstance(series.dtype, pd.StringDtype):
        return None
    found, uniques = pd.factorize(series, sort=True)  # missing: -1
    table = np.append(np.arange(start, start + len(uniques), dtype=np.int32), np.int32(missing))
    return [str(v) for v in uniques.tolist()], table[found]


def pandas_category_lookup(series: Any) -> tuple[np.ndarray, np.ndarray]:
    """``(codes, values)`` of a pandas categorical column for :func:`pandas_codes`: its own
    codes (missing: -1) and all its categories, used or not, as :func:`pandas_factorize`
    gives values. No pass over the rows (a factorisation hashed the codes again: 8.5 ms a
    column at 1M rows); for a lookup, where an unused category does no harm, of a column
    with no more categories than rows (its categories are all looked up)."""
    return series.cat.codes.to_numpy(), _distinct_values(series.dtype, series.cat.categories)


def _distinct_values(dtype: Any, values: Any) -> np.ndarray:
    """Distinct ``values`` of a column of ``dtype`` as Python objects; a categorical's by
    their text when its categories are text (they compare by their text, as elsewhere)."""
    import pandas as pd

    if isinstance(dtype, pd.CategoricalDtype) and text_categories(dtype):
        values = values.astype(str)
    return np.asarray(values, dtype=object)


def text_categories(dtype: Any) -> bool:
    """Whether a pandas categorical dtype's categories are text (or mixed Python objects),
    not numbers, booleans or dates.

    Why it matters: a categorical of integers (``astype("category")`` of ids or years, a
    Feather or pickle file of one) compared by its text sorted ``10`` before ``9`` and gave
    other ``Categorify`` codes than polars, which holds such a column as Int64; and its
    text was ``"10.0"`` in a batch with a missing value but ``"10"`` in one without, so
    ``HashBucket`` put one value in two buckets.
    """
    import pandas as pd

    kind = dtype.categories.dtype
    return isinstance(kind, pd.StringDtype) or getattr(kind, "kind", "O") in "OSU"


def pandas_category_values(series: Any, *, nullable: bool = False) -> Any | None:
    """A pandas categorical of numbers, booleans or dates as its values (a nullable integer
    or boolean dtype where a value is missing, as polars holds them, or always with
    ``nullable``: Dask's partitions need one dtype); None for any other column (text
    categories included), which is compared as it is."""
    import pandas as pd

    if not isinstance(series.dtype, pd.CategoricalDtype) or text_categories(series.dtype):
        return None
    kind = series.dtype.categories.dtype
    if kind.kind in "iub" and (nullable or (series.cat.codes.to_numpy() < 0).any()):
        kind = pd.api.types.pandas_dtype("boolean" if kind.kind == "b" else
                                         ("UInt" if kind.kind == "u" else "Int") + str(kind.itemsize * 8))
    return series.astype(kind)


def cudf_string_dtype(dtype: Any) -> bool:
    """Whether a cuDF dtype is one of its string dtypes (object, pandas' ``StringDtype``,
    an ``ArrowDtype`` of ``string``/``large_string``: cuDF's ``is_dtype_obj_string``)."""
    import pandas as pd
    import pyarrow as pa

    if isinstance(dtype, pd.ArrowDtype):
        return pa.types.is_string(dtype.pyarrow_dtype) or pa.types.is_large_string(dtype.pyarrow_dtype)
    return isinstance(dtype, pd.StringDtype) or (isinstance(dtype, np.dtype) and dtype == np.dtype(object))


def cudf_category_values(series: Any, text: bool = False) -> Any | None:
    """A cuDF categorical of numbers, booleans or dates as its values (cuDF's integer and
    boolean columns hold missing values themselves), and with ``text`` one of text as its
    strings, computed on the GPU; None for any other column (text categories without
    ``text``: compared as they are). The cuDF twin of :func:`pandas_category_values`.

    Why: ``cudf.from_pandas`` (``to_backend``) keeps a pandas categorical of integers as a
    cuDF categorical, where polars gets Int64 and pandas' ops read its values: on cuDF
    ``Categorify`` compared it by its text (a vocabulary sorted ``"10" < "100" < "9"``, other
    codes than pandas and polars), ``HashBucket`` hashed ``"10"`` instead of 10, and the
    numeric ops refused the column as "not numbers".

    Two faults of cuDF's cast met here (on an H200, cuDF 26.10.2), worked round:

    - On a slice of a frame (``iloc[17:2500]``) the cast marked every row past the first ~350
      missing: ``_get_decategorized_column`` copies the slice's null mask from its offset up
      to the mask's size in *bytes*, read as bits. A slice with no gap of its own still
      carries its parent's mask at an offset, so every categorical is first copied (a
      fresh column at offset 0, the mask rebased by libcudf: one pass over the codes).
    - It refuses integers where values are missing ("Cannot convert float NaN to integer",
      as pandas does): the gaps are filled with a category, the column cast, and those
      rows nulled again from its own ``notna()``.
    """
    if str(series.dtype) != "category":  # cuDF's CategoricalDtype is not pandas' class
        return None
    categories = series.dtype.categories
    kind = categories.dtype
    if not ((isinstance(kind, np.dtype) and kind.kind in "biufmM") or (text and cudf_string_dtype(kind))):
        return None
    series = series.copy(deep=True)
    if not (kind.kind in "iu" and series.hasnans):  # hasnans: any null, on cuDF
        return series.astype(kind)
    present = series.notna()
    if len(categories) == 0:  # every value missing: no category to fill with
        return series.cat.codes.astype(kind).where(present)
    return series.fillna(categories[0]).astype(kind).where(present)


def categories_as_numbers(frame: NwFrame, columns: Sequence[str],
                          schema: Mapping[str, Any] | None = None) -> tuple[NwFrame, dict[str, Any]]:
    """``(frame, dtypes of columns)`` with the pandas, cuDF or Dask (categories known)
    categoricals of numbers or booleans among ``columns`` as their values
    (:func:`pandas_category_values`: the categories' type, nullable where a value is
    missing), as polars holds such a column (``to_backend`` makes it Int64); ``frame``
    itself when there is none (a schema check, no pass over the data). Categoricals of text
    are left as they are.

    Used wherever a column is read as numbers (the numeric ops, rules, ``to_tensors``), so a
    pickled table with ``astype("category")`` ids or sizes reads the same on every backend.
    """
    columns = list(dict.fromkeys(columns))
    schema = dict(schema) if schema is not None else dtypes_of(frame, columns)
    categoricals = [c for c in columns if schema[c] == nw.Categorical]
    if not categoricals:
        return frame, schema
    backend = backend_of(frame)
    native = nw.to_native(frame)
    if backend in ("pandas", "cudf"):
        read = pandas_category_values if backend == "pandas" else cudf_category_values
        values = {c: v for c in categoricals if (v := read(native[c])) is not None and v.dtype.kind in "iufb"}
        if not values:
            return frame, schema
        frame = wrap(assign(native, values))
    elif backend == "dask":
        casts = {c: pandas_category_values(native._meta[c], nullable=True) for c in categoricals
                 if native[c].cat.known}
        casts = {c: v.dtype for c, v in casts.items() if v is not None and v.dtype.kind in "iufb"}
        if not casts:
            return frame, schema
        frame = wrap(native.astype(casts))
    else:
        return frame, schema
    return frame, {**schema, **dtypes_of(frame, categoricals)}


def pandas_codes(found: np.ndarray, uniques: np.ndarray, vocabulary: list[Any], unseen: int,
                 missing: int, start: int = 2) -> np.ndarray:
    """Vocabulary codes of a factorised column: only its distinct values are looked up.

    A value the lookup misses is looked up again by its text when the vocabulary and the
    column hold different types: pandas compares a categorical by its text ('2007'), while
    the same column on polars (which has no integer categoricals) is Int64 and fits [2007,
    ...], so a recipe fitted on one backend mapped every row on the other to unseen (polars'
    own lookup already matched them).
    """
    import pandas as pd

    where = pd.Index(vocabulary, dtype=object).get_indexer(uniques)
    missed = where < 0
    if missed.any() and vocabulary:
        texts = [isinstance(v, str) for v in vocabulary] + [isinstance(v, str) for v in uniques[missed]]
        if not all(texts) and any(texts):
            again = pd.Index([str(v) for v in vocabulary], dtype=object)
            where[missed] = again.get_indexer([str(v) for v in uniques[missed]])
    table = np.append(np.where(where >= 0, where + start, unseen), missing).astype(np.int32)
    return table[found]


#: The count beside each distinct value in a group-by: no name a user's column would have
#: (a column named "n" had collided with the count).
_COUNT = "__gpufeed_count"


def category_values(frame: NwFrame, backend: str, exprs: dict[str, nw.Expr], min_count: int) -> dict[str, list[Any]]:
    """The distinct non-missing values of each column of ``exprs`` seen ``min_count`` times
    or more (unsorted): one factorisation per column on pandas; on polars a group-by count
    per column, all run in one ``collect_all``; on Dask a value count per column, all in one
    compute; a narwhals group-by count elsewhere (cuDF)."""
    if backend == "pandas":
        native = nw.to_native(frame)
        out = {}
        for c in exprs:
            _, uniques, counts = pandas_factorize(native[c])
            out[c] = uniques[counts >= min_count].tolist()
        return out
    if backend == "polars":
        import polars as pl

        # One group-by query per column, run together (polars spreads them over its threads).
        queries = [nw.to_native(frame.select(e.alias(c)).group_by(c).agg(nw.len().alias(_COUNT)).lazy())
                   for c, e in exprs.items()]
        counted = pl.collect_all(queries)
        return {c: [v for v, n in zip(t[c].to_list(), t[_COUNT].to_list(), strict=True)
                    if n >= min_count and not is_missing(v)]
                for c, t in zip(exprs, counted, strict=True)}
    if backend == "dask":
        import dask

        # Every column's value count in one graph run (one pass over the partitions where a
        # compute per column read the table once per column). Not narwhals' group-by count:
        # it asks for a named aggregation, agg(count=(c, "size")), which dask-cudf's group-by
        # refuses (TypeError, seen on dask-cudf 26.10).
        found = dask.compute(*[nw.to_native(frame.select(e.alias(c)))[c].value_counts() for c, e in exprs.items()])
        out = {}
        for c, counts in zip(exprs, found, strict=True):
            counts = counts.to_pandas() if hasattr(counts, "to_pandas") else counts  # dask-cudf: a cuDF series
            # a categorical's unused categories come with a count of 0
            out[c] = [v for v, n in zip(counts.index.tolist(), counts.tolist(), strict=True)
                      if n > 0 and n >= min_count and not is_missing(v)]
        return out
    tables = [collect_small(frame.select(e.alias(c)).group_by(c).agg(nw.len().alias(_COUNT)))
              for c, e in exprs.items()]
    return {c: [r[c] for r in small_rows(counts) if not is_missing(r[c]) and r[_COUNT] >= min_count]
            for c, counts in zip(exprs, tables, strict=True)}


def vocabulary_codes(frame: NwFrame, backend: str, exprs: dict[str, nw.Expr],
                     vocabularies: dict[str, list[Any]], unseen: int, missing: int, *, start: int = 2,
                     names: dict[str, str] | None = None) -> NwFrame:
    """Int32 codes of each column of ``vocabularies``: ``start + i`` for the vocabulary's
    ``i``-th value, ``missing`` for a missing value and ``unseen`` for any other value,
    written over the column (or into ``names[column]``).

    ``exprs`` are the columns as compared (categorical columns by their text).
    """
    names = {c: (names or {}).get(c, c) for c in vocabularies}
    if backend == "pandas":
        import pandas as pd

        native = nw.to_native(frame)

        def codes(column: str) -> np.ndarray:
            series = native[column]
            if isinstance(series.dtype, pd.CategoricalDtype) and len(series.dtype.categories) <= len(series):
                # (more categories than rows: a batch of a large category set, whose
                # categories would cost more to look up than its rows to factorise)
                found, uniques = pandas_category_lookup(series)
            else:
                found, uniques, _ = pandas_factorize(series, counts=False)
            return pandas_codes(found, uniques, vocabularies[column], unseen, missing, start)

        columns = list(vocabularies)  # a column per thread, as in Categorify.fit_transform
        return wrap(assign(native, {names[c]: as_column(native, codes) for c, codes in
                                    zip(columns, spread(codes, columns), strict=True)}))
    if backend == "polars" and all(vocabularies.values()) and all(
            isinstance(v, str) for vocab in vocabularies.values() for v in vocab):
        import polars as pl

        native = nw.to_native(frame)
        schema = native.collect_schema()
        if all(schema[c] in (pl.String, pl.Categorical) or isinstance(schema[c], pl.Enum) for c in vocabularies):
            by_ids = {}  # an eager frame's categoricals, coded by their physical ids
            for c, vocab in vocabularies.items():
                if not is_lazy(frame) and (schema[c] == pl.Categorical or isinstance(schema[c], pl.Enum)):
                    codes = polars_category_codes(native.get_column(c), vocab, unseen, missing, start)
                    if codes is not None:
                        by_ids[c] = codes
            return wrap(native.with_columns(
                *[pl.Series(names[c], codes) for c, codes in by_ids.items()],
                *[_vocabulary_code(pl.col(c), vocab, unseen, missing, start).alias(names[c])
                  for c, vocab in vocabularies.items() if c not in by_ids]))
    if backend == "cudf" and not is_lazy(frame):
        schema = frame.collect_schema()
        if all(schema[c] == nw.String and all(isinstance(v, str) for v in vocab) for c, vocab in vocabularies.items()):
            # text looked up by cuDF's own hash index (cudf_kernels says why)
            import cudf
            import cupy

            return wrap(cudf_kernels.vocabulary_codes(nw.to_native(frame), vocabularies, unseen, missing, start,
                                                      names, cupy, cudf.Index))
    return frame.with_columns(*[
        nw.when(exprs[c].is_null()).then(nw.lit(missing, nw.Int32))
        .otherwise(lookup(exprs[c], vocab, list(range(start, len(vocab) + start)), unseen, nw.Int32))
        .cast(nw.Int32).alias(names[c])
        for c, vocab in vocabularies.items()])


def polars_category_codes(series: Any, vocabulary: Sequence[str], unseen: int, missing: int,
                          start: int) -> np.ndarray | None:
    """Int32 codes of a polars ``Categorical`` or ``Enum`` column (eager) against a
    vocabulary of text, as :func:`vocabulary_codes` gives them, from its physical ids: one
    row of each id present coded by :func:`_vocabulary_code` (polars' cast to text and to an
    ``Enum``), each row's code then gathered from a table by id. None when the ids reach
    far past the rows (a category set that other columns filled with many values), where a
    table by id would be mostly empty.

    Why: the cast hashed every row's text (1M rows, a 3-value key: 49 ms, 39 of
    ``Standardize(by=)``'s 82 ms); by id, 12-29 ms. With as many values as rows it is the cast
    of the same number of values.
    """
    import polars as pl

    ids = series.to_physical().cast(pl.UInt32)
    top = ids.max()
    if top is None:  # no value at all
        return np.full(len(series), missing, dtype=np.int32)
    top = int(top)  # type: ignore[arg-type]
    if top >= 8 * len(series) + (1 << 16):
        return None
    rows = ids.fill_null(top + 1).to_numpy()
    where = np.full(top + 2, -1, dtype=np.int64)
    where[rows] = np.arange(len(rows))  # a row holding each id (the last one)
    present = np.flatnonzero(where[:top + 1] >= 0)
    table = np.full(top + 2, unseen, dtype=np.int32)
    table[present] = series.gather(where[present]).to_frame("v").select(
        _vocabulary_code(pl.col("v"), vocabulary, unseen, missing, start)).to_series().to_numpy()
    table[top + 1] = missing
    return table[rows]


def _vocabulary_code(column: Any, vocabulary: Sequence[str], unseen: int, missing: int, start: int) -> Any:
    """A polars expression: the int32 code of a text, ``Categorical`` or ``Enum`` column's
    values in ``vocabulary`` (``start + i``; ``missing``, ``unseen``), by a cast to text
    and to an ``Enum`` of the vocabulary."""
    import polars as pl

    return (pl.when(column.is_null()).then(pl.lit(missing, pl.Int32))
            .otherwise((column.cast(pl.String).cast(pl.Enum(vocabulary), strict=False)
                        .to_physical().cast(pl.Int32) + start).fill_null(unseen)))


def with_category(frame: NwFrame, backend: str, column: str, value: str) -> NwFrame:
    """``frame`` with ``value`` among the categories of its unordered categorical ``column``
    (added last, as ``cat.add_categories`` does), so that ``fill_null(value)`` can fill it.

    pandas, cuDF and Dask keep the categories with the column and refused the fill
    ("Cannot setitem on a Categorical with a new category"), while polars' ``Categorical``
    has no per-column set and filled: ``frame`` as it is there, and where ``value`` is a
    category already.
    """
    if backend == "polars":
        return frame
    native = nw.to_native(frame)
    values = native[column]
    if backend == "dask" and not values.cat.known:
        values = values.cat.as_known()  # Dask knows no categories until computed
    if bool(values.cat.categories.isin([value]).any()):
        return frame
    added = values.cat.add_categories([value])
    return wrap(native.assign(**{column: added}) if backend == "dask" else assign(native, {column: added}))
