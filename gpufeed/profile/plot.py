"""The stall report's timeline figure (matplotlib, Agg canvas: no display, no pyplot state)."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from gpufeed.profile.report import StallReport

WAIT_COLOUR, STEP_COLOUR = "#d62728", "#1f77b4"


def plot_timeline(report: StallReport, path: str | Path, *, title: str | None = None) -> Path:
    """Per step, the time waiting for data stacked under the time in the step (ms); warm-up
    steps are drawn pale and marked as left out.

    Args:
        report: what a :class:`~gpufeed.profile.StallMeter` measured.
        path: the PNG to write (its folder is created).
        title: the figure's title (default: the stall % and throughput).

    Returns:
        ``path`` as a :class:`~pathlib.Path`.

    Example:
        >>> plot_timeline(meter.report(), "stall.png")  # doctest: +SKIP
    """
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    path = Path(path)
    if path.suffix.lower() != ".png":
        raise ValueError(f"the timeline is written as PNG: give a path ending in .png, got {path}")
    wait_ms = [w * 1e3 for w in report.wait]
    step_ms = [s * 1e3 for s in report.step]
    fig = Figure(figsize=(10, 4), layout="constrained")
    FigureCanvasAgg(fig)
    ax = fig.add_subplot()
    width = 0.85 if len(wait_ms) <= 200 else 1.0
    for part, alpha, measured in ((slice(0, report.warmup), 0.35, False), (report.measured, 1.0, True)):
        x = list(range(len(wait_ms)))[part]
        ax.bar(x, wait_ms[part], color=WAIT_COLOUR, alpha=alpha, width=width,
               label="waiting for data" if measured else None)
        ax.bar(x, step_ms[part], bottom=wait_ms[part], color=STEP_COLOUR, alpha=alpha, width=width,
               label="in the step" if measured else None)
    if report.warmup:
        ax.axvspan(-0.5, report.warmup - 0.5, color="0.9", zorder=0, label="warm-up (left out)")
    ax.set_xlabel("step")
    ax.set_ylabel("ms")
    ax.set_xlim(-0.5, len(wait_ms) - 0.5)
    ax.legend(loc="upper right")
    ax.set_title(title or f"stall {report.stall_pct:.1f} % of the time, {report.samples_per_s:,.1f} "
                          f"{report.unit}/s ({report.clock}, {report.device})")
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=100)
    return path
