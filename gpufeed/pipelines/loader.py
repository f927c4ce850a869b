"""``classification_loader``: the one entry point; it picks the backend at the edge."""

from __future__ import annotations

import os
from collections.abc import Sequence

import torch

from gpufeed.backends import choose_image_backend, resolve_device
from gpufeed.pipelines.base import Augment, ClassificationLoader
from gpufeed.pipelines.options import (
    IMAGENET_MEAN,
    IMAGENET_STD,
    LastBatch,
    LoaderOptions,
    OnError,
    default_shard,
)
from gpufeed.pipelines.sources import read_file_list, scan_image_folder


def classification_loader(
    root: str | os.PathLike[str] | None = None,
    *,
    train: bool,
    batch_size: int,
    size: int = 224,
    backend: str = "auto",
    device: str | torch.device = "auto",
    dtype: torch.dtype = torch.float32,
    layout: str = "NCHW",
    shuffle: bool | None = None,
    seed: int = 0,
    shard_id: int | None = None,
    num_shards: int | None = None,
    last_batch: str | LastBatch = "partial",
    num_workers: int | None = None,
    num_threads: int | None = None,
    on_error: str | OnError = "skip",
    file_list: str | os.PathLike[str] | Sequence[tuple[str, int]] | None = None,
    mean: Sequence[float] = IMAGENET_MEAN,
    std: Sequence[float] = IMAGENET_STD,
    val_resize: int | None = None,
    gpu_augment: Augment | None = None,
) -> ClassificationLoader:
    """An image-classification loader: ``(images, labels)`` batches on the device.

    Train: fused decode + random-resized-crop (area ``0.08..1``, aspect ``3/4..4/3``),
    resize to ``size``, random horizontal flip, normalise. Val: resize the shorter side
    to ``val_resize`` (default ``size / 0.875``: 256 for 224), centre crop, normalise.

    Args:
        root: ImageFolder-style tree ``root/<class>/<image>`` (classes sorted by name),
            or the base folder of ``file_list``.
        train: training augmentation (and shuffling by default) or validation transforms.
        batch_size: samples per batch.
        size: output height and width.
        backend: ``"dali"`` (GPU, or CPU-only mode without a GPU), ``"torch"``
            (DataLoader + torchvision), or ``"auto"``: DALI when installed (see
            ``loader.choice.reason`` and ``gpufeed doctor``).
        device: ``"cuda"``, ``"cuda:N"``, ``"cpu"``, ``"auto"`` (CUDA when available) or a
            ``torch.device``.
        dtype: ``torch.float32`` / ``torch.float16`` (normalised) or ``torch.uint8``
            (raw 0..255 pixels, e.g. for ``gpu_augment`` to normalise later).
        layout: ``"NCHW"`` or ``"NHWC"``.
        shuffle: True, False or None (default: True when training, False for validation).
        seed: shuffling and augmentation seed, a non-negative int; the same seed repeats
            a run. Must be the same on every shard.
        shard_id, num_shards: this process's shard; default from torch.distributed or
            torchrun's ``RANK`` / ``WORLD_SIZE``, else 0 of 1.
        last_batch: ``"partial"``, ``"drop"`` or ``"fill"`` (see :class:`LastBatch`).
        num_workers, num_threads: DataLoader workers (torch) or DALI threads; either
            name works for either backend; default: all usable cores.
        on_error: ``"skip"`` (leave undecodable files out, list them in
            ``loader.skipped``, warn once) or ``"raise"`` (:class:`BadImageError`).
        file_list: instead of scanning ``root``, a DALI-style list file
            (``relative/path label`` per line) or ``(path, label)`` pairs.
        mean, std: normalisation in [0, 1] units (ImageNet's by default).
        val_resize: validation's shorter side before the centre crop.
        gpu_augment: ``f(images, labels) -> (images, labels)`` applied to every batch on
            the device after loading (e.g. a :mod:`gpufeed.gpu_transforms.augment` stage);
            needs ``dtype=torch.uint8``, ``layout="NCHW"``. The loader's own train
            augmentation (crop, flip) still runs first: use ``train=False`` when the stage
            crops, with ``shuffle=True`` (validation does not shuffle by default, so the
            batches would come class by class). A stage built without a seed is reseeded
            by the loader every epoch from ``(seed, shard_id, epoch)``, so ``set_epoch``
            repeats its draws too; one given ``seed=`` keeps its own stream.

    Returns:
        A :class:`ClassificationLoader`; with the DALI backend,
        ``loader.dali_iterator()`` gives a real ``DALIClassificationIterator``.

    Example:
        >>> loader = classification_loader("data/train", train=True, batch_size=256)
        >>> for images, labels in loader:   # (256, 3, 224, 224) float32, (256,) int64
        ...     loss = torch.nn.functional.cross_entropy(model(images), labels)
    """
    if num_workers is not None and num_threads is not None and num_workers != num_threads:
        raise ValueError(f"num_workers={num_workers} and num_threads={num_threads} disagree; give one")
    if gpu_augment is not None and (dtype != torch.uint8 or layout != "NCHW"):
        raise ValueError(
            "gpu_augment needs the raw pixels: pass dtype=torch.uint8 and layout='NCHW' "
            f"(got dtype={dtype}, layout={layout!r}) and let the stage normalise"
        )
    if file_list is not None:
        samples = read_file_list(file_list, root)
    elif root is None:
        raise ValueError("give root (an ImageFolder tree) or file_list")
    else:
        samples = scan_image_folder(root)
    default_id, default_count = default_shard()
    if (shard_id is None) != (num_shards is None) and default_count > 1:
        # Half explicit, half from the launcher: RANK=1 with num_shards=4 would silently read
        # shard 1 of 4 of a split the other ranks do not share.
        given = f"shard_id={shard_id}" if shard_id is not None else f"num_shards={num_shards}"
        raise ValueError(f"{given} was given but not its partner, which would come from the launcher "
                         f"(rank {default_id} of {default_count}); pass both shard_id and num_shards, or neither")
    options = LoaderOptions(
        train=train, batch_size=batch_size, size=size, dtype=dtype, layout=layout, shuffle=shuffle,
        seed=seed, shard_id=default_id if shard_id is None else shard_id,
        num_shards=default_count if num_shards is None else num_shards,
        last_batch=LastBatch(last_batch), num_workers=num_workers if num_workers is not None else num_threads,
        on_error=OnError(on_error), mean=tuple(mean), std=tuple(std), val_resize=val_resize,
    )
    torch_device = resolve_device(device)
    choice = choose_image_backend(backend, torch_device)
    if choice.name == "dali":
        from gpufeed.pipelines.dali_loader import DaliLoader

        return DaliLoader(samples, options, torch_device, choice, gpu_augment)
    from gpufeed.pipelines.torch_loader import TorchLoader

    return TorchLoader(samples, options, torch_device, choice, gpu_augment)
