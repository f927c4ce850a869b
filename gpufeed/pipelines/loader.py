"""``classification_loader``: the one entry point; it picks the backend at the edge."""

from __future__ import annotations

import os
from collections.abc import Sequence
from dataclasses import fields

import torch

from gpufeed.backends import choose_image_backend, resolve_device
from gpufeed.datasets.samples import SampleSource
from gpufeed.pipelines.base import Augment, ClassificationLoader
from gpufeed.pipelines.options import (
    DEFAULT_SHUFFLE_BUFFER,
    IMAGENET_MEAN,
    IMAGENET_STD,
    Cache,
    LastBatch,
    LoaderOptions,
    OnError,
    resolve_shard,
)
from gpufeed.pipelines.sources import open_source


def classification_loader(
    source: str | os.PathLike[str] | Sequence[str] | SampleSource | None = None,
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
    on_error: str | OnError = "skip",
    file_list: str | os.PathLike[str] | Sequence[tuple[str, int]] | None = None,
    mean: Sequence[float] = IMAGENET_MEAN,
    std: Sequence[float] = IMAGENET_STD,
    val_resize: int | None = None,
    scale: Sequence[float] = (0.08, 1.0),
    ratio: Sequence[float] = (3 / 4, 4 / 3),
    gpu_augment: Augment | None = None,
    shuffle_buffer: int = DEFAULT_SHUFFLE_BUFFER,
    cache: str | Cache = "none",
    image_key: str | Sequence[str] | None = None,
    label_key: str | None = None,
) -> ClassificationLoader:
    """An image-classification loader: ``(images, labels)`` batches on the device.

    Train: fused decode + random-resized-crop (area ``scale``, aspect ``ratio``), resize
    to ``size``, random horizontal flip, normalise. Val: resize the shorter side to
    ``val_resize`` (default ``size / 0.875`` rounded down, as timm's eval: 256 for 224,
    182 for 160), centre crop, normalise.

    Args:
        source: where the images are (:func:`~gpufeed.pipelines.sources.open_source`):
            an ImageFolder-style tree ``root/<class>/<image>`` (classes sorted by name;
            the files torchvision's ``ImageFolder`` would load); WebDataset or TFRecord
            shards: a pattern (``"train-{000000..000127}.tar"``, a glob), a file, a
            folder holding only shards (no class subfolders; read sorted by name) or a
            list; a folder written by ``gpufeed convert`` (shards or a raw cache); the
            base folder of ``file_list``; or a
            :class:`~gpufeed.datasets.samples.SampleSource`.
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
        num_workers: DataLoader worker processes (torch) or DALI threads, an int from 0
            to 1024; default: all usable cores. On a raw cache (decoded pixels: no decode, only crop and
            resize) the torch backend runs that many threads in this process instead,
            a few batches ahead of the consumer.
        on_error: ``"skip"`` (leave undecodable files out, list them in
            ``loader.skipped``, warn once) or ``"raise"`` (:class:`BadImageError`).
        file_list: instead of scanning ``root``, a DALI-style list file
            (``relative/path label`` per line) or ``(path, label)`` pairs.
        mean, std: normalisation in [0, 1] units (ImageNet's by default).
        val_resize: validation's shorter side before the centre crop, an int >= ``size``;
            default :func:`~gpufeed.pipelines.options.default_val_resize` (``size / 0.875``
            rounded down).
        scale, ratio: the train crop's area as a fraction of the image, ``(lo, hi)`` in
            ``(0, 1]``, and its aspect ratio (width / height, drawn log-uniformly), two
            numbers each, as in torchvision's ``RandomResizedCrop``.
        gpu_augment: ``f(images, labels) -> (images, labels)`` applied to every batch on
            the device after loading (e.g. a :mod:`gpufeed.gpu_transforms.augment` stage);
            needs ``dtype=torch.uint8``, ``layout="NCHW"``. The loader's own train
            augmentation (crop, flip) still runs first: use ``train=False`` when the stage
            crops, with ``shuffle=True`` (validation does not shuffle by default, so the
            batches would come class by class). A stage built without a seed is reseeded
            by the loader before every batch from ``(seed, shard_id, epoch, batch)``, so a
            run resumed by ``set_epoch`` or ``load_state_dict`` repeats its draws too; one
            given ``seed=`` keeps its own stream.
        shuffle_buffer: for shards, the window samples are mixed in: shuffling reads
            shard files whole in a random order and mixes each sample within this many
            neighbours (WebDataset's shuffle buffer), so reads stay sequential.
        cache: ``"none"`` or ``"ram"``: read the dataset (encoded bytes, or a raw
            cache's pixels) once into shared memory that every worker and thread reads,
            refused up front when it does not fit in the memory available.
        image_key, label_key: shards only: which members hold the image and the label.
            WebDataset: member extensions, as in ``.to_tuple("jpg;png", "cls")``:
            ``image_key`` ``"jpg"``, ``"jpg;png"`` or a list (default: any image
            extension), ``label_key`` ``"cls"`` (default), ``"label"``, ``"txt"`` ...
            (a decimal integer as text), or ``"json:FIELD"`` (an integer field of the
            sample's ``.json``). TFRecord: Example features, default ``"image/encoded"``
            and ``"image/class/label"``; TensorFlow Datasets' sets use ``"image"`` and
            ``"label"``. Both backends, and ``dali_iterator()``'s DALI reader, read
            these members.

    Returns:
        A :class:`ClassificationLoader`; with the DALI backend,
        ``loader.dali_iterator()`` gives a real ``DALIClassificationIterator``.
        ``loader.state_dict()`` after any batch, loaded into a new loader with
        ``load_state_dict``, resumes mid-epoch.

    Example:
        >>> loader = classification_loader("data/train", train=True, batch_size=256)
        >>> for images, labels in loader:   # (256, 3, 224, 224) float32, (256,) int64
        ...     loss = torch.nn.functional.cross_entropy(model(images), labels)
    """
    arguments = dict(locals())  # first thing: the arguments as given, nothing else
    if gpu_augment is not None and (dtype != torch.uint8 or layout != "NCHW"):
        raise ValueError(
            "gpu_augment needs the raw pixels: pass dtype=torch.uint8 and layout='NCHW' "
            f"(got dtype={dtype}, layout={layout!r}) and let the stage normalise"
        )
    samples = open_source(source, file_list=file_list, image_key=image_key, label_key=label_key)
    if Cache.parse(cache, "cache") == Cache.RAM:
        from gpufeed.datasets.ram_cache import RamCache

        samples = RamCache(samples)
    settings = {f.name: arguments[f.name] for f in fields(LoaderOptions)}
    settings["shard_id"], settings["num_shards"] = resolve_shard(shard_id, num_shards)
    options = LoaderOptions(**settings)
    torch_device = resolve_device(device)
    choice = choose_image_backend(backend, torch_device)
    if choice.name == "dali":
        from gpufeed.pipelines.dali_loader import DaliLoader

        return DaliLoader(samples, options, torch_device, choice, gpu_augment)
    from gpufeed.pipelines.torch_loader import TorchLoader

    return TorchLoader(samples, options, torch_device, choice, gpu_augment)
