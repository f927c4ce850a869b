"""Tabular preprocessing: row rules, the full recipe, and downcast memory, per backend.

Three parts, each side by side in one run against idiomatic vectorised pandas (the
baseline users have today, written the way a careful pandas user would):

- ``rule``: one business rule (weight by region membership and a voltage/temperature band)
  as ``iterrows``, a Python for-loop over column lists (the fastest loop a user can write),
  ``DataFrame.apply``, vectorised pandas (``np.select``), and the
  kit's compiled rule on pandas, polars and cuDF. Loops run on fewer rows (``--loop-rows``);
  every figure is a rate (rows/s), so ratios stay comparable.
- ``recipe``: fill missing, quantile clip, log, per-region standardise, min-max and
  categorify over the ~95-column sensor table, fit + transform, at each ``--rows``.
- ``downcast``: memory of the sensor table before and after lossless downcast.

Each backend runs in its own process (``run_isolated``) on a Parquet table generated once
in chunks; peak memory is recorded, and sizes that would not fit in RAM are skipped and
reported instead of swapping.
"""

from __future__ import annotations

import argparse
import math
import os
import resource
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from gpufeed.bench.harness import (
    add_out_argument,
    markdown_table,
    measure,
    run_isolated,
    write_results,
)
from gpufeed.bench.progress import stage
from gpufeed.machine import cuda_available, installed

#: Peak RSS per row of one recipe process (the table, the reader's buffers while loading,
#: the output and the temporaries), measured at 10M rows of the 99-column sensor table
#: (19.4, 18.9 and 15.9 GB) plus ~7%. cuDF keeps the table in GPU memory; its host figure
#: is a guess.
_BYTES_PER_ROW = {"pandas-baseline": 2200, "pandas": 2150, "polars": 1800, "cudf": 1500}


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Options of ``gpufeed bench tabular``."""
    parser.add_argument("--parts", default="rule,recipe,downcast", help="comma list of rule, recipe, downcast")
    parser.add_argument("--rows", default="1000000,10000000", help="recipe table sizes (comma list)")
    parser.add_argument("--rule-rows", type=int, default=1_000_000, help="rows for vectorised rule runs")
    parser.add_argument("--loop-rows", type=int, default=50_000, help="rows for the for-loop and apply runs")
    parser.add_argument("--downcast-rows", type=int, default=1_000_000, help="rows for the downcast part")
    parser.add_argument("--backends", default="pandas-baseline,pandas,polars,cudf",
                        help="recipe backends; cudf is skipped without a GPU")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--warmup", type=int, default=1)
    parser.add_argument("--data-dir", default=None, help="where generated tables are cached")
    parser.add_argument("--max-ram-gb", type=float, default=None,
                        help="skip sizes whose estimated peak exceeds this (default: available RAM less 1 GB)")
    add_out_argument(parser)


# ---------------------------------------------------------------- shared definitions

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


def bench_recipe() -> Any:
    """The full recipe the benchmark times (kit version)."""
    from gpufeed.gpu_transforms.tabular import (
        Categorify,
        Clip,
        FillMissing,
        Log,
        MinMax,
        Recipe,
        Standardize,
    )

    cols = sensor_columns()
    return Recipe([
        FillMissing(cols["floats"]), Clip(cols["floats"], quantiles=(0.001, 0.999)), Log(cols["logs"]),
        Standardize(cols["floats"], by="region"), MinMax(cols["scaled"]), Categorify(cols["cats"]),
    ])


def pandas_recipe(df: Any) -> Any:
    """The baseline: the same recipe in idiomatic vectorised pandas (fit on ``df``, apply to it)."""
    import numpy as np
    import pandas as pd

    cols = sensor_columns()
    floats, logs, scaled = cols["floats"], cols["logs"], cols["scaled"]
    # Whole-frame fillna rather than `out[cols] = ...`: measured 1.7x faster on the 40-column
    # blocks here. Clip, standardise and min-max assign column by column: frame-wise forms
    # (`out[floats].clip(...)`, `(x - means.loc[region]) / stds.loc[region]`) build
    # 10M x 40 temporaries that pushed the 10M-row run past this machine's RAM, and the
    # per-column gather was 2.5x faster than the `.loc` row lookup (same values).
    out = df.fillna(df[floats].mean().to_dict())
    bounds = out[floats].quantile([0.001, 0.999])
    out = out.assign(**{c: out[c].clip(bounds[c].iloc[0], bounds[c].iloc[1]) for c in floats})
    out = out.assign(**np.log1p(out[logs].astype("float64")))
    grouped = out.groupby("region", observed=True)
    stats = grouped[floats].agg(["mean", "std"])  # sample std ...
    counts = grouped.size()
    means = stats.xs("mean", axis=1, level=1)
    stds = stats.xs("std", axis=1, level=1).mul(np.sqrt((counts - 1) / counts), axis=0)  # ... to population
    stds = stds.where(stds > 0, 1.0)
    group = means.index.get_indexer(out["region"])  # each row's position in the statistics
    out = out.assign(**{c: (out[c].to_numpy() - means[c].to_numpy()[group]) / stds[c].to_numpy()[group]
                        for c in floats})
    lo, hi = out[scaled].min(), out[scaled].max()
    span = (hi - lo).where(hi > lo, 1.0)
    out = out.assign(**{c: (out[c] - lo[c]) / span[c] for c in scaled})
    for c in cols["cats"]:
        vocab = sorted(out[c].dropna().unique().tolist())
        codes = pd.Categorical(out[c], categories=vocab).codes.astype("int32")
        out[c] = np.where(out[c].isna(), 1, np.where(codes >= 0, codes + 2, 0)).astype("int32")
    return out


def bench_rule() -> Any:
    """The business rule of the ``rule`` part: weight by region and a voltage/temperature band."""
    from gpufeed.gpu_transforms.tabular.rules import Rule, col

    cols = sensor_columns()
    return Rule("weight", [
        (col("region").isin(["north", "east"]) & col(cols["volt"]).between(0.0, 2.5), 0.5),
        (col("region").isin(["south", "coastal"]) & (col(cols["volt"]) > 4.0), 2.0),
        (col(cols["temp"]) < -20.0, 0.0),
    ], default=1.0)


def _rule_row(region: str, volt: float, temp: float) -> float:
    """The rule as a user writes it for a loop or ``apply`` (NaN compares False, like the kit)."""
    if region in ("north", "east") and 0.0 <= volt <= 2.5:
        return 0.5
    if region in ("south", "coastal") and volt > 4.0:
        return 2.0
    if temp < -20.0:
        return 0.0
    return 1.0


def _rule_pandas(df: Any) -> Any:
    import numpy as np

    cols = sensor_columns()
    region, volt, temp = df["region"], df[cols["volt"]], df[cols["temp"]]
    return np.select(
        [region.isin(["north", "east"]) & volt.between(0.0, 2.5),
         region.isin(["south", "coastal"]) & (volt > 4.0), temp < -20.0],
        [0.5, 2.0, 0.0], default=1.0,
    )


# ---------------------------------------------------------------- isolated workers

def _load(path: str, backend: str, rows: int | None = None) -> Any:
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


def _peak_rss_gb() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2**20  # KiB on Linux


def column_checksums(df: Any) -> dict[str, list[float]]:
    """``{column: [sum, missing count]}`` of the numeric columns, compared across processes
    after timing (a fast, wrong pipeline shows up here)."""
    import narwhals as nw

    from gpufeed.gpu_transforms.tabular.frames import first_row, wrap

    frame = wrap(df)
    names = [c for c, t in frame.collect_schema().items() if t.is_numeric()]
    row = first_row(frame.select(*[nw.col(c).cast(nw.Float64).sum().alias(f"s:{c}") for c in names],
                                 *[nw.col(c).is_null().sum().alias(f"n:{c}") for c in names]))
    return {c: [float(row[f"s:{c}"]), float(row[f"n:{c}"])] for c in names}


def _timed(compute: Callable[[], Any], work: int, warmup: int, repeats: int) -> tuple[dict[str, Any], Any]:
    """Time ``compute`` with the harness and keep its last output for the correctness check."""
    box: dict[str, Any] = {}

    def run() -> float:
        box.pop("out", None)  # the previous output would double the peak memory of each repeat
        box["out"] = compute()
        return work

    return measure(run, warmup=warmup, repeats=repeats).as_dict(), box["out"]


def _recipe_worker(path: str, backend: str, warmup: int, repeats: int) -> dict[str, Any]:
    table = _load(path, backend)
    if backend == "pandas-baseline":
        timing, out = _timed(lambda: pandas_recipe(table), len(table), warmup, repeats)
    else:
        timing, out = _timed(lambda: bench_recipe().fit_transform(table), len(table), warmup, repeats)
    return {"timing": timing, "checksum": column_checksums(out), "rows_out": len(out), "peak_rss_gb": _peak_rss_gb()}


def _rule_worker(path: str, variant: str, rows: int, warmup: int, repeats: int) -> dict[str, Any]:
    import numpy as np

    from gpufeed.gpu_transforms.tabular.rules import apply_rules

    cols = sensor_columns()
    table = _load(path, variant if variant in ("polars", "cudf") else "pandas", rows)
    # Every variant returns the table with the new column, the contract of apply_rules.
    variants: dict[str, Callable[[], Any]] = {
        "iterrows": lambda: [_rule_row(row["region"], row[cols["volt"]], row[cols["temp"]])
                             for _, row in table.iterrows()],
        "for-loop": lambda: [_rule_row(r, v, t) for r, v, t in zip(
            table["region"].tolist(), table[cols["volt"]].tolist(), table[cols["temp"]].tolist(), strict=True)],
        "apply": lambda: table.apply(lambda r: _rule_row(r["region"], r[cols["volt"]], r[cols["temp"]]), axis=1),
        "pandas-vectorised": lambda: _rule_pandas(table),
    }
    values_of = variants.get(variant)

    def compute() -> Any:
        if values_of is None:
            return apply_rules(table, [bench_rule()])["weight"]
        return table.assign(weight=values_of())["weight"]

    timing, out = _timed(compute, len(table), warmup, repeats)
    values = out.to_numpy() if hasattr(out, "to_numpy") else out
    values = np.asarray(values.get() if hasattr(values, "get") else values, dtype=np.float64)  # cupy -> host
    return {"timing": timing, "rows": len(table), "checksum": float(values.sum()),
            "counts": {str(k): int(v) for k, v in zip(*np.unique(values, return_counts=True), strict=True)}}


def _downcast_worker(path: str, backend: str) -> dict[str, Any]:
    from gpufeed.gpu_transforms.tabular.downcast import downcast

    table = _load(path, backend)
    start = time.perf_counter()
    small, report = downcast(table)
    seconds = time.perf_counter() - start
    return {"backend": backend, "seconds": seconds, **report.as_dict(),
            "checksum_equal": column_checksums(small) == column_checksums(table) if backend != "cudf" else None}


# ---------------------------------------------------------------- orchestration

def _available_gb() -> float:
    try:
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith("MemAvailable:"):
                return int(line.split()[1]) / 2**20
    except OSError:
        pass
    return 8.0


def _backends(requested: str) -> tuple[list[str], dict[str, str]]:
    keep, skipped = [], {}
    for b in [s.strip() for s in requested.split(",") if s.strip()]:
        if b == "cudf" and not (installed("cudf") and cuda_available()):
            skipped[b] = "no CUDA GPU / cuDF here"
        elif b == "polars" and not installed("polars"):
            skipped[b] = "polars not installed"
        else:
            keep.append(b)
    return keep, skipped


def _sums_match(a: dict[str, list[float]], b: dict[str, list[float]]) -> bool:
    if a.keys() != b.keys():
        return False
    return all(math.isclose(a[k][0], b[k][0], rel_tol=1e-6, abs_tol=1e-3) and a[k][1] == b[k][1] for k in a)


def _rate_rows(results: dict[str, dict], base_key: str) -> list[dict[str, Any]]:
    base = results.get(base_key, {}).get("timing", {}).get("rate")
    rows = []
    for name, r in results.items():
        if "error" in r or "skipped" in r:
            rows.append({"variant": name, "note": r.get("error", r.get("skipped", ""))[:120]})
            continue
        t = r["timing"]
        rows.append({"variant": name, "rows": int(t["work"]), "median_s": t["median_s"], "rate": t["rate"],
                     "rate_min": t["rate_min"], "rate_max": t["rate_max"],
                     "vs_pandas": t["rate"] / base if base else None, "peak_gb": r.get("peak_rss_gb"),
                     "note": r.get("note", "")})
    return rows


def _run_rule(args: argparse.Namespace, data_dir: str | None) -> tuple[dict, str]:
    from gpufeed.datasets.sensor import cached_sensor_file

    path = str(cached_sensor_file(max(args.rule_rows, args.loop_rows), data_dir))
    variants, skipped = _backends("polars,cudf")
    plan = [("iterrows", args.loop_rows), ("for-loop", args.loop_rows), ("apply", args.loop_rows), ("pandas-vectorised", args.rule_rows),
            ("kit-pandas", args.rule_rows), *[(f"kit-{b}", args.rule_rows) for b in variants]]
    results: dict[str, dict] = {f"kit-{b}": {"skipped": why} for b, why in skipped.items()}
    for name, rows in plan:
        variant = name.removeprefix("kit-") if name.startswith("kit-") and name != "kit-pandas" else name
        variant = "kit" if name == "kit-pandas" else variant
        stage(f"[tabular] rule: {name}, {rows:,} rows ...")
        results[name] = run_isolated(_rule_worker, path, variant, rows, args.warmup, args.repeats)
    # Correctness after timing: every variant gives the same weights as the vectorised
    # pandas reference on the same rows (loops on their prefix, checked by value counts).
    ref = results.get("pandas-vectorised", {})
    for r in results.values():
        if "timing" in r and "counts" in ref and r["rows"] == ref["rows"]:
            r["note"] = "same weights" if r["counts"] == ref["counts"] else "WEIGHTS DIFFER"
    loop_ref = run_isolated(_rule_worker, path, "pandas-vectorised", args.loop_rows, 0, 1)
    for name in ("iterrows", "for-loop", "apply"):
        r = results.get(name, {})
        if "timing" in r and "counts" in loop_ref:
            r["note"] = "same weights" if r["counts"] == loop_ref["counts"] else "WEIGHTS DIFFER"
    table = markdown_table(_rate_rows(results, "pandas-vectorised"), [
        ("variant", "variant"), ("rows", "rows"), ("rate", "rows/s (median)"), ("rate_min", "min"),
        ("rate_max", "max"), ("vs_pandas", "× vectorised pandas"), ("note", "check")])
    return results, "## Rule: weight by region and band\n\n" + table


def _run_recipe(args: argparse.Namespace, data_dir: str | None) -> tuple[dict, str]:
    from gpufeed.datasets.sensor import cached_sensor_file

    backends, skipped = _backends(args.backends)
    # The estimates are measured peaks with a margin; 1 GB stays free for this parent process.
    limit = args.max_ram_gb or _available_gb() - 1.0
    results: dict[str, Any] = {}
    sections = []
    for rows in [int(r) for r in args.rows.split(",") if r.strip()]:
        per: dict[str, dict] = {b: {"skipped": why} for b, why in skipped.items()}
        need = {b: rows * _BYTES_PER_ROW.get(b, 3000) / 2**30 for b in backends}
        if any(n <= limit for n in need.values()):
            path = str(cached_sensor_file(rows, data_dir))
        for b in backends:
            if need[b] > limit:
                per[b] = {"skipped": f"needs ~{need[b]:.0f} GB RAM, {limit:.0f} GB allowed (--max-ram-gb)"}
                continue
            stage(f"[tabular] recipe: {b}, {rows:,} rows ...")
            per[b] = run_isolated(_recipe_worker, path, b, args.warmup, args.repeats)
        base = per.get("pandas-baseline", {})
        for r in per.values():
            if "checksum" in r and "checksum" in base:
                same = _sums_match(r["checksum"], base["checksum"]) and r["rows_out"] == base["rows_out"]
                r["note"] = "matches baseline" if same else "DIFFERS FROM BASELINE"
        results[str(rows)] = per
        sections.append(f"### {rows:,} rows × 99 columns (95 features)\n\n" + markdown_table(
            _rate_rows(per, "pandas-baseline"), [
                ("variant", "backend"), ("median_s", "median s"), ("rate", "rows/s"), ("rate_min", "min"),
                ("rate_max", "max"), ("vs_pandas", "× pandas baseline"), ("peak_gb", "peak RSS GB"),
                ("note", "check")]))
    return results, "## Full recipe (fit + transform)\n\n" + "\n\n".join(sections)


def _run_downcast(args: argparse.Namespace, data_dir: str | None) -> tuple[dict, str]:
    from gpufeed.datasets.sensor import cached_sensor_file

    path = str(cached_sensor_file(args.downcast_rows, data_dir))
    backends, _ = _backends("pandas,polars,cudf")
    stage(f"[tabular] downcast: {', '.join(backends)}, {args.downcast_rows:,} rows ...")
    results = {b: run_isolated(_downcast_worker, path, b) for b in backends}
    rows = [{"backend": b, "before": r.get("bytes_before", 0) / 2**20, "after": r.get("bytes_after", 0) / 2**20,
             "saved": 100 * r.get("saved_fraction", 0.0), "seconds": r.get("seconds"),
             "check": "values equal" if r.get("checksum_equal") else r.get("error", "see JSON")[:80]}
            for b, r in results.items()]
    return results, f"## Lossless downcast, {args.downcast_rows:,} rows\n\n" + markdown_table(rows, [
        ("backend", "backend"), ("before", "MiB before"), ("after", "MiB after"), ("saved", "% saved"),
        ("seconds", "downcast s"), ("check", "check")])


def run(args: argparse.Namespace) -> int:
    """Run the chosen parts, print the Markdown summary and write JSON + Markdown results."""
    parts = [p.strip() for p in args.parts.split(",") if p.strip()]
    unknown = set(parts) - {"rule", "recipe", "downcast"}
    if unknown:
        raise SystemExit(f"unknown --parts {sorted(unknown)}; choose from rule, recipe, downcast")
    if args.repeats < 1 or args.warmup < 0:
        raise SystemExit("--repeats must be >= 1 and --warmup >= 0")
    data_dir = args.data_dir
    payload: dict[str, Any] = {"config": vars(args) | {"_run": None}, "cpu_threads": os.cpu_count()}
    summaries = []
    for part in parts:
        result, md = {"rule": _run_rule, "recipe": _run_recipe, "downcast": _run_downcast}[part](args, data_dir)
        payload[part] = result
        summaries.append(md)
        print(md + "\n", flush=True)
    summary = ("Sensor table (station, region, timestamp, 95 int/float features, label); baseline: "
               "idiomatic vectorised pandas; each variant in its own process; median of "
               f"{args.repeats} repeats after {args.warmup} warm-up.\n\n" + "\n\n".join(summaries))
    json_path, md_path = write_results("tabular", payload, summary, args.out)
    print(f"results: {json_path} and {md_path}")
    return 0
