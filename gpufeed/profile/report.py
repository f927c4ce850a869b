"""The stall report: per-step wait and step times, the figures drawn from them, and their
text, JSON and plot forms."""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

#: Keys of :meth:`StallReport.as_dict` (documented in docs/profile.md).
REPORT_KEYS = (
    "steps", "warmup_steps", "samples", "unit", "seconds", "wait_s", "step_s", "stall_pct",
    "samples_per_s", "per_step_ms", "gpu_busy_pct", "clock", "device", "timeline",
)


def distribution(seconds: Sequence[float]) -> dict[str, float]:
    """Median, p10, p90 and max of ``seconds``, in milliseconds.

    Args:
        seconds: durations (at least one).

    Returns:
        ``{"median", "p10", "p90", "max"}`` in ms (percentiles interpolated linearly).

    Example:
        >>> distribution([0.010, 0.020, 0.030])["median"]
        20.0
    """
    ms = np.asarray(seconds, dtype=float) * 1e3
    p10, median, p90 = np.percentile(ms, [10, 50, 90])
    return {"median": float(median), "p10": float(p10), "p90": float(p90), "max": float(ms.max())}


@dataclass(frozen=True)
class StallReport:
    """What a :class:`~gpufeed.profile.StallMeter` measured, warm-up steps included in the
    timeline and left out of every figure.

    Attributes:
        wait: seconds each step waited for its batch (from asking to receiving it).
        step: seconds each step spent in the user's code (from receiving the batch to asking
            for the next one; on CUDA, to the end of the GPU work it queued).
        samples: samples in each step's batch.
        warmup: leading steps left out of the figures.
        clock: ``"wall"`` or ``"wall, CUDA-synchronised"``.
        device: the device the meter synchronised (``"cpu"`` when none).
        gpu: per-step GPU time between the two CUDA events around the step (CUDA only).
        unit: what a sample is, for the text (``"images"``).
    """

    wait: tuple[float, ...]
    step: tuple[float, ...]
    samples: tuple[int, ...]
    warmup: int
    clock: str
    device: str
    gpu: tuple[float, ...] | None = None
    unit: str = "images"

    def __post_init__(self) -> None:
        if len(self.wait) <= self.warmup:
            raise ValueError(
                f"{len(self.wait)} steps measured and warmup={self.warmup} are left out: nothing "
                "to report (run more steps or lower warmup)"
            )

    @property
    def measured(self) -> slice:
        """The steps the figures are drawn from (after the warm-up)."""
        return slice(self.warmup, None)

    @property
    def wait_s(self) -> float:
        """Seconds spent waiting for data, warm-up left out."""
        return float(sum(self.wait[self.measured]))

    @property
    def step_s(self) -> float:
        """Seconds spent in the steps, warm-up left out."""
        return float(sum(self.step[self.measured]))

    @property
    def stall_pct(self) -> float:
        """Waiting for data as a percentage of the measured time."""
        total = self.wait_s + self.step_s
        return 100.0 * self.wait_s / total if total > 0 else 0.0

    @property
    def samples_per_s(self) -> float:
        """Samples per second over the measured steps (waiting included)."""
        total = self.wait_s + self.step_s
        return sum(self.samples[self.measured]) / total if total > 0 else float("inf")

    @property
    def gpu_busy_pct(self) -> float | None:
        """GPU time between the step's CUDA events as a percentage of its step time (CUDA only)."""
        if self.gpu is None or self.step_s <= 0:
            return None
        return 100.0 * sum(self.gpu[self.measured]) / self.step_s

    def as_dict(self) -> dict[str, Any]:
        """The report as plain data (keys: :data:`REPORT_KEYS`; times in seconds unless ``_ms``)."""
        iteration = [w + s for w, s in zip(self.wait, self.step, strict=True)]
        m = self.measured
        return {
            "steps": len(self.wait) - self.warmup,
            "warmup_steps": self.warmup,
            "samples": sum(self.samples[m]),
            "unit": self.unit,
            "seconds": self.wait_s + self.step_s,
            "wait_s": self.wait_s,
            "step_s": self.step_s,
            "stall_pct": self.stall_pct,
            "samples_per_s": self.samples_per_s,
            "per_step_ms": {"wait": distribution(self.wait[m]), "step": distribution(self.step[m]),
                            "iteration": distribution(iteration[m])},
            "gpu_busy_pct": self.gpu_busy_pct,
            "clock": self.clock,
            "device": self.device,
            "timeline": {"wait_s": list(self.wait), "step_s": list(self.step), "samples": list(self.samples),
                         **({"gpu_s": list(self.gpu)} if self.gpu is not None else {})},
        }

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> StallReport:
        """The report :meth:`as_dict` (or its JSON, e.g. ``gpufeed stall``'s ``report``) holds."""
        timeline = data["timeline"]
        gpu = timeline.get("gpu_s")
        return cls(wait=tuple(timeline["wait_s"]), step=tuple(timeline["step_s"]),
                   samples=tuple(int(n) for n in timeline["samples"]), warmup=int(data["warmup_steps"]),
                   clock=data["clock"], device=data["device"], gpu=tuple(gpu) if gpu is not None else None,
                   unit=data.get("unit", "images"))

    def to_json(self, indent: int | None = 2) -> str:
        """:meth:`as_dict` as a JSON string."""
        return json.dumps(self.as_dict(), indent=indent)

    def to_text(self) -> str:
        """A short human-readable report (stall %, throughput, per-step times)."""
        from gpufeed.progress import counted

        d = self.as_dict()
        total = d["seconds"]
        lines = [
            f"stall report: {counted(d['steps'], 'step')} ({counted(d['warmup_steps'], 'warm-up step')} left out), "
            f"{d['samples']} {self.unit}, {total:.2f} s",
            f"  waiting for data  {d['wait_s']:8.2f} s  {self.stall_pct:5.1f} %   <- the stall",
            f"  in the step       {d['step_s']:8.2f} s  {100 - self.stall_pct:5.1f} %",
            f"  throughput        {self.samples_per_s:,.1f} {self.unit}/s",
            "  per step (ms)     median      p10      p90      max",
        ]
        for name, dist in d["per_step_ms"].items():
            lines.append(f"    {name:<12} {dist['median']:9.1f} {dist['p10']:8.1f} {dist['p90']:8.1f} "
                         f"{dist['max']:8.1f}")
        busy = "" if d["gpu_busy_pct"] is None else f"; GPU busy {d['gpu_busy_pct']:.0f} % of step time (CUDA events)"
        lines.append(f"  clock: {self.clock} on {self.device}{busy}")
        return "\n".join(lines)

    def plot(self, path: str | Path, title: str | None = None) -> Path:
        """Write the per-step timeline (wait and step time, stacked) as a PNG; see
        :func:`gpufeed.profile.plot.plot_timeline`. Returns the path written."""
        from gpufeed.profile.plot import plot_timeline

        return plot_timeline(self, path, title=title)
