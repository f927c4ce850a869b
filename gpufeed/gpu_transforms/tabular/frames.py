"""The backend edge: pick cuDF, polars or pandas once, then write every op once with narwhals.

Why narwhals rather than a home-made layer: it already speaks pandas, polars, cuDF and Dask
with one expression API (``when/then``, ``replace_strict``, ``is_in``, group-by
aggregations), its per-backend code is tested upstream, and it adds almost nothing per call
because expressions are translated once per ``with_columns``. The quirks it leaves to us
(NaN versus null, sizes, conversion between backends) stay in this module.

The few ops that leave narwhals for a backend's own API where it is measurably faster or
more exact are listed, with the reason for each, in :mod:`.kernels`.

cuDF and Dask are recognised by their type's module name (a cuDF frame can only exist if
cudf is already imported), so a CPU-only workflow never imports them.
"""

from __future__ import annotations

import warnings
from collections import Counter
from collections.abc import Callable, Iterable, Sequence
from typing import Any

import narwhals as nw

from gpufeed.backends import choose_dataframe_backend
from gpufeed.gpu_transforms.tabular import cudf_kernels
from gpufeed.gpu_transforms.tabular.errors import (
    BackendError,
    ColumnTypeError,
    MissingColumnError,
    MixedTypeError,
    TabularError,
)

Frame = Any  # a native pandas / polars / cuDF / Dask dataframe
NwFrame = nw.DataFrame | nw.LazyFrame


def backend_of(df: Frame) -> str:
    """Name the backend of a native frame: ``pandas``, ``polars``, ``cudf`` or ``dask``.

    Raises:
        BackendError: for anything else (a dict, a numpy array, a pyarrow table ...).
    """
    module = type(df).__module__.split(".")[0]
    if module in ("pandas", "polars", "cudf", "dask", "dask_cudf"):
        return "dask" if module == "dask_cudf" else module
    if isinstance(df, nw.DataFrame | nw.LazyFrame):
        return backend_of(nw.to_native(df))
    raise BackendError(
        f"expected a pandas, polars, cuDF or Dask dataframe, got {type(df).__module__}.{type(df).__name__}"
    )


def wrap(df: Frame | NwFrame) -> NwFrame:
    """A narwhals view of ``df`` (eager DataFrame, or LazyFrame for Dask); zero-copy."""
    if isinstance(df, nw.DataFrame | nw.LazyFrame):
        return df
    backend = backend_of(df)  # (a clear error for unsupported types)
    if backend == "pandas" and (frame := _unchecked_pandas(df)) is not None:
        return frame
    if backend != "dask":
        return nw.from_native(df)
    with warnings.catch_warnings():
        # narwhals announces that Dask support moves to a plug-in package; it still works
        # in the pinned versions and the message would fire on every call. (Only here: the
        # filter costs as much as the wrap, which an op makes a few times per call.)
        warnings.filterwarnings("ignore", message=".*Dask support is moving.*", category=FutureWarning)
        return nw.from_native(df)


def _unchecked_pandas(df: Frame) -> nw.DataFrame | None:
    """narwhals' wrap of a pandas frame whose column names are unique, without narwhals'
    own check of that (None: leave it to narwhals, which names the duplicates).

    Why: narwhals checks with ``set(df.columns)``, and pandas 3 keeps the labels as Arrow
    strings that Python iterates at ~2 us each: 4.5 ms per wrap of a 2,000-column frame,
    which an op makes two or three times, against ~1 ms for a one-column op by hand.
    ``Index.is_unique`` answers from a C hash table (~0.02 ms; ~0.4 ms for a new index).
    Built the way narwhals builds it, through its compliant frame (not public API): if a
    narwhals release changes that, the plain wrap is used.
    """
    if type(df).__name__ != "DataFrame" or not df.columns.is_unique:  # (pandas' own: wrap checked)
        return None
    try:
        from narwhals._pandas_like.dataframe import PandasLikeDataFrame
        from narwhals._utils import Implementation, Version

        compliant = PandasLikeDataFrame(df, implementation=Implementation.PANDAS, version=Version.MAIN,
                                        validate_column_names=False)
        frame = compliant.to_narwhals()
    except (ImportError, AttributeError, TypeError):
        return None
    return frame if isinstance(frame, nw.DataFrame) else None


def is_lazy(frame: NwFrame) -> bool:
    """True for a lazy frame (Dask, or polars inside a recipe step): results need a ``collect``."""
    return isinstance(frame, nw.LazyFrame)


def collect_small(frame: NwFrame) -> nw.DataFrame:
    """Materialise a small result (an aggregate, a vocabulary) as an eager narwhals frame."""
    return frame.collect() if isinstance(frame, nw.LazyFrame) else frame


def small_rows(frame: NwFrame) -> list[dict[str, Any]]:
    """Rows of a small result (aggregates, vocabularies) as Python dicts, on every backend.

    Goes column-wise through ``to_list`` because cuDF cannot iterate rows. On cuDF each
    column's :func:`series_values` (through Arrow: ints stay ints, nulls None): ``to_dict`` goes
    through ``to_pandas``, which made an integer column with a missing value float64, so a
    vocabulary or group keys came out as ``9.0`` where polars and pandas' ``Int64`` give 9.
    """
    frame = collect_small(frame)
    if backend_of(frame) == "cudf":
        # the whole result in one copy to the host, through Arrow as series_values reads a
        # column (a column at a time was one copy per statistic: 121 for one group-by)
        native = nw.to_native(frame)
        if all(isinstance(c, str) for c in native.columns) and len(set(native.columns)) == len(native.columns):
            return native.to_arrow(preserve_index=False).to_pylist()
        columns = {c: series_values(frame.get_column(c)) for c in frame.columns}
    else:
        columns = frame.to_dict(as_series=False)
    return [dict(zip(columns, row, strict=True)) for row in zip(*columns.values(), strict=True)]


def series_values(series: nw.Series) -> list[Any]:
    """A (small) narwhals Series' values as a Python list: ``to_list``, but a cuDF Series'
    through Arrow. Why: narwhals' ``collect`` of a Dask frame of cuDF partitions (dask-cudf)
    labels the cuDF result as pandas, so its ``to_list`` called cuDF's, which raises
    ("conversion to host memory via the tolist() method" is unsupported)."""
    native = nw.to_native(series)
    if type(native).__module__.split(".")[0] == "cudf":
        return native.to_arrow().to_pylist()
    return series.to_list()


def first_row(frame: NwFrame) -> dict[str, Any]:
    """The single row of an aggregate (``select(mean, max, ...)``) as a dict."""
    return small_rows(frame)[0]


def first_value(frame: NwFrame, column: str) -> nw.Series:
    """The first non-missing value of ``column`` as a series of length 1, or 0 when every
    value is missing: enough to tell what an untyped column holds without reading it all."""
    return collect_small(frame.select(nw.col(column)).drop_nulls().head(1)).get_column(column)


def is_missing(value: Any) -> bool:
    """True for a missing scalar as the backends hand them out: None, NaN, NaT or ``pandas.NA``.

    pandas gives NaN (not None) for a missing group key or vocabulary entry, even in text
    columns, so ``value is None`` alone lets missing values through as if they were data.
    """
    if value is None:
        return True
    try:
        return bool(value != value)  # NaN and NaT are the only values unequal to themselves
    except TypeError:  # pandas.NA has no truth value: it is missing
        return True


def nan_as_null(frame: NwFrame, columns: Iterable[str], *, backend: str | None = None) -> NwFrame:
    """Make NaN in the float ``columns`` missing (null) on polars and cuDF, as pandas treats it.

    polars and cuDF keep NaN as a value distinct from null, so a frame built there directly
    (not read with :func:`gpufeed.datasets.tables.read_table`) would be fitted and
    compared differently from the same data on pandas. Only the named columns change, and
    only those that hold a NaN (one read-only pass finds them), so other columns keep their
    NaN and a frame without NaN is returned as it is. ``backend``: the frame's, when the
    caller already knows it.
    """
    backend = backend or backend_of(frame)
    if backend == "dask":
        return _dask_cudf_nan_as_null(frame, columns)
    if backend not in ("polars", "cudf"):
        return frame
    schema = frame.collect_schema()
    floats = [c for c in dict.fromkeys(columns) if c in schema and schema[c].is_float()]
    if not floats:
        return frame
    if backend == "cudf":
        # One count per column (narwhals' is_nan().any() check built and read back a one-row
        # frame too); narwhals' fill_nan is not implemented for cuDF.
        native = nw.to_native(frame)
        out = cudf_kernels.nans_as_nulls(native, floats)
        return frame if out is native else nw.from_native(out)  # the same frame: apply_rules checks
    if not is_lazy(frame):
        import polars as pl

        # polars' own expressions: through narwhals this check cost ~0.1 ms a call, 15 us
        # here, and a recipe makes it for every op (a 1M-row column's whole op takes ~1 ms).
        row = nw.to_native(frame).select(pl.col(c).is_nan().any() for c in floats).row(0)
        floats = [c for c, nan in zip(floats, row, strict=True) if nan]
    if not floats:
        return frame
    return frame.with_columns(*[nw.col(c).fill_nan(None) for c in floats])


def _dask_cudf_nan_as_null(frame: NwFrame, columns: Iterable[str]) -> NwFrame:
    """A Dask frame of cuDF partitions (dask-cudf) with NaN in its float ``columns`` made
    missing, lazily, partition by partition (cuDF's ``nans_to_nulls``, a no-op on a column
    without NaN); a Dask frame of pandas partitions as it is (NaN is missing there already).

    Why: a cuDF partition keeps NaN as a value (``read_dask`` of Parquet floats holding NaN),
    so Dask's mean, std and counts over it gave NaN where pandas partitions skip it, and
    ``Clip(quantiles=)``'s exact tails (cuDF sorts NaN above every number) were NaN.
    """
    native = nw.to_native(frame)
    if type(getattr(native, "_meta", None)).__module__.split(".")[0] != "cudf":
        return frame
    schema = frame.collect_schema()
    floats = [c for c in dict.fromkeys(columns) if c in schema and schema[c].is_float()]
    if not floats:
        return frame

    return wrap(native.map_partitions(cudf_kernels.nans_as_nulls, floats, meta=native._meta))


def write_back(frame: nw.DataFrame, out: nw.DataFrame) -> nw.DataFrame:
    """An eager polars ``frame`` with the columns of ``out`` (same rows) written over its
    own (or added), each split into ``frame``'s chunks.

    polars rechunks a whole frame, every column copied, before evaluating anything on it
    when its columns are split into chunks of different lengths: at 10M rows one
    ``Categorify`` after the numeric ops took 4.2 s instead of 0.7 s and 1.8 GB more
    memory. A column written as one chunk is split here by zero-copy slices; one in other
    chunks is made one chunk first (a copy of that column only).
    """
    import polars as pl

    native, new = nw.to_native(frame), nw.to_native(out)
    layout = [len(c) for c in native.to_series(0).get_chunks()] if native.width else []
    starts = [sum(layout[:i]) for i in range(len(layout))]
    written = []
    for series in new.get_columns():
        # (a Series of another length goes to with_series as it is, which names it)
        if len(layout) > 1 and len(series) == native.height and [len(c) for c in series.get_chunks()] != layout:
            whole = series.rechunk()
            series = pl.concat([whole.slice(s, n) for s, n in zip(starts, layout, strict=True)], rechunk=False)
        elif len(layout) == 1 and series.n_chunks() > 1:
            series = series.rechunk()
        written.append(series)
    return wrap(with_series(native, written))


def with_series(native: Any, series: Sequence[Any]) -> Any:
    """The eager polars frame ``native`` with each of ``series`` (as many rows) in place of
    its column of that name, or added after its columns: ``with_columns(series)``, without
    the query polars builds and runs for it (~0.13 ms a call for 3 of 20 columns, 10x this;
    all 2,000 of a wide table 12 ms, 4x: a recipe writes back each op's columns, and short
    tables' ops take a few ms)."""
    out = native.clone()  # the columns are shared, not copied
    # The positions by name once: polars' get_column_index took ~0.18 ms a call on a
    # 2,000-column frame (writing all of its columns back: 0.36 s; 2.7 ms so).
    index = {name: i for i, name in enumerate(out.columns)}
    for s in series:
        if len(s) != out.height:  # polars' own error named neither the column nor the cause
            raise TabularError(f"column {s.name!r} came out of an op with {len(s):,} rows where the frame has "
                               f"{out.height:,}: an op must keep every row, in order")
        if s.name in index:
            out.replace_column(index[s.name], s)
        else:
            index[s.name] = len(index)
            out.hstack([s], in_place=True)
    return out


def polars_columns(native: Any, columns: Iterable[str]) -> Any:
    """``columns`` of the eager polars frame ``native`` (each once, in that order), the
    same Series: ``select(columns)`` without its query (0.14 ms a call, 10x this)."""
    return native[list(dict.fromkeys(columns))]


def per_partition(frame: NwFrame, step: Callable[[NwFrame, str], NwFrame]) -> NwFrame:
    """``step(partition, backend)`` on each partition of a Dask frame, lazily, on the
    partitions' own backend (pandas or cuDF), with Dask's metadata from ``step`` on the
    empty partition: the outputs and dtypes are the partitions' backend's. For a step
    whose result for a row depends on that row alone (a hash, a log, a rule): a step run
    on the whole frame computed the graph at transform time."""
    native = nw.to_native(frame)

    def run(part: Any) -> Any:
        return nw.to_native(step(wrap(part), backend_of(part)))

    return wrap(native.map_partitions(run, meta=run(native._meta)))


def columns_of(frame: NwFrame) -> list[str]:
    """Column names, without computing anything on lazy frames."""
    if not is_lazy(frame):  # the names alone: a whole schema of 20 pandas columns cost 80 us, this 4
        return list(frame.columns)
    return list(frame.collect_schema().names())


def free_name(base: str, taken: Iterable[Any]) -> str:
    """``base``, with underscores added until none of the names ``taken`` (a frame's
    columns) is the same: a temporary column never overwrites or collides with a user's."""
    taken = set(taken)
    name = base
    while name in taken:
        name += "_"
    return name


def dtypes_of(frame: NwFrame, columns: Sequence[str]) -> dict[str, Any]:
    """The narwhals dtypes of ``columns``: an eager frame's few columns one by one, else
    from the whole schema. A recipe checks each op's columns: a 20-column pandas frame's
    whole schema cost 80 us a call, a column's dtype 17 us, and one-column ops of 1M rows
    take ~1 ms in all."""
    if not is_lazy(frame) and 4 * len(columns) <= len(frame.columns):
        dtypes = {c: frame.get_column(c).dtype for c in dict.fromkeys(columns)}
    else:
        schema = frame.collect_schema()
        dtypes = {c: schema[c] for c in columns}
    return {c: datetime_dtype(frame, c, t) if t == nw.Unknown else t for c, t in dtypes.items()}


def schema_of(frame: NwFrame) -> nw.Schema:
    """``frame.collect_schema()`` with pandas-like zoned datetime columns that narwhals names
    ``Unknown`` as their ``Datetime(unit, zone)`` (:func:`datetime_dtype`): ops and their
    messages had taken ``datetime64[us, America/New_York]`` for an untyped column (a number
    filled into it failed in pandas' words; errors named its dtype ``Unknown``)."""
    schema = frame.collect_schema()
    if not any(t == nw.Unknown for t in schema.values()):
        return schema
    return nw.Schema({c: datetime_dtype(frame, c, t) if t == nw.Unknown else t for c, t in schema.items()})


def require_columns(frame: NwFrame, columns: Iterable[str], where: str) -> None:
    """Raise :class:`MissingColumnError` naming every absent column and who needed it."""
    present = set(columns_of(frame))
    missing = [c for c in columns if c not in present]
    if missing:
        # A pandas frame made from a numpy array has integer names: sorted() refused them
        # beside text, and "0" was not found without a word on why.
        odd = sorted(str(c) for c in present if not isinstance(c, str))
        hint = (f"; its column names {odd[:20]} are not text: name them as text first "
                "(pandas: df.columns = df.columns.astype(str))") if odd else ""
        raise MissingColumnError(
            f"{where} needs column(s) {missing}, which the table does not have "
            f"(it has: {sorted(present, key=str)[:20]}{' ...' if len(present) > 20 else ''}){hint}"
        )


def repeated(names: Iterable[Any]) -> list[str]:
    """The names that occur more than once in ``names``, as text, sorted, each once: the
    duplicate columns a CSV header, a frame to write or a feature list is refused for."""
    return sorted(str(n) for n, count in Counter(names).items() if count > 1)


def row_count(df: Frame | NwFrame) -> int:
    """Number of rows (computed for Dask)."""
    frame = wrap(df)
    if is_lazy(frame):
        return int(frame.select(nw.len()).collect().item())
    return len(frame)


def to_backend(df: Frame, backend: str) -> Frame:
    """Convert an eager frame to ``backend`` through Arrow, keeping dtypes and missing values.

    NaN in float columns becomes null on polars and cuDF, so "missing" means one thing on
    every backend (pandas treats NaN as missing already).

    Args:
        df: a pandas, polars or cuDF frame.
        backend: ``"pandas" | "polars" | "cudf"`` (``"auto"`` resolves via
            :func:`gpufeed.backends.choose_dataframe_backend`).

    Returns:
        The native frame on ``backend`` (``df`` itself when it already is).

    Example:
        >>> import pandas as pd
        >>> type(to_backend(pd.DataFrame({"a": [1.0]}), "polars")).__name__
        'DataFrame'
    """
    target = choose_dataframe_backend(backend).name
    source = backend_of(df)
    if source == target:
        return df
    if source == "dask":
        raise BackendError("a Dask frame is partitioned; use gpufeed.gpu_transforms.tabular.dask helpers")
    if target == "pandas":
        return df.to_pandas()
    if target == "polars":
        import polars as pl

        # cuDF's to_arrow keeps a non-default index as a column: no backend but pandas has one.
        table = df if source == "pandas" else df.to_arrow(preserve_index=False)
        out = (_from_pandas(df, target, lambda f: pl.from_pandas(f, nan_to_null=True)) if source == "pandas"
               else polars_from_arrow(table))
        return pandas_extensions_as_text(ordered_as_enums(out, table))
    import cudf  # only reached when the user asked for cuDF (or auto found a GPU)

    if source == "pandas":
        return _from_pandas(df, target, lambda f: cudf.from_pandas(f, nan_as_null=True))
    # polars keeps NaN apart from null; cuDF from pandas above turns NaN into null: the same here.
    return cudf.DataFrame.from_arrow(df.fill_nan(None).to_arrow())



def _from_pandas(pdf: Any, target: str, convert: Callable[[Any], Any]) -> Any:
    """``keeping_names(pdf, convert)``; a pandas object column whose values have no one type
    (numbers beside text, from a spreadsheet or a pickle) named in a :class:`MixedTypeError`.

    Arrow, which polars and cuDF convert through, refused such a column in its own words
    ("Could not convert 'a' with type str: tried to convert to int64"), naming no column.
    """
    pdf = _several_zones_as_utc(pdf)
    try:
        return keeping_names(pdf, convert)
    except Exception as exc:
        import pyarrow as pa

        if not isinstance(exc, pa.ArrowException):
            raise
        refused = {}
        for name in pdf.columns:
            if pdf[name].dtype == object:
                try:
                    pa.array(pdf[name], from_pandas=True)
                except pa.ArrowException as why:
                    refused[str(name)] = str(why).split("\n")[0][:120]
        if not refused:
            raise
        raise MixedTypeError(
            f"column(s) {', '.join(map(repr, refused))} cannot be converted to {target}: their values have no one "
            f"type ({refused}); cast them to one type first (text: df[column].astype('string')), or keep the "
            "frame on pandas") from exc


def several_zones(values: Iterable[Any]) -> bool | None:
    """Whether ``values`` (an object column's, missing ones skipped) are time-zone-aware
    datetimes in more than one zone (offsets of one named zone, e.g. EST and EDT, are one
    zone); None when they are not all aware datetimes (or there is none)."""
    import datetime

    zones = set()
    for v in values:
        if is_missing(v):
            continue
        if not isinstance(v, datetime.datetime) or v.tzinfo is None:
            return None
        zones.add(str(v.tzinfo))
    return len(zones) > 1 if zones else None


def _several_zones_as_utc(pdf: Any) -> Any:
    """``pdf`` with its object columns of aware datetimes in several zones (a pickled frame
    of events from several places) as UTC datetimes, as ``pd.to_datetime(..., utc=True)``
    reads them (pandas has no column of several zones); ``pdf`` itself when it has none (a
    look at each object column's first value, a pass only over such columns).

    Why: polars and cuDF (through Arrow) put such a column in the zone of its first value,
    so an instant's text, which ``HashBucket`` hashes, depended on the row order, and
    pandas, hashing each value in its own zone, gave other buckets.
    """
    import datetime

    import numpy as np
    import pandas as pd

    utc = {}
    for i, dtype in enumerate(pdf.dtypes):
        if dtype != np.dtype(object):
            continue
        column = pdf.iloc[:, i]
        first = column.first_valid_index()
        if first is None:
            continue
        value = column.iloc[column.index.get_indexer_for([first])[0]]
        if isinstance(value, datetime.datetime) and value.tzinfo is not None and several_zones(column):
            utc[i] = pd.to_datetime(column, utc=True)
    if not utc:
        return pdf
    out = pdf.copy(deep=False)
    for i, values in utc.items():
        out.isetitem(i, values)
    return out


def pandas_extensions_as_text(frame: Any) -> Any:
    """A polars frame with its columns of pandas' period and interval types (what polars
    makes of a pandas ``period[M]`` or ``interval`` column, from a Parquet, Feather or pickle
    file or ``to_backend``) as their text, as pandas prints them (``2024-01``, ``(0, 1]``)
    and as CSV and JSON hold them; ``frame`` itself when it has none (a schema check).

    polars kept them as an ``Extension`` of their storage: a month was its ordinal (648 for
    2024-01), an interval a ``{left, right}`` struct, which the ops read as numbers or
    structs where pandas has ``Period`` and ``Interval`` values.
    """
    import json

    import polars as pl

    special = {name: dtype for name, dtype in frame.schema.items() if getattr(dtype, "is_extension", lambda: False)()
               and dtype.ext_name() in ("pandas.period", "pandas.interval")}
    if not special:
        return frame
    import numpy as np
    import pandas as pd

    columns = []
    for name, dtype in special.items():
        meta = json.loads(dtype.ext_metadata() or "{}")
        import pyarrow as pa
        import pyarrow.compute as pc

        storage = frame.get_column(name).to_arrow()  # the storage: polars casts no extension type
        if isinstance(storage, pa.ChunkedArray):
            storage = storage.combine_chunks()
        if isinstance(storage.type, pa.ExtensionType):  # pandas' own Arrow types, once pandas registered them
            storage = storage.storage
        present = pc.is_valid(storage).to_numpy(zero_copy_only=False)
        if dtype.ext_name() == "pandas.period":
            ordinals = pc.fill_null(storage, 0).to_numpy(zero_copy_only=False)
            values = pd.arrays.PeriodArray(ordinals, dtype=pd.PeriodDtype(meta.get("freq"))).astype(str)
        else:
            # Made from the present rows only: a gap filled with a number beside times was
            # an object array, which IntervalArray refuses.
            left, right = (pc.struct_field(storage, [i]).to_pandas()[present] for i in (0, 1))
            values = np.full(len(present), None, dtype=object)
            values[present] = np.asarray(pd.arrays.IntervalArray.from_arrays(
                left, right, closed=meta.get("closed", "right")).astype(str), dtype=object)
        text = np.where(present, np.asarray(values, dtype=object), None)
        columns.append(pl.Series(name, text.tolist(), dtype=pl.String))
    return frame.with_columns(columns)


def keeping_names(pdf: Any, convert: Callable[[Any], Any]) -> Any:
    """``convert(pdf)`` (a pandas frame to polars or cuDF) with the frame's column names
    (:func:`to_backend` converts so).

    polars' conversion from pandas names a column called ``""`` ``column_<i>`` when the
    frame also holds text (it goes through Arrow then; beside a real ``column_<i>`` it
    fails), so the same frame kept ``""`` or not depending on its other columns, where
    pandas, Arrow and every file format keep the empty name.
    """
    names = [str(c) for c in pdf.columns]
    if "" not in names:
        return convert(pdf)
    frame = convert(pdf.set_axis([f"__gpufeed_{i}" for i in range(len(names))], axis=1))
    frame.columns = names
    return frame


def polars_from_arrow(table: Any) -> Any:
    """An Arrow table as a polars frame with the table's own column names.

    ``pl.from_arrow`` names a column called ``""`` ``column_0`` (and fails when the table
    also has a ``column_0``), where pandas, pyarrow and polars' own Parquet reader keep the
    empty name: a Feather file read on polars had another column than on pandas.
    """
    import polars as pl

    names = table.column_names
    if "" not in names:
        return pl.from_arrow(table)
    frame = pl.from_arrow(table.rename_columns([f"__gpufeed_{i}" for i in range(len(names))]))
    frame.columns = names
    return frame


def ordered_as_enums(frame: Any, table: Any) -> Any:
    """The polars ``frame`` made from ``table`` (a pandas frame or an Arrow table) with each
    ordered categorical of text (a pandas ``Categorical(ordered=True)``, or one written to
    Parquet or Feather: sizes ``S < M < L``) as an ``Enum`` of its categories in order.

    polars' Categorical has no category order: sorting and comparing went by the text
    (``L < M < S``) on polars while pandas kept the order; an Enum keeps it, and converts
    back to an ordered pandas categorical. ``table`` may hold only the ordered columns
    (``frame`` holds them all).
    """
    import polars as pl

    ordered = {n: c for n, c in _ordered_text_categories(table).items() if n in frame.columns}
    return frame.with_columns(pl.col(n).cast(pl.Enum(c)) for n, c in ordered.items()) if ordered else frame


def _ordered_text_categories(table: Any) -> dict[str, list[str]]:
    """The ordered categorical columns with text categories of a pandas frame or an Arrow
    table, each with its categories in order (an Arrow column's chunks, each with a
    dictionary of its own, in one: the first's order first, as pandas reads a file)."""
    if hasattr(table, "schema"):  # Arrow: ordered dictionary columns
        import pyarrow as pa

        ordered = [f.name for f in table.schema if pa.types.is_dictionary(f.type) and f.type.ordered
                   and (pa.types.is_string(f.type.value_type) or pa.types.is_large_string(f.type.value_type))]
        unified = table.select(ordered).unify_dictionaries() if ordered else None
        return {n: unified.column(n).chunks[0].dictionary.to_pylist() for n in ordered
                if unified.column(n).num_chunks}
    import pandas as pd

    return {str(name): [str(c) for c in dtype.categories] for name, dtype in table.dtypes.items()
            if isinstance(dtype, pd.CategoricalDtype) and dtype.ordered
            and pd.api.types.is_string_dtype(dtype.categories.dtype)}


def time_value(value: Any, dtype: Any, column: str, what: str) -> Any:
    """An ISO 8601 text ``value`` meant for a datetime or date column as a datetime (or a
    date), in the column's time zone; text meant for a duration column as a ``pd.Timedelta``
    (:func:`_duration_value`); any other value as it is. pandas compares and fills
    datetimes with text, polars and cuDF refuse to (or made the column text).

    Text without an offset is a wall-clock time in the column's zone; text with one
    (``"2024-03-10T01:00+00:00"``) is an instant, converted to the column's zone (polars
    refused to compare two zones).

    Args:
        value: the user's value (a cutoff, a fill value, a rule's operand).
        dtype: the column's narwhals dtype.
        column: its name, for the error.
        what: what the value is, for the error (e.g. ``"split_by_time: cutoff"``).

    Raises:
        ValueError: text that is not an ISO date/time, or a wall-clock time that a
            daylight-saving change skips or repeats in the column's zone, naming ``what``
            and the column. ColumnTypeError: text with an offset for a column without a
            time zone.
    """
    if isinstance(value, str) and dtype == nw.Duration:
        return _duration_value(value, column, what)
    if not isinstance(value, str) or dtype not in (nw.Datetime, nw.Date):
        return value
    import pandas as pd

    try:
        stamp = pd.Timestamp(value)  # keeps nanoseconds, which datetime.fromisoformat drops
    except ValueError as exc:
        raise ValueError(f"{what} {value!r} for the datetime column {column!r} is not an ISO date/time") from exc
    if dtype == nw.Date:
        return stamp.date()
    return in_zone(stamp, dtype, column, what, value)


def _duration_value(value: str, column: str, what: str) -> Any:
    """Text meant for a duration column (ISO 8601 ``PT2S``, the text ``write_table`` gives
    durations, or pandas' ``"2s"``, ``"1 day"``) as a ``pd.Timedelta``, exact to the
    nanosecond. pandas compared a duration column with such text; polars refused, in its
    own words ("casting from Duration('us') to String not supported")."""
    import pandas as pd

    try:
        return pd.Timedelta(value)
    except ValueError as exc:
        raise ValueError(f"{what} {value!r} for the duration column {column!r} is not a duration (e.g. "
                         "'PT1.5S', '2s', '1 day')") from exc


def in_zone(stamp: Any, dtype: Any, column: str, what: str, shown: Any) -> Any:
    """A ``pd.Timestamp`` made comparable with the datetime column ``column`` of narwhals
    ``dtype``: a naive one is read as wall-clock time in the column's zone, an aware one
    converted to that zone (the same instant); a naive column takes naive ones only.

    Raises:
        ValueError: a wall-clock time that a daylight-saving change skips or repeats in
            the column's zone. ColumnTypeError: an aware time for a naive column. Both name
            ``what`` (with the user's value, ``shown``), the column and its dtype.
    """
    zone = getattr(dtype, "time_zone", None)
    if stamp.tzinfo is None:
        if not zone:
            return stamp
        try:
            return stamp.tz_localize(zone)
        except Exception as exc:  # pandas 3: ValueError; pandas 2 with pytz: pytz's own errors
            raise ValueError(f"{what} {shown!r} for column {column!r} ({dtype}) is a wall-clock time that "
                             f"does not exist or occurs twice in {zone} (a daylight-saving change): give it "
                             "a UTC offset (e.g. '2024-03-10T07:30+00:00') or a time-zone-aware timestamp") from exc
    if not zone:
        raise ColumnTypeError(f"{what} {shown!r} has a time zone ({stamp.tzinfo}), but column {column!r} ({dtype}) "
                              "has none: pass a time without a zone or offset, or give the column its zone first "
                              "(pandas: dt.tz_localize; polars: dt.replace_time_zone)")
    return stamp.tz_convert(zone)


def datetime_dtype(frame: NwFrame, column: str, dtype: Any) -> Any:
    """``dtype`` (the narwhals dtype of ``column``), or ``Datetime(unit, zone)`` where narwhals
    says ``Unknown`` for a pandas-like (pandas, cuDF, Dask) time-zone-aware column: its
    pattern for pandas' dtype names takes zones of letters and ``/`` only, so
    ``datetime64[us, America/New_York]`` (an underscore) or ``Etc/GMT+5`` came out Unknown,
    and the column's zone was lost to the ops that read it."""
    if dtype != nw.Unknown or backend_of(frame) not in ("pandas", "cudf", "dask"):
        return dtype
    import pandas as pd

    native = nw.to_native(frame).dtypes[column]
    if isinstance(native, pd.DatetimeTZDtype):
        return nw.Datetime(native.unit, str(native.tz))
    return dtype
