"""Embedding sizes from the recipe (``num_embeddings``), plain label encoding of a target
(``LabelEncode``) and the inverse of the scaling ops, the same on pandas, polars and cuDF."""

from __future__ import annotations

import json

import numpy as np
import pandas as pd
import pytest
import torch

from gpufeed.gpu_transforms.tabular import (
    Categorify,
    Clip,
    FillMissing,
    HashBucket,
    LabelEncode,
    Log,
    MinMax,
    Recipe,
    Standardize,
    UnseenCategoryError,
    to_backend,
)

BACKENDS = ["pandas", "polars"]


@pytest.fixture
def table() -> pd.DataFrame:
    rng = np.random.default_rng(3)
    n = 60
    return pd.DataFrame({"x": rng.normal(50, 10, n), "p": rng.lognormal(3, 1, n), "g": rng.choice(["n", "s", "e"], n),
                         "k": rng.choice(["a", "b", "c", "d"], n), "u": [f"id{i % 17}" for i in range(n)],
                         "t": rng.choice(["low", "mid", "high"], n), "ti": rng.choice([10, 20, 30], n)})


def _pandas(frame) -> pd.DataFrame:
    return frame if isinstance(frame, pd.DataFrame) else frame.to_pandas()


def test_recipe_num_embeddings_delegates_to_the_encoding_op(table):
    recipe = Recipe([Categorify(["k"]), HashBucket(["u"], buckets=32), LabelEncode(["t"])]).fit(table)
    assert recipe.num_embeddings("k") == 4 + 2 == recipe.ops[0].num_embeddings("k")
    assert recipe.num_embeddings("u") == 32 == HashBucket(["u"], buckets=32).num_embeddings("u")
    assert recipe.num_embeddings("t") == 3 == recipe.num_classes("t")
    assert recipe.num_classes("k") == 6  # a Categorify target: codes 0 .. vocabulary + 1
    # the same from the saved recipe
    assert Recipe.from_json(recipe.to_json()).num_embeddings("k") == 6
    with pytest.raises(ValueError, match=r"Recipe.num_embeddings: no op of the recipe encodes column 'x' .*"
                       r"encoded columns: \['k', 'u', 't'\]"):
        recipe.num_embeddings("x")
    with pytest.raises(KeyError, match=r"HashBucket: column 'k' is not one of its columns \['u'\]"):
        recipe.ops[1].num_embeddings("k")
    with pytest.raises(RuntimeError, match=r"Categorify: not fitted \(column 'k' has no vocabulary yet\)"):
        Categorify(["k"]).num_embeddings("k")


@pytest.mark.parametrize("backend", BACKENDS)
def test_label_encode_gives_classes_zero_to_k_minus_one(table, backend):
    # Categorify gave a text target classes 2, 3, ... (0 and 1 reserved): two outputs never trained
    frame = to_backend(table, backend)
    recipe = Recipe([Standardize(["x"]), LabelEncode(["t", "ti"])])
    out = _pandas(recipe.fit_transform(frame))
    assert recipe.ops[1].classes("t") == ["high", "low", "mid"] and recipe.ops[1].classes("ti") == [10, 20, 30]
    assert out["t"].tolist() == table["t"].map({"high": 0, "low": 1, "mid": 2}).tolist()
    assert out["ti"].tolist() == (table["ti"] // 10 - 1).tolist()
    assert out["t"].dtype == np.int32
    assert recipe.inverse("t", torch.tensor([2, 0])) == ["mid", "high"]
    assert recipe.inverse("t", np.array([1])) == ["low"]
    with pytest.raises(ValueError, match=r"codes \[3\] are not class indices 0 .. 2"):
        recipe.inverse("t", [3])
    # saved as its own op: loaded back, the same codes
    doc = json.loads(recipe.to_json())
    assert doc["gpufeed_recipe"] == 1 and doc["ops"][1]["op"] == "label_encode"
    loaded = Recipe.from_json(recipe.to_json())
    assert _pandas(loaded.transform(frame)).equals(out)


@pytest.mark.parametrize("backend", BACKENDS)
def test_label_encode_names_unseen_and_missing_target_values(table, backend):
    recipe = Recipe([LabelEncode(["t"])]).fit(to_backend(table, backend))
    bad = to_backend(pd.DataFrame({"t": ["low", "extreme", None, "extreme"]}), backend)
    with pytest.raises(UnseenCategoryError, match=r"LabelEncode: target column 't' has 2 value\(s\) not seen at fit "
                       r"time, e.g. \['extreme'\] and 1 missing value\(s\); a class index is one of "
                       r"the 3 classes fitted \(\['high', 'low', 'mid'\]\)"):
        recipe.transform(bad)
    with pytest.raises(UnseenCategoryError, match=r"has 1 missing value\(s\)"):
        Recipe([LabelEncode(["t"])]).fit_transform(to_backend(table.assign(t=table["t"].where(table.index != 4)),
                                                              backend))


def test_recipes_saved_before_label_encode_load_as_before(table):
    # a version-1 recipe written before LabelEncode: no new key, same codes
    old = ('{"gpufeed_recipe": 1, "ops": [{"op": "categorify", "columns": ["k"], "min_count": 1, '
           '"on_unseen": "index", "state": {"k": ["a", "b", "c", "d"]}}]}')
    recipe = Recipe.from_json(old)
    assert recipe.transform(table)["k"].tolist() == table["k"].map({"a": 2, "b": 3, "c": 4, "d": 5}).tolist()
    assert json.loads(recipe.to_json()) == json.loads(old)


@pytest.mark.parametrize("backend", BACKENDS)
def test_inverse_undoes_standardize_minmax_and_log_exactly(table, backend):
    frame = to_backend(table, backend)
    recipe = Recipe([FillMissing(["x", "p"]), Clip(["p"], lower=0), Log(["p"]), Standardize(["p"]), MinMax(["x"])])
    out = _pandas(recipe.fit_transform(frame))
    np.testing.assert_allclose(recipe.inverse("x", out["x"].to_numpy()), table["x"], rtol=1e-13)
    np.testing.assert_allclose(recipe.inverse("p", out["p"].to_numpy()), table["p"], rtol=1e-12)
    assert recipe.inverse("x", float(out["x"].iloc[0])) == pytest.approx(table["x"].iloc[0], rel=1e-13)
    # a tensor stays a tensor of its dtype (computed in float64); a list gives an array
    back = recipe.inverse("x", torch.tensor(out["x"].to_numpy(), dtype=torch.float32))
    assert back.dtype == torch.float32
    np.testing.assert_allclose(back.numpy(), table["x"], rtol=1e-6)
    assert isinstance(recipe.inverse("x", out["x"].tolist()), np.ndarray)
    # each op on its own
    std = recipe.ops[3]
    mean, sd = std.state["global"]["p"]
    assert std.inverse("p", np.array([0.0, 1.0])).tolist() == [mean, mean + sd]
    low, high = recipe.ops[4].state["x"]
    assert recipe.ops[4].inverse("x", [0.0, 1.0]).tolist() == [low, high]
    # predictions in the target's units, through the saved recipe
    loaded = Recipe.from_json(recipe.to_json())
    np.testing.assert_allclose(loaded.inverse("x", out["x"].to_numpy()), table["x"], rtol=1e-13)


@pytest.mark.parametrize("backend", BACKENDS)
def test_inverse_of_standardize_by_group_needs_the_groups(table, backend):
    frame = to_backend(table, backend)
    recipe = Recipe([Standardize(["x"], by="g")])
    out = _pandas(recipe.fit_transform(frame))
    np.testing.assert_allclose(recipe.inverse("x", out["x"].to_numpy(), groups=frame["g"]), table["x"], rtol=1e-13)
    np.testing.assert_allclose(recipe.inverse("x", torch.tensor(out["x"].to_numpy()), groups=table["g"].tolist()),
                               table["x"], rtol=1e-13)
    # an unseen or missing group uses the global statistics, as transform does
    mean, sd = recipe.ops[0].state["global"]["x"]
    assert recipe.inverse("x", [1.0, 1.0], groups=["west", None]).tolist() == [mean + sd, mean + sd]
    with pytest.raises(ValueError, match=r"scaled 'x' per group of 'g': pass groups="):
        recipe.inverse("x", out["x"].to_numpy())
    with pytest.raises(ValueError, match=r"groups has 2 values for 3 rows"):
        recipe.inverse("x", [0.0, 1.0, 2.0], groups=["n", "s"])


@pytest.mark.parametrize("backend", BACKENDS)
def test_inverse_refuses_raw_groups_of_a_by_column_encoded_before(table, backend):
    # Categorify(["g"]) before Standardize(by="g"): the op grouped by codes 2..4, so the raw
    # groups "n", "s", "e" had all silently taken the global statistics (a wrong inverse).
    frame = to_backend(table, backend)
    recipe = Recipe([Categorify(["g"]), Standardize(["x"], by="g")])
    out = _pandas(recipe.fit_transform(frame))
    with pytest.raises(ValueError, match=r"Standardize\(by='g'\) grouped by 'g' as categorify left it.*after the recipe"):
        recipe.inverse("x", out["x"].to_numpy(), groups=frame["g"])
    np.testing.assert_allclose(recipe.inverse("x", out["x"].to_numpy(), groups=out["g"]), table["x"], rtol=1e-13)


@pytest.mark.parametrize("backend", BACKENDS)
def test_inverse_refuses_the_codes_of_a_by_column_encoded_after(table, backend):
    # Standardize(by="g") then Categorify(["g"]): the output's "g" holds codes, none of them
    # a fitted group, and every row had silently taken the global statistics.
    frame = to_backend(table, backend)
    recipe = Recipe([Standardize(["x"], by="g"), Categorify(["g"])])
    out = _pandas(recipe.fit_transform(frame))
    with pytest.raises(ValueError, match=r"none of groups= is one of them.*look like categorify's output.*"
                                         r"as it was before the recipe"):
        recipe.inverse("x", out["x"].to_numpy(), groups=out["g"])
    np.testing.assert_allclose(recipe.inverse("x", out["x"].to_numpy(), groups=frame["g"]), table["x"], rtol=1e-13)
    # Raw groups that are only unseen (a split by group) still take the global statistics.
    mean, sd = recipe.ops[0].state["global"]["x"]
    assert recipe.inverse("x", [1.0], groups=["nowhere"]).tolist() == [mean + sd]


def test_inverse_refuses_codes_and_columns_it_did_not_touch(table):
    recipe = Recipe([Standardize(["x"]), Categorify(["k"])]).fit(table)
    with pytest.raises(ValueError, match=r"categorify codes of column 'k' are no numbers to invert"):
        recipe.inverse("k", [2, 3])
    with pytest.raises(ValueError, match=r"no op of the recipe transforms column 'p'"):
        recipe.inverse("p", [0.0])
    with pytest.raises(ValueError, match="groups= is for Standardize\\(by=...\\)"):
        recipe.inverse("x", [0.0], groups=["n"])


@pytest.mark.gpu
def test_cudf_label_encode_and_inverse_match_pandas(table):
    cudf = pytest.importorskip("cudf", reason="cuDF is not installed")

    recipe = Recipe([Standardize(["x"], by="g"), Categorify(["k"]), LabelEncode(["t", "ti"])])
    expected = recipe.fit_transform(table)
    gpu = Recipe([Standardize(["x"], by="g"), Categorify(["k"]), LabelEncode(["t", "ti"])])
    got = gpu.fit_transform(cudf.from_pandas(table)).to_pandas()
    assert [op.state for op in gpu.ops[1:]] == [op.state for op in recipe.ops[1:]]  # vocabularies, classes
    pd.testing.assert_frame_equal(got[["k", "t", "ti"]], expected[["k", "t", "ti"]], check_dtype=False)
    np.testing.assert_allclose(gpu.inverse("x", torch.tensor(got["x"].to_numpy(), device="cuda"),
                                           groups=cudf.from_pandas(table)["g"]).cpu().numpy(), table["x"], rtol=1e-12)
    with pytest.raises(UnseenCategoryError, match=r"target column 't' has 1 value\(s\) not seen"):
        gpu.transform(cudf.from_pandas(table.assign(t=["zzz"] + table["t"].tolist()[1:])))


def test_label_encode_names_itself_in_a_fitting_error():
    # It fits through Categorify, whose errors named "Categorify:" though the user wrote LabelEncode.
    from gpufeed.gpu_transforms.tabular import ColumnTypeError

    mixed = pd.DataFrame({"t": pd.Series(["a", 1, "b"], dtype=object)})
    with pytest.raises(ColumnTypeError, match=r"^LabelEncode: column 't' mixes"):
        Recipe([LabelEncode(["t"])]).fit(mixed)


@pytest.mark.gpu
def test_inverse_of_cupy_and_cudf_values_stays_on_the_gpu(table):
    """``np.asarray`` refuses device data, so an inverse of cupy values failed with "values
    must be numbers ... got ndarray"; cupy and cuDF values are now undone on the GPU."""
    cupy = pytest.importorskip("cupy", reason="cupy is not installed")
    cudf = pytest.importorskip("cudf", reason="cuDF is not installed")

    recipe = Recipe([Standardize(["x"])])
    scaled = recipe.fit_transform(table)["x"].to_numpy()
    back = recipe.inverse("x", cupy.asarray(scaled))
    assert isinstance(back, cupy.ndarray)
    np.testing.assert_allclose(back.get(), table["x"], rtol=1e-12)
    back = recipe.inverse("x", cudf.Series(scaled))
    np.testing.assert_allclose(back.to_numpy(), table["x"], rtol=1e-12)
    by = Recipe([Standardize(["x"], by="g")])
    scaled = by.fit_transform(table)["x"].to_numpy()
    back = by.inverse("x", cupy.asarray(scaled), groups=table["g"])  # per-group statistics on the GPU too
    np.testing.assert_allclose(cupy.asnumpy(back), table["x"], rtol=1e-12)
