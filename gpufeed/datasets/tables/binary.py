"""Binary formats: Parquet and Feather (Arrow, read natively where a backend can), pickle
and HDF5 (pandas only, so other backends go through pandas).

cuDF reads and writes Parquet on the GPU. HDF5 (needs ``tables``) keeps the table under
the key ``"table"``, in pandas' ``table`` layout when a column is categorical (the default
fixed layout cannot store one). Pickle runs code while loading: read only pickles you
wrote yourself.
"""

from __future__ import annotations

from pathlib import Path

import pandas as pd

from gpufeed.datasets.tables.base import ReadOptions, ReadReport, TableFormat, WriteOptions
from gpufeed.gpu_transforms.tabular.errors import TabularError
from gpufeed.gpu_transforms.tabular.frames import Frame

_HDF_KEY = "table"


def _read_parquet_pandas(path: Path, options: ReadOptions, report: ReadReport) -> Frame:
    return pd.read_parquet(path)


def _read_parquet_polars(path: Path, options: ReadOptions, report: ReadReport) -> Frame:
    import polars as pl

    return pl.read_parquet(path)


def _read_parquet_cudf(path: Path, options: ReadOptions, report: ReadReport) -> Frame:
    import cudf

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
)


def _read_feather_pandas(path: Path, options: ReadOptions, report: ReadReport) -> Frame:
    return pd.read_feather(path)


def _read_feather_polars(path: Path, options: ReadOptions, report: ReadReport) -> Frame:
    import polars as pl
    import pyarrow.feather as pf

    # pandas writes a categorical's missing values as dictionary index -1 under a null bit;
    # polars' own IPC reader rejects that ("dictionary key must fit in a usize"), while
    # Arrow reads it and polars takes Arrow's table as is.
    return pl.from_arrow(pf.read_table(path))


def _write_feather_pandas(df: Frame, path: Path, options: WriteOptions) -> None:
    df.reset_index(drop=True).to_feather(path)


def _write_feather_polars(df: Frame, path: Path, options: WriteOptions) -> None:
    df.write_ipc(path)


FEATHER = TableFormat(
    "feather", (".feather", ".arrow", ".ipc"),
    readers={"pandas": _read_feather_pandas, "polars": _read_feather_polars},
    writers={"pandas": _write_feather_pandas, "polars": _write_feather_polars},
)


def _read_pickle(path: Path, options: ReadOptions, report: ReadReport) -> Frame:
    return pd.read_pickle(path)


def _write_pickle(df: Frame, path: Path, options: WriteOptions) -> None:
    df.to_pickle(path)


PICKLE = TableFormat(
    "pickle", (".pkl", ".pickle"),
    readers={"pandas": _read_pickle},
    writers={"pandas": _write_pickle},
)


def _read_hdf5(path: Path, options: ReadOptions, report: ReadReport) -> Frame:
    return pd.read_hdf(path, key=_HDF_KEY)


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
