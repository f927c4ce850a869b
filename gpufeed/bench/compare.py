"""Compare two benchmark runs: how each pipeline's ratio to its baseline changed.

``gpufeed bench compare OLD NEW`` takes result files or folders of them: a folder written by
``gpufeed bench all`` is read as its latest run (its manifest lists the files; a suite that
did not run in it is missing), any other folder as the latest file per suite. It prints the
file it picked for each suite, old and new. Ratios, not absolute rates, are compared: a ratio is measured side by
side in one run, so it survives a busier or faster machine that moves every rate alike.
A change beyond ``--threshold`` (the run-to-run spread recorded on these machines, 10 %
by default) is flagged; the exit status is 1 when a ratio dropped beyond it, for CI.
"""

from __future__ import annotations

import argparse
import os
from typing import Any

from gpufeed.arguments import number_at_least
from gpufeed.bench.harness import markdown_table, some_of
from gpufeed.bench.results import (
    RunResults,
    failed_checks,
    machine_text,
    read_results,
    same_machine,
    suite_ratios,
)

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
        pipeline in one run only, ``"info"`` for a row shown but never judged
        (:func:`is_informational`: a tuning sweep's gain over its start, its best images/s),
        else ``""``.

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
        before, after = compared_values(old[suite]), compared_values(new[suite])
        for name in [*before, *[n for n in after if n not in before]]:
            if _is_reference(name):
                continue
            a, b = before.get(name), after.get(name)
            row: dict[str, Any] = {"suite": suite, "pipeline": name, "old": a, "new": b, "change": None}
            if a is not None and b is not None:
                row["change"] = 100 * (b / a - 1)
            if is_informational(suite, name):
                row["flag"] = "info"  # shown, never judged
            elif a is None or b is None:
                row["flag"] = "new" if a is None else "gone"
            else:
                row["flag"] = ("slower" if row["change"] < -threshold
                               else "faster" if row["change"] > threshold else "")
            rows.append(row)
    return rows


def compared_values(doc: dict[str, Any]) -> dict[str, float]:
    """What :func:`compare_results` compares for one result document: its ratios to the
    baseline (:func:`gpufeed.bench.results.suite_ratios`) and, for a tuning sweep, the best
    configuration's images/s (:func:`is_informational`: shown, not judged).

    Example:
        >>> compared_values({"suite": "tune-train", "best_rate": 900.0, "ratio_to_baseline": {
        ...     "best DataLoader vs start": 1.4, "kit-dali vs best DataLoader": 2.4}})
        {'best DataLoader vs start': 1.4, 'kit-dali vs best DataLoader': 2.4, 'best DataLoader images/s': 900.0}
    """
    values = suite_ratios(doc)
    if str(doc.get("suite", "")).startswith("tune") and isinstance(doc.get("best_rate"), (int, float)):
        gain = next((k for k in values if k.endswith(" vs start")), "best DataLoader vs start")
        swept = gain.removeprefix("best ").removesuffix(" vs start")
        if doc["best_rate"] > 0:
            values[f"best {swept} images/s"] = float(doc["best_rate"])
    return values


def is_informational(suite: str, name: str) -> bool:
    """Rows shown but never judged. A tuning sweep's gain of its best configuration over its
    own starting point (``best DataLoader vs start``) says how much tuning paid, not how fast
    the kit is: a smaller gain after a better start (or a machine where the defaults were
    already good) is no regression. Its best configuration's images/s is an absolute rate,
    which drifts with the machine's load. What is judged for a sweep: the kit loaders'
    ratios to the best configuration found.

    Example:
        >>> is_informational("tune-train", "best DataLoader vs start")
        True
        >>> is_informational("tune-train", "kit-dali vs best DataLoader")
        False
    """
    return suite.startswith("tune") and (name.endswith(" vs start") or name.endswith(" images/s"))


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
    against two, 50,000 rows against 250,000. Their ratios are then not like for like.

    Settings kept as a mapping are compared entry by entry: a tuning sweep's starting point
    (``start.batch_size 32 → 64``) and its knobs (``values: num_workers, batch_size →
    pin_memory`` when other knobs were swept, ``values.batch_size [32, 64] → [64, 128]``
    when a knob tried other values); the storage suite's ``remote`` latency and bandwidth.

    Example:
        >>> setup_differences({"setup": {"start": {"batch_size": 32}, "values": {"num_workers": [0, 2]}}},
        ...                   {"setup": {"start": {"batch_size": 64}, "values": {"pin_memory": [False, True]}}})
        ['start.batch_size 32 → 64', 'values: num_workers → pin_memory']
    """
    before, after = _settings(old), _settings(new)
    plain = (int, float, str, bool)
    out = []
    for k in sorted(before.keys() | after.keys()):
        a, b = before.get(k), after.get(k)
        if k in _SETUP_IGNORED or a == b:
            continue
        if isinstance(a, dict) or isinstance(b, dict):
            out.extend(_mapping_differences(k, a if isinstance(a, dict) else {}, b if isinstance(b, dict) else {}))
        elif isinstance(before.get(k, 0), plain) and isinstance(after.get(k, 0), plain):
            out.append(f"{k} {a} → {b}")
    return out


def _mapping_differences(name: str, a: dict[str, Any], b: dict[str, Any]) -> list[str]:
    """How two runs' mapping setting ``name`` differs: its keys, then each shared entry."""
    out = []
    if a.keys() != b.keys():
        def keys(d: dict[str, Any]) -> str:
            return ", ".join(map(str, d)) or "none"

        out.append(f"{name}: {keys(a)} → {keys(b)}")
    out.extend(f"{name}.{k} {a[k]} → {b[k]}" for k in a if k in b and a[k] != b[k])
    return out


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Options of ``gpufeed bench compare``."""
    parser.add_argument("old", help="result JSON file or folder of them (the reference); a folder written by "
                                    "`bench all` is read as its latest run, any other as its newest file per suite")
    parser.add_argument("new", help="result JSON file or folder of them (the run to judge), read as OLD is")
    parser.add_argument("--threshold", type=number_at_least(0, above=True), default=DEFAULT_THRESHOLD,
                        help=f"percent change that counts (default {DEFAULT_THRESHOLD:g}: the run-to-run "
                             "spread recorded on 2-core machines)")


#: Suites the kit no longer writes, and where their figures went: an old results folder
#: holding them is not a run that lost them.
RETIRED_SUITES = {"tabular-ops": "tabular (its per-op tables)"}


def run(args: argparse.Namespace) -> int:
    """Print the comparison as a Markdown table.

    Returns:
        1 when a ratio dropped by more than the threshold, when an output check of the new
        run failed (:func:`gpufeed.bench.results.failed_checks`), when a pipeline or a whole
        suite of the old run has no ratio in the new one (it failed or was not run: a suite
        that crashed writes no file; a suite a ``bench all`` run's manifest says did not
        run; a suite whose newest file is not readable JSON), when the old run's newest file
        of a suite the new run has is not readable, or when the two runs have no ratio in
        common (nothing was compared); else 0. Retired suites (:data:`RETIRED_SUITES`) are
        listed, not judged.
    """
    absent = [p for p in (args.old, args.new) if not os.path.exists(p)]
    if absent:  # both named at once (the new run was read first, so a missing OLD went unsaid)
        raise FileNotFoundError("; ".join(f"{p}: no such file or folder" for p in absent))
    new_run = read_results([args.new])
    old_run = read_results([args.old], like=new_run.docs)
    old, new = old_run.docs, new_run.docs
    print(picked_files(old_run, new_run))
    rows = compare_results(old, new, threshold=args.threshold)
    # A suite of the new run without a result (it did not run in that `bench all` run, or its
    # newest file is unreadable) counts as missing below; one of the old run is named here.
    unreadable_old = {s: why for s, why in old_run.absent.items() if s in new and "not readable" in why}
    if not any(r["change"] is not None and r["flag"] != "info" for r in rows):
        print(f"Nothing to compare: the old run ({', '.join(sorted(old)) or 'no suite'}) and the new run "
              f"({', '.join(sorted(new)) or 'no suite'}) have no suite and pipeline with a ratio in common.")
        for reason in nothing_in_common(old, new):
            print(f"- {reason}")
        return 1
    for row in rows:
        row["shown"] = f"{row['change']:+.1f} %" if row["change"] is not None else "—"
        row["flag"] = {"slower": "**▼ slower**", "faster": "▲ faster", "info": "info (not judged)"}.get(
            row["flag"], row["flag"])
    print(f"Ratio to each run's own baseline, old → new; flagged beyond ±{args.threshold:g} %.\n")
    print(markdown_table(rows, [("suite", "suite"), ("pipeline", "pipeline"), ("old", "old ×"), ("new", "new ×"),
                                ("shown", "change"), ("flag", "flag")]))
    if any(r["flag"] == "info (not judged)" for r in rows):
        print("\nRows marked info are shown, not judged: a tuning sweep's gain over its own starting point says "
              "how much tuning paid, not how fast the kit is, and its best configuration's images/s is an absolute "
              "rate, which moves with the machine's load; the kit loaders' ratios to the best configuration are "
              "judged.")
    missing = sorted(old.keys() - new.keys() - RETIRED_SUITES.keys())
    if missing:
        print(f"\n{len(missing)} suite(s) of the old run have no result in the new one (failed or not run): "
              + ", ".join(f"{s} ({new_run.absent[s]})" if s in new_run.absent else s for s in missing)
              + "; to judge part of a run, pass its result files instead of folders")
    if unreadable_old:
        print(f"\n{len(unreadable_old)} suite(s) of the new run have no readable result in the old one (not "
              "compared): " + ", ".join(f"{s} ({why})" for s, why in unreadable_old.items()))
    retired = sorted((old.keys() & RETIRED_SUITES.keys()) - new.keys())
    if retired:
        print("\nRetired suites in the old run (not compared): "
              + ", ".join(f"{s} (now {RETIRED_SUITES[s]})" for s in retired))
    if new.keys() - old.keys():
        print(f"\nOnly in the new run (not compared): {', '.join(sorted(new.keys() - old.keys()))}")
    both = sorted(old.keys() & new.keys())
    across = [f"{s} ({machine_text(old[s])} → {machine_text(new[s])})" for s in both
              if same_machine(old[s], new[s]) is False]
    if across:
        print(f"\nCompared across different machines (ratios may differ for that reason): {', '.join(across)}")
    unknown = [s for s in both if same_machine(old[s], new[s]) is None]
    if unknown:
        print(f"\nNot known to be the same machine (a run predates recording the CPU's generation and vector "
              f"extensions; CPUs of one name have differed in them, and ratios with them): {', '.join(unknown)}")
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
              + ", ".join(f"{r['suite']} {r['pipeline']}{_why_missing(new[r['suite']], r['pipeline'])}"
                          for r in gone))
    failed = [f"{suite}: {what}" for suite in sorted(new) for what in failed_checks(new[suite])]
    if failed:
        print(f"\n{len(failed)} output check(s) of the new run failed (its speed means nothing there): "
              + "; ".join(failed))
    return 1 if dropped or gone or missing or failed or unreadable_old else 0


def picked_files(old: RunResults, new: RunResults) -> str:
    """Which files a comparison reads, suite by suite, and how each path was read (a
    ``bench all`` run, the newest file of each suite), so a reader sees what was judged.

    Example:
        >>> one = RunResults({"formats": {"_path": "a/formats-1.json"}}, {}, ["a: that file"])
        >>> print(picked_files(one, RunResults({}, {"formats": "did not run in that run (crashed)"}, ["b: ..."])))
        Old run: a: that file
        New run: b: ...
        <BLANKLINE>
        Files compared (old → new):
        - formats: a/formats-1.json → none: did not run in that run (crashed)
        <BLANKLINE>
    """
    def side(run: RunResults, suite: str) -> str:
        if suite in run.docs:
            return run.docs[suite]["_path"]
        return f"none: {run.absent[suite]}" if suite in run.absent else "none"

    suites = sorted(old.docs.keys() | new.docs.keys() | old.absent.keys() | new.absent.keys())
    lines = [*(f"Old run: {h}" for h in old.how), *(f"New run: {h}" for h in new.how), "",
             "Files compared (old → new):", *(f"- {s}: {side(old, s)} → {side(new, s)}" for s in suites), ""]
    return "\n".join(lines)


def _not_run(doc: dict[str, Any]) -> tuple[dict[str, str], dict[str, str]]:
    """What a run's document says it did not measure: ``({pipeline: why skipped},
    {pipeline: last line of its error})``."""
    skipped = doc.get("skipped")
    failed = {r["name"]: str(r["error"]).strip().splitlines()[-1][:120]
              for r in doc.get("rows", []) if isinstance(r, dict) and r.get("error")}
    return (dict(skipped) if isinstance(skipped, dict) else {}), failed


def _why_missing(doc: dict[str, Any], pipeline: str) -> str:
    """`` (not run here: no CUDA GPU)`` or `` (failed: ...)`` for a pipeline a run has no
    ratio for, where its document says; else ``""``."""
    skipped, failed = _not_run(doc)
    # The formats suite skips a format ("hdf5"), whose rows are "hdf5 read" and "hdf5 write".
    key = pipeline if pipeline in skipped else pipeline.split(" ")[0]
    if key in skipped:
        return f" (not run on that machine: {skipped[key]})"
    if pipeline in failed:
        return f" (failed: {failed[pipeline]})"
    return ""


def nothing_in_common(old: dict[str, dict[str, Any]], new: dict[str, dict[str, Any]]) -> list[str]:
    """Why two runs have no ratio in common, one line per reason: the suites on one side
    only, and for each shared suite the pipelines or rows each run alone has (a run where
    only the baseline ran; tables of other sizes), what the new run's file says it did not
    run, and the settings in which the two runs differ.

    Example:
        >>> old = {"images-train": {"suite": "images-train", "rows": [
        ...     {"name": "torch-pil", "ratio": 1.0}, {"name": "dali-cpu", "ratio": 2.5}]}}
        >>> new = {"images-train": {"suite": "images-train", "rows": [{"name": "torch-pil", "ratio": 1.0}],
        ...        "skipped": {"dali-gpu": "no CUDA GPU"}}}
        >>> nothing_in_common(old, new)[0]
        'images-train: the new run has no pipeline with a ratio (only in the old run: dali-cpu); \
the new run did not run dali-gpu (no CUDA GPU)'
    """
    reasons = []
    if old.keys() - new.keys():
        reasons.append(f"suite(s) only in the old run: {', '.join(sorted(old.keys() - new.keys()))}")
    if new.keys() - old.keys():
        reasons.append(f"suite(s) only in the new run: {', '.join(sorted(new.keys() - old.keys()))}")
    for suite in sorted(old.keys() & new.keys()):
        judged = {}
        for side, doc in (("old", old[suite]), ("new", new[suite])):
            judged[side] = [n for n in compared_values(doc) if not _is_reference(n)
                            and not is_informational(suite, n)]
        only_old = [n for n in judged["old"] if n not in judged["new"]]
        only_new = [n for n in judged["new"] if n not in judged["old"]]
        empty = [side for side in ("old", "new") if not judged[side]]
        what = ("neither run has a pipeline with a ratio" if len(empty) == 2
                else f"the {empty[0]} run has no pipeline with a ratio" if empty
                else "no pipeline or row in common")
        only = [f"only in the {side} run: {some_of(names, 6)}" for side, names in (("old", only_old), ("new", only_new))
                if names]
        line = f"{suite}: {what}" + (f" ({'; '.join(only)})" if only else "")
        for side, doc in (("old", old[suite]), ("new", new[suite])):
            skipped, failed = _not_run(doc)
            if skipped:
                line += f"; the {side} run did not run " + ", ".join(f"{n} ({why})" for n, why in skipped.items())
            if failed:
                line += f"; failed in the {side} run: {', '.join(failed)}"
        differences = setup_differences(old[suite], new[suite])
        if differences:
            line += f"; the runs' settings differ: {', '.join(differences)}"
        reasons.append(line)
    return reasons
