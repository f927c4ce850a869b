"""Hand-off to torch: dtypes, shapes, values, batching, and clear errors."""

from __future__ import annotations

import warnings

import numpy as np
import pandas as pd
import polars as pl
import pytest
import torch

from gpufeed.gpu_transforms.tabular import (
    ColumnTypeError,
    MissingColumnError,
    NonFiniteError,
    to_backend,
)
from gpufeed.pipelines.tables import iter_batches, to_tensors

FEATURES = ["a", "b", "c"]


@pytest.fixture
def table() -> pd.DataFrame:
    rng = np.random.default_rng(0)
    return pd.DataFrame({"a": rng.random(1000), "b": rng.integers(0, 9, 1000).astype("int8"),
                         "c": rng.random(1000).astype("float32"), "label": rng.integers(0, 4, 1000)})


@pytest.mark.parametrize("backend", ["pandas", "polars"])
def test_features_float32_labels_int64_with_the_same_values(table, backend):
    x, y = to_tensors(to_backend(table, backend), FEATURES, "label", device="cpu")
    assert x.dtype == torch.float32 and x.shape == (1000, 3) and x.is_contiguous()
    assert y.dtype == torch.int64 and y.shape == (1000,)
    np.testing.assert_array_equal(x.numpy(), table[FEATURES].to_numpy(np.float32))
    np.testing.assert_array_equal(y.numpy(), table["label"].to_numpy())


def test_writing_to_a_tensor_never_changes_the_table(table):
    _, y = to_tensors(table, FEATURES, "label", device="cpu")
    y += 100
    assert table["label"].max() < 4


@pytest.mark.parametrize("backend", ["pandas", "polars"])
def test_batches_cover_every_row_once(table, backend):
    frame = to_backend(table, backend)
    batches = list(iter_batches(frame, FEATURES, "label", batch_size=300, device="cpu", shuffle=True, seed=0))
    in_order = list(iter_batches(frame, FEATURES, "label", batch_size=300, device="cpu"))
    assert not all(torch.equal(a[0], b[0]) for a, b in zip(batches, in_order, strict=True))  # shuffled
    assert sorted(len(x) for x, _ in batches) == [100, 300, 300, 300]
    total = torch.cat([y for _, y in batches]).sort().values
    assert torch.equal(total, torch.from_numpy(np.sort(table["label"].to_numpy())))
    dropped = list(iter_batches(frame, FEATURES, batch_size=300, device="cpu", drop_last=True))
    assert [len(x) for x, y in dropped] == [300, 300, 300] and dropped[0][1] is None


def test_missing_values_and_non_integer_labels_are_rejected(table):
    table.loc[5, "a"] = np.nan
    with pytest.raises(NonFiniteError, match=r"missing values in column\(s\) \['a'\]"):
        to_tensors(table, FEATURES, device="cpu")
    with pytest.raises(ColumnTypeError, match="label column 'c' .* not integers"):
        to_tensors(table.fillna(0), ["a"], "c", device="cpu")
    with pytest.raises(MissingColumnError, match="'target'"):
        to_tensors(table, FEATURES, "target", device="cpu")


@pytest.mark.parametrize("backend", ["pandas", "polars"])
def test_a_label_with_gaps_is_named_missing_not_float(backend):
    # A nullable label with a gap becomes float64 on the way to numpy: it was reported as
    # "dtype float64, not integers ... cast to int64", a cast the gap would fail.
    df = pd.DataFrame({"x": [0.1, 0.2, 0.3, 0.4], "y": pd.array([0, None, 1, None], dtype="Int64"),
                       "f": [0.0, np.nan, 1.0, 2.0]})
    frame = to_backend(df, backend)
    for label, gaps in (("y", 2), ("f", 1)):
        with pytest.raises(NonFiniteError, match=rf"missing values in label column '{label}' \({gaps} of 4 rows\)"):
            to_tensors(frame, ["x"], label, device="cpu")
    with pytest.raises(NonFiniteError, match=r"missing values in label column 'y' \(1 of 2 rows\)"):
        list(iter_batches(frame, ["x"], "y", batch_size=2, device="cpu"))
    _, y = to_tensors(to_backend(df.dropna(), backend), ["x"], "y", device="cpu")
    assert y.dtype == torch.int64 and y.tolist() == [0, 1]


@pytest.mark.gpu
def test_cudf_hand_off_is_zero_copy_on_the_gpu(table):
    cudf = pytest.importorskip("cudf", reason="cuDF is not installed")

    gdf = cudf.from_pandas(table)
    x, y = to_tensors(gdf, FEATURES, "label", device="cuda")
    assert x.device.type == "cuda" and x.dtype == torch.float32 and y.dtype == torch.int64
    np.testing.assert_allclose(x.cpu().numpy(), table[FEATURES].to_numpy(np.float32))
    batches = list(iter_batches(gdf, FEATURES, "label", batch_size=256, device="cuda"))
    assert sum(len(b[0]) for b in batches) == len(table)
    assert x.is_contiguous()  # row-major, as from numpy (cuDF's matrix is column-major)
    bad = cudf.from_pandas(pd.DataFrame({"a": [1.0, np.inf], "f": [0.0, 1.0], "label": [True, False]}))
    with pytest.raises(NonFiniteError, match=r"inf values in column\(s\) \['a'\]"):
        to_tensors(bad, ["a"], device="cuda")
    with pytest.raises(ColumnTypeError, match="label column 'label' has dtype bool"):
        to_tensors(bad, ["f"], "label", device="cuda")
    gaps = cudf.from_pandas(pd.DataFrame({"a": [1.0, 2.0, 3.0], "y": pd.array([0, None, 1], dtype="Int64")}))
    with pytest.raises(NonFiniteError, match=r"missing values in label column 'y' \(1 of 3 rows\)"):
        to_tensors(gaps, ["a"], "y", device="cuda")
    wide = cudf.from_pandas(pd.DataFrame({"a": [1.0, 2.0], "y": np.array([0, 2**63 + 5], dtype=np.uint64)}))
    with pytest.raises(ColumnTypeError, match=r"label column 'y' holds values beyond int64"):
        to_tensors(wide, ["a"], "y", device="cuda")


@pytest.mark.gpu
@pytest.mark.parametrize("dtype", ["int32", "float64", "int8", "float32"])
def test_cudf_columns_of_one_dtype_are_cast_not_reinterpreted(dtype):
    # cuDF 25.10-26.04's to_cupy(dtype=) copied one-dtype columns' bytes without a cast
    cudf = pytest.importorskip("cudf", reason="cuDF is not installed")

    table = pd.DataFrame({"a": np.arange(6).astype(dtype), "b": (np.arange(6) * 3).astype(dtype),
                          "label": pd.Categorical(["no", "yes", "no", "yes", "no", "yes"])})
    x, _ = to_tensors(cudf.from_pandas(table), ["a", "b"], device="cuda")
    np.testing.assert_array_equal(x.cpu().numpy(), table[["a", "b"]].to_numpy(np.float32))
    # A categorical label: named, with its fix, as on pandas (not numpy's TypeError).
    with pytest.raises(ColumnTypeError, match=_CATEGORICAL_LABEL):
        to_tensors(cudf.from_pandas(table), ["a"], "label", device="cuda")


_CATEGORICAL_LABEL = r"\{'label': 'Categorical'\} are not: encode them first .*LabelEncode\(\['label'\]\)"


def test_a_categorical_label_is_named_with_its_fix():
    table = pd.DataFrame({"a": np.arange(6.0), "label": pd.Categorical(["no", "yes", "no", "yes", "no", "yes"])})
    with pytest.raises(ColumnTypeError, match=_CATEGORICAL_LABEL):
        to_tensors(table, ["a"], "label")


@pytest.mark.parametrize("backend", ["pandas", "polars"])
def test_categoricals_of_numbers_are_read_by_their_values_as_polars_holds_them(backend):
    # A pickled table's astype("category") sizes and classes: polars holds them as Int64 and
    # gave tensors; pandas refused them as "Categorical".
    table = pd.DataFrame({"bill": [16.99, 10.34, 21.01, 23.68], "size": pd.Categorical([2, 3, 3, 10]),
                          "label": pd.Categorical([0, 1, 1, 0])})
    frame = table if backend == "pandas" else pl.from_pandas(table)
    x, y = to_tensors(frame, ["bill", "size"], "label")
    assert x[:, 1].tolist() == [2.0, 3.0, 3.0, 10.0] and y.tolist() == [0, 1, 1, 0]
    assert table["size"].dtype == "category"  # the caller's frame is left as it was


def test_pandas_nullable_dtypes_have_their_numpy_kind():
    # cuDF keeps pandas' Int64 on a column made from pandas: such labels were "not integers"
    from gpufeed.pipelines.tables import _numpy_dtype, _numpy_kind

    assert [_numpy_kind(t) for t in (pd.Int64Dtype(), pd.UInt8Dtype(), pd.BooleanDtype(), np.dtype("int8"))] == \
        ["i", "u", "b", "i"]
    assert _numpy_kind(pd.CategoricalDtype([0, 1])) == "O" and _numpy_dtype(pd.UInt64Dtype()).itemsize == 8


@pytest.mark.gpu
def test_cudf_columns_of_pandas_nullable_dtypes_hand_off():
    cudf = pytest.importorskip("cudf", reason="cuDF is not installed")

    table = pd.DataFrame({"a": pd.array([1, 2, 3], dtype="Int64"), "b": [0.5, 1.5, 2.5],
                          "y": pd.array([0, 2, 1], dtype="Int64")})
    x, y = to_tensors(cudf.from_pandas(table), ["a", "b"], "y", device="cuda")
    np.testing.assert_array_equal(x.cpu().numpy(), [[1, 0.5], [2, 1.5], [3, 2.5]])
    assert y.dtype == torch.int64 and y.cpu().tolist() == [0, 2, 1]
    huge = cudf.from_pandas(pd.DataFrame({"a": [1.0, 1e300], "b": [0.0, 1.0]}))
    with pytest.raises(NonFiniteError, match=r"beyond float32's range .* in column\(s\) \['a'\]"):
        to_tensors(huge, ["a", "b"], device="cuda")  # as on pandas, not "inf values"
    big = cudf.from_pandas(pd.DataFrame({"a": [1.0], "y": pd.array([2**63 + 1], dtype="UInt64")}))
    with pytest.raises(ColumnTypeError, match="beyond int64"):
        to_tensors(big, ["a"], "y", device="cuda")


def test_text_columns_inf_and_a_bare_string_are_refused_by_name():
    df = pd.DataFrame({"a": [1.0, 2.0], "name": ["x", "y"], "big": [1.0, np.inf], "label": [0, 1]})
    # The table ops' errors, so `except TabularError` covers the hand-off too
    with pytest.raises(ColumnTypeError, match=r"\{'name': 'String'\}"):
        to_tensors(df, ["a", "name"], "label", device="cpu")
    with pytest.raises(NonFiniteError, match=r"inf values in column\(s\) \['big'\]"):
        to_tensors(df, ["a", "big"], "label", device="cpu")
    with pytest.raises(TypeError, match=r"write \['a'\]"):
        to_tensors(df, "a", "label", device="cpu")


def test_numeric_object_columns_convert_and_text_in_them_is_named():
    x, _ = to_tensors(pd.DataFrame({"a": pd.Series([1.0, 2.0], dtype=object)}), ["a"], device="cpu")
    assert x.tolist() == [[1.0], [2.0]]
    with pytest.raises(TypeError, match=r"\['a'\]"):
        to_tensors(pd.DataFrame({"a": pd.Series([1.0, "x"], dtype=object), "b": [1.0, 2.0]}), ["b", "a"], device="cpu")


def test_a_torch_device_is_accepted(table):
    x, y = to_tensors(table, FEATURES, "label", device=torch.device("cpu"))
    assert x.device == torch.device("cpu") and y.device == torch.device("cpu")


@pytest.mark.parametrize("backend", ["pandas", "polars"])
def test_a_feature_listed_twice_and_nullable_gaps_get_one_answer_on_every_backend(backend):
    df = pd.DataFrame({"x": [1.0, 2.0], "b": pd.array([True, None], dtype="boolean"),
                       "i": pd.array([1, 2], dtype="Int64")})
    frame = df if backend == "pandas" else pl.from_pandas(df)
    with pytest.raises(ValueError, match=r"feature column\(s\) 'x' listed more than once"):
        to_tensors(frame, ["x", "i", "x"], device="cpu")
    # a boolean with a gap is a missing value to fill, not text to encode
    with pytest.raises(ValueError, match=r"missing values in column\(s\) \[.b.\] \(1 of 2 rows\): fill them"):
        to_tensors(frame, ["x", "b"], device="cpu")
    x, _ = to_tensors(frame, ["x", "i"], device="cpu")
    assert x.tolist() == [[1.0, 1.0], [2.0, 2.0]]


def test_iter_batches_reshuffles_per_epoch_and_checks_features_like_to_tensors(table):
    def order(epoch: int) -> list[float]:
        return [float(v) for x, _ in iter_batches(table, FEATURES, "label", batch_size=100, device="cpu",
                                                  shuffle=True, seed=3, epoch=epoch) for v in x[:, 0]]

    assert order(0) == order(0) and order(0) != order(1) and sorted(order(0)) == sorted(order(1))
    with pytest.raises(TypeError, match=r"iter_batches: .*write \['a'\]"):
        next(iter_batches(table, "a", device="cpu"))
    with pytest.raises(ValueError, match=r"pass label_dtype=torch.float32 for a regression target"):
        to_tensors(table.fillna(0), ["b"], "a", device="cpu")


@pytest.mark.parametrize("backend", ["pandas", "polars"])
def test_shuffled_batches_mix_rows_and_drop_other_rows_each_epoch(backend):
    """Shuffling only the order of fixed slices dropped the same tail every epoch (34 % of
    a table never seen) and never mixed a sorted table's rows."""
    n = 1000
    df = to_backend(pd.DataFrame({"a": np.arange(n, dtype=np.float64), "label": np.arange(n) // 500}), backend)
    seen: set[int] = set()
    for epoch in range(4):
        batches = list(iter_batches(df, ["a"], "label", batch_size=300, device="cpu", shuffle=True, seed=1,
                                    epoch=epoch, drop_last=True))
        assert [len(x) for x, _ in batches] == [300, 300, 300]
        rows = [int(v) for x, _ in batches for v in x[:, 0]]
        assert len(set(rows)) == 900  # each row at most once per epoch
        seen |= set(rows)
        assert all(0 < float(y.float().mean()) < 1 for _, y in batches)  # both classes in every batch
        for x, y in batches:  # rows keep their labels
            assert torch.equal(y, (x[:, 0] // 500).long())
    assert len(seen) == n  # over epochs, the dropped rows differ


@pytest.mark.parametrize("backend", ["pandas", "polars"])
def test_floats_beyond_float32_and_labels_beyond_int64_are_named_not_wrapped(backend):
    big = to_backend(pd.DataFrame({"a": [1e39, 2.0], "y": [0, 1]}), backend)
    with pytest.raises(NonFiniteError, match=r"beyond float32's range .* \['a'\]"):
        to_tensors(big, ["a"], "y", device="cpu")
    wide = pd.DataFrame({"a": [1.0, 2.0], "y": np.array([0, 2**63 + 5], dtype=np.uint64)})
    with pytest.raises(ColumnTypeError, match=r"label column 'y' holds values beyond int64"):
        to_tensors(to_backend(wide, backend), ["a"], "y", device="cpu")


def test_a_lazy_polars_frame_is_collected(table):
    lazy = pl.from_pandas(table.fillna(0)).lazy()
    x, y = to_tensors(lazy, FEATURES, "label", device="cpu")
    assert x.shape == (len(table), 3) and y.shape == (len(table),)
    assert sum(len(x) for x, _ in iter_batches(lazy, FEATURES, "label", batch_size=7, device="cpu")) == len(table)



@pytest.mark.parametrize("backend", ["pandas", "polars"])
def test_negative_labels_and_labels_beyond_num_classes_are_named(backend):
    """pandas' cat.codes gives -1 for a missing class: it reached cross_entropy (a
    device-side assert on a GPU, naming no column)."""
    df = pd.DataFrame({"a": [0.1, 0.2, 0.3, 0.4], "y": pd.Series(["b", None, "a", "c"]).astype("category").cat.codes})
    frame = to_backend(df, backend)
    with pytest.raises(ColumnTypeError, match=r"label column 'y' holds negative class indices other than "
                       r"ignore_index=-100 \(1 of 4 rows, lowest -1\)"):
        to_tensors(frame, ["a"], "y", device="cpu")
    # -100, cross_entropy's ignore_index, marks rows the loss leaves out: it passes, unless
    # ignore_index=None (then every negative label is refused)
    masked = to_backend(df.assign(y=[1, -100, 0, 2]), backend)
    _, y = to_tensors(masked, ["a"], "y", device="cpu", num_classes=3)
    assert y.tolist() == [1, -100, 0, 2]
    with pytest.raises(ColumnTypeError, match=r"negative class indices \(1 of 4 rows, lowest -100\)"):
        to_tensors(masked, ["a"], "y", device="cpu", ignore_index=None)
    good = to_backend(df.assign(y=[1, 0, 0, 2]), backend)
    _, y = to_tensors(good, ["a"], "y", device="cpu", num_classes=3)
    assert y.tolist() == [1, 0, 0, 2]
    with pytest.raises(ColumnTypeError, match=r"beyond num_classes=2 \(1 of 4 rows, highest 2\)"):
        to_tensors(good, ["a"], "y", device="cpu", num_classes=2)
    with pytest.raises(ColumnTypeError, match=r"beyond num_classes=2 \(1 of 2 rows, highest 2\)"):
        list(iter_batches(good, ["a"], "y", batch_size=2, device="cpu", num_classes=2))
    with pytest.raises(ValueError, match="num_classes must be a positive integer"):
        to_tensors(good, ["a"], "y", device="cpu", num_classes=0)


@pytest.mark.parametrize("backend", ["pandas", "polars"])
def test_the_label_as_a_feature_is_refused_and_missing_features_are_counted(backend):
    df = pd.DataFrame({"a": [0.1, None, 0.3, None], "b": [1.0, 2.0, None, 4.0], "y": [0, 1, 0, 1]})
    frame = to_backend(df, backend)
    for call in (lambda: to_tensors(frame, ["b", "y"], "y", device="cpu"),
                 lambda: next(iter_batches(frame, ["b", "y"], "y", device="cpu"))):
        with pytest.raises(ValueError, match=r"label column 'y' is also listed as a feature"):
            call()
    with pytest.raises(NonFiniteError, match=r"missing values in column\(s\) \['a', 'b'\] \(2, 1 of 4 rows\)"):
        to_tensors(frame, ["a", "b"], "y", device="cpu")


def _one_batch_at_a_time(frame, batch_size, shuffle, seed, epoch, drop_last, **kw):
    """What iter_batches gave before it converted chunks: each batch's rows (the seeded
    permutation's, or a slice) through to_tensors alone."""
    n = len(frame)
    order = np.random.default_rng(seed if epoch == 0 else (seed, epoch)).permutation(n) if shuffle else np.arange(n)
    stop = n - n % batch_size if drop_last else n
    native = to_backend(frame, "pandas") if not isinstance(frame, pd.DataFrame) else frame
    return [to_tensors(native.iloc[order[s:min(s + batch_size, stop)]], **kw) for s in range(0, stop, batch_size)]


@pytest.mark.parametrize("backend", ["pandas", "polars"])
@pytest.mark.parametrize(("batch_size", "shuffle", "drop_last"),
                         [(7, False, False), (7, True, True), (64, True, False), (300, False, True), (2000, True, False)])
def test_chunked_batches_are_the_rows_and_order_one_batch_at_a_time_gave(monkeypatch, table, backend, batch_size,
                                                                          shuffle, drop_last):
    # iter_batches converts ~_CHUNK_ROWS rows at once and slices batches out of them: the
    # same batches as converting each batch alone (same seeded order), row-major, any chunk size.
    import gpufeed.pipelines.tables as tables

    monkeypatch.setattr(tables, "_CHUNK_ROWS", 100)
    frame = to_backend(table.assign(k=table["b"].astype("int64") % 3), backend)
    kw = dict(features=["a", "c"], label="label", categorical=["k", "b"], device="cpu")
    got = list(iter_batches(frame, batch_size=batch_size, shuffle=shuffle, seed=3, epoch=1, drop_last=drop_last,
                            **kw))
    want = _one_batch_at_a_time(table.assign(k=table["b"].astype("int64") % 3), batch_size, shuffle, 3, 1,
                                drop_last, **kw)
    assert len(got) == len(want)
    for g, w in zip(got, want, strict=True):
        for a, b in zip(g, w, strict=True):
            assert a.dtype == b.dtype and a.is_contiguous() and torch.equal(a, b)


@pytest.mark.parametrize("backend", ["pandas", "polars"])
def test_bad_rows_mid_table_fail_at_their_batch_with_its_row_count(monkeypatch, backend):
    # A chunk with bad rows goes batch by batch: the batches before the bad one come out,
    # and the error counts the rows of its batch, as when each batch was converted alone.
    import gpufeed.pipelines.tables as tables

    monkeypatch.setattr(tables, "_CHUNK_ROWS", 40)
    a = np.arange(100, dtype=float)
    a[57] = np.nan
    frame = to_backend(pd.DataFrame({"a": a, "y": np.arange(100) % 3}), backend)
    seen = []
    with pytest.raises(NonFiniteError, match=r"missing values in column\(s\) \['a'\] \(1 of 10 rows\)"):
        for x, _ in iter_batches(frame, ["a"], "y", batch_size=10, device="cpu"):
            seen.append(x)
    assert [float(x[0, 0]) for x in seen] == [0.0, 10.0, 20.0, 30.0, 40.0]
    big = to_backend(pd.DataFrame({"a": np.arange(100.0), "y": np.where(np.arange(100) == 93, 5, 1)}), backend)
    with pytest.raises(ColumnTypeError, match=r"beyond num_classes=3 \(1 of 10 rows, highest 5\)"):
        list(iter_batches(big, ["a"], "y", batch_size=10, device="cpu", num_classes=3))


@pytest.mark.parametrize("layout", ["C", "F", "strided", "one column", "object"])
def test_a_matrix_written_into_a_given_buffer_equals_a_new_one(layout):
    # On CUDA, iter_batches converts each chunk straight into a pinned buffer: the same
    # values as the matrix the CPU path makes, whatever the frame's memory layout.
    from gpufeed.pipelines.tables import _row_major

    values = np.random.default_rng(0).random((50, 4)) * 1e3
    array = {"C": values, "F": np.asfortranarray(values), "strided": np.asfortranarray(values)[::2],
             "one column": values[:, :1], "object": values.astype(object)}[layout]
    for dtype in (np.float32, np.int64):
        want = _row_major(array, np.dtype(dtype))
        out = np.empty(array.shape, dtype)
        got = _row_major(array, np.dtype(dtype), out)
        assert got is out and got.flags.c_contiguous
        np.testing.assert_array_equal(got, want)


def test_pin_memory_is_ignored_on_the_cpu(table):
    # to_tensors(pin_memory=True) is safe to pass everywhere: on a machine without CUDA
    # (where torch cannot pin memory) it changes nothing.
    x, y = to_tensors(table, FEATURES, "label", device="cpu", pin_memory=True)
    want_x, want_y = to_tensors(table, FEATURES, "label", device="cpu")
    assert torch.equal(x, want_x) and torch.equal(y, want_y)


@pytest.mark.gpu
@pytest.mark.parametrize("backend", ["pandas", "polars"])
def test_pinned_chunks_copied_while_the_gpu_is_busy_keep_their_values(monkeypatch, table, backend):
    # Each chunk goes to the device once and its batches are slices there. Chunks are copied
    # asynchronously from pinned memory while earlier GPU work is still queued: a pinned
    # block handed out again to the next chunk before its copy finished would show here as
    # batches with another chunk's rows.
    import gpufeed.pipelines.tables as tables

    monkeypatch.setattr(tables, "_CHUNK_ROWS", 100)
    frame = to_backend(table, backend)
    cpu = list(iter_batches(frame, FEATURES, "label", batch_size=50, device="cpu", shuffle=True, seed=5))
    busy = torch.randn(4096, 4096, device="cuda")
    gpu = []
    for x, y in iter_batches(frame, FEATURES, "label", batch_size=50, device="cuda", shuffle=True, seed=5):
        for _ in range(4):  # keep the GPU's queue long while the next chunk is converted
            busy = busy @ busy / 64
        gpu.append((x.clone(), y.clone()))
    torch.cuda.synchronize()
    assert len(gpu) == len(cpu) == 20
    for (x, y), (gx, gy) in zip(cpu, gpu, strict=True):
        assert gx.device.type == "cuda" and gx.is_contiguous()
        assert torch.equal(x, gx.cpu()) and torch.equal(y, gy.cpu())
    x, y = to_tensors(frame, FEATURES, "label", device="cuda", pin_memory=True)
    assert x.device.type == "cuda" and torch.equal(x.cpu(), to_tensors(frame, FEATURES, device="cpu")[0])


@pytest.mark.parametrize(("rows", "drop_last", "warns"), [
    (1025, False, True),   # 512 and 513 rows a rank: 8 and 9 batches of 64
    (1025, True, False),   # every rank the smallest slice's 8 full batches
    (1003, False, False),  # 501 and 502 rows: 8 batches each, the last ones partial
])
def test_rank_slices_of_unequal_batch_counts_warn_when_made(rows, drop_last, warns):
    """Under Lightning's DDP (1,025 rows, 2 ranks, batch 64) rank 1's ninth step was paired
    with rank 0's next epoch, and rank 1 died when rank 0 finished, while the job exited 0.
    Batches whose rank slices take different counts say so when they are made."""
    df = pd.DataFrame({"a": np.arange(rows, dtype=np.float32), "label": np.zeros(rows, dtype=np.int64)})
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        batches = [iter_batches(df, ["a"], "label", batch_size=64, device="cpu", drop_last=drop_last,
                                shard_id=r, num_shards=2) for r in range(2)]
    said = [str(w.message) for w in caught if "rank slices" in str(w.message)]
    assert len(said) == (2 if warns else 0), said
    if warns:
        assert "take 8 or 9 batches of 64" in said[0] and "drop_last=True" in said[0]
        assert caught[0].filename == __file__  # points at the iter_batches call
    assert len({len(b) for b in batches}) == (2 if warns else 1)


@pytest.mark.parametrize(("name", "value"), [
    ("seed", None), ("seed", -1), ("seed", 1.5), ("seed", "7"), ("epoch", -1), ("epoch", True),
    ("batch_size", 2.5), ("batch_size", "4"), ("batch_size", 0),
])
def test_bad_seed_epoch_or_batch_size_is_refused_at_the_call_by_name(table, name, value):
    # seed=None had each rank draw its own order: rows twice and never in an epoch, a resume
    # other batches, then a TypeError at the next epoch; the others failed at the first batch
    # in numpy's words.
    with pytest.raises(ValueError, match=rf"iter_batches: {name} must be a whole number"):
        iter_batches(table, FEATURES, "label", shuffle=True, device="cpu", **{name: value})


@pytest.mark.parametrize("backend", ["pandas", "polars"])
def test_uint64_codes_beside_signed_ones_stay_exact(backend):
    # numpy holds uint64 beside int64 only as float64, which rounded 2**53 + 1.
    big = 2**53 + 1
    frame = to_backend(pd.DataFrame({"s": np.array([big, 3], np.int64), "u": np.array([1, big], np.uint64),
                                     "x": [0.5, 1.5]}), backend)
    _, codes, _ = to_tensors(frame, ["x"], categorical=["s", "u"], device="cpu")
    assert codes.dtype == torch.int64 and codes.tolist() == [[big, 1], [3, big]]
    (_, batch_codes, _), = iter_batches(frame, ["x"], categorical=["s", "u"], device="cpu")
    assert torch.equal(batch_codes, codes)


def test_a_state_of_other_columns_or_not_a_state_is_refused(table):
    batches = iter_batches(table, ["a", "b"], "label", batch_size=100, device="cpu")
    next(batches)
    state = batches.state_dict()
    other = iter_batches(table, ["a", "c"], "label", batch_size=100, device="cpu")
    with pytest.raises(ValueError, match=r"columns=\['a', 'b', 'label'\] vs \['a', 'c', 'label'\]"):
        other.load_state_dict(state)
    with pytest.raises(ValueError, match="not a state of these batches"):
        other.load_state_dict(None)
    older = {k: v for k, v in state.items() if k != "columns"}  # saved before columns were recorded
    resumed = iter_batches(table, ["a", "b"], "label", batch_size=100, device="cpu")
    resumed.load_state_dict(older)
    assert len(list(resumed)) == len(batches) - 1


def test_a_dataloader_round_the_batches_is_told_what_to_do(table):
    loader = torch.utils.data.DataLoader(iter_batches(table, FEATURES, "label", device="cpu"), batch_size=None)
    with pytest.raises(TypeError, match="iterate it as it is"):
        next(iter(loader))
