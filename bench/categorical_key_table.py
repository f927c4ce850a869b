"""Write a table whose group key is a pandas categorical (as a pickled or Parquet frame keeps
one after ``astype("category")``): 1M rows, 3 float columns (~2 % gaps in one), a 3-value
categorical ``region``, seeded, as Parquet. polars reads the key as a ``Categorical``, pandas
as a categorical: where pandas by hand groups fastest and the kit has the least to gain
(`docs/tabular.md`, "Fast paths"):

    python bench/categorical_key_table.py /tmp/catkey/catkey.parquet
    gpufeed bench tabular --parts recipe --tables /tmp/catkey/catkey.parquet --rows 1000000
"""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import pandas as pd


def categorical_key_table(rows: int = 1_000_000, seed: int = 0) -> pd.DataFrame:
    """The table: float columns ``a``, ``b``, ``c`` and the categorical ``region``."""
    rng = np.random.default_rng(seed)
    frame = pd.DataFrame({"a": rng.normal(size=rows), "b": rng.normal(size=rows), "c": rng.normal(size=rows),
                          "region": pd.Categorical(rng.choice(["north", "south", "east"], rows))})
    frame.loc[rng.random(rows) < 0.02, "a"] = np.nan
    return frame


if __name__ == "__main__":
    out = Path(sys.argv[1] if len(sys.argv) > 1 else "catkey.parquet")
    out.parent.mkdir(parents=True, exist_ok=True)
    categorical_key_table().to_parquet(out)
    print(f"wrote {out}")
