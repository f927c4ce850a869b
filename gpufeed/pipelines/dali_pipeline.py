"""The kit's DALI pipeline: encoded files in, a normalised crop out, on the GPU or CPU.

Importing this module imports DALI; only the DALI backend does, after the backend
choice, so torch-only installs never need it.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
import nvidia.dali.fn as fn
import nvidia.dali.types as types
from nvidia.dali import math as dmath
from nvidia.dali import pipeline_def
from nvidia.dali.data_node import DataNode
from nvidia.dali.pipeline import Pipeline

from gpufeed.pipelines.feeds import FileFeed
from gpufeed.pipelines.options import LoaderOptions
from gpufeed.pipelines.seeds import dali_seed

_DALI_DTYPE = {"torch.float32": types.FLOAT, "torch.float16": types.FLOAT16, "torch.uint8": types.UINT8}


def _round_half_even(x: DataNode) -> DataNode:
    """Python's round() for DALI nodes holding halves of integers (torchvision's crop offsets)."""
    k = dmath.floor(x)
    odd_k = k - 2.0 * dmath.floor(k / 2.0)
    return k + (x - k) * 2.0 * odd_k  # x - k is 0 or 0.5: .5 rounds k up only when k is odd


def _resize_and_centre_crop(shape: DataNode, images: DataNode, shorter: int, size: int) -> DataNode:
    """Validation geometry computed exactly as torchvision does it, so the kit's val batches
    match a torchvision reference pixel for pixel in position: the longer side is
    floor(shorter * long / short) and the crop offset is round((side - size) / 2).
    ``shape``: the images' ``(H, W, C)``."""
    h, w = fn.cast(shape[0], dtype=types.FLOAT), fn.cast(shape[1], dtype=types.FLOAT)
    h_short = fn.cast(h <= w, dtype=types.FLOAT)
    out_h = h_short * shorter + (1.0 - h_short) * dmath.floor(shorter * h / w)
    out_w = (1.0 - h_short) * shorter + h_short * dmath.floor(shorter * w / h)
    images = fn.resize(images, resize_y=out_h, resize_x=out_w)
    top = _round_half_even((out_h - size) / 2.0)
    left = _round_half_even((out_w - size) / 2.0)
    # The crop's shape a CPU constant, as its anchor is: a bare array as an input of a
    # slice of GPU images would be a GPU constant, which a slice's shape cannot be.
    shape = types.Constant(np.array([size, size], np.float32), device="cpu")
    return fn.slice(images, fn.stack(top, left), shape,
                    axis_names="HW", normalized_anchor=False, normalized_shape=False)


#: The train pipeline's inputs, in the order :class:`FileFeed` yields them (by name when
#: fed with ``feed_input``): encoded bytes, label, crop start (top, left), crop shape
#: (h, w) and horizontal flip. Validation takes the first two.
TRAIN_INPUTS = (("encoded", types.UINT8, 1), ("label", types.INT32, 0), ("start", types.INT32, 1),
                ("shape", types.INT32, 1), ("flip", types.INT32, 0))
#: Training inputs of decoded pixels (a raw cache): the feed sends each crop window's pixels
#: alone, so only its flip is left to apply.
PIXEL_TRAIN_INPUTS = (("encoded", types.UINT8, 3), ("label", types.INT32, 0), ("flip", types.INT32, 0))


def _peek_args() -> dict[str, bool]:
    """``peek_image_shape``'s arguments: the stored (unrotated) shape, as the decoders give
    it. DALI 2.x applied EXIF orientation by default (a portrait phone photo's validation
    resize was computed rotated and squashed it); DALI 1.x has no such argument and
    applies none."""
    from nvidia.dali import backend

    has = backend.GetSchema("PeekImageShape").HasArgument("adjust_orientation")
    return {"adjust_orientation": False} if has else {}


_PEEK_ARGS = _peek_args()


def classification_outputs(encoded: DataNode, labels: DataNode, options: LoaderOptions, device_id: int | None, *,
                           window: tuple[DataNode | None, DataNode | None, DataNode] | None = None,
                           decode_only: bool = False,
                           pixels: bool = False) -> tuple[DataNode, DataNode]:
    """The kit's graph after its inputs: encoded files and labels -> ``(images, labels)``.

    One graph whatever feeds it: the kit's ``external_source`` (:func:`build_pipeline`)
    or DALI's own shard readers (:mod:`gpufeed.pipelines.dali_readers`). Call it inside
    a pipeline definition.

    Args:
        encoded: DALI node of encoded image files (1-D uint8 per sample), or of decoded
            ``(H, W, 3)`` uint8 pixels with ``pixels``.
        labels: DALI node of labels, returned with shape ``(1,)`` per sample: ``(N, 1)``
            batches, as DALI's readers give them to training scripts written for DALI.
        options: the loader settings (train or val, size, dtype, layout, mean/std,
            and for DALI-drawn crops ``scale`` and ``ratio``).
        device_id: CUDA device for GPU decoding, or None for DALI's CPU-only mode.
        window: training only: the per-sample crop ``(start, shape, flip)`` nodes the
            feed drew (:func:`gpufeed.pipelines.feeds.crop_inputs`); with ``pixels``,
            ``(None, None, flip)``: the feed already cut the window. None: DALI draws
            the crop (``fn.decoders.image_random_crop`` over ``scale`` and ``ratio``) and
            the flip (``fn.random.coin_flip``) from the pipeline's seed. Those draws are
            DALI's, not the loader's (other windows for the same seed), and they repeat
            only from a DALI checkpoint of the pipeline.
        decode_only: stop after decoding (see :func:`build_pipeline`).
        pixels: ``encoded`` holds decoded pixels: no decoder; for training, each sample is
            its crop window's pixels already (needs ``window`` for the flip).

    Returns:
        The ``(images, labels)`` nodes.

    Raises:
        ValueError: ``pixels`` for training without a ``window``.
    """
    o = options
    # (N, 1), as DALI's own readers give labels: scripts written for DALI index or squeeze
    # the last axis (label.squeeze(-1) made a 1-sample last batch's labels 0-d).
    labels = fn.reshape(labels, shape=[1])
    decoder = "cpu" if device_id is None else "mixed"
    # EXIF orientation is not applied, as in the torch backend (torchvision and PIL leave
    # it too), so both decode a photo alike. nvJPEG's buffer paddings stay DALI's defaults:
    # the larger ones of DALI's ResNet-50 example (211 MB device, 140 MB pinned host) are
    # allocated per decoding thread, and the loader uses every core (16 threads: GBs).
    decode_args = {"device": decoder, "output_type": types.RGB, "adjust_orientation": False}
    std = [255.0 * s for s in o.std] if o.normalizes else [1.0, 1.0, 1.0]
    mean = [255.0 * m for m in o.mean] if o.normalizes else [0.0, 0.0, 0.0]
    if pixels:  # decoded ahead of time: to the GPU as they are
        encoded = fn.reshape(encoded, layout="HWC")
        decoded = encoded if device_id is None else encoded.gpu()
    if o.train:
        if window is not None:
            start, shape, mirror = window
            if pixels:  # the window's pixels, cut by the feed: one copy, not a copy and a slice
                images = decoded
            else:  # fused decode + crop: only the crop's region of each JPEG is decoded
                images = fn.decoders.image_slice(encoded, start=start, shape=shape, axis_names="HW", **decode_args)
        elif pixels:
            raise ValueError("decoded pixels need the feed's crop windows (window=...)")
        else:  # no Python feed to draw windows: DALI draws them, decoding only the window too
            images = fn.decoders.image_random_crop(encoded, random_area=list(o.scale),
                                                   random_aspect_ratio=list(o.ratio), **decode_args)
            mirror = fn.random.coin_flip(probability=0.5, dtype=types.INT32)
        if decode_only:
            return fn.flip(images, horizontal=mirror), labels
        images = fn.resize(images, resize_x=o.size, resize_y=o.size)
    else:
        images = decoded if pixels else fn.decoders.image(encoded, **decode_args)
        if decode_only:
            return images, labels
        shape = encoded.shape() if pixels else fn.peek_image_shape(encoded, **_PEEK_ARGS)
        images = _resize_and_centre_crop(shape, images, o.resize_shorter, o.size)
        mirror = 0
    images = fn.crop_mirror_normalize(
        images, dtype=_DALI_DTYPE[str(o.dtype)], output_layout="CHW" if o.layout == "NCHW" else "HWC",
        mean=mean, std=std, mirror=mirror,
    )
    return images, labels


def build_pipeline(source: Callable | FileFeed | None, options: LoaderOptions, device_id: int | None,
                   *, batch_size: int | None = None, prefetch: int = 2, decode_only: bool = False,
                   stream: tuple[int, ...] = (), pixels: bool = False) -> Pipeline:
    """Build the classification pipeline.

    Args:
        source: the ``external_source`` (a :class:`FileFeed`), or None to feed by name
            (:data:`TRAIN_INPUTS`' names; ``"encoded"`` and ``"label"`` for validation)
            with ``feed_input``.
        options: the loader settings (train or val, size, dtype, layout, mean/std).
        device_id: CUDA device for GPU decoding (``device="mixed"``: the hardware JPEG
            decoder where the GPU has one), or None for DALI's CPU-only mode.
        batch_size: maximum batch size (default ``options.batch_size``).
        prefetch: batches DALI prepares ahead.
        decode_only: stop after decoding (train: the crop's region, flipped as asked;
            val: the whole image), leaving variable-size uint8 HWC images for the caller
            to resize (see :class:`gpufeed.pipelines.dali_loader.DaliLoader`).
        stream: mixed into the pipeline's seed with ``options.seed`` and the shard. The
            pipeline has no random operator (the feed draws the crops), so the seed only
            keeps pipelines apart should one be added.
        pixels: the feed gives decoded ``(H, W, 3)`` uint8 pixels (a raw cache), not
            encoded files: no decoder; for training each crop window's pixels and its
            flip (:data:`PIXEL_TRAIN_INPUTS`).

    Returns:
        A built pipeline with outputs ``(images, labels)``.
    """
    o = options
    inputs = TRAIN_INPUTS if o.train else TRAIN_INPUTS[:2]
    if pixels:
        inputs = PIXEL_TRAIN_INPUTS if o.train else PIXEL_TRAIN_INPUTS[:2]

    @pipeline_def(enable_conditionals=False)
    def classification() -> tuple[DataNode, DataNode]:
        if source is None:
            nodes = [fn.external_source(name=name, dtype=dtype, ndim=ndim) for name, dtype, ndim in inputs]
        else:
            nodes = fn.external_source(
                source=source, num_outputs=len(inputs), dtype=[d for _, d, _ in inputs],
                ndim=[n for _, _, n in inputs],
                cycle="raise",  # StopIteration ends the epoch; reset() calls iter() for the next
            )
        window = ((None, None, nodes[2]) if pixels else tuple(nodes[2:])) if o.train else None
        return classification_outputs(nodes[0], nodes[1], o, device_id, window=window,
                                      decode_only=decode_only, pixels=pixels)

    pipe = classification(
        batch_size=batch_size or o.batch_size, num_threads=max(1, o.workers), device_id=device_id,
        seed=dali_seed(o.seed, o.shard_id, *stream), prefetch_queue_depth=prefetch,
    )
    pipe.build()
    return pipe
