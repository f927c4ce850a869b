"""Storage formats: write time, read time, size on disk and memory in RAM, as ratios to CSV.

For one table (a file you pass, or the generated sensor table) every format is written
and read back in its own process with the kit's readers and writers
(:mod:`gpufeed.datasets.tables`), on the chosen backend (pandas by default, the
library most users start from). Each figure is the median of several repeats after a
warm-up; after timing, the table read back is checked against the original value by value
(:func:`differing_columns`: every column, missing values in the same places) and, separately,
dtype by dtype. The summary ends with a recommendation drawn from the numbers.
"""

from __future__ import annotations

import argparse
import shutil
import sys
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from gpufeed.arguments import at_least, output_folder, table_format_problem
from gpufeed.bench.harness import (
    add_out_argument,
    markdown_table,
    measure,
    results_line,
    run_isolated,
    write_results,
)
from gpufeed.progress import counted, stage

_EXT = {"csv": ".csv", "parquet": ".parquet", "feather": ".feather", "pickle": ".pkl", "hdf5": ".h5",
        "json": ".jsonl", "csv-pandas": ".csv"}
#: ``csv-pandas``: the same CSV file read by ``pandas.read_csv`` (C parser) instead of the
#: kit's Arrow reader, so ratios can be set against what plain pandas users see.
_STORAGE = {"csv-pandas": "csv"}
_PORTABLE = ("csv", "parquet", "feather", "json", "csv-pandas")
#: Formats whose library is an optional extra: format -> (module it imports, the extra
#: that installs it, the library's name). pandas reads and writes HDF5 through PyTables.
_OPTIONAL = {"hdf5": ("tables", "hdf5", "PyTables")}


def unavailable_formats(installed: Callable[[str], bool] | None = None) -> dict[str, str]:
    """The formats this install cannot measure, and why: their optional library is missing.

    Args:
        installed: tells whether a module can be imported (default:
            :func:`gpufeed.machine.installed`, which checks without importing).

    Example:
        >>> unavailable_formats(lambda module: False)
        {'hdf5': "PyTables is not installed: pip install -e '.[hdf5]' in gpufeed's clone"}
    """
    from gpufeed.machine import install_hint

    if installed is None:
        from gpufeed.machine import installed

    return {fmt: f"{name} is not installed: {install_hint(extra)}"
            for fmt, (module, extra, name) in _OPTIONAL.items() if not installed(module)}


def _table_file(text: str) -> str:
    """An argparse ``type`` for the table to measure: an existing file of a known format, so
    a missing file or an unknown suffix is a usage error (exit 2) before anything runs."""
    source = Path(text)
    if not source.is_file():
        raise argparse.ArgumentTypeError(f"{text}: {'not a file' if source.exists() else 'no such file'}")
    problem = table_format_problem(text)
    if problem:
        raise argparse.ArgumentTypeError(problem)
    return text


def _format_names(text: str) -> str:
    """An argparse ``type`` for ``--formats``: a comma list of known formats (kept as text)."""
    names = [f.strip() for f in text.split(",") if f.strip()]
    unknown = [f for f in names if f not in _EXT]
    if unknown or not names:
        raise argparse.ArgumentTypeError(f"unknown format(s) {unknown or 'none given'}; choose from {', '.join(_EXT)}")
    return text


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Options of ``gpufeed bench formats``."""
    parser.add_argument("file", nargs="?", default=None, type=_table_file, metavar="FILE",
                        help="table to measure (any supported format); default: the generated sensor table")
    parser.add_argument("--rows", type=at_least(1), default=250_000,
                        help="rows of the generated sensor table (default 250000, about 180 MB of CSV)")
    parser.add_argument("--formats", default=None, type=_format_names,
                        help="comma list of csv, parquet, feather, pickle, hdf5, json, csv-pandas "
                             "(default: all; csv-pandas only with --backend pandas)")
    parser.add_argument("--backend", default="pandas", choices=("pandas", "polars", "cudf", "auto"),
                        help="pandas | polars | cudf | auto (default: pandas)")
    parser.add_argument("--repeats", type=at_least(1), default=3, help="timed reads and writes per format (default: 3)")
    parser.add_argument("--warmup", type=at_least(0), default=1, help="untimed runs first (default: 1)")
    parser.add_argument("--data-dir", default=None, type=output_folder, help="where the generated table is cached")
    parser.add_argument("--work-dir", default=None, type=output_folder,
                        help="where the files are written (default: a temp folder)")
    add_out_argument(parser)


def _as_pandas(df: Any) -> pd.DataFrame:
    return df if isinstance(df, pd.DataFrame) else df.to_pandas()


def _same_values(a: pd.Series, b: pd.Series) -> bool:
    """Exactly the same values, with missing ones (null or NaN) in the same places."""
    missing_a, missing_b = a.isna().to_numpy(), b.isna().to_numpy()
    if len(a) != len(b) or not np.array_equal(missing_a, missing_b):
        return False
    a, b = a[~missing_a], b[~missing_b]
    kinds = pd.api.types
    if kinds.is_numeric_dtype(a.dtype) and kinds.is_numeric_dtype(b.dtype):
        # numpy compares int64 with float64 by value; a dtype change is reported on its own.
        return bool(np.array_equal(a.to_numpy(), b.to_numpy()))
    if kinds.is_datetime64_any_dtype(a.dtype) and kinds.is_datetime64_any_dtype(b.dtype):
        aware_a, aware_b = getattr(a.dtype, "tz", None) is not None, getattr(b.dtype, "tz", None) is not None
        if aware_a != aware_b:
            return False
        if aware_a:  # the same instants, whatever zone each is shown in
            a, b = a.dt.tz_convert("UTC").dt.tz_localize(None), b.dt.tz_convert("UTC").dt.tz_localize(None)
        return bool(np.array_equal(a.to_numpy(), b.to_numpy()))  # numpy converts between units
    # Text, categories, booleans, and any pair of different kinds (a number never equals
    # its text, a datetime never equals a string): compare the Python values.
    return bool(np.array_equal(a.astype(object).to_numpy(), b.astype(object).to_numpy()))


def differing_columns(expected: Any, actual: Any) -> list[str]:
    """Columns of ``actual`` whose values differ from ``expected`` (pandas, polars or cuDF frames).

    Exact: every value equal, missing values (null or NaN, alike) in the same rows. A dtype
    change alone (int64 read back as float64, categorical as text, datetime units) is not
    a difference in value; a column missing from either frame is.

    Returns:
        The differing column names, in ``expected``'s order, then those only ``actual`` has.

    Example:
        >>> differing_columns(pd.DataFrame({"a": [1.0, None]}), pd.DataFrame({"a": [1.0, float("nan")]}))
        []
    """
    want, got = _as_pandas(expected), _as_pandas(actual)
    differ = [c for c in want.columns
              if c not in got.columns or not _same_values(want[c].reset_index(drop=True), got[c].reset_index(drop=True))]
    return differ + [c for c in got.columns if c not in want.columns]


def _format_worker(source: str, fmt: str, backend: str, work_dir: str, warmup: int, repeats: int) -> dict[str, Any]:
    import narwhals as nw

    from gpufeed.datasets.tables import read_table, write_table
    from gpufeed.gpu_transforms.tabular.frames import wrap

    table = read_table(source, backend=backend)
    rows, cols = wrap(table).shape
    path = Path(work_dir) / f"table{_EXT[fmt]}"
    storage = _STORAGE.get(fmt, fmt)
    write = measure(lambda: (write_table(table, path, format=storage), rows)[1], warmup=warmup, repeats=repeats)
    size = path.stat().st_size

    def read() -> float:
        if fmt == "csv-pandas":
            import pandas as pd

            read.out = pd.read_csv(path, parse_dates=["timestamp"] if "timestamp" in table.columns else None)
        else:
            read.out = read_table(path, format=storage, backend=backend)
        return rows

    timing = measure(read, warmup=warmup, repeats=repeats)
    back = wrap(read.out)
    # Correctness after timing: the same shape and exactly the same values (a sum would
    # miss a last-bit change or "" read for a missing value).
    differ = differing_columns(table, read.out)
    same = back.shape == (rows, cols) and not differ
    path.unlink()
    return {"format": fmt, "write_s": write.median, "write_spread": [min(write.seconds), max(write.seconds)],
            "read_s": timing.median, "read_spread": [min(timing.seconds), max(timing.seconds)],
            "bytes_on_disk": size, "bytes_in_ram": int(back.estimated_size("b")), "rows": rows,
            "columns": cols, "round_trip_equal": same, "differing_columns": differ,
            "dtypes_kept": [str(t) for t in back.schema.values()] == [str(t) for t in wrap(table).schema.values()],
            "backend": nw.get_native_namespace(back).__name__}


def _named(result: dict[str, Any]) -> str:
    """`` (a, b, ...)``: the first differing columns, for the table's check cell."""
    differ = result.get("differing_columns") or []
    if not differ:
        return ""
    return f" ({', '.join(differ[:3])}{', ...' if len(differ) > 3 else ''})"


def _than_csv(ratio: float) -> str:
    """A speed ratio to CSV in words: "2.0× faster than CSV", "2.0× slower than CSV"."""
    if ratio >= 1:
        return f"{ratio:.1f}× faster than CSV"
    return f"{1 / ratio:.1f}× slower than CSV" if ratio > 0 else "slower than CSV"


def recommend(rows: list[dict[str, Any]]) -> str:
    """A recommendation from measured ratios: best read, write and size, and an all-round pick.

    The all-round score is the geometric mean of the read and write speed-ups and the
    disk saving versus CSV, among portable formats (CSV, Parquet, Feather, JSON) that kept
    every value and dtype.
    """
    ok = [r for r in rows if r.get("round_trip_equal") and "read_x" in r]
    if not ok:
        return "No format round-tripped the table; see the JSON for errors."

    def best(key: str, largest: bool = True) -> dict[str, Any]:
        return max(ok, key=lambda r: r[key] if largest else -r[key])

    # The all-round pick must be readable by every backend and safe to load from others:
    # pickle runs code on load and, like HDF5, is pandas-only. csv-pandas is the CSV file
    # itself (read by another reader), not a format to pick. Dtypes kept first; where no
    # portable format kept them, the pick says so (it had said "dtypes kept" regardless).
    portable = [r for r in ok if r["format"] in _PORTABLE and r["format"] != "csv-pandas"] or ok
    typed = [r for r in portable if r.get("dtypes_kept")]
    overall = max(typed or portable, key=lambda r: (r["read_x"] * r["write_x"] / r["size_x"]) ** (1 / 3))
    fastest_read, fastest_write, smallest = best("read_x"), best("write_x"), best("size_x", largest=False)
    kept = "dtypes kept" if overall.get("dtypes_kept") else "dtypes changed: no format measured kept them"
    lines = [
        f"- **All-round: {overall['format']}** (reads {_than_csv(overall['read_x'])} and writes "
        f"{_than_csv(overall['write_x'])} at {overall['size_x']:.2f}× its size, {kept}).",
        f"- Fastest read: {fastest_read['format']} ({fastest_read['read_x']:.1f}× CSV); fastest write: "
        f"{fastest_write['format']} ({fastest_write['write_x']:.1f}× CSV); smallest on disk: "
        f"{smallest['format']} ({smallest['size_x']:.2f}× CSV).",
    ]
    if any(r["format"] == "pickle" for r in ok):
        lines.append("- Pickle is pandas-only and runs code when loaded: use it for your own caches only.")
    worse = [r["format"] for r in ok if not r["format"].startswith("csv") and r["read_x"] < 1 and r["size_x"] > 1]
    if worse:
        lines.append(f"- Slower to read and larger than CSV: {', '.join(worse)}; avoid for tables.")
    return "\n".join(lines)


def run(args: argparse.Namespace) -> int:
    """Measure every format, print the table and recommendation, and write results."""
    from gpufeed.backends import choose_dataframe_backend
    from gpufeed.datasets.sensor import cached_sensor_file
    from gpufeed.datasets.tables import detect_format

    # Up front, in one line: a backend this machine lacks (cudf without a GPU) had failed in
    # every format's process and the run still exited 0.
    try:
        chosen = choose_dataframe_backend(args.backend).name
    except (ValueError, RuntimeError) as exc:
        raise ValueError(f"--backend {args.backend}: {exc}") from exc
    # "auto" is reported as the backend it picked here (the report said "backend auto")
    shown = chosen if args.backend == chosen else f"{chosen} ({args.backend})"
    default = [f for f in _EXT if f != "csv-pandas" or args.backend == "pandas"]
    formats = [f.strip() for f in args.formats.split(",") if f.strip()] if args.formats else default
    unknown = [f for f in formats if f not in _EXT]
    if unknown:
        raise ValueError(f"--formats: unknown format(s) {unknown}; choose from {', '.join(_EXT)}")
    # A format whose optional library this install lacks (HDF5 without the hdf5 extra) is not
    # run here, as cuDF is not without a GPU: named, it is refused before anything runs; by
    # default it is left out and listed under the table and in the JSON (`skipped`), so a
    # comparison with a run that had it says why it is missing. It had failed with a cut-off
    # ImportError and exit 1 on the README's own `pip install ".[dali-cpu]"`.
    unavailable = unavailable_formats()
    refused = [f for f in dict.fromkeys(formats) if f in unavailable]
    if args.formats and refused:
        raise ValueError("; ".join(f"--formats {f}: cannot run on this machine ({unavailable[f]})" for f in refused))
    skipped = {f: why for f, why in unavailable.items() if f in formats}
    formats = [f for f in formats if f not in skipped]
    if "csv-pandas" in formats and args.backend != "pandas":
        raise ValueError(f"--formats csv-pandas reads the CSV with pandas.read_csv: it runs with --backend pandas "
                         f"only, not {args.backend}")
    if "csv" not in formats:
        formats.insert(0, "csv")  # every ratio is to CSV
    if args.file:
        source = Path(args.file)
        detect_format(source)  # refused when parsed (_table_file); this is for a Namespace built by hand
        if not source.exists():
            raise FileNotFoundError(f"{source}: no such file")
        dataset = f"{source.name} (given)"
    else:
        source = cached_sensor_file(args.rows, args.data_dir)
        dataset = f"generated sensor table, {args.rows:,} rows × 99 columns (95 int/float features)"
    work = Path(args.work_dir) if args.work_dir else Path(tempfile.mkdtemp(prefix="gpufeed-formats-"))
    work.mkdir(parents=True, exist_ok=True)
    try:
        results = {}
        for f in formats:
            stage(f"[formats] {f}: write and read back ...")
            results[f] = run_isolated(_format_worker, str(source), f, args.backend, str(work), args.warmup,
                                      args.repeats)
    finally:
        if not args.work_dir:
            shutil.rmtree(work, ignore_errors=True)
    csv = results["csv"]
    rows = []
    for fmt, r in results.items():
        if "error" in r:
            rows.append({"format": fmt, "check": r["error"].splitlines()[0][:100]})
            continue
        row = {"format": fmt, "write_s": r["write_s"], "read_s": r["read_s"], "mb_disk": r["bytes_on_disk"] / 1e6,
               "mb_ram": r["bytes_in_ram"] / 1e6, "round_trip_equal": r["round_trip_equal"],
               "dtypes_kept": r["dtypes_kept"],
               "check": ("values equal" if r["round_trip_equal"] else "VALUES DIFFER" + _named(r))
               + ("" if r["dtypes_kept"] else ", dtypes changed")}
        if "error" not in csv:
            row.update(write_x=csv["write_s"] / r["write_s"], read_x=csv["read_s"] / r["read_s"],
                       size_x=r["bytes_on_disk"] / csv["bytes_on_disk"], ram_x=r["bytes_in_ram"] / csv["bytes_in_ram"])
        rows.append(row)
    table = markdown_table(rows, [
        ("format", "format"), ("write_s", "write s"), ("write_x", "write × CSV speed"), ("read_s", "read s"),
        ("read_x", "read × CSV speed"), ("mb_disk", "MB on disk"), ("size_x", "size / CSV"),
        ("mb_ram", "MB in RAM"), ("ram_x", "RAM / CSV"), ("check", "round trip")])
    if skipped:
        table += "\n\nNot run on this machine: " + "; ".join(f"`{f}` ({why})" for f, why in skipped.items())
    summary = (f"Table: {dataset}; backend {shown}; median of {counted(args.repeats, 'repeat')} after "
               f"{counted(args.warmup, 'warm-up')}, each format in its own process. Speed ratios > 1 mean faster than CSV "
               "(the kit's multi-threaded Arrow CSV reader; `csv-pandas` is the same file read by "
               "`pandas.read_csv`).\n\n"
               f"{table}\n\n## Recommendation\n\n{recommend(rows)}")
    print(summary, flush=True)
    json_path, md_path = write_results("formats", {"dataset": dataset, "config": vars(args) | {"_run": None},
                                                   "formats": results, "ratios": rows, "skipped": skipped},
                                       summary, args.out)
    print(results_line(json_path))  # the JSON, the Markdown and the figures
    failed = [f for f, r in results.items() if "error" in r]
    if failed:  # recorded, but a run with a format that did not run is no success
        print(f"gpufeed: {len(failed)} of {len(results)} format(s) failed: {', '.join(failed)} "
              "(the error of each is in the report)", file=sys.stderr)
        return 1
    differ = [r["format"] for r in rows if r.get("round_trip_equal") is False]
    if differ:  # a format that does not give the table back is no success either
        print(f"gpufeed: {len(differ)} format(s) did not read back the values written: {', '.join(differ)}",
              file=sys.stderr)
        return 1
    return 0
