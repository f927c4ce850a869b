"""Run loader jobs in a fresh process for the resume tests, as a resumed training job does.

    python -m tests.pipelines.resume_child JOBS.pt RESULTS.pt

``JOBS.pt`` holds a list of jobs (dicts); each builds a new loader, optionally
``set_epoch`` / ``load_state_dict``, takes batches, and records them with the loader's
state afterwards. A process of its own per phase: a state must resume in a process that
never saw the loader it came from, and DALI pipelines never share a process with forked
DataLoader workers.
"""

from __future__ import annotations

import sys
from typing import Any

import torch

from gpufeed.gpu_transforms.augment import (
    ColorJitter,
    GpuAugment,
    RandomHorizontalFlip,
    RandomResizedCrop,
)
from gpufeed.pipelines import classification_loader


def unseeded_stage() -> GpuAugment:
    """A device augmentation stage without a seed of its own: the loader reseeds it."""
    return GpuAugment([RandomResizedCrop(24), RandomHorizontalFlip(), ColorJitter(0.4, 0.4)])


def run_job(job: dict[str, Any]) -> dict[str, Any]:
    """One job: ``source``, ``backend``, ``kw`` (loader arguments), ``augment`` (add an
    unseeded stage), ``set_epoch``, ``load`` (a state), ``epochs`` (whole epochs to run)
    or ``take`` (batches of one epoch to take, then stop).

    Returns:
        ``{"epochs": [[(images, labels, augment params or None), ...], ...], "state",
        "samples_yielded", "skipped": [(path, reason)], "shard_size"}``.
    """
    kw = dict(job["kw"])
    stage = unseeded_stage() if job.get("augment") else None
    if stage is not None:
        kw.update(dtype=torch.uint8, gpu_augment=stage)
    loader = classification_loader(job["source"], backend=job["backend"], device="cpu", **kw)
    if job.get("set_epoch") is not None:
        loader.set_epoch(job["set_epoch"])
    if job.get("load") is not None:
        loader.load_state_dict(job["load"])
    epochs = []
    for _ in range(job.get("epochs", 1)):
        batches = []
        for images, labels in loader:
            params = None if stage is None else stage.last_params.per_op
            batches.append((images.clone(), labels.clone(), params))
            if len(batches) == job.get("take"):
                break
        epochs.append(batches)
    return {"epochs": epochs, "state": loader.state_dict(), "samples_yielded": loader.samples_yielded,
            "skipped": [(s.path, s.reason) for s in loader.skipped], "shard_size": loader.plan.shard_size}


def main(argv: list[str]) -> int:
    """Run the jobs in ``argv[0]``, save their results to ``argv[1]``."""
    jobs = torch.load(argv[0], weights_only=False)
    torch.save([run_job(job) for job in jobs], argv[1])
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
