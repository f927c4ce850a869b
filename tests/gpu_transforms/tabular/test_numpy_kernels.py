"""The numpy kernels' thread pool and Log's one-pass checks on polars: what the outputs of
the kernel prove (no NaN, every value above -offset) and what they cannot (values under
missing slots), each against pandas."""

from __future__ import annotations

import os
import threading

import numpy as np
import pandas as pd
import polars as pl
import pyarrow as pa
import pytest

from gpufeed.gpu_transforms.tabular import (
    Clip,
    EmptyTableError,
    Log,
    MinMax,
    NonFiniteError,
    Recipe,
)
from gpufeed.gpu_transforms.tabular import numpy_kernels as nk


def _with_values_under_nulls(values: list[float], valid: list[bool]) -> pl.Series:
    """A float64 Series whose missing slots keep ``values`` in its Arrow buffer, as a
    Parquet reader or ``fill_nan(None)`` leaves them (polars' constructors write zeros)."""
    bits = np.packbits(np.array(valid, dtype=np.uint8), bitorder="little")
    array = pa.Array.from_buffers(pa.float64(), len(values),
                                  [pa.py_buffer(bits.tobytes()), pa.py_buffer(np.array(values).tobytes())],
                                  null_count=valid.count(False))
    return pl.Series("x", array)


def test_spread_keeps_order_runs_nested_calls_inline_and_works_in_a_forked_child():
    assert nk.spread(lambda i: i * i, range(50), threads=2) == [i * i for i in range(50)]
    # A call from a pool thread must not wait on the pool's own (busy) threads.
    nested = nk.spread(lambda i: sum(nk.spread(lambda j: j, range(i), threads=2)), range(8), threads=2)
    assert nested == [sum(range(i)) for i in range(8)]
    names = set(nk.spread(lambda _: threading.current_thread().name, range(20), threads=2))
    assert any(n.startswith("gpufeed-table") for n in names)
    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child inherits the pool object, not its threads: it needs a new one
        ok = nk.spread(lambda i: i + 1, range(10), threads=2) == list(range(1, 11))
        os.write(write, b"1" if ok else b"0")
        os._exit(0)
    os.close(write)
    assert os.read(read, 1) == b"1"
    os.waitpid(pid, 0)


def test_spread_of_many_items_in_runs_calls_each_once_in_order():
    seen: list[int] = []
    lock = threading.Lock()

    def square(i: int) -> int:
        with lock:
            seen.append(i)
        return i * i

    n = 2 * nk.BATCHES_PER_THREAD * 125 + 3  # past the runs' size, not a multiple of it
    assert nk.spread(square, range(n), threads=2) == [i * i for i in range(n)]
    assert sorted(seen) == list(range(n))


def test_log_offset_lows_reports_nan_and_minus_inf_from_any_piece(monkeypatch):
    monkeypatch.setattr(nk, "PIECE", 4)  # several pieces per array
    a = np.arange(1.0, 11.0)
    b = a.copy()
    b[7] = np.nan
    c = a.copy()
    c[9] = -1.0  # log(-1 + 1) = -inf
    outs, lows = nk.log_offset_lows([a, b, c, a[:0]], 1.0)
    np.testing.assert_array_equal(outs[0], np.log(a + 1.0))
    assert lows[0] == np.log(2.0) and np.isnan(lows[1]) and lows[2] == -np.inf and lows[3] == np.inf


def test_log_on_polars_makes_nan_missing_and_matches_pandas():
    values = [1.0, float("nan"), 3.0, None, 0.5]
    frame = pl.DataFrame({"x": pl.Series(values, dtype=pl.Float64, nan_to_null=False)})
    assert frame["x"].is_nan().sum() == 1
    got = Recipe([Log(["x"])]).fit_transform(frame)["x"]
    want = Recipe([Log(["x"])]).fit_transform(pd.DataFrame({"x": [1.0, np.nan, 3.0, np.nan, 0.5]}))["x"]
    assert got.null_count() == 2 and not got.is_nan().any()  # NaN is missing, as on pandas
    np.testing.assert_array_equal(got.to_numpy(), want.to_numpy())


def test_log_on_polars_refuses_values_at_or_below_minus_offset():
    for bad in (-1.0, -3.0):
        with pytest.raises(NonFiniteError, match=r"'x': 1"):
            Recipe([Log(["x"])]).fit_transform(pl.DataFrame({"x": [0.0, bad, 2.0]}))
    with pytest.raises(NonFiniteError, match="values <= -2.0"):
        Recipe([Log(["x"], offset=2.0)]).fit_transform(pl.DataFrame({"x": [1, -2, 5]}))


@pytest.mark.parametrize("under", [-5.0, -1.0, float("nan")])
def test_log_on_polars_ignores_what_lies_under_missing_slots(under):
    # The kernel sees the buffer's value under a missing slot; it may only cost a second
    # look, never an error or a value.
    series = _with_values_under_nulls([under, 2.0, 0.0], [False, True, True])
    got = Recipe([Log(["x"])]).fit_transform(series.to_frame())["x"]
    assert got.to_list()[0] is None
    np.testing.assert_array_equal(got.to_numpy()[1:], np.log([3.0, 1.0]))
    again = Recipe([Log(["x"])]).fit(series.to_frame()).transform(series.to_frame())["x"]
    assert again.to_list() == got.to_list()


def test_minmax_on_polars_fits_on_present_values_only_in_chunks_and_slices():
    # Arrow's min_max reads the buffers: a value under a missing slot must not become a bound.
    series = _with_values_under_nulls([-1e300, 2.0, 5.0, 1e300, -3.0], [False, True, True, False, True])
    frame = pl.concat([series[:2].to_frame(), series[2:].to_frame()[1:], series[2:3].to_frame()], rechunk=False)
    frame = frame.with_columns(pl.Series("i", [7, -2, 40, 3, 0], dtype=pl.Int32))
    assert frame["x"].n_chunks() == 3
    recipe = Recipe([MinMax(["x", "i"])])
    out = recipe.fit_transform(frame)
    assert recipe.ops[0].state == {"x": [-3.0, 5.0], "i": [-2.0, 40.0]}
    want = Recipe([MinMax(["x", "i"])]).fit_transform(frame.to_pandas())
    np.testing.assert_array_equal(out["x"].to_numpy(), want["x"].to_numpy())
    np.testing.assert_array_equal(out["i"].to_numpy(), want["i"].to_numpy())
    with pytest.raises(EmptyTableError, match="'x'"):
        Recipe([MinMax(["x"])]).fit(_with_values_under_nulls([1.0, 2.0], [False, False]).to_frame())


def test_minmax_on_polars_scales_by_the_pandas_kernel_across_types_pieces_and_lazy_frames(monkeypatch):
    # An eager polars frame is scaled by numpy on its buffers (each chunk's piece on its
    # own thread), a lazy one by polars' expression: both give pandas' bits, missing
    # values stay missing, and the chunks stay as they were.
    monkeypatch.setattr(nk, "PIECE", 64)
    rng = np.random.default_rng(11)
    n = 1000
    x = rng.normal(0, 5, n)
    x[rng.random(n) < 0.1] = np.nan
    df = pd.DataFrame({"x": x, "u": rng.integers(0, 255, n).astype("uint8"),
                       "f": rng.random(n).astype("float32"), "b": rng.random(n) < 0.5})
    frame = pl.from_pandas(df, nan_to_null=True)
    frame = pl.concat([frame[:7], frame[7:400], frame[400:]], rechunk=False)
    columns = ["x", "u", "f", "b"]
    want = Recipe([MinMax(columns)]).fit_transform(df)
    for got in (Recipe([MinMax(columns)]).fit_transform(frame),
                Recipe([MinMax(columns)]).fit_transform(frame.lazy()).collect()):
        for c in columns:
            np.testing.assert_array_equal(got[c].to_numpy(), want[c].to_numpy(), err_msg=c)
        assert got["x"].null_count() == int(np.isnan(x).sum())
    assert Recipe([MinMax(columns)]).fit_transform(frame)["x"].n_chunks() == 3


@pytest.mark.parametrize("bounds", [{"quantiles": (0.05, 0.95)}, {"lower": 0.2}, {"upper": 0.7}])
def test_clip_on_pandas_keeps_missing_values_and_gives_pandas_clip_to_the_bit(bounds, monkeypatch):
    monkeypatch.setattr(nk, "PIECE", 64)  # many pieces on two threads
    rng = np.random.default_rng(7)
    x = rng.random(1000)
    x[rng.random(1000) < 0.1] = np.nan
    df = pd.DataFrame({"x": x, "n": rng.integers(0, 9, 1000)})
    recipe = Recipe([Clip(["x"], **bounds)])
    got = recipe.fit_transform(df)["x"].to_numpy()
    low, high = recipe.ops[0].state["x"]
    if "quantiles" in bounds:  # pandas' own quantile of the present values
        assert [low, high] == df["x"].quantile(list(bounds["quantiles"])).tolist()
    np.testing.assert_array_equal(got, df["x"].clip(low, high).to_numpy())  # NaN where it was
    assert np.isnan(got).sum() == np.isnan(x).sum()


_TWO_RECIPES_AT_ONCE = """
import threading, numpy as np, polars as pl
from gpufeed.gpu_transforms.tabular import Categorify, Log, Recipe
df = pl.DataFrame({"x": np.random.default_rng(0).random(1000), "s": ["ab", "cd"] * 500})
errors, barrier = [], threading.Barrier(2)
def go(frame, ops):
    barrier.wait()
    try:
        Recipe(ops).fit_transform(frame)
    except Exception as exc:
        errors.append(repr(exc))
threads = [threading.Thread(target=go, args=(df.lazy(), [Log(["x"])])),
           threading.Thread(target=go, args=(df, [Categorify(["s"])]))]
[t.start() for t in threads]
[t.join() for t in threads]
print(errors)
"""


def test_two_threads_starting_recipes_in_a_fresh_process_both_finish():
    # One thread's recipe released Arrow's pool while the other was still importing
    # pyarrow: "partially initialized module 'pyarrow' has no attribute ..." (5 runs in 6).
    import subprocess
    import sys

    for _ in range(3):
        run = subprocess.run([sys.executable, "-c", _TWO_RECIPES_AT_ONCE], capture_output=True, text=True,
                             timeout=120)
        assert run.returncode == 0 and run.stdout.strip() == "[]", run.stdout + run.stderr


def test_ops_refuse_a_column_named_twice_and_clip_bounds_the_wrong_way_round():
    with pytest.raises(ValueError, match=r"\['x'\] named more than once"):
        MinMax(["x", "y", "x"])
    with pytest.raises(ValueError, match="lower=4.0 is above upper=2.0"):
        Clip(["x"], lower=4.0, upper=2.0)


def test_exact_quantiles_equal_numpys_to_the_bit_from_the_tails_or_the_full_selection(monkeypatch):
    """``Clip``'s bounds read from a column's tails (a sampled threshold, one comparison
    pass, a small partial sort) equal ``np.quantile``'s bit for bit: ties, integers beyond
    2**53, inf, float32, sorted columns, deep quantiles (the full selection), and a sample
    that misses (the margin grows, then the full selection)."""
    from gpufeed.gpu_transforms.tabular import quantiles

    rng = np.random.default_rng(0)
    n = 300_000  # past the size where the tails are sampled
    columns = {
        "normal": rng.normal(0, 1, n), "ties": np.round(rng.normal(0, 3, n)),
        "ints": rng.integers(-50, 50, n), "big ints": rng.integers(2**60, 2**62, n),
        "sorted": np.sort(rng.random(n)), "reversed": np.sort(rng.random(n))[::-1].copy(),
        "float32": rng.normal(0, 1, n).astype(np.float32), "constant": np.full(n, 3.5),
        "mostly zero": np.where(rng.random(n) < 0.999, 0.0, rng.normal(100, 1, n)),
    }
    columns["inf"] = columns["normal"].copy()
    columns["inf"][:700], columns["inf"][-1] = np.inf, -np.inf
    for name, values in columns.items():
        for qs in [(0.001, 0.999), (0.0, 1.0), (0.01, 0.99), (0.3, 0.7), (0.5,), (1e-7, 1 - 1e-7)]:
            with np.errstate(invalid="ignore"):
                want = [float(q) for q in np.quantile(values.astype(np.float64), qs)]
            got = quantiles.exact_quantiles(values, qs)
            assert got == want or all(a == b or (np.isnan(a) and np.isnan(b)) for a, b in zip(got, want, strict=True)), \
                (name, qs)
    # Samples that lie about the tails: every threshold keeps too few values (both
    # margins), or the first only; the full selection, or the wider margin, still gives numpy's.
    values = columns["normal"]
    want = [float(q) for q in np.quantile(values, (0.001, 0.999))]
    tail = quantiles._tail
    for shift in (10.0, 2.5):
        tried: list[bool] = []

        def lying(values, sample, need, *, low, shift=shift, tried=tried):
            tried.append(low)
            return tail(values, sample - shift if low else sample + shift, need, low=low)

        monkeypatch.setattr(quantiles, "_tail", lying)
        assert quantiles.exact_quantiles(values, (0.001, 0.999)) == want
        assert tried == [True, False]


@pytest.mark.parametrize("length", [0, 1, 9, 129, 5_000, 300_001])
@pytest.mark.parametrize("missing", [0.0, 0.03, 1.0])
def test_nan_mean_gives_pandas_mean_to_the_bit(length, missing):
    # FillMissing's fill value on pandas: the bits pandas' own mean gives (its NaN set to 0,
    # a pairwise sum, divided by the count), also for a column of a 2-D block.
    rng = np.random.default_rng(length)
    x = rng.normal(1e6, 3.0, length)
    x[rng.random(length) < missing] = np.nan
    want = pd.Series(x).mean()
    got = nk.nan_mean(x)
    assert (np.isnan(want) and np.isnan(got)) or got == want
    block = np.column_stack([x, x * 3])
    assert nk.nan_mean(block[:, 1]) == pd.Series(block[:, 1]).mean() or np.isnan(want)
    assert np.isnan(nk.nan_mean(np.array([np.inf, -np.inf, np.nan])))
