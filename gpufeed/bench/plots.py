"""PNG figures of benchmark results (matplotlib, no display needed).

Figures are drawn from a result document (what ``harness.write_results`` writes as
JSON), so they can be redrawn from old results. ``matplotlib.figure.Figure`` is used
without pyplot: no backend is switched and no window opens, in a script or a notebook.
"""

from __future__ import annotations

import math
import os
from collections.abc import Collection, Sequence
from pathlib import Path
from typing import Any

from gpufeed.bench.results import suite_ratios

_BASE_COLOUR, _KIT_COLOUR, _OTHER_COLOUR = "#9e9e9e", "#2e7d32", "#1565c0"


def _figure(bars: int) -> Any:
    """A figure tall enough for ``bars`` horizontal bars."""
    from matplotlib.figure import Figure

    return Figure(figsize=(7.5, max(2.4, 1.2 + 0.45 * bars)), layout="constrained")


def _save(fig: Any, path: str | os.PathLike[str]) -> Path:
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=110)
    return path


def plot_rates(
    rows: Sequence[dict[str, Any]],
    path: str | os.PathLike[str],
    *,
    title: str,
    unit: str = "images/s",
    baseline: str | None = None,
    ceiling: tuple[str, float] | None = None,
    ours: Collection[str] | None = None,
) -> Path:
    """Horizontal bars of each pipeline's median rate with min–max whiskers.

    Args:
        rows: ``{"name", "rate", "rate_min", "rate_max"}`` per pipeline (rows without a
            rate are left out).
        path: the PNG to write.
        title: the figure's title.
        unit: the rate's unit, for the axis.
        baseline: the baseline's name (drawn grey).
        ceiling: ``(label, rate)`` drawn as a dashed vertical line (e.g. decode-only).
        ours: the kit's pipelines (green); other contenders are blue. Default: every
            pipeline but the baseline.

    Returns:
        ``path``.

    Example:
        >>> plot_rates([{"name": "a", "rate": 2.0, "rate_min": 1.5, "rate_max": 2.5}],
        ...            "/tmp/rates.png", title="demo")  # doctest: +SKIP
    """
    rows = [r for r in rows if r.get("rate")]
    if not rows:
        raise ValueError("rows: no row has a rate to plot")
    fig = _figure(len(rows))
    ax = fig.add_subplot()
    names = [r["name"] for r in rows]
    rates = [r["rate"] for r in rows]
    lo = [r["rate"] - r.get("rate_min", r["rate"]) for r in rows]
    hi = [r.get("rate_max", r["rate"]) - r["rate"] for r in rows]
    colours = [_BASE_COLOUR if n == baseline else _KIT_COLOUR if ours is None or n in ours else _OTHER_COLOUR
               for n in names]
    ax.barh(names, rates, xerr=[lo, hi], color=colours, capsize=4)
    ax.invert_yaxis()
    for y, (rate, up) in enumerate(zip(rates, hi, strict=True)):
        ax.annotate(f"{rate:,.0f}", (rate + up, y), xytext=(6, -3), textcoords="offset points", fontsize=8)
    if ceiling:
        ax.axvline(ceiling[1], color="#c62828", linestyle="--", label=f"{ceiling[0]} ({ceiling[1]:,.0f})")
        fig.legend(loc="outside lower center", fontsize=8)
    ax.set_xlabel(f"{unit} (median; whiskers: min–max)")
    ax.set_title(title)
    return _save(fig, path)


def plot_ratios(ratios: dict[str, float], path: str | os.PathLike[str], *, title: str,
                baseline: str = "baseline") -> Path:
    """Horizontal bars of ratios to the baseline on a log scale, with a line at 1×.

    Args:
        ratios: ``{pipeline: ratio}`` (higher is better).
        path: the PNG to write.
        title: the figure's title.
        baseline: what 1× is, for the axis label.

    Returns:
        ``path``.
    """
    ratios = {k: v for k, v in ratios.items() if v and v > 0}
    if not ratios:
        raise ValueError("ratios: nothing to plot")
    fig = _figure(len(ratios))
    ax = fig.add_subplot()
    names = list(ratios)
    values = [ratios[n] for n in names]
    ax.barh(names, values, color=[_KIT_COLOUR if v >= 1 else "#c62828" for v in values])
    ax.invert_yaxis()
    ax.set_xscale("log")
    ax.axvline(1.0, color="black", linewidth=0.8)
    for y, v in enumerate(values):
        ax.annotate(f"{v:.3g}×", (v, y), xytext=(4, -4), textcoords="offset points", fontsize=8)
    ax.set_xlabel(f"× {baseline} (log scale; > 1 is faster)")
    ax.set_title(title)
    return _save(fig, path)


def plot_tuning(doc: dict[str, Any], path: str | os.PathLike[str]) -> Path:
    """The tuning sweep: images/s against each knob's values, one panel per knob.

    The start point is a dashed line in every panel; the kit's loaders are dotted lines.

    Args:
        doc: a ``tune-*`` result document (``sweep``, ``start_rate``, ``kit``).
        path: the PNG to write.

    Returns:
        ``path``.
    """
    knobs = list(doc.get("gains", {}))
    if not knobs:
        raise ValueError("doc: the sweep has no knob to plot")
    cols = 2 if len(knobs) == 4 else min(3, len(knobs))
    rows = math.ceil(len(knobs) / cols)
    from matplotlib.figure import Figure

    fig = Figure(figsize=(4.2 * cols, 3.2 * rows), layout="constrained")
    axes = fig.subplots(rows, cols, squeeze=False).ravel()
    kit = [(k["loader"], k["rate"]) for k in doc.get("kit", []) if k.get("rate")]
    for ax, knob in zip(axes, knobs, strict=False):
        points = [r for r in doc["sweep"] if r["knob"] == knob and r.get("rate")]
        labels = [str(r["value"]) for r in points]
        rates = [r["rate"] for r in points]
        err = [[r["rate"] - r["rate_min"] for r in points], [r["rate_max"] - r["rate"] for r in points]]
        ax.errorbar(range(len(points)), rates, yerr=err, marker="o", color=_OTHER_COLOUR, capsize=3)
        ax.set_xticks(range(len(points)), labels)
        if doc.get("start_rate"):
            ax.axhline(doc["start_rate"], color=_BASE_COLOUR, linestyle="--", label="start")
        for (name, rate), style in zip(kit, (":", "-."), strict=False):
            ax.axhline(rate, color=_KIT_COLOUR, linestyle=style, label=name)
        ax.set_title(knob)
        ax.set_ylabel("images/s")
        ax.set_ylim(bottom=0)
    axes[0].legend(fontsize=7, loc="lower right")
    for ax in axes[len(knobs):]:
        ax.set_visible(False)
    fig.suptitle(f"DataLoader tuning sweep ({doc.get('setup', {}).get('mode', '')})")
    return _save(fig, path)


def plot_stalls(stalls: Sequence[tuple[str, float]], path: str | os.PathLike[str], *,
                title: str = "Time the training step waited for data") -> Path:
    """Bars of each pipeline's input-stall share (the hook for a stall meter's results).

    Args:
        stalls: ``(name, stall percent)`` pairs, percent in 0..100.
        path: the PNG to write.
        title: the figure's title.

    Returns:
        ``path``.

    Example:
        >>> plot_stalls([("torch-pil", 62.0), ("dali-gpu", 4.5)], "/tmp/stalls.png")  # doctest: +SKIP
    """
    if not stalls:
        raise ValueError("stalls: nothing to plot")
    for name, share in stalls:
        if not 0 <= share <= 100:
            raise ValueError(f"stalls: {name!r} has {share}%, expected 0..100")
    fig = _figure(len(stalls))
    ax = fig.add_subplot()
    ax.barh([n for n, _ in stalls], [s for _, s in stalls], color="#ef6c00")
    ax.invert_yaxis()
    ax.set_xlim(0, 100)
    for y, (_, share) in enumerate(stalls):
        ax.annotate(f"{share:.1f} %", (share, y), xytext=(4, -4), textcoords="offset points", fontsize=8)
    ax.set_xlabel("% of step time waiting for the next batch (lower is better)")
    ax.set_title(title)
    return _save(fig, path)


def draw_figures(doc: dict[str, Any], base: str | os.PathLike[str]) -> list[Path]:
    """The figures of one result document, written as ``<base>.png``.

    Images and augment: rates per pipeline with whiskers and the ceiling (decode-only,
    or the conversion floor) as a line; tune: the sweep's curves; stall: the timeline;
    stalls: a bar per loader;
    other suites: their ratios to the baseline.

    Args:
        doc: a result document (``suite`` and the suite's own keys).
        base: the path without suffix (the JSON's path less ``.json``).

    Returns:
        The PNGs written (none for a document with nothing to plot).
    """
    suite = doc.get("suite", "")
    path = Path(f"{os.fspath(base)}.png")
    if suite.startswith("images"):
        rows = doc.get("rows", [])
        ceiling = next((r for r in rows if r.get("name") == "decode-only" and r.get("rate")), None)
        title = f"Image loading, {doc.get('setup', {}).get('mode', '')}: float32 NCHW batches"
        return [plot_rates([r for r in rows if r.get("name") != "decode-only"], path, title=title,
                           baseline="torch-pil", ceiling=("decode-only ceiling", ceiling["rate"]) if ceiling else None)]
    if suite == "augment":
        rows = doc.get("summary_rows", [])
        floor = next((r for r in rows if r.get("name") == "floor" and r.get("rate")), None)
        return [plot_rates([r for r in rows if r.get("name") != "floor"], path, title="Batch augmentation",
                           baseline="torchvision-per-sample", ours={"gpufeed"},
                           ceiling=("floor: convert + normalise", floor["rate"]) if floor else None)]
    if suite.startswith("tune"):
        return [plot_tuning(doc, path)]
    if suite == "stalls":  # gpufeed bench stalls: a bar per loader
        bars = [(r["name"], r["stall_pct"]) for r in doc.get("rows", []) if "stall_pct" in r]
        return [plot_stalls(bars, path, title=doc.get("title") or "Input stall per loader")] if bars else []
    if suite.startswith("stall"):  # gpufeed stall: one loop's timeline
        from gpufeed.profile.report import StallReport

        return [StallReport.from_dict(doc["report"]).plot(path, title=doc.get("title"))]
    ratios = suite_ratios(doc)
    if not ratios:
        return []
    baseline = {"tabular": "vectorised pandas", "formats": "CSV",
                "storage": "torch-pil/folder under the same storage"}.get(suite, "baseline")
    return [plot_ratios(ratios, path, title=f"gpufeed bench {suite}", baseline=baseline)]
