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


@pytest.mark.gpu
def test_dask_cudf_partitions_read_nan_as_missing():
    cudf = pytest.importorskip("cudf", reason="cuDF is not installed")
    pytest.importorskip("dask_cudf", reason="dask-cudf is not installed")
    from gpufeed.gpu_transforms.tabular.dask import to_dask

    values = [1.0, np.nan, 3.0, None, 9.0, 2.0, np.nan, 7.0]
    pdf = pd.DataFrame({"x": values, "y": np.arange(8.0)})
    native = cudf.DataFrame({"x": cudf.Series(values, nan_as_null=False), "y": np.arange(8.0)})
    assert int(native["x"].isnull().sum()) == 4 and native["x"].null_count == 1  # NaN kept as values
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


def test_read_dask_on_cudf_lists_a_csv_folder_and_reads_xz_through_pandas(monkeypatch, tmp_path):
    # dask-cudf globs '**' without recursive=True (one folder level: the folder's own files
    # were left out), and cuDF's CSV reader has no xz: checked with a stand-in reader.
    from types import SimpleNamespace

    import dask
    import dask.dataframe as dd

    from gpufeed.gpu_transforms.tabular import dask as dask_module

    calls = []

    class Read:
        def to_backend(self, name):
            calls.append(("to_backend", name))
            return self

    def read_csv(paths, **kwargs):
        calls.append((paths, kwargs, dask.config.get("dataframe.backend")))
        return Read()

    monkeypatch.setattr(dask_module, "installed", lambda name: True)
    monkeypatch.setattr(dask_module, "choose_dataframe_backend", lambda _: SimpleNamespace(name="cudf"))
    monkeypatch.setattr(dd, "read_csv", read_csv)
    (tmp_path / "csv" / "more").mkdir(parents=True)
    for name in ("csv/p0.csv", "csv/more/p1.csv"):
        (tmp_path / name).write_text("a\n1\n")
    dask_module.read_dask(tmp_path / "csv", backend="cudf")
    assert calls[0][0] == [str(tmp_path / "csv" / "more" / "p1.csv"), str(tmp_path / "csv" / "p0.csv")]
    assert calls[0][2] == "cudf"
    calls.clear()
    (tmp_path / "t.csv.xz").write_bytes(b"")
    dask_module.read_dask(tmp_path / "t.csv.xz", backend="cudf")
    assert calls == [(str(tmp_path / "t.csv.xz"), {"blocksize": None, "compression": "xz"}, "pandas"),
                     ("to_backend", "cudf")]


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
