"""A transactions-like table: ids, codes and categories as text, money with gaps, a time.

The sensor table is numeric-heavy with one low-cardinality key. Tables users bring to
"cuDF instead of pandas" are often the other kind: events, logs, transactions, with text
columns from a handful of values up to thousands, a high-cardinality id, integer and
float columns with missing values, and a timestamp. This generator reproduces that
character (20 columns), so a benchmark that only the numeric table passes shows up.

Rows are built in seeded blocks, as in :mod:`gpufeed.datasets.sensor`, so a table
generated in one go equals the same table written chunk by chunk.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pandas as pd

from gpufeed.datasets.chunked import cached_file, iter_block_chunks, write_chunks

#: Bump when the generated values change, so cached tables are rebuilt.
GENERATOR_VERSION = 1
BLOCK_ROWS = 65_536
#: Text columns and their number of distinct values (a Zipf-like share each, as real codes have).
TEXT_COLUMNS = {"channel": 3, "payment_method": 6, "device": 12, "country": 60,
                "merchant_category": 400, "city": 5_000}
#: Distinct customers: the high-cardinality id.
CUSTOMERS = 1_000_000
_START = np.datetime64("2025-01-01T00:00:00", "ns")


def _vocabulary(column: str, n: int) -> np.ndarray:
    return np.array([f"{column[:3]}_{i:05d}" for i in range(n)], dtype=object)


_VOCABULARIES = {c: _vocabulary(c, n) for c, n in TEXT_COLUMNS.items()}


def _zipf_index(rng: np.random.Generator, n: int, size: int) -> np.ndarray:
    # Rank-frequency like real codes: a few very common values and a long tail.
    weights = 1.0 / np.arange(1, n + 1) ** 1.1
    return rng.choice(n, size=size, p=weights / weights.sum())


def _with_missing(rng: np.random.Generator, values: np.ndarray, rate: float) -> np.ndarray:
    values = values.astype(np.float64) if values.dtype.kind in "iu" else values.copy()
    values[rng.random(len(values)) < rate] = np.nan if values.dtype.kind == "f" else None
    return values


def _block(seed: int, index: int, missing_rate: float) -> dict[str, object]:
    rng = np.random.default_rng([seed, index])
    n = BLOCK_ROWS
    first = index * BLOCK_ROWS
    amount = np.round(rng.lognormal(3.5, 1.2, n), 2)
    quantity = rng.integers(1, 20, n)
    data: dict[str, object] = {
        "transaction_id": np.arange(first, first + n, dtype=np.int64),
        "customer_id": np.char.add("C", np.char.zfill(rng.integers(0, CUSTOMERS, n).astype(str), 7)).astype(object),
        "timestamp": _START + (np.arange(first, first + n) * 997_000_000 + rng.integers(0, 997_000_000, n)).astype(
            "timedelta64[ns]"),
    }
    for column, vocab in _VOCABULARIES.items():
        values = vocab[_zipf_index(rng, len(vocab), n)]
        data[column] = _with_missing(rng, values, missing_rate) if column in ("city", "merchant_category") else values
    data |= {
        "amount": _with_missing(rng, amount, missing_rate),
        "discount": _with_missing(rng, np.round(rng.uniform(0, 0.3, n), 3), 3 * missing_rate),
        "balance": _with_missing(rng, np.round(rng.normal(500, 2_000, n), 2), missing_rate),
        "quantity": pd.array(_with_missing(rng, quantity, missing_rate), dtype="Int64"),
        "age": pd.array(_with_missing(rng, rng.integers(18, 91, n), missing_rate), dtype="Int64"),
        "items_in_basket": rng.poisson(3, n).astype(np.int64),
        "account_days": rng.integers(0, 5_000, n).astype(np.int64),
        "risk_score": _with_missing(rng, rng.beta(2, 5, n), missing_rate),
        "session_seconds": _with_missing(rng, np.round(rng.exponential(120, n), 1), missing_rate),
        "is_return": (rng.random(n) < 0.05).astype(np.int64),
        "label": (rng.random(n) < 0.1 + 0.2 * (amount > 150)).astype(np.int64),
    }
    return data


def iter_transaction_chunks(n_rows: int, chunk_rows: int = 1_048_576, *, missing_rate: float = 0.03,
                            seed: int = 0) -> Iterator[pd.DataFrame]:
    """Yield the transactions table as pandas chunks of about ``chunk_rows`` rows.

    Args:
        n_rows: total rows.
        chunk_rows: rows per chunk, rounded up to a multiple of :data:`BLOCK_ROWS`.
        missing_rate: share of missing values in the columns that have gaps (``discount``
            three times as many).
        seed: the same seed gives the same table, whatever the chunking.

    Returns:
        Frames with 20 columns: ``transaction_id``, ``customer_id`` (text, ~1M distinct),
        ``timestamp``, six text columns (``channel``, ``payment_method``, ``device``,
        ``country``, ``merchant_category``, ``city``: 3 to 5,000 distinct values; the last
        two with gaps), float and nullable-int columns with gaps, ``is_return`` and
        ``label`` (0/1).

    Example:
        >>> sum(len(c) for c in iter_transaction_chunks(100_000, 65_536))
        100000
    """
    if not 0.0 <= missing_rate < 1 / 3:
        raise ValueError(f"missing_rate must be in [0, 1/3), got {missing_rate}")
    return iter_block_chunks(n_rows, chunk_rows, BLOCK_ROWS, lambda i: _block(seed, i, missing_rate))


def write_transaction_table(path: str | os.PathLike[str], n_rows: int, *, chunk_rows: int = 1_048_576,
                            **kwargs: object) -> Path:
    """Write the transactions table (``.parquet`` or ``.csv``) chunk by chunk.

    Example:
        >>> write_transaction_table(tmp / "t.parquet", 10_000_000)  # doctest: +SKIP
    """
    return write_chunks(path, iter_transaction_chunks(n_rows, chunk_rows, **kwargs))


def cached_transaction_file(n_rows: int, cache_dir: str | os.PathLike[str] | None = None, *,
                            seed: int = 0) -> Path:
    """The transactions table as Parquet under ``cache_dir``, generated once and reused."""
    return cached_file(f"transactions-{n_rows}-s{seed}-v{GENERATOR_VERSION}.parquet", cache_dir,
                       lambda path: write_transaction_table(path, n_rows, seed=seed))
