"""Wide tables (many columns, few rows): the ops' statistics and write-back done for all the
columns at once, with the same values as one column at a time."""

from __future__ import annotations

import warnings

import narwhals as nw
import numpy as np
import pandas as pd
import pytest

from gpufeed.gpu_transforms.tabular import (
    Clip,
    FillMissing,
    Log,
    MinMax,
    Recipe,
    Standardize,
    to_backend,
)
from gpufeed.gpu_transforms.tabular.pandas_kernels import assign, column_moments, copy_on_write
from gpufeed.gpu_transforms.tabular.stats import aggregate, moment_exprs


def _wide(rows: int = 300, per_kind: int = 12, seed: int = 0) -> pd.DataFrame:
    """float64 with gaps, int64, float32 and nullable Int64 columns, ``per_kind`` of each."""
    rng = np.random.default_rng(seed)
    columns: dict[str, object] = {}
    for i in range(per_kind):
        x = rng.normal(i * 10.0, 1 + i, rows)
        x[rng.random(rows) < 0.1] = np.nan
        columns[f"f{i}"] = x
        columns[f"i{i}"] = rng.integers(-50, 50 + i, rows)
        columns[f"s{i}"] = rng.normal(-i, 2.0, rows).astype(np.float32)
        columns[f"n{i}"] = pd.array(np.where(rng.random(rows) < 0.1, None, rng.integers(0, 9, rows)), dtype="Int64")
    frame = pd.DataFrame(columns)
    frame.columns.name = "features"
    return frame


def test_column_moments_on_pandas_equal_the_expression_form_bit_for_bit():
    frame = _wide()
    cols = list(frame.columns)
    nw_frame = nw.from_native(frame, eager_only=True)
    counts = [nw.col(c).count().alias(f"n:{c}") for c in cols]
    want = aggregate(nw_frame, [*moment_exprs(cols, nw_frame.schema, "pandas"), *counts])
    got = column_moments(frame, cols)
    assert set(got) == set(want) == {f"{k}:{c}" for k in "msn" for c in cols}
    for key, value in want.items():
        assert float(got[key]) == float(value), key


@pytest.mark.parametrize("backend", ["polars", "pandas"])
def test_moment_exprs_name_every_column_once_on_each_backend(backend):
    frame = to_backend(_wide(rows=50, per_kind=3), backend)
    nw_frame = nw.from_native(frame, eager_only=True)
    cols = list(nw_frame.columns)
    stats = aggregate(nw_frame, moment_exprs(cols, nw_frame.schema, backend))
    assert sorted(stats) == sorted(f"{k}:{c}" for k in "ms" for c in cols)
    # The float32 columns read in float64, as a single column's f64 read does.
    x = np.asarray(_wide(rows=50, per_kind=3)["s1"], dtype=np.float64)
    assert stats["m:s1"] == pytest.approx(x.mean(), rel=1e-13)
    assert stats["s:s1"] == pytest.approx(x.std(), rel=1e-12)


def test_a_recipe_on_a_wide_table_gives_the_same_values_on_pandas_and_polars():
    frame = _wide(rows=200, per_kind=16)  # 64 columns
    before = frame.copy()
    floats = [c for c in frame.columns if c[0] in "fs"]
    ints = [c for c in frame.columns if c[0] in "in"]

    def recipe() -> Recipe:
        return Recipe([FillMissing(floats, strategy="mean"), Clip(floats, quantiles=(0.01, 0.99)),
                       Log([c for c in ints if c[0] == "n"], offset=1), Standardize(floats), MinMax(ints)])

    on_pandas = recipe().fit_transform(frame)
    on_polars = recipe().fit_transform(to_backend(frame, "polars")).to_pandas()
    pd.testing.assert_frame_equal(frame, before)  # the input is left as it was
    assert list(on_pandas.columns) == list(frame.columns) and on_pandas.columns.name == "features"
    for c in frame.columns:
        np.testing.assert_allclose(np.asarray(on_pandas[c], dtype=float), np.asarray(on_polars[c], dtype=float),
                                   rtol=1e-12, atol=1e-12, err_msg=c)


def test_assign_of_many_columns_keeps_the_others_uncopied_and_the_frame_s_labels_and_attrs():
    frame = _wide(rows=20, per_kind=8)
    frame.attrs["source"] = "wide.csv"
    new = {c: pd.Series(np.arange(20.0) + i, index=frame.index) for i, c in enumerate(frame.columns[::2])}
    out = assign(frame, new)
    assert list(out.columns) == list(frame.columns) and out.columns.name == "features"
    assert out.attrs == {"source": "wide.csv"}
    for c in frame.columns:
        if c in new:
            np.testing.assert_array_equal(out[c].to_numpy(), new[c].to_numpy())
            assert not np.array_equal(frame[c].to_numpy(dtype=float, na_value=np.nan), out[c].to_numpy(), equal_nan=True)
        else:
            assert out[c].dtype == frame[c].dtype
            pd.testing.assert_series_equal(out[c], frame[c])
    kept = frame.columns[1]
    assert np.shares_memory(out[kept].to_numpy(), frame[kept].to_numpy()) == copy_on_write()


def test_assign_of_many_columns_with_a_duplicated_label_sets_them_one_by_one():
    frame = pd.DataFrame(np.zeros((3, 20)), columns=[f"c{i}" for i in range(19)] + ["c0"])
    out = assign(frame, {f"c{i}": pd.Series([1.0, 2.0, 3.0]) for i in range(1, 18)})
    assert list(out.columns) == list(frame.columns)
    assert out["c5"].tolist() == [1.0, 2.0, 3.0] and out["c18"].tolist() == [0.0] * 3


def test_a_recipe_on_pandas_columns_kept_apart_raises_no_fragmentation_warning():
    # pandas warns once a frame holds over 100 blocks; the kit keeps the columns it writes
    # apart on purpose (no copy of the others), so the warning was noise on every wide table.
    frame = pd.DataFrame(np.random.default_rng(0).normal(size=(30, 150)), columns=[f"c{i}" for i in range(150)])
    cols = list(frame.columns)
    frame[frame > 1.5] = np.nan  # gaps to fill in every column: each is written anew
    frame["site"] = ["a", "b", "c"] * 10
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # the group codes' column is inserted beside 151 blocks
        Recipe([FillMissing(cols), Log(["c0"], offset=10), Standardize(cols[:5], by="site")]).fit_transform(frame)


def test_standardize_by_group_in_2d_blocks_equals_column_by_column_bit_for_bit(monkeypatch):
    # Short columns are grouped and standardised as 2-D blocks of columns (read in runs of
    # BLOCK_VALUES values, computed in pieces of PIECE): the same values as the column-by-
    # column path long columns take, whatever the runs and pieces cut, on a frame of one
    # block per column (what ops leave) and a missing group key.
    from gpufeed.gpu_transforms.tabular import kernels, pandas_kernels

    frame = _wide(rows=300, per_kind=9)
    frame["ok"] = frame["f0"] > 3
    frame["g"] = np.random.default_rng(3).choice(["a", "b", "c", None], len(frame))
    frame = pd.DataFrame({c: frame[c].copy() for c in frame.columns})  # a block per column
    frame.columns.name = "features"
    columns = [c for c in frame.columns if c != "g"]

    def run(piece: int, block: int) -> pd.DataFrame:
        monkeypatch.setattr(kernels, "PIECE", max(piece, 1))
        monkeypatch.setattr(kernels, "SHORT_BLOCK_ROWS", 1 << 16 if piece else 0)  # 0: every column "long"
        monkeypatch.setattr(pandas_kernels, "BLOCK_VALUES", block)
        return Recipe([Standardize(columns, by="g")]).fit_transform(frame)

    by_column = run(0, 1 << 24)
    for piece, block in [(300 * 4, 300 * 7), (1 << 18, 1 << 24), (1, 1)]:
        blocks = run(piece, block)
        assert list(blocks.columns) == list(frame.columns) and blocks.columns.name == "features"
        pd.testing.assert_frame_equal(blocks, by_column, check_exact=True)
    assert frame["f0"].dtype == np.float64 and len(frame.columns) == 38  # the input is left as it was
    # polars: short columns take the same blocks (and pandas' group-by): the same bits; long
    # ones polars' own group-by and gathers: the same to rounding.
    on_polars = to_backend(frame, "polars")
    for piece, block, exact in [(300 * 4, 300 * 7, True), (0, 1 << 24, False)]:
        monkeypatch.setattr(kernels, "PIECE", max(piece, 1))
        monkeypatch.setattr(kernels, "SHORT_BLOCK_ROWS", 1 << 16 if piece else 0)
        monkeypatch.setattr(pandas_kernels, "BLOCK_VALUES", block)
        polars = Recipe([Standardize(columns, by="g")]).fit_transform(on_polars).to_pandas()
        for c in columns:
            np.testing.assert_allclose(polars[c].to_numpy(float), by_column[c].to_numpy(float),
                                       rtol=0 if exact else 1e-12, atol=0 if exact else 1e-12, err_msg=c)


def test_elementwise_ops_hand_many_short_columns_over_as_one_block_with_the_same_values(monkeypatch):
    # Many short output columns are made as the rows of one 2-D array and placed as one
    # block (70 us a column saved on a wide table): the same frame, bit for bit, as the
    # Series one column at a time, and the input untouched by a write into the output.
    from gpufeed.gpu_transforms.tabular import pandas_kernels

    frame = _wide(rows=300, per_kind=20)
    frame.attrs["source"] = "wide.csv"
    floats = [c for c in frame.columns if c[0] == "f"]
    ints = [c for c in frame.columns if c[0] == "i"]
    before = frame.copy()

    def run(wide: int) -> pd.DataFrame:
        monkeypatch.setattr(pandas_kernels, "WIDE", wide)
        return Recipe([FillMissing(floats), Clip(floats, quantiles=(0.01, 0.99)), Log([c for c in ints if c != "i0"],
                       offset=60), Standardize(floats), MinMax([c for c in frame.columns if c[0] == "s"])]).fit_transform(frame)

    as_series, as_block = run(1 << 30), run(16)
    pd.testing.assert_frame_equal(as_block, as_series, check_exact=True)
    assert list(as_block.columns) == list(frame.columns) and as_block.columns.name == "features"
    assert as_block.attrs == {"source": "wide.csv"}
    if copy_on_write():  # an untouched column: not copied (pandas 2 without it copies, as its assign does)
        assert np.shares_memory(as_block["i0"].to_numpy(), frame["i0"].to_numpy())
    as_block.loc[0, "i0"] = 10**9
    as_block.loc[0, "f3"] = 1e9
    pd.testing.assert_frame_equal(frame, before)


def test_with_block_keeps_the_other_columns_of_a_long_frame_uncopied():
    from gpufeed.gpu_transforms.tabular.pandas_kernels import with_block

    frame = pd.DataFrame(np.arange(40_000.0).reshape(2_000, 20), columns=[f"c{i}" for i in range(20)])
    block = np.ones((3, 2_000))
    out = with_block(frame, ["c4", "c2", "c9"], block, drop=["c0"])
    assert list(out.columns) == [f"c{i}" for i in range(1, 20)]
    assert (out[["c4", "c2", "c9"]].to_numpy() == 1.0).all()
    assert np.shares_memory(out["c5"].to_numpy(), frame["c5"].to_numpy()) == copy_on_write()
    out.loc[0, "c5"] = -1.0
    assert frame.loc[0, "c5"] == 5.0


def test_a_write_into_any_column_of_a_recipe_output_leaves_the_input_as_it_was():
    # The kit hands its outputs over without copying the columns an op did not touch, where
    # pandas copies on write (pandas 3, or its option on pandas 2); pandas 2 without it gets
    # a copy, as from pandas' own assign. Either way the caller's frame never changes.
    rng = np.random.default_rng(8)
    frame = pd.DataFrame({"x": rng.normal(size=50), "n": rng.integers(0, 9, 50), "y": rng.normal(size=50),
                          "g": rng.choice(["a", "b"], 50), "other": np.arange(50.0)})
    frame.loc[3, "x"] = np.nan
    before = frame.copy()
    for op in (FillMissing(["x"]), Log(["n"]), MinMax(["y"]), Clip(["y"], quantiles=(0.1, 0.9)),
               Standardize(["y"], by="g")):
        out = Recipe([op]).fit_transform(frame)
        for c in ("x", "n", "y", "other"):
            out.loc[0, c] = 1e6
        pd.testing.assert_frame_equal(frame, before)


def test_wrap_of_a_pandas_frame_skips_narwhals_name_loop_and_still_refuses_duplicates(monkeypatch):
    # narwhals checks names unique by iterating them in Python (4.5 ms for 2,000 Arrow-string
    # labels, twice or more per op); the kit's wrap checks with Index.is_unique instead.
    # (both modules imported before either is patched: the second import would bind the
    # patched function, and undo() would then restore it)
    from narwhals import _utils
    from narwhals._pandas_like import dataframe as pandas_like

    from gpufeed.gpu_transforms.tabular.frames import wrap

    frame = pd.DataFrame(np.zeros((3, 50)), columns=[f"c{i}" for i in range(50)])
    calls = []
    monkeypatch.setattr(_utils, "check_column_names_are_unique", lambda columns: calls.append(columns))
    monkeypatch.setattr(pandas_like, "check_column_names_are_unique", lambda columns: calls.append(columns))
    wrapped = wrap(frame)
    assert calls == []
    assert nw.to_native(wrapped) is frame
    plain = nw.from_native(frame)
    assert type(wrapped) is type(plain) and wrapped.implementation == plain.implementation
    assert wrapped.schema == plain.schema
    out = wrapped.with_columns((nw.col("c1") + 1).alias("c1"))
    assert nw.to_native(out)["c1"].tolist() == [1.0, 1.0, 1.0]
    monkeypatch.undo()
    doubled = pd.DataFrame(np.zeros((2, 3)), columns=["a", "b", "a"])
    with pytest.raises(Exception, match="'a' 2 times"):
        wrap(doubled)
    with pytest.raises(Exception, match="'a' 2 times"):
        Recipe([Log(["b"])]).fit_transform(doubled)
