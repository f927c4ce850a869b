"""Write tables of shapes the built-in generators lack, seeded, as Parquet, for the recipe
benchmark's ``--tables`` (`docs/tabular.md`, "On a wide table" and "Fast paths"):

- ``wide``: 2,000 float features of 500 rows (values past 2.5 standard deviations made
  missing: ~0.6 % gaps), a 40-value text key and a 0/1 label. Width is where the kit's
  per-column costs show.
- ``categorical-key``: 1M rows, 3 float columns (~2 % gaps in one) and a 3-value pandas
  categorical ``region`` (as a pickled or Parquet frame keeps one after
  ``astype("category")``; polars reads it as a ``Categorical``): where pandas by hand groups
  fastest and the kit has the least to gain.

    python bench/shaped_tables.py wide /tmp/wide/wide.parquet
    gpufeed bench tabular --parts recipe --tables /tmp/wide/wide.parquet --rows 500,20000
    python bench/shaped_tables.py categorical-key /tmp/catkey/catkey.parquet
    gpufeed bench tabular --parts recipe --tables /tmp/catkey/catkey.parquet --rows 1000000
"""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import pandas as pd


def wide_table(rows: int = 500, features: int = 2000, seed: int = 0) -> pd.DataFrame:
    """The wide table: ``features`` float columns ``f0000``..., ``site`` and ``label``."""
    rng = np.random.default_rng(seed)
    frame = pd.DataFrame(rng.normal(size=(rows, features)), columns=[f"f{i:04d}" for i in range(features)])
    frame[frame > 2.5] = np.nan
    frame["site"] = rng.choice([f"s{i}" for i in range(40)], rows)
    frame["label"] = rng.integers(0, 2, rows)
    return frame


def categorical_key_table(rows: int = 1_000_000, seed: int = 0) -> pd.DataFrame:
    """The categorical-key table: float columns ``a``, ``b``, ``c`` and the categorical ``region``."""
    rng = np.random.default_rng(seed)
    frame = pd.DataFrame({"a": rng.normal(size=rows), "b": rng.normal(size=rows), "c": rng.normal(size=rows),
                          "region": pd.Categorical(rng.choice(["north", "south", "east"], rows))})
    frame.loc[rng.random(rows) < 0.02, "a"] = np.nan
    return frame


TABLES = {"wide": wide_table, "categorical-key": categorical_key_table}

if __name__ == "__main__":
    if len(sys.argv) != 3 or sys.argv[1] not in TABLES:
        sys.exit(f"usage: python bench/shaped_tables.py {{{'|'.join(TABLES)}}} OUT.parquet")
    out = Path(sys.argv[2])
    out.parent.mkdir(parents=True, exist_ok=True)
    TABLES[sys.argv[1]]().to_parquet(out)
    print(f"wrote {out}")
