"""The transactions table: the text-heavy, gappy shape the sensor table lacks."""

from __future__ import annotations

import pandas as pd
import pyarrow.parquet as pq

from gpufeed.datasets.transactions import (
    TEXT_COLUMNS,
    iter_transaction_chunks,
    write_transaction_table,
)


def test_chunking_does_not_change_the_table():
    whole = next(iter_transaction_chunks(150_000, 150_000, seed=3))
    chunked = pd.concat(list(iter_transaction_chunks(150_000, 65_536, seed=3)))
    pd.testing.assert_frame_equal(whole, chunked)


def test_it_has_the_character_the_benchmark_needs():
    df = next(iter_transaction_chunks(200_000, seed=0))
    assert df.shape == (200_000, 20)
    for column, n in TEXT_COLUMNS.items():  # every value of each vocabulary is reachable
        assert df[column].nunique() >= min(n, 0.6 * n), column
    assert df["customer_id"].nunique() > 150_000  # the high-cardinality id
    gaps = df.isna().mean()
    assert 0.02 < gaps["amount"] < 0.04 and 0.02 < gaps["city"] < 0.04 and gaps["channel"] == 0
    assert str(df["age"].dtype) == "Int64" and df["timestamp"].is_monotonic_increasing


def test_the_parquet_file_reads_back_with_pyarrow(tmp_path):
    path = write_transaction_table(tmp_path / "t.parquet", 70_000, chunk_rows=65_536)
    table = pq.read_table(path)
    assert table.num_rows == 70_000 and table.num_columns == 20
    assert pq.ParquetFile(path).num_row_groups == 2
