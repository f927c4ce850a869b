"""The stall meter: wraps the batches of a training loop and times, per step, the wait for
the next batch against the time spent in the step.

A step starts when the meter hands a batch to the loop and ends when the loop asks for the
next one (or leaves: ``break``, an exception, ``zip`` running out). On CUDA the clock is read
only after torch's current stream is synchronised: a step's kernels run asynchronously, and
without the synchronise a step would look as fast as its launches while the queued work
spilled into the next wait. The meter synchronises twice a step: when the batch arrives (the
loader's own queued GPU work on that stream — DALI's copy into torch's tensor, a normalise —
counts as waiting) and when the step ends. The stream, not the device: a device-wide
synchronise also waited for work the loader runs ahead on its own streams (DALI decoding the
next batches), which overlaps the step in training and was charged to it here.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable, Iterator
from typing import Any

import torch

from gpufeed.backends import resolve_device
from gpufeed.profile.batches import samples_in
from gpufeed.profile.report import StallReport


class _Clock:
    """Wall clock, read after synchronising torch's current stream on CUDA; there it also
    records a CUDA event pair on that stream around each step (the GPU's own time for the
    step's queued work)."""

    def __init__(self, device: torch.device) -> None:
        self.device = device
        self.cuda = device.type == "cuda"
        # Seconds per step, read from each step's event pair once the step's end has
        # synchronised (a pair kept per step would pile up over a long run).
        self.times: list[float] = []
        self._start: torch.cuda.Event | None = None

    def reset(self) -> None:
        self.times.clear()
        self._start = None

    @property
    def name(self) -> str:
        return "wall, CUDA-synchronised" if self.cuda else "wall"

    def now(self) -> float:
        """Seconds, after the work queued on torch's current stream is done."""
        if self.cuda:
            torch.cuda.current_stream(self.device).synchronize()
        return time.perf_counter()

    def step_started(self) -> float:
        t = self.now()
        if self.cuda:
            self._start = torch.cuda.Event(enable_timing=True)
            self._start.record(torch.cuda.current_stream(self.device))
        return t

    def step_ended(self) -> float:
        if not self.cuda or self._start is None:
            return self.now()
        end = torch.cuda.Event(enable_timing=True)
        end.record(torch.cuda.current_stream(self.device))
        t = self.now()  # synchronised: both events are complete
        self.times.append(self._start.elapsed_time(end) / 1e3)
        self._start = None
        return t

    def gpu_seconds(self) -> tuple[float, ...] | None:
        """Per-step GPU time, from each step's CUDA event pair."""
        if not self.cuda:
            return None
        return tuple(self.times)


class StallMeter:
    """Wraps an iterable of batches and measures, per step, waiting for data vs the step.

    Iterate the meter instead of the loader, unchanged otherwise; call :meth:`report` after
    (or during) the loop. Iterating it again (the next epoch) adds to the same record.

    The first batch's wait starts when the meter's iterator is made (``for ... in meter``
    makes it and asks for the batch at once): a DataLoader starts its worker processes in
    ``iter()``, every epoch without ``persistent_workers``, and that start is waiting for data.

    Args:
        batches: any iterable of batches (a DataLoader, a gpufeed loader, a generator).
        warmup: leading steps left out of the figures (worker start-up, cuDNN autotuning,
            first-touch allocations); they still show in the timeline.
        device: the device the step runs on: ``"auto"`` (CUDA when available), ``"cpu"``,
            ``"cuda"``, ``"cuda:N"`` or a ``torch.device``. On CUDA the meter synchronises
            torch's current stream on it at each step's start and end.
        batch_size_of: returns a batch's sample count (default: the first dimension of the
            batch's first tensor, depth first through tuples, lists and dicts).
        unit: what a sample is, for the text report.

    Example:
        >>> meter = StallMeter(loader)                      # doctest: +SKIP
        >>> for images, labels in meter:                    # doctest: +SKIP
        ...     train_step(images, labels)
        >>> print(meter.report().to_text())                 # doctest: +SKIP
    """

    def __init__(self, batches: Iterable[Any], *, warmup: int = 2, device: str | torch.device = "auto",
                 batch_size_of: Callable[[Any], int] | None = None, unit: str = "images") -> None:
        if not isinstance(batches, Iterable):
            raise ValueError(f"batches must be an iterable of batches, got {type(batches).__name__}")
        if not isinstance(warmup, int) or isinstance(warmup, bool) or warmup < 0:
            raise ValueError(f"warmup must be an int >= 0, got {warmup!r}")
        if batch_size_of is not None and not callable(batch_size_of):
            raise ValueError(f"batch_size_of must be a function of a batch, got {batch_size_of!r}")
        self.batches = batches
        self.warmup = warmup
        self.unit = unit
        self.batch_size_of = batch_size_of or samples_in
        self._clock = _Clock(resolve_device(device))
        self.reset()

    def reset(self) -> None:
        """Forget every step measured so far."""
        self._wait: list[float] = []
        self._step: list[float] = []
        self._samples: list[int] = []
        self._clock.reset()
        self._started: float | None = None  # the open step's start
        self._carry = 0.0  # an epoch's closing wait (its last next()), added to the next step's wait

    @property
    def device(self) -> torch.device:
        """The device the meter synchronises (CPU: none)."""
        return self._clock.device

    def __len__(self) -> int:
        return len(self.batches)  # type: ignore[arg-type]

    def __iter__(self) -> Iterator[Any]:
        # The clock starts before iter(): a DataLoader starts its worker processes there
        # (every epoch, without persistent_workers), a wait the first batch must count.
        asked = self._clock.now()
        return self._measure(iter(self.batches), asked)

    def _measure(self, batches: Iterator[Any], asked: float) -> Iterator[Any]:
        while True:
            try:
                batch = next(batches)
            except StopIteration:
                self._carry += self._clock.now() - asked
                return
            started = self._clock.step_started()
            count = int(self.batch_size_of(batch))
            if count < 0:  # an empty batch (0) can happen; a negative count is a counting bug
                raise ValueError(f"batch_size_of returned {count} for a batch: a sample count is >= 0")
            self._wait.append(started - asked + self._carry)
            self._samples.append(count)
            self._carry = 0.0
            self._started = started
            try:
                yield batch
            finally:  # the loop asks for the next batch, or leaves (break, exception, close)
                asked = self._end_step()

    def _end_step(self) -> float:
        ended = self._clock.step_ended()
        if self._started is not None:
            self._step.append(ended - self._started)
            self._started = None
        return ended

    def report(self) -> StallReport:
        """The figures so far, from the steps that ended (an open step is left out).

        Returns:
            A :class:`~gpufeed.profile.report.StallReport`.

        Raises:
            ValueError: no more steps than ``warmup`` have ended.
        """
        done = len(self._step)
        gpu = self._clock.gpu_seconds()
        return StallReport(
            wait=tuple(self._wait[:done]), step=tuple(self._step), samples=tuple(self._samples[:done]),
            warmup=self.warmup, clock=self._clock.name, device=str(self.device),
            gpu=None if gpu is None else gpu[:done], unit=self.unit,
        )
