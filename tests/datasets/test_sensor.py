"""The sensor table generator: realistic, reproducible, and the same whether written in chunks."""

from __future__ import annotations

import pandas as pd
import pytest

from gpufeed.datasets.sensor import (
    BLOCK_ROWS,
    generate_sensor_table,
    iter_sensor_chunks,
    sensor_schema,
    write_sensor_table,
)


def test_schema_has_95_int_and_float_features_by_default():
    table = generate_sensor_table(1000)
    assert len(sensor_schema()) == 95 and table.shape == (1000, 99)
    kinds = table.dtypes.astype(str).value_counts().to_dict()
    assert kinds["int64"] == 57 and kinds["float64"] == 40  # features + station_id and label
    floats = [c for c, k in sensor_schema() if k != "ratio" and table[c].dtype.kind == "f"]
    assert 0 < table[floats].isna().mean().mean() < 0.03
    assert table["temp_55"].dropna().between(-40, 60).all()


def test_chunked_generation_equals_one_go(tmp_path):
    n = BLOCK_ROWS + 1234
    whole = generate_sensor_table(n, n_features=10, seed=4)
    chunks = pd.concat(list(iter_sensor_chunks(n, BLOCK_ROWS, n_features=10, seed=4)))
    pd.testing.assert_frame_equal(whole, chunks)
    path = write_sensor_table(tmp_path / "s.parquet", n, chunk_rows=1, n_features=10, seed=4)
    pd.testing.assert_frame_equal(pd.read_parquet(path), whole.reset_index(drop=True), check_index_type=False)
    csv = write_sensor_table(tmp_path / "s.csv", 100, n_features=10, seed=4)
    assert len(pd.read_csv(csv)) == 100


def test_seeds_differ_and_bad_arguments_are_rejected(tmp_path):
    a, b = generate_sensor_table(50, n_features=5, seed=1), generate_sensor_table(50, n_features=5, seed=2)
    assert not a.equals(b)
    with pytest.raises(ValueError, match="n_features"):
        sensor_schema(0)
    with pytest.raises(ValueError, match=r"\.parquet or \.csv"):
        write_sensor_table(tmp_path / "s.json", 10)
    assert generate_sensor_table(0, n_features=5).shape == (0, 9)
