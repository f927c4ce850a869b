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
from nvidia.dali.pipeline import Pipeline

from gpufeed.pipelines.feeds import FileFeed
from gpufeed.pipelines.options import LoaderOptions
from gpufeed.pipelines.seeds import dali_seed

_DALI_DTYPE = {"torch.float32": types.FLOAT, "torch.float16": types.FLOAT16, "torch.uint8": types.UINT8}


def _round_half_even(x):
    """Python's round() for DALI nodes holding halves of integers (torchvision's crop offsets)."""
    k = dmath.floor(x)
    odd_k = k - 2.0 * dmath.floor(k / 2.0)
    return k + (x - k) * 2.0 * odd_k  # x - k is 0 or 0.5: .5 rounds k up only when k is odd


def _resize_and_centre_crop(encoded, images, shorter: int, size: int):
    """Validation geometry computed exactly as torchvision does it, so the kit's val batches
    match a torchvision reference pixel for pixel in position: the longer side is
    floor(shorter * long / short) and the crop offset is round((side - size) / 2)."""
    shape = fn.peek_image_shape(encoded)
    h, w = fn.cast(shape[0], dtype=types.FLOAT), fn.cast(shape[1], dtype=types.FLOAT)
    h_short = fn.cast(h <= w, dtype=types.FLOAT)
    out_h = h_short * shorter + (1.0 - h_short) * dmath.floor(shorter * h / w)
    out_w = (1.0 - h_short) * shorter + h_short * dmath.floor(shorter * w / h)
    images = fn.resize(images, resize_y=out_h, resize_x=out_w)
    top = _round_half_even((out_h - size) / 2.0)
    left = _round_half_even((out_w - size) / 2.0)
    return fn.slice(images, fn.stack(top, left), np.array([size, size], np.float32),
                    axis_names="HW", normalized_anchor=False, normalized_shape=False)


def build_pipeline(source: Callable | FileFeed | None, options: LoaderOptions, device_id: int | None,
                   *, batch_size: int | None = None, prefetch: int = 2, decode_only: bool = False,
                   stream: tuple[int, ...] = ()) -> Pipeline:
    """Build the classification pipeline.

    Args:
        source: the ``external_source`` (a :class:`FileFeed`), or None to feed by name
            (``"encoded"``, ``"label"``) with ``feed_input``.
        options: the loader settings (train or val, size, dtype, layout, mean/std).
        device_id: CUDA device for GPU decoding (``device="mixed"``: the hardware JPEG
            decoder where the GPU has one), or None for DALI's CPU-only mode.
        batch_size: maximum batch size (default ``options.batch_size``).
        prefetch: batches DALI prepares ahead.
        decode_only: stop after decoding (train: the random crop's region, randomly
            flipped; val: the whole image), leaving variable-size uint8 HWC images for
            the caller to resize (see :class:`gpufeed.pipelines.dali_loader.DaliLoader`).
        stream: which random stream the pipeline draws from, mixed into its seed with
            ``options.seed`` and the shard: the loader passes ``(epoch,)`` for an epoch's
            pipeline and ``(epoch, batch)`` for one rebuilt mid-epoch, so neither replays
            another's random crops.

    Returns:
        A built pipeline with outputs ``(images, labels)``.
    """
    o = options
    decoder = "cpu" if device_id is None else "mixed"
    # GPU decoding: preallocate (sizes from DALI's ResNet-50 example) so the first epochs
    # do not stall on buffer growth.
    padding = {} if device_id is None else {"device_memory_padding": 211_025_920,
                                            "host_memory_padding": 140_544_512}
    std = [255.0 * s for s in o.std] if o.normalizes else [1.0, 1.0, 1.0]
    mean = [255.0 * m for m in o.mean] if o.normalizes else [0.0, 0.0, 0.0]

    @pipeline_def(enable_conditionals=False)
    def classification():
        if source is None:
            encoded = fn.external_source(name="encoded", dtype=types.UINT8, ndim=1)
            labels = fn.external_source(name="label", dtype=types.INT32, ndim=0)
        else:
            encoded, labels = fn.external_source(
                source=source, num_outputs=2, dtype=[types.UINT8, types.INT32], ndim=[1, 0],
                cycle="raise",  # StopIteration ends the epoch; reset() calls iter() for the next
            )
        if o.train:
            # Fused decode + random crop: only the crop's region of each JPEG is decoded.
            images = fn.decoders.image_random_crop(
                encoded, device=decoder, output_type=types.RGB,
                random_area=list(o.scale), random_aspect_ratio=list(o.ratio), num_attempts=10, **padding,
            )
            mirror = fn.random.coin_flip(probability=0.5)
            if decode_only:
                return fn.flip(images, horizontal=mirror), labels
            images = fn.resize(images, resize_x=o.size, resize_y=o.size)
        else:
            images = fn.decoders.image(encoded, device=decoder, output_type=types.RGB, **padding)
            if decode_only:
                return images, labels
            images = _resize_and_centre_crop(encoded, images, o.resize_shorter, o.size)
            mirror = 0
        images = fn.crop_mirror_normalize(
            images, dtype=_DALI_DTYPE[str(o.dtype)], output_layout="CHW" if o.layout == "NCHW" else "HWC",
            mean=mean, std=std, mirror=mirror,
        )
        return images, labels

    pipe = classification(
        batch_size=batch_size or o.batch_size, num_threads=max(1, o.workers), device_id=device_id,
        seed=dali_seed(o.seed, o.shard_id, *stream), prefetch_queue_depth=prefetch,
    )
    pipe.build()
    return pipe
