"""Device-side batch augmentation: per-sample randomness at batch speed, on any device.

:class:`GpuAugment` takes a list of ops and augments (B, C, H, W) batches, uint8 or float,
on CPU or CUDA, together with their masks, boxes and keypoints. Geometric ops are fused
into one warp per batch; photometric ops are batched tensor math; random parameters are
drawn on the device in one call, recorded, and replayable. Your own ops subclass
:class:`Op` (photometric), :class:`GeometricOp` (a warp fused with the others) or
:class:`MixOp` (mixes samples and their labels): ``docs/augment.md``, "Writing an op".

Example::

    stage = GpuAugment([RandomResizedCrop(224), RandomHorizontalFlip(),
                        ColorJitter(0.4, 0.4, 0.4, 0.1), Normalize(IMAGENET_MEAN, IMAGENET_STD)])
    images, labels = stage(images, labels)          # the loader hook
    out = stage.apply(images, boxes=boxes, box_labels=cls, masks=masks)  # detection / segmentation
    again = stage(images, params=stage.last_params)  # bit-for-bit replay
"""

from gpufeed.gpu_transforms.augment.geometric import (
    GeometricOp,
    RandomAffine,
    RandomHorizontalFlip,
    RandomPerspective,
    RandomResizedCrop,
    RandomRotation,
    RandomVerticalFlip,
)
from gpufeed.gpu_transforms.augment.mixing import CutMix, MixOp, MixUp
from gpufeed.gpu_transforms.augment.params import AugmentParams, Op
from gpufeed.gpu_transforms.augment.photometric import (
    ColorJitter,
    GaussianBlur,
    Normalize,
    RandomErasing,
    RandomGrayscale,
    RandomPosterize,
    RandomSolarize,
)
from gpufeed.gpu_transforms.augment.stage import AugmentResult, GpuAugment
from gpufeed.pipelines.options import IMAGENET_MEAN, IMAGENET_STD  # the loaders' defaults too

__all__ = [
    "IMAGENET_MEAN", "IMAGENET_STD", "AugmentParams", "AugmentResult", "ColorJitter", "CutMix",
    "GaussianBlur", "GeometricOp", "GpuAugment", "MixOp", "MixUp", "Normalize", "Op", "RandomAffine", "RandomErasing",
    "RandomGrayscale", "RandomHorizontalFlip", "RandomPerspective", "RandomPosterize",
    "RandomResizedCrop", "RandomRotation", "RandomSolarize", "RandomVerticalFlip",
]
