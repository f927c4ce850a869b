"""Lossless downcast: smallest dtypes, values unchanged, clear errors when a cast would lose."""

from __future__ import annotations

import warnings

import numpy as np
import pandas as pd
import polars as pl
import pytest

from gpufeed.datasets.sensor import generate_sensor_table
from gpufeed.gpu_transforms.tabular import DowncastError, MissingColumnError, downcast, to_backend


def _values(df) -> pd.DataFrame:
    return df.to_pandas() if isinstance(df, pl.DataFrame) else df


@pytest.mark.parametrize("backend", ["pandas", "polars"])
def test_sensor_table_shrinks_by_60_percent_and_round_trips_exactly(backend):
    table = to_backend(generate_sensor_table(20_000, seed=1), backend)
    small, report = downcast(table)
    assert report.saved_fraction >= 0.60, report.to_markdown()
    before, after = _values(table), _values(small)
    for c in before.columns:
        if c == "region":
            assert after[c].astype(str).tolist() == before[c].astype(str).tolist()
        elif c != "timestamp":
            np.testing.assert_array_equal(after[c].to_numpy(np.float64), before[c].to_numpy(np.float64), err_msg=c)
    changes = {c.column: c for c in report.columns}
    assert changes["flag_00"].after == "Int8" and changes["flag_00"].bytes_after * 8 == changes["flag_00"].bytes_before
    assert changes["ratio_94"].after == "Float64" and "would change in float32" in changes["ratio_94"].note
    assert changes["temp_55"].after == "Float32"
    assert changes["region"].after == "Categorical"


def test_integer_ranges_pick_the_smallest_type():
    df = pd.DataFrame({"u8": [0, 255], "i8": [-128, 127], "i16": [-129, 0], "u16": [0, 65535],
                       "i32": [0, 2**31 - 1], "i64": [0, 2**40]})
    small, _ = downcast(df)
    assert small.dtypes.astype(str).to_dict() == {
        "u8": "uint8", "i8": "int8", "i16": "int16", "u16": "uint16", "i32": "int32", "i64": "int64"}
    signed, _ = downcast(df, allow_unsigned=False)
    assert str(signed["u8"].dtype) == "int16"


def test_float32_only_where_every_value_round_trips_and_tolerance_is_opt_in():
    df = pd.DataFrame({"exact": [0.5, 0.25, np.nan], "lossy": [0.1, 0.2, 0.3]})
    small, report = downcast(df)
    assert str(small["exact"].dtype) == "float32" and str(small["lossy"].dtype) == "float64"
    assert small["exact"].isna().sum() == 1
    loose, _ = downcast(df, float_tolerance=1e-6)
    assert str(loose["lossy"].dtype) == "float32"


def test_float16_only_on_request():
    df = pd.DataFrame({"x": [0.5, 1.0, 1024.0]})
    assert str(downcast(df)[0]["x"].dtype) == "float32"
    assert str(downcast(df, float16=True)[0]["x"].dtype) == "float16"


def test_low_cardinality_text_becomes_categorical_but_ids_do_not():
    df = pd.DataFrame({"region": ["n", "s"] * 50, "uid": [f"u{i}" for i in range(100)]})
    small, _ = downcast(df)
    assert isinstance(small["region"].dtype, pd.CategoricalDtype)
    assert not isinstance(small["uid"].dtype, pd.CategoricalDtype)


@pytest.mark.parametrize("backend", ["pandas", "polars"])
def test_forced_overflow_is_an_error_naming_the_column(backend):
    df = to_backend(pd.DataFrame({"count": [0, 300]}), backend)
    with pytest.raises(DowncastError, match=r"column 'count': 1 value\(s\) outside int8's range .*spans 0\.\.300"):
        downcast(df, dtypes={"count": "int8"})


@pytest.mark.parametrize("backend", ["pandas", "polars"])
def test_impossible_forced_casts_name_the_column(backend):
    df = to_backend(pd.DataFrame({"ok": [1.0, 2.0], "gaps": [1.0, np.nan]}), backend)
    if backend == "pandas":  # polars holds a null in an int8 column; pandas' int8 cannot
        with pytest.raises(DowncastError, match=r"cannot cast column 'gaps' to Int8 \(1 missing"):
            downcast(df, dtypes={"gaps": "int8", "ok": "int8"})
    with pytest.raises(DowncastError, match=r"column 'ok': 'category' is for text columns"):
        downcast(df, dtypes={"ok": "category"})


def test_floats_beyond_float32_stay_float64_without_a_warning():
    df = pd.DataFrame({"huge": [1e300, 1.0]})
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        out, report = downcast(df)
    assert out["huge"].dtype == np.float64 and "would change in float32" in report.columns[0].note


@pytest.mark.parametrize("backend", ["pandas", "polars"])
def test_forced_precision_loss_is_an_error(backend):
    df = to_backend(pd.DataFrame({"ratio": [0.1, 0.5]}), backend)
    with pytest.raises(DowncastError, match=r"column 'ratio': 1 value\(s\) would change"):
        downcast(df, dtypes={"ratio": "float32"})


def test_unknown_column_and_dtype_are_rejected():
    df = pd.DataFrame({"a": [1]})
    with pytest.raises(MissingColumnError, match="'b'"):
        downcast(df, columns=["b"])
    with pytest.raises(ValueError, match="unknown dtype"):
        downcast(df, dtypes={"a": "int7"})


def test_empty_table_keeps_dtypes():
    df = pd.DataFrame({"a": pd.Series([], dtype="int64")})
    small, report = downcast(df)
    assert str(small["a"].dtype) == "int64" and report.bytes_after == report.bytes_before


def test_polars_text_columns_are_counted_by_their_views():
    # Real tables hold short codes (US state codes in an airports table): polars keeps each
    # in a 16-byte view, but its estimated_size counts the 2 letters only, so the move to
    # a categorical (4 bytes a row) was reported as growing the table.
    rng = np.random.default_rng(5)
    states = [f"{a}{b}" for a in "ACMNTW" for b in "AKLTXY"]
    n = 3000
    df = pl.DataFrame({"state": rng.choice(states, n).tolist(),
                       "name": [f"Municipal Airport number {i}" for i in range(n)]})
    _, report = downcast(df)
    state = next(c for c in report.columns if c.column == "state")
    assert state.after == "Categorical" and state.bytes_before >= 16 * n
    assert state.bytes_after < state.bytes_before and report.saved_fraction > 0
    name = next(c for c in report.columns if c.column == "name")  # kept: one value per row
    assert name.after == "String" and name.bytes_before == 16 * n + sum(len(v) for v in df["name"])


@pytest.mark.gpu
def test_float16_on_cudf_is_refused_by_argument():
    cudf = pytest.importorskip("cudf", reason="cuDF is not installed")

    gdf = cudf.DataFrame({"x": [0.5, 1.5]})
    with pytest.raises(ValueError, match="cuDF has no float16 columns \\(float16=True\\)"):
        downcast(gdf, float16=True)
    with pytest.raises(ValueError, match=r"dtypes \['x'\]"):
        downcast(gdf, dtypes={"x": "float16"})


@pytest.mark.parametrize("backend", ["pandas", "polars"])
def test_float_tolerance_keeps_inf_which_float32_holds_exactly(backend):
    # With a tolerance, inf was compared as inf - inf (NaN) and kept the column float64.
    df = to_backend(pd.DataFrame({"x": [0.5, np.inf, -np.inf, np.nan, 0.1], "big": [1e300, 1.0, 2.0, 3.0, 4.0]}),
                    backend)
    for tolerance in (0.0, 1e-6):
        small, _ = downcast(df, float_tolerance=tolerance)
        x = _values(small)["x"]
        assert (str(x.dtype).lower() == "float32") == (tolerance > 0)  # 0.1 needs the tolerance
        assert list(x.to_numpy(np.float64)[:3]) == [0.5, np.inf, -np.inf]
        assert str(_values(small)["big"].dtype).lower() == "float64"  # 1e300 would become inf


def test_the_markdown_report_of_a_wide_table_has_a_row_per_kind_of_change():
    # 65 Int64 -> Int8 columns were 65 rows of the same line (a 2,000-column table: 2,000).
    frame = pd.DataFrame({f"px{i}": np.arange(100) % 17 for i in range(65)} | {"y": np.linspace(0, 1, 100)})
    _, report = downcast(frame)
    table = report.to_markdown().splitlines()
    assert len(table) == 2 + 1 + 1  # header, the one change, the total (y stays float64)
    ints = next(line for line in table if line.startswith("| px0, px1, px2 and 62 more |"))
    assert f"| {65 * 800:,} | {65 * 100:,} |" in ints  # the bytes of all 65
    few = downcast(frame[["px0", "px1", "y"]])[1].to_markdown().splitlines()
    assert [line.split(" |")[0] for line in few[2:4]] == ["| px0", "| px1"]  # few: one row each
