"""Reading result files back: load them, and each suite's ratios to its baseline and headline.

Every suite writes a JSON document (``harness.write_results``) whose shape is its own;
this module is the one place that knows where each suite keeps its ratios, so that
``gpufeed bench compare``, the ``bench all`` summary and the figures read them alike.
Ratios are always "higher is better": a rate (images/s, rows/s) over the baseline's rate
in the same file.
"""

from __future__ import annotations

import datetime as _dt
import json
import os
import re
import warnings
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from gpufeed.machine import cpu_words


def machine_kind(doc: dict[str, Any]) -> str:
    """``"gpu16"``, ``"cpu2"``...: the kind of machine a result came from (as in its file name).

    Example:
        >>> machine_kind({"metadata": {"gpu": None, "cpu_count": 2}})
        'cpu2'
    """
    meta = doc.get("metadata", {})
    return f"{'gpu' if meta.get('gpu') else 'cpu'}{meta.get('cpu_count', '')}"


def same_machine(old: dict[str, Any], new: dict[str, Any]) -> bool | None:
    """Whether two results came from the same kind of machine: the same kind (cores, GPU or
    none), CPU name and, where both recorded them, the CPU's family, model and vector
    extensions (:func:`gpufeed.machine.cpu_details`; two boxes named "AMD EPYC" differed in
    AVX-512, and numpy's log with it). None: the kind and name agree and one run recorded
    the details, the other (written before they were) not, so it cannot be told."""
    a, b = old.get("metadata", {}), new.get("metadata", {})
    if machine_kind(old) != machine_kind(new) or a.get("cpu_model") != b.get("cpu_model"):
        return False
    if (a.get("cpu_details") is None) != (b.get("cpu_details") is None):
        return None
    return a.get("cpu_details") == b.get("cpu_details")


def machine_text(doc: dict[str, Any]) -> str:
    """A result's machine in a few words: ``"cpu2, AMD EPYC (family 25 model 1, AVX2)"``."""
    meta = doc.get("metadata", {})
    return f"{machine_kind(doc)}, {cpu_words(meta.get('cpu_model', '?'), meta.get('cpu_details'))}"


#: The key that marks a run manifest: ``gpufeed bench all`` writes one per run into its folder
#: (``bench-all-<UTC time>.json``: the suites it was asked for, how each ended and the files
#: each wrote), so that the folder is read back as that run and not as the newest file of each
#: suite, which may be an older run's where today's suite crashed.
RUN_KEY = "gpufeed_run"

#: ``<suite>-<cpu|gpu><cores>-<UTC time>.json``, as :func:`gpufeed.bench.harness.write_results` names files.
_RESULT_NAME = re.compile(r"^(?P<suite>.+)-(?P<kind>(?:cpu|gpu)\d*)-(?P<stamp>\d{8}T\d{6}Z)\.json$")
_EARLIEST = _dt.datetime.min.replace(tzinfo=_dt.timezone.utc)


@dataclass
class RunResults:
    """What result files or folders were read as: one document per suite, the suites with
    none and why, and how each path was read (for ``bench compare`` to print).

    Attributes:
        docs: ``{suite: document}``; each document gets ``_path`` (the file it came from).
        absent: ``{suite: why}``: suites that have no document although the path names
            them (the run's manifest says the suite did not run; its newest file is not
            readable JSON, and an older one is not used in its place).
        how: one line per path given: which run or which files it was read as.
    """

    docs: dict[str, dict[str, Any]] = field(default_factory=dict)
    absent: dict[str, str] = field(default_factory=dict)
    how: list[str] = field(default_factory=list)


def read_results(paths: Iterable[str | os.PathLike[str]], *,
                 like: dict[str, dict[str, Any]] | None = None) -> RunResults:
    """Read result files, folders of them, or ``bench all`` run manifests, one document per suite.

    A folder holding a ``bench all`` run manifest (:data:`RUN_KEY`) is read as its newest
    run: the files that run wrote, and its suites that did not run are ``absent``. A folder
    without one, or holding results written after its newest run, gives the newest file of
    each suite. A suite whose newest file is not readable JSON (a run cut off while writing)
    is ``absent``: an older file never stands in for it unsaid.

    Args:
        paths: result files, folders holding them, manifests.
        like: ``{suite: document}`` of another run: for each of its suites, prefer the
            latest document from the same kind of machine (:func:`machine_kind`), so a
            folder holding CPU and GPU runs is compared like with like.

    Returns:
        A :class:`RunResults`; where several files hold one suite, the one with the latest
        ``metadata.timestamp`` (then file name) wins.

    Raises:
        FileNotFoundError: a path does not exist.
        ValueError: no result was found (a JSON without a ``"suite"`` is not one), or a
            file named on its own is not readable JSON.

    Example:
        >>> run = read_results(["gpufeed-results"])  # doctest: +SKIP
        >>> run.how  # doctest: +SKIP
        ['gpufeed-results: the `bench all` run started 2026-11-26T10:00:00+00:00 (bench-all-20261126T100000Z.json)']
    """
    given = [Path(p) for p in paths]
    found: dict[str, list[dict[str, Any]]] = {}
    broken: dict[str, list[tuple[Path, str, str | None, _dt.datetime | None]]] = {}
    out = RunResults()
    for path in given:
        if path.is_dir():
            files = {f: _read_json(f) for f in sorted(path.glob("*.json"))}
            run = _newest_run(files)
            if run is not None and not _written_after(files, run):
                out.how.append(f"{path}: {_read_run(run[0], run[1], files, found, broken, out.absent)}")
                continue
            results = {f: d for f, d in files.items() if isinstance(d, dict) and "suite" in d}
            for file, doc in results.items():
                found.setdefault(doc["suite"], []).append({**doc, "_path": str(file)})
            known = {d["suite"] for d in results.values()}
            for file, doc in files.items():
                if isinstance(doc, str):
                    _add_broken(file, doc, known, broken)
            out.how.append(f"{path}: the newest file of each suite"
                           + (f" (its newest `bench all` run, {run[0].name}, is older than some of its results)"
                              if run is not None else ""))
        elif path.is_file():
            doc = _read_json(path)
            if isinstance(doc, str):
                raise ValueError(f"{path}: not a readable JSON file ({doc})")
            if isinstance(doc, dict) and RUN_KEY in doc:
                files = {f: _read_json(f) for f in sorted(path.parent.glob("*.json"))}
                out.how.append(f"{path}: {_read_run(path, doc, files, found, broken, out.absent)}")
            elif isinstance(doc, dict) and "suite" in doc:
                found.setdefault(doc["suite"], []).append({**doc, "_path": str(path)})
                out.how.append(f"{path}: that file")
        else:
            raise FileNotFoundError(f"{path}: no such file or folder")
    if not found and not broken and not out.absent:
        raise ValueError(f"no gpufeed result JSON in {', '.join(map(str, given))}")

    for suite in sorted(found.keys() | broken.keys()):
        docs = found.get(suite, [])
        kind = machine_kind(like[suite]) if like and suite in like else None
        same = [d for d in docs if kind and machine_kind(d) == kind]
        pick = max(same or docs, key=lambda d: (_instant(d.get("metadata", {}).get("timestamp")),
                                                Path(d["_path"]).name)) if docs else None
        since = _instant(pick.get("metadata", {}).get("timestamp")) if pick else _EARLIEST
        newer = [(file, why) for file, why, bkind, stamp in broken.get(suite, [])
                 if not (kind and bkind and bkind != kind and same) and (stamp is None or stamp >= since)]
        if newer:
            file, why = newer[-1]
            older = f"; the older {Path(pick['_path']).name} is not used in its place" if pick else ""
            out.absent[suite] = f"its newest file {file} is not readable JSON ({why}){older}"
        elif pick is not None:
            out.docs[suite] = pick
            out.absent.pop(suite, None)
    return out


def load_results(paths: Iterable[str | os.PathLike[str]], *,
                 like: dict[str, dict[str, Any]] | None = None) -> dict[str, dict[str, Any]]:
    """The documents of :func:`read_results` alone, ``{suite: document}``; a suite with none
    (did not run, its newest file unreadable) is left out with a warning naming why.

    Example:
        >>> docs = load_results(["bench/results"])  # doctest: +SKIP
        >>> sorted(docs)  # doctest: +SKIP
        ['augment', 'formats', 'images-train', 'images-val', 'tabular', 'tune-train']
    """
    run = read_results(paths, like=like)
    for suite, why in run.absent.items():
        warnings.warn(f"gpufeed: {suite}: left out: {why}", stacklevel=2)
    return run.docs


def _read_json(file: Path) -> Any:
    """The JSON in ``file``, or the text of why it cannot be read (a ``str``: no result
    document is one)."""
    try:
        return json.loads(file.read_text())
    except (OSError, json.JSONDecodeError, UnicodeDecodeError) as exc:
        return f"{type(exc).__name__}: {exc}"


def _instant(text: Any) -> _dt.datetime:
    """A result's ``metadata.timestamp`` as an aware time (the earliest there is when it
    has none), so that results without a zone and with one order alike."""
    try:
        when = _dt.datetime.fromisoformat(str(text).replace("Z", "+00:00"))
    except ValueError:
        return _EARLIEST
    return when if when.tzinfo else when.replace(tzinfo=_dt.timezone.utc)


def _add_broken(file: Path, why: str, known: set[str],
                broken: dict[str, list[tuple[Path, str, str | None, _dt.datetime | None]]]) -> None:
    """File an unreadable ``file`` under the suite its name gives: ``<suite>-<kind>-<time>``
    as the suites name their files, else a suite the folder holds that its name starts
    with. A name that gives no suite is left out with a warning (no suite to stand in for)."""
    named = _RESULT_NAME.match(file.name)
    if named:
        stamp = _dt.datetime.strptime(named["stamp"], "%Y%m%dT%H%M%SZ").replace(tzinfo=_dt.timezone.utc)
        broken.setdefault(named["suite"], []).append((file, why, named["kind"], stamp))
        return
    suite = max((s for s in known if file.name == f"{s}.json" or file.name.startswith(f"{s}-")), key=len, default=None)
    if suite is None:
        # A run cut off while writing: say so, or its pipelines drop out of a comparison unseen.
        warnings.warn(f"gpufeed: {file}: not a readable JSON file, left out ({why})", stacklevel=3)
        return
    broken.setdefault(suite, []).append((file, why, None, None))  # no time in its name: maybe the newest


def _newest_run(files: dict[Path, Any]) -> tuple[Path, dict[str, Any]] | None:
    """The newest ``bench all`` run manifest among a folder's ``files``, by its start."""
    runs = [(f, d) for f, d in files.items() if isinstance(d, dict) and RUN_KEY in d]
    return max(runs, key=lambda r: (_instant(r[1].get("started")), r[0].name), default=None)


def _written_after(files: dict[Path, Any], run: tuple[Path, dict[str, Any]]) -> bool:
    """Whether the folder holds results the run did not write, written after it started
    (``gpufeed bench images --out`` into a ``bench all`` folder): then the folder is no
    longer that run alone."""
    listed = {name for entry in run[1].get("suites", {}).values() for name in entry.get("files", [])}
    started = _instant(run[1].get("started"))
    for file, doc in files.items():
        if file.name in listed:
            continue
        if isinstance(doc, dict) and "suite" in doc and _instant(doc.get("metadata", {}).get("timestamp")) > started:
            return True
        named = _RESULT_NAME.match(file.name) if isinstance(doc, str) else None
        if named and _dt.datetime.strptime(named["stamp"], "%Y%m%dT%H%M%SZ").replace(
                tzinfo=_dt.timezone.utc) > started:
            return True
    return False


def _read_run(manifest: Path, run: dict[str, Any], files: dict[Path, Any], found: dict[str, list[dict[str, Any]]],
              broken: dict[str, list[tuple[Path, str, str | None, _dt.datetime | None]]],
              absent: dict[str, str]) -> str:
    """Add the documents of the ``bench all`` run in ``manifest`` (its folder's JSON read as
    ``files``) to ``found``/``broken``, its suites that wrote nothing to ``absent``; returns
    how the path was read, for :attr:`RunResults.how`."""
    folder = manifest.parent
    for step, entry in run.get("suites", {}).items():
        suite = entry.get("suite") or step  # the step `tune` writes the suite `tune-train`
        names = entry.get("files") or []
        if not names:
            why = str(entry.get("error") or entry.get("status") or "no result file").strip().splitlines()[0]
            absent[suite] = f"did not run in that run ({why[:200]}{'…' if len(why) > 200 else ''})"
        for name in names:
            file = folder / name
            doc = files.get(file, _read_json(file) if file.exists() else "the file is gone")
            if isinstance(doc, dict) and "suite" in doc:
                found.setdefault(doc["suite"], []).append({**doc, "_path": str(file)})
            else:
                why = doc if isinstance(doc, str) else "not a result document"
                broken.setdefault(suite, []).append((file, why, None, None))
    state = run.get("state", "finished")
    return (f"the `bench all` run started {run.get('started')} ({manifest.name}"
            + ("" if state == "finished" else f", {state}") + ")")


def _rate(entry: dict[str, Any]) -> float | None:
    """The median rate of a result entry, wherever the suite put it."""
    if "timing" in entry:
        entry = entry["timing"]
    rate = entry.get("rate")
    return float(rate) if isinstance(rate, (int, float)) and rate > 0 else None


def _over(results: dict[str, dict[str, Any]], baseline: str, prefix: str = "") -> dict[str, float]:
    base = _rate(results.get(baseline, {}))
    if not base:
        return {}
    return {f"{prefix}{name}": rate / base for name, r in results.items()
            if name != baseline and isinstance(r, dict) and (rate := _rate(r))}


def _tabular_ratios(doc: dict[str, Any]) -> dict[str, float]:
    """Rule and recipe ratios of a ``tabular`` document, per table (``{table: {...}}``); documents
    from before the per-table layout (sensor only) keep their old names."""
    rule, recipe = doc.get("rule", {}), doc.get("recipe", {})
    out: dict[str, float] = {}
    if "pandas-vectorised" in rule:
        out.update(_over(rule, "pandas-vectorised", "rule: "))
    else:
        for table, per in rule.items():
            out.update(_over(per, "pandas-vectorised", f"rule {table}: "))
    for key, per in recipe.items():
        if key.isdigit():
            out.update(_over(per, "pandas-baseline", f"recipe {int(key):,}: "))
        else:
            for rows, by_backend in per.items():
                out.update(_over(by_backend, "pandas-baseline", f"recipe {key} {int(rows):,}: "))
                out.update(_per_op(by_backend, "pandas-baseline", f"op {key} {int(rows):,} "))
    return out


def _per_op(by_backend: dict[str, Any], baseline: str, prefix: str) -> dict[str, float]:
    """Each op's ratio to the baseline's same op (``op sensor 1,000,000 Standardize:
    polars``): a slower op is judged on its own, not hidden behind the whole recipe's sum."""
    base = by_backend.get(baseline, {}).get("per_op") or []
    out = {}
    for name, r in by_backend.items():
        steps = r.get("per_op") if name != baseline and isinstance(r, dict) else None
        if not steps or len(steps) != len(base):
            continue
        for step, ref in zip(steps, base, strict=True):
            if step.get("median_s") and ref.get("median_s"):
                out[f"{prefix}{step['op']}: {name}"] = ref["median_s"] / step["median_s"]
    return out


def failed_checks(doc: dict[str, Any]) -> list[str]:
    """The output checks a result document records as failed, each ``"pipeline: what"``:
    a contender that ran but yielded other samples or values than its baseline. Its speed
    means nothing then, so :mod:`gpufeed.bench.compare` fails on these whatever the ratio.
    Contenders that failed to run are not listed here (they have no ratio: "gone")."""
    suite = str(doc.get("suite", ""))
    out = []
    if suite.startswith("images") or suite.startswith("storage"):
        out += [f"{r.get('name')}: {r['verdict']}" for r in doc.get("rows", []) if isinstance(r, dict)
                and r.get("verdict") not in (None, "ok", "failed", "skipped")]
    elif suite == "augment":
        out += [f"{r.get('name')}: {r['check']}" for r in doc.get("summary_rows", [])
                if r.get("check") not in (None, "ok") and not str(r["check"]).startswith("error")]
    elif suite == "formats":
        out += [f"{r.get('format')}: {r['check']}" for r in doc.get("ratios", [])
                if r.get("round_trip_equal") is False]
    elif suite == "tabular":
        for table, per in (doc.get("recipe") or {}).items():
            for rows, by_backend in (per.items() if not table.isdigit() else [(table, per)]):
                out += [f"recipe {table} {rows}: {b}: {r['check']}" for b, r in by_backend.items()
                        if isinstance(r, dict) and str(r.get("check", "")).startswith("DIFFERS")]
        for table, per in (doc.get("rule") or {}).items():
            out += [f"rule {table}: {b}: {r['note']}" for b, r in (per.items() if isinstance(per, dict) else [])
                    if isinstance(r, dict) and r.get("note") == "WEIGHTS DIFFER"]
        for table, per in (doc.get("downcast") or {}).items():
            out += [f"downcast {table}: {b}: values differ" for b, r in per.items()
                    if isinstance(r, dict) and r.get("checksum_equal") is False]
    return out


def suite_ratios(doc: dict[str, Any]) -> dict[str, float]:
    """``{pipeline: ratio to the baseline}`` of one result document (baseline left out).

    Args:
        doc: a suite's result document (as :func:`load_results` returns).

    Returns:
        The ratios, "higher is better"; empty for a suite this module does not know.

    Example:
        >>> suite_ratios({"suite": "images-train", "rows": [
        ...     {"name": "torch-pil", "ratio": 1.0}, {"name": "dali-cpu", "ratio": 2.5}]})
        {'dali-cpu': 2.5}
    """
    suite = doc.get("suite", "")
    if "ratio_to_baseline" in doc:  # suites that store their ratios ready (tune)
        return {k: float(v) for k, v in doc["ratio_to_baseline"].items() if v}
    if suite.startswith("images"):
        return {r["name"]: float(r["ratio"]) for r in doc.get("rows", [])
                if r.get("ratio") and r["name"] != "torch-pil"}
    if suite == "augment":
        # The kit's stage against the tuned baseline where it ran (the per-sample loop on a
        # thread per core, CPU), else the plain loop; the other contenders are references.
        rows = {r["name"]: r for r in doc.get("summary_rows", [])}
        ours, tuned = rows.get("gpufeed", {}), rows.get("torchvision-per-sample-threads", {})
        if ours.get("rate") and tuned.get("rate"):
            return {"gpufeed": float(ours["rate"]) / float(tuned["rate"])}
        return {"gpufeed": float(ours["vs_per_sample"])} if ours.get("vs_per_sample") else {}
    if suite == "tabular":
        return _tabular_ratios(doc)
    if suite == "formats":
        out = {}
        for r in doc.get("ratios", []):
            if r.get("format") != "csv":
                out.update({f"{r['format']} {k}": float(r[f"{k}_x"]) for k in ("read", "write") if r.get(f"{k}_x")})
        return out
    return {}


def headline(doc: dict[str, Any]) -> dict[str, Any]:
    """The one figure a summary table shows for a suite: what, the ratio, and a detail line.

    Args:
        doc: a suite's result document.

    Returns:
        ``{"what": str, "ratio": float | None, "detail": str}``.

    Example:
        >>> headline({"suite": "formats", "ratios": [{"format": "parquet", "read_x": 4.2,
        ...     "write_x": 17.0, "size_x": 0.33}]})["ratio"]
        4.2
    """
    suite = doc.get("suite", "")
    ratios = suite_ratios(doc)
    if suite.startswith("images"):
        rows = {r["name"]: r for r in doc.get("rows", [])}
        kit = {k: v for k, v in ratios.items() if k != "decode-only"}
        if not kit:
            return {"what": "no kit pipeline ran", "ratio": None, "detail": ""}
        best = max(kit, key=kit.get)
        ceiling = rows.get("decode-only", {}).get("ratio")
        base = rows.get("torch-pil", {}).get("rate")
        detail = f"{rows[best]['rate']:,.0f} vs {base:,.0f} images/s" if base else ""
        if ceiling:
            detail += f"; decode-only ceiling {ceiling:.2f}×"
        return {"what": f"{best} vs DataLoader + PIL + transforms.v2", "ratio": kit[best], "detail": detail}
    if suite == "augment":
        rows = {r["name"]: r for r in doc.get("summary_rows", [])}
        ours = rows.get("gpufeed", {})
        if str(doc.get("device", "")).startswith("cuda") and ours.get("vs_kornia"):
            return {"what": "stage vs kornia eager", "ratio": ours["vs_kornia"],
                    "detail": f"{ours.get('vs_per_sample') or 0:.1f}× the per-sample torchvision loop"}
        tuned = ratios.get("gpufeed") if rows.get("torchvision-per-sample-threads", {}).get("rate") else None
        if tuned:
            return {"what": "stage vs torchvision per-sample loop on a thread per core", "ratio": tuned,
                    "detail": f"{ours.get('vs_per_sample') or 0:.2f}× the one-thread loop; "
                              f"{ours.get('vs_kornia') or 0:.2f}× kornia eager"}
        return {"what": "stage vs torchvision per-sample loop", "ratio": ours.get("vs_per_sample"),
                "detail": f"{ours.get('vs_kornia') or 0:.2f}× kornia eager"}
    if suite == "tabular":
        recipe = {k: v for k, v in ratios.items() if k.startswith("recipe")}
        if recipe:
            # Keys read "recipe [table] 1,000,000: backend"; the headline is at the largest size.
            largest = max(sorted({k.split(":")[0] for k in recipe}), key=lambda k: int(k.split()[-1].replace(",", "")))
            at = {k: v for k, v in recipe.items() if k.startswith(largest + ":") and not k.endswith(" pandas")}
            if at:
                best = max(at, key=at.get)
                return {"what": f"{best} vs vectorised pandas", "ratio": at[best],
                        "detail": f"kit on pandas {recipe.get(largest + ': pandas', 0):.2f}×"}
        rule = {k: v for k, v in ratios.items() if k.startswith("rule") and ": kit" in k}
        if rule:
            best = max(rule, key=rule.get)
            return {"what": f"{best} vs np.select", "ratio": rule[best], "detail": ""}
        return {"what": "no ratio", "ratio": None, "detail": ""}
    if suite == "formats":
        rows = {r["format"]: r for r in doc.get("ratios", [])}
        pq = rows.get("parquet", {})
        return {"what": "parquet read vs CSV", "ratio": pq.get("read_x"),
                "detail": f"writes {pq.get('write_x') or 0:.1f}× faster at {pq.get('size_x') or 0:.2f}× the size"}
    if "headline" in doc:
        return doc["headline"]
    best = max(ratios, key=ratios.get) if ratios else None
    return {"what": best or "no ratio", "ratio": ratios.get(best) if best else None, "detail": ""}
