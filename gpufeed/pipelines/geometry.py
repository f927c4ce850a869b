"""CPU image geometry on uint8 tensors, shared by the torch backend and DALI's CPU mode.

Images are ``(1, 3, H, W)`` views of HWC pixel buffers, i.e. channels-last: the layout
for which torch's antialiased bilinear uint8 kernel is vectorised, faster than the same
call on a contiguous CHW tensor and than DALI's CPU resampler (which is why DALI's
CPU-only mode resizes here too; resizing is about half of a CPU pipeline's work).
"""

from __future__ import annotations

import math
import random

import torch
import torch.nn.functional as F
from torchvision.transforms.v2 import functional as TF


def random_crop_box(rng: random.Random, height: int, width: int, scale: tuple[float, float],
                    ratio: tuple[float, float]) -> tuple[int, int, int, int]:
    """``(top, left, h, w)`` of a random-resized-crop window, drawn as torchvision's
    ``RandomResizedCrop`` draws it (area in ``scale``, log-uniform aspect in ``ratio``,
    10 tries, then a centre crop clamped to ``ratio``)."""
    area = height * width
    log_ratio = (math.log(ratio[0]), math.log(ratio[1]))
    for _ in range(10):
        target_area = area * rng.uniform(*scale)
        aspect = math.exp(rng.uniform(*log_ratio))
        w = round(math.sqrt(target_area * aspect))
        h = round(math.sqrt(target_area / aspect))
        if 0 < w <= width and 0 < h <= height:
            return rng.randint(0, height - h), rng.randint(0, width - w), h, w
    in_ratio = width / height
    if in_ratio < ratio[0]:
        w, h = width, round(width / ratio[0])
    elif in_ratio > ratio[1]:
        h, w = height, round(height * ratio[1])
    else:
        w, h = width, height
    return (height - h) // 2, (width - w) // 2, h, w


def resize(image: torch.Tensor, size: int) -> torch.Tensor:
    """Antialiased bilinear resize of a ``(1, 3, h, w)`` uint8 image to ``size`` x ``size``."""
    return F.interpolate(image, size=(size, size), mode="bilinear", antialias=True)


def train_window(rng: random.Random, height: int, width: int, scale: tuple[float, float],
                 ratio: tuple[float, float]) -> tuple[int, int, int, int, bool]:
    """``(top, left, h, w, flip)``: one sample's random-resized-crop window and horizontal
    flip. Both backends draw through here (the DALI backend from the image's header), so a
    sample gets the same crop on either, given ``(seed, epoch, sample)``."""
    top, left, h, w = random_crop_box(rng, height, width, scale, ratio)
    return top, left, h, w, rng.random() < 0.5


def train_crop(image: torch.Tensor, rng: random.Random, size: int, scale: tuple[float, float],
               ratio: tuple[float, float]) -> torch.Tensor:
    """Random-resized-crop to ``size`` and a random horizontal flip."""
    top, left, h, w, flip = train_window(rng, image.shape[-2], image.shape[-1], scale, ratio)
    out = resize(image[..., top: top + h, left: left + w], size)
    return out.flip(-1) if flip else out


def val_crop(image: torch.Tensor, shorter: int, size: int) -> torch.Tensor:
    """torchvision's validation geometry: resize the shorter side, centre crop."""
    return TF.center_crop(TF.resize(image, [shorter], antialias=True), [size, size])


def hwc_view(pixels: torch.Tensor) -> torch.Tensor:
    """``(H, W, 3)`` pixels as a ``(1, 3, H, W)`` channels-last view (no copy)."""
    return pixels.permute(2, 0, 1).unsqueeze(0)
