"""Compare two benchmark runs: how each pipeline's ratio to its baseline changed.

``gpufeed bench compare OLD NEW`` takes result files or folders of them (the latest file
per suite is used). Ratios, not absolute rates, are compared: a ratio is measured side by
side in one run, so it survives a busier or faster machine that moves every rate alike.
A change beyond ``--threshold`` (the run-to-run spread recorded on these machines, 10 %
by default) is flagged; the exit status is 1 when a ratio dropped beyond it, for CI.
"""

from __future__ import annotations

import argparse
from typing import Any

from gpufeed.arguments import number_at_least
from gpufeed.bench.harness import markdown_table
from gpufeed.bench.results import load_results, machine_kind, suite_ratios

DEFAULT_THRESHOLD = 10.0  # percent


def compare_results(old: dict[str, dict[str, Any]], new: dict[str, dict[str, Any]], *,
                    threshold: float = DEFAULT_THRESHOLD) -> list[dict[str, Any]]:
    """Per suite and pipeline: the old and new ratio to the baseline and the change.

    Args:
        old, new: ``{suite: result document}`` (as :func:`gpufeed.bench.results.load_results`
            returns).
        threshold: percent change beyond which a row is flagged, > 0.

    Returns:
        Rows ``{"suite", "pipeline", "old", "new", "change" (percent), "flag"}``; ``flag``
        is ``"slower"`` or ``"faster"`` beyond the threshold, ``"new"`` or ``"gone"`` for a
        pipeline in one run only, else ``""``.

    Example:
        >>> old = {"images-train": {"suite": "images-train", "rows": [{"name": "dali-cpu", "ratio": 2.6}]}}
        >>> new = {"images-train": {"suite": "images-train", "rows": [{"name": "dali-cpu", "ratio": 2.0}]}}
        >>> compare_results(old, new)[0]["flag"]
        'slower'
    """
    if not threshold > 0:
        raise ValueError(f"threshold (--threshold) must be > 0 (percent), got {threshold}")
    rows = []
    for suite in sorted(old.keys() & new.keys()):
        before, after = suite_ratios(old[suite]), suite_ratios(new[suite])
        for name in [*before, *[n for n in after if n not in before]]:
            if _is_reference(name):
                continue
            a, b = before.get(name), after.get(name)
            row: dict[str, Any] = {"suite": suite, "pipeline": name, "old": a, "new": b, "change": None}
            if a is None or b is None:
                row["flag"] = "new" if a is None else "gone"
            else:
                row["change"] = 100 * (b / a - 1)
                row["flag"] = ("slower" if row["change"] < -threshold
                               else "faster" if row["change"] > threshold else "")
            rows.append(row)
    return rows


#: Rows that are no kit pipeline: the decode-only ceiling, the augment suite's floor
#: (copying the batch) and the rule benchmark's Python loops, which show how slow the
#: pandas code users write by hand is. Their ratios are context, not something to gate on.
_REFERENCES = ("decode-only", "floor", "iterrows", "apply", "for-loop")


def _is_reference(name: str) -> bool:
    return name.rsplit(": ", 1)[-1] in _REFERENCES


#: Setup fields that differ between runs without changing what was measured (where the data
#: lay or the results went, text derived from the other fields).
_SETUP_IGNORED = {"data", "baseline", "mean_file_kib", "page_cache", "command", "suite", "out", "data_dir",
                  "work_dir", "_run", "_path", "file", "dataset"}


def _settings(doc: dict[str, Any]) -> dict[str, Any]:
    """A result document's settings, wherever its suite keeps them: ``setup`` (images,
    storage), ``config`` (the command's arguments: formats, tabular) or the top level
    (augment)."""
    plain = (int, float, str, bool)
    if doc.get("setup") or doc.get("config"):  # the top then holds results (tune's rates, its code)
        return {**(doc.get("config") or {}), **(doc.get("setup") or {})}
    return {k: v for k, v in doc.items() if isinstance(v, plain)}


def setup_differences(old: dict[str, Any], new: dict[str, Any]) -> list[str]:
    """``"name old → new"`` for each plain setting (a number, text, a flag) in which two
    runs of a suite differ: 128 images against 1,024, another batch size, one round
    against two, 50,000 rows against 250,000. Their ratios are then not like for like."""
    before, after = _settings(old), _settings(new)
    plain = (int, float, str, bool)
    return [f"{k} {before.get(k)} → {after.get(k)}" for k in sorted(before.keys() | after.keys())
            if k not in _SETUP_IGNORED and before.get(k) != after.get(k)
            and isinstance(before.get(k, 0), plain) and isinstance(after.get(k, 0), plain)]


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Options of ``gpufeed bench compare``."""
    parser.add_argument("old", help="result JSON file or folder of them (the reference)")
    parser.add_argument("new", help="result JSON file or folder of them (the run to judge)")
    parser.add_argument("--threshold", type=number_at_least(0, above=True), default=DEFAULT_THRESHOLD,
                        help=f"percent change that counts (default {DEFAULT_THRESHOLD:g}: the run-to-run "
                             "spread recorded on 2-core machines)")


#: Suites the kit no longer writes, and where their figures went: an old results folder
#: holding them is not a run that lost them.
RETIRED_SUITES = {"tabular-ops": "tabular (its per-op tables)"}


def run(args: argparse.Namespace) -> int:
    """Print the comparison as a Markdown table.

    Returns:
        1 when a ratio dropped by more than the threshold, when a pipeline or a whole
        suite of the old run has no ratio in the new one (it failed or was not run: a suite
        that crashed writes no file), or when the two runs have no ratio in common
        (nothing was compared); else 0. Retired suites (:data:`RETIRED_SUITES`) are
        listed, not judged.
    """
    new = load_results([args.new])
    old = load_results([args.old], like=new)
    rows = compare_results(old, new, threshold=args.threshold)
    if not any(r["change"] is not None for r in rows):
        print(f"Nothing to compare: the old run ({', '.join(sorted(old)) or 'no suite'}) and the new run "
              f"({', '.join(sorted(new)) or 'no suite'}) have no suite and pipeline with a ratio in common.")
        return 1
    for row in rows:
        row["shown"] = f"{row['change']:+.1f} %" if row["change"] is not None else "—"
        row["flag"] = {"slower": "**▼ slower**", "faster": "▲ faster"}.get(row["flag"], row["flag"])
    print(f"Ratio to each run's own baseline, old → new; flagged beyond ±{args.threshold:g} %.\n")
    print(markdown_table(rows, [("suite", "suite"), ("pipeline", "pipeline"), ("old", "old ×"), ("new", "new ×"),
                                ("shown", "change"), ("flag", "flag")]))
    missing = sorted(old.keys() - new.keys() - RETIRED_SUITES.keys())
    if missing:
        print(f"\n{len(missing)} suite(s) of the old run have no result in the new one (failed or not run): "
              f"{', '.join(missing)}; to judge part of a run, pass its result files instead of folders")
    retired = sorted((old.keys() & RETIRED_SUITES.keys()) - new.keys())
    if retired:
        print("\nRetired suites in the old run (not compared): "
              + ", ".join(f"{s} (now {RETIRED_SUITES[s]})" for s in retired))
    if new.keys() - old.keys():
        print(f"\nOnly in the new run (not compared): {', '.join(sorted(new.keys() - old.keys()))}")
    across = [f"{s} ({machine_kind(old[s])} → {machine_kind(new[s])})" for s in sorted(old.keys() & new.keys())
              if machine_kind(old[s]) != machine_kind(new[s])]
    if across:
        print(f"\nCompared across different machines (ratios may differ for that reason): {', '.join(across)}")
    settings = {s: setup_differences(old[s], new[s]) for s in sorted(old.keys() & new.keys())}
    if any(settings.values()):
        print("\nCompared runs with different settings (ratios may differ for that reason): "
              + "; ".join(f"{s}: {', '.join(d)}" for s, d in settings.items() if d))
    dropped = [r for r in rows if r["flag"] == "**▼ slower**"]
    if dropped:
        print(f"\n{len(dropped)} ratio(s) dropped by more than {args.threshold:g} %: "
              + ", ".join(f"{r['suite']} {r['pipeline']}" for r in dropped))
    gone = [r for r in rows if r["flag"] == "gone"]
    if gone:
        print(f"\n{len(gone)} pipeline(s) of the old run have no ratio in the new one (failed or not run): "
              + ", ".join(f"{r['suite']} {r['pipeline']}" for r in gone))
    return 1 if dropped or gone or missing else 0
