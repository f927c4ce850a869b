"""Reading result files back: load them, and each suite's ratios to its baseline and headline.

Every suite writes a JSON document (``harness.write_results``) whose shape is its own;
this module is the one place that knows where each suite keeps its ratios, so that
``gpufeed bench compare``, the ``bench all`` summary and the figures read them alike.
Ratios are always "higher is better": a rate (images/s, rows/s) over the baseline's rate
in the same file.
"""

from __future__ import annotations

import json
import os
import warnings
from collections.abc import Iterable
from pathlib import Path
from typing import Any


def machine_kind(doc: dict[str, Any]) -> str:
    """``"gpu16"``, ``"cpu2"``...: the kind of machine a result came from (as in its file name).

    Example:
        >>> machine_kind({"metadata": {"gpu": None, "cpu_count": 2}})
        'cpu2'
    """
    meta = doc.get("metadata", {})
    return f"{'gpu' if meta.get('gpu') else 'cpu'}{meta.get('cpu_count', '')}"


def load_results(paths: Iterable[str | os.PathLike[str]], *,
                 like: dict[str, dict[str, Any]] | None = None) -> dict[str, dict[str, Any]]:
    """Read result JSON files (or every ``*.json`` in folders), the latest per suite.

    Args:
        paths: result files and/or folders holding them.
        like: ``{suite: document}`` of another run: for each of its suites, prefer the
            latest document from the same kind of machine (:func:`machine_kind`), so a
            folder holding CPU and GPU runs is compared like with like.

    Returns:
        ``{suite: document}``; where several files hold one suite, the one with the latest
        ``metadata.timestamp`` (then file name) wins. Each document gets ``_path``.

    Raises:
        FileNotFoundError: a path does not exist.
        ValueError: no result file was found (a JSON without a ``"suite"`` is not one).

    Example:
        >>> docs = load_results(["bench/results"])  # doctest: +SKIP
        >>> sorted(docs)  # doctest: +SKIP
        ['augment', 'formats', 'images-train', 'images-val', 'tabular', 'tune-train']
    """
    files: list[Path] = []
    given = [Path(p) for p in paths]
    for path in given:
        if path.is_dir():
            files.extend(sorted(path.glob("*.json")))
        elif path.is_file():
            files.append(path)
        else:
            raise FileNotFoundError(f"{path}: no such file or folder")
    found: dict[str, list[dict[str, Any]]] = {}
    for file in files:
        try:
            doc = json.loads(file.read_text())
        except (json.JSONDecodeError, UnicodeDecodeError) as exc:
            # A run cut off while writing: say so, or its pipelines drop out of a comparison unseen.
            warnings.warn(f"gpufeed: {file}: not a readable JSON file, left out ({exc})", stacklevel=2)
            continue
        if isinstance(doc, dict) and "suite" in doc:
            doc["_path"] = str(file)
            found.setdefault(doc["suite"], []).append(doc)
    if not found:
        raise ValueError(f"no gpufeed result JSON in {', '.join(map(str, given))}")

    def newest(docs: list[dict[str, Any]]) -> dict[str, Any]:
        return max(docs, key=lambda d: (d.get("metadata", {}).get("timestamp") or "", Path(d["_path"]).name))

    picked = {}
    for suite, docs in found.items():
        same = [d for d in docs if like and suite in like and machine_kind(d) == machine_kind(like[suite])]
        picked[suite] = newest(same or docs)
    return picked


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
