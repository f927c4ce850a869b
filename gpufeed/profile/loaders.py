"""The loaders ``gpufeed stall`` can measure: the kit's (torch, DALI, auto) and the
DataLoader + PIL + transforms.v2 baseline of the images benchmark."""

from __future__ import annotations

import os
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

import torch

from gpufeed.backends import dali_installed
from gpufeed.progress import counted

LOADERS = ("torch", "dali", "auto", "pil")


@dataclass
class BuiltLoader:
    """A loader and what the report says about it."""

    loader: Iterable[Any]
    name: str  # "torch", "dali" or "pil" ("auto" resolved)
    classes: int
    description: str


def comparable_loaders() -> list[str]:
    """The loaders worth measuring on this machine (without importing DALI).

    Returns:
        ``["torch", "dali", "pil"]``, without ``"dali"`` when DALI is not installed.

    Example:
        >>> "torch" in comparable_loaders()
        True
    """
    return ["torch", *(["dali"] if dali_installed() else []), "pil"]


def shards_or_raw(root: str | os.PathLike[str]) -> str | None:
    """What ``root`` is when it is no ImageFolder tree the pil loader could read:
    ``"WebDataset/TFRecord shards"`` (a pattern, a shard file, a folder of shards),
    ``"a raw cache"`` or ``"converted shards"`` (a folder ``gpufeed convert`` wrote); None
    for a folder of class folders.

    Example:
        >>> shards_or_raw("data/train-{000000..000003}.tar")
        'WebDataset/TFRecord shards'
    """
    from gpufeed.datasets.shards import converted_format, is_shard_spec

    converted = converted_format(root)
    if converted is not None:
        return "a raw cache (gpufeed convert)" if converted == "raw" else f"{converted} shards (gpufeed convert)"
    return "WebDataset/TFRecord shards" if is_shard_spec(os.fspath(root)) else None


def build_loader(name: str, root: str | os.PathLike[str], *, batch_size: int, size: int,
                 device: torch.device, workers: int, train: bool = True) -> BuiltLoader:
    """Build loader ``name`` over ``root``, float32 normalised NCHW.

    Args:
        name: ``"torch"``, ``"dali"``, ``"auto"`` (:func:`gpufeed.pipelines.classification_loader`
            with that backend; batches on ``device``) or ``"pil"`` (the benchmark's baseline,
            :func:`gpufeed.bench.images.baseline_loader`; batches on the CPU, pinned for CUDA).
        root: an ImageFolder tree; for the kit's loaders also shards or a raw cache.
        batch_size: samples per batch.
        size: output height and width.
        device: the training device.
        workers: DataLoader workers or DALI threads.
        train: training transforms (random crop and flip, shuffled) or validation ones.

    Returns:
        A :class:`BuiltLoader`.

    Example:
        >>> built = build_loader("torch", "data/train", batch_size=8, size=64,
        ...                      device=torch.device("cpu"), workers=0)  # doctest: +SKIP
    """
    if name not in LOADERS:
        raise ValueError(f"loader must be one of {', '.join(LOADERS)}, got {name!r}")
    if name == "pil":
        from gpufeed.bench.images import baseline_dataset, baseline_loader

        kind = shards_or_raw(root)
        if kind is not None or not os.path.isdir(root):
            raise ValueError(f"the pil loader (torchvision ImageFolder) reads a folder of class folders, not "
                             f"{root}{f' ({kind})' if kind else ''}: use the torch, dali or auto loader for shards")
        loader = baseline_loader(baseline_dataset(root, train=train, size=size), train=train,
                                 batch_size=batch_size, num_workers=workers,
                                 pin_memory=torch.device(device).type == "cuda")
        return BuiltLoader(loader, "pil", len(loader.dataset.classes),
                           f"pil: torchvision ImageFolder + transforms.v2 + DataLoader ({workers} workers)")
    from gpufeed.pipelines import classification_loader

    loader = classification_loader(root, train=train, batch_size=batch_size, size=size, backend=name,
                                   device=device, num_workers=workers)
    return BuiltLoader(loader, loader.backend, len(loader.classes),
                       f"{loader.backend}: gpufeed classification_loader ({loader.choice.reason}; "
                       f"{counted(workers, 'worker/thread', 'workers/threads')})")
