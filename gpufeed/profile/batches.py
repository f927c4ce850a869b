"""What the meter needs to know about a batch, whatever its shape: how many samples it
holds, how to put it on a device, and how to draw a fixed number of batches from a loader.

A batch is a tensor, or a tuple/list/dict nesting tensors (``(images, labels)``, DALI's
``[{"data": ..., "label": ...}]``); its first tensor (depth first) holds one row per sample.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Mapping
from typing import Any

import torch


def _count(node: Any) -> int | None:
    """Samples in ``node`` from its first array-like leaf, depth first; None if it holds none."""
    if hasattr(node, "shape"):
        if len(node.shape) == 0:
            raise ValueError("the batch's first tensor is a scalar: pass batch_size_of= to count its samples")
        return int(node.shape[0])
    if isinstance(node, Mapping):
        children = node.values()
    elif isinstance(node, (tuple, list)):
        children = node
    else:
        return None
    for child in children:
        found = _count(child)
        if found is not None:
            return found
    return None


def samples_in(batch: Any) -> int:
    """Samples in ``batch``: the first dimension of its first tensor, searched depth first
    (entries without one, such as a list of file names, are passed over).

    A list of one tensor per sample (detection's images of different sizes) cannot be
    told from a list of batched inputs (``[images, metadata]``) by shape: pass
    ``batch_size_of=lambda b: len(b[0])`` to the meter for such batches.

    Args:
        batch: a tensor, or a tuple/list/dict of them (nested): ``(images, labels)``,
            ``{"path": [...], "image": ...}``, DALI's ``[{"data": ..., "label": ...}]``.

    Returns:
        The sample count.

    Raises:
        ValueError: no tensor in the batch, or its first tensor is a scalar.

    Example:
        >>> samples_in((torch.zeros(8, 3, 32, 32), torch.zeros(8)))
        8
        >>> samples_in({"path": ["a.jpg", "b.jpg"], "image": torch.zeros(2, 3, 8, 8)})
        2
    """
    found = _count(batch)
    if found is None:
        raise ValueError(
            f"cannot count the samples of a {type(batch).__name__} batch (no tensor in it): "
            "pass batch_size_of=, a function that returns a batch's sample count"
        )
    return found


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
        # Asynchronous only towards a GPU: a copy to the host with non_blocking returns
        # before the data has arrived, and nothing here waits for it.
        moved = batch.to(device, non_blocking=torch.device(device).type == "cuda")
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
