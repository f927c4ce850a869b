"""Photometric ops as batched tensor math on float images in [0, 1].

Each kernel takes per-sample factors as (B,) tensors and broadcasts them, so a batch costs
a few whole-tensor operations whatever its size. A sample that an op skips gets the
identity factor (brightness 1, sigma ~0, an empty erase box) instead of being indexed out,
so nothing here needs a device sync (but for ``RandomErasing``'s noise on a CPU, where
reading its boxes costs nothing). Formulas follow ``torchvision.transforms.v2``.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import torch
import torch.nn.functional as F

from gpufeed.gpu_transforms.arrays import constant
from gpufeed.gpu_transforms.augment.checks import (
    check_int,
    check_number,
    check_numbers,
    check_probability,
    check_range,
    check_symmetric,
    check_unit,
    is_number,
)
from gpufeed.gpu_transforms.augment.params import (
    Op,
    first_fitting_sides,
    hashed_normal,
    keyed_normal,
    randint,
    sample_keys,
    uniform,
)

# ITU-R 601-2 luma, as torchvision's rgb_to_grayscale.
_LUMA = (0.2989, 0.587, 0.114)


def _luma_weights(x: torch.Tensor) -> torch.Tensor:
    return constant(_LUMA, x.device, x.dtype)


def grayscale(x: torch.Tensor) -> torch.Tensor:
    """(B, 3, H, W) -> (B, 1, H, W) luma; a 1-channel batch is its own luma."""
    if x.shape[1] == 1:
        return x
    # One contraction over channels instead of three scaled planes and two sums.
    return torch.einsum("bchw,c->bhw", x, _luma_weights(x)).unsqueeze(1)


def _col(f: torch.Tensor) -> torch.Tensor:
    return f.view(-1, 1, 1, 1)


def blend(x: torch.Tensor, other: torch.Tensor, ratio: torch.Tensor) -> torch.Tensor:
    """``ratio * x + (1 - ratio) * other`` clamped to [0, 1]; ratio is (B,)."""
    # lerp is one fused pass; the clamp runs in place on the fresh result.
    return torch.lerp(other.expand_as(x), x, _col(ratio).to(x.dtype)).clamp_(0.0, 1.0)


def adjust_brightness(x: torch.Tensor, factor: torch.Tensor) -> torch.Tensor:
    """Scale pixel values by ``factor`` (B,)."""
    return (x * _col(factor)).clamp_(0.0, 1.0)


def adjust_contrast(x: torch.Tensor, factor: torch.Tensor) -> torch.Tensor:
    """Blend each image with its mean luma."""
    # The mean of the luma is the luma of the channel means: one reduction, no luma plane.
    means = x.mean(dim=(-2, -1))
    mean = means if x.shape[1] == 1 else means @ _luma_weights(x).unsqueeze(1)
    return blend(x, mean.view(-1, 1, 1, 1), factor)


def adjust_saturation(x: torch.Tensor, factor: torch.Tensor) -> torch.Tensor:
    """Blend each pixel with its luma (0 gives grayscale)."""
    return blend(x, grayscale(x), factor)


def adjust_hue(x: torch.Tensor, shift: torch.Tensor) -> torch.Tensor:
    """Rotate hue by ``shift`` (B,) turns in [-0.5, 0.5] (torchvision's HSV round trip).

    RGB -> (6 * hue, chroma c, min m) on planes, then back in closed form:
    ``R, G, B = m + c * clamp((|h - 3| - 1, 2 - |h - 2|, 2 - |h - 4|), 0, 1)``. Value and
    chroma never change under a hue shift, so the round trip needs one plane-wise
    ``remainder`` and five passes over the channels instead of a full HSV conversion.
    """
    r, g, b = x[:, 0:1], x[:, 1:2], x[:, 2:3]
    maxc = torch.maximum(torch.maximum(r, g), b)
    minc = torch.minimum(torch.minimum(r, g), b)
    c = maxc - minc
    is_r = r == maxc
    is_g = (g == maxc) & ~is_r
    # 6h = (g - b)/c where red is the max, 2 + (b - r)/c for green, 4 + (r - g)/c for blue.
    h6 = torch.where(is_r, g - b, torch.where(is_g, torch.add(b - r, c, alpha=2.0), torch.add(r - g, c, alpha=4.0)))
    h6 = h6.div_(torch.where(c > 0, c, 1.0)).add_((6.0 * shift).view(-1, 1, 1, 1).to(x.dtype))
    h6 = torch.remainder(h6, 6.0)
    t = (h6 - constant((3.0, 2.0, 4.0), x.device, x.dtype).view(1, 3, 1, 1)).abs_()
    t = torch.addcmul(constant((-1.0, 2.0, 2.0), x.device, x.dtype).view(1, 3, 1, 1), t,
                      constant((1.0, -1.0, -1.0), x.device, x.dtype).view(1, 3, 1, 1))
    return t.clamp_(0.0, 1.0).mul_(c).add_(minc)


class ColorJitter(Op):
    """Random brightness, contrast, saturation and hue per sample.

    Args:
        brightness, contrast, saturation: a number f for factors in [max(0, 1 - f), 1 + f],
            or a (min, max) pair.
        hue: a number h in [0, 0.5] for shifts in [-h, h] turns, or a pair.
        p: probability that a sample is jittered.

    On a 1-channel batch saturation and hue do nothing, as in torchvision (and PIL).

    The four adjustments run in this fixed order (torchvision draws a random order per
    call, kornia per batch); a fixed order keeps the batch one straight pass.
    """

    num_uniforms = 5

    def __init__(self, brightness: float | Sequence[float] = 0.0, contrast: float | Sequence[float] = 0.0,
                 saturation: float | Sequence[float] = 0.0, hue: float | Sequence[float] = 0.0,
                 p: float = 1.0) -> None:
        self.brightness = self._factor("brightness", brightness)
        self.contrast = self._factor("contrast", contrast)
        self.saturation = self._factor("saturation", saturation)
        self.hue = check_symmetric("hue", hue, -0.5, 0.5)
        self.p = check_probability("p", p)
        # Contrast, saturation and hue need a luma, which 1 or 3 channels have (as in
        # torchvision, where saturation and hue leave one channel as it is): a 4-channel
        # batch failed inside a matrix product.
        self.channels: int | tuple[int, ...] | None = (
            (1, 3) if (self.contrast, self.saturation, self.hue) != ((1.0, 1.0), (1.0, 1.0), (0.0, 0.0)) else None)

    def channels_reason(self) -> str:
        return "contrast, saturation and hue need a luma: RGB or grayscale"

    @staticmethod
    def _factor(name: str, value: float | Sequence[float]) -> tuple[float, float]:
        if is_number(value):
            f = check_number(name, value)
            if f < 0:
                raise ValueError(f"{name} must be non-negative when it is a single number, got {value!r}")
            value = (max(0.0, 1.0 - f), 1.0 + f)
        return check_range(name, value, 0.0, math.inf)

    def sample(self, u: torch.Tensor, size: tuple[int, int]) -> dict[str, torch.Tensor]:
        on = u[:, 4] < self.p
        one = torch.ones_like(u[:, 0])
        return {
            "brightness": torch.where(on, uniform(u[:, 0], *self.brightness), one),
            "contrast": torch.where(on, uniform(u[:, 1], *self.contrast), one),
            "saturation": torch.where(on, uniform(u[:, 2], *self.saturation), one),
            "hue": torch.where(on, uniform(u[:, 3], *self.hue), 0.0 * one),
        }

    def apply(self, x: torch.Tensor, params: dict[str, torch.Tensor]) -> torch.Tensor:
        # Skip adjustments the config disables: each is a full pass over the batch.
        if self.brightness != (1.0, 1.0):
            x = adjust_brightness(x, params["brightness"])
        if self.contrast != (1.0, 1.0):
            x = adjust_contrast(x, params["contrast"])
        if x.shape[1] == 1:  # torchvision (and PIL): no saturation or hue on one channel
            return x
        if self.saturation != (1.0, 1.0):
            x = adjust_saturation(x, params["saturation"])
        if self.hue != (0.0, 0.0):
            x = adjust_hue(x, params["hue"])
        return x


class RandomGrayscale(Op):
    """Turn a sample to grayscale with probability ``p``, keeping its channel count (3
    equal channels; a 1-channel batch is already gray and is kept as it is, as in torchvision)."""

    num_uniforms = 1
    channels = (1, 3)

    def __init__(self, p: float = 0.1) -> None:
        self.p = check_probability("p", p)

    def channels_reason(self) -> str:
        return "a luma needs RGB or grayscale"

    def sample(self, u: torch.Tensor, size: tuple[int, int]) -> dict[str, torch.Tensor]:
        return {"on": u[:, 0] < self.p}

    def apply(self, x: torch.Tensor, params: dict[str, torch.Tensor]) -> torch.Tensor:
        return torch.where(_col(params["on"]), grayscale(x).expand_as(x), x)


def gaussian_kernels(sigma: torch.Tensor, kernel_size: int) -> torch.Tensor:
    """(B,) sigmas -> (B, kernel_size) normalised 1-D Gaussian kernels."""
    half = (kernel_size - 1) * 0.5
    t = torch.linspace(-half, half, kernel_size, device=sigma.device, dtype=sigma.dtype)
    k = torch.exp(-0.5 * (t / sigma.view(-1, 1)) ** 2)
    return k / k.sum(dim=1, keepdim=True)


def gaussian_blur(x: torch.Tensor, sigma: torch.Tensor, kernel_size: int) -> torch.Tensor:
    """Separable Gaussian blur with one sigma per sample and reflect padding.

    Every (sample, channel) plane becomes a group of one grouped convolution, so the batch
    is two ``conv2d`` calls.
    """
    b, c, h, w = x.shape
    k = gaussian_kernels(sigma, kernel_size).repeat_interleave(c, dim=0)  # (B*C, k)
    pad = kernel_size // 2
    planes = F.pad(x.reshape(1, b * c, h, w), (pad, pad, pad, pad), mode="reflect")
    planes = F.conv2d(planes, k.view(b * c, 1, 1, kernel_size), groups=b * c)
    planes = F.conv2d(planes, k.view(b * c, 1, kernel_size, 1), groups=b * c)
    return planes.view(b, c, h, w)


class GaussianBlur(Op):
    """Blur with a sigma drawn per sample.

    Args:
        kernel_size: odd size of the (square) kernel.
        sigma: (min, max) standard deviation in pixels.
        p: probability that a sample is blurred.
    """

    num_uniforms = 2
    # A sigma this small makes every off-centre weight underflow to exactly 0, so a skipped
    # sample passes through the same convolution unchanged, bit for bit.
    _IDENTITY_SIGMA = 1e-6

    def __init__(self, kernel_size: int, sigma: Sequence[float] = (0.1, 2.0), p: float = 1.0) -> None:
        self.kernel_size = check_int("kernel_size", kernel_size, 1, what="a positive odd int")
        if self.kernel_size % 2 == 0:
            raise ValueError(f"kernel_size must be a positive odd int, got {kernel_size!r}")
        self.sigma = check_range("sigma", sigma, 1e-3, 1e3)
        self.p = check_probability("p", p)

    def sample(self, u: torch.Tensor, size: tuple[int, int]) -> dict[str, torch.Tensor]:
        sigma = uniform(u[:, 0], *self.sigma)
        return {"sigma": torch.where(u[:, 1] < self.p, sigma, self._IDENTITY_SIGMA)}

    def apply(self, x: torch.Tensor, params: dict[str, torch.Tensor]) -> torch.Tensor:
        if min(x.shape[-2:]) <= self.kernel_size // 2:
            raise ValueError(f"GaussianBlur(kernel_size={self.kernel_size}) needs images larger than "
                             f"{self.kernel_size // 2} pixels per side (its reflect padding), got images of "
                             f"{tuple(x.shape[-2:])} (after the geometric ops)")
        return gaussian_blur(x, params["sigma"].to(x.dtype), self.kernel_size)


class RandomSolarize(Op):
    """Invert pixels at or above ``threshold`` with probability ``p``.

    ``threshold`` is in [0, 1] pixel units whatever the input's dtype: torchvision takes it
    in the image's own units (0..1 for float images, 0..255 for uint8), and the stage works
    on 0..1 values, so torchvision's uint8 threshold 128 is 128 / 255 here.
    """

    num_uniforms = 1

    def __init__(self, threshold: float, p: float = 0.5) -> None:
        if is_number(threshold) and 1.0 < float(threshold) <= 255.0:
            raise ValueError(f"threshold must be in [0, 1] pixel units (the stage solarises 0..1 values whatever "
                             f"the input dtype), got {threshold!r}; for a 0..255 threshold such as torchvision's "
                             f"uint8 {threshold!r} pass {float(threshold) / 255:.4g}")
        self.threshold = check_unit("threshold", threshold, "pixel units: the stage solarises 0..1 values "
                                    "whatever the input dtype")
        self.p = check_probability("p", p)

    def sample(self, u: torch.Tensor, size: tuple[int, int]) -> dict[str, torch.Tensor]:
        return {"on": u[:, 0] < self.p}

    def apply(self, x: torch.Tensor, params: dict[str, torch.Tensor]) -> torch.Tensor:
        return torch.where(_col(params["on"]) & (x >= self.threshold), 1.0 - x, x)


class RandomPosterize(Op):
    """Keep the top ``bits`` bits of each 8-bit value with probability ``p``.

    Defined on the 8-bit value (as torchvision's uint8 kernel), so a uint8 batch and the
    same batch as float give the same result.
    """

    num_uniforms = 1

    def __init__(self, bits: int, p: float = 0.5) -> None:
        self.bits = check_int("bits", bits, 1, 8)
        self.p = check_probability("p", p)

    def sample(self, u: torch.Tensor, size: tuple[int, int]) -> dict[str, torch.Tensor]:
        return {"on": u[:, 0] < self.p}

    def apply(self, x: torch.Tensor, params: dict[str, torch.Tensor]) -> torch.Tensor:
        q = torch.round(x * 255.0)
        step = float(2 ** (8 - self.bits))
        poster = (q - torch.remainder(q, step)) / 255.0
        return torch.where(_col(params["on"]), poster, x)


class RandomErasing(Op):
    """Fill a random rectangle with ``value`` (torchvision's sampler, 10 tries).

    Args:
        p: probability that a sample gets a rectangle.
        scale: (min, max) area of the rectangle as a fraction of the image.
        ratio: (min, max) aspect ratio, sampled log-uniformly.
        value: the fill, as in torchvision: a number, one number per channel, or
            ``"random"`` for standard-normal noise per pixel. It is in the units of the
            values the op sees: [0, 1] pixel units before ``Normalize``, normalised units
            after it (torchvision's and timm's ImageNet recipes erase after ``Normalize``,
            where 0 is the dataset's mean colour). ``"random"`` only fits normalised values,
            so it needs a ``Normalize`` before the op.

    The noise of ``"random"`` is a pure function of each sample's recorded parameters
    (two uniforms hashed with the pixel's index), so a replay or another chunking repeats
    it bit for bit. On a CPU it is computed for the erased boxes only; on a GPU for every
    pixel (finding the boxes would make the GPU wait).
    """

    tries = 10
    takes_normalised = True

    def __init__(self, p: float = 0.5, scale: Sequence[float] = (0.02, 0.33),
                 ratio: Sequence[float] = (0.3, 3.3), value: float | Sequence[float] | str = 0.0) -> None:
        self.p = check_probability("p", p)
        self.scale = check_range("scale", scale, 0.0, 1.0)
        self.ratio = check_range("ratio", ratio, 1e-3, 1e3)
        what = "a number, one number per channel, or 'random'"
        if isinstance(value, str):
            if value != "random":
                raise ValueError(f"value must be {what}, got {value!r}")
            self.value: float | tuple[float, ...] | str = value
        elif is_number(value):
            self.value = check_number("value", value)
        else:
            values = check_numbers("value", value, what)
            self.value = values[0] if len(values) == 1 else values
            if len(values) > 1:
                self.channels = len(values)
        self.num_uniforms = 2 * self.tries + 3 + (2 if self.value == "random" else 0)

    def channels_reason(self) -> str:
        return f"value has {len(self.value)} values, one per channel" if isinstance(self.value, tuple) else ""

    def check_placement(self, normalised: bool) -> None:
        if normalised:
            return
        if self.value == "random":
            raise ValueError("RandomErasing(value='random') fills with standard-normal noise, which fits normalised "
                             "values: put it after Normalize (as torchvision's and timm's recipes do)")
        values = self.value if isinstance(self.value, tuple) else (self.value,)
        if not all(0.0 <= v <= 1.0 for v in values):
            raise ValueError(f"RandomErasing value must be in [0, 1] pixel units before Normalize (after Normalize it "
                             f"is in normalised units), got {self.value!r}")

    def sample(self, u: torch.Tensor, size: tuple[int, int]) -> dict[str, torch.Tensor]:
        h, w = size
        t = self.tries
        # torchvision's RandomErasing: the first side is the height, and the box must be smaller.
        eh, ew, found = first_fitting_sides(u, size, self.scale, self.ratio, t, lambda eh, ew: (eh < h) & (ew < w))
        top, left = randint(u[:, 2 * t], 0, h - eh + 1), randint(u[:, 2 * t + 1], 0, w - ew + 1)
        on = (u[:, 2 * t + 2] < self.p) & found
        zero = torch.zeros_like(eh)
        params = {"box": torch.stack([left, top, torch.where(on, ew, zero), torch.where(on, eh, zero)], 1)}
        if self.value == "random":
            params["noise_key"] = u[:, 2 * t + 3:2 * t + 5]
        return params

    def apply(self, x: torch.Tensor, params: dict[str, torch.Tensor]) -> torch.Tensor:
        if self.value == "random" and x.device.type == "cpu":
            return erase_with_noise(x, params["box"], params["noise_key"])
        inside = box_mask(params["box"], x.shape[-2:])
        if self.value == "random":
            # On a GPU, reading the boxes would make it wait: noise for the whole batch.
            fill = keyed_normal(params["noise_key"], x.shape[1:]).to(x.dtype)
        elif isinstance(self.value, tuple):
            fill = constant(self.value, x.device, x.dtype).view(1, -1, 1, 1)
        else:
            return torch.where(inside, self.value, x)
        return torch.where(inside, fill, x)


def erase_with_noise(x: torch.Tensor, box: torch.Tensor, key: torch.Tensor) -> torch.Tensor:
    """``x`` with each sample's ``box`` ((B, 4) x, y, w, h; empty when not erased) filled
    with the noise :func:`~.params.keyed_normal` gives those pixels (key (B, 2)), computed
    for them only: the same values, bit for bit, as the whole batch's noise, at a cost that
    follows the erased area instead of the batch. Reads the boxes on the host."""
    out = x.clone()
    c, h, w = x.shape[1:]
    keys = sample_keys(key)
    for i, (left, top, bw, bh) in enumerate(box.long().tolist()):
        if bw > 0 and bh > 0:
            index = (torch.arange(c, device=x.device).view(-1, 1, 1) * (h * w)
                     + torch.arange(top, top + bh, device=x.device).view(1, -1, 1) * w
                     + torch.arange(left, left + bw, device=x.device).view(1, 1, -1))
            out[i, :, top:top + bh, left:left + bw] = hashed_normal(keys[i], index)
    return out


def box_mask(box: torch.Tensor, size: Sequence[int]) -> torch.Tensor:
    """(B, 4) integer-valued boxes as (x, y, w, h) -> a (B, 1, H, W) bool mask of their pixels."""
    h, w = size
    ys = torch.arange(h, device=box.device, dtype=box.dtype).view(1, h, 1)
    xs = torch.arange(w, device=box.device, dtype=box.dtype).view(1, 1, w)
    x0, y0, bw, bh = (v.view(-1, 1, 1) for v in box.unbind(1))
    return ((ys >= y0) & (ys < y0 + bh) & (xs >= x0) & (xs < x0 + bw)).unsqueeze(1)


class Normalize(Op):
    """``(x - mean) / std`` per channel, on values in [0, 1]; makes the output float.

    Args:
        mean, std: one value per channel (or one for all channels), in [0, 1] pixel units (e.g. ImageNet's), as in
            torchvision, whatever the input's dtype or the stage's ``value_range``: the
            stage normalises 0..1 values. DALI-style 0..255 values (any above 1) are refused.
    """

    output_range = None  # normalised: any real value, so only ops that take normalised values may follow

    def __init__(self, mean: Sequence[float], std: Sequence[float]) -> None:
        what = "one number per channel, e.g. (0.485, 0.456, 0.406)"
        mean_, std_ = check_numbers("mean", mean, what), check_numbers("std", std, what)
        if len(mean_) != len(std_):
            raise ValueError(f"mean and std must have the same non-zero length, got {mean!r} and {std!r}")
        if any(v <= 0 for v in std_):
            raise ValueError(f"std must be positive, got {std!r}")
        if any(v > 1 for v in (*mean_, *std_)):
            # The stage always normalises 0..1 pixels: DALI's or mmcv's [123.7, 116.3, 103.5]
            # here turned every pixel into about -2.1, silently.
            raise ValueError(f"mean and std are in [0, 1] pixel units, as in torchvision, whatever the input dtype or "
                             f"value_range (got mean={mean!r}, std={std!r}); divide DALI-style 0..255 values by 255")
        self.mean, self.std = mean_, std_
        # One mean and std apply to every channel, as in torchvision (Normalize((0.5,), (0.5,))).
        self.channels = len(self.mean) if len(self.mean) > 1 else None

    def channels_reason(self) -> str:
        return f"{len(self.mean)} mean/std values, one per channel"

    def apply(self, x: torch.Tensor, params: dict[str, torch.Tensor]) -> torch.Tensor:
        # x * (1/std) - mean/std in one fused pass; the constants computed in float64 (Python's floats).
        scale = tuple(1.0 / s for s in self.std)
        bias = tuple(-m * k for m, k in zip(self.mean, scale, strict=True))
        return torch.addcmul(constant(bias, x.device, x.dtype).view(1, -1, 1, 1), x,
                             constant(scale, x.device, x.dtype).view(1, -1, 1, 1))
