"""Declarative rules: the vectorised result equals the for-loop reference on every backend."""

from __future__ import annotations

import json

import numpy as np
import pandas as pd
import pytest

from gpufeed.gpu_transforms.tabular import (
    MissingColumnError,
    Rule,
    apply_rules,
    apply_rules_rowwise,
    col,
    to_backend,
)
from gpufeed.gpu_transforms.tabular.dask import to_dask
from gpufeed.gpu_transforms.tabular.rules import cond_from_dict


@pytest.fixture(scope="module")
def table() -> pd.DataFrame:
    rng = np.random.default_rng(5)
    n = 3000
    power = rng.uniform(-20, 150, n)
    power[rng.random(n) < 0.05] = np.nan  # missing values must behave like in a loop
    return pd.DataFrame({"region": rng.choice(["north", "south", "east", "west"], n), "power": power,
                         "band": rng.integers(0, 5, n)})


RULES = [
    Rule("weight", [
        (col("region").isin(["north", "east"]) & col("power").between(0, 50), 0.5),
        (~(col("power") > 10) | (col("band") == 4), 2.0),
        (col("region") != "west", 1.5),
    ], default=1.0),
    Rule("tier", [(col("power") >= 100, "high"), (col("power") < 0, "neg")], default="mid"),
]


def _loop_reference(df: pd.DataFrame) -> list[float]:
    """How a user writes the rule as a loop (NaN compares False)."""
    out = []
    for region, power, band in zip(df["region"], df["power"], df["band"], strict=True):
        if region in ("north", "east") and 0 <= power <= 50:
            out.append(0.5)
        elif not (power > 10) or band == 4:
            out.append(2.0)
        elif region != "west":
            out.append(1.5)
        else:
            out.append(1.0)
    return out


@pytest.mark.parametrize("backend", ["pandas", "polars", "dask"])
def test_vectorised_rules_equal_the_row_by_row_reference(table, backend):
    frame = to_dask(table, 3) if backend == "dask" else to_backend(table, backend)
    out = apply_rules(frame, RULES)
    out = out.compute() if backend == "dask" else out
    ref = apply_rules_rowwise(table, RULES)
    assert ref["weight"] == _loop_reference(table)
    assert np.asarray(out["weight"]).tolist() == ref["weight"]
    assert list(np.asarray(out["tier"])) == ref["tier"]
    assert len(set(ref["weight"])) == 4  # every case is exercised


def test_rules_keep_rows_and_add_columns(table):
    out = apply_rules(table, RULES)
    assert len(out) == len(table) and list(out.columns) == [*table.columns, "weight", "tier"]


def test_rules_round_trip_through_json(table):
    restored = [Rule.from_dict(json.loads(json.dumps(r.to_dict()))) for r in RULES]
    assert apply_rules_rowwise(table, restored) == apply_rules_rowwise(table, RULES)


def test_missing_column_names_the_rule(table):
    rule = Rule("w", [(col("voltage") > 3, 1.0)], default=0.0)
    with pytest.raises(MissingColumnError, match=r"rule 'w' needs column\(s\) \['voltage'\]"):
        apply_rules(table, [rule])


def test_malformed_rules_are_rejected():
    with pytest.raises(ValueError, match="at least one"):
        Rule("w", [])
    with pytest.raises(TypeError, match="each case is"):
        Rule("w", [("power > 3", 1.0)])
    with pytest.raises(ValueError, match="unknown comparison"):
        cond_from_dict({"compare": "~=", "column": "a", "value": 1})
