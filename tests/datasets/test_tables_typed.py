"""Typed columns and files from other writers: what read_table and write_table keep, refuse
or name, on pandas and polars."""

from __future__ import annotations

import pandas as pd
import pytest

from gpufeed.datasets.tables import read_table, write_table
from gpufeed.gpu_transforms.tabular import MixedTypeError, TabularError


@pytest.mark.filterwarnings("ignore:\\s*your performance may suffer")  # HDF5 pickles the object column
@pytest.mark.parametrize("suffix", [".pkl", ".h5"])
def test_a_pickled_or_hdf5_column_mixing_numbers_and_text_read_on_polars_names_file_and_column(tmp_path, suffix):
    # pandas keeps such an object column; Arrow refused it on the way to polars in its own
    # words ("Could not convert 'a' with type str: tried to convert to int64"), naming
    # neither the file nor the column.
    path = tmp_path / f"sheet{suffix}"
    df = pd.DataFrame({"ok": [1, 2, 3], "code": pd.Series([1, "a", 2.5], dtype=object)})
    write_table(df, path)
    assert read_table(path, backend="pandas")["code"].tolist() == [1, "a", 2.5]
    with pytest.raises(MixedTypeError, match=rf"{path.name}.*'code'.*backend='pandas'") as caught:
        read_table(path, backend="polars")
    assert isinstance(caught.value, TabularError) and "'ok'" not in str(caught.value)


@pytest.mark.parametrize("suffix", [".json", ".jsonl"])
def test_periods_and_intervals_are_written_to_json_as_their_text_as_to_csv(tmp_path, suffix):
    # Through Arrow a period became its ordinal (2024-01 was written as 648) and an interval
    # a {"left", "right"} object, silently.
    df = pd.DataFrame({"month": pd.period_range("2024-01", periods=3, freq="M").insert(3, pd.NaT),
                       "band": pd.IntervalIndex.from_breaks([0, 1, 5, 10]).insert(3, float("nan")),
                       "x": [1.5, 2.5, 3.5, 4.5]})
    want = {"month": ["2024-01", "2024-02", "2024-03", None], "band": ["(0.0, 1.0]", "(1.0, 5.0]", "(5.0, 10.0]", None]}
    for suffix_ in (suffix, ".csv"):
        path = tmp_path / f"t{suffix_}"
        write_table(df, path)
        for backend in ("pandas", "polars"):
            back = read_table(path, backend=backend)
            for column, values in want.items():
                got = back[column].to_list() if backend == "polars" else back[column].tolist()
                assert [None if v != v else v for v in got] == values, (suffix_, backend, column)


def test_an_hdf5_file_of_h5py_datasets_is_refused_naming_them(tmp_path):
    # It said "without a 'data' (or 'table') table and with 0 other tables (keys: none)".
    h5py = pytest.importorskip("h5py")
    import numpy as np

    path = tmp_path / "arrays.h5"
    with h5py.File(path, "w") as fh:
        fh["x"] = np.arange(4)
        fh["group/y"] = np.ones(4)
    for backend in ("pandas", "polars"):
        with pytest.raises(TabularError, match=r"arrays\.h5: HDF5 file without a pandas table: it holds 2 "
                                               r"array\(s\) .*'/x'.*h5py") as caught:
            read_table(path, backend=backend)
        assert "'/group/y'" in str(caught.value)


def test_hdf5_stores_nullable_number_columns_without_gaps_as_their_numpy_type(tmp_path):
    # A Parquet file read on pandas keeps its writer's nullable dtypes (UInt8 ids with no
    # gap): HDF5 refused every such column, full or not.
    df = pd.DataFrame({"id": pd.array([1, 2, 250], dtype="UInt8"), "x": pd.array([0.5, 1.5, 2.5], dtype="Float64"),
                       "ok": pd.array([True, False, True], dtype="boolean"), "n": pd.array([-1, 0, 2**40], dtype="Int64")})
    path = tmp_path / "t.h5"
    write_table(df, path)
    back = pd.read_hdf(path)
    assert {c: str(t) for c, t in back.dtypes.items()} == {"id": "uint8", "x": "float64", "ok": "bool", "n": "int64"}
    assert back.astype(object).values.tolist() == df.astype(object).values.tolist()
    assert read_table(path, backend="polars")["n"].to_list() == [-1, 0, 2**40]
    gap = df.assign(n=pd.array([1, None, 3], dtype="Int64"))
    with pytest.raises(TabularError, match=r"t2\.h5: HDF5 cannot store column\(s\) \{'n': 'Int64'\}"):
        write_table(gap, tmp_path / "t2.h5")


@pytest.mark.parametrize("suffix", [".parquet", ".feather", ".pkl"])
def test_pandas_periods_and_intervals_read_on_polars_are_their_text_not_their_storage(tmp_path, suffix):
    # polars kept pandas' period type as an Extension of its ordinals: 2024-01 read as 648,
    # an interval as a {left, right} struct, and the ops took them as numbers or structs.
    df = pd.DataFrame({"month": pd.period_range("2024-01", periods=3, freq="M").insert(3, pd.NaT),
                       "quarter": pd.period_range("2024Q1", periods=4, freq="Q"),
                       "band": pd.IntervalIndex.from_breaks([0, 1, 5, 10]).insert(3, float("nan"))})
    path = tmp_path / f"t{suffix}"
    write_table(df, path)
    back = read_table(path, backend="polars")
    assert back.to_dict(as_series=False) == {"month": ["2024-01", "2024-02", "2024-03", None],
                                             "quarter": ["2024Q1", "2024Q2", "2024Q3", "2024Q4"],
                                             "band": ["(0.0, 1.0]", "(1.0, 5.0]", "(5.0, 10.0]", None]}
    on_pandas = read_table(path, backend="pandas")
    assert str(on_pandas["month"].dtype) == "period[M]"  # as pd.read_parquet gives it


@pytest.mark.parametrize("suffix", [".parquet", ".pkl"])
def test_an_interval_of_times_with_a_gap_read_on_polars_is_its_text(tmp_path, suffix):
    # The gap was filled with 0 beside the times before the intervals were made: pandas
    # refused that ("category, object, and string subtypes are not supported for
    # IntervalArray", naming no column), where polars had read the column (as a struct).
    times = pd.date_range("2024-01-01", periods=3)
    df = pd.DataFrame({"span": pd.IntervalIndex.from_breaks(times).insert(1, float("nan")),
                       "ids": pd.IntervalIndex.from_breaks([0, 1, 5]).insert(0, float("nan"))})
    path = tmp_path / f"t{suffix}"
    write_table(df, path)
    back = read_table(path, backend="polars")
    assert back["span"].to_list() == ["(2024-01-01 00:00:00, 2024-01-02 00:00:00]", None,
                                      "(2024-01-02 00:00:00, 2024-01-03 00:00:00]"]
    assert back["ids"].to_list() == [None, *df["ids"].iloc[1:].astype(str)]  # as pandas prints them
