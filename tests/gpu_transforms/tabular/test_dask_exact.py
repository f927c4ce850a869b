"""Dask gives what pandas gives: exact medians, per-group stds around each group's own mean,
and CSV columns typed as read_table types them."""

from __future__ import annotations

import math
import warnings
from fractions import Fraction

import numpy as np
import pandas as pd
import pytest

from gpufeed.datasets.tables import read_table
from gpufeed.gpu_transforms.tabular import (
    Clip,
    EmptyTableError,
    FillMissing,
    MalformedCSVError,
    MixedTypeError,
    Recipe,
    Standardize,
    split_by_time,
)
from gpufeed.gpu_transforms.tabular import dask as dask_module
from gpufeed.gpu_transforms.tabular.dask import read_dask, to_dask

pytest.importorskip("dask.dataframe")


def _uneven(pdf: pd.DataFrame, cuts: list[int]):
    """A Dask frame of the row ranges ``cuts`` (uneven, some empty), as files or filters give."""
    import dask.dataframe as dd

    parts = [pdf.iloc[a:b] for a, b in zip(cuts[:-1], cuts[1:], strict=False)]
    return dd.from_map(lambda p: p, parts, meta=pdf.iloc[:0], enforce_metadata=False)


def _by_species(n: int = 900) -> pd.DataFrame:
    """Rows sorted by group, as penguins-raw ships: each partition holds other values."""
    rng = np.random.default_rng(1)
    g = np.repeat(["a", "b", "c"], n // 3)
    x = np.where(g == "a", rng.normal(-26.5, 0.5, n), np.where(g == "b", rng.normal(-25.0, 0.4, n),
                                                                rng.normal(-24.0, 0.3, n)))
    x[rng.random(n) < 0.05] = np.nan
    k = pd.array(np.where(rng.random(n) < 0.05, None, rng.integers(0, 500, n)), dtype="Int64")
    return pd.DataFrame({"g": g, "x": x, "k": k})


# --- FillMissing(strategy="median") ----------------------------------------------------------

def test_fill_missing_median_on_dask_is_exact_on_sorted_uneven_partitions():
    # Dask's own median merges per-partition percentiles: on penguins-raw (sorted by species,
    # 3 partitions) it filled Delta 13 C with its 78th percentile, without a word.
    pdf = _by_species()
    n = len(pdf)
    expected = Recipe([FillMissing(["x", "k"], strategy="median")]).fit(pdf).ops[0].state
    for ddf in (to_dask(pdf, 3), _uneven(pdf, [0, 5, 5, n // 3, n])):
        with warnings.catch_warnings():
            warnings.simplefilter("error")  # exact: no warning
            got = Recipe([FillMissing(["x", "k"], strategy="median")]).fit(ddf).ops[0].state
        assert got == expected == {"x": float(pdf["x"].median()), "k": float(pdf["k"].median())}


def test_median_and_clip_on_dask_warn_alike_where_they_cannot_be_exact(monkeypatch):
    # Beyond max_tail values from both ends (4,000,000 values a column by default) the
    # median is Dask's approximate one: said, as Clip says it, also for a nullable column
    # (whose fallback Dask refused: "Cannot interpret 'Int64Dtype()' as a data type").
    monkeypatch.setitem(dask_module.quantile_bounds.__kwdefaults__, "max_tail", 10)
    ddf = to_dask(_by_species(), 3)
    with pytest.warns(UserWarning, match=r"FillMissing: quantiles of \['k', 'x'\] lie more than 10 values "
                                         r"from both ends of the column: they are Dask's approximate ones"):
        state = Recipe([FillMissing(["x", "k"], strategy="median")]).fit(ddf).ops[0].state
    assert all(math.isfinite(v) for v in state.values())
    with pytest.warns(UserWarning, match=r"Clip: quantiles of \['k'\] lie more than 10 values .* approximate"):
        Recipe([Clip(["k"], quantiles=(0.25, 0.75))]).fit(ddf)


def test_quantile_tails_on_dask_are_computed_a_bounded_number_of_values_at_a_time(monkeypatch):
    # Every column's tails went through one dask.compute: a median sends up to half its
    # column, so the memory held grew with the number of columns (18 columns of 2M rows:
    # 450-490 MiB over a count pass, 180-240 in groups). In groups of at most max_tail
    # values, the bounds are the same.
    import dask

    pdf = pd.DataFrame({c: np.random.default_rng(i).normal(size=300) for i, c in enumerate("abcdef")})
    pdf.iloc[::7, 2] = np.nan
    expected = Recipe([FillMissing(list(pdf), strategy="median")]).fit(pdf).ops[0].state
    held = []
    compute = dask.compute

    def counted(*args, **kwargs):
        found = compute(*args, **kwargs)
        held.append(sum(len(f) for f in found if isinstance(f, pd.Series)))
        return found

    monkeypatch.setattr(dask, "compute", counted)
    monkeypatch.setitem(dask_module.quantile_bounds.__kwdefaults__, "max_tail", 320)
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # exact: no warning
        got = Recipe([FillMissing(list(pdf), strategy="median")]).fit(to_dask(pdf, 4)).ops[0].state
    assert got == expected
    assert len(held) == 4 and max(held) <= 320, held  # the counts, then 3 groups of 2 tails


# --- Standardize(by=) --------------------------------------------------------------------------

def _exact_std(values: list[float]) -> float:
    """The population std of ``values``, from their exact sum of squared deviations."""
    mean = sum(map(Fraction, values)) / len(values)
    return math.sqrt(sum((Fraction(v) - mean) ** 2 for v in values) / len(values))


def test_group_std_on_dask_is_taken_around_each_groups_own_mean():
    # Around the column's mean, a group far from it beside its own spread lost
    # ((group mean - column mean) / group std)**2 ulps: 3.6e-11 relative on gapminder's
    # populations by country. Compared with the exact std: pandas' own one-pass group std
    # (Welford's) is 1.6e-9 off it on the "far" group here.
    rng = np.random.default_rng(7)
    n = 600
    g = rng.choice(["near", "far", "wide"], n)
    x = np.where(g == "far", 1e5 + rng.normal(0, 1e-3, n),
                 np.where(g == "near", rng.normal(0, 1, n), rng.normal(-3e4, 50.0, n)))
    pdf = pd.DataFrame({"g": g, "x": x})
    groups = Recipe([Standardize(["x"], by="g")]).fit(to_dask(pdf, 3)).ops[0].state["groups"]["x"]
    for key, _, std in groups:
        exact = _exact_std(pdf.loc[pdf["g"] == key, "x"].tolist())
        assert abs(std - exact) <= 1e-15 * exact, (key, std, exact)
    expected = Recipe([Standardize(["x"], by="g")]).fit(pdf).ops[0].state["groups"]["x"]
    assert [k for k, _, _ in groups] == [k for k, _, _ in expected]
    np.testing.assert_allclose([m for _, m, _ in groups], [m for _, m, _ in expected], rtol=1e-15)


def test_group_moments_of_missing_keys_and_empty_groups_equal_pandas():
    pdf = pd.DataFrame({"g": pd.array(["a", None, "b", "a", None, "c", "b"], dtype="str"),
                        "x": [1.0, 2.0, np.nan, 4.0, 8.0, 5.0, np.nan],
                        "y": [1e9 + 1, 1e9 + 2, 1e9 + 4, 1e9 + 8, 1e9, 1e9, 1e9 + 1]})
    rows = dask_module.group_moments(to_dask(pdf, 3), "g", ["x", "y"])
    got = {None if r["g"] is None or r["g"] != r["g"] else r["g"]: r for r in rows}
    grouped = pdf.groupby("g", dropna=False)
    for key, part in grouped:
        row = got[None if key != key else key]
        for c in ("x", "y"):
            assert row[f"n:{c}"] == part[c].count()
            if part[c].count():
                assert row[f"m:{c}"] == pytest.approx(part[c].mean(), rel=1e-15)
                assert row[f"s:{c}"] == pytest.approx(part[c].std(ddof=0), rel=1e-15, abs=1e-300)
            else:  # group "b" has no x: no statistics, as pandas gives none
                assert math.isnan(row[f"m:{c}"]) and math.isnan(row[f"s:{c}"])


# --- read_dask of CSV files ---------------------------------------------------------------------

def _table(n: int = 400) -> pd.DataFrame:
    """A CSV-like table: text, an integer column whose first gap comes late, a date, a float."""
    rng = np.random.default_rng(3)
    age = pd.array(rng.integers(18, 90, n), dtype="Int64")
    age[n - 40::7] = None  # gaps only near the end: past the first block
    return pd.DataFrame({"name": [f"n{i}" for i in range(n)], "age": age,
                         "day": pd.date_range("2008-11-01", periods=n, freq="D").strftime("%Y-%m-%d"),
                         "mass": np.round(rng.normal(4000, 500, n), 1), "flag": rng.random(n) < 0.5})


def test_read_dask_csv_with_late_integer_gaps_and_dates_types_columns_as_read_table(tmp_path):
    # The gap past the first block failed at compute with Dask's "Mismatched dtypes ... age
    # float64 vs int64" (and read_dask took no dtype=); dates stayed text, so split_by_time
    # refused the frame; text was string[pyarrow] where read_table gives pandas' str.
    path = tmp_path / "t.csv"
    _table().to_csv(path, index=False)
    expected = read_table(path, backend="pandas")
    ddf = read_dask(path, backend="pandas", blocksize="2KiB")
    assert ddf.npartitions > 3
    assert ddf.dtypes.astype(str).to_dict() == expected.dtypes.astype(str).to_dict()
    pd.testing.assert_frame_equal(ddf.compute().reset_index(drop=True), expected)
    parts = split_by_time(ddf, "day", cutoffs=("2009-06-01", "2009-09-01"))
    assert sum(len(p) for p in (parts.train, parts.val, parts.test)) == len(expected)


def test_read_dask_csv_reads_gaps_past_the_sample_and_names_a_disagreeing_block(tmp_path, monkeypatch):
    # Typed from a sample that is not the whole file and has no gap, an integer column is
    # nullable Int64 (a boolean one boolean): a later gap is read, not refused. A later value
    # the type cannot hold is named with its file and column, instead of Dask's "Mismatched
    # dtypes"; dtype= reads it as asked.
    monkeypatch.setattr(dask_module, "CSV_SAMPLE_BYTES", 1024)
    table = _table()
    path = tmp_path / "t.csv"
    table.to_csv(path, index=False)
    ddf = read_dask(path, backend="pandas", blocksize="2KiB")
    assert str(ddf["age"].dtype) == "Int64" and str(ddf["flag"].dtype) == "boolean"
    got = ddf.compute()
    assert got["age"].tolist() == table["age"].tolist() and got["age"].isna().sum() == 6
    assert got["day"].tolist() == read_table(path, backend="pandas")["day"].tolist()
    table.astype({"mass": object}).assign(mass=[*table["mass"][:-1], "heavy"]).to_csv(path, index=False)
    with pytest.raises(MixedTypeError, match=rf"{path}: in the block from byte \d+ column 'mass' holds 'heavy'.*"
                                             r"dtype=\{'mass': str\}"):
        read_dask(path, backend="pandas", blocksize="2KiB").compute()
    got = read_dask(path, backend="pandas", blocksize="2KiB", dtype={"mass": str}).compute()
    assert got["mass"].iloc[-1] == "heavy" and got["mass"].dtype == got["name"].dtype


def test_read_dask_csv_files_of_another_header_are_named(tmp_path):
    (tmp_path / "d").mkdir()
    (tmp_path / "d" / "a.csv").write_text("x,y\n1,2\n")
    (tmp_path / "d" / "b.csv").write_text("x,z\n3,4\n")
    with pytest.raises(MalformedCSVError, match=r"b\.csv: its header b'x,z' differs from that of .*a\.csv \(b'x,y'\)"):
        read_dask(tmp_path / "d", backend="pandas").compute()


def test_a_recipe_on_read_dask_csv_equals_it_on_read_table(tmp_path):
    # Text as read_table's dtype (pandas' str, not Dask's string[pyarrow]) on the partitions:
    # the ops take it as they take pandas', group keys and the datetime column too.
    from gpufeed.gpu_transforms.tabular import Categorify, HashBucket

    path = tmp_path / "t.csv"
    _table().assign(grp=lambda t: [f"g{i % 4}" for i in range(len(t))]).to_csv(path, index=False)
    ops = lambda: [FillMissing(["age"]), Standardize(["mass"], by="grp"),  # noqa: E731
                   Categorify(["name"]), HashBucket(["grp", "day"], buckets=8)]
    pdf = read_table(path, backend="pandas")
    expected = Recipe(ops()).fit(pdf).transform(pdf)
    ddf = read_dask(path, backend="pandas", blocksize="4KiB")
    got = Recipe(ops()).fit(ddf).transform(ddf).compute().reset_index(drop=True)
    for c in ("age", "mass", "name", "grp", "day"):
        np.testing.assert_allclose(got[c].to_numpy(float), expected[c].to_numpy(float), rtol=1e-12, atol=1e-12,
                                   err_msg=c)


@pytest.mark.parametrize("head", [b"\n", b"\r\n\r\n", b"\xef\xbb\xbf\n"], ids=["blank", "blank-crlf", "bom-own-line"])
def test_read_dask_csv_finds_the_header_past_blank_lines_as_read_table(tmp_path, head):
    # The header was taken as the file's first line: after a blank line (or a BOM on a line
    # of its own) the real header was read as a data row ("name, n" beside the values), or
    # a numeric column was refused with "pass dtype={'n': str}". Each file's first block
    # is cut there too, a second file's and a quoted name's line break included.
    (tmp_path / "d").mkdir()
    (tmp_path / "d" / "a.csv").write_bytes(head + b'name,"n\nm"\nbob,1\nann,2\n')
    (tmp_path / "d" / "b.csv").write_bytes(b'\n\nname,"n\nm"\ncid,3\n')
    expected = read_table(tmp_path / "d" / "a.csv", backend="pandas")
    got = read_dask(tmp_path / "d" / "a.csv", backend="pandas", blocksize=None).compute()
    pd.testing.assert_frame_equal(got.reset_index(drop=True), expected)
    ddf = read_dask(tmp_path / "d", backend="pandas", blocksize=16)  # the header in the first block
    assert ddf.npartitions > 2
    got = ddf.compute()
    assert got["name"].tolist() == ["bob", "ann", "cid"] and got["n\nm"].tolist() == [1, 2, 3]


def _notes(n: int) -> str:
    """A CSV whose every row quotes a comment of three lines."""
    rows = (f'{i},"note {i}\nsecond line, with a comma\nthird",{i / 2}\n' for i in range(n))
    return "id,comment,score\n" + "".join(rows)


def test_read_dask_csv_cuts_its_type_sample_between_records(tmp_path, monkeypatch):
    # The sample was cut at its last line break, inside a quoted comment: a valid file over
    # the sample failed as malformed, even with blocksize=None, and the error said "Pass
    # on_bad_lines='skip'", which read_dask does not take. A record longer than the sample
    # is read whole.
    monkeypatch.setattr(dask_module, "CSV_SAMPLE_BYTES", 1000)
    path = tmp_path / "t.csv"
    path.write_text(_notes(200))
    expected = read_table(path, backend="pandas")
    got = read_dask(path, backend="pandas", blocksize=None).compute()
    assert got.shape == expected.shape == (200, 3)
    for c in expected:
        assert got[c].tolist() == expected[c].tolist(), c
    long = '"' + "a long\nquoted field " * 200 + '"'
    path.write_text(f"id,comment,score\n0,{long},1.5\n" + _notes(40).split("\n", 1)[1])
    got = read_dask(path, backend="pandas", blocksize=None).compute()
    assert got["comment"].iloc[0] == long.strip('"') and len(got) == 41 and str(got["score"].dtype) == "float64"


def test_read_dask_csv_errors_give_advice_read_dask_takes(tmp_path):
    path = tmp_path / "t.csv"
    path.write_text("a,b\n1,2\n3,4,5\n")
    with pytest.raises(MalformedCSVError, match=r"read_dask reads no malformed line: fix them, or read the file "
                                                r"with read_table\(on_bad_lines='skip'\)") as info:
        read_dask(path, backend="pandas")
    assert "Pass on_bad_lines" not in str(info.value)
    path.write_text("a,b\n" + "".join(f"{i},x\n" for i in range(9)) + "q,y\n")
    with pytest.raises(MixedTypeError, match=r"column 'a' mixes .* pass dtype=\{'a': str\} to read_dask to read "
                                             "the column as text") as info:
        read_dask(path, backend="pandas")
    assert "mixed_types" not in str(info.value)


def test_read_dask_csv_types_from_the_first_file_with_a_row_and_reads_empty_files_as_none(tmp_path):
    # A first file of a header alone typed every column as text for every file (numbers came
    # back as strings, without a word); an empty first file failed the whole read, and an
    # empty later one was "its header b'' differs".
    (tmp_path / "d").mkdir()
    (tmp_path / "d" / "a.csv").write_bytes(b"")
    (tmp_path / "d" / "b.csv").write_text("name,n\n")
    (tmp_path / "d" / "c.csv").write_text("name,n\nbob,1\nann,2\n")
    (tmp_path / "d" / "d.csv").write_bytes(b"\n")
    (tmp_path / "d" / "e.csv").write_text("name,n\ncid,\n")
    ddf = read_dask(tmp_path / "d", backend="pandas")
    assert str(ddf["n"].dtype) == "Int64"
    got = ddf.compute()
    assert got["n"].tolist() == [1, 2, pd.NA] and got["name"].tolist() == ["bob", "ann", "cid"]
    (tmp_path / "e").mkdir()
    (tmp_path / "e" / "a.csv").write_bytes(b"")
    (tmp_path / "e" / "b.csv").write_bytes(b"\n")
    with pytest.raises(EmptyTableError, match=r"each of the 2 CSV files is empty \(not even a header line\)"):
        read_dask(tmp_path / "e", backend="pandas")
    (tmp_path / "e" / "b.csv").write_text("name,n\n")  # a header alone: its columns, no row
    got = read_dask(tmp_path / "e", backend="pandas").compute()
    assert list(got.columns) == ["name", "n"] and len(got) == 0


def test_read_dask_csv_reads_later_finer_and_later_far_timestamps(tmp_path, monkeypatch):
    # Typed from a sample of whole seconds, a timestamp column was parsed as seconds: a later
    # fraction was a MixedTypeError whose advice ("pass dtype={'t': str} (or 'float64')")
    # gave no datetimes back. Microseconds hold a later fraction, and 9999-12-31 too
    # (nanoseconds end in 2262).
    monkeypatch.setattr(dask_module, "CSV_SAMPLE_BYTES", 1024)
    stamps = [f"2024-01-05 10:00:{i % 60:02d}" for i in range(100)]
    later = ["2024-01-05 10:00:00.123", "9999-12-31 23:59:59", "2024-01-05 10:00:00.000001"]
    path = tmp_path / "t.csv"
    path.write_text("t,tz\n" + "".join(f"{t},{t}Z\n" for t in [*stamps, *later]))
    ddf = read_dask(path, backend="pandas", blocksize="2KiB")
    assert str(ddf["t"].dtype) == "datetime64[us]" and str(ddf["tz"].dtype) == "datetime64[us, UTC]"
    got = ddf.compute()
    assert got["t"].tolist() == [pd.Timestamp(t) for t in [*stamps, *later]]
    assert got["tz"].tolist() == [pd.Timestamp(t, tz="UTC") for t in [*stamps, *later]]
    path.write_text("t\n" + "".join(f"{t}\n" for t in [*stamps, "2024/01/06"]))
    with pytest.raises(MixedTypeError, match=r"column 't' holds '2024/01/06', which its type \(timestamp\[us\]"
                                             r".*pass dtype=\{'t': str\} to read_dask to read it as text"):
        read_dask(path, backend="pandas", blocksize="2KiB").compute()
    path.write_text("t\n" + "".join(f"{t}\n" for t in stamps[:40]))  # all of the one file: read_table's type
    assert str(read_dask(path, backend="pandas", blocksize="2KiB")["t"].dtype) == "datetime64[s]"
