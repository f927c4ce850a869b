"""Declarative rules: the vectorised result equals the for-loop reference on every backend."""

from __future__ import annotations

import json
import math

import numpy as np
import pandas as pd
import polars as pl
import pytest

from gpufeed.gpu_transforms.tabular import (
    ColumnTypeError,
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
    # Text: pandas' default text dtype, "str" on pandas 3, "object" on pandas 2 (the only
    # pandas on Python 3.10).
    ((True, False), "boolean", pl.Boolean), (("a", "b"), str(pd.Series(["a"]).dtype), pl.String),
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


def test_a_boolean_rule_beside_an_integer_rule_leaves_its_type_alone():
    """A rule with True/False values and a default sent every rule of the call through
    narwhals' case-when on pandas, which made an integer rule without a default an object
    column instead of Int64 (and a boolean one without a default object, not boolean)."""
    df = pd.DataFrame({"a": [1.0, 2.0, None, 9.0]})
    rules = [Rule("n", [(col("a") > 5, 2), (col("a") > 1, 3)]), Rule("b", [(col("a") > 5, True)], default=False),
             Rule("m", [(col("a") > 5, True), (col("a") < 2, False)])]
    out = apply_rules(df, rules)
    assert list(out.columns) == ["a", "n", "b", "m"]
    assert str(out["n"].dtype) == "Int64" and out["n"].tolist() == [pd.NA, 3, pd.NA, 2]
    assert out["b"].dtype == bool and out["b"].tolist() == [False, False, False, True]
    assert str(out["m"].dtype) == "boolean" and out["m"].tolist() == [False, pd.NA, pd.NA, True]
    polars = apply_rules(to_backend(df, "polars"), rules)
    assert polars["n"].to_list() == [None, 3, None, 2] and polars["m"].to_list() == [False, None, None, True]


def test_a_rule_mixing_value_kinds_or_beyond_int64_is_refused_by_name():
    # pandas made an object column of True and 0, polars Int32 (and the text "0" beside "x")
    with pytest.raises(TypeError, match=r"rule 'w' mixes values of kinds \['bool', 'number'\]"):
        Rule("w", [(col("a") > 5, True)], default=0)
    with pytest.raises(TypeError, match=r"rule 'w' mixes values of kinds \['number', 'text'\]"):
        Rule("w", [(col("a") > 5, "x")], default=0)
    # pandas wrapped 2**63 round to -2**63; polars failed naming no rule
    with pytest.raises(ValueError, match=r"rule 'w': integer values beyond int64"):
        Rule("w", [(col("a") > 5, 2**63)], default=0)
    assert Rule("w", [(col("a") > 5, 1)], default=0.5).default == 0.5  # ints with floats: float64


def test_numpy_scalars_in_a_rule_store_as_json_and_type_alike():
    df = pd.DataFrame({"a": [1, 5, 9]})
    top = df["a"].max()  # np.int64, which json.dumps refused
    rule = Rule("w", [(col("a") >= top, np.int64(2)), (col("a").isin([np.int64(1)]), np.int64(1))],
                default=np.int64(0))
    assert Rule.from_dict(json.loads(json.dumps(rule.to_dict()))) == rule
    assert apply_rules(df, [rule])["w"].tolist() == [1, 0, 2]
    assert apply_rules(to_backend(df, "polars"), [rule])["w"].to_list() == [1, 0, 2]


@pytest.mark.parametrize("backend", ["pandas", "polars"])
def test_text_against_numbers_is_named_and_isin_numbers_match_by_value(backend):
    """pandas said False on every row for `col("zip") == 2134` over text and raised numpy's
    ufunc error for a number column against text; polars raised ComputeError naming no rule,
    and refused isin([1, 9]) on a float column (pandas matched by value)."""
    df = pd.DataFrame({"zip": ["02134", "10001", None], "f": [1.0, np.nan, 9.0], "i": [1, 2, 3]})
    frame = to_backend(df, backend)
    for cond, what in ((col("zip") == 2134, r"col\('zip'\) == 2134: column 'zip' holds text"),
                       (col("i") > "1", r"col\('i'\) > '1': column 'i' holds numbers"),
                       (col("i").isin(["1"]), r"col\('i'\)\.isin\(\['1'\]\): column 'i' holds numbers")):
        with pytest.raises(TypeError, match=what):
            apply_rules(frame, [Rule("w", [(cond, 1)], default=0)])
    rules = [Rule("fi", [(col("f").isin([1, 9]), 1)], default=0),
             Rule("ii", [(col("i").isin([2.0, 2.5]), 1)], default=0)]
    out = to_backend(apply_rules(frame, rules), "pandas")
    assert out["fi"].tolist() == [1, 0, 1] and out["ii"].tolist() == [0, 1, 0]
    assert apply_rules_rowwise(frame, rules) == {"fi": [1, 0, 1], "ii": [0, 1, 0]}


@pytest.mark.parametrize("backend", ["pandas", "polars"])
def test_a_case_may_give_missing_beside_numbers_or_text(backend):
    # The kind check counted None as a kind of its own and refused such rules.
    frame = to_backend(pd.DataFrame({"a": [2.0, -1.0, 0.5]}), backend)
    for value, default in ((1, 0), ("big", "small")):
        rule = Rule("out", [(col("a") > 1, value), (col("a") < 0, None)], default=default)
        out = to_backend(apply_rules(frame, [rule]), "pandas")["out"]
        assert out.isna().tolist() == [False, True, False] and out[0] == value and out[2] == default


def _categorical_sizes() -> pd.DataFrame:
    return pd.DataFrame({"c": pd.Categorical(["a", "b", "c", None], categories=["c", "b", "a"]),
                         "size": pd.Categorical(["S", "M", "L", None], categories=["S", "M", "L"], ordered=True)})


def _on(backend: str, df: pd.DataFrame):
    return to_dask(df, 2) if backend == "dask" else to_backend(df, backend)


def _computed(frame) -> list:
    frame = frame.compute() if hasattr(frame, "compute") else frame
    return [None if v is None or v is pd.NA else v for v in list(frame["r"])]


@pytest.mark.parametrize("backend", ["pandas", "polars", "dask"])
def test_ordered_categoricals_compare_by_category_order_on_every_backend_and_row_by_row(backend):
    # The vectorised backends compared by the categories' order (S < M < L), the row-by-row
    # reference by the text ("L" < "M"): they disagreed.
    df = _categorical_sizes()
    for cond, want in ((col("size") >= "M", [0, 1, 1, 0]), (col("size") < "L", [1, 1, 0, 0]),
                       (col("size").between("S", "M"), [1, 1, 0, 0]), (col("size") == "M", [0, 1, 0, 0])):
        rule = Rule("r", [(cond, 1)], default=0)
        assert apply_rules_rowwise(df, [rule])["r"] == want
        assert _computed(apply_rules(_on(backend, df), [rule])) == want


@pytest.mark.parametrize("backend", ["pandas", "polars", "dask", "rowwise"])
@pytest.mark.parametrize("cond", [col("c") < "b", col("c").between("a", "b"), col("size") >= "XL"],
                         ids=["unordered<", "unordered-between", "ordered-not-a-category"])
def test_order_comparisons_on_unordered_categoricals_are_refused_by_rule_and_column(backend, cond):
    # pandas and Dask raised pandas' own TypeError naming nothing; polars compared the text.
    rule = Rule("r", [(cond, 1)], default=0)
    df = _categorical_sizes()
    with pytest.raises(ColumnTypeError, match=r"rule 'r'.*column '(c|size)'.*categor"):
        if backend == "rowwise":
            apply_rules_rowwise(df, [rule])
        else:
            _computed(apply_rules(_on(backend, df), [rule]))
    equal = Rule("r", [(col("c") == "b", 1), (col("c") != "a", 2)], default=0)  # equality stays allowed
    assert _computed(apply_rules(_on("pandas" if backend == "rowwise" else backend, df), [equal])) == [0, 1, 2, 0]


@pytest.mark.parametrize("backend", ["pandas", "polars", "dask", "rowwise"])
def test_categoricals_of_numbers_compare_by_their_values_as_polars_holds_them(backend):
    # A pickled table's astype("category") party sizes: polars holds them as Int64 and
    # compared them; pandas and Dask refused the order comparison ("unordered categorical").
    df = pd.DataFrame({"size": pd.Categorical([2, 10, 4, None, 6]), "tip": [1.0, 2.0, 3.0, 4.0, 5.0]})
    rule = Rule("r", [(col("size").between(4, 9), 1), (col("size") >= 10, 2)], default=0)
    if backend == "rowwise":
        assert apply_rules_rowwise(df, [rule])["r"] == [0, 2, 1, 0, 1]
        return
    out = apply_rules(_on(backend, df), [rule])
    assert _computed(out) == [0, 2, 1, 0, 1]
    out = out.compute() if hasattr(out, "compute") else out
    assert str(out["size"].dtype) == ("category" if backend != "polars" else "Int64")  # the columns are left


@pytest.mark.parametrize("backend", ["pandas", "polars"])
def test_isin_over_uint64_drops_numbers_outside_the_columns_range(backend):
    # polars built the list as Int128 and failed; a negative number never matches a uint64.
    df = pd.DataFrame({"u": np.array([0, 5, 2**63, 2**64 - 1], dtype=np.uint64),
                       "i": np.array([-1, 0, 1, 2], dtype=np.int8)})
    rule = Rule("hit", [(col("u").isin([-1, 2**63, 2**64]) | col("i").isin([300, -1, -129]), True)], default=False)
    assert list(apply_rules(to_backend(df, backend), [rule])["hit"]) == [True, False, True, False]
    assert apply_rules_rowwise(df, [rule])["hit"] == [True, False, True, False]


def test_a_datetime_rule_without_default_is_a_datetime_column_on_every_backend():
    # pandas gave an object column of Timestamps and NaN, and Dask's partitions object or
    # datetime64 while it declared datetime64[us].
    import datetime

    import dask.dataframe as dd

    # The unit is pandas' own for Python datetimes (us on pandas 3, as polars; ns on pandas
    # 2.2), so that a rule with a default, one without and Dask's declared type agree.
    df = pd.DataFrame({"i": range(10)})
    rule = Rule("when", [(col("i") > 4, datetime.datetime(2024, 1, 1))])
    unit = "us" if pd.__version__ >= "3" else "ns"
    on_pandas = apply_rules(df, [rule])["when"]
    assert str(on_pandas.dtype) == f"datetime64[{unit}]" and on_pandas.isna().tolist() == [True] * 5 + [False] * 5
    with_default = Rule("when", rule.cases, default=datetime.datetime(2020, 1, 1))
    assert apply_rules(df, [with_default])["when"].dtype == on_pandas.dtype
    assert apply_rules(pl.from_pandas(df), [rule])["when"].dtype == pl.Datetime("us")
    on_dask = apply_rules(dd.from_pandas(df, npartitions=2), [rule])
    assert str(on_dask._meta["when"].dtype) == str(on_dask.compute()["when"].dtype) == f"datetime64[{unit}]"
