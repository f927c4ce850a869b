"""What-if analysis in the manner of DS-Analyzer (Mohan et al., "Analyzing and Mitigating
Data Stalls in DNN Training", VLDB 2021): measure the model alone on a device-resident batch
(no loading), the loader alone (no model) and the two together, and from the two rates alone
say whether training is input-bound or compute-bound, by how much, and which loader would
keep up with the model on this machine.

With the model alone taking ``M`` samples/s and the loader alone delivering ``L``, a loop
that overlaps loading perfectly runs at ``min(M, L)``; when ``L < M`` it waits for data
``1 - L / M`` of the time, the "input-bound by X %" of the verdict. The rate measured
together shows how far the real loop is from that ideal (shared CPU cores, shallow prefetch).
"""

from __future__ import annotations

import itertools
import statistics
import time
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any

import torch

from gpufeed.backends import resolve_device
from gpufeed.profile.batches import take, to_device
from gpufeed.profile.report import StallReport
from gpufeed.profile.stall import StallMeter

#: Below this fraction of min(model alone, loader alone), the text notes that together
#: the loop loses to something the two alone do not show.
OVERLAP_NOTE_BELOW = 0.85
#: A compute-bound loop that still waited this share of its time gets a note saying why.
STALL_NOTE_PCT = 10.0
#: Loader and model alone within this share of each other: "balanced", not input- or
#: compute-bound by a margin that a rerun would flip.
BALANCED_BAND = 0.10
#: The step in the loop this many times slower than alone gets a note (shared cores).
SLOW_STEP_NOTE = 2.0
#: Together within this share of the two back to back (``1 / (1/L + 1/M)``): loading did
#: not overlap the step (a DataLoader without workers, a plain generator).
SERIAL_BAND = 0.10


#: Steps left out first by default (worker start-up, cuDNN's autotuning).
MIN_WARMUP = 2
#: A loader run's settle wait is at most this many seconds (see :func:`loader_rate`).
MAX_SETTLE_S = 10.0


def batches_ahead(loader: Any) -> int | None:
    """Batches ``loader`` holds or prepares ahead of the one taken: a gpufeed loader's
    ``batches_ahead``, a ``DataLoader``'s workers times its prefetch factor; None where the
    loader does not say."""
    ahead = getattr(loader, "batches_ahead", None)
    if isinstance(ahead, int) and not isinstance(ahead, bool):
        return ahead
    # Here, not at the top: gpufeed.pipelines loads the image loaders (torchvision, PIL), which
    # `import gpufeed.profile` need not pay for (a user's own DataLoader comes this way).
    from gpufeed.pipelines.torch_loader import dataloader_batches_ahead

    return dataloader_batches_ahead(loader)


def drain_for(loader: Any, drain: int | None) -> int:
    """``drain`` as given, or for None the batches ``loader`` banks while it starts
    (:func:`batches_ahead`; 0 where it does not say).

    Why: every worker fills its prefetch slots as soon as the loader starts, and a window
    that begins among them times how fast they are drawn. On an H200 with 16 workers times
    4 slots, 20 steps after 2 measured the kit's torch loader alone at 21,392 images/s; its
    epochs run 5,000. Those batches are drawn first, without the step: with the step
    running, a loader a little slower than the model refills the bank while it drains, and
    no warm-up of a fixed length got past it.
    """
    if drain is None:
        return batches_ahead(loader) or 0
    if not isinstance(drain, int) or isinstance(drain, bool) or drain < 0:
        raise ValueError(f"drain must be None or an int >= 0, got {drain!r}")
    return drain


def skip_first(batches: Iterable[Any], drain: int) -> Iterator[Any]:
    """An iterator over ``batches`` whose first ``drain`` are drawn and dropped now, before
    any meter wraps it: drawn lazily, inside the meter, they had been timed as the first
    step's wait (with ``warmup=0``, inside the figures)."""
    it = iter(batches)
    for _ in itertools.islice(it, drain):
        pass
    return it


def _metered(batches: Iterable[Any], body: Callable[[Any], Any], *, warmup: int, device: torch.device,
             batch_size_of: Callable[[Any], int] | None, unit: str) -> StallReport:
    meter = StallMeter(batches, warmup=warmup, device=device, batch_size_of=batch_size_of, unit=unit)
    for batch in meter:
        body(batch)
    return meter.report()


def _check_counts(steps: int, warmup: int) -> None:
    if not isinstance(steps, int) or isinstance(steps, bool) or steps < 1:
        raise ValueError(f"steps must be an int >= 1, got {steps!r}")
    if not isinstance(warmup, int) or isinstance(warmup, bool) or warmup < 0:
        raise ValueError(f"warmup must be an int >= 0, got {warmup!r}")


def loader_rate(loader: Iterable[Any], *, steps: int = 30, warmup: int = MIN_WARMUP, drain: int | None = None,
                device: str | torch.device = "auto",
                batch_size_of: Callable[[Any], int] | None = None, unit: str = "images",
                keep: list[Any] | None = None, settle: bool = True) -> StallReport:
    """The loader alone: batches drawn (across epochs) and moved to ``device``, no model.

    First ``drain`` batches are drawn and dropped (:func:`drain_for`: by default those the
    loader banks while it starts), then ``warmup`` steps are left out, then ``steps`` are
    measured, rounded up to whole banks: workers deliver in bursts, one batch each, and a
    window that is not a whole number of them was off by up to 20 %.

    Args:
        loader: a re-iterable loader (each ``iter()`` starts an epoch).
        steps, warmup: batches measured, and batches left out first (after the drained ones).
        drain: batches drawn before the warm-up, unmeasured (None: :func:`drain_for`).
        device: the training device (the batch is moved there, as a step would).
        batch_size_of: a batch's sample count (default: its first tensor's length).
        unit: what a sample is.
        keep: if given, the last batch (on ``device``, copied) is appended to it.
        settle: afterwards, wait (at most :data:`MAX_SETTLE_S`) for as long as the loader
            takes to refill its bank: workers go on preparing the batches they were given,
            and a measurement right after (the model alone) shared the cores with them.

    Returns:
        The :class:`StallReport`; its ``samples_per_s`` is the loader's rate.

    Example:
        >>> loader_rate(loader, steps=20).samples_per_s  # doctest: +SKIP
    """
    _check_counts(steps, warmup)
    drain = drain_for(loader, drain)
    bank = batches_ahead(loader) or 0  # whole banks of what the loader holds ahead (not of a drain asked for)
    steps = -(-steps // bank) * bank if bank > 1 else steps
    dev = resolve_device(device)
    last: list[Any] = []

    def hold(batch: Any) -> None:  # the step of this run: move the batch, keep the latest
        last[:] = [to_device(batch, dev)]

    report = _metered(skip_first(take(loader, drain + warmup + steps), drain), hold, warmup=warmup, device=dev,
                      batch_size_of=batch_size_of, unit=unit)
    if keep is not None:
        keep.append(to_device(last[0], dev, copy=True))
    if settle and drain and report.samples_per_s > 0:
        per_batch = (report.wait_s + report.step_s) / max(1, len(report.wait) - report.warmup)
        time.sleep(min(MAX_SETTLE_S, 1.2 * drain * per_batch))
    return report


def model_rate(step: Callable[[Any], Any], batch: Any, *, steps: int = 30, warmup: int = MIN_WARMUP,
               device: str | torch.device = "auto", batch_size_of: Callable[[Any], int] | None = None,
               unit: str = "images") -> StallReport:
    """The model alone: ``step`` on the same device-resident ``batch``, ``warmup + steps`` times.

    Args:
        step: the training step, called with a batch.
        batch: one real batch (moved to ``device`` once, before timing).
        steps, warmup: steps measured, and steps run first and left out.
        device: the training device.
        batch_size_of: a batch's sample count (default: its first tensor's length).
        unit: what a sample is.

    Returns:
        The :class:`StallReport`; its ``samples_per_s`` is the model's rate.

    Example:
        >>> model_rate(step, batch, steps=20).samples_per_s  # doctest: +SKIP
    """
    _check_counts(steps, warmup)
    dev = resolve_device(device)
    resident = to_device(batch, dev, copy=True)
    return _metered(itertools.repeat(resident, warmup + steps), step, warmup=warmup, device=dev,
                    batch_size_of=batch_size_of, unit=unit)


@dataclass(frozen=True)
class WhatIf:
    """The three measurements and what they say.

    Attributes:
        model_rate: samples/s of the step alone on a device-resident batch.
        loader_rate: samples/s of the loader alone.
        actual: the stall report of loader and step together.
        loader: the measured loader's name.
        loaders_alone: samples/s of each loader alone on this machine (the measured one
            included), for the "which loader keeps up" advice.
        steps: steps measured in the together and model-alone runs (after the warm-up).
        warmup: warm-up steps left out of each run.
        drained: batches the loader runs drew first, unmeasured (the loader's start-up bank).
        loader_steps: steps measured in the loader-alone run (whole banks; None: ``steps``).
        model_step_s: the model alone's median step, in seconds (None: not measured).
        background: whether the loader prepares batches while the step runs (DataLoader
            workers, DALI's prefetch; None: unknown). When it does, a loop running as the two
            back to back is contention for the same cores, not loading in the foreground,
            and "load in the background" is not the advice.
    """

    model_rate: float
    loader_rate: float
    actual: StallReport
    loader: str = "loader"
    loaders_alone: dict[str, float] = field(default_factory=dict)
    steps: int = 30
    warmup: int = 2
    drained: int = 0
    loader_steps: int | None = None
    model_step_s: float | None = None
    background: bool | None = None

    @property
    def bound(self) -> str:
        """``"input"`` when the loader alone is slower than the model alone, else ``"compute"``."""
        return "input" if self.loader_rate < self.model_rate else "compute"

    @property
    def predicted_stall_pct(self) -> float:
        """Waiting for data as a % of the time with loading perfectly overlapped: ``1 - L/M``."""
        return max(0.0, 100.0 * (1.0 - self.loader_rate / self.model_rate))

    @property
    def keeps_up(self) -> list[str]:
        """Loaders whose rate alone reaches the model's, fastest first."""
        fast = [n for n, r in self.loaders_alone.items() if r >= self.model_rate]
        return sorted(fast, key=lambda n: -self.loaders_alone[n])

    @property
    def balanced(self) -> bool:
        """Loader and model alone within :data:`BALANCED_BAND` of each other: either may limit
        a given run, and the verdict says so rather than flip on noise."""
        return abs(self.loader_rate / self.model_rate - 1.0) <= BALANCED_BAND

    @property
    def verdict(self) -> str:
        """The what-if in one sentence: input- or compute-bound, by how much, and why."""
        unit, m, lr = self.actual.unit, self.model_rate, self.loader_rate
        if self.balanced:
            return (f"balanced: the loader alone delivers {lr:,.1f} {unit}/s and the model alone takes {m:,.1f}, "
                    f"within {100 * BALANCED_BAND:.0f}% of each other: either may limit the loop")
        if self.bound == "input":
            pct = _pct(self.predicted_stall_pct)
            return (f"input-bound by {pct}: the loader alone delivers {lr:,.1f} "
                    f"{unit}/s, the model alone takes {m:,.1f}; even fully overlapped, "
                    f"{pct} of the time would go to waiting for data")
        return (f"compute-bound: the loader alone delivers {lr / m:.1f}x what the model takes "
                f"({lr:,.1f} vs {m:,.1f} {unit}/s)")

    @property
    def serial_rate(self) -> float:
        """Samples/s of loading and step back to back, nothing overlapped: ``1 / (1/L + 1/M)``."""
        return 1.0 / (1.0 / self.model_rate + 1.0 / self.loader_rate)

    @property
    def in_foreground(self) -> bool:
        """Whether the loop ran as loading and step back to back: the loader prepares no batch
        while the step runs (a DataLoader with ``num_workers=0``, a plain generator).

        Both the rate and the wait must say so: together within :data:`SERIAL_BAND` of the
        two back to back, and a stall within a quarter of the share loading would take
        (``M / (L + M)``). With a loader much faster than the model the back-to-back rate is
        almost the model's, so the rate alone also matched overlapped loops that stalled
        for another reason.
        """
        if self.background:  # it does prepare batches meanwhile: what looks serial is contention
            return False
        share = 100.0 * self.model_rate / (self.loader_rate + self.model_rate)
        return (abs(self.actual.samples_per_s / self.serial_rate - 1.0) <= SERIAL_BAND
                and abs(self.actual.stall_pct - share) <= max(2.0, 0.25 * share))

    @property
    def advice(self) -> str:
        """Which loader would remove the stall (or that none is needed, or none would)."""
        unit, m = self.actual.unit, self.model_rate
        foreground = self.in_foreground or self.background is False
        if self.bound == "compute" and foreground and self.actual.stall_pct >= STALL_NOTE_PCT:
            # The loader keeps up alone, yet each batch is loaded while the step waits: the
            # fix is overlap, not a faster loader (a DataLoader without workers had been
            # told it was not the bottleneck).
            return (f"load in the background: the loader alone keeps up ({self.loader_rate:,.1f} vs {m:,.1f} "
                    f"{unit}/s) but loads each batch while the step waits; with workers (DataLoader "
                    f"num_workers >= 1) or a prefetching loader (the kit's) the loop would approach {m:,.1f} "
                    f"{unit}/s (now {self.actual.samples_per_s:,.1f})")
        if self.bound == "compute":
            return "the input pipeline is not the bottleneck here: a faster loader would not speed training up"
        first = ""
        if foreground:
            # Input-bound and loading in the foreground: overlap alone takes the loop from the
            # two back to back to the loader's rate, whatever loader comes next.
            first = (f"load in the background first (DataLoader num_workers >= 1, or the kit's loaders): the loop "
                     f"would approach the loader's {self.loader_rate:,.1f} {unit}/s (now "
                     f"{self.actual.samples_per_s:,.1f}); then: ")
        others = {n: r for n, r in self.loaders_alone.items() if n != self.loader}
        keep = [n for n in self.keeps_up if n != self.loader]
        if keep:
            best = keep[0]
            return (f"{first}{best} would remove the stall on this machine: alone it delivers "
                    f"{others[best]:,.1f} {unit}/s, the model takes {m:,.1f}")
        if not others:
            return f"{first}no other loader was measured (what_if's alternatives=, gpufeed stall --compare)"
        fastest = max(others, key=others.__getitem__)
        short = _pct(100.0 * (1.0 - others[fastest] / m))
        return (f"{first}none of the other loaders measured keeps up: the fastest, {fastest} at "
                f"{others[fastest]:,.1f} {unit}/s, is {short} short of the model; more cores, "
                "smaller stored images or a GPU decode (DALI on a GPU) would close the gap")

    @property
    def step_slowdown(self) -> float | None:
        """The loop's median step over the model alone's: above 1, something beside the
        step (the loader's workers, torch's own threads on a CPU) slowed it."""
        if not self.model_step_s:
            return None
        steps = self.actual.step[self.actual.measured]
        return statistics.median(steps) / self.model_step_s if steps else None

    @property
    def notes(self) -> list[str]:
        """What the together run shows that the two alone do not, with the likely causes."""
        ideal = min(self.model_rate, self.loader_rate)
        together = self.actual.samples_per_s
        unit = self.actual.unit
        if self.in_foreground:
            why = (f"loading did not overlap the step: the loop ran as the two back to back "
                   f"({self.serial_rate:,.1f} {unit}/s), as a loader without background workers does")
        elif self.actual.device == "cpu":
            why = ("likely: loading and the step share this machine's CPU cores, or prefetching runs dry at "
                   "epoch ends (a DataLoader with persistent_workers=False restarts its workers each epoch)")
        else:
            why = ("likely: prefetching does not hide the loader's latency, loader and step compete for the "
                   "CPU, or prefetching runs dry at epoch ends")
        found = []
        if together < OVERLAP_NOTE_BELOW * ideal:
            found.append(f"together the loop runs {100 * (1 - together / ideal):.0f}% below the slower of the "
                         f"two alone ({together:,.1f} vs {ideal:,.1f} {unit}/s)")
        if self.bound == "compute" and not self.balanced and self.actual.stall_pct >= STALL_NOTE_PCT:
            # The loader is fast enough alone, yet the loop waited: the wait is contention,
            # which a faster loader alone does not remove.
            found.append(f"{self.actual.stall_pct:.0f}% of the loop still went to waiting for data")
        notes = [f"{'; '.join(found)}: {why}"] if found else []
        slow = self.step_slowdown
        if slow is not None and slow >= SLOW_STEP_NOTE:
            threads = " (on a CPU: torch.set_num_threads, or fewer loader workers)" if self.actual.device == "cpu" else ""
            notes.append(f"the step took {slow:.1f}x as long in the loop as alone: the loader's work slows the "
                         f"step itself{threads}")
        return notes

    def as_dict(self) -> dict[str, Any]:
        """The analysis as plain data (documented in docs/profile.md)."""
        return {
            "steps": self.steps, "warmup_steps": self.warmup, "drained_batches": self.drained,
            "unit": self.actual.unit,
            "model_alone": {"samples_per_s": self.model_rate, "median_step_s": self.model_step_s},
            "loader_alone": {"name": self.loader, "samples_per_s": self.loader_rate,
                             "steps": self.loader_steps or self.steps},
            "together": {"samples_per_s": self.actual.samples_per_s, "stall_pct": self.actual.stall_pct},
            "bound": self.bound, "balanced": self.balanced, "predicted_stall_pct": self.predicted_stall_pct,
            "step_slowdown": self.step_slowdown,
            "verdict": self.verdict, "loaders_alone": dict(self.loaders_alone),
            "keeps_up": self.keeps_up, "advice": self.advice, "notes": self.notes,
        }

    def to_text(self) -> str:
        """The three rates, the loaders alone, the verdict and the advice."""
        from gpufeed.progress import counted

        unit = self.actual.unit
        alone = ", ".join(f"{n} {r:,.1f}" + (" (above)" if n == self.loader else "")
                          for n, r in sorted(self.loaders_alone.items(), key=lambda kv: -kv[1]))
        rows = [("model alone (one device-resident batch, no loading)", self.model_rate, ""),
                (f"loader alone ({self.loader}, no model)", self.loader_rate, ""),
                ("together (the actual loop)", self.actual.samples_per_s,
                 f"   stall {self.actual.stall_pct:.1f} %")]
        runs = f"{counted(self.steps, 'step')} each after {counted(self.warmup, 'warm-up step')}"
        if self.loader_steps and self.loader_steps != self.steps:
            runs += f"; the loader alone {self.loader_steps}, whole banks"
        if self.drained:
            runs += f"; the loader runs drew the {counted(self.drained, 'batch', 'batches')} it banked at start first"
        lines = [f"what-if ({runs}):"]
        lines += [f"  {label:<52}{rate:12,.1f} {unit}/s{extra}" for label, rate, extra in rows]
        if alone:
            lines.append(f"  loaders alone on this machine ({unit}/s): {alone}")
        lines.append(f"verdict: {self.verdict}")
        lines.append(f"  -> {self.advice}")
        lines += [f"  note: {n}" for n in self.notes]
        return "\n".join(lines)


def what_if(step: Callable[[Any], Any], loader: Iterable[Any], *, steps: int = 30, warmup: int = MIN_WARMUP,
            drain: int | None = None, device: str | torch.device = "auto",
            batch_size_of: Callable[[Any], int] | None = None, loader_name: str = "loader",
            alternatives: Mapping[str, float | Iterable[Any]] | None = None, unit: str = "images",
            background: bool | None = None) -> WhatIf:
    """Measure loader and step together, the loader alone and the step alone.

    The loader runs first draw the batches it banked while starting (``drain``, unmeasured,
    no step), then leave ``warmup`` steps out; the model alone leaves ``warmup`` out. Each
    measures ``steps`` (the loader alone: rounded up to whole banks, :func:`loader_rate`),
    starting new epochs as needed. The step trains for real in two runs (together, and
    alone on one batch).

    Args:
        step: the training step, called with each batch (moves it to the device itself).
        loader: a re-iterable loader (a DataLoader, a gpufeed loader; not a one-shot iterator).
        steps, warmup: steps measured per run, and steps left out first.
        drain: batches drawn first in the loader runs, unmeasured (None: what the loader
            banks while it starts, :func:`drain_for`).
        device: the training device (``"auto"``: CUDA when available).
        batch_size_of: a batch's sample count (default: its first tensor's length).
        loader_name: how the report names ``loader``.
        alternatives: other loaders to compare, by name: a rate already measured
            (samples/s) or a loader, measured here alone.
        unit: what a sample is.
        background: whether ``loader`` prepares batches while the step runs (workers,
            DALI's prefetch); None: worked out from the loader where it says
            (:func:`prepares_in_background`), else unknown (:attr:`WhatIf.background`).

    Returns:
        A :class:`WhatIf`.

    Example:
        >>> result = what_if(train_step, loader, steps=20)   # doctest: +SKIP
        >>> print(result.to_text())                           # doctest: +SKIP
    """
    _check_counts(steps, warmup)
    if not callable(step):
        raise ValueError(f"step must be a function of a batch, got {step!r}")
    if not isinstance(loader, Iterable) or isinstance(loader, Iterator):
        raise ValueError("loader must be re-iterable (a DataLoader, a gpufeed loader, a list): "
                         f"a one-shot {type(loader).__name__} cannot be measured three times")
    dev = resolve_device(device)
    drained = drain_for(loader, drain)
    common = {"warmup": warmup, "device": dev, "batch_size_of": batch_size_of, "unit": unit}
    actual = _metered(skip_first(take(loader, drained + warmup + steps), drained), step, **common)
    kept: list[Any] = []
    alone = loader_rate(loader, steps=steps, keep=kept, drain=drained, **common)
    model = model_rate(step, kept[0], steps=steps, **common)
    rates = {loader_name: alone.samples_per_s}
    for name, other in (alternatives or {}).items():
        if isinstance(other, (int, float)):
            rates[name] = float(other)
        else:  # the last one measured needs no settling: nothing is timed after it
            last = name == list(alternatives)[-1]
            rates[name] = loader_rate(other, steps=steps, settle=not last, **common).samples_per_s
    return WhatIf(model_rate=model.samples_per_s, loader_rate=alone.samples_per_s, actual=actual,
                  loader=loader_name, loaders_alone=rates, steps=steps, warmup=warmup, drained=drained,
                  loader_steps=len(alone.wait) - alone.warmup, model_step_s=statistics.median(model.step[model.measured]),
                  background=prepares_in_background(loader) if background is None else background)


def _pct(value: float) -> str:
    """A percentage for the text: never "0%" for a shortfall that is not nil."""
    return "<1%" if 0 < value < 0.5 else f"{value:.0f}%"


def prepares_in_background(loader: Any) -> bool | None:
    """Whether ``loader`` prepares batches while the step runs, where it says: the kit's
    DALI loader (DALI prefetches), the kit's torch loader or a ``DataLoader`` with workers;
    None for any other iterable. Without it, a kit loader measured from Python was told to
    "load in the background" as if it were a plain generator (``gpufeed stall`` knew)."""
    if getattr(loader, "backend", None) == "dali":
        return True
    workers = getattr(getattr(loader, "options", None), "workers", getattr(loader, "num_workers", None))
    return workers > 0 if isinstance(workers, int) and not isinstance(workers, bool) else None
