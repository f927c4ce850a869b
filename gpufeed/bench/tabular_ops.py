"""Per-op table benchmark: each recipe op timed alone, on two tables of different character.

A recipe's total can hide a slow op behind fast ones. Here every op of a recipe (fill,
quantile clip, log, per-group standardise, min-max, categorify) is timed on its own, fit +
transform, on the output of the ops before it, for:

- ``hand``: the op written by hand in idiomatic vectorised pandas (what a user has today:
  ``fillna(mean)``, ``quantile`` + ``clip``, ``np.log1p``, a group-by gather,
  ``pd.factorize``), the baseline of every ratio;
- ``pandas`` and ``polars``: the kit's op on that backend (``cudf`` with a GPU).

Two tables: the numeric-heavy sensor table (99 columns, one low-cardinality key) and the
text-heavy transactions table (20 columns, text columns of 3 to 5,000 values, a ~1M
distinct id, gaps). Each variant runs in its own process, which also gives its peak RSS;
the final outputs are compared after timing.
"""

from __future__ import annotations

import argparse
import copy
import resource
from collections.abc import Callable
from typing import Any

from gpufeed.bench.harness import (
    add_out_argument,
    markdown_table,
    run_isolated,
    write_results,
)
from gpufeed.machine import cuda_available, installed

#: What each op runs on: pandas written by hand (the baseline of every ratio), then the kit per backend.
VARIANTS = ("hand", "pandas", "polars", "cudf")


def recipe_ops(table: str) -> list[Any]:
    """The recipe timed on ``table`` ("sensor" or "transactions"), as a list of ops."""
    from gpufeed.gpu_transforms.tabular import (
        Categorify,
        Clip,
        FillMissing,
        Log,
        MinMax,
        Standardize,
    )

    if table == "sensor":
        from gpufeed.bench.tabular import bench_recipe

        return list(bench_recipe().ops)
    if table == "transactions":
        return [
            FillMissing(["amount", "discount", "risk_score"]),
            Clip(["amount"], quantiles=(0.001, 0.999)),
            Log(["session_seconds"]),
            Standardize(["amount", "balance"], by="country"),
            MinMax(["account_days"]),
            Categorify(["channel", "country", "merchant_category", "city"]),
        ]
    raise ValueError(f"table must be 'sensor' or 'transactions', got {table!r}")


def table_file(table: str, rows: int) -> str:
    """The cached Parquet file of ``table`` with ``rows`` rows (generated once)."""
    if table == "sensor":
        from gpufeed.datasets.sensor import cached_sensor_file

        return str(cached_sensor_file(rows))
    from gpufeed.datasets.transactions import cached_transaction_file

    return str(cached_transaction_file(rows))


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

    grouped = df.groupby(op.by, observed=True, dropna=False)[op.columns]
    means, stds = grouped.mean(), grouped.std(ddof=0)
    stds = stds.where(stds > 0, 1.0)
    group = means.index.get_indexer(df[op.by])  # each row's position in the statistics
    return df.assign(**{c: (df[c].to_numpy(dtype="float64", na_value=np.nan) - means[c].to_numpy()[group])
                        / stds[c].to_numpy()[group] for c in op.columns})


def _minmax(df: Any, op: Any) -> Any:
    lo, hi = df[op.columns].min(), df[op.columns].max()
    span = (hi - lo).where(hi > lo, 1.0)
    return df.assign(**{c: (df[c] - lo[c]) / span[c] for c in op.columns})


def _categorify(df: Any, op: Any) -> Any:
    import numpy as np
    import pandas as pd

    def codes(column: str) -> Any:
        found, _ = pd.factorize(df[column], sort=True)  # sorted vocabulary; missing -> -1
        return np.where(found >= 0, found + 2, 1).astype(np.int32)

    return df.assign(**{c: codes(c) for c in op.columns})


HAND: dict[str, Callable[[Any, Any], Any]] = {
    "FillMissing": _fill, "Clip": _clip, "Log": _log, "Standardize": _standardize,
    "MinMax": _minmax, "Categorify": _categorify,
}


# ------------------------------------------------------------------------- the worker

def _worker(table: str, rows: int, variant: str, repeats: int) -> dict[str, Any]:
    import pyarrow.parquet as pq

    from gpufeed.bench.tabular import _timed, column_checksums
    from gpufeed.gpu_transforms.tabular import Recipe, to_backend

    frame = pq.read_table(table_file(table, rows)).to_pandas()
    if variant != "hand":
        frame = to_backend(frame, variant)
    per_op = []
    for op in recipe_ops(table):
        name = type(op).__name__
        if variant == "hand":
            def run(op: Any = op, name: str = name, frame: Any = frame) -> Any:
                return HAND[name](frame, op)
        else:
            def run(op: Any = op, frame: Any = frame) -> Any:
                return Recipe([copy.deepcopy(op)]).fit_transform(frame)
        timing, frame = _timed(run, rows, 1, repeats)
        per_op.append({"op": name, "columns": len(op.columns), **timing})
    return {"per_op": per_op, "checksum": column_checksums(frame),
            "peak_rss_gb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2**20}


def _total(result: dict[str, Any]) -> float:
    return sum(step["median_s"] for step in result["per_op"])


def _same(a: dict[str, list[float]], b: dict[str, list[float]]) -> bool:
    if a.keys() != b.keys():
        return False
    return all(abs(x - y) <= 1e-6 * max(1.0, abs(x)) for c in a for x, y in zip(a[c], b[c], strict=True))


# ------------------------------------------------------------------------ the command

def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Arguments of ``gpufeed bench tabular-ops``."""
    parser.add_argument("--tables", default="sensor,transactions", help="comma list of sensor, transactions")
    parser.add_argument("--rows", default="1000000", help="table sizes (comma list)")
    parser.add_argument("--variants", default="hand,pandas,polars,cudf",
                        help="hand (pandas written by hand, the baseline), pandas, polars, cudf")
    parser.add_argument("--repeats", type=int, default=3)
    add_out_argument(parser)


def run(args: argparse.Namespace) -> int:
    """Run the per-op benchmark and write JSON + Markdown results."""
    tables = [t.strip() for t in args.tables.split(",") if t.strip()]
    for t in tables:
        recipe_ops(t)  # a bad name fails before anything runs
    variants = [v.strip() for v in args.variants.split(",") if v.strip()]
    unknown = sorted(set(variants) - set(VARIANTS))
    if unknown:
        raise ValueError(f"--variants: unknown {unknown}; use some of {', '.join(VARIANTS)}")
    if "cudf" in variants and not (installed("cudf") and cuda_available()):
        variants.remove("cudf")
        print("  cudf skipped: no CUDA GPU / cuDF here")
    if "hand" not in variants:
        variants.insert(0, "hand")
    runs, sections = [], []
    for table in tables:
        for rows in [int(r) for r in args.rows.split(",") if r.strip()]:
            print(f"  {table}, {rows:,} rows: generating/loading the table ...", flush=True)
            table_file(table, rows)
            results = {}
            for variant in variants:
                print(f"  {table}, {rows:,} rows: {variant} ...", flush=True)
                results[variant] = run_isolated(_worker, table, rows, variant, args.repeats)
            runs.append({"table": table, "rows": rows, "results": results})
            sections.append(_section(table, rows, results, variants))
    summary = ("Each op of the recipe timed alone (fit + transform, median of "
               f"{args.repeats} after a warm-up) on the output of the ops before it; ratios are the "
               "hand-written pandas time over the variant's (> 1: faster than pandas by hand).\n\n"
               + "\n\n".join(sections))
    # Whole-recipe ratios to pandas by hand, for `gpufeed bench compare` and `bench all`.
    ratios = {f"{r['table']} {r['rows']:,}: {v}": _total(r["results"]["hand"]) / _total(res)
              for r in runs for v, res in r["results"].items()
              if v != "hand" and "error" not in res and "error" not in r["results"]["hand"]}
    json_path, md_path = write_results("tabular-ops", {"runs": runs, "ratio_to_baseline": ratios}, summary, args.out)
    print(summary)
    print(f"results: {json_path} and {md_path.name}")
    return 0


def _section(table: str, rows: int, results: dict[str, dict[str, Any]], variants: list[str]) -> str:
    hand = results["hand"]
    ok = {v: r for v, r in results.items() if "error" not in r}
    lines = []
    if "error" in hand:
        return f"### {table}, {rows:,} rows\n\nbaseline failed: {hand['error'].splitlines()[0]}"
    for i, step in enumerate(hand["per_op"]):
        row: dict[str, Any] = {"op": f"{step['op']} ({step['columns']} cols)", "hand": step["median_s"]}
        for v in variants[1:]:
            if v in ok:
                s = ok[v]["per_op"][i]["median_s"]
                row[v], row[f"x{v}"] = s, step["median_s"] / s
        lines.append(row)
    total = {"op": "**whole recipe**", "hand": _total(hand)}
    for v in variants[1:]:
        if v in ok:
            total[v], total[f"x{v}"] = _total(ok[v]), total["hand"] / _total(ok[v])
    lines.append(total)
    lines.append({"op": "peak RSS GB", **{v: ok[v]["peak_rss_gb"] for v in ok}})
    lines.append({"op": "output check", **{v: "same as hand" if _same(ok[v]["checksum"], hand["checksum"])
                                           else "DIFFERS" for v in ok if v != "hand"}})
    columns = [("op", "op"), ("hand", "hand-written pandas s")]
    for v in variants[1:]:
        columns += [(v, f"kit {v} s"), (f"x{v}", f"{v} × hand")]
    errors = [f"- {v} failed: {r['error'].splitlines()[0]}" for v, r in results.items() if "error" in r]
    return f"### {table}, {rows:,} rows\n\n" + markdown_table(lines, columns) + ("\n" + "\n".join(errors) if errors else "")
