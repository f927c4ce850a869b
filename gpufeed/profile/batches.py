"""What the meter needs to know about a batch, whatever its shape: how many samples it
holds, how to put it on a device, and how to draw a fixed number of batches from a loader.

A batch is a tensor, or a tuple/list/dict nesting tensors (``(images, labels)``, DALI's
``[{"data": ..., "label": ...}]``); its first tensor (depth first) holds one row per sample.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Mapping
from typing import Any

import torch


def _first_tensor(batch: Any) -> Any:
    """The first array-like leaf of ``batch`` (a tensor, or anything with ``shape``).

    Raises:
        ValueError: ``batch`` holds no tensor.
    """
    node = batch
    while True:
        if hasattr(node, "shape"):
            return node
        if isinstance(node, Mapping) and node:
            node = next(iter(node.values()))
        elif isinstance(node, (tuple, list)) and node:
            node = node[0]
        else:
            raise ValueError(
                f"cannot count the samples of a {type(batch).__name__} batch (no tensor in it): "
                "pass batch_size_of=, a function that returns a batch's sample count"
            )


def samples_in(batch: Any) -> int:
    """Samples in ``batch``: the length of its first tensor's first dimension.

    Args:
        batch: a tensor, or a tuple/list/dict of them (nested).

    Returns:
        ``len`` of the first tensor, depth first.

    Example:
        >>> samples_in((torch.zeros(8, 3, 32, 32), torch.zeros(8)))
        8
    """
    leaf = _first_tensor(batch)
    if len(leaf.shape) == 0:
        raise ValueError("the batch's first tensor is a scalar: pass batch_size_of= to count its samples")
    return int(leaf.shape[0])


def to_device(batch: Any, device: torch.device, *, copy: bool = False) -> Any:
    """``batch`` with every tensor on ``device`` (the same structure; non-tensors kept).

    Args:
        batch: a tensor or a tuple/list/dict nesting tensors.
        device: where the tensors go.
        copy: clone tensors already on ``device`` too, so the result shares no memory
            with a loader's reused buffers.

    Returns:
        The batch, rebuilt with tuples, lists and dicts of the moved tensors.

    Example:
        >>> images, labels = to_device((torch.zeros(2, 3), torch.zeros(2)), torch.device("cpu"))
    """
    if isinstance(batch, torch.Tensor):
        moved = batch.to(device, non_blocking=True)
        return moved.clone() if copy and moved is batch else moved
    if isinstance(batch, Mapping):
        return {k: to_device(v, device, copy=copy) for k, v in batch.items()}
    if isinstance(batch, (tuple, list)):
        return type(batch)(to_device(v, device, copy=copy) for v in batch)
    return batch


def take(loader: Iterable, count: int) -> Iterator[Any]:
    """``count`` batches from ``loader``, starting a new epoch (``iter(loader)``) each time
    one ends, so a measurement needs no knowledge of the epoch length.

    Args:
        loader: a re-iterable loader.
        count: batches to yield.

    Returns:
        A generator of ``count`` batches.

    Raises:
        ValueError: an epoch yields no batch.

    Example:
        >>> len(list(take([1, 2, 3], 7)))
        7
    """
    taken = 0
    while taken < count:
        empty = True
        for batch in loader:
            empty = False
            yield batch
            taken += 1
            if taken == count:
                return
        if empty:
            raise ValueError("the loader yielded no batch in an epoch")
