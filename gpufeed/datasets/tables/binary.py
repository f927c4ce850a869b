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
from gpufeed.gpu_transforms.tabular.frames import (
    Frame,
    ordered_as_enums,
    pandas_extensions_as_text,
    polars_from_arrow,
)

#: The key write_table stores an HDF5 table under. Not ``"table"``: pandas takes a group
#: with a child named ``table`` for a table of its own, so a file whose only frame was under
#: ``/table`` counted two datasets (``/`` and ``/table``) and ``pd.read_hdf(path)`` asked for a key.
_HDF_KEY = "data"
#: The key earlier versions wrote; still read first after :data:`_HDF_KEY`.
_HDF_OLD_KEY = "table"

#: The unit INT96 timestamps are read in when the file does not say which (Spark, Hive and
#: Impala write none). INT96 holds nanoseconds of a day plus a day number, but Arrow's
#: default reading into nanoseconds since 1970 wraps every value outside 1677-2262 round
#: silently (9999-12-31, the usual "valid to" of warehouse tables, read as 1816-03-29), and
#: polars' saturates them to 2262-04-11. Microseconds hold years 1 to 9999, and are Spark's
#: own precision (and DuckDB's reading of INT96): a Spark file loses nothing. Only a file
#: whose INT96 values carry digits below the microsecond and that names no unit (Impala
#: writes nanoseconds) has those digits truncated, the price of reading its dates right.
_INT96_UNIT = "us"


def _int96_unit(metadata: Any) -> str | None:
    """The unit a Parquet file's INT96 timestamp columns are read in: None when it has none.

    The unit of the Arrow schema the file stores (pyarrow, pandas and polars store it: the
    unit the values were written from, so it holds them all, and reading in it keeps them
    exactly as they were, as polars reads such a file), else :data:`_INT96_UNIT`.

    Args:
        metadata: the file's ``pyarrow.parquet.FileMetaData`` (its footer, already read).
    """
    import pyarrow as pa

    columns = _int96_columns(metadata)
    if not columns:
        return None
    stored = _stored_arrow_schema(metadata.metadata or {})
    units = set()
    for name in columns:
        # A nested INT96 (its path has dots) is not looked up: the default unit holds it.
        index = stored.get_field_index(name) if stored is not None else -1
        kind = stored.field(index).type if index >= 0 else None
        if kind is None or not pa.types.is_timestamp(kind):
            return _INT96_UNIT
        units.add(kind.unit)
    return units.pop() if len(units) == 1 else _INT96_UNIT


def _int96_columns(metadata: Any) -> list[str]:
    """The paths of a Parquet file's INT96 columns (dotted for a nested one)."""
    return [metadata.schema.column(i).path for i in range(metadata.num_columns)
            if metadata.schema.column(i).physical_type == "INT96"]


def _stored_arrow_schema(key_values: dict[bytes, bytes]) -> Any | None:
    """The Arrow schema a Parquet writer stored in the footer (``ARROW:schema``), or None."""
    import base64

    import pyarrow as pa

    blob = key_values.get(b"ARROW:schema")
    if not blob:
        return None
    try:
        return pa.ipc.read_schema(pa.py_buffer(base64.b64decode(blob)))
    except (ValueError, pa.ArrowException):
        return None  # a damaged or foreign entry: as if none (the default unit holds every date)


def _parquet_format(unit: str | None) -> Any:
    """Arrow's Parquet format for a dataset, INT96 timestamps read in ``unit`` (None: Arrow's default)."""
    import pyarrow.dataset as ds

    if unit is None:
        return ds.ParquetFileFormat()
    return ds.ParquetFileFormat(read_options=ds.ParquetReadOptions(coerce_int96_timestamp_unit=unit))


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

    INT96 timestamps (Spark, Hive, Impala) are read in the unit the files store, else in
    microseconds (see :data:`_INT96_UNIT`), so dates outside 1677-2262 stay right.

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
    # The footers are read here once (the fragments keep them for physical_schema below).
    units = {_int96_unit(fragment.metadata) for fragment in plain.get_fragments()} - {None}
    unit = (units.pop() if len(units) == 1 else _INT96_UNIT) if units else None
    parquet = _parquet_format(unit)
    if unit is not None:  # the files' schemas again, with INT96 in that unit (rare: Spark's files)
        plain = ds.dataset(path, format=parquet)
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
    keys = _keys_keeping_their_spelling(factory.inspect(fragments=0), plain.files, path)
    # A key the files also hold (polars' write_parquet(partition_by=...) keeps it in every
    # file, as large_string, while its folder names read as string) is the files' column,
    # with their type; Arrow's discovery refused to merge the two types. The other keys
    # (not in the files) go last, as Spark has them.
    only_keys = [f for f in keys if f.name not in files.names]
    schema = _without_pandas_columns(pa.unify_schemas([files, pa.schema(only_keys)]), {f.name for f in only_keys})
    # The keys' types given, not discovered again: discovery would make "007" the number 7.
    partitioning = ds.partitioning(keys, flavor="hive") if len(keys) else None
    table = ds.dataset(path, format=parquet, partitioning=partitioning, schema=schema).to_table()
    shared = [f.name for f in keys if f.name in files.names]
    if shared:
        # The folder's value wins in the read (as polars has it): a file holding another
        # value for its own folder's key (year=2024/ holding year 1999) is contradictory
        # data, refused rather than silently overwritten.
        held = ds.dataset(path, format=parquet, schema=files).to_table(columns=shared)
        for name in shared:
            if not held[name].cast(table.schema.field(name).type).equals(table[name]):
                raise TabularError(f"{path}: partition key {name!r} is also a column of the files, and some "
                                   "files hold other values than their folder names say; rewrite the dataset")
    return table


def _keys_keeping_their_spelling(keys: Any, files: list[str], path: Path) -> Any:
    """The hive partition keys' schema, a key Arrow typed int32 made text when one of its
    folder names is not the plain spelling of its number (``code=007``, ``code=+5``).

    Arrow (and pandas and polars with it) reads ``code=007/`` and ``code=010/`` as the
    numbers 7 and 10: zero-padded codes written from a text column (zip codes, account
    codes) lost their zeros, silently. Keys whose every folder name is a plain integer
    (``year=2024``, ``month=1``) stay int32.
    """
    import urllib.parse

    import pyarrow as pa

    numbers = {f.name for f in keys if pa.types.is_integer(f.type)}
    if not numbers:
        return keys
    spelled: set[str] = set()
    root = Path(path)
    for file in files:
        for part in Path(file).relative_to(root).parts[:-1]:
            name, eq, value = part.partition("=")
            if not eq or name not in numbers or name in spelled:
                continue
            value = urllib.parse.unquote(value)  # Arrow's hive folders are URI-encoded
            if value != "__HIVE_DEFAULT_PARTITION__" and value != str(int(value)):
                spelled.add(name)
    if not spelled:
        return keys
    return pa.schema([f.with_type(pa.string()) if f.name in spelled else f for f in keys])


def _without_pandas_columns(schema: Any, names: set[str]) -> Any:
    """``schema`` with ``names`` left out of the pandas metadata it stores.

    pandas' ``to_parquet(dir, partition_cols=[...])`` describes the partition columns in
    every file's metadata with their type in the frame, and ``Table.to_pandas()`` casts to
    it: keys written from text (``code=7``) came back as text on pandas and as int32 on
    polars. Their type is the folder names' alone, on every backend.
    """
    import json

    meta = schema.pandas_metadata
    if not meta or not names or not any(c.get("name") in names for c in meta.get("columns", [])):
        return schema
    meta["columns"] = [c for c in meta["columns"] if c.get("name") not in names]
    return schema.with_metadata({**schema.metadata, b"pandas": json.dumps(meta).encode()})


def _read_parquet_arrow(path: Path) -> Any:
    """A Parquet file, or a directory of them (:func:`read_parquet_dataset`), as an Arrow
    table; INT96 timestamps in the unit :func:`_int96_unit` says."""
    import pyarrow.parquet as pq

    if path.is_dir():
        return read_parquet_dataset(path)
    unit = _int96_unit(pq.read_metadata(path))  # the footer only
    return pq.read_table(path, coerce_int96_timestamp_unit=unit) if unit else pq.read_table(path)


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
        return pandas_extensions_as_text(frame)
    named = [c for c in stored if not (c.startswith("__index_level_") and c.endswith("__"))]
    if named:
        import warnings

        warnings.warn(f"gpufeed: {path}: column(s) {named} hold the pandas index stored in the file: not read as "
                      "columns, on any backend (pandas reads them as the frame's index); reset_index() before "
                      "writing keeps them as data", stacklevel=5)
    return pandas_extensions_as_text(frame.drop(stored))


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
    parquet = pq.ParquetFile(path)  # the footer: the stored schema and the column types
    schema = parquet.schema_arrow
    unit = _int96_unit(parquet.metadata)
    int96 = _int96_columns(parquet.metadata) if unit is not None else []
    parquet.close()
    if any("." in c for c in int96):
        # A nested INT96 column: polars' reader would saturate it; Arrow's reads it right.
        table = _read_parquet_arrow(path)
        return _without_pandas_index(ordered_as_enums(polars_from_arrow(table), table), schema, path)
    frame = pl.read_parquet(path)
    if unit is not None:
        # polars reads INT96 in the stored schema's unit, else in nanoseconds, saturating the
        # dates outside 1677-2262 (a Spark file's 9999-12-31 came as 2262-04-11): those
        # columns from Arrow's reader instead, in the unit every backend reads them in.
        fixed = pl.from_arrow(pq.read_table(path, columns=int96, coerce_int96_timestamp_unit=unit))
        frame = frame.with_columns(fixed.get_columns())
    ordered = [f.name for f in schema if getattr(f.type, "ordered", False)]
    if ordered:
        frame = ordered_as_enums(frame, pq.read_table(path, columns=ordered))
    return _without_pandas_index(frame, schema, path)


def _read_parquet_cudf(path: Path, options: ReadOptions, report: ReadReport) -> Frame:
    import cudf
    import pyarrow.parquet as pq

    if path.is_dir():  # the same columns and types as on pandas and polars (see above)
        return cudf.DataFrame.from_arrow(read_parquet_dataset(path))
    if _int96_unit(pq.read_metadata(path)) is not None:
        # INT96 (Spark's files) in the unit the other backends read it in (see _INT96_UNIT).
        return cudf.DataFrame.from_arrow(_read_parquet_arrow(path))
    return cudf.read_parquet(path)


def _write_parquet(df: Frame, path: Path, options: WriteOptions) -> None:
    """pandas and cuDF write alike; no index column."""
    df.to_parquet(path, index=False)


def _write_parquet_polars(df: Frame, path: Path, options: WriteOptions) -> None:
    df.write_parquet(path)


PARQUET = TableFormat(
    "parquet", (".parquet", ".pq", ".parq"),
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
        if not keys:  # h5py's (or another tool's) datasets, which pandas' HDFStore does not read
            arrays = [n._v_pathname for n in store._handle.walk_nodes("/", "Leaf")]
            shown = ", ".join(map(repr, arrays[:10])) + (" ..." if len(arrays) > 10 else "")
            raise TabularError(f"{path}: HDF5 file without a pandas table: it holds "
                               f"{f'{len(arrays)} array(s) ({shown})' if arrays else 'no data'}, written by h5py "
                               "or another tool, not pandas' to_hdf; read them with h5py (h5py.File(path)[name][:]) "
                               "and make the frame from them")
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
    df = _nullable_as_numpy(df)
    bad = {c: str(t) for c, t in df.dtypes.items()
           if isinstance(t, pd.api.extensions.ExtensionDtype) and not isinstance(t, kept)}
    if bad:
        raise TabularError(
            f"{options.shown(path)}: HDF5 cannot store column(s) {bad} (name: dtype), e.g. integers with missing "
            "values; write Parquet or Feather, which keep them, or fill or cast the column(s) first"
        )
    categorical = any(isinstance(t, pd.CategoricalDtype) for t in df.dtypes)
    df.to_hdf(path, key=_HDF_KEY, mode="w", format="table" if categorical else "fixed")


def _nullable_as_numpy(df: pd.DataFrame) -> pd.DataFrame:
    """``df`` with its pandas nullable number and boolean columns (``Int8``..``UInt64``,
    ``Float32``/``Float64``, ``boolean``) that hold no missing value as the numpy dtype of
    the same values, which HDF5 stores; those with a missing value are left to be refused.

    Why: a table read from Parquet on pandas keeps the nullable dtypes its writer had
    (``UInt8`` ids without a gap), and HDF5 refused every such column, full or not.
    """
    masked = [i for i, t in enumerate(df.dtypes) if isinstance(t, pd.api.extensions.ExtensionDtype)
              and t.kind in "iufb" and not isinstance(t, pd.CategoricalDtype | pd.ArrowDtype)
              and not df.iloc[:, i].hasnans]
    if not masked:
        return df
    out = df.copy(deep=False)
    for i in masked:
        column = df.iloc[:, i]
        out.isetitem(i, column.to_numpy(dtype=column.dtype.numpy_dtype))
    return out


HDF5 = TableFormat(
    "hdf5", (".h5", ".hdf5", ".hdf"),
    readers={"pandas": _read_hdf5},
    writers={"pandas": _write_hdf5},
)
