"""cuDF (and dask-cudf) paths of the table ops, checked value for value against pandas and
polars on a GPU; the parts that can be checked without one run on their pandas twins."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from gpufeed.gpu_transforms.tabular import (
    Categorify,
    Clip,
    FillMissing,
    HashBucket,
    MinMax,
    Recipe,
    Standardize,
    to_backend,
)
from gpufeed.gpu_transforms.tabular.frames import nan_as_null, wrap
from gpufeed.gpu_transforms.tabular.kernels import cudf_category_values


def _pandas(frame) -> pd.DataFrame:
    return frame if isinstance(frame, pd.DataFrame) else frame.to_pandas()


def test_category_values_reads_numbers_not_text():
    # The same checks as on a cuDF Series (dtype named "category", categories.dtype numpy's)
    ints = pd.Series(pd.Categorical([9, 10, 100, 9]))
    assert cudf_category_values(ints).dtype == np.int64 and cudf_category_values(ints).tolist() == [9, 10, 100, 9]
    assert cudf_category_values(pd.Series(pd.Categorical([True, False]))).dtype == np.bool_
    assert cudf_category_values(pd.Series(pd.Categorical(["a", "b"]))) is None
    # text on request, gaps filled, cast and put back (cuDF's cast of a gappy slice lost rows)
    text = cudf_category_values(pd.Series(pd.Categorical(["b", None, "a", None]))[1:], text=True)
    assert text.isna().tolist() == [True, False, True] and text.tolist()[1] == "a" and text.index.tolist() == [1, 2, 3]
    assert cudf_category_values(pd.Series([1, 2])) is None


def test_nan_as_null_leaves_pandas_partitions_alone():
    dd = pytest.importorskip("dask.dataframe")
    ddf = dd.from_pandas(pd.DataFrame({"x": [1.0, np.nan, 3.0]}), npartitions=2)
    frame = wrap(ddf)
    assert nan_as_null(frame, ["x"], backend="dask") is frame  # NaN is missing there already


def _cudf_labelled_as_pandas(data: dict) -> pd.DataFrame:
    """What narwhals' collect of a dask-cudf frame gives: a cuDF frame that narwhals takes
    for pandas. A stand-in: a pandas frame of cuDF's module whose columns refuse
    ``to_list`` as cuDF's do, and have ``to_arrow``."""
    import pyarrow as pa

    class Series(pd.Series):
        @property
        def _constructor(self):
            return Series

        def tolist(self):
            raise TypeError("cuDF does not support conversion to host memory via the `tolist()` method")

        to_list = tolist

        def to_arrow(self):
            return pa.array(pd.Series(self, dtype=self.dtype))

    class Frame(pd.DataFrame):
        _constructor_sliced = Series

        def to_arrow(self, preserve_index=None):  # cuDF's: a whole frame to the host
            return pa.Table.from_pandas(pd.DataFrame(self), preserve_index=preserve_index)

        @property
        def _constructor(self):
            return Frame

    Series.__module__, Frame.__module__ = "cudf.core.series", "cudf.core.dataframe"
    return Frame(data)


def test_small_results_of_cudf_labelled_as_pandas_are_read_through_arrow():
    from gpufeed.gpu_transforms.tabular.frames import series_values, small_rows

    frame = wrap(_cudf_labelled_as_pandas({"k": pd.array([3, None, 1, 3], dtype="Int64"), "v": [1.0, 2.0, 3.0, 4.0]}))
    with pytest.raises(TypeError, match="tolist"):
        frame.get_column("k").to_list()  # what split_by_group called on dask-cudf
    assert series_values(frame.get_column("k")) == [3, None, 1, 3]
    rows = small_rows(frame)
    assert rows[1] == {"k": None, "v": 2.0} and type(rows[0]["k"]) is int


@pytest.mark.gpu
def test_dask_cudf_split_by_group_and_unseen_examples():
    cudf = pytest.importorskip("cudf", reason="cuDF is not installed")
    pytest.importorskip("dask_cudf", reason="dask-cudf is not installed")
    from gpufeed.gpu_transforms.tabular import UnseenCategoryError, split_by_group
    from gpufeed.gpu_transforms.tabular.dask import to_dask

    pdf = pd.DataFrame({"g": ["a", "b", "c", "d", "a", "b"] * 5, "v": np.arange(30.0)})
    ddf = to_dask(cudf.from_pandas(pdf), 3)
    split = split_by_group(ddf, "g", (0.5, 0.25, 0.25), seed=1)  # narwhals' collect: cuDF labelled pandas
    assert split.rows == split_by_group(pdf, "g", (0.5, 0.25, 0.25), seed=1).rows
    recipe = Recipe([Categorify(["g"], on_unseen="raise")]).fit(to_dask(cudf.from_pandas(pdf.iloc[:3]), 1))
    with pytest.raises(UnseenCategoryError, match=r"e\.g\. \['d'"):
        recipe.transform(ddf).compute()


@pytest.fixture
def categories() -> pd.DataFrame:
    return pd.DataFrame({"c": pd.Categorical([9, 10, 100, 9, None, 10]),
                         "v": [1.0, 2.0, 3.0, 4.0, 5.0, 6.0]})


@pytest.mark.gpu
def test_cudf_categoricals_of_numbers_are_their_values(categories):
    pytest.importorskip("cudf", reason="cuDF is not installed")

    gdf = to_backend(categories, "cudf")
    assert str(gdf["c"].dtype) == "category"  # cudf.from_pandas keeps it, polars gets Int64
    for ops in ([Categorify(["c"])], [HashBucket(["c"], 64)], [MinMax(["c"])], [FillMissing(["c"])]):
        reference = Recipe(ops).fit(categories)
        recipe = Recipe(ops).fit(gdf)
        assert recipe.ops[0].state == reference.ops[0].state, ops
        got, expected = _pandas(recipe.transform(gdf)), reference.transform(categories)
        np.testing.assert_array_equal(got["c"].to_numpy(dtype=float, na_value=np.nan),
                                      expected["c"].to_numpy(dtype=float, na_value=np.nan))
    assert Recipe([Categorify(["c"])]).fit(gdf).ops[0].state["c"] == [9, 10, 100]  # not "10" < "100" < "9"
    # Integers with gaps (cuDF 26.10 refused that cast: "Cannot convert float NaN to integer"),
    # and every value missing, with no category to fill the gaps with.
    from gpufeed.gpu_transforms.tabular.kernels import cudf_category_values

    for values in ([9, None, 10], [None, None]):
        series = pd.Series(pd.Categorical(values, categories=pd.Index(sorted({v for v in values if v}), dtype="int64")))
        got = cudf_category_values(to_backend(pd.DataFrame({"c": series}), "cudf")["c"])
        assert str(got.dtype) == "int64" and got.to_arrow().to_pylist() == values


@pytest.mark.gpu
def test_cudf_categoricals_of_a_slice_keep_their_rows():
    # cuDF 26.10's cast of a sliced categorical misread its null mask past ~350 rows, also in
    # a slice with no gap of its own ("j": its parent's only gap is row 0).
    cudf = pytest.importorskip("cudf", reason="cuDF is not installed")
    n = 3000
    ints = [None if i % 10 == 0 else i % 7 for i in range(n)]
    table = pd.DataFrame({"i": pd.Categorical(ints), "t": pd.Categorical([None if v is None else f"t{v}" for v in ints]),
                          "j": pd.Categorical([None] + [i % 5 for i in range(1, n)])})
    part, expected = cudf.from_pandas(table).iloc[17:2500], table.iloc[17:2500]
    for c in table.columns:
        got = cudf_category_values(part[c], text=True).to_arrow().to_pylist()
        assert got == [None if pd.isna(v) else v for v in expected[c].tolist()], c
    for ops in ([Categorify(["i", "t", "j"])], [HashBucket(["i", "t", "j"], 64)]):
        got, want = _pandas(Recipe(ops).fit_transform(part)), Recipe(ops).fit_transform(expected)
        for c in table.columns:
            assert got[c].tolist() == want[c].tolist(), (ops, c)


@pytest.mark.gpu
def test_dask_cudf_partitions_read_nan_as_missing():
    cudf = pytest.importorskip("cudf", reason="cuDF is not installed")
    pytest.importorskip("dask_cudf", reason="dask-cudf is not installed")
    from gpufeed.gpu_transforms.tabular.dask import to_dask

    values = [1.0, np.nan, 3.0, None, 9.0, 2.0, np.nan, 7.0]
    pdf = pd.DataFrame({"x": values, "y": np.arange(8.0)})
    native = cudf.DataFrame({"x": cudf.Series(values, nan_as_null=False), "y": np.arange(8.0)})
    # NaN kept as values: one null (None), two NaN, which isnull() counts too (cuDF 26.10)
    assert native["x"].null_count == 1 and int(native["x"].isnull().sum()) == 3
    ddf = to_dask(native, 3)
    for ops in ([FillMissing(["x"])], [Standardize(["x"])], [MinMax(["x"])], [Clip(["x"], quantiles=(0.1, 0.9))]):
        reference = Recipe(ops).fit(pdf)
        recipe = Recipe(ops).fit(ddf)  # NaN as values: means, stds, bounds were NaN
        got = recipe.transform(ddf).compute().to_pandas().sort_index()
        np.testing.assert_allclose(got["x"].to_numpy(dtype=float, na_value=np.nan),
                                   reference.transform(pdf)["x"].to_numpy(), rtol=1e-12)


@pytest.mark.gpu
def test_downcast_keeps_an_all_missing_integer_column_on_cudf():
    cudf = pytest.importorskip("cudf", reason="cuDF is not installed")
    from gpufeed.gpu_transforms.tabular import downcast

    gdf = cudf.DataFrame({"gap": cudf.Series([None, None, None], dtype="int64"), "n": [1, 2, 3]})
    small, report = downcast(gdf)  # cuDF's min of an all-null column is NaN: int(NaN) failed
    changes = {c.column: (c.before, c.after) for c in report.columns}
    assert changes == {"gap": ("Int64", "Int64"), "n": ("Int64", "Int8")}
    assert small["gap"].null_count == 3 and small["n"].to_arrow().to_pylist() == [1, 2, 3]


def test_read_dask_on_cudf_lists_a_csv_folder_and_parses_it_as_read_table_does(monkeypatch, tmp_path):
    # dask-cudf globs '**' without recursive=True (one folder level: the folder's own files
    # were left out), cuDF's CSV reader has no xz, and its type inference is not read_table's:
    # every file is parsed on the host with the kit's types, then moved to cuDF partitions
    # (checked with a stand-in move).
    from types import SimpleNamespace

    import dask.dataframe as dd

    from gpufeed.gpu_transforms.tabular import dask as dask_module

    moved = []
    monkeypatch.setattr(dask_module, "installed", lambda name: True)
    monkeypatch.setattr(dask_module, "choose_dataframe_backend", lambda _: SimpleNamespace(name="cudf"))
    monkeypatch.setattr(dd.DataFrame, "to_backend", lambda self, name: moved.append(name) or self)
    (tmp_path / "csv" / "more").mkdir(parents=True)
    for name, value in (("csv/p0.csv", 1), ("csv/more/p1.csv", 2)):
        (tmp_path / name).write_text(f"a,d\n{value},2024-01-0{value}\n")
    got = dask_module.read_dask(tmp_path / "csv", backend="cudf")
    assert moved == ["cudf"] and got["a"].compute().tolist() == [2, 1]  # path order: more/p1.csv first
    assert str(got["d"].dtype) == "datetime64[ms]"
    moved.clear()
    pd.DataFrame({"a": [1, 2]}).to_csv(tmp_path / "t.csv.xz", index=False)
    assert dask_module.read_dask(tmp_path / "t.csv.xz", backend="cudf")["a"].sum().compute() == 3
    assert moved == ["cudf"]


@pytest.mark.gpu
def test_read_dask_on_cudf_reads_what_pandas_partitions_read(tmp_path):
    pytest.importorskip("dask_cudf", reason="dask-cudf is not installed")
    from gpufeed.gpu_transforms.tabular.dask import read_dask

    pdf = pd.DataFrame({"a": range(30), "b": [f"s{i}" for i in range(30)]})
    (tmp_path / "csv" / "more").mkdir(parents=True)
    pdf.iloc[:10].to_csv(tmp_path / "csv" / "p0.csv", index=False)
    pdf.iloc[10:].to_csv(tmp_path / "csv" / "more" / "p1.csv", index=False)
    got = read_dask(tmp_path / "csv", backend="cudf").compute()
    assert type(got).__module__.startswith("cudf") and sorted(got["a"].to_arrow().to_pylist()) == list(range(30))
    for suffix in (".csv.gz", ".csv.bz2", ".csv.xz"):  # cuDF's reader has no xz
        pdf.to_csv(tmp_path / f"t{suffix}", index=False)
        got = read_dask(tmp_path / f"t{suffix}", backend="cudf").compute()
        assert type(got).__module__.startswith("cudf") and int(got["a"].sum()) == 435, suffix


@pytest.mark.gpu
def test_cudf_integer_keys_with_gaps_stay_integers_in_fitted_state():
    pytest.importorskip("cudf", reason="cuDF is not installed")

    pdf = pd.DataFrame({"k": pd.array([3, 1, None, 3, 2, 1], dtype="Int64"), "v": [1.0, 2.0, 3.0, 4.0, 5.0, 7.0]})
    polars_frame = to_backend(pdf, "polars")
    gdf = to_backend(polars_frame, "cudf")  # int64 with a null (no pandas dtype kept)
    for ops in ([Categorify(["k"])], [Standardize(["v"], by="k")]):
        expected = Recipe(ops).fit(polars_frame)
        got = Recipe(ops).fit(gdf)  # small results came through to_pandas: keys 1.0, 2.0, 3.0
        state = got.ops[0].state
        keys = state["k"] if "groups" not in state else [g[0] for g in state["groups"]["v"]]
        assert keys == [1, 2, 3] and all(type(k) is int for k in keys), keys  # 1.0 == 1: the types decide
        np.testing.assert_allclose(_pandas(got.transform(gdf))[ops[0].columns[0]].to_numpy(dtype=float),
                                   expected.transform(polars_frame)[ops[0].columns[0]].to_numpy().astype(float))


@pytest.mark.gpu
def test_cudf_clip_quantiles_come_from_one_sort_and_match_pandas():
    pytest.importorskip("cudf", reason="cuDF is not installed")
    from gpufeed.gpu_transforms.tabular import EmptyTableError

    rng = np.random.default_rng(3)
    pdf = pd.DataFrame({"x": rng.normal(size=1000), "k": rng.integers(0, 100, 1000),
                        "i": pd.array(rng.integers(0, 9, 1000), dtype="Int64")})
    pdf.loc[::7, "x"] = np.nan
    gdf = to_backend(pdf, "cudf")
    reference = Recipe([Clip(["x", "k", "i"], quantiles=(0.05, 0.95))]).fit(pdf)
    recipe = Recipe([Clip(["x", "k", "i"], quantiles=(0.05, 0.95))]).fit(gdf)
    for c in ("x", "k", "i"):
        assert recipe.ops[0].state[c] == pytest.approx(reference.ops[0].state[c], rel=1e-12), c
    empty = to_backend(pd.DataFrame({"x": [np.nan, np.nan]}), "cudf")
    with pytest.raises(EmptyTableError, match="'x' has no non-missing value"):
        Recipe([Clip(["x"], quantiles=(0.1, 0.9))]).fit(empty)


# --- HashBucket on cuDF: CRC32 in cupy over the column's device buffers ---------------------


def test_cudf_hash_text_takes_what_the_arrow_text_takes():
    # The same dispatch as on a cuDF Series (dtypes named as cuDF names them), on pandas twins:
    # strings as they are, integers as decimal text.
    from gpufeed.gpu_transforms.tabular.categorical import _cudf_text

    assert _cudf_text(pd.Series(["a", None], dtype=object)).tolist()[0] == "a"
    assert _cudf_text(pd.Series(["a", None], dtype="string")).tolist()[0] == "a"
    assert _cudf_text(pd.Series([2**64 - 1, 2**63, 0], dtype="uint64")).tolist() == [
        "18446744073709551615", "9223372036854775808", "0"]
    assert _cudf_text(pd.Series([-(2**63), -128, -1], dtype="int64")).tolist() == [
        "-9223372036854775808", "-128", "-1"]
    assert _cudf_text(pd.Series([-128, 127], dtype="int8")).tolist() == ["-128", "127"]
    for other in (pd.Series([True, False]), pd.Series([1.0, 2.5]), pd.Series(pd.to_datetime(["2024-01-01"])),
                  pd.Series([1, 2], dtype="category"), pd.Series(["a", None], dtype="category")):
        # categoricals are their values by then (_category_values)
        assert _cudf_text(other) is None, other.dtype


_HASH_ALPHABET = ["a", "Z", "7", " ", "-", "é", "€", "中", "𝄞"]  # 1- to 4-byte UTF-8


def _hash_table(n: int = 3000):
    """A polars frame of the kinds cuDF hashes on the device, with gaps: text (empty strings,
    1- to 4-byte UTF-8, up to 600 characters: past the 256 cached byte tables), int64 with gaps,
    negative int64 (its minimum), int8, uint64 past 2**63 (its maximum), uint32, and text with
    one 100 kB value."""
    import random

    import polars as pl

    rng = random.Random(43)

    def text() -> str | None:
        if rng.random() < 0.1:
            return None
        longest = rng.choice([0, 1, 4, 8, 16, 40, 600])
        return "".join(rng.choice(_HASH_ALPHABET) for _ in range(rng.randint(0, longest)))

    def gaps(values: list) -> list:
        return [None if rng.random() < 0.1 else v for v in values]

    texts = [text() for _ in range(n)]
    big = [f"user-{i}" for i in range(n)]
    big[n // 2] = "€" * 34_000 + "x" * 100  # 102,100 bytes
    negatives = [-(2**63), -(2**63) + 1, -1, 0, 1] + [rng.randint(-(2**63), -1) for _ in range(n - 5)]
    u64 = [2**64 - 1, 2**63, 2**63 + 1, 2**63 - 1, 0] + [rng.randint(0, 2**64 - 1) for _ in range(n - 5)]
    return pl.DataFrame({
        "text": pl.Series(texts, dtype=pl.String),
        "ints": pl.Series(gaps([rng.randint(0, 10**6) for _ in range(n)]), dtype=pl.Int64),
        "neg": pl.Series(gaps(negatives), dtype=pl.Int64),
        "i8": pl.Series(gaps([rng.randint(-128, 127) for _ in range(n)]), dtype=pl.Int8),
        "u64": pl.Series(gaps(u64), dtype=pl.UInt64),
        "u32": pl.Series([rng.randint(0, 2**32 - 1) for _ in range(n)], dtype=pl.UInt32),
        "big": pl.Series(big, dtype=pl.String),
        "cat": pl.Series(texts, dtype=pl.String),  # a categorical on cuDF (below)
    })


def _cudf_hash_table(frame):
    gdf = to_backend(frame, "cudf")
    gdf["cat"] = gdf["cat"].astype("category")
    assert str(gdf["cat"].dtype) == "category"
    assert str(gdf["u64"].dtype) == "uint64" and str(gdf["i8"].dtype) == "int8"
    return gdf


def _on_the_device_only(monkeypatch) -> list[str]:
    """The columns cuDF hashed on the device, recorded as they go; its host fallback and the
    distinct values path (a Python loop over the values) fail the test."""
    from gpufeed.gpu_transforms.tabular import categorical as cat

    def refuse(*args, **kwargs):
        raise AssertionError("HashBucket on cuDF left the device")

    taken: list[str] = []
    real = cat._cudf_buckets

    def spy(native, series, buckets):
        out = real(native, series, buckets)
        if out is not None:
            taken.append(series.name)
        return out

    monkeypatch.setattr(cat, "_cudf_host_buckets", refuse)
    monkeypatch.setattr(cat, "_distinct_values", refuse)
    monkeypatch.setattr(cat, "_cudf_buckets", spy)
    return taken


@pytest.mark.gpu
def test_cudf_hash_bucket_on_the_device_is_polars_value_for_value(monkeypatch):
    pytest.importorskip("cudf", reason="cuDF is not installed")
    from gpufeed.gpu_transforms.tabular.categorical import stable_hash

    frame = _hash_table()
    gdf = _cudf_hash_table(frame)
    columns = list(frame.columns)
    taken = _on_the_device_only(monkeypatch)
    for buckets in (2, 1000, 2**31):
        expected = Recipe([HashBucket(columns, buckets=buckets)]).fit_transform(frame)
        got = Recipe([HashBucket(columns, buckets=buckets)]).fit_transform(gdf)
        assert type(got).__module__.startswith("cudf")
        for c in columns:
            assert str(got[c].dtype) == "int32", c
            assert got[c].to_arrow().to_pylist() == expected[c].to_list(), (c, buckets)
        for c in ("neg", "u64", "big"):  # and stable_hash itself, value by value
            assert got[c].to_arrow().to_pylist() == [0 if v is None else stable_hash(v, buckets)
                                                     for v in frame[c].to_list()], (c, buckets)
    assert set(taken) == set(columns)


@pytest.mark.gpu
def test_cudf_hash_bucket_of_a_slice_keeps_its_rows_and_index(monkeypatch):
    # A sliced cuDF frame's columns start past the buffers' first offset.
    pytest.importorskip("cudf", reason="cuDF is not installed")
    frame = _hash_table()
    gdf = _cudf_hash_table(frame).iloc[17:2500]
    columns = list(frame.columns)
    taken = _on_the_device_only(monkeypatch)
    expected = Recipe([HashBucket(columns, buckets=1000)]).fit_transform(frame.slice(17, 2500 - 17))
    got = Recipe([HashBucket(columns, buckets=1000)]).fit_transform(gdf)
    assert got.index.to_pandas().tolist() == list(range(17, 2500))
    for c in columns:
        assert got[c].to_arrow().to_pylist() == expected[c].to_list(), c
    assert set(taken) == set(columns)


@pytest.mark.gpu
def test_cudf_hash_bucket_of_empty_and_missing_text(monkeypatch):
    pytest.importorskip("cudf", reason="cuDF is not installed")
    import polars as pl

    frame = pl.DataFrame({"empty": pl.Series(["", "", None, ""], dtype=pl.String),
                          "none": pl.Series([None] * 4, dtype=pl.String),
                          "ints": pl.Series([None] * 4, dtype=pl.Int64)})
    gdf = to_backend(frame, "cudf")
    taken = _on_the_device_only(monkeypatch)
    for part, native in ((frame, gdf), (frame.slice(0, 0), gdf.iloc[0:0])):
        expected = Recipe([HashBucket(list(frame.columns), buckets=64)]).fit_transform(part)
        got = Recipe([HashBucket(list(frame.columns), buckets=64)]).fit_transform(native)
        for c in frame.columns:
            assert got[c].to_arrow().to_pylist() == expected[c].to_list(), c
    assert set(taken) == set(frame.columns)


@pytest.mark.gpu
def test_cudf_hash_bucket_falls_back_to_one_host_round_trip_exactly(monkeypatch):
    # Where cuDF's internals change (its device buffers cannot be read), the column goes to
    # the host once and through the numpy kernel: the same buckets, with a warning, and no
    # per-value loop.
    pytest.importorskip("cudf", reason="cuDF is not installed")
    from gpufeed.gpu_transforms.tabular import categorical as cat

    def changed(text):
        raise AttributeError("'Series' object has no attribute 'to_pylibcudf'")

    def refuse(*args, **kwargs):
        raise AssertionError("the distinct values path ran")

    frame = _hash_table(500)
    gdf = _cudf_hash_table(frame)
    columns = list(frame.columns)
    monkeypatch.setattr(cat, "_cudf_text_buffers", changed)
    monkeypatch.setattr(cat, "_distinct_values", refuse)
    expected = Recipe([HashBucket(columns, buckets=1000)]).fit_transform(frame)
    with pytest.warns(RuntimeWarning, match="one round trip"):
        got = Recipe([HashBucket(columns, buckets=1000)]).fit_transform(gdf)
    assert type(got).__module__.startswith("cudf")
    for c in columns:
        assert str(got[c].dtype) == "int32", c
        assert got[c].to_arrow().to_pylist() == expected[c].to_list(), c
