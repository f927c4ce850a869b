"""Scale-out: the same recipe on Dask partitions, on a local cluster, with exact global statistics."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from gpufeed.datasets.sensor import write_sensor_table
from gpufeed.gpu_transforms.tabular import (
    Categorify,
    FillMissing,
    Recipe,
    Standardize,
    UnknownFormatError,
)
from gpufeed.gpu_transforms.tabular.dask import local_cluster, read_dask, to_dask

pytest.importorskip("distributed")


def test_recipe_on_a_local_cluster_combines_statistics_exactly(tmp_path):
    path = write_sensor_table(tmp_path / "s.parquet", 20_000, chunk_rows=65_536, n_features=8, seed=2)
    pdf = pd.read_parquet(path)
    ops = lambda: [FillMissing(["temp_05"]), Standardize(["temp_05", "adc_02"], by="region"),  # noqa: E731
                   Categorify(["station_id"])]
    reference = Recipe(ops()).fit(pdf)
    with local_cluster(n_workers=2) as client:
        assert len(client.scheduler_info()["workers"]) == 2
        ddf = read_dask(str(path), backend="pandas").repartition(npartitions=4)
        recipe = Recipe(ops()).fit(ddf)
        out = recipe.transform(ddf).compute()
    # One global vocabulary, not one per partition; global mean/std equal the in-memory ones.
    assert recipe.ops[2].state["station_id"] == reference.ops[2].state["station_id"]
    assert recipe.ops[0].state["temp_05"] == pytest.approx(reference.ops[0].state["temp_05"], rel=1e-12)
    expected = reference.transform(pdf)
    for c in ("temp_05", "adc_02", "station_id"):
        np.testing.assert_allclose(out[c].to_numpy(float), expected[c].to_numpy(float), rtol=1e-10, atol=1e-12)


def test_standardize_by_a_group_of_arrow_strings_on_dask_equals_pandas():
    # narwhals' group lookup on Dask was pandas' Series.replace(text -> code), which pandas
    # 2.2 refused on a string[pyarrow] column ("Scalar must be NA or str"; fails on pandas
    # 2.x only without the per-partition path: pandas 3 casts).
    df = pd.DataFrame({"g": pd.array(["a", "b", None, "a", "c", "b"], dtype="string[pyarrow]"),
                       "x": [1.0, 2.0, 3.0, 5.0, 8.0, 13.0]})
    fitted = Recipe([Standardize(["x"], by="g")]).fit(df.iloc[:4])
    got = fitted.transform(to_dask(df, 2)).compute()
    expected = fitted.transform(df)
    np.testing.assert_array_equal(got["x"].to_numpy(float), expected["x"].to_numpy(float))


def test_to_dask_and_unknown_files(tmp_path):
    ddf = to_dask(pd.DataFrame({"a": range(10)}), npartitions=3)
    assert ddf.npartitions == 3 and int(ddf["a"].sum().compute()) == 45
    with pytest.raises(UnknownFormatError, match="x.xlsx"):
        read_dask(str(tmp_path / "x.xlsx"))
    with pytest.raises(ValueError, match="npartitions"):
        to_dask(pd.DataFrame({"a": [1]}), npartitions=0)
    with pytest.raises(ValueError, match="paths is an empty list"):
        read_dask([])


def test_cudf_partitions_without_dask_cudf_are_refused_with_the_package_to_install(monkeypatch, tmp_path):
    from types import SimpleNamespace

    from gpufeed.gpu_transforms.tabular import dask as dask_module

    monkeypatch.setattr(dask_module, "installed", lambda name: name != "dask_cudf")
    monkeypatch.setattr(dask_module, "choose_dataframe_backend", lambda _: SimpleNamespace(name="cudf"))
    with pytest.raises(ValueError, match="needs dask-cudf: pip install dask-cudf-cu13"):
        read_dask(tmp_path / "t.parquet", backend="cudf")


def _uneven(pdf: pd.DataFrame, cuts: list[int]):
    """A Dask frame of the row ranges ``cuts`` (uneven, some empty), as files or filters give."""
    import dask.dataframe as dd

    parts = [pdf.iloc[a:b] for a, b in zip(cuts[:-1], cuts[1:], strict=False)]
    return dd.from_map(lambda p: p, parts, meta=pdf.iloc[:0], enforce_metadata=False)


def _sorted_table(n: int = 20_000) -> pd.DataFrame:
    """Sorted by group, as a time- or key-ordered file is: partitions differ in content."""
    rng = np.random.default_rng(0)
    g = np.repeat(["a", "b", "c"], [n // 2, n // 4, n - n // 2 - n // 4])
    x = np.where(g == "a", rng.normal(0, 1, n), np.where(g == "b", rng.normal(50, 5, n), rng.exponential(200, n)))
    x[rng.random(n) < 0.05] = np.nan
    return pd.DataFrame({"g": g, "x": x, "k": rng.integers(0, 3_000, n)})


@pytest.mark.parametrize("qs", [(0.01, 0.99), (0.0, 1.0), (0.07, 0.93), (0.25, 0.75)])
def test_dask_quantile_bounds_equal_pandas_on_uneven_partitions(qs):
    from gpufeed.gpu_transforms.tabular.dask import quantile_bounds

    pdf = _sorted_table()
    n = len(pdf)
    for cuts in ([0, 5, 5, n // 7, n // 3, n - 300, n], [0, n - 5, n], [0, n]):
        got = quantile_bounds(_uneven(pdf, cuts), ["x", "k"], qs)
        # Dask's own quantile gave 1% bounds far inside the data here (a 5-row partition).
        assert got == {c: [float(v) for v in np.quantile(pdf[c].dropna(), qs)] for c in ("x", "k")}


def test_dask_quantile_bounds_name_an_empty_column_and_warn_when_approximate():
    from gpufeed.gpu_transforms.tabular import EmptyTableError
    from gpufeed.gpu_transforms.tabular.dask import quantile_bounds

    pdf = _sorted_table(2_000).assign(e=np.nan)
    with pytest.raises(EmptyTableError, match="'e'"):
        quantile_bounds(to_dask(pdf, 3), ["e"], (0.1, 0.9))
    with pytest.warns(UserWarning, match="approximate"):
        quantile_bounds(to_dask(pdf, 3), ["x"], (0.25, 0.75), max_tail=100)


def test_clip_quantiles_fitted_on_dask_equal_pandas():
    from gpufeed.gpu_transforms.tabular import Clip

    pdf = _sorted_table()
    n = len(pdf)
    ddf = _uneven(pdf, [0, 5, 5, n // 3, n])
    fitted = Recipe([Clip(["x", "k"], quantiles=(0.01, 0.99))]).fit(ddf)
    assert fitted.to_json() == Recipe([Clip(["x", "k"], quantiles=(0.01, 0.99))]).fit(pdf).to_json()


def test_read_dask_reads_a_folder_of_csv_and_compressed_csv(tmp_path):
    pdf = pd.DataFrame({"a": range(30), "b": [f"s{i}" for i in range(30)]})
    (tmp_path / "csv" / "more").mkdir(parents=True)
    pdf.iloc[:10].to_csv(tmp_path / "csv" / "p0.csv", index=False)
    pdf.iloc[10:].to_csv(tmp_path / "csv" / "more" / "p1.csv", index=False)
    ddf = read_dask(tmp_path / "csv", backend="pandas")  # was read as Parquet: "No files satisfy ..."
    assert sorted(ddf["a"].compute().tolist()) == list(range(30))
    for suffix in (".csv.gz", ".csv.bz2", ".csv.xz"):  # .bz2 and .xz were refused as unknown
        pdf.to_csv(tmp_path / f"t{suffix}", index=False)
        assert read_dask(tmp_path / f"t{suffix}", backend="pandas")["a"].sum().compute() == 435
    pdf.to_parquet(tmp_path / "ds.parquet")
    assert len(read_dask([tmp_path / "ds.parquet"], backend="pandas")) == 30  # a list of Path objects
    (tmp_path / "mixed").mkdir()
    pdf.to_csv(tmp_path / "mixed" / "a.csv")
    pdf.to_parquet(tmp_path / "mixed" / "b.parquet")
    with pytest.raises(UnknownFormatError, match="both Parquet and CSV"):
        read_dask(tmp_path / "mixed", backend="pandas")
    # Every CSV file of a folder, compressed or upper-case too (a "**/*.csv" glob left b.csv.gz
    # and C.CSV out without a word), in path order; a folder of compressed files alone too.
    (tmp_path / "all").mkdir()
    pdf.iloc[:10].to_csv(tmp_path / "all" / "a.csv", index=False)
    pdf.iloc[10:20].to_csv(tmp_path / "all" / "b.csv.gz", index=False)
    pdf.iloc[20:].to_csv(tmp_path / "all" / "C.CSV", index=False)
    assert read_dask(tmp_path / "all", backend="pandas")["a"].compute().tolist() == [*range(20, 30), *range(20)]
    (tmp_path / "gz").mkdir()
    pdf.to_csv(tmp_path / "gz" / "only.csv.gz", index=False)
    assert len(read_dask(tmp_path / "gz", backend="pandas")) == 30


# cudf.pandas runs (gpufeed.gpu_transforms.tabular.cudf_pandas), checked on CPU with a stand-in
# cudf.pandas package that records one GPU and one CPU call, as the real profiler reports them.
_FAKE_CUDF_PANDAS = '''
import inspect


def install():
    pass


class Profiler:
    def __enter__(self):
        # as cuDF's profiler does for each line it traces in the file that entered it: from
        # `python -c` there is no source line (None), and joining it raised a TypeError
        "".join(inspect.stack()[1].code_context)
        return self

    def __exit__(self, *exc):
        self.per_function_stats = {"DataFrame.sum": {"gpu": [0.5], "cpu": []},
                                   "DataFrame.apply": {"gpu": [], "cpu": [2.0]}}
        return False
'''


def _fake_cudf_pandas(tmp_path, monkeypatch):
    from gpufeed.gpu_transforms.tabular import cudf_pandas

    fake = tmp_path / "fake"
    (fake / "cudf" / "pandas").mkdir(parents=True)
    (fake / "cudf" / "__init__.py").write_text("")
    (fake / "cudf" / "pandas" / "__init__.py").write_text(_FAKE_CUDF_PANDAS)
    monkeypatch.setenv("PYTHONPATH", str(fake))
    monkeypatch.setattr(cudf_pandas, "cudf_pandas_available", lambda: True)
    return cudf_pandas


def test_cudf_pandas_script_imports_the_modules_beside_it(tmp_path, monkeypatch):
    cudf_pandas = _fake_cudf_pandas(tmp_path, monkeypatch)
    project = tmp_path / "project"
    project.mkdir()
    (project / "helpers.py").write_text("VALUE = 7\n")
    (project / "prepare.py").write_text("import sys\nimport helpers\nsys.exit(0 if helpers.VALUE == 7 else 3)\n")
    monkeypatch.chdir(tmp_path)  # not the script's folder, as `python project/prepare.py` from here
    report = cudf_pandas.run_script(project / "prepare.py")
    assert report.returncode == 0  # was 1: ModuleNotFoundError: No module named 'helpers'


def test_cudf_pandas_report_survives_a_failing_script(tmp_path, monkeypatch):
    cudf_pandas = _fake_cudf_pandas(tmp_path, monkeypatch)
    script = tmp_path / "fails.py"
    script.write_text("raise ValueError('bad row')\n")
    report = cudf_pandas.run_script(script)
    # was: an empty report ("0 of 0 ... 100% of the profiled time ran on the GPU")
    assert report.returncode == 1 and [f.name for f in report.fallbacks] == ["DataFrame.apply"]
    assert report.gpu_time_share == pytest.approx(0.2)
    (tmp_path / "fake" / "cudf" / "pandas" / "__init__.py").write_text("raise ImportError('no GPU')\n")
    with pytest.raises(RuntimeError, match="wrote no profile"):
        cudf_pandas.run_script(script)


def test_the_torch_hand_off_refuses_a_dask_frame_by_name():
    # iter_batches had failed with "object of type 'LazyFrame' has no len()".
    from gpufeed.gpu_transforms.tabular import BackendError
    from gpufeed.pipelines.tables import iter_batches, to_tensors

    ddf = to_dask(pd.DataFrame({"x": [1.0, 2.0, 3.0], "y": [0, 1, 0]}), 2)
    for call, name in ((lambda: next(iter_batches(ddf, ["x"], "y")), "iter_batches"),
                       (lambda: to_tensors(ddf, ["x"], "y"), "to_tensors")):
        with pytest.raises(BackendError, match=rf"{name} needs a pandas, polars or cuDF frame, got dask"):
            call()


def test_categorify_fits_every_column_in_one_pass_over_the_partitions():
    # A compute per column read a Dask table once per text column (4 columns: 4 passes).
    from dask.callbacks import Callback

    from gpufeed.gpu_transforms.tabular import Categorify, Recipe

    pdf = pd.DataFrame({"a": list("xyzx") * 50, "b": list("pqpq") * 50, "c": ["u", "v", None, "u"] * 50})
    runs = []

    class Count(Callback):
        def _start(self, dsk):
            runs.append(1)

    recipe = Recipe([Categorify(["a", "b", "c"])])
    with Count():
        recipe.fit(to_dask(pdf, 3))
    assert len(runs) == 1
    assert recipe.to_json() == Recipe([Categorify(["a", "b", "c"])]).fit(pdf).to_json()


def test_hash_bucket_on_dask_is_lazy_and_buckets_as_pandas():
    # HashBucket's transform ran a compute per column for the distinct values.
    from dask.callbacks import Callback

    from gpufeed.gpu_transforms.tabular import HashBucket, Recipe

    pdf = pd.DataFrame({"user": [f"u{i % 37}" for i in range(300)], "n": [i % 11 for i in range(300)],
                        "v": np.arange(300.0)})
    pdf.loc[5, "user"] = None
    runs = []

    class Count(Callback):
        def _start(self, dsk):
            runs.append(1)

    recipe = Recipe([HashBucket(["user", "n"], buckets=16)])
    with Count():
        out = recipe.fit_transform(to_dask(pdf, 4))
    assert runs == []  # nothing computed until asked
    expected = Recipe([HashBucket(["user", "n"], buckets=16)]).fit_transform(pdf)
    got = out.compute()
    assert got["user"].dtype == "int32" and got["user"].tolist() == expected["user"].tolist()
    assert got["n"].tolist() == expected["n"].tolist()


def test_rules_on_dask_give_pandas_outputs_and_dtypes():
    # A rule without a default came back as an object column of pd.NA (declared int64).
    from gpufeed.gpu_transforms.tabular import Rule, apply_rules, col

    pdf = pd.DataFrame({"delay": [5.0, 70.0, np.nan, 200.0, -3.0, 61.0], "origin": list("ABABCA")})
    rules = [Rule("late", [(col("delay") > 60, 2), (col("delay") > 0, 1)]),
             Rule("flag", [(col("origin") == "A", True)]),
             Rule("w", [(col("delay") > 100, 0.5)], default=1.0)]
    expected = apply_rules(pdf, rules)
    lazy = apply_rules(to_dask(pdf, 3), rules)
    got = lazy.compute()
    for r in ("late", "flag", "w"):
        assert str(lazy[r].dtype) == str(got[r].dtype) == str(expected[r].dtype), r
        assert got[r].astype(object).where(got[r].notna(), None).tolist() == \
            expected[r].astype(object).where(expected[r].notna(), None).tolist(), r


def test_log_on_dask_is_lazy_and_checks_its_domain_when_computed():
    # Log's domain check computed the whole graph at transform time.
    from dask.callbacks import Callback

    from gpufeed.gpu_transforms.tabular import Log, NonFiniteError, Recipe

    pdf = pd.DataFrame({"x": np.arange(1.0, 61.0), "k": np.arange(60)})
    recipe = Recipe([Log(["x", "k"])]).fit(pdf)
    runs = []

    class Count(Callback):
        def _start(self, dsk):
            runs.append(1)

    with Count():
        lazy = recipe.transform(to_dask(pdf, 3))
    assert runs == []
    got, expected = lazy.compute(), recipe.transform(pdf)
    assert got["x"].tolist() == expected["x"].tolist() and got["k"].dtype == expected["k"].dtype
    bad = pdf.assign(x=pdf["x"] - 30.0)  # values <= 0 in the later partitions
    with pytest.raises(NonFiniteError, match="log is undefined"):
        recipe.transform(to_dask(bad, 3)).compute()


def test_read_dask_tells_formats_as_the_table_registry_does(tmp_path):
    # read_dask's suffixes are the registry's (read_table's): .parq is Parquet to both, a
    # zipped or unknown file is refused by name, with what read_dask reads.
    from gpufeed.datasets.tables import detect_format, read_table

    pdf = pd.DataFrame({"a": range(6), "b": list("abcabc")})
    pdf.to_parquet(tmp_path / "t.parq")
    assert detect_format(tmp_path / "t.parq") == "parquet"
    assert read_table(tmp_path / "t.parq", backend="pandas").equals(pdf)
    assert read_dask(tmp_path / "t.parq", backend="pandas").compute()["a"].tolist() == list(range(6))
    pdf.to_csv(tmp_path / "t.csv.zip", index=False)
    for name in ("t.csv.zip", "t.csv.lz4", "t.json"):
        with pytest.raises(UnknownFormatError, match=rf"{name}: read_dask reads Parquet or CSV files"):
            read_dask(tmp_path / name, backend="pandas")


def test_categorify_on_dask_codes_each_partition_as_pandas_does(monkeypatch):
    # The transform went through narwhals' lookup on the Dask frame, which mapped text row
    # by row (1M rows, 1,000 distinct strings: 13 s against pandas' 0.02 s). Each partition
    # is now coded on its own backend's path: one factorisation, the distinct values looked up.
    from gpufeed.gpu_transforms.tabular import Categorify, Recipe, categorical

    pdf = pd.DataFrame({"s": pd.array([f"k{i % 7}" for i in range(40)], dtype="str"),
                        "c": pd.Categorical([i % 5 for i in range(40)]), "n": np.arange(40) % 3})
    train, serve = pdf.iloc[:30].copy(), pdf.copy()
    serve.loc[[3, 33], "s"] = [None, "new"]
    coded_on = []
    real = categorical.vocabulary_codes
    monkeypatch.setattr(categorical, "vocabulary_codes",
                        lambda frame, backend, *a, **k: coded_on.append(backend) or real(frame, backend, *a, **k))
    recipe = Recipe([Categorify(["s", "c", "n"])]).fit(to_dask(train, 3))
    got = recipe.transform(to_dask(serve, 4)).compute()
    expected = Recipe([Categorify(["s", "c", "n"])]).fit(train).transform(serve)
    assert coded_on and set(coded_on) == {"pandas"}  # the partitions, on pandas' path
    for c in ("s", "c", "n"):
        assert got[c].dtype == expected[c].dtype == "int32" and got[c].tolist() == expected[c].tolist(), c
    assert got["s"].tolist()[3] == 1 and got["s"].tolist()[33] == 0  # missing, unseen


@pytest.mark.parametrize("by", [None, "g"])
def test_mean_and_std_of_integers_whose_sum_passes_int64_are_exact_on_dask(by):
    # Dask sums integers in int64 (uint64) per partition: epoch-nanosecond stamps wrapped
    # round past ~5 rows, and Standardize and FillMissing(mean) were silently wrong.
    stamps = pd.Series([1_700_000_000_000_000_000 + i * 1_000_000_000 for i in range(16)], dtype="int64")
    df = pd.DataFrame({"t": stamps, "h": pd.Series([2**63 + 10 * i for i in range(16)], dtype="uint64"),
                       "t_na": stamps.astype("Int64").where(stamps.index != 3), "g": ["a"] * 16})
    ops = lambda: [Standardize(["t", "h"], by=by), FillMissing(["t_na"])]  # noqa: E731
    reference = Recipe(ops()).fit(df)
    recipe = Recipe(ops()).fit(to_dask(df, 2))
    for c in ("t", "h"):
        assert recipe.ops[0].state["global"][c] == pytest.approx(reference.ops[0].state["global"][c], rel=1e-12)
        if by:
            assert recipe.ops[0].state["groups"][c][0][1:] == pytest.approx(
                reference.ops[0].state["groups"][c][0][1:], rel=1e-12)
    assert recipe.ops[1].state["t_na"] == pytest.approx(reference.ops[1].state["t_na"], rel=1e-12)
    got = recipe.transform(to_dask(df, 2)).compute()
    expected = reference.transform(df)
    np.testing.assert_allclose(got["t"].to_numpy(float), expected["t"].to_numpy(float), rtol=1e-6)
    np.testing.assert_allclose(got["h"].to_numpy(float), expected["h"].to_numpy(float), rtol=1e-6)


@pytest.mark.parametrize(("values", "op"), [
    (pd.array([1, None, 3], dtype="Int8"), lambda: FillMissing(["c"], strategy="constant", value=1000)),
    (pd.array([1, None, 3], dtype="Int8"), lambda: FillMissing(["c"], strategy="constant", value=7)),
    (pd.array([1, 2, None, 10], dtype="Int64"), lambda: FillMissing(["c"], strategy="median")),
    (pd.array([1.5, 2.0, None, 10.0], dtype="Float64"), lambda: FillMissing(["c"], strategy="median")),
])
def test_fill_missing_of_pandas_nullable_columns_on_dask_equals_pandas(values, op):
    # Dask cast Int8 to a numpy int16 ("cannot convert NA to integer") and its quantile
    # refused pandas' nullable dtypes ("Cannot interpret 'Int64Dtype()' as a data type").
    df = pd.DataFrame({"c": values})
    expected = Recipe([op()]).fit_transform(df)
    got = Recipe([op()]).fit_transform(to_dask(df, 1)).compute()
    assert str(got["c"].dtype) == str(expected["c"].dtype)
    assert got["c"].tolist() == expected["c"].tolist()
