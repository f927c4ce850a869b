"""The recipe part of ``gpufeed bench tabular``: every op of the recipe timed alone, per table.

A recipe's total can hide a slow op behind fast ones. Here every op of a recipe (fill,
quantile clip, log, per-group standardise, min-max, categorify) is timed on its own, fit +
transform, on the output of the ops before it, for:

- ``pandas-baseline``: the op written by hand in idiomatic vectorised pandas (what a user
  has today: ``fillna(mean)``, ``quantile`` + ``clip``, ``np.log1p``, a group-by gather,
  ``pd.factorize``), the baseline of every ratio;
- ``pandas``, ``polars`` and ``cudf``: the kit's op on that backend.

The whole recipe's time is the sum of its ops' medians: :class:`~gpufeed.gpu_transforms.
tabular.Recipe` runs op by op, each materialised, exactly as timed here.

Two tables: the numeric-heavy sensor table (99 columns, one low-cardinality key) and the
text-heavy transactions table (20 columns, text columns of 3 to 5,000 values, a ~1M
distinct id, gaps). Each variant runs in its own process (``run_isolated`` in
:mod:`gpufeed.bench.tabular`), which also gives its peak RSS; the outputs are compared
after timing.
"""

from __future__ import annotations

import copy
import math
import statistics
from collections.abc import Callable
from typing import Any

from gpufeed.bench.harness import Timing, markdown_table, measure, number_text
from gpufeed.bench.own_table import OwnTable, sized_file
from gpufeed.machine import peak_rss_bytes

#: Tables the recipe part runs on.
TABLES = ("sensor", "transactions")
#: The hand-written pandas recipe, the baseline of every ratio.
BASELINE = "pandas-baseline"


def sensor_columns() -> dict[str, list[str]]:
    """Column groups of the default sensor table used by the recipe and the rule."""
    from gpufeed.datasets.sensor import sensor_schema

    schema = sensor_schema()
    return {
        "floats": [c for c, k in schema if k in ("temp", "pressure", "humidity", "volt", "ratio")],
        "logs": [c for c, k in schema if k in ("count", "total")],
        "scaled": [c for c, k in schema if k in ("flag", "code", "adc", "delta")],
        "cats": ["region", "station_id"],
        "volt": next(c for c, k in schema if k == "volt"),
        "temp": next(c for c, k in schema if k == "temp"),
    }


def recipe_ops(table: str | OwnTable) -> list[Any]:
    """The recipe timed on ``table`` (``"sensor"``, ``"transactions"`` or a user's
    :class:`~gpufeed.bench.own_table.OwnTable`), as a list of fresh ops."""
    from gpufeed.gpu_transforms.tabular import (
        Categorify,
        Clip,
        FillMissing,
        Log,
        MinMax,
        Standardize,
    )

    if isinstance(table, OwnTable):
        return table.recipe_ops()
    if table == "sensor":
        cols = sensor_columns()
        return [
            FillMissing(cols["floats"]), Clip(cols["floats"], quantiles=(0.001, 0.999)), Log(cols["logs"]),
            Standardize(cols["floats"], by="region"), MinMax(cols["scaled"]), Categorify(cols["cats"]),
        ]
    if table == "transactions":
        return [
            FillMissing(["amount", "discount", "risk_score"]),
            Clip(["amount"], quantiles=(0.001, 0.999)),
            Log(["session_seconds"]),
            Standardize(["amount", "balance"], by="country"),
            MinMax(["account_days"]),
            Categorify(["channel", "country", "merchant_category", "city"]),
        ]
    raise ValueError(f"table must be one of {', '.join(TABLES)}, got {table!r}")


def bench_recipe(table: str = "sensor") -> Any:
    """The kit's :class:`~gpufeed.gpu_transforms.tabular.Recipe` of ``table``'s benchmark."""
    from gpufeed.gpu_transforms.tabular import Recipe

    return Recipe(recipe_ops(table))


def table_file(table: str | OwnTable, rows: int, data_dir: str | None = None) -> str:
    """The cached Parquet file of ``table`` with ``rows`` rows (generated, or for a user's
    table sized from its file, once)."""
    if isinstance(table, OwnTable):
        return sized_file(table, rows, data_dir)
    if table == "sensor":
        from gpufeed.datasets.sensor import cached_sensor_file

        return str(cached_sensor_file(rows, data_dir))
    if table == "transactions":
        from gpufeed.datasets.transactions import cached_transaction_file

        return str(cached_transaction_file(rows, data_dir))
    raise ValueError(f"table must be one of {', '.join(TABLES)}, got {table!r}")


# ------------------------------------------------------- the ops written by hand in pandas

def _fill(df: Any, op: Any) -> Any:
    return df.fillna(df[op.columns].mean().to_dict())


def _clip(df: Any, op: Any) -> Any:
    bounds = df[op.columns].quantile(list(op.quantiles))
    return df.assign(**{c: df[c].clip(bounds[c].iloc[0], bounds[c].iloc[1]) for c in op.columns})


def _log(df: Any, op: Any) -> Any:
    import numpy as np

    return df.assign(**np.log1p(df[op.columns].astype("float64")))


def _standardize(df: Any, op: Any) -> Any:
    import numpy as np

    # A std within float64 rounding of 0 counts as 0: the kit's documented rule, one bound
    # for both (pandas has no rule of its own; dividing by the noise gave +-1).
    from gpufeed.gpu_transforms.tabular.stats import rounding_noise, scale

    def overall(c: str) -> tuple[float, float]:
        """The whole column's mean and std to divide by (NaN skipped)."""
        x = df[c].to_numpy(dtype="float64", na_value=np.nan)
        mean = float(np.nanmean(x))
        return mean, scale(np.nanstd(x), mean, np.count_nonzero(~np.isnan(x)))

    if op.by is None:
        stats = {c: overall(c) for c in op.columns}
        return df.assign(**{c: _series(df, (df[c].to_numpy(dtype="float64", na_value=np.nan) - m) / sd)
                            for c, (m, sd) in stats.items()})
    # Column by column with a gather per row: frame-wise forms (`(x - means.loc[key]) /
    # stds.loc[key]`) build rows x columns temporaries that pushed the 10M-row sensor run
    # past this machine's RAM, and the gather was 2.5x faster than the `.loc` row lookup.
    grouped = df.groupby(op.by, observed=True)[op.columns]  # rows with a missing key: in no group
    means, stds = grouped.mean(), grouped.std(ddof=0).to_numpy()
    # Counted only where a std could be rounding noise (the bound needs the count; below a
    # billion rows it lies under 1e-6 of the mean): a user would not count otherwise.
    if (stds <= 1e-6 * np.abs(means.to_numpy())).any() or np.isnan(stds).any():
        constant = rounding_noise(stds, means.to_numpy(), grouped.count().to_numpy()) | np.isnan(stds)
        stds = np.where(constant, 1.0, stds)
    group = means.index.get_indexer(df[op.by])  # each row's position in the statistics, -1: none
    # A row with a missing key takes the whole column's statistics (the kit's rule), in the
    # slot past the groups (index -1); they are computed only when such a row exists.
    tails = {c: overall(c) for c in op.columns} if (group < 0).any() else dict.fromkeys(op.columns, (0.0, 1.0))
    return df.assign(**{c: _series(df, (df[c].to_numpy(dtype="float64", na_value=np.nan)
                                        - np.append(means[c].to_numpy(), tails[c][0])[group])
                                   / np.append(stds[:, i], tails[c][1])[group]) for i, c in enumerate(op.columns)})


def _series(df: Any, values: Any) -> Any:
    """A computed numpy column as a Series on ``df``'s index, as the kit hands its columns
    over: pandas copies a bare array it is given as a column (a pass per column that the
    kit does not pay, which had flattered it), and keeps a Series' data."""
    import pandas as pd

    return pd.Series(values, index=df.index, copy=False)


def _minmax(df: Any, op: Any) -> Any:
    lo, hi = df[op.columns].min(), df[op.columns].max()
    span = (hi - lo).where(hi > lo, 1.0)
    return df.assign(**{c: (df[c] - lo[c]) / span[c] for c in op.columns})


def _categorify(df: Any, op: Any) -> Any:
    import numpy as np
    import pandas as pd

    def codes(column: str) -> Any:
        values = df[column]
        if isinstance(values.dtype, pd.CategoricalDtype):
            # The kit numbers a category column's values in sorted order, whatever order its
            # categories are in (a table read from HDF5 kept them in order of appearance).
            values = values.astype(values.cat.categories.dtype)
        found, _ = pd.factorize(values, sort=True)  # sorted vocabulary; missing -> -1
        return np.where(found >= 0, found + 2, 1).astype(np.int32)

    return df.assign(**{c: _series(df, codes(c)) for c in op.columns})


#: Each op of the kit written by hand in vectorised pandas: ``HAND[type(op).__name__](df, op)``.
HAND: dict[str, Callable[[Any, Any], Any]] = {
    "FillMissing": _fill, "Clip": _clip, "Log": _log, "Standardize": _standardize,
    "MinMax": _minmax, "Categorify": _categorify,
}


def hand_recipe(df: Any, table: str | OwnTable) -> Any:
    """The baseline: ``table``'s recipe in hand-written pandas, fitted on ``df`` and applied to it."""
    for op in recipe_ops(table):
        df = HAND[type(op).__name__](df, op)
    return df


# ------------------------------------------------------------------- worker helpers

def load_table(path: str, backend: str, rows: int | None = None) -> Any:
    """Read the Parquet table at ``path`` onto ``backend`` (``pandas-baseline`` reads as pandas)."""
    if backend.startswith("pandas"):
        import pyarrow.parquet as pq

        # One block per column, Arrow's buffers released as they are converted: the table
        # loads at ~1.6x its size instead of ~2.3x and the pandas recipes' temporaries stay
        # per column. With pandas' consolidated layout (pd.read_parquet) the 10M-row
        # baseline ran out of this machine's 24 GB; at 1M and 3M rows both layouts ran the
        # baseline equally fast. Some columns are then read-only: no recipe writes in place.
        frame = pq.read_table(path).to_pandas(self_destruct=True, split_blocks=True)
    else:
        from gpufeed.datasets.tables import read_table

        frame = read_table(path, backend=backend)
    return frame if rows is None else frame[:rows]


def peak_rss_gb() -> float:
    """This process's own peak resident memory so far, in GiB (:func:`~gpufeed.machine.peak_rss_bytes`)."""
    return peak_rss_bytes() / 2**30


def column_checksums(df: Any) -> dict[str, list[float]]:
    """``{column: [sum, missing count, sum of squares, position-weighted sum]}`` of the
    numeric columns, missing values left out, compared across processes after timing (a
    fast, wrong pipeline shows up here). The squares catch a column scaled wrong whose sum
    stays put (a standardised column times 2), the weights rows in another order
    (category codes reversed)."""
    import narwhals as nw
    import numpy as np

    from gpufeed.gpu_transforms.tabular.frames import backend_of, wrap

    if backend_of(df) == "cudf":
        # On the host, as pandas reads it: a cuDF column with nulls has no NumPy view
        # (to_numpy refuses), and this check is taken after the timing.
        df = df.to_pandas()
    frame = wrap(df)
    names = [c for c, t in frame.collect_schema().items() if t.is_numeric()]
    out = {}
    for c in names:
        values = frame.get_column(c).cast(nw.Float64).to_numpy()
        values = np.asarray(values.get() if hasattr(values, "get") else values, dtype=np.float64)  # cupy: host
        missing = np.isnan(values)
        values = np.where(missing, 0.0, values)
        weights = (np.arange(len(values)) % 1009) / 1009.0 + 0.5
        out[c] = [float(values.sum()), float(missing.sum()), float(np.dot(values, values)), float(np.dot(values, weights))]
    return out


def differing(a: dict[str, list[float]], b: dict[str, list[float]]) -> list[str]:
    """The columns of both :func:`column_checksums` whose figures disagree (to 1e-6
    relative, missing counts exactly). A column numeric on one backend only (decimals are
    numbers on polars, Python objects in pandas) is left out: which columns came out is
    compared by name (:func:`_check`)."""
    return [k for k in a if k in b and (a[k][1] != b[k][1] or not all(
        math.isclose(x, y, rel_tol=1e-6, abs_tol=1e-3) for x, y in zip(a[k], b[k], strict=True)))]


def timed(compute: Callable[[], Any], work: int, warmup: int, repeats: int,
          min_seconds: float = 0.0) -> tuple[dict[str, Any], Any]:
    """Time ``compute`` with the harness (:func:`~gpufeed.bench.harness.measure`) and keep its
    last output for the correctness check."""
    box: dict[str, Any] = {}

    def run() -> float:
        box.pop("out", None)  # the previous output would double the peak memory of each repeat
        box["out"] = compute()
        return work

    return measure(run, warmup=warmup, repeats=repeats, min_seconds=min_seconds).as_dict(), box["out"]


def recipe_worker(path: str, table: str | OwnTable, backend: str, warmup: int, repeats: int,
                  min_seconds: float = 0.0) -> dict[str, Any]:
    """Time each op of ``table``'s recipe on ``backend`` (``pandas-baseline``: by hand), op after op.

    Returns:
        ``{"per_op": [{"op", "columns", timing...}], "timing": the whole recipe (sum of the
        ops' medians), "checksum", "rows_out", "peak_rss_gb"}``.
    """
    from gpufeed.gpu_transforms.tabular import Recipe

    frame = load_table(path, backend)
    rows = len(frame)
    per_op = []
    for op in recipe_ops(table):
        name = type(op).__name__
        if backend == BASELINE:
            def run(op: Any = op, name: str = name, frame: Any = frame) -> Any:
                return HAND[name](frame, op)
        else:
            def run(op: Any = op, frame: Any = frame) -> Any:
                return Recipe([copy.deepcopy(op)]).fit_transform(frame)  # a fresh, unfitted op per repeat
        frame = None  # the op's input is held by `run` only: dropped with it once the op is timed
        timing, frame = timed(run, rows, warmup, repeats, min_seconds)
        del run
        per_op.append({"op": name, "columns": len(op.columns), **timing})
    return {"per_op": per_op, "timing": total_timing(per_op, rows), "checksum": column_checksums(frame),
            "rows_out": len(frame), "columns": [str(c) for c in frame.columns], "peak_rss_gb": peak_rss_gb()}


def total_timing(per_op: list[dict[str, Any]], rows: int) -> dict[str, Any]:
    """The whole recipe's timing from its ops': sums of the medians, fastest and slowest repeats."""
    median = sum(s["median_s"] for s in per_op)
    fastest = sum(min(s["seconds"]) for s in per_op)
    slowest = sum(max(s["seconds"]) for s in per_op)
    return {"median_s": median, "work": float(rows), "rate": rows / median,
            "rate_min": rows / slowest, "rate_max": rows / fastest}


def pool_recipe_rounds(rounds: list[dict[str, Any]]) -> dict[str, Any]:
    """One variant's result from its rounds (:func:`recipe_worker` results, a fresh process
    each): each op's median the median of its rounds' medians (each round counts once,
    however many repeats its ``--min-seconds`` took: pooled repeats leaned to the fastest
    round, and a ratio fell outside its own rounds' range), its fastest and slowest repeat
    over all rounds, each round's median kept as ``round_medians`` for the per-round ratios;
    the whole recipe the sum of the ops' medians; the highest peak RSS; the last round's
    outputs, for the output check. A failed round makes the result that failure: a variant
    that crashed once is not reported from its other rounds."""
    failed = next((r for r in rounds if "per_op" not in r), None)
    if failed is not None:
        return dict(failed)
    last = rounds[-1]
    per_op = []
    for i, step in enumerate(last["per_op"]):
        medians = [r["per_op"][i]["median_s"] for r in rounds]
        pooled = Timing([s for r in rounds for s in r["per_op"][i]["seconds"]], step["work"]).as_dict()
        median = statistics.median(medians)
        per_op.append({**step, **pooled, "median_s": median, "rate": step["work"] / median, "round_medians": medians})
    timing = {**total_timing(per_op, int(last["timing"]["work"])),
              "round_medians": [r["timing"]["median_s"] for r in rounds]}
    return {**last, "per_op": per_op, "timing": timing, "peak_rss_gb": max(r["peak_rss_gb"] for r in rounds),
            "rounds": len(rounds)}


# ------------------------------------------------------------------------- the report

def output_check(result: dict[str, Any], base: dict[str, Any]) -> str:
    """One backend's output against the baseline's, in words: ``"same as baseline"``, or
    ``"DIFFERS ..."`` saying what differs (rows, columns, which columns' values)."""
    if result["rows_out"] != base["rows_out"]:
        return f"DIFFERS: {result['rows_out']:,} rows out, {base['rows_out']:,} by hand"
    if result.get("columns") != base.get("columns"):
        return "DIFFERS in which columns came out"
    wrong = differing(result["checksum"], base["checksum"])
    if not wrong:
        return "same as baseline"
    return "DIFFERS in " + ", ".join(f"`{c}`" for c in wrong[:5]) + (f" and {len(wrong) - 5} more" * (len(wrong) > 5))


def _ratio(base: dict[str, Any], kit: dict[str, Any]) -> float | str:
    """The baseline's median over the kit's, and with rounds, the range of the rounds' own
    ratios in brackets (``"2.35 (2.21–2.50)"``): how far this machine's noise moved it."""
    ratio = base["median_s"] / kit["median_s"]
    mine, theirs = kit.get("round_medians") or [], base.get("round_medians") or []
    if len(mine) < 2 or len(mine) != len(theirs):
        return ratio
    rounds = [b / k for b, k in zip(theirs, mine, strict=True)]
    low, high = number_text(min(rounds)), number_text(max(rounds))
    return f"{number_text(ratio)} ({low if low == high else f'{low}–{high}'})"


def section(title: str, results: dict[str, dict[str, Any]]) -> str:
    """Markdown of one table and size: per-op seconds and ratios to the baseline, the whole
    recipe, peak RSS and the output check, one column pair per backend."""
    base = results.get(BASELINE, {})
    if "per_op" not in base:
        why = base.get("error", base.get("skipped", "did not run")).splitlines()[0]
        return f"### {title}\n\nbaseline (hand-written pandas) did not run: {why}"
    kit = {b: r for b, r in results.items() if b != BASELINE and "per_op" in r}
    lines = []
    for i, step in enumerate(base["per_op"]):
        cols = step["columns"]
        row: dict[str, Any] = {"op": f"{step['op']} ({cols} col{'s' * (cols != 1)})", "base": step["median_s"]}
        for b, r in kit.items():
            row[b], row[f"x{b}"] = r["per_op"][i]["median_s"], _ratio(step, r["per_op"][i])
        lines.append(row)
    total = {"op": "**whole recipe**", "base": base["timing"]["median_s"]}
    for b, r in kit.items():
        total[b], total[f"x{b}"] = r["timing"]["median_s"], _ratio(base["timing"], r["timing"])
    lines.append(total)
    lines.append({"op": "peak RSS GB", "base": base["peak_rss_gb"], **{b: r["peak_rss_gb"] for b, r in kit.items()}})
    lines.append({"op": "output check", **{b: r.get("check") or output_check(r, base) for b, r in kit.items()}})
    columns = [("op", "op"), ("base", "hand-written pandas s")]
    for b in kit:
        columns += [(b, f"kit {b} s"), (f"x{b}", f"{b} × hand")]
    notes = [f"- {b}: {(r.get('error') or r.get('skipped') or 'no result').splitlines()[0]}"
             for b, r in results.items() if "per_op" not in r]
    return f"### {title}\n\n" + markdown_table(lines, columns) + ("\n\n" + "\n".join(notes) if notes else "")
