"""Hand-off to torch for models with embeddings and regression heads: float labels
(``label_dtype``), category codes as their own int64 tensor (``categorical=``), and the
errors that name the recipe's ``num_classes``; the same on pandas, polars and cuDF."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest
import torch

from gpufeed.gpu_transforms.tabular import (
    Categorify,
    ColumnTypeError,
    HashBucket,
    LabelEncode,
    NonFiniteError,
    Recipe,
    Standardize,
    to_backend,
)
from gpufeed.pipelines.tables import iter_batches, to_tensors

BACKENDS = ["pandas", "polars"]


@pytest.fixture
def table() -> pd.DataFrame:
    rng = np.random.default_rng(1)
    return pd.DataFrame({"n": rng.random(50), "m": rng.integers(0, 5, 50), "k": rng.choice(["a", "b", "c"], 50),
                         "u": rng.choice([f"id{i}" for i in range(20)], 50), "y": rng.random(50) * 100,
                         "cls": rng.choice(["cat", "dog"], 50)})


def _prepared(table: pd.DataFrame, backend: str) -> tuple[Recipe, object]:
    recipe = Recipe([Standardize(["n", "y"]), Categorify(["k"]), HashBucket(["u"], buckets=16),
                     LabelEncode(["cls"])])
    return recipe, recipe.fit_transform(to_backend(table, backend))


@pytest.mark.parametrize("backend", BACKENDS)
def test_a_float_label_is_a_regression_target_with_label_dtype(table, backend):
    # to_tensors(df, ["n"], "y") with a float y raised "pass a regression target as a feature column"
    frame = to_backend(table, backend)
    x, y = to_tensors(frame, ["n"], "y", device="cpu", label_dtype=torch.float32)
    assert x.dtype == y.dtype == torch.float32 and y.shape == (50,)
    np.testing.assert_array_equal(y.numpy(), table["y"].to_numpy(np.float32))
    _, y64 = to_tensors(frame, ["n"], "y", device="cpu", label_dtype=torch.float64)
    np.testing.assert_array_equal(y64.numpy(), table["y"].to_numpy())
    # integer and boolean labels as floats (a count target; 0/1 for BCEWithLogitsLoss)
    _, counts = to_tensors(frame, ["n"], "m", device="cpu", label_dtype=torch.float32)
    assert counts.dtype == torch.float32 and counts.tolist() == table["m"].astype(float).tolist()
    flags = to_backend(table.assign(b=table["m"] > 2), backend)
    assert to_tensors(flags, ["n"], "b", device="cpu", label_dtype=torch.float32)[1].tolist() == (
        (table["m"] > 2).astype(float).tolist())
    batches = list(iter_batches(frame, ["n"], "y", batch_size=20, device="cpu", label_dtype=torch.float32))
    assert [len(b[1]) for b in batches] == [20, 20, 10] and all(b[1].dtype == torch.float32 for b in batches)
    # The default stays a class index, checked as one.
    with pytest.raises(ColumnTypeError, match=r"not integers.*label_dtype=torch.float32 for a regression target"):
        to_tensors(frame, ["n"], "y", device="cpu")


@pytest.mark.parametrize("backend", BACKENDS)
def test_a_float_label_with_gaps_inf_or_num_classes_is_named(backend):
    gaps = to_backend(pd.DataFrame({"n": [1.0, 2.0, 3.0], "y": [0.5, None, 2.0]}), backend)
    with pytest.raises(NonFiniteError, match=r"missing values in label column 'y' \(1 of 3 rows\): a regression"):
        to_tensors(gaps, ["n"], "y", device="cpu", label_dtype=torch.float32)
    inf = to_backend(pd.DataFrame({"n": [1.0, 2.0], "y": [0.5, np.inf]}), backend)
    with pytest.raises(NonFiniteError, match=r"inf values in column\(s\) \['y'\]"):
        to_tensors(inf, ["n"], "y", device="cpu", label_dtype=torch.float32)
    with pytest.raises(ValueError, match=r"num_classes=3 checks class indices, but label_dtype=torch.float32"):
        to_tensors(inf, ["n"], "y", device="cpu", label_dtype=torch.float32, num_classes=3)
    with pytest.raises(ValueError, match=r"label_dtype must be torch.int64 .* got torch.int32"):
        next(iter_batches(inf, ["n"], "y", device="cpu", label_dtype=torch.int32))


@pytest.mark.parametrize("backend", BACKENDS)
def test_categorical_codes_come_back_as_int64_beside_the_float_features(table, backend):
    recipe, out = _prepared(table, backend)
    x, x_cat, y = to_tensors(out, ["n", "m"], "cls", categorical=["k", "u"], device="cpu",
                             num_classes=recipe.num_classes("cls"))
    assert x.dtype == torch.float32 and x.shape == (50, 2)
    assert x_cat.dtype == torch.int64 and x_cat.shape == (50, 2) and x_cat.is_contiguous()
    codes = to_backend(out, "pandas")
    np.testing.assert_array_equal(x_cat.numpy(), codes[["k", "u"]].to_numpy(np.int64))
    assert y.dtype == torch.int64 and set(y.tolist()) == {0, 1}
    # the codes fit the embeddings the recipe sizes
    assert int(x_cat[:, 0].max()) < recipe.num_embeddings("k") and int(x_cat[:, 1].max()) < recipe.num_embeddings("u")
    x_cat += 100  # a tensor of the table's own buffer would change the table
    assert to_backend(out, "pandas")["k"].max() < 100
    # codes only; an empty categorical list still gives three tensors
    none, only, _ = to_tensors(out, [], "cls", categorical=["k"], device="cpu")
    assert none.shape == (50, 0) and none.dtype == torch.float32 and only.shape == (50, 1)
    x2, empty, _ = to_tensors(out, ["n"], "cls", categorical=[], device="cpu")
    assert empty.shape == (50, 0) and empty.dtype == torch.int64 and x2.shape == (50, 1)
    # regression on the same table: y standardised, as float32
    _, _, target = to_tensors(out, ["n"], "y", categorical=["k"], device="cpu", label_dtype=torch.float32)
    assert target.dtype == torch.float32 and abs(float(target.mean())) < 1e-5


@pytest.mark.parametrize("backend", BACKENDS)
def test_iter_batches_yields_codes_beside_features(table, backend):
    _, out = _prepared(table, backend)
    batches = list(iter_batches(out, ["n"], "cls", categorical=["k", "u"], batch_size=16, device="cpu",
                                shuffle=True, seed=2))
    assert all(len(b) == 3 and b[1].dtype == torch.int64 for b in batches)
    assert sorted(len(b[0]) for b in batches) == [2, 16, 16, 16]
    codes = torch.cat([b[1] for b in batches])
    expected = to_backend(out, "pandas")[["k", "u"]].to_numpy(np.int64)
    assert sorted(map(tuple, codes.tolist())) == sorted(map(tuple, expected.tolist()))


def test_codes_are_the_same_on_pandas_and_polars(table):
    tensors = {b: to_tensors(_prepared(table, b)[1], ["n"], "cls", categorical=["k", "u"], device="cpu")
               for b in BACKENDS}
    for a, b in zip(tensors["pandas"], tensors["polars"], strict=True):
        assert torch.equal(a, b)


@pytest.mark.parametrize("backend", BACKENDS)
def test_bad_categorical_columns_are_named(backend):
    df = pd.DataFrame({"n": [0.1, 0.2, 0.3], "f": [1.0, 2.0, 3.0], "k": [2, 3, 2], "neg": [2, -1, 3],
                       "gap": pd.array([2, None, 3], dtype="Int32"), "y": [0, 1, 0]})
    frame = to_backend(df, backend)
    with pytest.raises(ColumnTypeError, match=r"categorical columns hold integer codes .*\{'f': 'Float64'\}"):
        to_tensors(frame, ["n"], "y", categorical=["f"], device="cpu")
    with pytest.raises(ColumnTypeError, match=r"categorical column\(s\) \['neg'\] hold negative codes \(1 of 3 rows, "
                       r"lowest -1\)"):
        to_tensors(frame, ["n"], "y", categorical=["k", "neg"], device="cpu")
    with pytest.raises(NonFiniteError, match=r"missing values in categorical column\(s\) \['gap'\] \(1 of 3 rows\)"):
        to_tensors(frame, ["n"], "y", categorical=["k", "gap"], device="cpu")
    with pytest.raises(ValueError, match=r"column\(s\) 'k' listed both as features and as categorical"):
        to_tensors(frame, ["n", "k"], "y", categorical=["k"], device="cpu")
    with pytest.raises(ValueError, match=r"label column 'y' is also listed as categorical"):
        next(iter_batches(frame, ["n"], "y", categorical=["y"], device="cpu"))
    with pytest.raises(TypeError, match=r"categorical is a list of column names, got the string 'k'"):
        to_tensors(frame, ["n"], "y", categorical="k", device="cpu")
    with pytest.raises(ValueError, match="needs at least one feature column"):
        to_tensors(frame, [], "y", categorical=[], device="cpu")


@pytest.mark.parametrize("backend", BACKENDS)
def test_num_classes_error_says_where_the_class_count_comes_from(backend):
    frame = to_backend(pd.DataFrame({"n": [0.1, 0.2], "y": [0, 2]}), backend)
    with pytest.raises(ColumnTypeError, match=r"pass num_classes=recipe.num_classes\('y'\)"):
        to_tensors(frame, ["n"], "y", device="cpu", num_classes=2)


@pytest.mark.gpu
def test_cudf_hand_off_of_codes_and_float_labels_matches_pandas(table):
    cudf = pytest.importorskip("cudf", reason="cuDF is not installed")

    _, out = _prepared(table, "pandas")
    gdf = cudf.from_pandas(out)
    x, x_cat, y = to_tensors(gdf, ["n"], "y", categorical=["k", "u"], device="cuda", label_dtype=torch.float32)
    px, pcat, py = to_tensors(out, ["n"], "y", categorical=["k", "u"], device="cpu", label_dtype=torch.float32)
    assert x_cat.device.type == "cuda" and x_cat.dtype == torch.int64 and x_cat.is_contiguous()
    assert torch.equal(x_cat.cpu(), pcat) and torch.equal(y.cpu(), py) and torch.equal(x.cpu(), px)
    _, _, y64 = to_tensors(gdf, ["n"], "y", categorical=["k"], device="cuda", label_dtype=torch.float64)
    assert y64.dtype == torch.float64
    bad = cudf.from_pandas(pd.DataFrame({"n": [0.1, 0.2], "neg": [1, -1], "y": [1.0, None]}))
    with pytest.raises(ColumnTypeError, match=r"categorical column\(s\) \['neg'\] hold negative codes"):
        to_tensors(bad, ["n"], categorical=["neg"], device="cuda")
    with pytest.raises(NonFiniteError, match=r"missing values in label column 'y' \(1 of 2 rows\): a regression"):
        to_tensors(bad, ["n"], "y", device="cuda", label_dtype=torch.float32)
    batches = list(iter_batches(gdf, ["n"], "cls", categorical=["k"], batch_size=16, device="cuda"))
    assert sum(len(b[1]) for b in batches) == 50


@pytest.mark.parametrize("backend", BACKENDS)
def test_a_text_label_points_to_label_encode(table, backend):
    # iris' Species as the label: Categorify (the only advice before) reserves codes 0 and 1,
    # two outputs a classifier never trains; a target's classes are LabelEncode's.
    frame = to_backend(table, backend)
    with pytest.raises(ColumnTypeError, match=r"the label 'cls': LabelEncode\(\['cls'\]\) \(classes 0..K-1\)"):
        to_tensors(frame, ["n"], "cls", device="cpu")
    with pytest.raises(ColumnTypeError, match=r"\{'k': 'String'\} are not.*categories\)$"):
        to_tensors(frame, ["k"], "y", label_dtype=torch.float32, device="cpu")
