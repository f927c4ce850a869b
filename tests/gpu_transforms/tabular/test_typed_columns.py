"""Column types beyond plain numbers and text, on pandas and polars alike: pandas categoricals
of numbers, durations, nanosecond times, object columns of Decimals or of mixed values."""

from __future__ import annotations

import json
import re
import zlib

import numpy as np
import pandas as pd
import polars as pl
import pytest

from gpufeed.gpu_transforms.tabular import (
    Categorify,
    Clip,
    FillMissing,
    HashBucket,
    Log,
    MinMax,
    Recipe,
    Standardize,
    to_backend,
)
from gpufeed.gpu_transforms.tabular.categorical import MISSING_INDEX
from gpufeed.gpu_transforms.tabular.errors import ColumnTypeError


def _out(frame, column):
    return frame[column].to_list() if isinstance(frame, pl.DataFrame) else frame[column].tolist()


def test_categorify_of_integer_categories_orders_them_as_numbers_on_pandas_as_on_polars():
    # pandas compared them by their text: "10" < "100" < "9", while polars (Int64) sorts
    # 9 < 10 < 100, so the same column got other codes on each backend.
    df = pd.DataFrame({"c": pd.Categorical([9, 10, None, 100, 9])})
    outs = {}
    for backend in ("pandas", "polars"):
        recipe = Recipe([Categorify(["c"])])
        outs[backend] = _out(recipe.fit_transform(to_backend(df, backend)), "c")
        assert recipe.ops[0].state == {"c": [9, 10, 100]}, backend
    assert outs["pandas"] == outs["polars"] == [2, 3, MISSING_INDEX, 4, 2]


def test_categorify_of_integer_categories_still_reads_a_recipe_that_stored_them_as_text():
    # What pandas fitted before: the categories' text, in text order.
    old = Recipe([Categorify(["c"])])
    old.ops[0].state = {"c": ["10", "100", "9"]}
    loaded = Recipe.from_json(old.to_json())
    df = pd.DataFrame({"c": pd.Categorical([9, 10, None, 100])})
    assert loaded.transform(df)["c"].tolist() == [4, 2, MISSING_INDEX, 3]


def test_hash_bucket_of_integer_categories_hashes_a_value_alike_with_or_without_gaps():
    # Cast to text, 10 was "10.0" in a batch with a missing value and "10" in one without:
    # a training batch and a serving batch put one value in two buckets.
    with_gap = pd.DataFrame({"c": pd.Categorical([10, 20, None, 10])})
    without = pd.DataFrame({"c": pd.Categorical([10, 20, 20, 10])})
    recipe = Recipe([HashBucket(["c"], 1000)])
    a = recipe.fit_transform(with_gap)["c"].tolist()
    b = recipe.transform(without)["c"].tolist()
    plain = recipe.transform(pl.DataFrame({"c": [10, 20, None, 10]}))["c"].to_list()
    assert a[0] == b[0] == plain[0] and a[1] == b[1] == plain[1] and a[2] == 0


def test_hash_bucket_of_durations_hashes_a_duration_alike_on_pandas_and_polars():
    # str() of pandas' Timedelta is "0 days 00:00:01.500000", of the timedelta polars hands
    # out "0:00:01.500000": one duration went to other buckets on each backend.
    df = pd.DataFrame({"d": pd.to_timedelta([1.5, -90, None, 0, 86400.000001], unit="s")})
    outs = {b: _out(Recipe([HashBucket(["d"], 1000)]).fit_transform(to_backend(df, b)), "d")
            for b in ("pandas", "polars")}
    assert outs["pandas"] == outs["polars"]
    assert outs["pandas"][2] == 0 and len(set(outs["pandas"])) == 5
    # The text write_table gives a duration in CSV and JSON hashes to the same bucket.
    text = Recipe([HashBucket(["d"], 1000)]).fit_transform(pd.DataFrame({"d": ["PT1.5S", "-PT90S", None, "P0D"]}))
    assert text["d"].tolist() == outs["pandas"][:4]


@pytest.mark.parametrize("kind", ["datetime", "datetime-zoned", "duration"])
def test_hash_bucket_of_nanosecond_times_on_polars_hashes_each_value_as_pandas_does(kind):
    # polars hands out Python datetimes/timedeltas, which stop at the microsecond: values
    # 1 ns apart came out as one and polars refused the lookup (duplicates in `replace`).
    ticks = pl.Series([1, 2, 1_000, None, 1_700_000_000_123_456_789], dtype=pl.Int64)
    column = {"datetime": ticks.cast(pl.Datetime("ns")),
              "datetime-zoned": ticks.cast(pl.Datetime("ns")).dt.replace_time_zone("UTC")
              .dt.convert_time_zone("America/New_York"),
              "duration": ticks.cast(pl.Duration("ns"))}[kind]
    frame = pl.DataFrame({"t": column})
    on_polars = Recipe([HashBucket(["t"], 2**20)]).fit_transform(frame)["t"].to_list()
    on_pandas = Recipe([HashBucket(["t"], 2**20)]).fit_transform(frame.to_pandas())["t"].tolist()
    assert on_polars == on_pandas
    assert on_polars[3] == 0 and len(set(on_polars)) == 5


def test_to_backend_names_a_column_whose_values_have_no_one_type():
    from gpufeed.gpu_transforms.tabular import MixedTypeError

    df = pd.DataFrame({"n": [1.0, 2.0], "code": pd.Series([7, "x"], dtype=object)})
    with pytest.raises(MixedTypeError, match=r"'code'.*cannot be converted to polars.*astype\('string'\)"):
        to_backend(df, "polars")


@pytest.mark.parametrize("values", [["1.10", "2.25", None, "3", "4", "5.5"], ["1", "2", None, "30", "4", "5"]],
                         ids=["fractions", "whole"])
@pytest.mark.parametrize("op", ["fill", "clip", "log", "standardize", "minmax", "categorify", "hash"])
def test_an_object_column_of_decimals_is_read_by_every_op_as_on_polars(values, op):
    # A pickled frame of prices (apply(Decimal)): polars holds a Decimal, which every op
    # reads as numbers; on pandas Standardize failed with "unsupported operand type(s) for
    # -: 'decimal.Decimal' and 'float'".
    import decimal

    from gpufeed.gpu_transforms.tabular import Clip, FillMissing, Log, MinMax, Standardize

    made = {"fill": lambda: FillMissing(["d"]), "clip": lambda: Clip(["d"], quantiles=(0.1, 0.9)),
            "log": lambda: Log(["d"]), "standardize": lambda: Standardize(["d"], by="g"),
            "minmax": lambda: MinMax(["d"]), "categorify": lambda: Categorify(["d"]),
            "hash": lambda: HashBucket(["d"], 1000)}[op]
    df = pd.DataFrame({"d": pd.Series([None if v is None else decimal.Decimal(v) for v in values], dtype=object),
                       "g": list("abcabc")})
    on_pandas = Recipe([made()]).fit_transform(df)["d"]
    on_polars = Recipe([made()]).fit_transform(to_backend(df, "polars"))["d"]
    assert on_pandas.astype("float64").tolist() == pytest.approx(on_polars.cast(pl.Float64).fill_null(float("nan"))
                                                                 .to_list(), rel=1e-15, nan_ok=True)


@pytest.mark.parametrize("text", ["PT2S", "2s", "0 days 00:00:02"])
def test_a_rule_compares_a_duration_column_with_text_on_polars_as_on_pandas(text):
    # pandas compared them; polars refused: "casting from Duration('us') to String not supported".
    from gpufeed.gpu_transforms.tabular import Rule, apply_rules, col

    df = pd.DataFrame({"wait": pd.to_timedelta([1, 2, 3, None], unit="s")})
    rule = Rule("slow", [(col("wait") > text, 1)], default=0)
    on_pandas = apply_rules(df, [rule])["slow"].tolist()
    on_polars = apply_rules(to_backend(df, "polars"), [rule])["slow"].to_list()
    assert on_pandas == on_polars == [0, 0, 1, 0]
    with pytest.raises(ValueError, match=r"'soon' for the duration column 'wait' is not a duration"):
        apply_rules(to_backend(df, "polars"), [Rule("slow", [(col("wait") > "soon", 1)], default=0)])


def test_split_by_time_cuts_a_duration_column_at_text_cutoffs_on_polars_as_on_pandas():
    from gpufeed.gpu_transforms.tabular import split_by_time

    df = pd.DataFrame({"wait": pd.to_timedelta([1, 2, 3, None, 5, 6], unit="s")})
    rows = [split_by_time(to_backend(df, b), "wait", cutoffs=("PT2S", "PT4S")).rows for b in ("pandas", "polars")]
    assert rows[0] == rows[1] == {"train": 2, "val": 2, "test": 2}


def _saved_hash_bucket(text):
    spec = {"op": "hash_bucket", "columns": ["d"], "buckets": 1000, "state": None}
    if text is not None:
        spec["text"] = text
    return Recipe.from_json(json.dumps({"gpufeed_recipe": 1, "ops": [spec]}))


def _crc_bucket(text):
    return 1 + zlib.crc32(text.encode()) % 999


def test_a_recipe_saved_as_canonical_before_durations_hashed_as_iso_keeps_its_buckets():
    # Recipes saved before the canonical text had versions stored "text": "canonical" and hashed
    # a duration as str(value), which each backend gave its own way; read now, they must give
    # the buckets their model was trained on, not PT1.5S's.
    old = _saved_hash_bucket("canonical")
    assert old.ops[0].text == "canonical-v1"
    df = pd.DataFrame({"d": pd.to_timedelta([1.5, None], unit="s")})
    assert old.transform(df)["d"].tolist() == [_crc_bucket("0 days 00:00:01.500000"), 0]
    assert old.transform(pl.from_pandas(df))["d"].to_list() == [_crc_bucket("0:00:01.500000"), 0]
    # The text stays what it was for the other values (the canonical text of 130.0 is 130).
    assert old.transform(pd.DataFrame({"d": [130.0]}))["d"].tolist() == [_crc_bucket("130")]


def test_a_new_hash_bucket_saves_the_version_of_its_text_and_hashes_durations_as_iso():
    new = Recipe([HashBucket(["d"], buckets=1000)])
    assert new.ops[0].text == "canonical-v2"
    assert json.loads(new.to_json())["ops"][0]["text"] == "canonical-v2"
    loaded = Recipe.from_json(new.to_json())
    df = pd.DataFrame({"d": pd.to_timedelta([1.5, None], unit="s")})
    for frame in (df, pl.from_pandas(df)):
        assert _out(loaded.transform(frame), "d") == [_crc_bucket("PT1.5S"), 0]
    assert _out(Recipe([HashBucket(["d"], buckets=1000, text="canonical-v1")]).transform(df), "d")[0] == \
        _crc_bucket("0 days 00:00:01.500000")


def test_hash_bucket_str_text_of_polars_nanosecond_durations_is_the_text_polars_gives_microsecond_ones():
    # The nanosecond path handed pandas' Timedelta to str(): "0 days 00:00:01.500000" where
    # the same whole-microsecond duration hashed as "0:00:01.500000" before.
    ticks = pl.Series([1_500_000_000, None], dtype=pl.Int64)
    for unit in ("ns", "us"):
        frame = pl.DataFrame({"d": ticks.cast(pl.Duration("ns")).cast(pl.Duration(unit))})
        out = Recipe([HashBucket(["d"], buckets=1000, text="str")]).transform(frame)["d"].to_list()
        assert out == [_crc_bucket("0:00:01.500000"), 0], unit


@pytest.mark.parametrize("categories", ["known", "unknown"])
def test_categorify_of_integer_categories_on_dask_fits_their_numbers_as_pandas_does(tmp_path, categories):
    # Dask cast them to text per partition: "10.0" in a partition with a gap, "10" in one
    # without, sorted "10" < "100" < "9"; pandas and polars fit [9, 10, 100].
    dd = pytest.importorskip("dask.dataframe")
    from gpufeed.gpu_transforms.tabular.dask import read_dask

    df = pd.DataFrame({"c": pd.Categorical([9, 10, None, 100, 9, 10, 10, 9]),
                       "s": pd.Categorical(list("abcabNab"))})
    if categories == "known":
        ddf = dd.from_pandas(df, npartitions=3)
    else:  # Parquet's categoricals come with categories Dask does not know
        df.to_parquet(tmp_path / "t.parquet", row_group_size=3)
        ddf = read_dask(str(tmp_path / "t.parquet"), backend="pandas")
    expected = Recipe([Categorify(["c", "s"])])
    want = expected.fit_transform(df)
    recipe = Recipe([Categorify(["c", "s"])])
    got = recipe.fit_transform(ddf).compute()
    assert recipe.ops[0].state == expected.ops[0].state == {"c": [9, 10, 100], "s": ["N", "a", "b", "c"]}
    assert got["c"].tolist() == want["c"].tolist() and got["s"].tolist() == want["s"].tolist()
    loaded = Recipe.from_json(recipe.to_json())
    assert loaded.transform(ddf).compute()["c"].tolist() == want["c"].tolist()
    # A vocabulary of their text (fitted on pandas before) still meets them.
    old = Recipe([Categorify(["c"])])
    old.ops[0].state = {"c": ["10", "100", "9"]}
    assert old.transform(ddf).compute()["c"].tolist() == [4, 2, MISSING_INDEX, 3, 4, 2, 2, 4]
    # Unseen values are named by their numbers.
    strict = Recipe([Categorify(["c"], on_unseen="raise")])
    strict.ops[0].state = {"c": [9, 10]}
    with pytest.raises(Exception, match=r"e\.g\. \[100\]"):
        strict.transform(ddf).compute()


@pytest.mark.parametrize("op", [Standardize(["c", "f"]), Log(["c", "n"]), MinMax(["c", "f"]),
                                Clip(["c", "n"], lower=0, upper=50), FillMissing(["c", "f"]),
                                FillMissing(["c"], strategy="constant", value=5)], ids=lambda op: op.kind)
def test_numeric_ops_read_a_pandas_categorical_of_numbers_as_its_numbers_as_polars_does(op):
    # polars holds such a column as Int64 (or Float64) and ran; pandas refused it as a
    # Categorical: the same table, two outcomes.
    df = pd.DataFrame({"c": pd.Categorical([9, 10, None, 100, 9]), "f": pd.Categorical([1.5, 2.5, None, 1.5, 3.0]),
                       "n": pd.Categorical([9, 10, 11, 100, 9])})
    on_pandas = Recipe([op]).fit_transform(df)
    on_polars = Recipe([op]).fit_transform(to_backend(df, "polars"))
    for c in op.columns:
        assert pl.from_pandas(on_pandas[c]).to_list() == on_polars[c].to_list(), c


def test_log_of_pandas_nullable_numbers_is_the_kernel_polars_runs_to_the_bit():
    # pandas' nullable columns (a categorical of numbers with gaps reads as Int64) and Dask
    # took narwhals' log, log(x) / log(e): NumPy 1.x's log(e) is one ulp under 1, so log(10)
    # came out an ulp from polars' (fails on NumPy 1.x only without the fix: on NumPy 2
    # log(e) == 1 and the two agree anyway).
    dd = pytest.importorskip("dask.dataframe")
    df = pd.DataFrame({"i": pd.array([9, 10, None, 100, 0], dtype="Int64"),
                       "f": pd.array([9.0, 1.5, None, 99.0, 0.0], dtype="Float64")})
    want = Recipe([Log(["i", "f"])]).fit_transform(to_backend(df, "polars"))
    got = {"pandas": Recipe([Log(["i", "f"])]).fit_transform(df),
           "dask": Recipe([Log(["i", "f"])]).fit_transform(dd.from_pandas(df, npartitions=2)).compute()}
    fitted = Recipe([Log(["i", "f"])]).fit(df)
    got["dask transform"] = fitted.transform(dd.from_pandas(df, npartitions=2)).compute()
    for name, out in got.items():
        for c in ("i", "f"):
            assert out[c].dtype == "float64", (name, c)
            assert pl.from_pandas(out[c]).to_list() == want[c].to_list(), (name, c)


def test_numeric_ops_still_refuse_a_categorical_of_text_by_name():
    with pytest.raises(ColumnTypeError, match=r"'c': 'Categorical'"):
        Recipe([Standardize(["c"])]).fit(pd.DataFrame({"c": pd.Categorical(["a", "b"])}))


def test_numeric_ops_read_a_dask_categorical_of_numbers_as_its_numbers():
    dd = pytest.importorskip("dask.dataframe")
    df = pd.DataFrame({"c": pd.Categorical([9, 10, None, 100, 9, 10])})
    recipe = Recipe([Clip(["c"], lower=0, upper=50), Log(["c"])])
    got = recipe.fit_transform(dd.from_pandas(df, npartitions=3)).compute()["c"]
    want = Recipe([Clip(["c"], lower=0, upper=50), Log(["c"])]).fit_transform(df)["c"]
    assert got.isna().tolist() == want.isna().tolist()
    assert got.dropna().tolist() == want.dropna().tolist()


@pytest.mark.parametrize("zone", ["America/New_York", "Etc/GMT+5"])
def test_errors_name_a_zoned_pandas_column_by_its_dtype_as_on_polars(zone):
    # narwhals' pattern for pandas dtype names takes zones of letters and '/' only: the
    # column was 'Unknown: Timestamp' in messages, and a number filled into it failed in
    # pandas' words ("Cannot cast DatetimeArray to dtype float64").
    df = pd.DataFrame({"t": pd.to_datetime(["2024-01-01", None]).tz_localize(zone)})
    unit = df["t"].dt.unit  # what to_datetime gave: "us" on pandas 3, "ns" on pandas 2 (Python 3.10's)
    for frame in (df, to_backend(df, "polars")):
        with pytest.raises(ColumnTypeError, match=rf"'t': \"Datetime\(time_unit='{unit}', time_zone='{re.escape(zone)}'\)\""):
            Recipe([Log(["t"])]).fit(frame)
        with pytest.raises(ColumnTypeError, match="constant 5 cannot fill column 't' .*needs an ISO date/time"):
            Recipe([FillMissing(["t"], strategy="constant", value=5)]).fit_transform(frame)


def test_hash_bucket_of_an_object_column_of_several_zones_hashes_instants_in_utc_on_every_backend(tmp_path):
    # polars (through Arrow) put such a column in its first value's zone, pandas hashed each
    # instant in the zone of whichever equal value came first: other buckets, and on each
    # backend the buckets moved with the row order.
    from gpufeed.datasets.tables import read_table

    stamps = [pd.Timestamp("2024-01-01 10:00", tz="America/New_York"), pd.Timestamp("2024-01-01 15:00", tz="Europe/Paris"),
              pd.Timestamp("2024-01-01 15:00", tz="UTC"), None]
    utc = pd.DataFrame({"t": pd.to_datetime(stamps, utc=True)})
    want = Recipe([HashBucket(["t"], buckets=1000)]).fit_transform(utc)["t"].tolist()
    assert want[0] == want[2] != want[1] and want[3] == 0
    for order in (slice(None), slice(None, None, -1)):
        df = pd.DataFrame({"t": pd.Series(stamps[order], dtype=object)})
        df.to_pickle(tmp_path / "t.pkl")
        frames = {"pandas": df, "polars": to_backend(df, "polars"),
                  "pickle on polars": read_table(tmp_path / "t.pkl", backend="polars")}
        for name, frame in frames.items():
            assert _out(Recipe([HashBucket(["t"], buckets=1000)]).fit_transform(frame), "t") == want[order], name
    # One zone (its offsets in winter and summer): hashed in that zone, as a zoned column is.
    one = [pd.Timestamp("2024-01-01 10:00", tz="America/New_York"), pd.Timestamp("2024-07-01 10:00", tz="America/New_York")]
    zoned = Recipe([HashBucket(["t"], buckets=1000)]).fit_transform(pd.DataFrame({"t": pd.DatetimeIndex(one)}))
    for frame in (pd.DataFrame({"t": pd.Series(one, dtype=object)}), to_backend(pd.DataFrame({"t": pd.Series(one, dtype=object)}), "polars")):
        assert _out(Recipe([HashBucket(["t"], buckets=1000)]).fit_transform(frame), "t") == zoned["t"].tolist()


def test_categorify_of_duration_categories_on_dask_is_refused_by_name_as_on_pandas():
    # Dask's unknown categories of durations were marked as times and read back with
    # pd.Timestamp('P0DT0H0M1S'): a DateParseError naming no column, where pandas names it.
    dd = pytest.importorskip("dask.dataframe")
    df = pd.DataFrame({"c": pd.Series(pd.to_timedelta([1, 2, 1, None], unit="s")).astype("category")})
    ddf = dd.from_pandas(df, npartitions=2)
    ddf["c"] = ddf["c"].cat.as_unknown()
    for frame in (df, ddf):
        with pytest.raises(ColumnTypeError, match=r"Categorify: column 'c' holds durations, which a recipe does not keep.*to seconds.*total_seconds.*HashBucket"):
            Recipe([Categorify(["c"])]).fit(frame)


def test_a_numeric_op_on_a_dask_categorical_of_unknown_categories_says_how_to_read_its_numbers(tmp_path):
    # read_parquet's categoricals come with categories Dask does not know (typed as text), so
    # a numeric op cannot tell a categorical of numbers, which pandas reads as its values:
    # the error names the column and the way out; as_known() then runs as pandas does.
    pytest.importorskip("dask.dataframe")
    from gpufeed.gpu_transforms.tabular.dask import read_dask

    df = pd.DataFrame({"c": pd.Categorical([9, 10, None, 100, 9, 10]), "x": [0.0, 1.0, 2.0, 3.0, 4.0, 5.0]})
    df.to_parquet(tmp_path / "t.parquet", row_group_size=3)
    ddf = read_dask(str(tmp_path / "t.parquet"), backend="pandas")
    with pytest.raises(ColumnTypeError, match=r"Dask does not know the categories of \['c'\].*as_known"):
        Recipe([Standardize(["c"])]).fit_transform(ddf)
    ddf["c"] = ddf["c"].cat.as_known()
    got = Recipe([Standardize(["c"])]).fit_transform(ddf).compute()["c"]
    want = Recipe([Standardize(["c"])]).fit_transform(df)["c"]
    assert got.isna().tolist() == want.isna().tolist()
    assert got.dropna().tolist() == pytest.approx(want.dropna().tolist(), rel=1e-12)


def test_numeric_ops_give_numpy_float64_on_a_pandas_table_of_arrow_types():
    # Read with dtype_backend="pyarrow": Log gave double[pyarrow] where every other op, and
    # the same table with numpy types, gave float64.
    df = pd.DataFrame({"year": [2007, 2008, None, 2009], "x": [1.5, None, 2.5, 4.0]}).convert_dtypes(
        dtype_backend="pyarrow")
    out = Recipe([Log(["year"]), Standardize(["x"]), MinMax(["year"])]).fit_transform(df)
    assert {str(out[c].dtype) for c in ("year", "x")} == {"float64"}
    assert np.isnan(out["year"].to_numpy()[2]) and np.isnan(out["x"].to_numpy()[1])
