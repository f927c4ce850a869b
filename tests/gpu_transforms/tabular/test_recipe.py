"""Recipes: identical results on pandas, polars and Dask; fit on train only; JSON; bad input."""

from __future__ import annotations

import copy
import datetime
import math
import re
import warnings
import zlib

import numpy as np
import pandas as pd
import polars as pl
import pytest

from gpufeed.gpu_transforms.tabular import (
    Categorify,
    Clip,
    ColumnTypeError,
    EmptyTableError,
    FillMissing,
    HashBucket,
    Log,
    MinMax,
    MissingColumnError,
    NonFiniteError,
    Recipe,
    Split,
    Standardize,
    UnseenCategoryError,
    downcast,
    split_by_group,
    split_by_time,
    split_random,
    to_backend,
)
from gpufeed.gpu_transforms.tabular.categorical import MISSING_INDEX, UNSEEN_INDEX, stable_hash
from gpufeed.gpu_transforms.tabular.dask import to_dask


@pytest.fixture(scope="module")
def table() -> pd.DataFrame:
    rng = np.random.default_rng(11)
    n = 2000
    temp = np.round(rng.normal(15, 8, n) * 16) / 16
    temp[rng.random(n) < 0.05] = np.nan
    return pd.DataFrame({
        "station": rng.integers(1, 40, n), "region": rng.choice(["north", "south", "east", "west"], n),
        "t": np.arange(n), "temp": temp, "count": rng.integers(0, 5000, n).astype("int64"),
        "volt": rng.uniform(0, 5, n), "label": rng.integers(0, 3, n),
    })


OPS = {
    "fill_mean": lambda: [FillMissing(["temp"])],
    "fill_constant": lambda: [FillMissing(["temp"], strategy="constant", value=-1.0)],
    "fill_median": lambda: [FillMissing(["temp"], strategy="median")],
    "clip_fixed": lambda: [Clip(["volt", "temp"], lower=0.5, upper=4.5)],
    "clip_quantiles": lambda: [Clip(["volt"], quantiles=(0.05, 0.95))],
    "log": lambda: [Log(["count"])],
    "standardize": lambda: [Standardize(["temp", "volt"])],
    "standardize_by_group": lambda: [Standardize(["temp", "volt"], by="region")],
    "minmax": lambda: [MinMax(["count", "volt"])],
    "categorify": lambda: [Categorify(["region", "station"])],
    "hash": lambda: [HashBucket(["region", "station"], buckets=16)],
    "full": lambda: [FillMissing(["temp"]), Clip(["volt"], lower=0.1, upper=4.9), Log(["count"]),
                     Standardize(["temp"], by="region"), MinMax(["count"]), Categorify(["region"])],
}


def _as_pandas(frame) -> pd.DataFrame:
    if isinstance(frame, pl.DataFrame):
        return frame.to_pandas()
    return frame.compute() if hasattr(frame, "compute") else frame


def _assert_same(a: pd.DataFrame, b: pd.DataFrame) -> None:
    assert list(a.columns) == list(b.columns) and len(a) == len(b)
    for c in a.columns:
        x, y = a[c].to_numpy(), b[c].to_numpy()
        if x.dtype.kind == "f" or y.dtype.kind == "f":
            np.testing.assert_allclose(x.astype(float), y.astype(float), rtol=1e-12, atol=1e-12, err_msg=c)
        else:
            assert x.tolist() == y.tolist(), c


def _assert_same_state(a: Recipe, b: Recipe) -> None:
    def flat(x):
        if isinstance(x, dict):
            return [y for k, v in sorted(x.items()) for y in (k, *flat(v))]
        if isinstance(x, list):
            return [y for v in x for y in flat(v)]
        return [x]

    for x, y in zip(flat([op.state for op in a.ops]), flat([op.state for op in b.ops]), strict=True):
        assert x == (pytest.approx(y, rel=1e-12) if isinstance(y, float) else y)


@pytest.mark.parametrize("name", sorted(OPS))
@pytest.mark.parametrize("backend", ["polars", "dask", pytest.param("cudf", marks=pytest.mark.gpu)])
def test_every_op_gives_identical_results_across_backends(table, name, backend):
    # pandas is the reference: polars, Dask and cuDF each equal it, hence one another (Dask's
    # quantiles and medians too: exact, not Dask's own merge of partition percentiles).
    if backend == "cudf":
        pytest.importorskip("cudf", reason="cuDF is not installed")
    train, val = table.iloc[:1500], table.iloc[1500:].reset_index(drop=True)
    reference = Recipe(OPS[name]()).fit(train)
    expected = reference.transform(val)
    if backend == "dask":
        recipe = Recipe(OPS[name]()).fit(to_dask(train, 3))
        got = recipe.transform(to_dask(val, 2))
    else:
        recipe = Recipe(OPS[name]()).fit(to_backend(train, backend))
        got = recipe.transform(to_backend(val, backend))
    # Fitted statistics agree (partitioned sums differ in the last bits, hence approx).
    _assert_same_state(recipe, reference)
    _assert_same(expected, _as_pandas(got).reset_index(drop=True))


def test_statistics_come_from_the_training_split_only(table):
    split = split_by_time(table, "t", (0.6, 0.2, 0.2))
    recipe = Recipe([Standardize(["volt"]), FillMissing(["temp"])]).fit(split.train)
    mean, std = recipe.ops[0].state["global"]["volt"]
    assert mean == pytest.approx(split.train["volt"].mean())
    assert std == pytest.approx(split.train["volt"].std(ddof=0))
    assert recipe.ops[1].state["temp"] == pytest.approx(split.train["temp"].mean())
    assert mean != pytest.approx(table["volt"].mean(), abs=1e-9)
    out = recipe.transform(split.test)
    expected = (split.test["volt"] - mean) / std
    np.testing.assert_allclose(out["volt"], expected)


@pytest.mark.parametrize("backend", ["pandas", "polars"])
def test_standardize_by_group_uses_group_statistics_and_global_for_unseen(table, backend):
    recipe = Recipe([Standardize(["volt"], by="region")]).fit(to_backend(table, backend))
    north = table[table.region == "north"]["volt"]
    new = pd.DataFrame({"region": ["north", "atlantis", None], "volt": [north.mean(), 2.0, 2.0]})
    out = _as_pandas(recipe.transform(to_backend(new, backend)))
    mean, std = recipe.ops[0].state["global"]["volt"]
    assert out["volt"].iloc[0] == pytest.approx(0.0, abs=1e-12)
    assert out["volt"].iloc[1] == pytest.approx((2.0 - mean) / std)
    assert out["volt"].iloc[2] == pytest.approx((2.0 - mean) / std)


@pytest.mark.parametrize("rows", [3_000, 300_000])  # the short columns' 2-D blocks, and long columns
def test_standardize_by_a_pandas_categorical_key_equals_the_same_key_as_text_bit_for_bit(rows):
    # A categorical key is grouped by its codes (faster than pandas' own recoding): the same
    # groups, statistics and outputs to the bit as the key as text, with a missing key first,
    # categories in no sorted order and one never used; the transform codes rows by the
    # categories (every category looked up once) as the text is coded.
    rng = np.random.default_rng(5)
    text = rng.choice(["north", "south", "east", "west"], rows).astype(object)
    text[0] = None
    text[rng.random(rows) < 0.02] = None
    volt = rng.normal(1e3, 5.0, rows)
    volt[rng.random(rows) < 0.05] = np.nan
    as_text = pd.DataFrame({"volt": volt, "amps": rng.integers(0, 50, rows), "region": text})
    as_category = as_text.assign(region=pd.Categorical(text, categories=["west", "unused", "south", "north", "east"]))
    fitted = {}
    for name, frame in (("text", as_text), ("category", as_category)):
        recipe = Recipe([Standardize(["volt", "amps"], by="region")])
        fitted[name] = (recipe.fit_transform(frame), recipe.ops[0].state)
        later = frame.iloc[::-1].reset_index(drop=True)  # other rows first: codes by value, not by order
        fitted[name] += (recipe.transform(later),)
    assert fitted["category"][1] == fitted["text"][1]
    assert [g[0] for g in fitted["category"][1]["groups"]["volt"]] == ["east", "north", "south", "west"]
    for c in ("volt", "amps"):
        for i in (0, 2):
            np.testing.assert_array_equal(fitted["category"][i][c].to_numpy(), fitted["text"][i][c].to_numpy())


@pytest.mark.parametrize("categorical", [False, True])
def test_standardize_by_a_key_mixing_text_and_numbers_names_the_column(categorical):
    # Group keys are kept sorted, and text and numbers have no order: a bare TypeError
    # ("'<' not supported between 'float' and 'str'") named neither the op nor the column.
    key = pd.Series([1, "a", 2.5, 1, "a", 2.5], dtype=object)
    frame = pd.DataFrame({"x": np.arange(6.0), "k": key.astype("category") if categorical else key})
    with pytest.raises(ColumnTypeError, match=r"Standardize: column 'k' mixes float and int and str values.*astype"):
        Recipe([Standardize(["x"], by="k")]).fit(frame)


def test_standardize_by_a_float_key_holding_null_and_nan_pools_the_true_global_statistics():
    # pandas groups a NaN apart from a null in an Arrow float key, both read back as None:
    # joining the statistics of runs of columns by key gave the second group the first's,
    # and the global mean and std (used for missing and unseen keys) came out wrong.
    import pyarrow as pa

    key = pd.arrays.ArrowExtensionArray(pa.array([1.0, None, float("nan"), 1.0, None, float("nan")], from_pandas=False))
    frame = pd.DataFrame({"k": key, "a": [1.0, 2, 3, 4, 5, 6],
                          "b": pd.array([10.0, 20, 30, 40, 50, 60], dtype="double[pyarrow]")})
    state = Recipe([Standardize(["a", "b"], by="k")]).fit(frame).ops[0].state["global"]
    for c in ("a", "b"):
        values = frame[c].to_numpy(dtype=float)
        assert state[c] == pytest.approx([values.mean(), values.std()], rel=1e-12), c


def test_a_batch_of_a_large_pandas_category_set_is_coded_as_its_text():
    # A batch sliced from a big categorical keeps every category: with more categories than
    # rows the rows are factorised (looking every category up cost 10-100x more there);
    # with fewer, the categories are looked up. Both give the codes of the same text.
    rng = np.random.default_rng(2)
    categories = [f"p{i:05d}" for i in range(3000)]
    train = pd.DataFrame({"x": rng.normal(size=6000), "k": pd.Categorical.from_codes(
        rng.integers(0, 40, 6000), categories=categories)})
    recipe = Recipe([Standardize(["x"], by="k"), Categorify(["k"])])
    as_text = Recipe([Standardize(["x"], by="k"), Categorify(["k"])]).fit(train.assign(k=train["k"].astype(str)))
    recipe.fit(train)
    for rows in (50, 5000):  # fewer rows than categories, then more
        batch = train.iloc[-rows:].reset_index(drop=True)
        batch.loc[0, "k"] = "p02999"  # a category unseen in training
        out, expected = recipe.transform(batch), as_text.transform(batch.assign(k=batch["k"].astype(str)))
        np.testing.assert_array_equal(out["k"].to_numpy(), expected["k"].to_numpy())
        np.testing.assert_array_equal(out["x"].to_numpy(), expected["x"].to_numpy())
        assert out["k"].iloc[0] == UNSEEN_INDEX


@pytest.mark.parametrize("backend", ["pandas", "polars"])
def test_minmax_of_integers_beyond_2_53_keeps_them_apart(tmp_path, backend):
    # Through float64 first, -2**60 + 0..4 all became 0, and nanosecond times one second
    # apart came out in steps: the minimum is taken off in integers, as pandas by hand does.
    ids = np.array([-(2**60) + k for k in range(5)], dtype="int64")
    times = np.int64(1_732_600_000_000_000_000) + np.arange(0, 500, 100, dtype="int64")
    frame = pd.DataFrame({"id": ids, "t": times, "small": np.arange(5)})
    recipe = Recipe([MinMax(["id", "t", "small"])])
    out = _as_pandas(recipe.fit_transform(to_backend(frame, backend)))
    for c in frame:
        expected = ((frame[c] - frame[c].min()) / (frame[c].max() - frame[c].min())).to_numpy()
        np.testing.assert_array_equal(out[c].to_numpy(), expected, err_msg=c)
    assert recipe.ops[0].state["id"] == [-(2**60), -(2**60) + 4]  # exact, as ints
    recipe.save(tmp_path / "r.json")
    again = _as_pandas(Recipe.load(tmp_path / "r.json").transform(to_backend(frame, backend)))
    np.testing.assert_array_equal(again["id"].to_numpy(), out["id"].to_numpy())


@pytest.mark.parametrize("backend", ["pandas", "polars"])
@pytest.mark.parametrize("by", [None, "g"])
def test_standardize_maps_a_constant_column_to_zero_though_its_std_is_rounding_noise(backend, by):
    # 50,000 values 39.1: float64's std is 7.1e-15, not 0; divided by it, pandas gave -1
    # on every row and polars 0, and a new value 40.0 became 1.27e14.
    n = 50_000
    frame = pd.DataFrame({"x": np.full(n, 39.1), "g": np.where(np.arange(n) % 2, "a", "b"),
                          "y": 39.1 + np.arange(n) * 1e-9})  # tiny, but a real spread
    recipe = Recipe([Standardize(["x", "y"], by=by)])
    out = _as_pandas(recipe.fit_transform(to_backend(frame, backend)))
    assert np.abs(out["x"].to_numpy()).max() < 1e-12
    assert recipe.ops[0].state["global"]["x"][1] == 1.0
    assert out["y"].to_numpy().std() == pytest.approx(1.0, rel=1e-6)  # still standardised
    new = _as_pandas(recipe.transform(to_backend(pd.DataFrame({"x": [40.0], "y": [39.1], "g": ["a"]}), backend)))
    assert new["x"].iloc[0] == pytest.approx(0.9)


@pytest.mark.parametrize("backend", ["pandas", "polars"])
@pytest.mark.parametrize("groups", [pd.array([True, False, None, False], dtype="boolean"),
                                    np.array([True, False, True, False])], ids=["nullable", "numpy"])
def test_standardize_by_a_boolean_group_saves_and_reloads(tmp_path, backend, groups):
    """pandas hands boolean group keys over as numpy bools, which JSON cannot store: the
    recipe fitted, then failed at save()."""
    df = pd.DataFrame({"x": [1.0, 2.0, 3.0, 4.0], "g": groups})
    recipe = Recipe([Standardize(["x"], by="g")])
    out = recipe.fit_transform(to_backend(df, backend))
    loaded = Recipe.load(recipe.save(tmp_path / "recipe.json"))
    assert [g[0] for g in loaded.ops[0].state["groups"]["x"]] == [False, True]
    _assert_same(_as_pandas(out), _as_pandas(loaded.transform(to_backend(df, backend))))


@pytest.mark.parametrize("backend", ["pandas", "polars"])
def test_standardize_by_a_date_group_is_refused_at_fit_naming_the_column(backend):
    df = pd.DataFrame({"x": [1.0, 2.0, 3.0], "day": pd.to_datetime(["2020-01-01", "2020-01-02", None])})
    with pytest.raises(ColumnTypeError, match=r"Standardize: column 'day' holds dates, which a recipe does not keep as Standardize keys .*dt.year"):
        Recipe([Standardize(["x"], by="day")]).fit(to_backend(df, backend))


@pytest.mark.parametrize("backend", ["pandas", "polars"])
@pytest.mark.parametrize("kind", ["datetime", "date", "category"])
def test_categorify_of_dates_is_refused_in_one_message_naming_the_fix(backend, kind):
    # pandas named the values "Timestamp", polars "datetime" or "date", and both blamed JSON
    # with no way out; a categorical of dates (astype("category") of years) was refused too.
    day = pd.Series(pd.to_datetime(["2020-01-01", "2020-01-02", None, "2020-01-01"]))
    df = pd.DataFrame({"day": day.astype("category") if kind == "category" else day})
    frame = to_backend(df, backend)
    if kind == "date" and backend == "polars":
        frame = frame.with_columns(frame["day"].dt.date())
    with pytest.raises(ColumnTypeError, match=r"Categorify: column 'day' holds dates, .*dt.year.*HashBucket"):
        Recipe([Categorify(["day"])]).fit(frame)
    hashed = Recipe([HashBucket(["day"], 16)]).fit_transform(frame)  # the way the message offers
    assert len(hashed) == 4


@pytest.mark.parametrize("backend", ["pandas", "polars"])
def test_recipe_json_round_trip_reproduces_the_transform(table, tmp_path, backend):
    frame = to_backend(table, backend)
    recipe = Recipe(OPS["full"]() + [Clip(["temp"], quantiles=(0.1, 0.9)), HashBucket(["station"], 8)]).fit(frame)
    path = recipe.save(tmp_path / "recipe.json")
    loaded = Recipe.load(path)
    _assert_same(_as_pandas(recipe.transform(frame)), _as_pandas(loaded.transform(frame)))


def _flat_state(recipe: Recipe) -> list:
    """Every fitted number or key of a recipe, in order."""
    def walk(value):
        if isinstance(value, dict):
            return [x for k in sorted(value) for x in [k, *walk(value[k])]]
        if isinstance(value, list | tuple):
            return [x for v in value for x in walk(v)]
        return [value]
    return [x for op in recipe.ops for x in walk(op.state)]


def test_refitting_the_same_table_reproduces_the_statistics():
    # Polars' parallel reductions may add floats in another order from run to run (the
    # recipe module says so): a refit may move a statistic in its last bits, never more.
    # pandas is sequential and must give the very same JSON.
    rng = np.random.default_rng(5)
    n = 300_000
    df = pd.DataFrame({"g": rng.choice(list("abcdef"), n), **{f"x{i}": rng.normal(i, 3, n) for i in range(4)}})
    cols = [f"x{i}" for i in range(4)]
    steps = lambda: [FillMissing(cols), Standardize(cols, by="g"), MinMax(cols), Categorify(["g"])]  # noqa: E731
    assert Recipe(steps()).fit(df).to_json() == Recipe(steps()).fit(df).to_json()
    frame = to_backend(df, "polars")
    fits = [_flat_state(Recipe(steps()).fit(frame)) for _ in range(3)]
    for other in fits[1:]:
        assert len(other) == len(fits[0])
        for a, b in zip(fits[0], other, strict=True):
            assert a == b if isinstance(a, str) else math.isclose(a, b, rel_tol=1e-12, abs_tol=1e-12)


def test_fit_transform_equals_fit_then_transform(table):
    a = Recipe(OPS["full"]()).fit_transform(table)
    b = Recipe(OPS["full"]()).fit(table).transform(table)
    _assert_same(a, b)


def test_categorify_reserves_indices_for_unseen_and_missing(table):
    recipe = Recipe([Categorify(["region"])]).fit(table)
    assert recipe.ops[0].state["region"] == ["east", "north", "south", "west"]
    assert recipe.ops[0].num_embeddings("region") == 6
    out = recipe.transform(pd.DataFrame({"region": ["east", "mars", None, "west"]}))
    assert out["region"].tolist() == [2, UNSEEN_INDEX, MISSING_INDEX, 5]
    strict = Recipe([Categorify(["region"], on_unseen="raise")]).fit(table)
    with pytest.raises(UnseenCategoryError, match=r"column 'region' has 1 value\(s\) not seen.*'mars'"):
        strict.transform(pd.DataFrame({"region": ["east", "mars"]}))
    assert Recipe.from_json(strict.to_json()).ops[0].on_unseen == "raise"


@pytest.mark.parametrize("backend", ["pandas", "polars"])
def test_the_unseen_category_error_names_distinct_examples(table, backend):
    strict = Recipe([Categorify(["region"], on_unseen="raise")]).fit(table)
    new = to_backend(pd.DataFrame({"region": ["mars"] * 5 + ["east", "venus", "mars", "io"]}), backend)
    with pytest.raises(UnseenCategoryError, match=r"has 8 value\(s\) not seen.*e\.g\. \['io', 'mars', 'venus'\]"):
        strict.transform(new)


def test_recipes_saved_with_the_old_on_unseen_spelling_still_load(table):
    saved = Recipe([Categorify(["region"], on_unseen="raise")]).fit(table).to_json()
    old = Recipe.from_json(saved.replace('"on_unseen": "raise"', '"on_unseen": "error"'))
    assert old.ops[0].on_unseen == "raise" and old.to_json() == saved
    with pytest.raises(UnseenCategoryError):
        old.transform(pd.DataFrame({"region": ["mars"]}))


@pytest.mark.parametrize("backend", ["pandas", "polars"])
def test_categorify_warns_when_a_columns_values_all_miss_its_vocabulary(backend):
    # IDs recoded between fit and transform ("u7" -> "user-7"): every row mapped to index 0,
    # silently, until the model trained on nothing.
    fit = pd.DataFrame({"id": [f"u{i % 50}" for i in range(1000)], "k": ["a", "b"] * 500})
    drifted = fit.assign(id=[f"user-{i % 50}" for i in range(1000)])

    def frame(df):
        return df if backend == "pandas" else pl.from_pandas(df)

    def fitted():
        return Recipe([Categorify(["id", "k"])]).fit(fit)

    recipe = fitted()
    with pytest.warns(UserWarning, match=r"all 1000 values of column 'id' .* unseen .* e\.g\. \['user-0'") as caught:
        out = recipe.transform(frame(drifted))
    assert len(caught) == 1  # 'k' still matches: not named
    assert (np.asarray(out["id"]) == UNSEEN_INDEX).all()  # still coded as asked (on_unseen="index")
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        recipe.transform(frame(drifted))  # named once per column, not at every batch
        fitted().transform(frame(fit))  # the fitted values
        fitted().transform(frame(drifted.head(19)))  # a small serving batch of new IDs: too few to judge
        fitted().transform(frame(pd.concat([drifted.head(500), fit.head(1)])))  # one value still known
        # Sorted with the new IDs first, half the rows known: rows spread over the table are looked at.
        fitted().transform(frame(pd.concat([drifted] * 20 + [fit] * 20)))
        rare = Recipe([Categorify(["id"], min_count=2)]).fit(fit)
        rare.transform(frame(drifted))  # min_count: unseen and rare share index 0, not judged


def test_categorify_min_count_maps_rare_values_to_unseen():
    df = pd.DataFrame({"c": ["a"] * 5 + ["b"]})
    out = Recipe([Categorify(["c"], min_count=2)]).fit_transform(df)
    assert out["c"].tolist() == [2] * 5 + [UNSEEN_INDEX]


@pytest.mark.parametrize("backend", ["pandas", "polars"])
def test_empty_vocabularies_map_to_the_reserved_indices(backend):
    # Every value rarer than min_count, an all-missing column to hash, an all-missing group
    # column: nothing to look up, and still one output per row (this used to raise IndexError).
    df = to_backend(pd.DataFrame({"c": ["a", "b", "a", None], "h": [None] * 4, "g": [None] * 4,
                                  "x": [1.0, 2.0, 3.0, 4.0]}), backend)
    out = _as_pandas(Recipe([Categorify(["c"], min_count=5), HashBucket(["h"], buckets=8),
                             Standardize(["x"], by="g")]).fit_transform(df))
    assert out["c"].tolist() == [UNSEEN_INDEX] * 3 + [MISSING_INDEX]
    assert out["h"].tolist() == [0] * 4
    np.testing.assert_allclose(out["x"], (np.arange(1, 5) - 2.5) / np.std(np.arange(1, 5)))


def test_hash_buckets_are_stable_and_reserve_zero_for_missing():
    out = Recipe([HashBucket(["c"], buckets=10)]).fit_transform(pd.DataFrame({"c": ["x", None, "y"]}))
    assert out["c"].tolist() == [stable_hash("x", 10), 0, stable_hash("y", 10)]
    assert all(1 <= stable_hash(v, 10) < 10 for v in range(100))


def test_a_hash_bucket_saved_before_the_canonical_text_keeps_its_buckets():
    df = pd.DataFrame({"f": [130.0, 2.5, None], "d": pd.to_datetime(["2024-01-01 00:00", "2024-01-02 10:00", None])})
    old = ('{"gpufeed_recipe": 1, "ops": [{"op": "hash_bucket", "columns": ["f", "d"], "buckets": 1000, '
           '"state": null}]}')  # as the kit wrote it before HashBucket took text=
    out = Recipe.from_json(old).transform(df)
    assert out["f"].tolist()[:2] == [1 + zlib.crc32(b"130.0") % 999, 1 + zlib.crc32(b"2.5") % 999]
    assert out["d"].tolist()[:2] == [1 + zlib.crc32(b"2024-01-01 00:00:00") % 999,
                                     1 + zlib.crc32(b"2024-01-02 10:00:00") % 999]
    new = Recipe([HashBucket(["f", "d"], buckets=1000)])
    assert Recipe.from_json(new.to_json()).ops[0].text == "canonical-v2"
    assert new.fit_transform(df)["f"].tolist()[0] == stable_hash(130, 1000)
    with pytest.raises(ValueError, match="text must be one of 'canonical', 'canonical-v2', 'canonical-v1', 'str'"):
        HashBucket(["f"], text="repr")


def test_missing_column_is_named_with_the_op(table):
    recipe = Recipe([FillMissing(["temp"]), MinMax(["pressure"])])
    with pytest.raises(MissingColumnError, match=r"recipe op 1 \(minmax\) needs column\(s\) \['pressure'\]"):
        recipe.fit(table)
    fitted = Recipe([MinMax(["volt"])]).fit(table)
    with pytest.raises(MissingColumnError, match="'volt'"):
        fitted.transform(table.drop(columns="volt"))


def test_empty_table_cannot_be_fitted_but_can_be_transformed(table):
    with pytest.raises(EmptyTableError, match="column 'temp' has no non-missing value"):
        Recipe([FillMissing(["temp"])]).fit(table.iloc[:0])
    fitted = Recipe([FillMissing(["temp"]), Categorify(["region"])]).fit(table)
    assert len(fitted.transform(table.iloc[:0])) == 0


def test_inf_is_an_error_and_log_domain_is_checked():
    df = pd.DataFrame({"x": [1.0, math.inf, 3.0], "y": [0.0, -2.0, 5.0]})
    with pytest.raises(NonFiniteError, match=r"Standardize: .*\{'x': 1\}"):
        Recipe([Standardize(["x"])]).fit(df)
    with pytest.raises(NonFiniteError, match=r"values <= -1.0.*\{'y': 1\}"):
        Recipe([Log(["y"])]).fit(df)
    clipped = Recipe([Clip(["x"], lower=0, upper=10), Standardize(["x"])]).fit_transform(df)
    assert np.isfinite(clipped["x"]).all()


@pytest.mark.parametrize("op", [lambda c: FillMissing(c), lambda c: Standardize(c, by="g"), lambda c: MinMax(c)])
@pytest.mark.parametrize("backend", ["pandas", "polars"])
def test_inf_is_found_by_every_fitted_op_on_every_backend(op, backend):
    # The statistics reveal inf (as inf or NaN), so the count only runs then; both signs,
    # and +inf beside -inf (a NaN mean), must still be reported per column.
    df = pd.DataFrame({"g": ["a", "b", "a", "b"], "ok": [1.0, 2.0, 3.0, 4.0],
                       "pos": [1.0, math.inf, 3.0, 4.0], "both": [math.inf, -math.inf, 3.0, 4.0]})
    with pytest.raises(NonFiniteError, match=r"\{'pos': 1, 'both': 2\}"):
        Recipe([op(["ok", "pos", "both"])]).fit(to_backend(df, backend))
    Recipe([op(["ok"])]).fit(to_backend(df, backend))


@pytest.mark.parametrize("quantiles", [(0.0, 1.0), (0.001, 0.999), (0.05, 0.95), (0.3, 0.7), (0.5, 0.6)])
@pytest.mark.parametrize("n", [1, 2, 7, 1000, 20_011])
def test_polars_quantile_bounds_equal_numpy_bit_for_bit(n, quantiles):
    # Polars reads tail order statistics with bottom_k/top_k and interpolates like numpy;
    # deep quantiles go through numpy itself. Either way pandas and polars fit the same bounds.
    rng = np.random.default_rng(n)
    x = rng.normal(size=n) * 1e3
    x[rng.random(n) < 0.1] = np.nan
    x[0] = 1.5  # at least one value
    df = pd.DataFrame({"x": x, "i": rng.integers(-10**6, 10**6, n)})
    got = Recipe([Clip(["x", "i"], quantiles=quantiles)]).fit(to_backend(df, "polars")).ops[0].state
    want = Recipe([Clip(["x", "i"], quantiles=quantiles)]).fit(df).ops[0].state
    assert got == want
    for c in ("x", "i"):
        values = df[c].dropna().to_numpy(dtype=np.float64)
        assert want[c] == [float(v) for v in np.quantile(values, quantiles)]


def test_polars_quantile_bounds_of_a_column_with_nan_or_no_values():
    frame = pl.DataFrame({"x": [1.0, float("nan"), 3.0], "e": [None, None, None]}, schema={"x": pl.Float64, "e": pl.Float64})
    state = Recipe([Clip(["x"], quantiles=(0.1, 0.9))]).fit(frame).ops[0].state
    # NaN is missing on every backend: the bounds are those of [1, 3], as on pandas.
    assert state["x"] == pytest.approx([1.2, 2.8])
    assert state == Recipe([Clip(["x"], quantiles=(0.1, 0.9))]).fit(frame.to_pandas()).ops[0].state
    with pytest.raises(EmptyTableError, match="column 'e' has no non-missing value"):
        Recipe([Clip(["e"], quantiles=(0.1, 0.9))]).fit(frame)


def test_unfitted_recipe_and_bad_arguments_are_rejected(table):
    with pytest.raises(RuntimeError, match="not fitted"):
        Recipe([MinMax(["volt"])]).transform(table)
    half = Recipe([Log(["volt"]), MinMax(["volt"])])  # Log needs no fit: MinMax is the one named
    with pytest.raises(RuntimeError, match=r"op\(s\) 1 \(minmax, columns \['volt'\]\) hold no statistics"):
        half.transform(table)
    with pytest.raises(ValueError, match="non-empty list"):
        MinMax("volt")
    with pytest.raises(ValueError, match="quantiles"):
        Clip(["volt"], quantiles=(0.9, 0.1))
    with pytest.raises(ValueError, match="not a gpufeed recipe"):
        Recipe.from_json('{"ops": []}')
    with pytest.raises(ValueError, match="on_unseen must be one of 'index', 'raise', got 'error'"):
        Categorify(["region"], on_unseen="error")


@pytest.mark.parametrize("backend", ["pandas", "polars"])
def test_splits_count_every_row(table, backend):
    frame = to_backend(table, backend)
    for split in (split_random(frame, seed=3), split_by_group(frame, "station", seed=3),
                  split_by_time(frame, "t")):
        assert sum(split.rows.values()) == len(table)
        assert split.rows["train"] == len(split.train)


def test_random_split_is_reproducible_and_disjoint(table):
    a, b = split_random(table, seed=7), split_random(table, seed=7)
    assert a.val["t"].tolist() == b.val["t"].tolist()
    assert not set(a.train["t"]) & set(a.test["t"])
    assert a.rows == {"train": 1600, "val": 200, "test": 200}


def test_group_split_keeps_groups_whole(table):
    split = split_by_group(table, "station", seed=1)
    groups = [set(p["station"]) for p in (split.train, split.val, split.test)]
    assert not groups[0] & groups[1] and not groups[0] & groups[2] and not groups[1] & groups[2]
    dask_split = split_by_group(to_dask(table, 3), "station", seed=1)
    assert dask_split.rows == split.rows


def test_time_split_puts_the_latest_rows_in_test(table):
    split = split_by_time(table, "t", (0.7, 0.15, 0.15))
    assert split.train["t"].max() < split.val["t"].min() <= split.val["t"].max() < split.test["t"].min()


def test_bad_fractions_are_rejected(table):
    with pytest.raises(ValueError, match="sum"):
        split_random(table, (0.5, 0.2, 0.2))


@pytest.mark.gpu
def test_recipe_rules_and_downcast_on_cudf_match_pandas(table, tmp_path):
    cudf = pytest.importorskip("cudf", reason="cuDF is not installed")

    from gpufeed.datasets.tables import read_table, write_table
    from gpufeed.gpu_transforms.tabular import Rule, apply_rules, col, downcast

    gdf = cudf.from_pandas(table)
    recipe = Recipe(OPS["full"]() + [HashBucket(["station"], 8)]).fit(gdf)
    expected = Recipe(OPS["full"]() + [HashBucket(["station"], 8)]).fit(table).transform(table)
    _assert_same(expected, recipe.transform(gdf).to_pandas())
    rule = Rule("w", [(col("region").isin(["north"]) & (col("volt") > 2), 1.0)], default=0.0)
    assert apply_rules(gdf, [rule])["w"].to_numpy().tolist() == apply_rules(table, [rule])["w"].tolist()
    small, report = downcast(gdf)
    assert report.saved_fraction > 0.3 and small["count"].to_pandas().tolist() == table["count"].tolist()
    back = read_table(write_table(gdf, tmp_path / "t.parquet"), backend="cudf")
    assert isinstance(back, cudf.DataFrame) and len(back) == len(table)


@pytest.mark.gpu
def test_nan_and_missing_values_on_cudf_behave_as_on_pandas():
    cudf = pytest.importorskip("cudf", reason="cuDF is not installed")

    df = pd.DataFrame({"x": [1.0, np.nan, 3.0, None, 9.0], "t": [1.0, 2.0, np.nan, 4.0, 5.0]})
    native = cudf.DataFrame({"x": cudf.Series([1.0, np.nan, 3.0, None, 9.0], nan_as_null=False),
                             "t": cudf.Series([1.0, 2.0, np.nan, 4.0, 5.0], nan_as_null=False)})
    for ops in ([FillMissing(["x"])], [Log(["x"])], [Standardize(["x"])]):
        _assert_same(Recipe(ops).fit_transform(df), Recipe(ops).fit_transform(native).to_pandas())
    assert split_by_time(native, "t", cutoffs=(3, 5)).rows == split_by_time(df, "t", cutoffs=(3, 5)).rows


@pytest.mark.parametrize("backend", ["pandas", "polars"])
def test_a_constant_fill_must_be_of_the_columns_kind(backend):
    df = to_backend(pd.DataFrame({"n": [1.0, None], "s": ["a", None], "b": pd.array([True, None], dtype="boolean"),
                                  "d": pd.to_datetime(["2024-01-01", None])}), backend)
    for column, value, words in [("n", "zero", "needs a number"), ("s", 5, "needs text (value='5')"),
                                 ("b", 0.0, "needs True or False"), ("d", 5, "needs an ISO date/time")]:
        with pytest.raises(ColumnTypeError, match=rf"constant {re.escape(repr(value))} cannot fill column .{column}.*{re.escape(words)}"):
            Recipe([FillMissing([column], strategy="constant", value=value)]).fit(df)
    out = Recipe([FillMissing(["d"], strategy="constant", value="2024-02-01"),
                  FillMissing(["b"], strategy="constant", value=False)]).fit_transform(df)
    out = _as_pandas(out)
    assert out["d"].tolist() == [pd.Timestamp("2024-01-01"), pd.Timestamp("2024-02-01")]
    assert out["b"].tolist() == [True, False]
    # a column with no value at all has no kind yet: a number fills it as floats on every backend
    gaps = _as_pandas(Recipe([FillMissing(["g"], strategy="constant", value=5)]).fit_transform(
        to_backend(pd.DataFrame({"g": [None, None]}), backend)))
    assert gaps["g"].dtype == np.float64 and gaps["g"].tolist() == [5.0, 5.0]


@pytest.mark.parametrize("backend", ["pandas", "polars"])
def test_a_constant_fill_takes_numpy_numbers_and_timestamps_and_saves_as_json(backend):
    df = to_backend(pd.DataFrame({"n": [1.0, None], "i": pd.array([3, None], dtype="Int64"),
                                  "d": pd.to_datetime(["2024-01-01", None])}), backend)
    recipe = Recipe([FillMissing(["n"], strategy="constant", value=np.float32(1.5)),
                     FillMissing(["i"], strategy="constant", value=np.int64(0)),
                     FillMissing(["d"], strategy="constant", value=pd.Timestamp("2024-02-01"))])
    out = _as_pandas(recipe.fit_transform(df))
    assert out["n"].tolist() == [1.0, 1.5] and out["i"].tolist() == [3, 0]
    assert out["d"].tolist() == [pd.Timestamp("2024-01-01"), pd.Timestamp("2024-02-01")]
    again = _as_pandas(Recipe.from_json(recipe.to_json()).transform(df))  # numpy values are no JSON
    pd.testing.assert_frame_equal(again, out)


def test_a_recipe_holding_values_json_has_no_form_for_names_the_op():
    # The ops convert what they fit; a state set by other code (a subclass, a hand edit)
    # is still named by op when the recipe is written.
    recipe = Recipe([Log(["x"]), Standardize(["x"], by="day")]).fit(
        pd.DataFrame({"day": ["a", "a", "b"], "x": [1.0, 2.0, 3.0]}))
    recipe.ops[1].state["groups"]["x"][0][0] = pd.Timestamp("2024-01-01")
    with pytest.raises(ValueError, match=r"recipe op 1 \(standardize, columns \['x'\]\).*Timestamp"):
        recipe.to_json()


def test_scaling_ops_give_the_same_bits_on_pandas_and_polars():
    df = pd.DataFrame({"x": np.random.default_rng(0).normal(3, 7, 20_000)})
    for op in (MinMax, Standardize):
        # One fitted recipe: the same statistics scale both backends to the same bits.
        recipe = Recipe([op(["x"])]).fit(df)
        on_pandas = recipe.transform(df)["x"].to_numpy()
        on_polars = recipe.transform(pl.from_pandas(df))["x"].to_numpy()
        np.testing.assert_array_equal(on_pandas, on_polars, err_msg=op.__name__)  # x/c differed from x*(1/c)
        # Fitted on each backend: its own reductions, whose last bit may differ (the std
        # pandas takes from NumPy 2.2, the newest on Python 3.10, was 1 ulp off polars').
        fitted = Recipe([op(["x"])]).fit(pl.from_pandas(df)).transform(pl.from_pandas(df))["x"].to_numpy()
        np.testing.assert_allclose(fitted, on_pandas, rtol=1e-15, atol=1e-15, err_msg=op.__name__)


def test_hash_buckets_agree_whatever_type_a_backend_gave_the_value():
    # pandas reads an integer id column with gaps as floats, polars keeps integers; pandas
    # has no date type, polars does.
    assert stable_hash(130.0, 64) == stable_hash(130, 64) == stable_hash(np.int32(130), 64)
    assert stable_hash(pd.Timestamp("2024-03-01"), 64) == stable_hash(datetime.date(2024, 3, 1), 64)
    assert stable_hash(pd.Timestamp("2024-03-01 10:00"), 64) != stable_hash(pd.Timestamp("2024-03-01"), 64)
    assert stable_hash(0.5, 64) != stable_hash(5, 64)
    ids = pd.DataFrame({"id": [130, None, 7, 130], "day": pd.to_datetime(["2024-03-01", "2024-03-02", None, "2024-03-01"])})
    on_pandas = Recipe([HashBucket(["id", "day"], buckets=64)]).fit_transform(ids)  # id: float64 here
    native = pl.select(id=pl.Series([130, None, 7, 130], dtype=pl.Int64),
                       day=pl.Series(["2024-03-01", "2024-03-02", None, "2024-03-01"]).str.to_date())
    on_polars = Recipe([HashBucket(["id", "day"], buckets=64)]).fit_transform(native)
    assert on_pandas["id"].tolist() == on_polars["id"].to_list()
    assert on_pandas["day"].tolist() == on_polars["day"].to_list()


@pytest.mark.parametrize("backend", ["pandas", "polars"])
def test_split_by_time_refuses_a_text_column(backend):
    df = to_backend(pd.DataFrame({"when": ["1/2/2024", "1/10/2024", "1/3/2024"]}), backend)
    with pytest.raises(ColumnTypeError, match="'when' holds text"):
        split_by_time(df, "when", cutoffs=("1/3/2024", None))
    objects = to_backend(pd.DataFrame({"when": pd.Series(["1/2/2024", "1/10/2024", "1/3/2024"], dtype=object)}),
                         backend)
    with pytest.raises(ColumnTypeError, match="'when' holds text"):
        split_by_time(objects, "when", cutoffs=("1/3/2024", None))


def test_split_by_time_splits_a_column_of_dates_in_time_order():
    days = pd.date_range("2024-01-01", periods=10, freq="D")
    df = pd.DataFrame({"day": days.date, "x": range(10)})  # .dt.date: an object column of datetime.date
    split = split_by_time(df, "day", (0.8, 0.1, 0.1))
    assert split.rows == {"train": 8, "val": 1, "test": 1}
    assert split.test["x"].tolist() == [9]
    by_text = split_by_time(df, "day", cutoffs=("2024-01-09", "2024-01-10"))  # ISO text read as dates
    assert by_text.rows == {"train": 8, "val": 1, "test": 1}
    objects = pl.DataFrame({"day": pl.Series(list(days.date), dtype=pl.Object)})  # polars cannot sort these
    with pytest.raises(ColumnTypeError, match="'day' holds date objects"):
        split_by_time(objects, "day", (0.8, 0.1, 0.1))


@pytest.mark.parametrize("backend", ["pandas", "polars"])
def test_split_by_time_puts_nan_times_in_train_and_returns_the_rows_unchanged(backend):
    data = {"t": [1.0, np.nan, 3.0, 4.0, 5.0], "x": [0.5, np.nan, 1.5, 2.5, 3.5]}
    df = pl.DataFrame(data) if backend == "polars" else pd.DataFrame(data)  # polars: NaN, not null
    split = split_by_time(df, "t", cutoffs=(3.0, 5.0))
    assert split.rows == {"train": 2, "val": 2, "test": 1}
    train = _as_pandas(split.train)
    if backend == "polars":  # NaN stays NaN in the rows handed back (not made null)
        assert split.train["t"].is_nan().sum() == 1 and split.train["x"].is_nan().sum() == 1
    assert train["t"].isna().sum() == 1 and train["t"].max() == 1.0


# Missing values: pandas hands out NaN (not None) for a missing text key, and polars keeps
# NaN apart from null; both must mean "missing" and give the same result on every backend.
@pytest.fixture
def gappy() -> pd.DataFrame:
    return pd.DataFrame({"c": ["u", "v", None, "u", "v", "w"], "k": [1.0, 2.0, np.nan, 1.0, 2.0, 3.0],
                         "x": [1.0, 2.0, 3.0, 4.0, 6.0, 8.0]})


def _both(df: pd.DataFrame, ops) -> tuple[pd.DataFrame, pd.DataFrame]:
    on_pandas = Recipe(ops()).fit_transform(df)
    on_polars = Recipe(ops()).fit_transform(pl.from_pandas(df, nan_to_null=False)).to_pandas()
    return on_pandas, on_polars


@pytest.mark.parametrize("ops", [
    lambda: [Categorify(["c", "k"])],
    lambda: [Standardize(["x"], by="c")],
    lambda: [Standardize(["x"], by="k")],
    lambda: [HashBucket(["c", "k"], buckets=7)],
], ids=["categorify", "standardize-by-text", "standardize-by-float", "hash"])
def test_missing_keys_mean_missing_on_every_backend(gappy, ops):
    on_pandas, on_polars = _both(gappy, ops)
    pd.testing.assert_frame_equal(on_pandas.reset_index(drop=True), on_polars, check_dtype=False)
    recipe = Recipe(ops()).fit(gappy)
    assert "NaN" not in recipe.to_json()  # strict JSON for serving
    if isinstance(recipe.ops[0], Categorify):
        assert on_pandas["c"].tolist() == [2, 3, MISSING_INDEX, 2, 3, 4]
        assert on_pandas["k"].tolist() == [2, 3, MISSING_INDEX, 2, 3, 4]
    if isinstance(recipe.ops[0], Standardize):  # the row with a missing key uses the global statistics
        mean, std = gappy["x"].mean(), gappy["x"].std(ddof=0)
        assert on_pandas["x"][2] == pytest.approx((3.0 - mean) / std)


def test_nan_in_a_polars_frame_is_missing_like_on_pandas():
    df = pd.DataFrame({"x": [1.0, np.nan, 3.0, 10.0]})
    ops = lambda: [FillMissing(["x"]), MinMax(["x"])]  # noqa: E731
    on_pandas, on_polars = _both(df, ops)
    assert on_polars["x"].tolist() == on_pandas["x"].tolist() == pytest.approx([0.0, 11 / 27, 2 / 9, 1.0])
    native = pl.DataFrame({"x": [1.0, float("nan")], "other": [float("nan"), 1.0]})
    out = Recipe([FillMissing(["x"], strategy="constant", value=0.0)]).fit_transform(native)
    assert out["x"].to_list() == [1.0, 0.0]
    assert math.isnan(out["other"][0])  # columns the recipe does not read keep their NaN


def test_split_by_group_with_missing_keys_counts_each_row_once(gappy):
    for frame in (gappy, pl.from_pandas(gappy, nan_to_null=False)):
        for key in ("c", "k"):
            split = split_by_group(frame, key, (0.34, 0.33, 0.33), seed=0)
            assert sum(split.rows.values()) == len(gappy)
            assert split.rows["train"] >= 1  # the missing-key row goes to train


def test_split_by_time_with_no_val_or_test_keeps_every_row_in_train(table):
    assert split_by_time(table, "t", (1.0, 0.0, 0.0)).rows == {"train": len(table), "val": 0, "test": 0}
    assert split_by_time(table, "t", (0.5, 0.5, 0.0)).rows == {"train": 1000, "val": 1000, "test": 0}


def test_too_few_groups_for_the_fractions_warn(table):
    with pytest.warns(UserWarning, match="val got no group"):
        split_by_group(table.head(6).assign(g=[1, 1, 2, 2, 3, 3]), "g", (0.8, 0.1, 0.1))


@pytest.mark.parametrize("backend", ["pandas", "polars"])
def test_split_by_time_on_repeating_times_warns_of_an_empty_part(backend):
    # Survey years: rows sharing a year stay together, so 80/10/10 of three years cannot
    # fill val; the user hears it instead of finding an empty validation set later.
    years = to_backend(pd.DataFrame({"year": [2007] * 4 + [2008] * 3 + [2009] * 3}), backend)
    with pytest.warns(UserWarning, match="'year' repeat too much.*val got no row"):
        split = split_by_time(years, "year", (0.8, 0.1, 0.1))
    assert split.rows == {"train": 7, "val": 0, "test": 3}


@pytest.mark.parametrize("backend", ["pandas", "polars"])
def test_clip_to_fractional_bounds_makes_integers_float_on_every_backend(backend):
    out = Recipe([Clip(["n"], lower=0.5, upper=2.5)]).fit_transform(to_backend(pd.DataFrame({"n": [0, 1, 2, 3]}), backend))
    assert list(out["n"]) == [0.5, 1.0, 2.0, 2.5]
    kept = Recipe([Clip(["n"], lower=1, upper=2)]).fit_transform(to_backend(pd.DataFrame({"n": [0, 1, 2, 3]}), backend))
    assert list(kept["n"]) == [1, 1, 2, 2] and str(kept["n"].dtype).lower().startswith("int")


def _values_and_dtype(series) -> tuple[list, str]:
    """Values as Python numbers (missing: None) and the dtype's name in lower case, so a
    pandas (numpy or nullable) and a polars column compare."""
    values = series.to_list() if isinstance(series, pl.Series) else [None if pd.isna(v) else v for v in series]
    return [v if v is None else (float(v) if isinstance(v, float | np.floating) else int(v)) for v in values], \
        str(series.dtype).lower()


def test_clip_and_fill_of_small_integer_columns_give_one_answer_on_every_backend():
    # downcast() makes a count column uint8 and an integer column with gaps Int8. Clip to a
    # bound beyond uint8 failed on polars in its own words (and a pandas nullable column
    # wrapped 1000 round to 232); a fill beyond Int8 raised numpy's OverflowError on pandas.
    df = pd.DataFrame({"n": [0, 3, 7, 250], "g": pd.array([1, None, 3, -100], dtype="Int64")})
    cases = [
        (Clip(["n"], upper=1000), [0, 3, 7, 250], "uint8"),          # beyond the type: no clip
        (Clip(["n"], lower=-1, upper=100), [0, 3, 7, 100], "uint8"),  # one side beyond, one inside
        (Clip(["n"], lower=1000), [1000] * 4, "uint16"),              # every value becomes the bound
        (Clip(["n"], upper=-5), [-5] * 4, "int16"),
        (Clip(["n"], lower=-0.5, upper=100.5), [0.0, 3.0, 7.0, 100.5], "float64"),  # fractional: floats
        (Clip(["g"], lower=1000), [1000, None, 1000, 1000], "int16"),
        (FillMissing(["g"], strategy="constant", value=1000), [1, 1000, 3, -100], "int16"),
        (FillMissing(["g"], strategy="constant", value=1000.0), [1, 1000, 3, -100], "int16"),
        (FillMissing(["n"], strategy="constant", value=-1), [0, 3, 7, 250], "int16"),  # no gap: same dtype
        (FillMissing(["g"], strategy="median"), [1, 1, 3, -100], "int8"),
    ]
    for backend in ("pandas", "polars"):
        small, _ = downcast(to_backend(df, backend))
        assert [str(d).lower() for d in small.dtypes] == ["uint8", "int8"]
        for op, values, dtype in cases:
            recipe = Recipe([copy.deepcopy(op)])
            out = recipe.fit_transform(small)
            assert _values_and_dtype(out[op.columns[0]]) == (values, dtype), (backend, op)
            again = Recipe.from_json(recipe.to_json()).transform(small)  # the saved recipe: the same
            assert _values_and_dtype(again[op.columns[0]]) == (values, dtype), (backend, op)
        wide = to_backend(pd.DataFrame({"u": pd.array([1, None], dtype="UInt64")}), backend)
        with pytest.raises(ColumnTypeError, match=r"FillMissing: fill value -1 does not fit column 'u' \(UInt64\)"):
            Recipe([FillMissing(["u"], strategy="constant", value=-1)]).fit_transform(wide)
        with pytest.raises(ColumnTypeError, match=r"Clip: bound -5 .* column 'u' \(UInt64\)"):
            Recipe([Clip(["u"], upper=-5)]).fit_transform(wide)


@pytest.mark.parametrize("dtype", ["uint8", "int8", "uint16", "uint64"])
def test_scaling_ops_on_small_integer_columns_agree_with_numpy_on_every_backend(dtype):
    info = np.iinfo(dtype)
    values = np.array([info.min, 0, 1, info.max // 2, info.max - 1, info.max], dtype=dtype)
    wide = values.astype(np.float64)
    expected = {"minmax": (wide - wide.min()) / (wide.max() - wide.min()),
                "standardize": (wide - wide.mean()) / wide.std(),
                "log": np.log(wide - wide.min() + 1.0)}
    for backend in ("pandas", "polars"):
        frame = to_backend(pd.DataFrame({"c": values}), backend)
        offset = 1 - int(info.min)  # Log(offset=1) when the type has no negatives
        for name, op in (("minmax", MinMax(["c"])), ("standardize", Standardize(["c"])),
                         ("log", Log(["c"], offset=offset))):
            out = Recipe([op]).fit_transform(frame)["c"]
            assert str(out.dtype).lower() == "float64", (backend, name)
            np.testing.assert_allclose(out.to_numpy(), expected[name], rtol=1e-12, atol=1e-15, err_msg=f"{backend} {name}")
    # An integer offset added in the column's own type wrapped round (int8 127 + 1 = -128),
    # so the count of bad values named the maximum too.
    for backend in ("pandas", "polars"):
        frame = to_backend(pd.DataFrame({"c": np.array([-1, 5, 127], dtype="int8")}), backend)
        with pytest.raises(NonFiniteError, match=r"\{'c': 1\}"):
            Recipe([Log(["c"], offset=1)]).fit(frame)


@pytest.mark.parametrize("backend", ["pandas", "polars"])
def test_clip_quantiles_refuse_inf_at_a_bound(backend):
    df = to_backend(pd.DataFrame({"x": [np.inf, 1.0, 2.0, 3.0, 100.0]}), backend)
    with pytest.raises(NonFiniteError, match="'x'"):
        Recipe([Clip(["x"], quantiles=(0.1, 0.9))]).fit(df)
    many = to_backend(pd.DataFrame({"x": [*range(99), np.inf]}), backend)  # inf beyond a finite bound: clipped
    out = Recipe([Clip(["x"], quantiles=(0.0, 0.9))]).fit_transform(many)
    assert max(out["x"]) == pytest.approx(89.1)


def test_float32_columns_are_fitted_in_float64_on_every_backend():
    rng = np.random.default_rng(0)
    values = rng.uniform(0, 5, 100_000).astype(np.float32)
    df = pd.DataFrame({"v": values, "g": rng.choice(["a", "b"], values.size)})
    ops = lambda: [FillMissing(["v"]), Standardize(["v"], by="g"), MinMax(["v"])]  # noqa: E731
    fitted = [Recipe(ops()).fit(frame) for frame in (df, pl.from_pandas(df))]
    truth = float(np.mean(values.astype(np.float64)))
    assert fitted[0].ops[0].state["v"] == pytest.approx(truth, rel=1e-12)
    assert fitted[1].ops[0].state["v"] == pytest.approx(truth, rel=1e-12)
    on_pandas, on_polars = _both(df, ops)
    np.testing.assert_allclose(on_pandas["v"], on_polars["v"], rtol=0, atol=1e-12)


@pytest.mark.parametrize("backend", ["pandas", "polars"])
def test_fill_missing_dtype_is_the_same_on_every_backend(backend):
    df = to_backend(pd.DataFrame({"n": [1, 2, 4]}), backend)
    mean = Recipe([FillMissing(["n"])]).fit_transform(df)  # mean 2.33: a fractional fill makes it float
    const = Recipe([FillMissing(["n"], strategy="constant", value=0.0)]).fit_transform(df)
    assert str(mean["n"].dtype).lower().startswith("float")
    assert str(const["n"].dtype).lower().startswith("int")


def test_loading_a_file_that_is_not_a_recipe_names_it(tmp_path):
    bad = tmp_path / "model.bin"
    bad.write_bytes(b"\x89\xff\x00binary")
    with pytest.raises(ValueError, match="model.bin: not a gpufeed recipe"):
        Recipe.load(bad)


@pytest.mark.parametrize("tz", [None, "UTC"])
def test_split_by_time_takes_iso_text_cutoffs_on_every_backend(tz):
    df = pd.DataFrame({"t": pd.date_range("2024-01-01", periods=10, freq="D", tz=tz)})
    for frame in (df, pl.from_pandas(df)):
        assert split_by_time(frame, "t", cutoffs=("2024-01-05", "2024-01-08")).rows == {"train": 4, "val": 3, "test": 3}
    with pytest.raises(ValueError, match="not an ISO date"):
        split_by_time(pl.from_pandas(df), "t", cutoffs=("soon", "later"))


@pytest.mark.parametrize("backend", ["pandas", "polars"])
def test_split_by_time_reads_every_kind_of_cutoff_alike_on_every_backend(backend):
    # A column in New York time, 17:00 on 9 March to 00:00 on 10 March. pandas compared an
    # aware cutoff in another zone, polars refused it; a date failed on pandas and was UTC
    # midnight on polars; naive datetimes failed on both in the libraries' words.
    times = pd.date_range("2024-03-09 22:00", periods=8, freq="h", tz="UTC").tz_convert("America/New_York")
    frame = to_backend(pd.DataFrame({"t": times, "x": range(8)}), backend)
    utc = datetime.timezone.utc
    instants = [(pd.Timestamp("2024-03-10 01:00", tz="UTC"), pd.Timestamp("2024-03-10 03:00", tz="UTC")),
                (datetime.datetime(2024, 3, 10, 1, tzinfo=utc), datetime.datetime(2024, 3, 10, 3, tzinfo=utc)),
                ("2024-03-10T01:00+00:00", "2024-03-10T03:00+00:00"),
                # wall-clock times in the column's zone, as ISO text without an offset
                ("2024-03-09 20:00", "2024-03-09 22:00"),
                (datetime.datetime(2024, 3, 9, 20), pd.Timestamp("2024-03-09 22:00")),
                (np.datetime64("2024-03-09T20:00"), np.datetime64("2024-03-09T22:00:00.000000000"))]
    for cutoffs in instants:
        split = split_by_time(frame, "t", cutoffs=cutoffs)
        assert split.rows == {"train": 3, "val": 2, "test": 3}, cutoffs
        assert list(split.val["x"]) == [3, 4]
    for cutoffs in [("2024-03-10", "2024-03-11"), (datetime.date(2024, 3, 10), datetime.date(2024, 3, 11))]:
        assert split_by_time(frame, "t", cutoffs=cutoffs).rows == {"train": 7, "val": 1, "test": 0}  # local midnight
    with pytest.raises(ColumnTypeError, match=r"cutoffs\[0\] 1 \(int\) cannot cut the datetime \(time zone America/New_York\)"):
        split_by_time(frame, "t", cutoffs=(1, 2))
    with pytest.raises(ValueError, match=r"cutoffs\[1\] is missing \(NaT\)"):
        split_by_time(frame, "t", cutoffs=("2024-03-10", pd.NaT))
    with pytest.raises(ValueError, match=r"cutoffs\[0\] '2024-03-10 02:30' .*America/New_York.*daylight-saving"):
        split_by_time(frame, "t", cutoffs=("2024-03-10 02:30", None))
    naive = to_backend(pd.DataFrame({"t": times.tz_localize(None)}), backend)
    assert split_by_time(naive, "t", cutoffs=instants[4]).rows == {"train": 3, "val": 2, "test": 3}  # wall times
    with pytest.raises(ColumnTypeError, match=r"cutoffs\[0\] .* has a time zone \(UTC\), but column 't' .* has none"):
        split_by_time(naive, "t", cutoffs=instants[0])
    with pytest.raises(ColumnTypeError, match=r"cutoffs\[1\] '9' \(str\) cannot cut column 'x'"):
        split_by_time(frame, "x", cutoffs=(3, "9"))


def test_infinite_fixed_clip_bounds_mean_no_bound_and_the_json_stays_strict():
    df = pd.DataFrame({"x": [-5.0, 1.0, 9.0]})
    recipe = Recipe([Clip(["x"], lower=0.0, upper=math.inf)]).fit(df)
    assert list(recipe.transform(df)["x"]) == [0.0, 1.0, 9.0]
    assert Recipe.from_json(recipe.to_json()).transform(df).equals(recipe.transform(df))
    with pytest.raises(ValueError, match="lower is NaN"):
        Clip(["x"], lower=math.nan)
    odd = Recipe([FillMissing(["x"], strategy="constant", value=math.nan)]).fit(df)
    with pytest.raises(ValueError, match=r"recipe op 0 \(fill_missing, columns \['x'\]\)"):
        odd.to_json()


@pytest.mark.parametrize("op", [FillMissing(["v"]), FillMissing(["v"], strategy="median"),
                                FillMissing(["v"], strategy="constant", value=0.1)])
def test_fill_missing_keeps_float32_columns_float32_and_equal_on_every_backend(op):
    # downcast() makes float32 columns: pandas filled them into float64 around the float64
    # statistic while polars kept float32, so the backends differed by ~2e-7.
    df = pd.DataFrame({"v": np.array([1.1, np.nan, 2.3, 3.7, np.nan], dtype=np.float32)})
    on_pandas = Recipe([copy.deepcopy(op)]).fit_transform(df)
    on_polars = Recipe([copy.deepcopy(op)]).fit_transform(to_backend(df, "polars"))
    assert on_pandas["v"].dtype == np.float32 and on_polars["v"].dtype == pl.Float32
    np.testing.assert_array_equal(on_pandas["v"].to_numpy(), on_polars["v"].to_numpy())


def test_clip_keeps_float32_columns_float32_on_every_backend():
    df = pd.DataFrame({"v": np.linspace(0, 10, 50, dtype=np.float32)})
    ops = lambda: [Clip(["v"], quantiles=(0.1, 0.9))]  # noqa: E731
    on_pandas, on_polars = _both(df, ops)
    assert on_pandas["v"].dtype == np.float32 and on_polars["v"].dtype == np.float32
    np.testing.assert_array_equal(on_pandas["v"].to_numpy(), on_polars["v"].to_numpy())


def test_split_by_time_reads_nan_times_as_missing_on_polars():
    df = pd.DataFrame({"t": [1, 2, np.nan, 3, 4, 5, 6, 7, 8, 9.0]})
    native = pl.from_pandas(df, nan_to_null=False)
    for kwargs in ({"fractions": (0.6, 0.2, 0.2)}, {"cutoffs": (5, 8)}):
        assert split_by_time(native, "t", **kwargs).rows == split_by_time(df, "t", **kwargs).rows
    assert split_by_time(native, "t", cutoffs=(5, 8)).rows == {"train": 5, "val": 3, "test": 2}


def test_a_lazy_polars_recipe_stays_lazy_and_reads_nan_as_missing():
    lazy = pl.LazyFrame({"x": [1.0, float("nan"), 3.0]})
    recipe = Recipe([FillMissing(["x"])]).fit(lazy)
    assert recipe.ops[0].state["x"] == 2.0
    out = recipe.transform(lazy)
    assert isinstance(out, pl.LazyFrame) and out.collect()["x"].to_list() == [1.0, 2.0, 3.0]


def test_per_group_statistics_of_many_float32_columns_match_across_backends():
    rng = np.random.default_rng(1)
    n = 5000
    df = pd.DataFrame({f"f{i}": rng.normal(i, 1 + i, n).astype(np.float32) for i in range(20)}
                      | {"w": rng.normal(0, 1, n), "g": rng.choice(["a", "b", None], n)})
    columns = [*(f"f{i}" for i in range(20)), "w"]  # more float32 columns than one cast pass takes
    ops = lambda: [Standardize(columns, by="g")]  # noqa: E731
    on_pandas, on_polars = _both(df, ops)
    np.testing.assert_allclose(on_pandas[columns].to_numpy(), on_polars[columns].to_numpy(), rtol=1e-12, atol=1e-12)
    state = Recipe(ops()).fit(df).ops[0].state
    truth = df.loc[df["g"] == "a", "f19"].astype(np.float64)
    assert dict((k, v) for k, *v in state["groups"]["f19"])["a"] == pytest.approx([truth.mean(), truth.std(ddof=0)])


@pytest.mark.parametrize("kind", ["object", "str", "category", "int", "float", "empty-vocabulary"])
@pytest.mark.parametrize("backend", ["pandas", "polars"])
def test_categorify_codes_every_column_kind_as_the_reference_does(kind, backend):
    # The fast paths (pandas: factorise then look up the distinct values; polars: an Enum)
    # against the plain definition: vocabulary index + 2, 1 for missing, 0 for unseen.
    train_values = {"object": ["b", "a", None, "c", "a"], "str": ["b", "a", None, "c", "a"],
                    "category": ["b", "a", None, "c", "a"], "int": [3, 1, 2, 3, 1],
                    "float": [2.5, 1.0, np.nan, 7.0, 1.0], "empty-vocabulary": ["x", "y", None, "z", "w"]}[kind]
    test_values = {"object": ["a", "zz", None, "c"], "str": ["a", "zz", None, "c"],
                   "category": ["a", "zz", None, "c"], "int": [1, 9, 3, 2],
                   "float": [1.0, 9.5, np.nan, 7.0], "empty-vocabulary": ["x", "q", None, "w"]}[kind]
    dtype = {"str": "str", "category": "category"}.get(kind, "object" if kind in ("object", "empty-vocabulary") else None)
    train, test = (pd.DataFrame({"c": pd.Series(v, dtype=dtype)}) for v in (train_values, test_values))
    recipe = Recipe([Categorify(["c"], min_count=2 if kind == "empty-vocabulary" else 1)]).fit(train)
    vocab = recipe.ops[0].state["c"]
    expected = [1 if pd.isna(v) else (vocab.index(v) + 2 if v in vocab else 0) for v in test_values]
    got = _as_pandas(recipe.transform(to_backend(test, backend)))["c"]
    assert got.tolist() == expected and str(got.dtype) == "int32"


@pytest.mark.parametrize("min_count", [1, 2])
def test_categorify_fit_transform_in_one_pass_equals_fit_then_transform(min_count):
    df = pd.DataFrame({"a": pd.Series(["b", "a", None, "c", "a", "b", "z"], dtype="str"),
                       "n": [3.0, 1.0, 2.0, np.nan, 1.0, 3.0, 9.0],
                       "k": pd.Categorical(["x", "y", "x", None, "y", "y", "w"])})
    one = Recipe([Categorify(["a", "n", "k"], min_count=min_count)])
    together = one.fit_transform(df)
    two = Recipe([Categorify(["a", "n", "k"], min_count=min_count)]).fit(df)
    assert one.ops[0].state == two.ops[0].state
    pd.testing.assert_frame_equal(together, two.transform(df))


def test_categorify_on_eager_polars_fits_and_codes_in_one_pass_like_pandas():
    # Text (with gaps, non-ASCII, many values) and integer columns (with gaps, negative)
    # take polars' one-pass path; the vocabulary and codes must equal pandas' and the
    # two-pass fit-then-transform's.
    rng = np.random.default_rng(3)
    # Beyond ASCII, the BMP's end and an astral character: polars sorts the text, which
    # must give Python's code-point order.
    text = rng.choice([f"v{i:04d}" for i in range(700)] + ["Zürich", "ärger", "b", "", "\uff5a", "\U0001d11e"],
                      5000).astype(object)
    text[rng.random(5000) < 0.05] = None
    ints = pd.array(rng.integers(-50, 400, 5000), dtype="Int64")
    ints[rng.random(5000) < 0.05] = None
    wide = pd.array(rng.integers(-10**15, 10**15, 5000) // 10**12 * 10**12, dtype="Int64")  # searched, not tabled
    wide[rng.random(5000) < 0.05] = None
    df = pd.DataFrame({"t": text, "i": ints, "u": rng.integers(0, 9, 5000), "w": wide})
    frame = to_backend(df, "polars")
    cols = ["t", "i", "u", "w"]
    one = Recipe([Categorify(cols)])
    together = one.fit_transform(frame)
    two = Recipe([Categorify(cols)]).fit(frame)
    on_pandas = Recipe([Categorify(cols)])
    expected = on_pandas.fit_transform(df)
    assert one.ops[0].state == two.ops[0].state == on_pandas.ops[0].state
    assert together.equals(two.transform(frame))
    for c in cols:
        assert str(together[c].dtype) == "Int32"
        assert together[c].to_list() == expected[c].tolist(), c


@pytest.fixture(scope="module")
def mixed_types() -> pd.DataFrame:
    """The column kinds of a real survey table (palmerpenguins): a categorical, text with
    missing values, a date, a boolean and a float with missing values."""
    return pd.DataFrame({
        "species": pd.Categorical(["Adelie", "Gentoo", "Adelie", "Chinstrap"]),
        "sex": ["male", None, "female", "male"],
        "egg_date": pd.to_datetime(["2007-11-11", "2007-11-16", "2008-11-09", "2009-11-18"]),
        "clutch": [True, False, True, True],
        "mass": [3750.0, np.nan, 3250.0, 4500.0],
    })


@pytest.mark.parametrize("backend", ["pandas", "polars"])
@pytest.mark.parametrize(("op", "column"), [
    (Log(["sex"]), "sex"), (Log(["species"]), "species"), (Standardize(["sex"]), "sex"),
    (Standardize(["mass", "egg_date"], by="sex"), "egg_date"), (MinMax(["species"]), "species"),
    (FillMissing(["sex"]), "sex"), (FillMissing(["sex"], strategy="median"), "sex"),
    (Clip(["sex"], lower=0), "sex"), (Clip(["egg_date"], quantiles=(0.1, 0.9)), "egg_date"),
    (Clip(["clutch"], lower=0, upper=1), "clutch"), (FillMissing(["clutch"]), "clutch"),
])
def test_numeric_op_on_text_dates_or_categories_names_the_column(mixed_types, backend, op, column):
    # Each backend used to fail in its own words without the column ("can only concatenate
    # str (not "float") to str"), and polars clipped dates to quantiles fitted as raw ticks.
    frame = to_backend(mixed_types, backend)
    with pytest.raises(ColumnTypeError, match=rf"recipe op 0 \({op.kind}\) works on .*'{column}'"):
        Recipe([op]).fit(frame)
    with pytest.raises(ColumnTypeError, match=f"'{column}'"):
        Recipe([op]).fit_transform(frame)


@pytest.fixture
def nested() -> object:
    """Columns of Parquet files from other tools that hold no numbers: a list, a struct and
    a column with every value missing (polars reads it as Null, pandas as object)."""
    import pyarrow as pa

    return pa.table({"tags": pa.array([["a"], ["b", "c"], None]),
                     "point": pa.array([{"x": 1.0}, {"x": 2.0}, None]),
                     "empty": pa.array([None, None, None], pa.null()),
                     "x": [1.0, 2.0, 3.0]})


@pytest.mark.parametrize("backend", ["pandas", "polars"])
@pytest.mark.parametrize(("op", "column"), [
    (Standardize(["point"]), "point"), (MinMax(["tags"]), "tags"), (Log(["tags"]), "tags"),
    (Standardize(["empty"]), "empty"), (FillMissing(["empty"]), "empty"), (Clip(["empty"], lower=0), "empty"),
])
def test_numeric_op_on_nested_or_all_missing_columns_names_the_column(nested, backend, op, column):
    # pandas failed in numpy's words ("Could not convert {'x': 1.0} to numeric", "truth value
    # of an array"), polars on an all-null column in its own ("abs operation not supported").
    frame = nested.to_pandas() if backend == "pandas" else pl.from_arrow(nested)
    with pytest.raises(ColumnTypeError, match=rf"works on .*'{column}'"):
        Recipe([op]).fit(frame)


@pytest.mark.parametrize("backend", ["pandas", "polars"])
@pytest.mark.parametrize("fit_transform", [False, True])
def test_categorify_of_a_list_column_names_the_column(nested, backend, fit_transform):
    frame = nested.to_pandas() if backend == "pandas" else pl.from_arrow(nested)
    recipe = Recipe([Categorify(["x", "tags"])])
    with pytest.raises(TypeError, match="Categorify: column 'tags' holds .* values"):
        recipe.fit_transform(frame) if fit_transform else recipe.fit(frame)


@pytest.mark.parametrize("op", [FillMissing(["x"]), Standardize(["x"]), MinMax(["x"]), Log(["x"]),
                                Clip(["x"], lower=0, upper=1)])
@pytest.mark.parametrize("batch", [pd.DataFrame({"x": [None]}), pl.DataFrame({"x": [None]})],
                         ids=["pandas-object", "polars-null"])
def test_an_all_missing_column_of_a_served_batch_is_transformed_not_refused(op, batch):
    # A one-row batch with a gap: pandas holds it as object, polars as Null. It used to
    # be refused on pandas ("String") and fail in polars' words for Clip.
    fitted = Recipe([op]).fit(pd.DataFrame({"x": [1.0, 2.0, np.nan]}))
    out = to_backend(fitted.transform(batch), "pandas")["x"]
    assert out.dtype == "float64"
    assert out.tolist() == [1.5] if isinstance(op, FillMissing) else math.isnan(out.iloc[0])


@pytest.mark.parametrize("backend", ["pandas", "polars"])
def test_numeric_op_type_check_is_also_made_at_transform(mixed_types, backend):
    fitted = Recipe([MinMax(["mass"])]).fit(to_backend(mixed_types, backend))
    renamed = to_backend(mixed_types.drop(columns="mass").rename(columns={"sex": "mass"}), backend)
    with pytest.raises(ColumnTypeError, match="'mass'"):
        fitted.transform(renamed)


@pytest.mark.parametrize("backend", ["pandas", "polars"])
def test_ops_still_take_booleans_and_constant_fills_of_any_type(mixed_types, backend):
    frame = to_backend(mixed_types, backend)
    out = to_backend(Recipe([FillMissing(["sex"], strategy="constant", value="unknown"),
                             MinMax(["clutch"]), Categorify(["species", "sex"])]).fit_transform(frame), "pandas")
    assert out["clutch"].tolist() == [1.0, 0.0, 1.0, 1.0]
    assert out["sex"].tolist() == [3, 4, 2, 3]  # female 2, male 3, unknown 4: after the 2 reserved codes


def test_categorify_of_integer_categories_transforms_alike_across_backends():
    # A survey year kept as a pandas categorical (palmerpenguins): pandas compares it by
    # its text ('2007'), polars holds it as Int64 and fits [2007, ...]. A recipe fitted on
    # polars mapped every pandas row to unseen (0), and one fitted on pandas every row of
    # a plain integer column.
    df = pd.DataFrame({"year": pd.Categorical([2007, 2008, 2009, 2008, None])})
    want = [2, 3, 4, 3, MISSING_INDEX]
    on_polars = Recipe([Categorify(["year"])]).fit(to_backend(df, "polars"))
    on_pandas = Recipe([Categorify(["year"])]).fit(df)
    for recipe in (on_polars, on_pandas):
        loaded = Recipe.from_json(recipe.to_json())
        assert loaded.transform(df)["year"].tolist() == want
        assert loaded.transform(to_backend(df, "polars"))["year"].to_list() == want
        plain = df.assign(year=pd.array([2007, 2008, 2009, 2008, None], dtype="Int64"))
        assert loaded.transform(plain)["year"].tolist() == want
    # A value unseen on both sides stays unseen.
    later = pd.DataFrame({"year": pd.Categorical([2010, 2007])})
    assert Recipe.from_json(on_polars.to_json()).transform(later)["year"].tolist() == [UNSEEN_INDEX, 2]
    # on_unseen="raise" refuses exactly what would map to unseen: the years matched by text
    # pass, 2010 is named.
    strict = Recipe([Categorify(["year"], on_unseen="raise")]).fit(to_backend(df, "polars"))
    assert strict.transform(df)["year"].tolist() == want
    with pytest.raises(UnseenCategoryError, match=r"'year' has 1 value\(s\) not seen.*2010"):
        strict.transform(later)


def test_columns_named_like_python_keywords_or_not_text_work_on_pandas_as_on_polars():
    # A real table (R's COUNT/rwm1984) has a column "self": pandas' assign(**...) took it
    # for its own argument. Numbers as labels (a frame from a bare array) failed too.
    from gpufeed.gpu_transforms.tabular import Rule, apply_rules, col

    df = pd.DataFrame({"self": [1.0, 2.0, np.nan, 4.0], "g": list("abab"), "t": list("xyxz")})

    def ops() -> list:
        return [FillMissing(["self"]), Clip(["self"], quantiles=(0.1, 0.9)), Log(["self"]),
                Standardize(["self"], by="g"), MinMax(["self"]), Categorify(["t"])]

    on_pandas = Recipe(ops()).fit_transform(df)
    on_polars = Recipe(ops()).fit_transform(pl.from_pandas(df)).to_pandas()
    pd.testing.assert_frame_equal(on_pandas, on_polars, check_dtype=False)
    weights = apply_rules(df, [Rule("self", [(col("g") == "a", 1.0)], default=0.0)])
    assert weights["self"].tolist() == [1.0, 0.0, 1.0, 0.0]


@pytest.mark.parametrize("fit", ["fit", "fit_transform"])
def test_categorify_of_a_column_mixing_text_and_numbers_names_it(fit):
    df = pd.DataFrame({"code": pd.Series([1, "A", 2.5, None], dtype=object)})
    with pytest.raises(ColumnTypeError, match=r"column 'code' mixes .*str.*cast the column to text"):
        getattr(Recipe([Categorify(["code"])]), fit)(df)


def test_a_users_own_op_saves_and_loads_by_its_kind(tmp_path):
    # A TableOp subclass registers under its kind: a recipe holding it loads again (the
    # recipe knew only the kit's ops by name), and a kind already taken is refused.
    from dataclasses import dataclass
    from typing import ClassVar

    import narwhals as nw

    from gpufeed.gpu_transforms.tabular import TableOp

    @dataclass
    class Double(TableOp):
        kind: ClassVar[str] = "test_double"
        stateless: ClassVar[bool] = True

        def transform(self, frame, backend):
            return frame.with_columns(*[(nw.col(c) * 2).alias(c) for c in self.columns])

    path = Recipe([Double(["a"]), MinMax(["a"])]).fit(pd.DataFrame({"a": [1.0, 3.0]})).save(tmp_path / "r.json")
    loaded = Recipe.load(path)
    assert isinstance(loaded.ops[0], Double)
    assert loaded.transform(pd.DataFrame({"a": [2.0]}))["a"].tolist() == [0.5]  # 4 on the fitted 2..6 range
    with pytest.raises(ValueError, match="TableOp kind 'minmax' is taken by .*MinMax"):
        @dataclass
        class Other(TableOp):
            kind: ClassVar[str] = "minmax"


# --- ordered categoricals (polars Enum), decimals, lists given to HashBucket ----------------


def _sizes(backend: str, ordered: bool):
    values = ["S", None, "L", "S"]
    if backend == "polars":
        return pl.DataFrame({"size": pl.Series(values, dtype=pl.Enum(["S", "M", "L"]) if ordered else pl.Categorical)})
    return pd.DataFrame({"size": pd.Categorical(values, categories=["S", "M", "L"], ordered=ordered)})


@pytest.mark.parametrize("backend", ["pandas", "polars"])
def test_fill_constant_outside_an_ordered_categoricals_categories_names_op_column_value_categories(backend):
    # polars' Enum left the gaps silently, pandas raised its own TypeError naming nothing.
    frame = _sizes(backend, ordered=True)
    with pytest.raises(ColumnTypeError, match=r"FillMissing.*'unknown'.*\['S', 'M', 'L'\].*'size'.*cast the column to text"):
        Recipe([FillMissing(["size"], strategy="constant", value="unknown")]).fit_transform(frame)
    # A recipe fitted where the value is a category refuses a table whose Enum lacks it.
    fitted = Recipe([FillMissing(["size"], strategy="constant", value="unknown")]).fit(
        pl.DataFrame({"size": ["unknown", None]}) if backend == "polars" else pd.DataFrame({"size": ["unknown", None]}))
    with pytest.raises(ColumnTypeError, match="not one of the categories"):
        fitted.transform(frame)


@pytest.mark.parametrize("ordered", [True, False])
def test_fill_constant_with_a_category_fills_alike_on_pandas_and_polars(ordered):
    outs = {b: Recipe([FillMissing(["size"], strategy="constant", value="M")]).fit_transform(_sizes(b, ordered))
            for b in ("pandas", "polars")}
    assert outs["pandas"]["size"].astype(str).tolist() == outs["polars"]["size"].cast(pl.String).to_list() \
        == ["S", "M", "L", "S"]
    # An ordered one keeps its order (an Enum on polars).
    assert (outs["pandas"]["size"].cat.ordered, outs["polars"]["size"].dtype == pl.Enum(["S", "M", "L"])) \
        == (ordered, ordered)


def test_fill_constant_adds_a_new_category_to_an_unordered_categorical_on_both_backends():
    outs = {b: Recipe([FillMissing(["size"], strategy="constant", value="unknown")]).fit_transform(_sizes(b, False))
            for b in ("pandas", "polars")}
    assert outs["pandas"]["size"].astype(str).tolist() == outs["polars"]["size"].cast(pl.String).to_list() \
        == ["S", "unknown", "L", "S"]
    assert list(outs["pandas"]["size"].cat.categories) == ["S", "M", "L", "unknown"]
    assert list(_sizes("pandas", False)["size"].cat.categories) == ["S", "M", "L"]  # input untouched


@pytest.mark.parametrize("strategy", ["mean", "median"])
@pytest.mark.parametrize("backend", ["pandas", "polars"])
def test_fill_statistic_on_a_categorical_is_a_column_type_error(backend, strategy):
    with pytest.raises(ColumnTypeError, match="'size'"):
        Recipe([FillMissing(["size"], strategy=strategy)]).fit(_sizes(backend, ordered=True))


def _decimal_frames():
    """The same money and id columns as polars keeps them (Decimal) and as pandas reads them
    (float64 nearest each decimal; int64 for whole ones that fit)."""
    import decimal

    prices = [decimal.Decimal(t) if t else None for t in
              ["1.15", None, "2.30", "0.10", "7.77", "3.14", "0.30", "5.55", "1.01", "1.02", "1.11"]]
    ids = [decimal.Decimal(i) for i in [7, 3, 3, 9, 1, 7, 2, 3, 9, 1, 5]]
    polars = pl.DataFrame({"price": pl.Series(prices, dtype=pl.Decimal(18, 2)),
                           "shop": pl.Series(ids, dtype=pl.Decimal(38, 0))})
    pandas = pd.DataFrame({"price": [float(p) if p is not None else np.nan for p in prices],
                           "shop": np.array([int(i) for i in ids], dtype="int64")})
    return pandas, polars


DECIMAL_OPS = {
    "fill_mean": lambda: [FillMissing(["price"])],
    "fill_median": lambda: [FillMissing(["price"], strategy="median")],
    "fill_constant": lambda: [FillMissing(["price"], strategy="constant", value=1.5)],
    "clip_quantiles": lambda: [Clip(["price", "shop"], quantiles=(0.05, 0.95))],
    "clip_fixed": lambda: [Clip(["price"], lower=1, upper=5)],
    "log": lambda: [Log(["price"])],
    "standardize": lambda: [Standardize(["price"])],
    "standardize_by": lambda: [Standardize(["price"], by="shop")],
    "minmax": lambda: [MinMax(["price", "shop"])],
    "categorify": lambda: [Categorify(["price", "shop"])],
    "hash": lambda: [HashBucket(["price", "shop"], buckets=64)],
}


@pytest.mark.parametrize("name", list(DECIMAL_OPS))
def test_decimal_columns_give_the_same_statistics_values_and_dtypes_as_pandas_numbers(name):
    # polars kept Decimal: Clip rounded its quantile bounds to the scale (1.015 -> 1.02)
    # and kept Decimal, Log failed on Decimal + float, Standardize(by=) could not store the keys.
    pandas, polars = _decimal_frames()
    on_pandas, on_polars = Recipe(DECIMAL_OPS[name]()), Recipe(DECIMAL_OPS[name]())
    got_pandas, got_polars = on_pandas.fit_transform(pandas), to_backend(on_polars.fit_transform(polars), "pandas")
    columns = on_pandas.ops[0].columns
    pd.testing.assert_frame_equal(got_polars[columns], got_pandas[columns], check_exact=True)
    assert on_polars.to_json() == on_pandas.to_json()
    # The polars table's other columns keep their Decimal type.
    assert all(polars.schema[c] == on_polars.transform(polars).schema[c] for c in polars.columns if c not in columns)


def test_decimal_clip_bounds_are_the_float_quantiles_not_rounded_to_the_scale(tmp_path):
    import decimal

    import pyarrow as pa
    import pyarrow.parquet as pq

    from gpufeed.datasets.tables import read_table

    path = tmp_path / "money.parquet"
    pq.write_table(pa.table({"price": pa.array([decimal.Decimal(f"1.{i:02d}") for i in range(1, 12)],
                                               pa.decimal128(18, 2))}), path)
    outs = {}
    for backend in ("pandas", "polars"):
        recipe = Recipe([Clip(["price"], quantiles=(0.05, 0.95))])
        outs[backend] = to_backend(recipe.fit_transform(read_table(path, backend=backend)), "pandas")["price"]
        assert recipe.ops[0].state["price"] == pytest.approx([1.015, 1.105], abs=1e-12)
        assert Recipe([Log(["price"])]).fit_transform(read_table(path, backend=backend)) is not None
    pd.testing.assert_series_equal(outs["polars"], outs["pandas"], check_exact=True)
    assert outs["pandas"].dtype == np.float64


def test_decimal_text_parse_gives_the_nearest_float_on_pandas_arrow_decimals():
    import decimal

    import pyarrow as pa

    values = [decimal.Decimal("1.15"), decimal.Decimal("7.77"), None]
    arrow = pd.DataFrame({"p": pd.array(values, dtype=pd.ArrowDtype(pa.decimal128(18, 2)))})
    fitted = Recipe([MinMax(["p"])]).fit(arrow)
    assert fitted.ops[0].state["p"] == [1.15, 7.77]  # Arrow's own cast gave 1.1500000000000001, 7.7700000000000005


def test_hash_bucket_of_a_list_column_is_a_column_type_error_on_both_backends():
    frame = pl.DataFrame({"tags": [[1, 2], [3], None]})
    for df in (frame, frame.to_pandas(), pd.DataFrame({"tags": [[1, 2], None, [3]]})):
        with pytest.raises(ColumnTypeError, match=r"HashBucket: column 'tags' holds lists"):
            Recipe([HashBucket(["tags"], buckets=8)]).fit_transform(df)


@pytest.mark.parametrize("backend", ["pandas", "polars"])
@pytest.mark.parametrize("n", [1, 5, 9])
@pytest.mark.filterwarnings("ignore:split_by_(group|time).*(too few|repeat too much):UserWarning")  # 1 row: said so
def test_a_part_with_a_zero_share_gets_no_row(backend, n):
    """Rounding each share on its own gave test 1 of 5 rows (and the one row of a 1-row
    table) at fractions (0.5, 0.5, 0), in split_random and split_by_group alike."""
    frame = to_backend(pd.DataFrame({"x": range(n), "g": range(n)}), backend)
    for split in (split_random(frame, (0.5, 0.5, 0.0), seed=0), split_by_group(frame, "g", (0.5, 0.5, 0.0)),
                  split_by_time(frame, "g", (0.5, 0.5, 0.0))):
        assert split.rows["test"] == 0 and sum(split.rows.values()) == n
    assert split_random(frame, (0.5, 0.0, 0.5), seed=0).rows["val"] == 0
    assert split_random(frame, (1.0, 0.0, 0.0), seed=0).rows == {"train": n, "val": 0, "test": 0}


@pytest.mark.parametrize("backend", ["pandas", "polars"])
def test_two_fractions_split_train_and_val_with_an_empty_test_part(backend):
    # split_random(df, (0.8, 0.2)) raised "fractions must be three"
    df = pd.DataFrame({"x": range(10), "g": [i // 2 for i in range(10)], "t": range(10)})
    frame = to_backend(df, backend)
    for two, three in ((split_random(frame, (0.8, 0.2), seed=1), split_random(frame, (0.8, 0.2, 0.0), seed=1)),
                       (split_by_group(frame, "g", (0.6, 0.4), seed=1), split_by_group(frame, "g", (0.6, 0.4, 0.0),
                                                                                      seed=1)),
                       (split_by_time(frame, "t", (0.8, 0.2)), split_by_time(frame, "t", (0.8, 0.2, 0.0)))):
        assert isinstance(two, Split) and two.rows == three.rows and two.rows["test"] == 0
        assert [to_backend(p, "pandas")["x"].tolist() for p in (two.train, two.val, two.test)] == [
            to_backend(p, "pandas")["x"].tolist() for p in (three.train, three.val, three.test)]
        assert type(two.test) is type(frame)
    assert split_random(frame, (0.8, 0.2), seed=1).rows == {"train": 8, "val": 2, "test": 0}
    with pytest.raises(ValueError, match=r"fractions must be two .* got \(1.0,\)"):
        split_random(frame, (1.0,))


def test_split_fractions_with_nan_and_groups_of_mixed_kinds_get_clear_answers():
    df = pd.DataFrame({"x": range(4), "g": pd.Series([1, "a", 2, "b"], dtype=object)})
    with pytest.raises(ValueError, match=r"fractions must be two \(train, val\) or three \(train, val, test\) "
                       r"non-negative numbers summing to 1, got \(nan"):
        split_random(df, (float("nan"), 0.5, 0.5))
    # sorting 1 and "a" raised Python's TypeError
    split, again = (split_by_group(df, "g", (0.5, 0.25, 0.25), seed=0) for _ in range(2))
    assert split.rows == {"train": 2, "val": 1, "test": 1}
    assert [p["x"].tolist() for p in (split.train, split.val, split.test)] == [
        p["x"].tolist() for p in (again.train, again.val, again.test)]


def _on(backend: str, df: pd.DataFrame):
    return to_dask(df, 2) if backend == "dask" else to_backend(df, backend)


@pytest.mark.parametrize("backend", ["pandas", "polars", "dask"])
@pytest.mark.parametrize("by", [None, "g"])
def test_standardize_of_values_whose_variance_overflows_float64_scales_them(backend, by):
    # The std of [2e160, -2e160, 0] is 1.63e160, but its variance (its square) is inf on
    # every backend: the column was taken for a constant one and came back unchanged.
    df = pd.DataFrame({"x": [2e160, -2e160, 0.0, np.nan], "g": ["a", "a", "a", "b"]})
    recipe = Recipe([Standardize(["x"], by=by)])
    out = _as_pandas(recipe.fit_transform(_on(backend, df)))
    mean, std = recipe.ops[0].state["global"]["x"]
    assert mean == 0.0 and std == pytest.approx(2e160 * math.sqrt(2 / 3), rel=1e-12)
    np.testing.assert_allclose(out["x"].to_numpy(float)[:3], [math.sqrt(1.5), -math.sqrt(1.5), 0.0], rtol=1e-12)
    assert np.isnan(out["x"].iloc[3])
    loaded = Recipe.from_json(recipe.to_json())
    np.testing.assert_allclose(_as_pandas(loaded.transform(_on(backend, df)))["x"].to_numpy(float)[:3],
                               out["x"].to_numpy(float)[:3], rtol=1e-15)


@pytest.mark.parametrize("backend", ["pandas", "polars", "dask"])
def test_minmax_of_a_range_beyond_float64_scales_it(backend):
    # max - min = inf: every value became NaN or 0.
    df = pd.DataFrame({"x": [1.7e308, -1.7e308, 0.0, np.nan], "y": [1.0, 2.0, 3.0, 5.0]})
    recipe = Recipe([MinMax(["x", "y"])])
    out = _as_pandas(recipe.fit_transform(_on(backend, df)))
    np.testing.assert_allclose(out["x"].to_numpy(float), [1.0, 0.0, 0.5, np.nan], rtol=1e-15)
    np.testing.assert_array_equal(out["y"].to_numpy(float), [0.0, 0.25, 0.5, 1.0])
    np.testing.assert_allclose(recipe.inverse("x", np.array([1.0, 0.0, 0.5])), [1.7e308, -1.7e308, 0.0], rtol=1e-15)


@pytest.mark.parametrize("op", [lambda c: FillMissing(c), lambda c: MinMax(c), lambda c: Standardize(c),
                                lambda c: Standardize(["x"], by=c[0]), lambda c: Categorify(c)])
def test_column_names_that_are_not_text_are_refused_by_name_with_the_fix(op):
    # A pandas frame from a bare numpy array has integer names: a recipe fitted on it failed
    # on Dask ("keywords must be strings") and, saved to JSON and loaded, failed with a bare
    # KeyError (its state's keys had become text). Names are text on every backend.
    with pytest.raises(ValueError, match=r"column names must be text.*\[0\].*df\.columns = df\.columns\.astype\(str\)"):
        op([0])


@pytest.mark.parametrize("backend", ["pandas", "dask"])
def test_text_names_for_a_frame_with_integer_names_say_how_to_rename_it(backend):
    df = pd.DataFrame(np.array([[1.0, 2.0], [np.nan, 4.0], [3.0, 5.0]]))  # columns 0, 1
    frame = to_dask(df, 1) if backend == "dask" else df
    with pytest.raises(MissingColumnError, match=r"needs column\(s\) \['0'\].*not text.*df\.columns = "
                                                 r"df\.columns\.astype\(str\)"):
        Recipe([FillMissing(["0"])]).fit(frame)
    renamed = df.copy()
    renamed.columns = renamed.columns.astype(str)
    recipe = Recipe([FillMissing(["0"]), MinMax(["1"])]).fit(to_dask(renamed, 1) if backend == "dask" else renamed)
    out = _as_pandas(Recipe.from_json(recipe.to_json()).transform(renamed))
    assert out["0"].tolist() == [1.0, 2.0, 3.0] and out["1"].tolist() == [0.0, 2 / 3, 1.0]


@pytest.mark.parametrize("backend", ["pandas", "polars", "dask"])
@pytest.mark.parametrize("op", [MinMax, Standardize])
def test_a_boolean_column_beside_inf_or_an_empty_column_gives_the_documented_errors(backend, op):
    # polars' abs refused the boolean column in the inf count ("`abs` operation not
    # supported for dtype `bool`") before the error could name the bad column.
    with_inf = pd.DataFrame({"flag": [True, False, True], "x": [1.0, np.inf, 2.0]})
    with pytest.raises(NonFiniteError, match=r"\{'x': 1\}"):
        Recipe([op(["flag", "x"])]).fit(_on(backend, with_inf))
    empty = pd.DataFrame({"flag": [True, False, True], "x": [np.nan, np.nan, np.nan]})
    with pytest.raises(EmptyTableError, match="column 'x'"):
        Recipe([op(["flag", "x"])]).fit(_on(backend, empty))


def test_standardize_by_group_over_mixed_nullable_columns_fits_on_pandas_as_on_polars():
    # Int8 beside Float64 (pandas' nullable types): the group statistics came out as an object
    # array of Python floats, and reading them failed ("'float' object has no attribute 'item'").
    df = pd.DataFrame({"a": pd.array([1, 2, None, 4], dtype="Int8"), "b": pd.array([1.0, 2.5, 3.0, None], dtype="Float64"),
                       "g": ["x", "x", "y", "y"]})
    on_pandas = Recipe([Standardize(["a", "b"], by="g")]).fit(df).ops[0].state
    on_polars = Recipe([Standardize(["a", "b"], by="g")]).fit(to_backend(df, "polars")).ops[0].state
    assert on_pandas["groups"] == on_polars["groups"] == {"a": [["x", 1.5, 0.5], ["y", 4.0, 1.0]],
                                                          "b": [["x", 1.75, 0.75], ["y", 3.0, 1.0]]}


def test_an_ops_own_parameters_follow_its_columns():
    # `state` is keyword-only: HashBucket(cols, 64) had been a "fitted state" of 64 with the
    # default 1,024 buckets, silently.
    from gpufeed.gpu_transforms.tabular import HashBucket, Log

    assert HashBucket(["c"], 64).buckets == 64 and HashBucket(["c"], 64).state == {}
    assert Log(["x"], 2.0).offset == 2.0
    with pytest.raises(TypeError):
        HashBucket(["c"], 64, "canonical", {})


@pytest.mark.parametrize("dtype", ["str", "string", "object"])
def test_categorify_of_pandas_text_numbers_values_in_code_point_order_as_on_polars(dtype):
    # A pandas text column is fitted and coded from one sorted factorisation (object
    # columns, which may mix types, by the general path): the same vocabulary in Python's
    # code-point order (upper case before lower, accents and CJK after ASCII), the same
    # codes for missing values (None and NaN alike), as polars and an object column give.
    values = ["b", "B", "é", None, "a", "中", "a", np.nan, "", "Zürich", "b"] * 3
    frame = pd.DataFrame({"t": pd.Series(values, dtype=dtype), "x": range(len(values))})
    recipe = Recipe([Categorify(["t"])])
    out = recipe.fit_transform(frame)
    vocabulary = sorted({v for v in values if isinstance(v, str)})
    assert recipe.ops[0].state["t"] == vocabulary == ["", "B", "Zürich", "a", "b", "é", "中"]
    expected = [MISSING_INDEX if not isinstance(v, str) else vocabulary.index(v) + 2 for v in values]
    assert out["t"].dtype == np.int32 and out["t"].tolist() == expected
    on_polars = Recipe([Categorify(["t"])])
    assert on_polars.fit_transform(to_backend(frame, "polars"))["t"].to_list() == expected
    assert on_polars.ops[0].state == recipe.ops[0].state
    assert recipe.transform(frame.iloc[::-1])["t"].tolist() == expected[::-1]  # fitted codes, any rows


def test_a_recipe_leaves_the_garbage_collector_as_it_found_it_even_when_an_op_fails():
    # Each op runs with the cyclic collector paused (wide tables: 130-250 ms of collections
    # finding nothing); the caller's setting is back after it, on success and on error.
    import gc

    frame = pd.DataFrame({"x": [1.0, 2.0, np.inf], "g": ["a", "b", "a"]})
    seen = []
    op = Standardize(["x"], by="g")
    original = Standardize.fit

    def spy(self, *args):
        seen.append(gc.isenabled())
        return original(self, *args)

    was = gc.isenabled()
    try:
        for enabled in (True, False):
            (gc.enable if enabled else gc.disable)()
            with pytest.MonkeyPatch.context() as patch:
                patch.setattr(Standardize, "fit", spy)
                with pytest.raises(NonFiniteError):
                    Recipe([copy.deepcopy(op)]).fit(frame)
                Recipe([copy.deepcopy(op)]).fit(frame.iloc[:2])
            assert gc.isenabled() is enabled
        assert seen == [False] * 4  # paused inside the op either way
    finally:
        (gc.enable if was else gc.disable)()


@pytest.mark.parametrize("kind", ["text", "nullable-int", "bool", "categorical", "float", "object-mixed-numbers"])
def test_standardize_by_fit_transform_reads_groups_from_the_fit_and_equals_fit_then_transform(kind):
    # On pandas, fit_transform takes each row's group from the fit's factorisation of the
    # key instead of hashing the key again: the same codes, so the same bits as fit then
    # transform, with missing keys (the global statistics) and a short and a long frame.
    rng = np.random.default_rng(7)
    for rows in (300, 70_000):  # 2-D blocks, then column by column
        raw = rng.integers(0, 5, rows)
        missing = rng.random(rows) < 0.05
        if kind == "text":
            key = pd.Series(np.where(missing, None, np.array(["b", "a", "é", "Z", ""])[raw]), dtype="str")
        elif kind == "nullable-int":
            key = pd.Series(pd.array(np.where(missing, None, raw * 10 - 20), dtype="Int64"))
        elif kind == "bool":
            key = pd.Series(raw % 2 == 0)
        elif kind == "categorical":
            key = pd.Series(pd.Categorical(np.where(missing, None, np.array(["x", "y", "z", "w", "v"])[raw]),
                                           categories=["v", "w", "x", "y", "z", "unused"]))
        elif kind == "float":
            key = pd.Series(np.where(missing, np.nan, np.array([0.0, -0.0, 1.5, 2.5, 1e300])[raw]))
        else:
            key = pd.Series(np.where(missing, None, np.array([1, 2.5, 3, 4.0, 5], dtype=object)[raw]), dtype=object)
        frame = pd.DataFrame({"a": rng.normal(5, 2, rows), "b": rng.integers(0, 100, rows), "k": key})
        frame.loc[rng.random(rows) < 0.03, "a"] = np.nan
        together = Recipe([Standardize(["a", "b"], by="k")])
        out = together.fit_transform(frame)
        apart = Recipe([Standardize(["a", "b"], by="k")]).fit(frame)
        assert together.ops[0].state == apart.ops[0].state
        pd.testing.assert_frame_equal(out, apart.transform(frame), check_exact=True)
        # polars: a text or integer key numbered once (CodedKey), other keys hashed again;
        # the same groups and codes as fit then transform (to rounding: polars' lazy
        # group-by sums in an order that varies from run to run).
        on_polars = to_backend(frame, "polars")
        together = Recipe([Standardize(["a", "b"], by="k")])
        out = together.fit_transform(on_polars)
        apart = Recipe([Standardize(["a", "b"], by="k")]).fit(on_polars)
        expected = apart.transform(on_polars)
        for c in ("a", "b"):
            assert [g[0] for g in together.ops[0].state["groups"][c]] == [g[0] for g in apart.ops[0].state["groups"][c]]
            assert out[c].null_count() == expected[c].null_count() == on_polars[c].null_count()
            np.testing.assert_allclose(out[c].to_numpy(), expected[c].to_numpy(), rtol=1e-12, atol=1e-12, err_msg=c)


@pytest.mark.parametrize("rows", [2_000, 70_000])  # 2-D blocks, then column by column
@pytest.mark.parametrize("backend", ["pandas", "polars", "polars-lazy", "dask"])
def test_standardize_by_group_of_columns_named_as_its_temporary_columns_standardises_them(backend, rows):
    # The kit's temporary columns (the key under its own name, the rows' group codes) take
    # names no column of the frame has: a user's column named as one of them was refused,
    # lost, or fitted on the codes instead of its values (two reviews found them).
    rng = np.random.default_rng(5)
    names = ["__gpufeed_group_key", "__gpufeed_group_code", "__gpufeed_group_code_"]
    df = pd.DataFrame({**{c: rng.normal(100 + 10 * i, 5, rows) for i, c in enumerate(names)},
                       "k": rng.choice(["a", "b", "c"], rows)})
    plain = df.rename(columns={c: f"v{i}" for i, c in enumerate(names)})
    want = Recipe([Standardize([f"v{i}" for i in range(3)], by="k")]).fit_transform(plain)
    frame = {"pandas": df, "polars": to_backend(df, "polars"), "polars-lazy": to_backend(df, "polars").lazy(),
             "dask": to_dask(df, npartitions=2)}[backend]
    together = Recipe([Standardize(names, by="k")])
    out = together.fit_transform(frame)
    apart = Recipe([Standardize(names, by="k")]).fit(frame)
    again = apart.transform(frame)
    out, again = ((x.collect() if hasattr(x, "collect") else x.compute() if hasattr(x, "compute") else x)
                  for x in (out, again))
    for i, c in enumerate(names):
        assert together.ops[0].state["global"][c] == pytest.approx(apart.ops[0].state["global"][c], rel=1e-12)
        assert apart.ops[0].state["global"][c][0] == pytest.approx(100 + 10 * i, abs=1.0)  # the values' mean
        for got in (out, again):
            np.testing.assert_allclose(np.asarray(got[c], dtype=float), want[f"v{i}"].to_numpy(), rtol=1e-9,
                                       atol=1e-9, err_msg=c)
    assert list(out.columns) == list(df.columns)
