"""Tabular preprocessing: row rules, the recipe op by op, and downcast memory, per backend.

Three parts, each side by side in one run against idiomatic vectorised pandas (the
baseline users have today, written the way a careful pandas user would), on each of
``--tables`` (the numeric sensor table and the text-heavy transactions table):

- ``rule``: one business rule per table (membership of a text column and a numeric band,
  another membership and a threshold, a last threshold) as ``iterrows``, a Python for-loop
  over column lists (the fastest loop a user can write), ``DataFrame.apply``, vectorised
  pandas (``np.select``), and the kit's compiled rule on pandas, polars and cuDF. Loops run
  on fewer rows (``--loop-rows``); every figure is a rate (rows/s), so ratios stay comparable.
- ``recipe``: fill missing, quantile clip, log, per-group standardise, min-max and
  categorify, fit + transform, at each ``--rows``: each op timed alone on the output of the
  ops before it, the whole recipe, and peak RSS, for the kit on each backend and for the
  same ops written by hand in pandas (:mod:`gpufeed.bench.tabular_ops`).
- ``downcast``: memory of the sensor table before and after lossless downcast.

Each backend runs in its own process (``run_isolated``) on a Parquet table generated once
in chunks; peak memory is recorded, and sizes that would not fit in RAM are skipped and
reported instead of swapping.
"""

from __future__ import annotations

import argparse
import dataclasses
import os
import sys
import time
from collections.abc import Callable, Sequence
from typing import Any

from gpufeed.arguments import at_least, number_at_least, output_folder, table_format_problem
from gpufeed.bench.harness import (
    add_out_argument,
    add_rounds_argument,
    markdown_table,
    results_line,
    run_isolated,
    write_results,
)
from gpufeed.bench.own_table import OwnTable, own_table
from gpufeed.bench.results import failed_checks
from gpufeed.bench.tabular_ops import (
    BASELINE,
    TABLES,
    column_checksums,
    load_table,
    output_check,
    pool_recipe_rounds,
    recipe_worker,
    section,
    sensor_columns,
    table_file,
    timed,
)
from gpufeed.machine import cuda_available, installed, usable_cpus
from gpufeed.progress import counted, stage

#: Peak RSS per row of one recipe process (the table, the reader's buffers while loading,
#: the output and the temporaries), measured at 10M rows plus ~7%: the 99-column sensor
#: table (19.4, 18.9 and 15.9 GB for the pandas baseline, the kit on pandas and on polars)
#: and the 20-column transactions table (4.35, 4.22 and 3.07 GB). cuDF keeps the table in
#: GPU memory; its host figure is a guess.
_BYTES_PER_ROW = {
    "sensor": {BASELINE: 2200, "pandas": 2150, "polars": 1800, "cudf": 1500},
    "transactions": {BASELINE: 500, "pandas": 490, "polars": 350, "cudf": 450},
}


#: The parts of the suite, in the order they run by default.
PARTS = ("rule", "recipe", "downcast")


def _names_from(choices: Sequence[str]) -> Callable[[str], str]:
    """An argparse ``type`` for a comma list of names from ``choices``: an unknown name is a
    usage error naming the option (exit 2) before anything runs. The text is kept as given."""
    def parse(text: str) -> str:
        names = [n.strip() for n in text.split(",") if n.strip()]
        unknown = [n for n in names if n not in choices]
        if unknown or not names:
            raise argparse.ArgumentTypeError(
                f"{'unknown ' + ', '.join(map(repr, unknown)) if unknown else 'none given'}; "
                f"choose from {', '.join(choices)}")
        return text

    parse.__name__ = "comma list"
    return parse


def table_entries(text: str) -> list[str]:
    """The entries of ``--tables``: a comma list of built-in names and table paths (a file,
    or a folder such as a Parquet dataset), each once; a path holding commas is taken
    whole when the whole text names it."""
    if os.path.exists(text.strip()):
        return [text.strip()]
    return list(dict.fromkeys(n.strip() for n in text.split(",") if n.strip()))


def _table_list(text: str) -> str:
    """An argparse ``type`` for ``--tables``: built-in table names and existing table paths
    (kept as text; :func:`_tables` reads the files)."""
    names = table_entries(text)
    unknown = [n for n in names if n not in TABLES and not os.path.exists(n)]
    if unknown or not names:
        raise argparse.ArgumentTypeError(
            f"{'unknown ' + ', '.join(map(repr, unknown)) if unknown else 'none given'}: "
            f"neither {' nor '.join(TABLES)} nor a table file or folder")
    for name in names:
        problem = None if name in TABLES else table_format_problem(name)
        if problem:
            raise argparse.ArgumentTypeError(problem)
    return text


def _row_counts(text: str) -> str:
    """An argparse ``type`` for ``--rows``: a comma list of whole numbers >= 1 (kept as text)."""
    counts = [n.strip() for n in text.split(",") if n.strip()]
    if not counts:
        raise argparse.ArgumentTypeError("no row counts given")
    for n in counts:
        try:
            at_least(1)(n)
        except argparse.ArgumentTypeError as exc:
            raise argparse.ArgumentTypeError(f"{exc} (a comma list of row counts)") from None
    return text


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Options of ``gpufeed bench tabular``."""
    parser.add_argument("--parts", type=_names_from(PARTS), default=",".join(PARTS),
                        help="comma list of rule, recipe, downcast (default: %(default)s)")
    parser.add_argument("--tables", type=_table_list, default="sensor,transactions",
                        help="tables of the rule and recipe parts, comma list of sensor, transactions and "
                             "table files of your own (CSV, Parquet, Feather, pickle, HDF5, JSON: the recipe "
                             "part plans a recipe from their column types and repeats their rows up to "
                             "each recipe size) (default: %(default)s)")
    parser.add_argument("--rows", type=_row_counts, default="1000000,10000000",
                        help="recipe table sizes, comma list (default: %(default)s)")
    parser.add_argument("--rule-rows", type=at_least(1), default=1_000_000, help="rows for vectorised rule runs")
    parser.add_argument("--loop-rows", type=at_least(1), default=50_000, help="rows for the for-loop and apply runs")
    parser.add_argument("--downcast-rows", type=at_least(1), default=1_000_000, help="rows for the downcast part")
    parser.add_argument("--backends", type=_names_from((BASELINE, "pandas", "polars", "cudf")),
                        default=f"{BASELINE},pandas,polars,cudf",
                        help=f"recipe variants ({BASELINE}: the ops written by hand, always run as the "
                             "baseline); cudf is skipped without a GPU")
    parser.add_argument("--repeats", type=at_least(1), default=3, help="timed runs per variant (default: 3)")
    parser.add_argument("--warmup", type=at_least(0), default=1, help="untimed runs first (default: 1)")
    parser.add_argument("--min-seconds", type=number_at_least(0), default=0.5,
                        help="time each variant and op on past --repeats until its repeats add up to this "
                             "many seconds (a median of 3 millisecond runs moves by 20%% on a shared machine)")
    add_rounds_argument(parser)  # the recipe part's; the rule and downcast parts run once
    parser.add_argument("--data-dir", default=None, type=output_folder,
                        help="where generated tables, and your tables at each size as Parquet, are cached "
                             "(default: $GPUFEED_CACHE/tables; delete them when done)")
    parser.add_argument("--max-ram-gb", type=number_at_least(0, above=True), default=None,
                        help="skip sizes whose estimated peak exceeds this (default: available RAM less 1 GB)")
    add_out_argument(parser)


# ---------------------------------------------------------------- the rules, per table

# Transactions' rule: membership of two text columns (3 and 60 values), a money band and a
# threshold, the same shape as the sensor rule's.
_CHANNELS, _COUNTRIES = ["cha_00000", "cha_00002"], ["cou_00001", "cou_00003", "cou_00007", "cou_00020"]


def rule_columns(table: str) -> list[str]:
    """The columns ``table``'s rule reads, in the order :func:`rule_row` takes them."""
    if table == "transactions":
        return ["channel", "country", "amount", "risk_score"]
    if table == "sensor":
        cols = sensor_columns()
        return ["region", cols["volt"], cols["temp"]]
    raise ValueError(f"table must be one of {', '.join(TABLES)}, got {table!r}")


def bench_rule(table: str = "sensor") -> Any:
    """The business rule of the ``rule`` part on ``table``: a weight from the membership of a
    text column and a numeric band, another membership and a threshold, and a last threshold."""
    from gpufeed.gpu_transforms.tabular.rules import Rule, col

    if table == "transactions":
        return Rule("weight", [
            (col("channel").isin(_CHANNELS) & col("amount").between(10.0, 100.0), 0.5),
            (col("country").isin(_COUNTRIES) & (col("amount") > 500.0), 2.0),
            (col("risk_score") > 0.8, 0.0),
        ], default=1.0)
    region, volt, temp = rule_columns(table)
    return Rule("weight", [
        (col(region).isin(["north", "east"]) & col(volt).between(0.0, 2.5), 0.5),
        (col(region).isin(["south", "coastal"]) & (col(volt) > 4.0), 2.0),
        (col(temp) < -20.0, 0.0),
    ], default=1.0)


def rule_row(table: str, *values: Any) -> float:
    """The rule as a user writes it for a loop or ``apply``, on one row's :func:`rule_columns`
    values (NaN compares False, like the kit)."""
    if table == "transactions":
        channel, country, amount, risk = values
        if channel in _CHANNELS and 10.0 <= amount <= 100.0:
            return 0.5
        if country in _COUNTRIES and amount > 500.0:
            return 2.0
        return 0.0 if risk > 0.8 else 1.0
    region, volt, temp = values
    if region in ("north", "east") and 0.0 <= volt <= 2.5:
        return 0.5
    if region in ("south", "coastal") and volt > 4.0:
        return 2.0
    return 0.0 if temp < -20.0 else 1.0


def rule_pandas(df: Any, table: str = "sensor") -> Any:
    """The rule in vectorised pandas (``np.select``), the baseline of the ``rule`` part."""
    import numpy as np

    if table == "transactions":
        amount = df["amount"]
        return np.select(
            [df["channel"].isin(_CHANNELS) & amount.between(10.0, 100.0),
             df["country"].isin(_COUNTRIES) & (amount > 500.0), df["risk_score"] > 0.8],
            [0.5, 2.0, 0.0], default=1.0,
        )
    region, volt, temp = (df[c] for c in rule_columns(table))
    return np.select(
        [region.isin(["north", "east"]) & volt.between(0.0, 2.5),
         region.isin(["south", "coastal"]) & (volt > 4.0), temp < -20.0],
        [0.5, 2.0, 0.0], default=1.0,
    )


def _rule_worker(path: str, table: str, variant: str, rows: int, warmup: int, repeats: int,
                 min_seconds: float = 0.0) -> dict[str, Any]:
    import numpy as np

    from gpufeed.gpu_transforms.tabular.rules import apply_rules

    cols = rule_columns(table)
    frame = load_table(path, variant if variant in ("polars", "cudf") else "pandas", rows)
    # Every variant returns the table with the new column, the contract of apply_rules.
    variants: dict[str, Callable[[], Any]] = {
        "iterrows": lambda: [rule_row(table, *(row[c] for c in cols)) for _, row in frame.iterrows()],
        "for-loop": lambda: [rule_row(table, *v) for v in zip(*(frame[c].tolist() for c in cols), strict=True)],
        "apply": lambda: frame.apply(lambda r: rule_row(table, *(r[c] for c in cols)), axis=1),
        "pandas-vectorised": lambda: rule_pandas(frame, table),
    }
    values_of = variants.get(variant)
    rule = bench_rule(table)

    def compute() -> Any:
        if values_of is None:
            return apply_rules(frame, [rule])["weight"]
        return frame.assign(weight=values_of())["weight"]

    timing, out = timed(compute, len(frame), warmup, repeats, min_seconds)
    values = out.to_numpy() if hasattr(out, "to_numpy") else out
    values = np.asarray(values.get() if hasattr(values, "get") else values, dtype=np.float64)  # cupy -> host
    return {"timing": timing, "rows": len(frame), "checksum": float(values.sum()),
            "counts": {str(k): int(v) for k, v in zip(*np.unique(values, return_counts=True), strict=True)}}

def _downcast_check(result: dict[str, Any]) -> str:
    """The downcast report's check column: the error's last line, or whether the values
    stayed (a result without the check says so, not "values differ")."""
    if "error" in result:
        return result["error"].strip().splitlines()[-1][:120]
    return {True: "values equal", False: "VALUES DIFFER"}.get(result.get("checksum_equal"), "not checked")


def _downcast_worker(path: str, backend: str) -> dict[str, Any]:
    from gpufeed.gpu_transforms.tabular.downcast import downcast

    table = load_table(path, backend)
    start = time.perf_counter()
    small, report = downcast(table)
    seconds = time.perf_counter() - start
    return {"backend": backend, "seconds": seconds, **report.as_dict(),
            "checksum_equal": column_checksums(small) == column_checksums(table)}


# ---------------------------------------------------------------- orchestration

def _available_gb() -> float:
    """GB this process can still take (8 where the system does not say)."""
    from gpufeed.machine import available_memory

    have = available_memory()
    return 8.0 if have == sys.maxsize else have / 2**30


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
                     "vs_pandas": t["rate"] / base if base else None, "note": r.get("note", "")})
    return rows


def _tables(args: argparse.Namespace) -> list[str | OwnTable]:
    """The built-in table names and the user's tables (read and planned) of ``--tables``."""
    tables: list[str | OwnTable] = []
    for name in table_entries(args.tables):
        if name in TABLES:
            tables.append(name)
        elif os.path.exists(name):
            table = own_table(name)
            taken = {_table_name(t) for t in tables}
            if table.name in taken:  # two files of one name: the paths tell them apart
                table = dataclasses.replace(table, name=name if name not in taken else os.path.abspath(name))
            tables.append(table)
        else:  # refused when parsed (_table_list); this is for a Namespace built by hand
            raise ValueError(f"--tables: unknown {name!r}: neither {' nor '.join(TABLES)} nor a table file or folder")
    return tables


def _table_name(table: str | OwnTable) -> str:
    return table.name if isinstance(table, OwnTable) else table


def _repeats(args: argparse.Namespace) -> str:
    """How each figure was timed, for the report."""
    each = (f"median of at least {counted(args.repeats, 'repeat')} and at least {args.min_seconds:g} s of them, "
            f"after {args.warmup} warm-up")
    rounds = getattr(args, "rounds", 1)
    if rounds == 1:
        return each
    return (f"{rounds} rounds, each variant in a fresh process per round, taking turns; per round the {each}; "
            "each figure the median of its rounds' medians; in brackets: the ratio's range over the rounds")


def _run_rule_on(table: str, args: argparse.Namespace, data_dir: str | None) -> tuple[dict, str]:
    path = table_file(table, max(args.rule_rows, args.loop_rows), data_dir)
    variants, skipped = _backends("polars,cudf")
    plan = [("iterrows", args.loop_rows), ("for-loop", args.loop_rows), ("apply", args.loop_rows),
            ("pandas-vectorised", args.rule_rows), ("kit-pandas", args.rule_rows),
            *[(f"kit-{b}", args.rule_rows) for b in variants]]
    results: dict[str, dict] = {f"kit-{b}": {"skipped": why} for b, why in skipped.items()}
    for name, rows in plan:
        variant = {"kit-pandas": "kit"}.get(name, name.removeprefix("kit-"))
        stage(f"[tabular] rule on {table}: {name}, {rows:,} rows ...")
        results[name] = run_isolated(_rule_worker, path, table, variant, rows, args.warmup, args.repeats,
                                     args.min_seconds)
    # Correctness after timing: every variant gives the same weights as the vectorised
    # pandas reference on the same rows (loops on their prefix, checked by value counts).
    ref = results.get("pandas-vectorised", {})
    for r in results.values():
        if "timing" in r and "counts" in ref and r["rows"] == ref["rows"]:
            r["note"] = "same weights" if r["counts"] == ref["counts"] else "WEIGHTS DIFFER"
    loop_ref = run_isolated(_rule_worker, path, table, "pandas-vectorised", args.loop_rows, 0, 1)
    for name in ("iterrows", "for-loop", "apply"):
        r = results.get(name, {})
        if "timing" in r and "counts" in loop_ref:
            r["note"] = "same weights" if r["counts"] == loop_ref["counts"] else "WEIGHTS DIFFER"
    md = markdown_table(_rate_rows(results, "pandas-vectorised"), [
        ("variant", "variant"), ("rows", "rows"), ("rate", "rows/s (median)"), ("rate_min", "min"),
        ("rate_max", "max"), ("vs_pandas", "× vectorised pandas"), ("note", "check")])
    return results, f"### {table}\n\n" + md


def _run_rule(args: argparse.Namespace, data_dir: str | None,
              tables: list[str | OwnTable]) -> tuple[dict, str]:
    results, sections = {}, []
    for table in tables:
        if isinstance(table, OwnTable):  # a rule is written for its table's columns
            sections.append(f"### {table.name}\n\nno rule: the rule part runs on the built-in tables only")
            continue
        results[table], md = _run_rule_on(table, args, data_dir)
        sections.append(md)
    return results, "## Rule: a weight from text membership, a numeric band and thresholds\n\n" + "\n\n".join(sections)


def _bytes_per_row(table: str | OwnTable, backend: str) -> float:
    if isinstance(table, OwnTable):
        return table.bytes_per_row(backend)
    return _BYTES_PER_ROW[table].get(backend, 3000)


def _run_recipe(args: argparse.Namespace, data_dir: str | None,
                tables: list[str | OwnTable]) -> tuple[dict, str]:
    backends, skipped = _backends(args.backends)
    if BASELINE not in backends:
        backends.insert(0, BASELINE)  # every ratio is to it
    # The estimates are measured peaks with a margin; 1 GB stays free for this parent process.
    limit = args.max_ram_gb or _available_gb() - 1.0
    results: dict[str, Any] = {}
    sections = []
    for table in tables:
        name = _table_name(table)
        results[name] = {}
        if isinstance(table, OwnTable):
            sections.append(f"### {name}: the recipe planned from its column types\n\n{table.describe()}")
        for rows in [int(r) for r in args.rows.split(",") if r.strip()]:
            per: dict[str, dict] = {b: {"skipped": why} for b, why in skipped.items()}
            need = {b: rows * _bytes_per_row(table, b) / 2**30 for b in backends}
            path = table_file(table, rows, data_dir) if any(n <= limit for n in need.values()) else ""
            rounds: dict[str, list[dict[str, Any]]] = {}
            for b in backends:
                if need[b] > limit:
                    per[b] = {"skipped": f"needs ~{need[b]:.1f} GB RAM, {limit:.1f} GB allowed (--max-ram-gb)"}
                else:
                    rounds[b] = []
            # The variants take turns, round after round, each in a fresh process: a slow
            # spell of this shared machine then hits them alike (one round each in turn had
            # moved the 1M-row transactions ops' ratios by up to 25 % from run to run).
            for turn in range(1, args.rounds + 1):
                for b, done in rounds.items():
                    of = f", round {turn} of {args.rounds}" if args.rounds > 1 else ""
                    stage(f"[tabular] recipe on {name}: {b}, {rows:,} rows{of} ...")
                    done.append(run_isolated(recipe_worker, path, table, b, args.warmup, args.repeats,
                                             args.min_seconds))
            per.update({b: pool_recipe_rounds(done) for b, done in rounds.items()})
            # The output check in the results too (not only the Markdown): compare and the
            # exit status read it there.
            base = per.get(BASELINE, {})
            for b, r in per.items():
                if b != BASELINE and "per_op" in r and "per_op" in base:
                    r["check"] = output_check(r, base)
            results[name][str(rows)] = per
            title = f"{name}, {rows:,} rows" + (f" ({table.sized(rows)})" if isinstance(table, OwnTable) else "")
            sections.append(section(title, per))
    return results, ("## Recipe op by op (fit + transform each)\n\nEach op timed alone ("
                     f"{_repeats(args)}) on the output of the ops before it; the whole "
                     "recipe is the sum of its ops; ratios are the hand-written pandas time over the kit's "
                     "(> 1: faster than pandas by hand).\n\n" + "\n\n".join(sections))


def _run_downcast(args: argparse.Namespace, data_dir: str | None,
                  tables: list[str | OwnTable]) -> tuple[dict, str]:
    # Each of the user's tables, else the sensor table (the transactions table's text
    # columns have nothing to downcast).
    own = [t for t in tables if isinstance(t, OwnTable)] or ["sensor"]
    backends, _ = _backends("pandas,polars,cudf")
    results, sections = {}, []
    for table in own:
        name = _table_name(table)
        path = table_file(table, args.downcast_rows, data_dir)
        stage(f"[tabular] downcast {name}: {', '.join(backends)}, {args.downcast_rows:,} rows ...")
        results[name] = per = {b: run_isolated(_downcast_worker, path, b) for b in backends}
        rows = [{"backend": b, "before": r.get("bytes_before", 0) / 2**20, "after": r.get("bytes_after", 0) / 2**20,
                 "saved": 100 * r.get("saved_fraction", 0.0), "seconds": r.get("seconds"),
                 "check": _downcast_check(r)}
                for b, r in per.items()]
        sections.append(f"### {name}\n\n" + markdown_table(rows, [
            ("backend", "backend"), ("before", "MiB before"), ("after", "MiB after"), ("saved", "% saved"),
            ("seconds", "downcast s"), ("check", "check")]))
    return results, f"## Lossless downcast, {args.downcast_rows:,} rows\n\n" + "\n\n".join(sections)


def run(args: argparse.Namespace) -> int:
    """Run the chosen parts, print the Markdown summary and write JSON + Markdown results."""
    parts = [p.strip() for p in args.parts.split(",") if p.strip()]
    unknown = set(parts) - set(PARTS)
    if unknown:  # refused when parsed (_names_from); this is for a Namespace built by hand
        raise ValueError(f"--parts: unknown {sorted(unknown)}; choose from {', '.join(PARTS)}")
    data_dir = args.data_dir
    tables = _tables(args)  # a bad name or an unreadable file fails before anything runs
    payload: dict[str, Any] = {"config": vars(args) | {"_run": None}, "cpu_threads": usable_cpus()}
    own = [t for t in tables if isinstance(t, OwnTable)]
    if own:
        payload["own_tables"] = {t.name: {"path": os.path.abspath(t.path), "rows": t.rows,
                                          "ops": [[kind, list(cols), dict(kw)] for kind, cols, kw in t.ops],
                                          "untouched": dict(t.untouched)} for t in own}
    summaries = []
    for part in parts:
        result, md = {"rule": _run_rule, "recipe": _run_recipe, "downcast": _run_downcast}[part](args, data_dir, tables)
        payload[part] = result
        summaries.append(md)
        print(md + "\n", flush=True)
    described = {"sensor": "sensor (station, region, timestamp, 95 int/float features, label)",
                 "transactions": "transactions (20 columns: text from 3 to 5,000 values, a ~1M-distinct id, "
                                 "gaps, a timestamp)"}
    names = [described.get(t, t) if isinstance(t, str) else f"{t.name} (yours: {t.rows:,} rows in the file)"
             for t in tables]
    summary = (f"Tables: {'; '.join(names)}; "
               "baseline: idiomatic vectorised pandas; each variant in its own process; "
               f"{_repeats(args)}.\n\n" + "\n\n".join(summaries))
    json_path, md_path = write_results("tabular", payload, summary, args.out)
    print(results_line(json_path))  # the JSON, the Markdown and the figures
    # A kit output other than the baseline's makes its speed meaningless: no success, as
    # in the images and formats suites.
    failed = failed_checks({"suite": "tabular", **payload})
    if failed:
        print(f"gpufeed: {len(failed)} output check(s) failed: " + "; ".join(failed), file=sys.stderr)
        return 1
    return 0
