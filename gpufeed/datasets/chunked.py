"""Writing generated tables chunk by chunk, and caching them, for every table generator."""

from __future__ import annotations

import os
from collections.abc import Callable, Iterable, Iterator
from pathlib import Path
from typing import Any

import pandas as pd

from gpufeed.datasets.cache import cache_dir as default_cache_dir


def iter_block_chunks(n_rows: int, chunk_rows: int, block_rows: int,
                      block: Callable[[int], dict[str, Any]]) -> Iterator[pd.DataFrame]:
    """Frames of about ``chunk_rows`` rows built from fixed blocks of ``block_rows`` rows,
    ``block(i)`` giving block ``i``'s columns: each block is seeded by its index alone, so
    the table is the same whatever the chunking. ``chunk_rows`` is rounded up to whole
    blocks; the index counts rows from the start of the table."""
    if n_rows < 0 or chunk_rows < 1:
        raise ValueError(f"n_rows must be >= 0 and chunk_rows >= 1, got {n_rows}, {chunk_rows}")
    blocks_per_chunk = max(1, -(-chunk_rows // block_rows))
    n_blocks = -(-n_rows // block_rows)
    for first in range(0, n_blocks, blocks_per_chunk):
        parts = [block(i) for i in range(first, min(n_blocks, first + blocks_per_chunk))]
        take = min(n_rows - first * block_rows, len(parts) * block_rows)
        # Series concatenation keeps pandas' extension dtypes (nullable ints) as they are.
        frame = pd.DataFrame({k: pd.concat([pd.Series(p[k]) for p in parts], ignore_index=True)[:take]
                              for k in parts[0]})
        frame.index = pd.RangeIndex(first * block_rows, first * block_rows + take)
        yield frame


def write_chunks(path: str | os.PathLike[str], chunks: Iterable[pd.DataFrame]) -> Path:
    """Write pandas ``chunks`` to one ``.parquet`` (a row group each) or ``.csv`` file,
    never holding more than one chunk in memory; a crash leaves no truncated file behind.

    Returns:
        ``path`` as a :class:`~pathlib.Path`.
    """
    import pyarrow as pa
    import pyarrow.parquet as pq

    out = Path(path)
    suffix = out.suffix.lower()
    if suffix not in (".parquet", ".csv"):
        raise ValueError(f"tables are written chunk by chunk as .parquet or .csv, got {out.name!r}")
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = out.with_name(out.name + ".partial")
    writer = None
    try:
        for i, chunk in enumerate(chunks):
            if suffix == ".csv":
                chunk.to_csv(tmp, mode="w" if i == 0 else "a", header=i == 0, index=False)
                continue
            table = pa.Table.from_pandas(chunk, preserve_index=False)
            if writer is None:
                writer = pq.ParquetWriter(tmp, table.schema)
            writer.write_table(table)
    finally:
        if writer is not None:
            writer.close()
    tmp.replace(out)
    return out


def cached_file(name: str, cache_dir: str | os.PathLike[str] | None, write: Callable[[Path], object]) -> Path:
    """``cache_dir / name`` (default: the kit's cache folder's ``tables``,
    :func:`gpufeed.datasets.cache.cache_dir`), written by ``write(path)`` the first time and
    reused after."""
    root = Path(cache_dir) if cache_dir else default_cache_dir("tables")
    path = root / name
    if not path.exists():
        write(path)
    return path
