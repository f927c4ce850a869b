"""Scale-out: the same recipe on Dask partitions, on a local cluster, with exact global statistics."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from gpufeed.datasets.sensor import write_sensor_table
from gpufeed.gpu_transforms.tabular import (
    Categorify,
    FillMissing,
    Recipe,
    Standardize,
    UnknownFormatError,
)
from gpufeed.gpu_transforms.tabular.dask import local_cluster, read_dask, to_dask

pytest.importorskip("distributed")


def test_recipe_on_a_local_cluster_combines_statistics_exactly(tmp_path):
    path = write_sensor_table(tmp_path / "s.parquet", 20_000, chunk_rows=65_536, n_features=8, seed=2)
    pdf = pd.read_parquet(path)
    ops = lambda: [FillMissing(["temp_05"]), Standardize(["temp_05", "adc_02"], by="region"),  # noqa: E731
                   Categorify(["station_id"])]
    reference = Recipe(ops()).fit(pdf)
    with local_cluster(n_workers=2) as client:
        assert len(client.scheduler_info()["workers"]) == 2
        ddf = read_dask(str(path), backend="pandas").repartition(npartitions=4)
        recipe = Recipe(ops()).fit(ddf)
        out = recipe.transform(ddf).compute()
    # One global vocabulary, not one per partition; global mean/std equal the in-memory ones.
    assert recipe.ops[2].state["station_id"] == reference.ops[2].state["station_id"]
    assert recipe.ops[0].state["temp_05"] == pytest.approx(reference.ops[0].state["temp_05"], rel=1e-12)
    expected = reference.transform(pdf)
    for c in ("temp_05", "adc_02", "station_id"):
        np.testing.assert_allclose(out[c].to_numpy(float), expected[c].to_numpy(float), rtol=1e-10, atol=1e-12)


def test_to_dask_and_unknown_files(tmp_path):
    ddf = to_dask(pd.DataFrame({"a": range(10)}), npartitions=3)
    assert ddf.npartitions == 3 and int(ddf["a"].sum().compute()) == 45
    with pytest.raises(UnknownFormatError, match="x.xlsx"):
        read_dask(str(tmp_path / "x.xlsx"))
    with pytest.raises(ValueError, match="npartitions"):
        to_dask(pd.DataFrame({"a": [1]}), npartitions=0)
    with pytest.raises(ValueError, match="paths is an empty list"):
        read_dask([])


def test_cudf_partitions_without_dask_cudf_are_refused_with_the_package_to_install(monkeypatch, tmp_path):
    from types import SimpleNamespace

    from gpufeed.gpu_transforms.tabular import dask as dask_module

    monkeypatch.setattr(dask_module, "installed", lambda name: name != "dask_cudf")
    monkeypatch.setattr(dask_module, "choose_dataframe_backend", lambda _: SimpleNamespace(name="cudf"))
    with pytest.raises(ValueError, match="needs dask-cudf: pip install dask-cudf-cu13"):
        read_dask(tmp_path / "t.parquet", backend="cudf")
