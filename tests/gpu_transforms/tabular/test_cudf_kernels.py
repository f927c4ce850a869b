"""cuDF's fast paths, run on pandas (whose API they are written on) against the narwhals
expressions they replace on cuDF: the same numbers, bit for bit, and the input untouched.
On cuDF itself the gpu-marked recipe tests compare them with pandas and polars."""

from __future__ import annotations

import narwhals as nw
import numpy as np
import pandas as pd
import pytest

from gpufeed.gpu_transforms.tabular import Clip, FillMissing, Log, MinMax, Standardize, cudf_kernels
from gpufeed.gpu_transforms.tabular.kernels import GROUP_CODE, standardize_by_code, vocabulary_codes


@pytest.fixture
def frame() -> pd.DataFrame:
    rng = np.random.default_rng(5)
    x = rng.normal(3.0, 2.0, 500)
    x[::7] = np.nan
    return pd.DataFrame({"x": x, "y": rng.uniform(-1e6, 1e6, 500), "k": rng.integers(0, 4, 500).astype("int32")})


def _by_narwhals(df: pd.DataFrame, *exprs: nw.Expr) -> pd.DataFrame:
    return nw.from_native(df).with_columns(*exprs).to_native()


def test_fill_clip_and_affine_equal_the_narwhals_expressions_bit_for_bit(frame):
    before = frame.copy()
    pd.testing.assert_frame_equal(cudf_kernels.fill(frame, {"x": 0.25}), _by_narwhals(frame, nw.col("x").fill_null(0.25)))
    pd.testing.assert_frame_equal(cudf_kernels.clip(frame, {"x": (0.5, None), "y": (-1e5, 1e5)}),
                                  _by_narwhals(frame, nw.col("x").clip(0.5, None), nw.col("y").clip(-1e5, 1e5)))
    params = {"x": (3.0, 2.0), "y": (-7.5, 1e6 / 3)}
    pd.testing.assert_frame_equal(cudf_kernels.affine(frame, params),
                                  _by_narwhals(frame, *[((nw.col(c) - s) * (1.0 / d)).alias(c)
                                                        for c, (s, d) in params.items()]))
    pd.testing.assert_frame_equal(frame, before)  # written into a shallow copy only


def test_standardize_by_code_equals_the_pandas_kernel_bit_for_bit(frame):
    # The codes gather each column's per-group tables (code 4: unseen and missing groups).
    coded = frame.rename(columns={"k": GROUP_CODE})
    tables = {"x": ([1.0, 2.0, 3.0, 4.0, 2.5], [0.5, 1.5, 2.0, 3.0, 1.0]),
              "y": ([-1.0, 0.0, 1e3, 7.0, 0.1], [1e5, 2e5, 3e5, 4e5, 5e5])}
    want = standardize_by_code(nw.from_native(coded), "pandas", tables).to_native()
    got = cudf_kernels.standardize_by_code(coded, GROUP_CODE, tables, np)
    for c in tables:
        np.testing.assert_array_equal(got[c].to_numpy(dtype=np.float64, na_value=np.nan), want[c].to_numpy())
        assert got[c].dtype == np.float64
    assert np.isnan(got["x"].to_numpy()[::7]).all()  # missing stays missing


@pytest.mark.parametrize("make", [lambda: MinMax(["x", "y", "n"]), lambda: FillMissing(["x", "y"]),
                                  lambda: FillMissing(["x", "y"], strategy="median"),
                                  lambda: Clip(["x", "y"], lower=-1.0, upper=4.0), lambda: Log(["y2"]),
                                  lambda: Standardize(["x", "y"])])
def test_the_ops_cudf_branches_on_a_pandas_frame_fit_and_give_what_the_pandas_path_does(frame, make):
    # The ops' cuDF branches (their fits' reductions, their transforms' column methods) run
    # on the pandas API, so a pandas frame told it is cuDF takes them here, on CPU.
    df = frame.assign(n=np.arange(500) - 250, y2=frame["y"].abs())
    cudf_like, reference = make(), make()
    cudf_like.fit(nw.from_native(df), "cudf")
    reference.fit(nw.from_native(df), "pandas")
    assert cudf_like.state == reference.state
    got = nw.to_native(cudf_like.transform(nw.from_native(df), "cudf"))
    want = nw.to_native(reference.transform(nw.from_native(df), "pandas"))
    for c in cudf_like.columns:
        np.testing.assert_array_equal(got[c].to_numpy(dtype=np.float64, na_value=np.nan),
                                      want[c].to_numpy(dtype=np.float64, na_value=np.nan), err_msg=c)


def test_reductions_are_the_columns_own():
    df = pd.DataFrame({"x": [1.5, np.nan, -2.0], "n": [3, 1, 2]})
    got = cudf_kernels.reductions(df, {"lo": ("x", "min"), "hi": ("n", "max"), "m": ("x", "mean")})
    assert got == {"lo": -2.0, "hi": 3, "m": -0.25}


def test_vocabulary_codes_by_index_lookup_equal_the_narwhals_lookup():
    # Known text gets start + its place, unseen text `unseen`, missing `missing` (as int32).
    text = pd.Series(["b", None, "zz", "a", "b", ""], dtype="str")
    df = pd.DataFrame({"t": text, "u": text.iloc[::-1].reset_index(drop=True)})
    vocabularies = {"t": ["a", "b", ""], "u": []}
    got = cudf_kernels.vocabulary_codes(df, vocabularies, 1, 0, 2, {"t": "t", "u": "code_u"}, np, pd.Index)
    want = vocabulary_codes(nw.from_native(df), "dask-like", {c: nw.col(c) for c in vocabularies}, vocabularies,
                            1, 0, start=2, names={"t": "t", "u": "code_u"}).to_native()
    assert got["t"].tolist() == want["t"].tolist() == [3, 0, 1, 2, 3, 4]
    assert got["code_u"].tolist() == want["code_u"].tolist() == [1, 1, 1, 1, 0, 1]
    assert got["t"].dtype == np.int32 and got["u"].tolist() == df["u"].tolist()


@pytest.mark.parametrize(("values", "offset"), [([2, 5, 9], -1), ([255, 255, 255], 1)])
def test_logs_domain_check_on_cudf_reductions_of_narrow_integers_counts_in_float(values, offset):
    # cuDF's minimum of a uint8 column is a numpy uint8: `low + offset` overflowed in it
    # (NumPy 2) where pandas' path reads the minimum as a float.
    df = pd.DataFrame({"u": np.array(values, dtype=np.uint8)})
    op, reference = Log(["u"], offset=offset), Log(["u"], offset=offset)
    got = nw.to_native(op.fit_transform(nw.from_native(df), "cudf"))
    want = nw.to_native(reference.fit_transform(nw.from_native(df), "pandas"))
    np.testing.assert_array_equal(got["u"].to_numpy(dtype=np.float64), want["u"].to_numpy(dtype=np.float64))


class _Column:
    """A float column as cuDF holds it: NaN apart from null (``null_count``; ``isna``
    counting both), for nans_as_nulls on CPU."""

    def __init__(self, values: list, nulls: list[bool]) -> None:
        self.values, self.nulls = np.array(values, dtype=float), np.array(nulls)
        self.null_count = int(self.nulls.sum())

    def isna(self) -> pd.Series:
        return pd.Series(self.nulls | np.isnan(self.values))

    def nans_to_nulls(self) -> _Column:
        return _Column(list(self.values), list(self.nulls | np.isnan(self.values)))


class _Frame(dict):
    def copy(self, deep: bool = True) -> _Frame:
        return _Frame(self)


def test_nans_as_nulls_writes_only_the_columns_holding_nan_and_keeps_a_frame_without_any():
    frame = _Frame(a=_Column([1.0, np.nan, 3.0], [False, False, True]), b=_Column([1.0, 2.0, 0.0], [False, False, True]))
    out = cudf_kernels.nans_as_nulls(frame, ["a", "b"])
    assert out is not frame and out["b"] is frame["b"] and frame["a"].null_count == 1  # the input untouched
    assert out["a"].null_count == 2 and out["a"].nulls.tolist() == [False, True, True]
    assert cudf_kernels.nans_as_nulls(frame, ["b"]) is frame  # nothing to change: the frame itself
