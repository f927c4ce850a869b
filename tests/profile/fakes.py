"""Loaders and steps with injected delays, so the truth a meter should find is known."""

from __future__ import annotations

import time
from collections.abc import Iterator, Sequence

import torch

from gpufeed.profile import StallReport


def batch(n: int = 4) -> tuple[torch.Tensor, torch.Tensor]:
    """A small ``(images, labels)`` batch of ``n`` samples."""
    return torch.zeros(n, 3, 8, 8), torch.zeros(n, dtype=torch.int64)


class SleepyLoader:
    """Re-iterable: each epoch yields ``batches`` batches of ``size`` samples, sleeping
    ``delay`` seconds before each (or ``delays[i]`` before batch ``i`` of every epoch)."""

    def __init__(self, delay: float = 0.0, *, batches: int = 100, size: int = 4,
                 delays: Sequence[float] | None = None) -> None:
        self.delays = list(delays) if delays is not None else [delay] * batches
        self.size = size

    def __len__(self) -> int:
        return len(self.delays)

    def __iter__(self) -> Iterator[tuple[torch.Tensor, torch.Tensor]]:
        for delay in self.delays:
            time.sleep(delay)
            yield batch(self.size)


def sleepy_step(delay: float):  # noqa: ANN201 - a step function
    """A training step that takes ``delay`` seconds."""

    def step(_batch: object) -> None:
        time.sleep(delay)

    return step


def known() -> StallReport:
    """A report with known figures: 75 % stall, 200 images/s after two slow warm-up steps."""
    # Two warm-up steps (slow), then four steps of 30 ms wait + 10 ms step, 8 samples each.
    return StallReport(wait=(1.0, 1.0, 0.03, 0.03, 0.03, 0.03), step=(0.5, 0.5, 0.01, 0.01, 0.01, 0.01),
                       samples=(8,) * 6, warmup=2, clock="wall", device="cpu")
