"""Write a wide, short table for the recipe benchmark: 2,000 float features of 500 rows
(values past 2.5 standard deviations made missing: ~0.6 % gaps), a 40-value text key and
a 0/1 label, seeded, as Parquet. Width is where the kit's per-column costs show
(`docs/tabular.md`, "On a wide table"):

    python bench/wide_table.py /tmp/wide/wide.parquet
    gpufeed bench tabular --parts recipe --tables /tmp/wide/wide.parquet --rows 500,20000
"""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import pandas as pd


def wide_table(rows: int = 500, features: int = 2000, seed: int = 0) -> pd.DataFrame:
    """The table: ``features`` float columns ``f0000``..., ``site`` and ``label``."""
    rng = np.random.default_rng(seed)
    frame = pd.DataFrame(rng.normal(size=(rows, features)), columns=[f"f{i:04d}" for i in range(features)])
    frame[frame > 2.5] = np.nan
    frame["site"] = rng.choice([f"s{i}" for i in range(40)], rows)
    frame["label"] = rng.integers(0, 2, rows)
    return frame


if __name__ == "__main__":
    out = Path(sys.argv[1] if len(sys.argv) > 1 else "wide.parquet")
    out.parent.mkdir(parents=True, exist_ok=True)
    wide_table().to_parquet(out)
    print(f"wrote {out}")
