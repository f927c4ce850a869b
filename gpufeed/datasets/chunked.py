"""Writing generated tables chunk by chunk, and caching them, for every table generator."""

from __future__ import annotations

import os
from collections.abc import Callable, Iterable
from pathlib import Path

import pandas as pd


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
    """``cache_dir / name`` (default ``$GPUFEED_DATA`` or ``~/.cache/gpufeed/tables``),
    written by ``write(path)`` the first time and reused after."""
    root = Path(cache_dir or os.environ.get("GPUFEED_DATA") or Path.home() / ".cache" / "gpufeed" / "tables")
    path = root / name
    if not path.exists():
        write(path)
    return path
