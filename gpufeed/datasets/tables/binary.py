"""Binary formats: Parquet and Feather (Arrow, read natively where a backend can), pickle
and HDF5 (pandas only, so other backends go through pandas).

cuDF reads and writes Parquet on the GPU. A Parquet *directory* (a dataset, hive-partitioned
or not) is read as one table with its partition columns (:func:`read_parquet_dataset`).
Feather also covers Arrow IPC files (``.arrow``, ``.ipc``), Feather v1 and Arrow IPC
streams (``.arrows``). HDF5 (needs ``tables``) keeps the table under the key ``"data"``
(so ``pd.read_hdf(path)`` reads it without a key), in pandas' ``table`` layout when a
column is categorical (the default fixed layout cannot store one). Pickle runs code while
loading: read only pickles you wrote yourself.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pandas as pd

from gpufeed.datasets.tables.base import (
    ReadOptions,
    ReadReport,
    TableFormat,
    WriteOptions,
    arrow_to_pandas,
)
from gpufeed.gpu_transforms.tabular.errors import TabularError
from gpufeed.gpu_transforms.tabular.frames import Frame, ordered_as_enums, polars_from_arrow

#: The key write_table stores an HDF5 table under. Not ``"table"``: pandas takes a group
#: with a child named ``table`` for a table of its own, so a file whose only frame was under
#: ``/table`` counted two datasets (``/`` and ``/table``) and ``pd.read_hdf(path)`` asked for a key.
_HDF_KEY = "data"
#: The key earlier versions wrote; still read first after :data:`_HDF_KEY`.
_HDF_OLD_KEY = "table"


def read_parquet_dataset(path: Path) -> Any:
    """A directory of Parquet files (a dataset, as Spark, Hive or ``pyarrow.dataset`` write it)
    as one Arrow table, with the columns of every file and the hive partition columns.

    ``key=value`` folders (``year=2024/month=1/part-0.parquet``) become columns (int32
    when every value is a number that fits, else text, as Arrow infers them); files and folders whose names start with
    ``_`` or ``.`` (Spark's ``_SUCCESS``, ``.crc`` checksums) are skipped, as Spark skips
    them. Files are read in path order. The schema is the union of the files' schemas, so
    a column a later file adds is kept (null in the files without it) instead of dropped,
    which is what a dataset built from the first file's schema alone does.

    A partition key that the files also hold as a column (polars' ``write_parquet(dir,
    partition_by=[...])`` writes it in both places) is read with the files' type, in their
    column order, as ``pl.read_parquet(dir)`` reads it.

    Raises:
        TabularError: no Parquet file in the directory, files that disagree on a column's
            type, or a key whose folder names and file values disagree; each names the
            directory.
    """
    import pyarrow as pa
    import pyarrow.dataset as ds
    import pyarrow.fs as pafs

    # The files first, without their folders' keys: their own schemas, unified.
    plain = ds.dataset(path, format="parquet")
    if not plain.files:
        raise TabularError(f"{path}: the directory holds no Parquet files (files named _* or .* are skipped)")
    try:
        # permissive: int32 in old files and int64 in new ones (or a column all null in some)
        # read as the wider type; text in one file and numbers in another still fail.
        files = pa.unify_schemas([fragment.physical_schema for fragment in plain.get_fragments()],
                                 promote_options="permissive")
    except pa.ArrowTypeError as exc:
        raise TabularError(
            f"{path}: the dataset's files disagree on a column's type ({exc}); rewrite them with one "
            "schema or read the files one by one"
        ) from exc
    # The key=value folders' keys, typed from the folder names alone (no file inspected).
    factory = ds.FileSystemDatasetFactory(
        pafs.LocalFileSystem(), pafs.FileSelector(str(path), recursive=True), ds.ParquetFileFormat(),
        ds.FileSystemFactoryOptions(str(path), partitioning=ds.HivePartitioning.discover()))
    keys = factory.inspect(fragments=0)
    # A key the files also hold (polars' write_parquet(partition_by=...) keeps it in every
    # file, as large_string, while its folder names read as string) is the files' column,
    # with their type; Arrow's discovery refused to merge the two types. The other keys
    # (not in the files) go last, as Spark has them.
    schema = pa.unify_schemas([files, pa.schema([f for f in keys if f.name not in files.names])])
    table = ds.dataset(path, format="parquet", partitioning="hive", schema=schema).to_table()
    shared = [f.name for f in keys if f.name in files.names]
    if shared:
        # The folder's value wins in the read (as polars has it): a file holding another
        # value for its own folder's key (year=2024/ holding year 1999) is contradictory
        # data, refused rather than silently overwritten.
        held = ds.dataset(path, format="parquet", schema=files).to_table(columns=shared)
        for name in shared:
            if not held[name].cast(table.schema.field(name).type).equals(table[name]):
                raise TabularError(f"{path}: partition key {name!r} is also a column of the files, and some "
                                   "files hold other values than their folder names say; rewrite the dataset")
    return table


def _read_parquet_arrow(path: Path) -> Any:
    """A Parquet file, or a directory of them (:func:`read_parquet_dataset`), as an Arrow table."""
    import pyarrow.parquet as pq

    return read_parquet_dataset(path) if path.is_dir() else pq.read_table(path)


def _read_parquet_pandas(path: Path, options: ReadOptions, report: ReadReport) -> Frame:
    return arrow_to_pandas(_read_parquet_arrow(path), path)


def _without_pandas_index(frame: Any, schema: Any, path: Path) -> Any:
    """A polars frame without the columns pandas stored as its index (the rows a filtered
    frame kept, ``__index_level_0__``, or a named index): on pandas they are the frame's
    index, as ``pd.read_parquet`` gives them, so on every backend they are no column and a
    recipe finds the same columns. A named index is announced in one warning line."""
    meta = schema.pandas_metadata or {}
    stored = [c for c in meta.get("index_columns", []) if isinstance(c, str) and c in frame.columns]
    if not stored:
        return frame
    named = [c for c in stored if not (c.startswith("__index_level_") and c.endswith("__"))]
    if named:
        import warnings

        warnings.warn(f"gpufeed: {path}: column(s) {named} hold the pandas index stored in the file: not read as "
                      "columns, on any backend (pandas reads them as the frame's index); reset_index() before "
                      "writing keeps them as data", stacklevel=5)
    return frame.drop(stored)


def _read_parquet_polars(path: Path, options: ReadOptions, report: ReadReport) -> Frame:
    import polars as pl
    import pyarrow.parquet as pq

    # A directory goes through Arrow's dataset reader, as on pandas, so that both backends
    # get the same columns, partition column types and schema union.
    # Ordered categoricals become Enums (see ordered_as_enums), for a file read with
    # polars' reader from the Arrow schema stored in it and its ordered columns' dictionaries.
    if path.is_dir():
        table = read_parquet_dataset(path)
        return _without_pandas_index(ordered_as_enums(polars_from_arrow(table), table), table.schema, path)
    schema = pq.read_schema(path)
    frame = pl.read_parquet(path)
    ordered = [f.name for f in schema if getattr(f.type, "ordered", False)]
    if ordered:
        frame = ordered_as_enums(frame, pq.read_table(path, columns=ordered))
    return _without_pandas_index(frame, schema, path)


def _read_parquet_cudf(path: Path, options: ReadOptions, report: ReadReport) -> Frame:
    import cudf

    if path.is_dir():  # the same columns and types as on pandas and polars (see above)
        return cudf.DataFrame.from_arrow(read_parquet_dataset(path))
    return cudf.read_parquet(path)


def _write_parquet(df: Frame, path: Path, options: WriteOptions) -> None:
    """pandas and cuDF write alike; no index column."""
    df.to_parquet(path, index=False)


def _write_parquet_polars(df: Frame, path: Path, options: WriteOptions) -> None:
    df.write_parquet(path)


PARQUET = TableFormat(
    "parquet", (".parquet", ".pq"),
    readers={"pandas": _read_parquet_pandas, "polars": _read_parquet_polars, "cudf": _read_parquet_cudf},
    writers={"pandas": _write_parquet, "polars": _write_parquet_polars, "cudf": _write_parquet},
    reads_directories=True,
)

#: The suffix of Arrow IPC *stream* files; ``.feather``, ``.arrow`` and ``.ipc`` are IPC files.
_STREAM_SUFFIX = ".arrows"


def _read_arrow_ipc(path: Path) -> Any:
    """An Arrow IPC file (Feather v2, ``.arrow``), a Feather v1 file or an Arrow IPC stream
    (``.arrows``, what streaming writers and ``pa.ipc.new_stream`` produce) as an Arrow table.

    The kind is told by the file's first bytes, not its suffix: streams saved as ``.arrow``
    are common, and ``pyarrow.feather`` reads only the file kinds.
    """
    import pyarrow as pa
    import pyarrow.feather as pf

    with open(path, "rb") as fh:
        magic = fh.read(6)
    if magic == b"ARROW1" or magic[:4] == b"FEA1":
        # pandas writes a categorical's missing values as dictionary index -1 under a null
        # bit; polars' own IPC reader rejects that ("dictionary key must fit in a usize"),
        # while Arrow reads it.
        return pf.read_table(path)
    with pa.memory_map(str(path)) as source:
        return pa.ipc.open_stream(source).read_all()


def _read_feather_pandas(path: Path, options: ReadOptions, report: ReadReport) -> Frame:
    return arrow_to_pandas(_read_arrow_ipc(path), path)


def _read_feather_polars(path: Path, options: ReadOptions, report: ReadReport) -> Frame:

    table = _read_arrow_ipc(path)
    return _without_pandas_index(ordered_as_enums(polars_from_arrow(table), table), table.schema, path)


def _write_feather_pandas(df: Frame, path: Path, options: WriteOptions) -> None:
    if path.name.lower().endswith(_STREAM_SUFFIX):
        import pyarrow as pa

        table = pa.Table.from_pandas(df, preserve_index=False)
        with pa.OSFile(str(path), "wb") as sink, pa.ipc.new_stream(sink, table.schema) as stream:
            stream.write_table(table)
        return
    df.reset_index(drop=True).to_feather(path)


def _write_feather_polars(df: Frame, path: Path, options: WriteOptions) -> None:
    if path.name.lower().endswith(_STREAM_SUFFIX):
        df.write_ipc_stream(path)
    else:
        df.write_ipc(path)


FEATHER = TableFormat(
    "feather", (".feather", ".arrow", ".ipc", _STREAM_SUFFIX),
    readers={"pandas": _read_feather_pandas, "polars": _read_feather_polars},
    writers={"pandas": _write_feather_pandas, "polars": _write_feather_polars},
)


def _read_pickle(path: Path, options: ReadOptions, report: ReadReport) -> Frame:
    """A pickled pandas frame; a pickled Series is a one-column table."""
    return _as_frame(pd.read_pickle(path), path)


def _as_frame(held: Any, path: Path) -> pd.DataFrame:
    """A stored pandas object as a table: a DataFrame as it is, a Series as one column."""
    if isinstance(held, pd.Series):
        return held.to_frame(name=held.name if held.name is not None else "value")
    if not isinstance(held, pd.DataFrame):
        raise TabularError(f"{path}: the file holds a {type(held).__module__}.{type(held).__name__}, "
                           "not a pandas DataFrame or Series")
    return held


def _write_pickle(df: Frame, path: Path, options: WriteOptions) -> None:
    df.to_pickle(path)


PICKLE = TableFormat(
    "pickle", (".pkl", ".pickle"),
    readers={"pandas": _read_pickle},
    writers={"pandas": _write_pickle},
)


def _read_hdf5(path: Path, options: ReadOptions, report: ReadReport) -> Frame:
    """The table under the key ``"data"`` (what :func:`write_table` writes) or ``"table"``
    (what it wrote before), or the file's only table whatever its key (``to_hdf(path,
    key="df")``, as ``pd.read_hdf`` reads it)."""
    with pd.HDFStore(path, mode="r") as store:
        keys = _hdf_tables(store)
        key = next((k for k in (_HDF_KEY, _HDF_OLD_KEY) if k in keys), keys[0] if len(keys) == 1 else None)
        if key is not None:
            return _as_frame(store.select(key), path)
    held = ", ".join(map(repr, keys[:10])) + (" ..." if len(keys) > 10 else "") if keys else "none"
    raise TabularError(f"{path}: HDF5 file without a {_HDF_KEY!r} (or {_HDF_OLD_KEY!r}) table and with "
                       f"{len(keys)} other tables (keys: {held}); read_table reads one table per file: "
                       "read the one you want with pd.read_hdf(path, key) and pass the frame on")


def _hdf_tables(store: pd.HDFStore) -> list[str]:
    """The keys of the frames and series in an HDF5 store, as ``pd.read_hdf`` counts them.

    ``store.keys()`` also lists the root beside a key named ``"table"`` (see :data:`_HDF_KEY`)
    and the groups under ``<key>/meta/`` where the ``table`` layout keeps a categorical's
    categories: neither is a table, and with them a file holding one frame seemed to hold several.
    """
    keys = [k.lstrip("/") for k in store if k.lstrip("/")]
    return [k for k in keys if not any(k.startswith(f"{held}/meta/") for held in keys)]


def _write_hdf5(df: Frame, path: Path, options: WriteOptions) -> None:
    # pandas' HDFStore stores numpy dtypes, categoricals, zoned datetimes and text only; it
    # refused the others (nullable integers from a table with missing ids, booleans with
    # missing values) with a NotImplementedError naming no column.
    kept = (pd.CategoricalDtype, pd.DatetimeTZDtype, pd.StringDtype)
    bad = {c: str(t) for c, t in df.dtypes.items()
           if isinstance(t, pd.api.extensions.ExtensionDtype) and not isinstance(t, kept)}
    if bad:
        raise TabularError(
            f"{path}: HDF5 cannot store column(s) {bad} (name: dtype), e.g. integers with missing "
            "values; write Parquet or Feather, which keep them, or fill or cast the column(s) first"
        )
    categorical = any(isinstance(t, pd.CategoricalDtype) for t in df.dtypes)
    df.to_hdf(path, key=_HDF_KEY, mode="w", format="table" if categorical else "fixed")


HDF5 = TableFormat(
    "hdf5", (".h5", ".hdf5", ".hdf"),
    readers={"pandas": _read_hdf5},
    writers={"pandas": _write_hdf5},
)
