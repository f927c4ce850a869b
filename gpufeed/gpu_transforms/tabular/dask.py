"""Scale-out: the same recipes and rules on Dask dataframes (dask-cudf on GPUs).

Nothing here re-implements an op: :class:`~gpufeed.gpu_transforms.tabular.recipe.Recipe`
and :func:`~gpufeed.gpu_transforms.tabular.rules.apply_rules` accept Dask frames directly
(through narwhals). Statistics are reduced across partitions exactly for mean, std, min,
max, counts and vocabularies (one global vocabulary, not one per partition); quantiles and
medians are Dask's approximate ones. This module adds the edges: turning a table or files
into partitions, and a local cluster for machines without a scheduler.
"""

from __future__ import annotations

import os
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from typing import Any

from gpufeed.backends import choose_dataframe_backend
from gpufeed.gpu_transforms.tabular.errors import BackendError, UnknownFormatError
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


def read_dask(paths: str | os.PathLike[str] | Sequence[str], *, backend: str = "auto",
              blocksize: str | None = "256MiB") -> Any:
    """Read Parquet or CSV files lazily into partitions, with cuDF partitions on a GPU.

    Args:
        paths: a file, a glob (``"data/*.parquet"``) or a list of files.
        backend: ``"auto"`` uses dask-cudf when cuDF and a GPU exist, else pandas partitions.
        blocksize: CSV bytes per partition.

    Returns:
        A lazy ``dask.dataframe.DataFrame``.
    """
    import dask
    import dask.dataframe as dd

    name = choose_dataframe_backend(backend).name
    target = "cudf" if name == "cudf" else "pandas"
    if target == "cudf":
        _require_dask_cudf()
    if isinstance(paths, list | tuple) and not paths:
        raise ValueError("paths is an empty list: give a file, a glob or a list of files")
    first = os.fspath(paths[0] if isinstance(paths, list | tuple) else paths)
    with dask.config.set({"dataframe.backend": target}):
        if first.lower().endswith((".parquet", ".pq")) or os.path.isdir(first):
            return dd.read_parquet(paths)
        if first.lower().endswith((".csv", ".csv.gz")):
            return dd.read_csv(paths, blocksize=blocksize)
    raise UnknownFormatError(f"{first}: read_dask reads Parquet or CSV files")


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
