"""Input validation for the augmentation stage: clear errors that name the argument.

Every check here runs before any work, so a bad batch fails loudly instead of coming out
silently misaligned. The value-range check costs one reduction and one device sync per
batch; ``GpuAugment(check_inputs=False)`` skips the data-dependent checks once a pipeline
is known to be sound.
"""

from __future__ import annotations

import math
import numbers
import warnings
from collections.abc import Sequence

import numpy as np
import torch

#: Image dtypes the stage accepts.
IMAGE_DTYPES = (torch.uint8, torch.float16, torch.bfloat16, torch.float32, torch.float64)

#: Value ranges a float batch may be declared in.
VALUE_RANGES = ((0.0, 1.0), (0.0, 255.0))

# Bilinear resampling and float rounding move values by a hair; a range check must not
# refuse a batch that a previous float op left at 1.0000001.
_RANGE_SLACK = 1e-3


def check_value_range(value_range: Sequence[float]) -> tuple[float, float]:
    """Validate the declared range of float inputs; returns it as a tuple of floats."""
    try:
        vr = (float(value_range[0]), float(value_range[1]))
    except (TypeError, IndexError, ValueError):
        raise TypeError(f"value_range must be (0, 1) or (0, 255), got {value_range!r}") from None
    if len(value_range) != 2 or vr not in VALUE_RANGES:
        raise ValueError(f"value_range must be (0, 1) or (0, 255), got {value_range!r}")
    return vr


def check_images(images: object) -> torch.Tensor:
    """Check the shape and dtype of an image batch (cheap: no data is read).

    Raises:
        TypeError: not a tensor, or an unsupported dtype.
        ValueError: not (B, C, H, W), an empty batch, a zero-sized image, or a batch that
            looks channels-last.
    """
    if not isinstance(images, torch.Tensor):
        raise TypeError(f"images must be a torch.Tensor (B, C, H, W), got {type(images).__name__}")
    if images.ndim != 4:
        hint = " (one image? use images.unsqueeze(0))" if images.ndim == 3 else ""
        raise ValueError(f"images must have shape (B, C, H, W), got {tuple(images.shape)}{hint}")
    if images.dtype not in IMAGE_DTYPES:
        names = ", ".join(str(d).replace("torch.", "") for d in IMAGE_DTYPES)
        hint = ""
        if images.dtype in (torch.uint16, torch.int16, torch.int32, torch.uint32, torch.int64):
            # A 16-bit PNG or TIFF comes out of PIL / numpy as uint16 (or int32 for mode "I").
            hint = ("; a 16-bit image (PNG, TIFF) must be scaled to float first, e.g. "
                    "images.float() / 65535 (value_range (0, 1))")
        raise TypeError(f"images dtype must be one of {names}; got {images.dtype}{hint}")
    b, c, h, w = images.shape
    if b == 0:
        raise ValueError("images is an empty batch (B=0); the stage needs at least one image")
    if h == 0 or w == 0 or c == 0:
        raise ValueError(f"images has a zero-sized dimension: {tuple(images.shape)}")
    if c > 4 and w in (1, 3, 4):
        raise ValueError(
            f"images looks channels-last {tuple(images.shape)}; pass (B, C, H, W), "
            "e.g. images.permute(0, 3, 1, 2)"
        )
    return images


def check_channels(images: torch.Tensor, needed: int | tuple[int, ...], what: str, why: str = "") -> None:
    """Raise if ``images`` does not have a channel count an op takes (one, or any of several);
    ``what`` names the op, ``why`` (optional) the argument that needs them."""
    counts = needed if isinstance(needed, tuple) else (needed,)
    c = images.shape[1]
    if c not in counts:
        hint = "; RGBA or CMYK? convert to RGB first, e.g. PIL's image.convert('RGB')" if c == 4 and 3 in counts else ""
        raise ValueError(f"images has {c} channels but {what} needs {' or '.join(map(str, counts))}"
                         f"{f' ({why})' if why else ''}{hint}")


def check_float_values(images: torch.Tensor, value_range: tuple[float, float]) -> None:
    """Refuse NaN/inf and values outside the declared range of a float batch.

    The classic trap is a float batch in [0, 255] handed over as if in [0, 1]: every
    colour op would then clamp it to white. One ``aminmax`` catches it (NaN propagates
    through max, inf fails the range test), at the price of one device sync.
    """
    lo, hi = torch.stack(torch.aminmax(images.detach())).float().tolist()  # the one sync
    if not (math.isfinite(lo) and math.isfinite(hi)):
        bad = "NaN" if math.isnan(lo) or math.isnan(hi) else "inf"
        raise ValueError(f"images contains {bad} values; the stage needs finite pixels")
    top = value_range[1]
    if lo < value_range[0] - _RANGE_SLACK * top or hi > top * (1 + _RANGE_SLACK):
        hint = ""
        if lo < 0:  # checked first: a normalised batch can also exceed 1.5
            hint = " (already normalised? the stage needs raw pixels; put Normalize in the stage)"
        elif value_range == (0.0, 1.0) and hi > 1.5:
            hint = " (looks like a 0..255 batch: pass value_range=(0, 255) or divide by 255)"
        raise ValueError(
            f"images has float values in [{lo:.4g}, {hi:.4g}] but value_range={value_range}{hint}"
        )


def check_same_device(images: torch.Tensor, name: str, value: torch.Tensor) -> None:
    """Raise if a target lives on another device than the images."""
    if value.device != images.device:
        raise ValueError(
            f"{name} is on {value.device} but images is on {images.device}; move them together"
        )


def check_labels(images: torch.Tensor, labels: torch.Tensor, mixed: str | None = None) -> torch.Tensor:
    """Check labels against the images, on their device: one row per image.

    Labels the stage only passes through (no mixing op: ``mixed`` is None) may be any
    per-sample tensor, (B,) or (B, ...) of any dtype (regression targets, multi-hot
    vectors, several tasks' ids). Labels that ``mixed`` (the mixing ops' names) mixes must
    be int (B,) class ids or float (B, num_classes) soft labels.
    """
    if not isinstance(labels, torch.Tensor):
        raise TypeError(f"labels must be a torch.Tensor, got {type(labels).__name__}")
    check_same_device(images, "labels", labels)
    b = images.shape[0]
    if labels.ndim == 0 or labels.shape[0] != b:
        raise ValueError(f"labels must have shape (B={b}, ...), one row per image, got {tuple(labels.shape)}")
    if mixed is None:
        return labels
    if labels.is_floating_point():
        if labels.ndim != 2:
            raise ValueError(f"{mixed} needs int (B={b},) class ids or float (B={b}, num_classes) soft labels, got "
                             f"float labels of shape {tuple(labels.shape)} (float class ids? pass them as .long())")
    elif labels.ndim != 1:
        raise ValueError(f"{mixed} needs int (B={b},) class ids or float (B={b}, num_classes) soft labels, got "
                         f"{labels.dtype} labels of shape {tuple(labels.shape)} (multi-hot labels? pass them as "
                         f".float())")
    elif labels.dtype == torch.bool:
        raise TypeError(f"{mixed} needs int class ids or float soft labels, got bool labels")
    return labels


def check_class_ids(labels: torch.Tensor, num_classes: int) -> None:
    """Refuse int class ids outside ``[0, num_classes)``, which a mixing op one-hot encodes
    (float soft labels pass: their width is checked where they are mixed).

    On a GPU ``one_hot`` leaves the range to a device-side assert, which ends the
    process's CUDA context; one ``aminmax`` and one device sync catch it first.
    """
    if labels.is_floating_point() or labels.numel() == 0:
        return
    lo, hi = torch.stack(torch.aminmax(labels)).tolist()  # one sync
    if lo < 0 or hi >= num_classes:
        raise ValueError(f"labels must be in [0, num_classes={num_classes}), got values in [{lo}, {hi}]")


def check_masks(images: torch.Tensor, masks: torch.Tensor, fill: float | None = None) -> torch.Tensor:
    """Check segmentation masks: (B, H, W) or (B, K, H, W) matching the images' size, and
    that ``fill`` (the stage's ``mask_fill``) is a value their dtype holds."""
    if not isinstance(masks, torch.Tensor):
        raise TypeError(f"masks must be a torch.Tensor, got {type(masks).__name__}")
    check_same_device(images, "masks", masks)
    b, _, h, w = images.shape
    if masks.ndim not in (3, 4) or masks.shape[0] != b or tuple(masks.shape[-2:]) != (h, w):
        raise ValueError(
            f"masks must have shape (B={b}, H={h}, W={w}) or (B, K, {h}, {w}) like the images, "
            f"got {tuple(masks.shape)}"
        )
    if masks.is_floating_point() and masks.dtype != torch.float32 and masks.dtype != torch.float64:
        raise TypeError(f"masks dtype must be an integer, bool, float32 or float64 type, got {masks.dtype}")
    if fill is not None and not masks.is_floating_point() and masks.dtype != torch.bool:
        # Cast into the mask's dtype, 300 would wrap to 44 in uint8 and 0.5 become 0. (A bool
        # mask takes any fill as a truth value: nonzero is True.)
        lo, hi = torch.iinfo(masks.dtype).min, torch.iinfo(masks.dtype).max
        if not (lo <= fill <= hi and float(fill).is_integer()):
            raise ValueError(f"mask_fill={fill:g} does not fit masks of dtype {masks.dtype}: "
                             f"give a whole number in [{lo}, {hi}]")
    return masks


#: Integer mask values a warp samples exactly (they pass through float32).
MASK_EXACT = 2**24


def check_mask_values(masks: torch.Tensor, fill: float) -> None:
    """Refuse int32/int64 mask ids a warp would round rather than silently merge instances.

    The warp samples ``masks - fill`` as float32 (then adds ``fill`` back), exact for
    integers within +-2**24: ids beyond (panoptic ids such as ``class * 2**24 + instance``),
    or that far from ``mask_fill``, came out changed. One reduction and one device sync;
    narrower integer dtypes need none.
    """
    if masks.dtype not in (torch.int32, torch.int64) or masks.numel() == 0:
        return
    lo, hi = torch.stack(torch.aminmax(masks)).tolist()
    if max(-lo, hi, abs(lo - fill), abs(hi - fill)) > MASK_EXACT:
        raise ValueError(f"masks has ids in [{lo}, {hi}] (mask_fill={fill:g}); a warp samples mask values as float32, "
                         f"exact only for ids and id - mask_fill within +-2**24 ({MASK_EXACT}): renumber the ids "
                         "(e.g. torch.unique(masks, return_inverse=True)) and map them back after")


def check_boxes(
    images: torch.Tensor, boxes: Sequence[torch.Tensor], box_labels: Sequence[torch.Tensor] | None,
) -> None:
    """Check per-image xyxy boxes (and their labels) against the images.

    Boxes are in pixel units, ``x1 <= x2`` and ``y1 <= y2``, inside ``[0, W] x [0, H]`` give
    or take a pixel (annotation rounding). A box further outside the image or with its
    corners swapped usually means the wrong format (xywh, normalised coordinates), so it is
    refused rather than clipped into something else.
    """
    b, _, h, w = images.shape
    if isinstance(boxes, torch.Tensor) or not isinstance(boxes, Sequence) or len(boxes) != b:
        raise TypeError(f"boxes must be a list of B={b} tensors of shape (N_i, 4), one per image")
    if box_labels is not None and (
        isinstance(box_labels, torch.Tensor) or not isinstance(box_labels, Sequence) or len(box_labels) != b
    ):
        raise TypeError(f"box_labels must be a list of B={b} tensors of shape (N_i,), one per image")
    for i, bx in enumerate(boxes):
        name = f"boxes[{i}]"
        if not isinstance(bx, torch.Tensor) or not bx.is_floating_point():
            raise TypeError(f"{name} must be a float tensor of shape (N, 4) in xyxy pixels")
        check_same_device(images, name, bx)
        if bx.ndim != 2 or bx.shape[1] != 4:
            raise ValueError(f"{name} must have shape (N, 4) in xyxy, got {tuple(bx.shape)}")
        if box_labels is not None:
            lb = box_labels[i]
            if not isinstance(lb, torch.Tensor) or lb.ndim != 1 or lb.shape[0] != bx.shape[0]:
                raise ValueError(f"box_labels[{i}] must have shape ({bx.shape[0]},) like {name}")
            check_same_device(images, f"box_labels[{i}]", lb)
    if sum(bx.shape[0] for bx in boxes) == 0:
        return
    # All images' boxes in one pass: one device sync for the batch, not one per image.
    flat = torch.cat(list(boxes))
    owner = torch.repeat_interleave(torch.arange(b, device=flat.device),
                                    torch.tensor([bx.shape[0] for bx in boxes], device=flat.device))
    # Up to a pixel outside is annotation rounding (COCO-style boxes overshoot the border by
    # a fraction of a pixel), kept and clipped to the output like any box; a wrong format
    # (xywh, normalised) is out by far more. Refused at 1e-3 px, such a box had stopped
    # training mid-epoch where torchvision clamps it.
    tol = 1.0
    problems = (
        ("contains NaN or inf", ~torch.isfinite(flat).all(dim=1)),
        ("has boxes with x2 < x1 or y2 < y1; boxes must be xyxy", (flat[:, 2] < flat[:, 0]) | (flat[:, 3] < flat[:, 1])),
        (f"has boxes outside the {w}x{h} image; boxes are xyxy in pixels (normalised or xywh boxes must be "
         "converted first)",
         (flat[:, :2] < -tol).any(dim=1) | (flat[:, 2] > w + tol) | (flat[:, 3] > h + tol)),
    )
    # The 4th column: every box inside 0..1, which on images larger than a few pixels means
    # normalised coordinates: crops would then drop them all without a word.
    small = (flat.abs() <= 1.0).all().expand(flat.shape[0]) & torch.tensor(min(h, w) > 8, device=flat.device)
    bad = torch.stack([*(p for _, p in problems), small], dim=1)  # (N, 4); one sync below
    invalid, normalised = torch.stack([bad[:, :3].any(), bad[0, 3]]).tolist()
    if invalid:
        row, kind = (int(v) for v in torch.nonzero(bad[:, :3])[0])
        raise ValueError(f"boxes[{int(owner[row])}] {problems[kind][0]}")
    if normalised:
        warnings.warn(f"every box lies within 0..1 on {w}x{h} images: boxes are xyxy in pixels; "
                      "scale normalised boxes by the image size first", stacklevel=3)


def check_keypoints(images: torch.Tensor, keypoints: torch.Tensor) -> torch.Tensor:
    """Check keypoints: a float (B, K, 2) tensor of (x, y) pixels on the images' device."""
    if not isinstance(keypoints, torch.Tensor) or not keypoints.is_floating_point():
        raise TypeError("keypoints must be a float tensor of shape (B, K, 2) in (x, y) pixels")
    check_same_device(images, "keypoints", keypoints)
    b = images.shape[0]
    if keypoints.ndim != 3 or keypoints.shape[0] != b or keypoints.shape[2] != 2:
        raise ValueError(f"keypoints must have shape (B={b}, K, 2), got {tuple(keypoints.shape)}")
    if not torch.isfinite(keypoints).all():
        raise ValueError("keypoints contains NaN or inf")
    return keypoints


def scalar(value: object) -> object:
    """A 0-d numpy array as the scalar it holds (torchvision takes them as numbers); any
    other value as it is."""
    return value[()] if isinstance(value, np.ndarray) and value.ndim == 0 else value


def is_number(value: object) -> bool:
    """A real number, numpy scalars and 0-d arrays included (a value read from a
    numpy-based config); not a bool."""
    value = scalar(value)
    return isinstance(value, numbers.Real) and not isinstance(value, (bool, np.bool_))


def is_int(value: object) -> bool:
    """An integer, numpy integer scalars and 0-d integer arrays included; not a bool."""
    value = scalar(value)
    return isinstance(value, numbers.Integral) and not isinstance(value, (bool, np.bool_))


def check_int(name: str, value: object, low: int | None = None, high: int | None = None,
              what: str | None = None) -> int:
    """An int in ``[low, high]`` (either bound may be None) for a config, numpy integers
    and 0-d integer arrays included; returns it as a Python int.

    Raises:
        TypeError: not an integer (a float, a bool, a string...), naming ``name``.
        ValueError: outside the bounds, naming ``name``.
    """
    if what is None:
        if low == 1 and high is None:
            what = "a positive int"
        elif low is not None and high is not None:
            what = f"an int in [{low}, {high}]"
        elif low is not None:
            what = f"an int >= {low}"
        else:
            what = "an int" if high is None else f"an int <= {high}"
    if not is_int(value):
        raise TypeError(f"{name} must be {what}, got {value!r}")
    v = int(scalar(value))
    if (low is not None and v < low) or (high is not None and v > high):
        raise ValueError(f"{name} must be {what}, got {value!r}")
    return v


def check_number(name: str, value: object) -> float:
    """A finite real number for an op's config; raises naming it."""
    if not is_number(value) or not math.isfinite(float(value)):
        raise TypeError(f"{name} must be a finite number, got {value!r}")
    return float(value)


def check_numbers(name: str, value: object, what: str = "a sequence of numbers") -> tuple[float, ...]:
    """A non-empty sequence of finite numbers (one per channel, a pair...); raises naming it."""
    if (isinstance(value, (str, bytes)) or not isinstance(value, (Sequence, np.ndarray, torch.Tensor))
            or np.ndim(value) == 0):
        raise TypeError(f"{name} must be {what}, got {value!r}")
    values = list(value.tolist() if isinstance(value, (np.ndarray, torch.Tensor)) else value)
    if not values or not all(is_number(v) and math.isfinite(float(v)) for v in values):
        raise TypeError(f"{name} must be {what}, got {value!r}")
    return tuple(float(v) for v in values)


def check_range(name: str, value: object, lo: float, hi: float) -> tuple[float, float]:
    """A (min, max) pair inside [lo, hi] for an op's config; raises ValueError naming it."""
    pair = check_numbers(name, value, "a (min, max) pair of numbers")
    if len(pair) != 2:
        raise TypeError(f"{name} must be a (min, max) pair of numbers, got {value!r}")
    a, b = pair
    if not (lo <= a <= b <= hi):
        raise ValueError(f"{name} must satisfy {lo} <= min <= max <= {hi}, got {value!r}")
    return a, b


def check_symmetric(name: str, value: object, lo: float, hi: float) -> tuple[float, float]:
    """A range given as a number d for (-d, d), which must then be >= 0 (as in torchvision),
    or as a (min, max) pair inside [lo, hi]."""
    if is_number(value):
        d = check_number(name, value)
        if d < 0:
            raise ValueError(f"{name} must be non-negative when it is a single number (it means (-{name}, "
                             f"+{name})), got {value!r}; pass a (min, max) pair for a one-sided range")
        value = (-d, d)
    return check_range(name, value, lo, hi)


def check_probability(name: str, p: object) -> float:
    """A probability in [0, 1] for an op's config: TypeError for a value that is not a
    number (``"0.5"``), ValueError for one outside [0, 1], each naming it."""
    return _unit_interval(name, p, "a probability in [0, 1]")


def check_unit(name: str, value: object, unit: str = "pixel units") -> float:
    """A number in [0, 1] that is not a probability: a pixel value, a fraction (errors as
    :func:`check_probability`)."""
    return _unit_interval(name, value, f"a number in [0, 1] ({unit})")


def _unit_interval(name: str, value: object, what: str) -> float:
    if not is_number(value):
        raise TypeError(f"{name} must be {what}, got {value!r} ({type(value).__name__})")
    if not 0.0 <= float(value) <= 1.0:
        raise ValueError(f"{name} must be {what}, got {value!r}")
    return float(value)


def check_size(name: str, size: object) -> tuple[int, int]:
    """An output size: an int (square) or an (H, W) pair of positive ints (numpy ints and
    0-d arrays too). Raises TypeError for a value of another kind (``224.0``, ``None``, a
    pair holding a float) and ValueError for a pair of another length or a size below 1,
    each naming it."""
    what = "a positive int or an (H, W) pair of positive ints"
    if is_int(size):
        pair: object = (size, size)
    elif isinstance(size, (Sequence, np.ndarray)) and not isinstance(size, (str, bytes)) and np.ndim(size) == 1:
        pair = tuple(size)
    else:
        raise TypeError(f"{name} must be {what}, got {size!r}")
    if not all(is_int(s) for s in pair):
        raise TypeError(f"{name} must be {what}, got {size!r}")
    if len(pair) != 2 or not all(int(scalar(s)) > 0 for s in pair):
        raise ValueError(f"{name} must be {what}, got {size!r}")
    return int(scalar(pair[0])), int(scalar(pair[1]))
