"""polars' own paths (one-pass Categorify, Standardize(by=text), native rules, write-back of
an op's columns) against pandas and the row-by-row reference, edge cases included."""

from __future__ import annotations

import narwhals as nw
import numpy as np
import pandas as pd
import polars as pl
import pytest

from gpufeed.gpu_transforms.tabular import (
    Categorify,
    Clip,
    FillMissing,
    Log,
    MinMax,
    Recipe,
    Rule,
    Standardize,
    apply_rules,
    col,
    to_backend,
)
from gpufeed.gpu_transforms.tabular.categorical import MISSING_INDEX, UNSEEN_INDEX
from gpufeed.gpu_transforms.tabular.rules import apply_rules_rowwise


def _gappy(n: int, seed: int) -> pd.DataFrame:
    rng = np.random.default_rng(seed)
    city = rng.choice([f"c{i:03d}" for i in range(300)] + ["Zürich"], n).astype(object)
    city[rng.random(n) < 0.05] = None
    amount = rng.normal(50, 20, n)
    amount[rng.random(n) < 0.05] = np.nan
    return pd.DataFrame(
        {
            "city": city,
            "country": rng.choice(["fr", "de", "it", None], n),
            "amount": amount,
            "days": rng.integers(0, 3000, n),
            "visits": rng.integers(0, 90, n),
        }
    )


def _chunked(df: pd.DataFrame, pieces: int) -> pl.DataFrame:
    frame = to_backend(df, "polars")
    bounds = np.linspace(0, len(frame), pieces + 1).astype(int)
    return pl.concat(
        [frame[a:b] for a, b in zip(bounds[:-1], bounds[1:], strict=True)], rechunk=False
    )


def _layouts(frame: pl.DataFrame) -> set[tuple[int, ...]]:
    return {tuple(len(c) for c in s.get_chunks()) for s in frame.get_columns()}


def _recipe() -> Recipe:
    return Recipe(
        [
            FillMissing(["amount"]),
            Log(["visits"]),
            Standardize(["amount", "days"], by="country"),
            MinMax(["days"]),
            Categorify(["city", "country"]),
        ]
    )


def test_a_recipe_on_a_chunked_polars_frame_keeps_every_column_in_the_same_chunks():
    # polars copies a whole frame to one chunk before evaluating anything on it when its
    # columns are chunked differently; the recipe writes its columns back in the frame's chunks.
    df = _gappy(3000, 1)
    frame = _chunked(df, 3)
    out = _recipe().fit_transform(frame)
    assert _layouts(out) == {(1000, 1000, 1000)}
    expected = _recipe().fit_transform(df)
    for c in df.columns:
        got, want = out[c].to_numpy(), expected[c].to_numpy()
        if want.dtype.kind == "f":
            np.testing.assert_allclose(got, want, rtol=1e-12, atol=1e-12, err_msg=c)
        else:
            assert got.tolist() == want.tolist(), c


def test_with_series_replaces_columns_in_place_adds_new_ones_last_and_leaves_the_input_as_it_was():
    from gpufeed.gpu_transforms.tabular.frames import polars_columns, with_series

    frame = pl.DataFrame({"a": [1, 2], "b": [3.0, 4.0], "c": ["x", "y"]})
    out = with_series(frame, [pl.Series("b", [0.5, 0.25]), pl.Series("new", [7, 8]), pl.Series("a", [9, 9])])
    assert out.columns == ["a", "b", "c", "new"]
    assert out.rows() == [(9, 0.5, "x", 7), (9, 0.25, "y", 8)]
    assert frame.columns == ["a", "b", "c"] and frame.rows() == [(1, 3.0, "x"), (2, 4.0, "y")]
    assert polars_columns(frame, ["c", "a", "c"]).columns == ["c", "a"]


@pytest.mark.parametrize("chunks", [1, 2])
def test_an_op_output_of_another_length_is_refused_naming_its_column(chunks):
    # On a frame in chunks, the write-back had cut a longer output to the frame's chunks
    # silently; in one chunk polars' error named neither the column nor the cause.
    from gpufeed.gpu_transforms.tabular.errors import TabularError
    from gpufeed.gpu_transforms.tabular.frames import wrap, write_back

    frame = pl.concat([pl.DataFrame({"x": [1.0, 2.0], "y": [0, 1]})] * chunks, rechunk=False)
    longer = pl.DataFrame({"x": [0.0] * (2 * chunks + 2)})
    with pytest.raises(TabularError, match=r"column 'x' came out of an op with \d+ rows where the frame has"):
        write_back(wrap(frame), wrap(longer))


def test_a_recipe_on_polars_leaves_its_input_frame_as_it_was():
    # Each op's columns are written over a shallow copy of the frame (with_series): the
    # caller's frame keeps its columns, values and order, also where an op adds a column.
    rng = np.random.default_rng(3)
    frame = pl.DataFrame({"x": [1.0, None, 3.0, 4.0] * 5, "g": rng.choice(["a", "b"], 20).tolist(),
                          "y": rng.normal(size=20), "n": rng.integers(0, 9, 20)})
    before = frame.clone()
    out = Recipe([FillMissing(["x"]), Log(["n"]), Standardize(["y"], by="g"), MinMax(["x"]),
                  Categorify(["g"])]).fit_transform(frame)
    assert out.columns == frame.columns and out["g"].dtype == pl.Int32
    assert frame.equals(before) and frame.schema == before.schema


def test_fill_missing_on_pandas_fills_in_pieces_and_keeps_a_gapless_column_uncopied(monkeypatch):
    from gpufeed.gpu_transforms.tabular import numpy_kernels, pandas_kernels

    monkeypatch.setattr(numpy_kernels, "PIECE", 64)  # many pieces on two threads, as for long columns
    rng = np.random.default_rng(5)
    n = 1000
    gappy, whole = rng.normal(size=n), rng.normal(size=n)
    gappy[rng.random(n) < 0.1] = np.nan
    gappy[-1] = np.nan  # a gap in the last piece
    df = pd.DataFrame({"gappy": gappy, "whole": whole})
    out = Recipe([FillMissing(["gappy", "whole"])]).fit_transform(df)
    want = df.fillna(df.mean().to_dict())
    pd.testing.assert_frame_equal(out, want)  # what pandas' fillna gives, to the bit
    # Nothing to fill: not copied, where pandas copies on write (pandas 3, or the option on).
    # pandas 2 without it: copied on purpose, or a write into `out` would change `df`.
    cow = pandas_kernels.copy_on_write()
    assert np.shares_memory(out["whole"].to_numpy(), df["whole"].to_numpy()) == cow
    out.loc[0, "whole"] = 1e9
    assert df["whole"].iloc[0] != 1e9
    assert not np.shares_memory(out["gappy"].to_numpy(), df["gappy"].to_numpy())
    assert np.isnan(df["gappy"]).sum() == np.isnan(gappy).sum()  # the input is left as it was
    on_polars = Recipe([FillMissing(["gappy", "whole"])]).fit_transform(to_backend(df, "polars"))
    np.testing.assert_allclose(on_polars["gappy"].to_numpy(), out["gappy"].to_numpy(), rtol=1e-15)


def test_log_on_polars_and_pandas_gives_the_same_bits_in_pieces_chunks_and_slices(monkeypatch):
    from gpufeed.gpu_transforms.tabular import numpy_kernels

    monkeypatch.setattr(numpy_kernels, "PIECE", 64)  # many pieces on two threads, as for long columns
    rng = np.random.default_rng(3)
    n = 1000
    amount = rng.lognormal(3, 1, n)
    amount[rng.random(n) < 0.1] = np.nan
    df = pd.DataFrame({"amount": amount, "visits": rng.integers(0, 90, n),
                       "small": rng.random(n).astype("float32"), "flag": rng.random(n) < 0.5})
    # chunks, one of them a slice (its Arrow offset is not 0), missing values as nulls
    frame = pl.concat([to_backend(df, "polars")[:300], to_backend(df, "polars")[300:][:700]], rechunk=False)
    frame = pl.concat([frame[:5], frame[5:]], rechunk=False)
    recipe = Recipe([Log(["amount", "visits", "small"], offset=0.5), Log(["flag"])])
    on_polars, on_pandas = recipe.fit_transform(frame), recipe.fit_transform(df)
    for c in ("amount", "visits", "small"):
        got = on_polars[c]
        assert got.dtype == pl.Float64 and got.null_count() == int(np.isnan(amount).sum() if c == "amount" else 0)
        assert got.n_chunks() == frame[c].n_chunks(), c
        want = np.log(df[c].to_numpy().astype(np.float64) + 0.5)
        np.testing.assert_array_equal(got.to_numpy(), want, err_msg=c)  # the same bits, NaN where missing
        np.testing.assert_array_equal(on_pandas[c].to_numpy(), want, err_msg=c)
    np.testing.assert_array_equal(on_polars["flag"].to_numpy(), np.log(df["flag"].to_numpy() + 1.0))
    lazy = recipe.fit_transform(frame.lazy()).collect()  # a scan_* query: the same kernel per batch
    for c in ("amount", "visits", "small"):
        np.testing.assert_array_equal(lazy[c].to_numpy(), on_polars[c].to_numpy(), err_msg=c)
    wide = pl.DataFrame({"id": pl.Series([1, 2], dtype=pl.Int128)})  # no numpy type: polars' own log
    np.testing.assert_allclose(Recipe([Log(["id"])]).fit_transform(wide)["id"].to_numpy(), np.log([2.0, 3.0]))


def test_categorify_on_polars_in_one_pass_maps_missing_unseen_and_all_missing_columns_like_pandas():
    train = pd.DataFrame(
        {
            "t": pd.Series(["b", None, "a", "b"], dtype=object),
            "gone": pd.Series([None] * 4, dtype=object),
        }
    )
    test = pd.DataFrame(
        {
            "t": pd.Series(["zz", "a", None, "b"], dtype=object),
            "gone": pd.Series(["x", None, None, None], dtype=object),
        }
    )
    recipes = {b: Recipe([Categorify(["t", "gone"])]) for b in ("pandas", "polars")}
    fitted = {b: r.fit_transform(to_backend(train, b)) for b, r in recipes.items()}
    assert (
        recipes["polars"].ops[0].state
        == recipes["pandas"].ops[0].state
        == {"t": ["a", "b"], "gone": []}
    )
    assert (
        fitted["polars"]["t"].to_list()
        == fitted["pandas"]["t"].tolist()
        == [3, MISSING_INDEX, 2, 3]
    )
    assert fitted["polars"]["gone"].to_list() == [MISSING_INDEX] * 4
    # Unseen values and missing ones at transform time, and an empty table.
    moved = recipes["polars"].transform(to_backend(test, "polars"))
    assert moved["t"].to_list() == [UNSEEN_INDEX, 2, MISSING_INDEX, 3]
    assert moved["gone"].to_list() == [UNSEEN_INDEX, MISSING_INDEX, MISSING_INDEX, MISSING_INDEX]
    assert recipes["polars"].transform(to_backend(test, "polars")[:0])["t"].to_list() == []


@pytest.mark.parametrize("op", [MinMax, Standardize])
def test_scaling_on_polars_and_pandas_gives_the_same_bits_in_pieces_chunks_and_slices(monkeypatch, op):
    from gpufeed.gpu_transforms.tabular import numpy_kernels

    monkeypatch.setattr(numpy_kernels, "PIECE", 64)  # many pieces on two threads, as for long columns
    rng = np.random.default_rng(4)
    n = 1000
    amount = rng.lognormal(3, 1, n)
    amount[rng.random(n) < 0.1] = np.nan
    df = pd.DataFrame({"amount": amount, "visits": rng.integers(-40, 90, n),
                       "small": rng.random(n).astype("float32"), "flag": rng.random(n) < 0.5,
                       "same": np.full(n, 7, dtype=np.int16)})
    frame = pl.concat([to_backend(df, "polars")[:300], to_backend(df, "polars")[300:][:700]], rechunk=False)
    frame = pl.concat([frame[:5], frame[5:]], rechunk=False)  # chunks, one a slice (Arrow offset > 0)
    columns = ["amount", "visits", "small", "flag", "same"]
    fitted = {b: Recipe([op(columns)]) for b in ("pandas", "polars")}
    on_pandas, on_polars = fitted["pandas"].fit_transform(df), fitted["polars"].fit_transform(frame)
    # The same statistics give the same bits; std's last bit is each backend's own.
    same_bits = op is MinMax
    assert (fitted["pandas"].ops[0].state == fitted["polars"].ops[0].state) or not same_bits
    for c in columns:
        got = on_polars[c]
        assert got.dtype == pl.Float64 and got.null_count() == int(np.isnan(amount).sum() if c == "amount" else 0)
        np.testing.assert_allclose(got.to_numpy(), on_pandas[c].to_numpy(), rtol=0 if same_bits else 1e-12,
                                   atol=0 if same_bits else 1e-12, err_msg=c)  # NaN where missing
    assert on_polars["same"].to_list() == [0.0] * n  # a constant column gives 0
    if op is MinMax:
        assert np.nanmin(on_polars["amount"].to_numpy()) == 0.0 and np.nanmax(on_polars["amount"].to_numpy()) == 1.0
    lazy = fitted["polars"].transform(frame.lazy()).collect()  # polars' expression, the same bits
    for c in columns:
        np.testing.assert_array_equal(lazy[c].to_numpy(), on_polars[c].to_numpy(), err_msg=c)


@pytest.mark.parametrize("few_seen", [1024, 0])  # merged in Python, or by Arrow
@pytest.mark.parametrize("cores", [1, 2, 3, 8])
def test_categorify_on_polars_cut_into_slices_codes_like_pandas(monkeypatch, cores, few_seen):
    """A text column cut into slices, each over its own category set, merges to the one
    sorted vocabulary: values only some slices hold, missing values in some slices only,
    a slice with no value at all, and an integer column fitted beside the slices."""
    from gpufeed.gpu_transforms.tabular import category_codes

    monkeypatch.setattr(category_codes, "SLICE_ROWS", 7)
    monkeypatch.setattr(category_codes, "_FEW_SEEN", few_seen)
    monkeypatch.setattr(category_codes, "usable_cpus", lambda: cores)
    n = 200
    rng = np.random.default_rng(cores)
    text = rng.choice(["b", "a", "Zürich", "é", "c d", ""], n).astype(object)
    text[:40] = "early"  # in the first slices only
    text[-30:] = None  # the last slices: only missing values
    text[rng.random(n) < 0.1] = None
    k = pd.array(rng.integers(-5, 5, n), dtype="Int64")
    k[::9] = pd.NA
    df = pd.DataFrame({"t": text, "k": k, "other": np.arange(n)})
    recipes = {b: Recipe([Categorify(["t", "k"])]) for b in ("pandas", "polars")}
    out = {b: r.fit_transform(to_backend(df, b)) for b, r in recipes.items()}
    assert recipes["polars"].ops[0].state == recipes["pandas"].ops[0].state
    assert recipes["polars"].ops[0].state["t"] == sorted(set(text) - {None})
    for c in ("t", "k"):
        assert out["polars"][c].dtype == pl.Int32
        assert out["polars"][c].to_list() == out["pandas"][c].tolist()
    assert out["polars"]["t"].to_list()[-30:] == [MISSING_INDEX] * 30
    assert out["polars"]["other"].to_list() == list(range(n))  # the columns beside untouched


@pytest.mark.parametrize("cores", [1, 2])
def test_categorify_of_mostly_distinct_ids_on_polars_codes_like_pandas(monkeypatch, cores):
    # Ids (more than half of a sample distinct) are numbered whole by Arrow's dictionary,
    # long ones (past a view's 12 bytes) and short ones (from their views), missing
    # values and a chunked column included, beside a column of few values cut in slices.
    from gpufeed.gpu_transforms.tabular import category_codes

    monkeypatch.setattr(category_codes, "SLICE_ROWS", 500)
    monkeypatch.setattr(category_codes, "usable_cpus", lambda: cores)
    rng = np.random.default_rng(cores)
    n = 6000
    long_ids = np.array([f"customer-é-{i:08d}" for i in rng.integers(0, 9000, n)], dtype=object)
    long_ids[rng.random(n) < 0.05] = None
    short_ids = np.array([f"u{i:06d}" for i in rng.integers(0, 9000, n)], dtype=object)
    few = rng.choice(["north", "south", "Zürich"], n).astype(object)
    df = pd.DataFrame({"long": long_ids, "short": short_ids, "few": few})
    frame = _chunked(df, 3)
    assert category_codes._mostly_distinct(frame["long"]) and not category_codes._mostly_distinct(frame["few"])
    recipes = {b: Recipe([Categorify(["long", "short", "few"])]) for b in ("pandas", "polars")}
    out = {"pandas": recipes["pandas"].fit_transform(df), "polars": recipes["polars"].fit_transform(frame)}
    assert recipes["polars"].ops[0].state == recipes["pandas"].ops[0].state
    assert recipes["polars"].ops[0].state["long"] == sorted(set(long_ids) - {None})
    for c in ("long", "short", "few"):
        assert out["polars"][c].to_list() == out["pandas"][c].tolist(), c


@pytest.mark.parametrize("min_count", [1, 2])
def test_categorify_of_a_column_named_n_fits_on_every_backend(min_count):
    """The group-by count of the fit is named apart from the user's columns ("n" collided)."""
    df = pd.DataFrame({"n": [1.5, np.nan, 2.5, 1.5], "len": ["a", "b", "a", None]})
    recipes = {b: Recipe([Categorify(["n", "len"], min_count=min_count)]) for b in ("pandas", "polars")}
    out = {b: r.fit_transform(to_backend(df, b)) for b, r in recipes.items()}
    assert recipes["polars"].ops[0].state == recipes["pandas"].ops[0].state
    assert recipes["pandas"].ops[0].state["n"] == ([1.5, 2.5] if min_count == 1 else [1.5])
    for c in ("n", "len"):
        assert out["polars"][c].to_list() == out["pandas"][c].tolist()


def test_standardize_by_text_on_polars_equals_pandas_with_missing_and_unseen_groups():
    df = _gappy(2000, 2)
    on = {b: Recipe([Standardize(["amount", "days"], by="country")]) for b in ("pandas", "polars")}
    out = {b: r.fit_transform(to_backend(df, b)) for b, r in on.items()}
    for c in ("amount", "days"):
        np.testing.assert_allclose(
            out["polars"][c].to_numpy(), out["pandas"][c].to_numpy(), rtol=1e-12, atol=1e-12
        )
    assert [g[0] for g in on["polars"].ops[0].state["groups"]["amount"]] == ["de", "fr", "it"]
    # A group unseen at fit time takes the global statistics, as a missing one does.
    later = pd.DataFrame({"amount": [10.0, 10.0], "days": [5, 5], "country": ["es", None]})
    moved = on["polars"].transform(to_backend(later, "polars"))
    mean, std = on["polars"].ops[0].state["global"]["amount"]
    assert moved["amount"].to_list() == pytest.approx([(10.0 - mean) / std] * 2)


@pytest.mark.parametrize("short", [True, False])
def test_standardize_by_group_on_polars_keeps_missing_values_missing_and_equals_pandas(monkeypatch, short):
    # Short columns go as 2-D blocks (missing read as NaN), long ones through numpy's
    # gathers on each chunk's buffer (a slice's buffer starts before its first row): either
    # way a missing value comes out missing, not NaN; the rest are pandas' bits (long
    # columns: to rounding, their statistics from polars' own group-by).
    from gpufeed.gpu_transforms.tabular import kernels, numpy_kernels

    monkeypatch.setattr(numpy_kernels, "PIECE", 64)
    monkeypatch.setattr(kernels, "SHORT_BLOCK_ROWS", 1 << 16 if short else 0)
    df = _gappy(1000, 5)
    df["visits"] = df["visits"].astype("Int64").mask(df.index % 9 == 0)
    frame = pl.concat([_chunked(df, 3)[:5], _chunked(df, 3)[5:]], rechunk=False)
    assert frame["amount"].n_chunks() == 4 and frame["visits"].null_count() == 112
    columns = ["amount", "days", "visits"]
    got = Recipe([Standardize(columns, by="country")]).fit_transform(frame)
    want = Recipe([Standardize(columns, by="country")]).fit_transform(df)
    for c in columns:
        assert got[c].null_count() == frame[c].null_count(), c
        assert not got[c].is_nan().any(), c
        np.testing.assert_allclose(got[c].to_numpy(), want[c].to_numpy(dtype=float, na_value=np.nan),
                                   rtol=0 if short else 1e-12, atol=0 if short else 1e-12, err_msg=c)


def test_standardize_by_group_of_short_polars_columns_tells_nan_from_missing():
    # The 2-D blocks read a missing value as NaN: a column without NaN has its NaN made
    # missing as it is built, one that holds NaN too (an op called on its own, past the
    # recipe's NaN-as-missing edge) keeps each where it was.
    import narwhals as nw

    rng = np.random.default_rng(8)
    n = 1000
    clean = pl.DataFrame({"k": rng.choice(["a", "b"], n), "x": rng.normal(0, 1, n), "y": rng.normal(5, 2, n)})
    recipe = Recipe([Standardize(["x", "y"], by="k")]).fit(clean)
    x = clean["x"].to_numpy().copy()
    x[::7] = np.nan
    row = pl.int_range(n)
    later = clean.with_columns(pl.Series("x", x)).with_columns(
        pl.when(row % 11 == 0).then(None).otherwise(pl.col("x")).alias("x"),
        pl.when(row % 5 == 0).then(None).otherwise(pl.col("y")).alias("y"))
    out = recipe.ops[0].transform(nw.from_native(later), "polars").to_native()
    for c in ("x", "y"):
        assert out[c].is_null().to_list() == later[c].is_null().to_list(), c
        assert out[c].is_nan().fill_null(False).to_list() == later[c].is_nan().fill_null(False).to_list(), c
    assert out["x"].is_nan().sum() > 0 and out["y"].null_count() == n // 5


@pytest.mark.parametrize("rows", [2000, 70_000])  # 2-D blocks, then column by column
def test_standardize_by_a_big_integer_key_with_gaps_on_polars_keeps_its_groups_apart(rows):
    # An Int64 key beyond 2**53 with a gap: read through pandas it became float64, its
    # three keys one group, and fit_transform then disagreed with transform (a review
    # found it). Numbered by polars, the groups stay apart on both paths.
    rng = np.random.default_rng(2)
    key = pl.Series("k", [2**53 + 1, 2**53 + 2, 2**53 + 3, None] * (rows // 4), dtype=pl.Int64)
    frame = pl.DataFrame({"k": key, "x": rng.normal(5, 2, rows), "y": rng.normal(0, 1, rows)})
    recipe = Recipe([Standardize(["x", "y"], by="k")])
    together = recipe.fit_transform(frame)
    assert [g[0] for g in recipe.ops[0].state["groups"]["x"]] == [2**53 + 1, 2**53 + 2, 2**53 + 3]
    again = recipe.transform(frame)
    for c in ("x", "y"):
        np.testing.assert_array_equal(together[c].to_numpy(), again[c].to_numpy(), err_msg=c)
    apart = Recipe([Standardize(["x", "y"], by="k")]).fit(frame)
    assert [g[0] for g in apart.ops[0].state["groups"]["x"]] == [2**53 + 1, 2**53 + 2, 2**53 + 3]


@pytest.mark.parametrize("rows", [2000, 70_000])
def test_standardize_of_its_own_group_key_fits_on_polars_as_on_pandas(rows):
    # The key is one of the columns too (each group constant: 0 after): polars' group-by
    # had refused the duplicate name at fit, where pandas fitted.
    df = pd.DataFrame({"k": [1, 2, 3, 1] * (rows // 4), "x": np.arange(rows, dtype=float)})
    want = Recipe([Standardize(["k", "x"], by="k")]).fit(df).transform(df)
    got = Recipe([Standardize(["k", "x"], by="k")]).fit(to_backend(df, "polars")).transform(to_backend(df, "polars"))
    assert got["k"].to_list() == [0.0] * rows
    np.testing.assert_allclose(got["x"].to_numpy(), want["x"].to_numpy(), rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize("pieces", [1, 4])
def test_native_polars_rules_equal_the_row_by_row_reference(pieces):
    # Short isin lists compile to == chains, long ones to is_in; `~` over a missing value,
    # `!=` and NaN (missing) must read as the reference does.
    df = _gappy(4000, 3)
    df.loc[::7, "amount"] = np.nan
    cities = [f"c{i:03d}" for i in range(0, 40, 3)]
    rules = [
        Rule(
            "w",
            [
                (col("city").isin(["c001", "Zürich"]) & col("amount").between(30.0, 60.0), 0.5),
                (~col("country").isin(["fr", "de"]) & (col("amount") > 40.0), 2.0),
                (col("city").isin(cities) | (col("country") != "it"), 3.0),
                (~(col("amount") < 50.0), 4.0),
            ],
            default=1.0,
        ),
        Rule(
            "tag",
            [(col("city").is_missing(), "none"), (~col("city").isin(cities), "other")],
            default="listed",
        ),
    ]
    frame = _chunked(df, pieces)
    out = apply_rules(frame, rules)
    reference = apply_rules_rowwise(df, rules)
    assert out["w"].to_list() == reference["w"]
    assert out["tag"].to_list() == reference["tag"]
    assert out.columns == [*frame.columns, "w", "tag"] and len(_layouts(out)) == 1


def test_ordered_categorical_keeps_its_order_on_polars_and_back():
    # Sizes S < M < L: polars' Categorical has no order, so to_backend gives an Enum.
    df = pd.DataFrame({"size": pd.Categorical(["M", "S", "L", None], categories=["S", "M", "L"], ordered=True),
                       "city": pd.Categorical(["b", "a", "b", "c"])})
    frame = to_backend(df, "polars")
    assert frame["size"].dtype == pl.Enum(["S", "M", "L"])
    assert frame.sort("size", nulls_last=True)["size"].to_list() == ["S", "M", "L", None]
    assert frame["city"].dtype == pl.Categorical  # unordered stays Categorical
    back = to_backend(frame, "pandas")["size"]
    assert back.cat.ordered and back.cat.categories.tolist() == ["S", "M", "L"]
    assert back.astype(object).where(back.notna(), None).tolist() == ["M", "S", "L", None]


@pytest.mark.parametrize(("dtype", "values"), [
    (pl.Int8, [-100, 100, None, 5]), (pl.Int16, [-30000, 30000, None, 5]), (pl.UInt8, [0, 255, None, 5]),
    # values indexing their table from 0, and ranges far from 0 (the table starts at the lowest)
    (pl.Int64, [7, 9, None, 8]), (pl.Int64, [10**12, 10**12 + 7, None, 10**12 + 3]),
    (pl.UInt64, [2**63 + 100, 2**63 + 300, None, 2**63 + 105]), (pl.Int32, [-7, -2, None, -5]),
    # UInt64 indexing its table from 0: np.take refused uint64 indices on NumPy 1.x (fails
    # there only without the int64 view; NumPy 2 casts them)
    (pl.UInt64, [7, 9, None, 8]),
])
def test_categorify_of_narrow_integers_spanning_their_type_codes_like_pandas(dtype, values):
    """``values - lo`` wrapped round within int8/int16 (a crash in np.bincount); ranges
    from 0, far from 0 and below it code alike."""
    frame = pl.DataFrame({"k": pl.Series(values, dtype=dtype)})
    recipes = {b: Recipe([Categorify(["k"])]) for b in ("pandas", "polars")}
    # pandas' own nullable type: frame.to_pandas() gives floats, which round a UInt64 past 2**53
    pandas_frame = pd.DataFrame({"k": pd.array(values, dtype=str(dtype))})
    out = {"polars": recipes["polars"].fit_transform(frame), "pandas": recipes["pandas"].fit_transform(pandas_frame)}
    assert recipes["polars"].ops[0].state == recipes["pandas"].ops[0].state == {"k": sorted(v for v in values if v is not None)}
    assert out["polars"]["k"].to_list() == out["pandas"]["k"].tolist() == [2, 4, 1, 3]


def _inline_texts(n: int, seed: int) -> pd.DataFrame:
    """Text columns for the views' path (values of 12 bytes or fewer) and beside it."""
    rng = np.random.default_rng(seed)

    def gappy(values: list[str], share: float = 0.1) -> np.ndarray:
        column = rng.choice(np.array(values, dtype=object), n)
        column[rng.random(n) < share] = None
        return column

    ids = gappy([f"cit_{i:05d}" for i in range(40)])  # one length and prefix: the key is the tail
    ids[: n // 3] = None  # the first slices: missing only
    return pd.DataFrame({
        "ids": ids,
        # 7 bytes or fewer, lengths apart: "" and a trailing NUL are values of their own.
        "short": gappy(["north", "south", "central", "", "a", "a\x00", "Zürich", "é", "ab"]),
        "mixed": gappy(["abcdefgh", "abcdefghij", "zz", "12 bytes abc"]),  # 8-12 bytes, prefixes apart: cast
        "long": gappy(["a value longer than twelve bytes", "b"]),  # a data buffer: cast
        "many": gappy([f"m{i}" for i in range(3000)], 0.02),  # past the sample's few: dictionary
        "none": pd.Series([None] * n, dtype=object),
    })


@pytest.mark.parametrize("cores", [1, 2, 3])
@pytest.mark.parametrize("layout", ["whole", "chunked", "offset"])
def test_categorify_from_inline_views_codes_like_pandas(monkeypatch, cores, layout):
    """The views' path (one exact 64-bit key per value, a perfect hash or Arrow's dictionary)
    against pandas: missing values (whatever their views hold), "" and a trailing NUL, UTF-8,
    a column with none, the cast beside it, in slices, chunks and at an Arrow offset."""
    from gpufeed.gpu_transforms.tabular import category_codes

    monkeypatch.setattr(category_codes, "SLICE_ROWS", 64)
    monkeypatch.setattr(category_codes, "usable_cpus", lambda: cores)
    df = _inline_texts(3000, cores)
    frame = to_backend(df, "polars")
    if layout == "chunked":
        frame = _chunked(df, 3)
    elif layout == "offset":  # a slice of a longer frame: the views start past the buffer's start
        frame = pl.concat([frame[:7], frame], rechunk=True)[7:]
    viewed = {c: category_codes._inline_ids(frame[c].rechunk()) for c in df.columns}
    assert {c for c, v in viewed.items() if v is not None} == {"ids", "short", "many", "none"}
    if layout == "chunked":  # a column in chunks (Parquet row groups) is numbered from its views too
        assert all(frame[c].n_chunks() > 1 for c in df.columns)
        assert {c for c in df.columns if category_codes._inline_ids(frame[c]) is not None} == set(
            c for c, v in viewed.items() if v is not None)
    assert viewed["short"].slots is not None and viewed["many"].slots is None  # hash; dictionary
    columns = list(df.columns)
    recipes = {b: Recipe([Categorify(columns)]) for b in ("pandas", "polars")}
    out = {"pandas": recipes["pandas"].fit_transform(df), "polars": recipes["polars"].fit_transform(frame)}
    assert recipes["polars"].ops[0].state == recipes["pandas"].ops[0].state
    assert recipes["polars"].ops[0].state["short"] == sorted(set(df["short"].dropna()))
    for c in columns:
        assert out["polars"][c].dtype == pl.Int32
        assert out["polars"][c].to_list() == out["pandas"][c].tolist(), c
    assert out["polars"]["none"].to_list() == [MISSING_INDEX] * len(df)
    # Fitted on the views, the vocabulary maps another table as pandas' does (unseen: 0).
    later = pd.DataFrame({c: ["zzz", None, df[c].dropna().iloc[0] if df[c].notna().any() else "x"]
                          for c in columns})
    moved = recipes["polars"].transform(to_backend(later, "polars"))
    expected = recipes["pandas"].transform(later)
    for c in columns:
        assert moved[c].to_list() == expected[c].tolist(), c
    assert moved["short"].to_list()[:2] == [UNSEEN_INDEX, MISSING_INDEX]


def test_text_in_chunks_of_inline_views_is_numbered_a_slice_per_chunk(monkeypatch):
    """A column in row groups of short text is cut at its chunks' edges (small chunks
    joined up to SLICE_ROWS, a short tail joining the last slice), not copied into one
    chunk nor cast, with as many text columns as cores too; it codes as pandas does."""
    from gpufeed.gpu_transforms.tabular import category_codes

    monkeypatch.setattr(category_codes, "SLICE_ROWS", 100)
    rng = np.random.default_rng(5)
    df = pd.DataFrame({"a": rng.choice(["x", "yy", None, "zürich"], 1000).astype(object),
                       "b": rng.choice([f"code-{i:03d}" for i in range(300)], 1000).astype(object)})
    frame = pl.concat([to_backend(df[lo:hi], "polars") for lo, hi in
                       [(0, 60), (60, 130), (130, 400), (400, 450), (450, 990), (990, 1000)]], rechunk=False)
    assert category_codes._slice_bounds(frame["a"], 2) == [(0, 130), (130, 400), (400, 1000)]
    assert category_codes._slice_bounds(frame["a"], 3) == [(0, 130), (130, 400), (400, 1000)]
    assert category_codes._slice_bounds(frame["a"], 4) == [(0, 250), (250, 500), (500, 750), (750, 1000)]  # too few
    long = pl.Series("t", ["a value longer than twelve bytes"] * 500 + ["b"] * 500).rechunk()
    assert category_codes._slice_bounds(pl.concat([long[:500], long[500:]], rechunk=False), 1) == [(0, 1000)]

    def refuse(*args, **kwargs):
        raise AssertionError("the cast's query, not the views")

    monkeypatch.setattr(category_codes, "_fit_whole_columns", refuse)
    monkeypatch.setattr(category_codes, "usable_cpus", lambda: 2)
    recipes = {b: Recipe([Categorify(["a", "b"])]) for b in ("pandas", "polars")}
    out = {"pandas": recipes["pandas"].fit_transform(df), "polars": recipes["polars"].fit_transform(frame)}
    assert recipes["polars"].ops[0].state == recipes["pandas"].ops[0].state
    for c in ("a", "b"):
        assert out["polars"][c].to_list() == out["pandas"][c].tolist(), c


def test_categorify_from_views_with_a_missing_values_view_left_anything():
    """A missing value's view may hold another value's bytes (Arrow leaves it to the writer):
    it joins no vocabulary and codes as missing."""
    import pyarrow as pa

    views = np.array([[5 | int.from_bytes(b"nort", "little") << 32, int.from_bytes(b"h", "little")],
                      [2 | int.from_bytes(b"zz", "little") << 32, 0],  # missing, "zz" left in its view
                      [5 | int.from_bytes(b"nort", "little") << 32, int.from_bytes(b"h", "little")]],
                     dtype=np.uint64)
    validity = pa.py_buffer(np.packbits(np.array([True, False, True]), bitorder="little"))
    array = pa.Array.from_buffers(pa.string_view(), 3, [validity, pa.py_buffer(views)], null_count=1)
    frame = pl.DataFrame({"t": pl.from_arrow(array)})
    assert frame["t"].to_list() == ["north", None, "north"]
    recipe = Recipe([Categorify(["t"])])
    assert recipe.fit_transform(frame)["t"].to_list() == [2, MISSING_INDEX, 2]
    assert recipe.ops[0].state == {"t": ["north"]}


def test_categorify_from_views_not_zero_padded_falls_back_to_the_cast():
    """Two views of one value (padding past its bytes not zeroed by its writer) would be two
    keys: the repeated decoded value sends the slice to the cast."""
    import pyarrow as pa

    from gpufeed.gpu_transforms.tabular import category_codes

    head = 3 | int.from_bytes(b"abc", "little") << 32
    views = np.array([[head, 0], [head | 0xFF << 56, 0], [head, 7]], dtype=np.uint64)  # "abc" thrice
    array = pa.Array.from_buffers(pa.string_view(), 3, [None, pa.py_buffer(views)])
    series = pl.from_arrow(array)
    if series.to_list() != ["abc"] * 3:  # this polars rewrote the views: nothing to test
        pytest.skip("polars normalised the views")
    assert category_codes._inline_ids(series) is None
    recipe = Recipe([Categorify(["t"])])
    assert recipe.fit_transform(pl.DataFrame({"t": series}))["t"].to_list() == [2, 2, 2]
    assert recipe.ops[0].state == {"t": ["abc"]}


def test_hash_multipliers_are_fixed_odd_64_bit_numbers():
    """The same multipliers (so the same ids) on NumPy 1.x and 2.x: on 1.x ``uint64 | 1``
    was a TypeError, and importing the tabular package failed."""
    from gpufeed.gpu_transforms.tabular import category_codes

    multipliers = category_codes._MULTIPLIERS
    assert all(isinstance(m, np.uint64) and int(m) % 2 == 1 for m in multipliers)
    assert [int(m) for m in multipliers[:2]] == [0x64693AB89B351743, 0xB0A38E76B616188D]


def test_categorify_from_views_when_no_multiplier_hashes_without_collisions(monkeypatch):
    """A multiply-shift hash that collides on every try: the keys go to ``dictionary_encode``."""
    from gpufeed.gpu_transforms.tabular import category_codes

    monkeypatch.setattr(category_codes, "_MULTIPLIERS", (np.uint64(1),))  # the keys' top bits: all 0
    df = pd.DataFrame({"t": ["b", "a", None, "c", "a", "bb"] * 50})
    viewed = category_codes._inline_ids(to_backend(df, "polars")["t"])
    assert viewed is not None and viewed.slots is None
    recipes = {b: Recipe([Categorify(["t"])]) for b in ("pandas", "polars")}
    out = {b: r.fit_transform(to_backend(df, b)) for b, r in recipes.items()}
    assert recipes["polars"].ops[0].state == recipes["pandas"].ops[0].state == {"t": ["a", "b", "bb", "c"]}
    assert out["polars"]["t"].to_list() == out["pandas"]["t"].tolist()


def test_categorify_of_a_lazy_polars_frame_equals_the_eager_views_path():
    df = _inline_texts(500, 9)
    columns = ["ids", "short", "many", "none"]
    eager, lazy = Recipe([Categorify(columns)]), Recipe([Categorify(columns)])
    out = eager.fit_transform(to_backend(df, "polars"))
    lazy_out = lazy.fit_transform(to_backend(df, "polars").lazy())
    lazy_out = lazy_out.collect() if isinstance(lazy_out, pl.LazyFrame) else lazy_out
    assert eager.ops[0].state == lazy.ops[0].state
    for c in columns:
        assert lazy_out[c].to_list() == out[c].to_list(), c


def test_to_backend_keeps_a_column_named_empty_beside_text():
    # polars' conversion from pandas named it column_1 when the frame held text, and kept
    # it otherwise: the name must not depend on the other columns.
    import pandas as pd

    from gpufeed.gpu_transforms.tabular import to_backend

    for frame in (pd.DataFrame({"s": ["a", "b"], "": [5, 6]}), pd.DataFrame({"x": [1.0, 2.0], "": [5, 6]})):
        moved = to_backend(frame, "polars")
        assert moved.columns == list(frame.columns) and moved[""].to_list() == [5, 6]


@pytest.mark.parametrize("quantiles", [(0.05, 0.95), (0.0, 1.0), (0.3, 0.6)])
def test_clip_on_polars_and_pandas_gives_the_same_bits_in_chunks_and_slices(monkeypatch, quantiles):
    """polars clips float64 columns with numpy's clip on their Arrow buffers (4x polars'
    own): missing values stay missing, chunks stay as they were, and bounds and values
    are pandas' to the bit; other types (float32, integers) take polars' expression."""
    from gpufeed.gpu_transforms.tabular import numpy_kernels

    monkeypatch.setattr(numpy_kernels, "PIECE", 64)
    rng = np.random.default_rng(4)
    n = 1000
    amount = rng.lognormal(3, 1, n)
    amount[rng.random(n) < 0.1] = np.nan
    df = pd.DataFrame({"amount": amount, "visits": rng.integers(0, 90, n),
                       "small": rng.random(n).astype("float32")})
    frame = pl.concat([to_backend(df, "polars")[:300], to_backend(df, "polars")[300:][:700]], rechunk=False)
    frame = pl.concat([frame[:5], frame[5:]], rechunk=False)  # chunks, one a slice (Arrow offset > 0)
    recipe = Recipe([Clip(["amount", "visits", "small"], quantiles=quantiles)])
    on_polars, on_pandas = recipe.fit_transform(frame), Recipe([Clip(["amount", "visits", "small"],
                                                                      quantiles=quantiles)]).fit_transform(df)
    low, high = recipe.ops[0].state["amount"]
    assert [low, high] == df["amount"].quantile(list(quantiles)).tolist()
    got = on_polars["amount"]
    assert got.null_count() == int(np.isnan(amount).sum()) and got.n_chunks() == frame["amount"].n_chunks()
    np.testing.assert_array_equal(got.to_numpy(), np.clip(amount, low, high))
    for c in ("amount", "visits", "small"):
        np.testing.assert_array_equal(on_polars[c].to_numpy().astype(np.float64),
                                      on_pandas[c].to_numpy().astype(np.float64), err_msg=c)
    assert on_polars["small"].dtype == pl.Float32


@pytest.mark.parametrize("dtype", ["categorical", "enum"])
def test_codes_of_a_polars_categorical_by_its_ids_equal_the_cast_by_text(dtype, monkeypatch):
    # An eager frame's Categorical or Enum key is coded from its physical ids (the text of
    # each id present, once); a lazy frame casts every row to text and to an Enum. Both give
    # the same codes: seen values, an unseen one, missing ones, a column with no value.
    from gpufeed.gpu_transforms.tabular import kernels

    # ids taken by another column (held: polars frees a category set's unused ids)
    taken = pl.Series([f"noise-{i}" for i in range(3000)]).cast(pl.Categorical)
    values = ["north", None, "south", "west", "north", "east", None] * 50
    kind = pl.Categorical if dtype == "categorical" else pl.Enum(["west", "south", "north", "east"])
    frame = pl.DataFrame({"k": pl.Series(values, dtype=pl.String).cast(kind),
                          "none": pl.Series([None] * len(values), dtype=pl.String).cast(kind)})
    vocab = {"k": ["east", "north", "south"], "none": ["east"]}
    exprs = {c: nw.col(c) for c in vocab}

    def codes(native: pl.DataFrame | pl.LazyFrame) -> dict[str, list[int]]:
        out = nw.to_native(kernels.vocabulary_codes(nw.from_native(native), "polars", exprs, vocab, unseen=0,
                                                    missing=1))
        out = out.collect() if isinstance(out, pl.LazyFrame) else out
        return {c: out[c].to_list() for c in vocab}

    by_ids, by_text = codes(frame), codes(frame.lazy())
    want = [{"east": 2, "north": 3, "south": 4, None: 1}.get(v, 0) for v in values]
    assert by_ids == by_text == {"k": want, "none": [1] * len(values)}
    assert kernels.polars_category_codes(frame["k"], vocab["k"], 0, 1, 2).tolist() == want
    assert len(taken) == 3000


def test_codes_of_a_short_categorical_with_far_ids_fall_back_to_the_cast():
    # Ids far past the rows (a category set that other columns filled): no table by id.
    from gpufeed.gpu_transforms.tabular import kernels

    taken = pl.Series([f"far-{i}" for i in range(70_000)]).cast(pl.Categorical)  # held: polars frees unused ids
    late = pl.Series(["far-69999", "brand-new", None], dtype=pl.String).cast(pl.Categorical)
    assert kernels.polars_category_codes(late, ["brand-new"], 0, 1, 2) is None
    out = nw.to_native(kernels.vocabulary_codes(nw.from_native(late.to_frame("k")), "polars", {"k": nw.col("k")},
                                                {"k": ["brand-new"]}, unseen=0, missing=1))
    assert out["k"].to_list() == [0, 2, 1] and len(taken) == 70_000


def test_standardize_by_a_polars_categorical_key_equals_pandas():
    df = _gappy(3000, 4)
    df["country"] = df["country"].astype("category")
    on = {b: Recipe([Standardize(["amount", "days"], by="country")]) for b in ("pandas", "polars")}
    out = {b: r.fit_transform(to_backend(df, b)) for b, r in on.items()}
    assert to_backend(df, "polars").schema["country"] == pl.Categorical
    for c in ("amount", "days"):
        np.testing.assert_allclose(out["polars"][c].to_numpy(), out["pandas"][c].to_numpy(), rtol=1e-12, atol=1e-12)
    later = pl.DataFrame({"amount": [10.0, 10.0], "days": [5, 5],
                          "country": pl.Series(["es", None], dtype=pl.Categorical)})
    mean, std = on["polars"].ops[0].state["global"]["amount"]
    assert on["polars"].transform(later)["amount"].to_list() == pytest.approx([(10.0 - mean) / std] * 2)


def test_standardize_by_group_of_several_columns_on_a_lazy_polars_frame_stays_lazy():
    # A lazy frame has no length: the short-columns check asked for one first and failed
    # ("object of type 'LazyFrame' has no len()"), in fit and in transform.
    df = pl.DataFrame({"g": ["a", "b", None] * 10, "x": np.arange(30.0), "y": np.arange(30.0) ** 2})
    eager = Recipe([Standardize(["x", "y"], by="g")]).fit_transform(df)
    out = Recipe([Standardize(["x", "y"], by="g")]).fit_transform(df.lazy())
    assert isinstance(out, pl.LazyFrame)
    np.testing.assert_allclose(out.collect()["y"].to_numpy(), eager["y"].to_numpy(), rtol=1e-12)
    fitted = Recipe([Standardize(["x", "y"], by="g")]).fit(df)
    np.testing.assert_allclose(fitted.transform(df.lazy()).collect()["x"].to_numpy(), eager["x"].to_numpy(),
                               rtol=1e-12)
