"""The benchmark's baseline computes what the kit computes (no timing here)."""

from __future__ import annotations

import numpy as np

from gpufeed.bench.formats import recommend
from gpufeed.bench.tabular import (
    _rule_pandas,
    _rule_row,
    bench_recipe,
    bench_rule,
    pandas_recipe,
    sensor_columns,
)
from gpufeed.datasets.sensor import generate_sensor_table
from gpufeed.gpu_transforms.tabular import apply_rules, apply_rules_rowwise, to_backend


def test_pandas_baseline_recipe_equals_the_kit_recipe_on_pandas_and_polars():
    table = generate_sensor_table(3000, seed=9)
    baseline = pandas_recipe(table)
    for backend in ("pandas", "polars"):
        kit = bench_recipe().fit_transform(to_backend(table, backend))
        kit = kit.to_pandas() if backend == "polars" else kit
        for c in table.columns:
            if c == "timestamp":
                continue
            np.testing.assert_allclose(kit[c].to_numpy(float), baseline[c].to_numpy(float), rtol=1e-9,
                                       atol=1e-9, err_msg=f"{backend} {c}")


def test_every_rule_variant_gives_the_same_weights():
    table = generate_sensor_table(5000, seed=2)
    cols = sensor_columns()
    loop = [_rule_row(r, v, t) for r, v, t in zip(table["region"], table[cols["volt"]], table[cols["temp"]],
                                                  strict=True)]
    assert loop == apply_rules_rowwise(table, [bench_rule()])["weight"]
    assert loop == _rule_pandas(table).tolist()
    assert loop == apply_rules(to_backend(table, "polars"), [bench_rule()])["weight"].to_list()
    assert len(set(loop)) == 4


def test_recommendation_prefers_portable_formats_and_flags_losers():
    rows = [
        {"format": "csv", "read_x": 1.0, "write_x": 1.0, "size_x": 1.0, "round_trip_equal": True, "dtypes_kept": True},
        {"format": "parquet", "read_x": 5.0, "write_x": 10.0, "size_x": 0.6, "round_trip_equal": True,
         "dtypes_kept": True},
        {"format": "pickle", "read_x": 30.0, "write_x": 100.0, "size_x": 1.1, "round_trip_equal": True,
         "dtypes_kept": True},
        {"format": "json", "read_x": 0.2, "write_x": 1.2, "size_x": 2.5, "round_trip_equal": True,
         "dtypes_kept": False},
    ]
    text = recommend(rows)
    assert "All-round: parquet" in text and "Fastest read: pickle" in text and "larger than CSV: json" in text
