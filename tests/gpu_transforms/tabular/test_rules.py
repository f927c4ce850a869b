"""Declarative rules: the vectorised result equals the for-loop reference on every backend."""

from __future__ import annotations

import json
import math

import numpy as np
import pandas as pd
import polars as pl
import pytest

from gpufeed.gpu_transforms.tabular import (
    MissingColumnError,
    Rule,
    apply_rules,
    apply_rules_rowwise,
    col,
    to_backend,
)
from gpufeed.gpu_transforms.tabular.dask import to_dask
from gpufeed.gpu_transforms.tabular.rules import cond_from_dict


@pytest.fixture(scope="module")
def table() -> pd.DataFrame:
    rng = np.random.default_rng(5)
    n = 3000
    power = rng.uniform(-20, 150, n)
    power[rng.random(n) < 0.05] = np.nan  # missing values must behave like in a loop
    return pd.DataFrame({"region": rng.choice(["north", "south", "east", "west"], n), "power": power,
                         "band": rng.integers(0, 5, n)})


RULES = [
    Rule("weight", [
        (col("region").isin(["north", "east"]) & col("power").between(0, 50), 0.5),
        (~(col("power") > 10) | (col("band") == 4), 2.0),
        (col("region") != "west", 1.5),
    ], default=1.0),
    Rule("tier", [(col("power") >= 100, "high"), (col("power") < 0, "neg")], default="mid"),
]


def _loop_reference(df: pd.DataFrame) -> list[float]:
    """How a user writes the rule as a loop (NaN compares False)."""
    out = []
    for region, power, band in zip(df["region"], df["power"], df["band"], strict=True):
        if region in ("north", "east") and 0 <= power <= 50:
            out.append(0.5)
        elif not (power > 10) or band == 4:
            out.append(2.0)
        elif region != "west":
            out.append(1.5)
        else:
            out.append(1.0)
    return out


@pytest.mark.parametrize("backend", ["pandas", "polars", "dask"])
def test_vectorised_rules_equal_the_row_by_row_reference(table, backend):
    frame = to_dask(table, 3) if backend == "dask" else to_backend(table, backend)
    out = apply_rules(frame, RULES)
    out = out.compute() if backend == "dask" else out
    ref = apply_rules_rowwise(table, RULES)
    assert ref["weight"] == _loop_reference(table)
    assert np.asarray(out["weight"]).tolist() == ref["weight"]
    assert list(np.asarray(out["tier"])) == ref["tier"]
    assert len(set(ref["weight"])) == 4  # every case is exercised


def test_rules_keep_rows_and_add_columns(table):
    out = apply_rules(table, RULES)
    assert len(out) == len(table) and list(out.columns) == [*table.columns, "weight", "tier"]


def test_rules_round_trip_through_json(table):
    restored = [Rule.from_dict(json.loads(json.dumps(r.to_dict()))) for r in RULES]
    assert apply_rules_rowwise(table, restored) == apply_rules_rowwise(table, RULES)


def test_missing_column_names_the_rule(table):
    rule = Rule("w", [(col("voltage") > 3, 1.0)], default=0.0)
    with pytest.raises(MissingColumnError, match=r"rule 'w' needs column\(s\) \['voltage'\]"):
        apply_rules(table, [rule])


def test_malformed_rules_are_rejected():
    with pytest.raises(ValueError, match="at least one"):
        Rule("w", [])
    with pytest.raises(TypeError, match="each case is"):
        Rule("w", [("power > 3", 1.0)])
    with pytest.raises(ValueError, match="unknown comparison"):
        cond_from_dict({"compare": "~=", "column": "a", "value": 1})


@pytest.mark.parametrize("backend", ["pandas", "polars", "polars-nan"])
def test_missing_values_match_no_comparison_not_even_not_equal(backend):
    df = pd.DataFrame({"x": [1.0, np.nan, 2.0], "s": ["a", None, "b"]})
    frame = pl.from_pandas(df, nan_to_null=False) if backend == "polars-nan" else to_backend(df, backend)
    rules = [Rule("ne", [(col("x") != 1.0, 1)], default=0), Rule("sne", [(col("s") != "a", 1)], default=0),
             Rule("gap", [(col("x").is_missing() | col("s").is_missing(), 1)], default=0)]
    out = apply_rules(frame, rules)
    assert list(out["ne"]) == list(out["sne"]) == [0, 0, 1]
    assert list(out["gap"]) == [0, 1, 0]
    assert apply_rules_rowwise(df, rules) == {"ne": [0, 0, 1], "sne": [0, 0, 1], "gap": [0, 1, 0]}
    if backend == "polars-nan":  # the frame's own columns come back as they were
        assert math.isnan(out["x"][1])


def test_python_and_or_and_chained_comparisons_are_refused():
    with pytest.raises(TypeError, match="no truth value"):
        Rule("z", [(col("x") > 1 and col("n") > 1, 1)])
    with pytest.raises(TypeError, match="no truth value"):
        Rule("z", [(0 < col("x") < 3, 1)])


def test_missing_values_in_comparisons_or_isin_lists_are_refused():
    with pytest.raises(ValueError, match="is_missing"):
        col("s").isin(["a", None])
    with pytest.raises(ValueError, match="is_missing"):
        col("x") == np.nan  # noqa: B015
    with pytest.raises(TypeError, match="list of values"):
        col("s").isin("abc")


def test_is_missing_round_trips_through_json():
    rule = Rule("gap", [(col("x").is_missing(), 1)], default=0)
    assert Rule.from_dict(json.loads(json.dumps(rule.to_dict()))) == rule


def test_rules_on_a_lazy_polars_frame_keep_its_columns():
    lazy = pl.LazyFrame({"x": [1.0, float("nan"), 3.0]})
    out = apply_rules(lazy, [Rule("f", [(col("x") != 1.0, 1)], default=0)]).collect()
    assert out["f"].to_list() == [0, 0, 1] and math.isnan(out["x"][1]) and out.columns == ["x", "f"]


@pytest.mark.parametrize("text", ["object", "str"])
def test_pandas_masks_on_nullable_text_and_datetime_columns_equal_the_reference_and_polars(text):
    # The pandas path builds numpy masks itself: every dtype family must treat missing
    # values as the reference does (no match, `!=` included).
    df = pd.DataFrame({
        "n": pd.array([1, None, 3, 4, None, 6], dtype="Int64"),
        "s": pd.Series(["a", None, "b", "c", "a", None], dtype=text),
        "t": pd.to_datetime(["2025-01-01", None, "2025-03-01", "2025-01-05", "2025-02-01", None]),
        "f": [0.5, np.nan, 2.0, -1.0, np.nan, 3.0],
    })
    rules = [
        Rule("a", [(col("n") != 3, 1), (col("s") != "b", 2), (col("t") > pd.Timestamp("2025-01-02"), 3)], default=0),
        Rule("b", [(col("s").isin(["a", "c"]) & (col("f") != 2.0), 1), (~(col("n") >= 4), 2),
                   (col("t") != pd.Timestamp("2025-01-01"), 3), (col("f").is_missing(), 4)], default=0),
    ]
    ref = apply_rules_rowwise(df, rules)
    out = apply_rules(df, rules)
    polars = apply_rules(to_backend(df, "polars"), rules)
    for r in ("a", "b"):
        assert out[r].tolist() == ref[r] == polars[r].to_list(), r


def test_integer_rule_outputs_are_int64_on_every_backend():
    # A weight or label rule over a real table (sleep hours, diet): pandas' np.select gave
    # int64 and polars' integer literals Int32, so the same rule typed its column differently.
    df = pd.DataFrame({"sleep_total": [12.1, 17.0, 14.4, 19.9], "vore": ["carni", "omni", None, "herbi"]})
    rule = Rule("w", [(col("sleep_total") > 15, 2), (col("vore") == "herbi", 3)], default=0)
    want = [0, 2, 0, 2]
    out = apply_rules(df, [rule])
    assert out["w"].dtype == np.int64 and out["w"].tolist() == want
    for frame in (to_backend(df, "polars"), to_backend(df, "polars").lazy()):
        got = apply_rules(frame, [rule])
        got = got.collect() if isinstance(got, pl.LazyFrame) else got
        assert got.schema["w"] == pl.Int64 and got["w"].to_list() == want
    assert apply_rules(to_dask(df, npartitions=2), [rule]).compute()["w"].tolist() == want


@pytest.mark.parametrize(("values", "pandas_type", "polars_type"), [
    ((2, 3), "Int64", pl.Int64), ((2.5, 3.0), "float64", pl.Float64), ((2, 2.5), "float64", pl.Float64),
    ((True, False), "boolean", pl.Boolean), (("a", "b"), "str", pl.String),
])
def test_a_rule_without_default_is_missing_where_no_case_holds_in_one_type_per_backend(values, pandas_type,
                                                                                         polars_type):
    """default=None: pandas gave an object column and polars Int32 for the same rule."""
    df = pd.DataFrame({"a": [1.0, 2.0, None, 9.0]})
    rule = Rule("w", [(col("a") > 5, values[1]), (col("a") > 1, values[0])])
    want = [None, values[0], None, values[1]]
    out = apply_rules(df, [rule])["w"]
    assert str(out.dtype) == pandas_type
    assert [None if pd.isna(v) else v for v in out.tolist()] == want
    for frame in (to_backend(df, "polars"), to_backend(df, "polars").lazy()):
        got = apply_rules(frame, [rule])
        got = got.collect() if isinstance(got, pl.LazyFrame) else got
        assert got.schema["w"] == polars_type and got["w"].to_list() == want
    assert [None if pd.isna(v) else v for v in apply_rules(to_dask(df, npartitions=2), [rule]).compute()["w"]] == want


@pytest.mark.parametrize("backend", ["pandas", "polars"])
def test_iso_text_compares_with_datetime_and_date_columns_on_every_backend(backend):
    df = pd.DataFrame({"t": pd.to_datetime(["2024-01-01 08:00", "2024-03-01 00:00", None]),
                       "z": pd.to_datetime(["2024-01-01", "2024-03-01", "2024-05-01"]).tz_localize("UTC")})
    frame = to_backend(df, backend)
    if backend == "polars":  # a date column too, which pandas does not have
        frame = frame.with_columns(day=pl.col("t").dt.date())
    rule = Rule("late", [(col("t") >= "2024-02-01", 1), (col("t").isin(["2024-01-01 08:00"]), 2)], default=0)
    zoned = Rule("spring", [(col("z").between("2024-02-01", "2024-04-01"), 1)], default=0)
    out = apply_rules(frame, [rule, zoned])
    assert list(out["late"]) == [2, 1, 0] and list(out["spring"]) == [0, 1, 0]
    assert apply_rules_rowwise(frame, [rule])["late"] == [2, 1, 0]
    if backend == "polars":
        assert list(apply_rules(frame, [Rule("d", [(col("day") < "2024-02-01", 1)], default=0)])["d"]) == [1, 0, 0]
    with pytest.raises(ValueError, match=r"col\('t'\) >= 'soon' for the datetime column 't' is not an ISO"):
        apply_rules(frame, [Rule("x", [(col("t") >= "soon", 1)], default=0)])
