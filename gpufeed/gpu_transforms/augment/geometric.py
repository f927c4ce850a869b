"""Geometric ops, composed into one 3x3 matrix per sample and applied with one warp.

Coordinates are continuous pixels: pixel ``i`` covers ``[i, i + 1)``, so an image of width
``W`` spans ``[0, W]`` and a horizontal flip is ``x -> W - x``. Boxes use the same
convention, which is what keeps images, masks, boxes and keypoints aligned. Each op maps
input coordinates to output coordinates; the stage multiplies the matrices of all its
geometric ops and warps once (``grid_sample`` on a grid built from the affine terms, or
kornia's ``warp_perspective`` when a projective op is in the list), instead of
resampling the image once per op as an eager pipeline does.

Angles, translations and shears follow ``torchvision.transforms.v2`` (including its sign
difference between ``rotate`` and ``affine``), so parameters can be checked against it.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import NamedTuple

import torch
import torch.nn.functional as F
from kornia.geometry.transform import get_perspective_transform, warp_perspective

from gpufeed.gpu_transforms.arrays import constant
from gpufeed.gpu_transforms.augment.checks import (
    check_numbers,
    check_probability,
    check_range,
    check_size,
    check_symmetric,
    check_unit,
    is_number,
)
from gpufeed.gpu_transforms.augment.params import Op, first_fitting_sides, randint, uniform


class GeometricOp(Op):
    """An op that moves pixels; it contributes a (B, 3, 3) matrix to the fused warp."""

    kind = "geometric"
    #: True when the op only samples inside the input (crops, flips): the warp then
    #: replicates edge pixels for the half pixel at the border, as ``resize`` does,
    #: instead of blending in the fill value.
    stays_inside = False
    #: True when the op maps its input's frame exactly onto its output's (flips): an op
    #: after it that looks outside its input then looks outside the image, which the warp's
    #: padding handles, so it needs no crop window (see :func:`crop_windows`).
    keeps_frame = False
    #: False for projective ops: the warp then needs kornia's homography path.
    affine = True

    def matrix(self, params: dict[str, torch.Tensor], size: tuple[int, int]) -> torch.Tensor:
        """(B, 3, 3) matrices from input to output continuous pixel coordinates."""
        raise NotImplementedError

    def apply(self, x: torch.Tensor, params: dict[str, torch.Tensor]) -> torch.Tensor:
        """This op alone, as one warp (the stage composes all its geometric ops and warps once)."""
        size = (x.shape[-2], x.shape[-1])
        return warp(x, self.matrix(params, size), self.output_size(size), inside=self.stays_inside,
                    affine=self.affine)


def _eye(b: int, device: torch.device) -> torch.Tensor:
    return torch.eye(3, device=device).expand(b, 3, 3).clone()


def _select(flag: torch.Tensor, m: torch.Tensor) -> torch.Tensor:
    """``m`` where ``flag`` is set, identity elsewhere."""
    return torch.where(flag.bool()[:, None, None], m, _eye(m.shape[0], m.device))


class RandomResizedCrop(GeometricOp):
    """Crop a random area and aspect ratio, resize it to ``size`` (torchvision's sampler).

    Args:
        size: output (H, W) or an int for a square.
        scale: range of the crop's area as a fraction of the image.
        ratio: range of the crop's aspect ratio (width / height), sampled log-uniformly.

    Crops are whole pixels, drawn with torchvision's 10 tries and its centre-crop fallback,
    vectorised over the batch.
    """

    stays_inside = True
    tries = 10

    def __init__(self, size: int | Sequence[int], scale: Sequence[float] = (0.08, 1.0),
                 ratio: Sequence[float] = (3 / 4, 4 / 3)) -> None:
        self.size = check_size("size", size)
        self.scale = check_range("scale", scale, 1e-6, 1.0)
        self.ratio = check_range("ratio", ratio, 1e-3, 1e3)
        self.num_uniforms = 2 * self.tries + 2

    def output_size(self, size: tuple[int, int]) -> tuple[int, int]:
        return self.size

    def sample(self, u: torch.Tensor, size: tuple[int, int]) -> dict[str, torch.Tensor]:
        h, w = size
        t = self.tries
        cw, ch, found = first_fitting_sides(u, size, self.scale, self.ratio, t,
                                            lambda cw, ch: (cw > 0) & (cw <= w) & (ch > 0) & (ch <= h))
        # torchvision's fallback: the largest centred crop within the ratio range.
        in_ratio = w / h
        if in_ratio < self.ratio[0]:
            fw, fh = w, round(w / self.ratio[0])
        elif in_ratio > self.ratio[1]:
            fw, fh = round(h * self.ratio[1]), h
        else:
            fw, fh = w, h
        cw = torch.where(found, cw, torch.full_like(cw, fw))
        ch = torch.where(found, ch, torch.full_like(ch, fh))
        top = torch.where(found, randint(u[:, 2 * t], 0, h - ch + 1), torch.full_like(ch, (h - fh) // 2))
        left = torch.where(found, randint(u[:, 2 * t + 1], 0, w - cw + 1), torch.full_like(cw, (w - fw) // 2))
        return {"box": torch.stack([left, top, cw, ch], dim=1)}  # x, y, w, h in pixels

    def matrix(self, params: dict[str, torch.Tensor], size: tuple[int, int]) -> torch.Tensor:
        x, y, cw, ch = params["box"].unbind(1)
        oh, ow = self.size
        m = _eye(x.shape[0], x.device)
        m[:, 0, 0], m[:, 1, 1] = ow / cw, oh / ch
        m[:, 0, 2], m[:, 1, 2] = -x * ow / cw, -y * oh / ch
        return m


class _RandomFlip(GeometricOp):
    stays_inside = True
    keeps_frame = True
    num_uniforms = 1
    axis = 0  # 0: horizontal (x), 1: vertical (y)

    def __init__(self, p: float = 0.5) -> None:
        self.p = check_probability("p", p)

    def sample(self, u: torch.Tensor, size: tuple[int, int]) -> dict[str, torch.Tensor]:
        return {"flip": u[:, 0] < self.p}

    def matrix(self, params: dict[str, torch.Tensor], size: tuple[int, int]) -> torch.Tensor:
        flip = params["flip"]
        m = _eye(flip.shape[0], flip.device)
        extent = size[1] if self.axis == 0 else size[0]
        m[:, self.axis, self.axis] = torch.where(flip, -1.0, 1.0)
        m[:, self.axis, 2] = torch.where(flip, float(extent), 0.0)
        return m


class RandomHorizontalFlip(_RandomFlip):
    """Mirror left-right with probability ``p``."""

    axis = 0


class RandomVerticalFlip(_RandomFlip):
    """Mirror top-bottom with probability ``p``."""

    axis = 1


def affine_matrix(angle: torch.Tensor, translate: torch.Tensor, scale: torch.Tensor,
                  shear: torch.Tensor, size: tuple[int, int]) -> torch.Tensor:
    """Forward affine matrices about the image centre, as torchvision's ``affine``.

    Args:
        angle: (B,) degrees. translate: (B, 2) pixels. scale: (B,). shear: (B, 2) degrees.
        size: (H, W) of the image.

    Returns:
        (B, 3, 3) matrices from input to output continuous pixel coordinates:
        ``T * C * R(a) S(s) SHy SHx * C^-1``.
    """
    rot, sx, sy = torch.deg2rad(angle), torch.deg2rad(shear[:, 0]), torch.deg2rad(shear[:, 1])
    a = torch.cos(rot - sy) / torch.cos(sy)
    b = -(a * torch.tan(sx) + torch.sin(rot))
    c = torch.sin(rot - sy) / torch.cos(sy)
    d = torch.cos(rot) - c * torch.tan(sx)
    cx, cy = size[1] * 0.5, size[0] * 0.5
    m = _eye(angle.shape[0], angle.device)
    m[:, 0, 0], m[:, 0, 1], m[:, 1, 0], m[:, 1, 1] = a * scale, b * scale, c * scale, d * scale
    m[:, 0, 2] = cx + translate[:, 0] - m[:, 0, 0] * cx - m[:, 0, 1] * cy
    m[:, 1, 2] = cy + translate[:, 1] - m[:, 1, 0] * cx - m[:, 1, 1] * cy
    return m


class RandomRotation(GeometricOp):
    """Rotate by an angle drawn from ``degrees`` (torchvision's ``rotate`` convention).

    Args:
        degrees: (min, max) or a number d for (-d, d).
        p: probability that a sample is rotated at all.
    """

    num_uniforms = 2

    def __init__(self, degrees: float | Sequence[float], p: float = 1.0) -> None:
        self.degrees = check_symmetric("degrees", degrees, -360.0, 360.0)
        self.p = check_probability("p", p)

    def sample(self, u: torch.Tensor, size: tuple[int, int]) -> dict[str, torch.Tensor]:
        angle = uniform(u[:, 0], *self.degrees)
        return {"angle": torch.where(u[:, 1] < self.p, angle, torch.zeros_like(angle))}

    def matrix(self, params: dict[str, torch.Tensor], size: tuple[int, int]) -> torch.Tensor:
        angle = params["angle"]
        zeros2 = angle.new_zeros(angle.shape[0], 2)
        # torchvision's rotate is affine with the angle negated.
        return affine_matrix(-angle, zeros2, torch.ones_like(angle), zeros2, size)


class RandomAffine(GeometricOp):
    """Random rotation, translation, scale and shear in one matrix (torchvision's sampler).

    Args:
        degrees: (min, max) rotation or d for (-d, d).
        translate: max (fx, fy) translation as a fraction of (W, H); whole pixels are drawn.
        scale: (min, max) scale factor.
        shear: d for x-shear in (-d, d), (min, max) for x, or (xmin, xmax, ymin, ymax).
        p: probability that a sample is transformed at all.
    """

    num_uniforms = 7

    def __init__(self, degrees: float | Sequence[float] = 0.0, translate: Sequence[float] | None = None,
                 scale: Sequence[float] | None = None, shear: float | Sequence[float] | None = None,
                 p: float = 1.0) -> None:
        self.degrees = check_symmetric("degrees", degrees, -360.0, 360.0)
        fractions = (0.0, 0.0) if translate is None else check_numbers(
            "translate", translate, "a (fx, fy) pair of fractions in [0, 1]")
        if len(fractions) != 2 or not all(0.0 <= t <= 1.0 for t in fractions):
            raise ValueError(f"translate must be a (fx, fy) pair of fractions in [0, 1], got {translate!r}")
        self.translate = (fractions[0], fractions[1])
        self.scale = (1.0, 1.0) if scale is None else check_range("scale", scale, 1e-3, 1e3)
        if shear is None:
            x_shear, y_shear = (0.0, 0.0), (0.0, 0.0)
        elif is_number(shear):
            x_shear, y_shear = check_symmetric("shear", shear, -89.0, 89.0), (0.0, 0.0)
        else:
            values = check_numbers("shear", shear, "a number or 2 or 4 numbers")
            if len(values) not in (2, 4):
                raise ValueError(f"shear must be a number or 2 or 4 numbers, got {shear!r}")
            x_shear = check_range("shear (x)", values[:2], -89.0, 89.0)
            y_shear = check_range("shear (y)", values[2:], -89.0, 89.0) if len(values) == 4 else (0.0, 0.0)
        self.shear = (*x_shear, *y_shear)
        self.p = check_probability("p", p)

    def sample(self, u: torch.Tensor, size: tuple[int, int]) -> dict[str, torch.Tensor]:
        h, w = size
        on = u[:, 6] < self.p
        angle = torch.where(on, uniform(u[:, 0], *self.degrees), 0.0)
        mx, my = self.translate[0] * w, self.translate[1] * h
        translate = torch.stack([torch.round(uniform(u[:, 1], -mx, mx)), torch.round(uniform(u[:, 2], -my, my))], 1)
        scale = torch.where(on, uniform(u[:, 3], *self.scale), 1.0)
        shear = torch.stack([uniform(u[:, 4], *self.shear[:2]), uniform(u[:, 5], *self.shear[2:])], 1)
        return {"angle": angle, "translate": translate * on[:, None], "scale": scale, "shear": shear * on[:, None]}

    def matrix(self, params: dict[str, torch.Tensor], size: tuple[int, int]) -> torch.Tensor:
        return affine_matrix(params["angle"], params["translate"], params["scale"], params["shear"], size)


class RandomPerspective(GeometricOp):
    """Move each corner inward by up to ``distortion_scale`` of half the side (torchvision).

    Args:
        distortion_scale: in [0, 1]; 0 keeps the image.
        p: probability that a sample is distorted.
    """

    num_uniforms = 9
    affine = False

    def __init__(self, distortion_scale: float = 0.5, p: float = 0.5) -> None:
        self.distortion_scale = check_unit("distortion_scale", distortion_scale, "a fraction of half the side")
        self.p = check_probability("p", p)

    def sample(self, u: torch.Tensor, size: tuple[int, int]) -> dict[str, torch.Tensor]:
        h, w = size
        if h < 2 or w < 2:
            # Its corners would coincide: no homography (torchvision's lstsq fails), and the
            # warp turned every pixel into fill without a word.
            raise ValueError(f"RandomPerspective needs images of at least 2x2 pixels, got {h}x{w} "
                             "(after the geometric ops before it)")
        bw = int(self.distortion_scale * (w // 2)) + 1
        bh = int(self.distortion_scale * (h // 2)) + 1
        lo_x, hi_x, lo_y, hi_y = (0, bw), (w - bw, w), (0, bh), (h - bh, h)
        ranges = (lo_x, lo_y, hi_x, lo_y, hi_x, hi_y, lo_x, hi_y)  # tl, tr, br, bl
        end = torch.stack([randint(u[:, k], *r) for k, r in enumerate(ranges)], 1).view(-1, 4, 2)
        return {"end": end, "on": u[:, 8] < self.p}

    def matrix(self, params: dict[str, torch.Tensor], size: tuple[int, int]) -> torch.Tensor:
        end = params["end"]
        h, w = size
        # torchvision's start points are pixel indices, used as continuous coordinates.
        start = constant(((0, 0), (w - 1, 0), (w - 1, h - 1), (0, h - 1)), end.device, end.dtype).expand_as(end)
        return _select(params["on"], get_perspective_transform(start, end))


def compose(ops: Sequence[GeometricOp], params: Sequence[dict[str, torch.Tensor]],
            size: tuple[int, int]) -> tuple[torch.Tensor, tuple[int, int]]:
    """One (B, 3, 3) matrix for a sequence of geometric ops, and the output (H, W)."""
    total: torch.Tensor | None = None
    for op, p in zip(ops, params, strict=True):
        m = op.matrix(p, size)
        total = m if total is None else m @ total
        size = op.output_size(size)
    if total is None:
        raise ValueError("compose needs at least one geometric op")
    return total, size


class Window(NamedTuple):
    """An intermediate image a fused warp must not look outside of (see :func:`crop_windows`).

    Attributes:
        inv: (B, 3, 3) from output continuous pixels to the window's (the intermediate
            image's) continuous pixels.
        size: the window's (H, W).
        needed: (B,) bool, False for a sample whose whole source image lies inside the
            window (a crop of the whole image): beyond the window is then beyond the image,
            where the warp's padding already blends in the fill, as torchvision's op does.
        affine: every op from the window to the output is affine, so ``inv`` is.
    """

    inv: torch.Tensor
    size: tuple[int, int]
    needed: torch.Tensor
    affine: bool


def _checked_ops(ops: Sequence[GeometricOp]) -> list[int]:
    """Indices of the ops that need a crop window: ops that can sample outside their input
    (rotation, affine, perspective) after an op that does not keep the frame (a crop, a
    resized crop, a rotation). After flips alone, outside the input is outside the image."""
    return [k for k in range(1, len(ops))
            if not ops[k].stays_inside and not all(op.keeps_frame for op in ops[:k])]


def crop_windows(ops: Sequence[GeometricOp], params: Sequence[dict[str, torch.Tensor]],
                 size: tuple[int, int]) -> list[Window]:
    """The intermediate images a fused warp must not look outside of, as torchvision's
    op-by-op pipeline does not.

    An op that can sample outside its input (rotation, affine, perspective) sees only the
    previous op's output: after a crop, the corners a rotation uncovers are ``fill`` in
    torchvision, while the one fused warp would find the original image's pixels there.
    One :class:`Window` per such op after an op that changes the frame (see
    :func:`_checked_ops`); :func:`window_spans` and :func:`fill_outside` apply them. The first op's input is the image itself, which the warp's padding already
    handles, and a window after flips alone would only replace that padding's blend at the
    edge by a hard cut (and cost a pass). A sample whose source image fits inside the
    window (a crop of the whole image) is marked not ``needed``, for the same reason.
    """
    checked = _checked_ops(ops)
    if not checked:
        return []
    sizes, matrices = [], []
    for op, p in zip(ops, params, strict=True):
        sizes.append(size)
        matrices.append(op.matrix(p, size))
        size = op.output_size(size)
    h0, w0 = sizes[0]
    m0 = matrices[0]
    corners = constant(((0.0, 0.0), (w0, 0.0), (w0, h0), (0.0, h0)), m0.device, m0.dtype).expand(m0.shape[0], 4, 2)
    windows = []
    after: torch.Tensor | None = None  # stage k -> output
    before = [m0]  # source -> stage k + 1
    for m in matrices[1:]:
        before.append(m @ before[-1])
    for k in range(len(ops) - 1, 0, -1):
        after = matrices[k] if after is None else after @ matrices[k]
        if k in checked:
            h, w = sizes[k]
            q = transform_points(corners, before[k - 1])
            tol = 1e-3
            fits = ((q[..., 0] >= -tol) & (q[..., 0] <= w + tol) & (q[..., 1] >= -tol)
                    & (q[..., 1] <= h + tol)).all(dim=1)
            windows.append(Window(torch.linalg.inv(after), sizes[k], ~fits, all(op.affine for op in ops[k:])))
    return windows


def window_segments(ops: Sequence[GeometricOp], params: Sequence[dict[str, torch.Tensor]],
                    size: tuple[int, int]) -> list[tuple[torch.Tensor, tuple[int, int]]]:
    """The op list cut before every op that :func:`crop_windows` checks: per piece, its
    composed (B, 3, 3) matrix and the (H, W) it ends at (the last piece ends at the
    output). Boxes clip to each piece's end, as torchvision's op-by-op pipeline clips them."""
    checked = _checked_ops(ops)
    pieces: list[tuple[torch.Tensor, tuple[int, int]]] = []
    total: torch.Tensor | None = None
    for k, (op, p) in enumerate(zip(ops, params, strict=True)):
        if k in checked and total is not None:
            pieces.append((total, size))
            total = None
        m = op.matrix(p, size)
        total = m if total is None else m @ total
        size = op.output_size(size)
    if total is not None:
        pieces.append((total, size))
    return pieces


def window_spans(windows: Sequence[Window], out_size: tuple[int, int]) -> tuple[torch.Tensor, torch.Tensor] | None:
    """Per output row, the x range of the pixel centres that lie inside every window a
    sample needs, as its centre and half width ((B, H_out) each); None without windows.

    A window's test ``0 <= qx <= w, 0 <= qy <= h`` with ``q = inv @ (x, y, 1)`` is, in
    homogeneous form (a positive denominator ``den``), four linear inequalities
    ``a * x + b * y + c >= 0`` (``qx >= 0``, ``w * den - qx >= 0``, and the same in y), plus
    ``den >= 0`` for a projective window. On one row ``y`` each is a half-line in ``x``, so
    the inside of all windows is one interval per row, from per-row terms: the mask then
    costs a comparison per pixel (:func:`fill_outside`) instead of a projective divide.
    Ends are clamped to ``[-1, W_out + 1]``; an empty row has a negative half width. On a
    CPU, also None when no output pixel lies outside (that check would make a GPU wait).
    """
    if not windows:
        return None
    oh, ow = out_size
    m0 = windows[0].inv
    ys = (torch.arange(oh, device=m0.device, dtype=m0.dtype) + 0.5).view(1, 1, oh)
    lo = torch.full((m0.shape[0], oh), -1.0, device=m0.device, dtype=m0.dtype)
    hi = torch.full_like(lo, ow + 1.0)
    for inv, (h, w), needed, affine in windows:
        rows = [inv[:, 0], w * inv[:, 2] - inv[:, 0], inv[:, 1], h * inv[:, 2] - inv[:, 1]]
        if not affine:
            rows.append(inv[:, 2])  # den >= 0: the side of the horizon the window is on
        r = torch.stack(rows, 1)  # (B, R, 3): a * x + b * y + c >= 0
        a = r[:, :, 0:1]
        c = r[:, :, 1:2] * ys + r[:, :, 2:3]  # (B, R, H_out): a * x + c >= 0 on each row
        t = -c / torch.where(a == 0, 1.0, a)
        # a > 0: x >= t; a < 0: x <= t; a == 0: every x, or none where c < 0.
        w_lo = torch.where(a > 0, t, -1.0).amax(1)
        w_hi = torch.where(a < 0, t, ow + 1.0).amin(1)
        w_lo = torch.where(((a == 0) & (c < 0)).any(1), ow + 1.0, w_lo)
        keep = needed.view(-1, 1)
        lo = torch.where(keep, torch.maximum(lo, w_lo), lo)
        hi = torch.where(keep, torch.minimum(hi, w_hi), hi)
    lo, hi = lo.clamp(-1.0, ow + 1.0), hi.clamp(-1.0, ow + 1.0)
    if lo.device.type == "cpu" and bool((lo <= 0.5).all() & (hi >= ow - 0.5).all()):
        return None
    return (lo + hi) * 0.5, (hi - lo) * 0.5


def _outside(spans: tuple[torch.Tensor, torch.Tensor], width: int) -> torch.Tensor:
    """(B, H_out, width) True where a pixel centre lies outside its row's span:
    ``|x - centre| > half``, a subtraction and a comparison (then no pass to negate)."""
    mid, half = spans
    xs = torch.arange(width, device=mid.device, dtype=mid.dtype) + 0.5
    return (xs - mid.unsqueeze(2)).abs_() > half.unsqueeze(2)


def outside_mask(spans: tuple[torch.Tensor, torch.Tensor], out_width: int) -> torch.Tensor:
    """(B, 1, H_out, W_out) True where a pixel centre lies outside its row's span
    (:func:`window_spans`)."""
    return _outside(spans, out_width).unsqueeze(1)


def fill_outside(x: torch.Tensor, spans: tuple[torch.Tensor, torch.Tensor] | None, value: float) -> torch.Tensor:
    """Set, in place, the pixels of ``x`` (B, H, W) or (B, C, H, W) whose centre lies
    outside its row's span (:func:`window_spans`) to ``value``; returns ``x``."""
    if spans is None:
        return x
    mask = _outside(spans, x.shape[-1])
    return x.masked_fill_(mask if x.ndim == 3 else mask.unsqueeze(1), value)


# Continuous coordinates -> the pixel-index coordinates kornia's warp uses.
_TO_INDEX = ((1.0, 0.0, -0.5), (0.0, 1.0, -0.5), (0.0, 0.0, 1.0))
_FROM_INDEX = ((1.0, 0.0, 0.5), (0.0, 1.0, 0.5), (0.0, 0.0, 1.0))


def affine_grid(matrix: torch.Tensor, in_size: tuple[int, int], out_size: tuple[int, int]) -> torch.Tensor:
    """The ``grid_sample`` grid (align_corners=False) of per-sample affine matrices.

    For an affine map the source x of output pixel (i, j) is ``a(j) + b(i)``, so the grid is
    two broadcast sums of per-row and per-column terms written straight into the grid: two
    passes over the output instead of a homogeneous transform of every point.

    Shape:
        matrix: (B, 3, 3) input -> output continuous pixels, last row (0, 0, 1).
        Returns (B, H_out, W_out, 2).
    """
    (h, w), (oh, ow) = in_size, out_size
    a, b_, tx = matrix[:, 0, 0], matrix[:, 0, 1], matrix[:, 0, 2]
    c, d, ty = matrix[:, 1, 0], matrix[:, 1, 1], matrix[:, 1, 2]
    det = a * d - b_ * c
    # Closed-form inverse (output -> input), pre-scaled to grid_sample's [-1, 1] units.
    ia, ib, ic, id_ = d / det * (2.0 / w), -b_ / det * (2.0 / w), -c / det * (2.0 / h), a / det * (2.0 / h)
    ix = -(ia * tx + ib * ty) - 1.0
    iy = -(ic * tx + id_ * ty) - 1.0
    xs = torch.arange(ow, device=matrix.device, dtype=matrix.dtype) + 0.5
    ys = torch.arange(oh, device=matrix.device, dtype=matrix.dtype) + 0.5
    grid = torch.empty(matrix.shape[0], oh, ow, 2, device=matrix.device, dtype=matrix.dtype)
    for k, (p, q, r) in enumerate(((ia, ib, ix), (ic, id_, iy))):
        col = p[:, None] * xs  # (B, W_out)
        row = q[:, None] * ys + r[:, None]  # (B, H_out)
        torch.add(col[:, None, :], row[:, :, None], out=grid[..., k])
    return grid


def warp(x: torch.Tensor, matrix: torch.Tensor, out_size: tuple[int, int], *, mode: str = "bilinear",
         fill: float = 0.0, inside: bool = False, affine: bool = False,
         spans: tuple[torch.Tensor, torch.Tensor] | None = None) -> torch.Tensor:
    """Resample a float batch once with per-sample matrices.

    Args:
        x: (B, C, H, W) float.
        matrix: (B, 3, 3) from input to output continuous pixel coordinates.
        out_size: (H_out, W_out).
        mode: "bilinear" for images, "nearest" for masks.
        fill: value where the output looks outside the input.
        inside: every op keeps samples inside the input (crop/flip), so edge pixels are
            replicated for the last half pixel instead of blended with ``fill``.
        affine: every matrix is affine: build the grid directly (see :func:`affine_grid`)
            instead of kornia's projective ``warp_perspective``.
        spans: :func:`window_spans`: output pixels outside them are ``fill`` whatever they
            map to. On the affine path they are sent off the image in the sampling grid
            (one value per pixel instead of one per channel, and no taps to read).

    Returns:
        (B, C, H_out, W_out) float, same dtype as ``x``.
    """
    padding = "border" if inside else "zeros"
    # Zero padding on (x - fill) then + fill: the border blends towards ``fill`` exactly as
    # torchvision's mask trick does, without a second channel.
    shift = 0.0 if inside else fill
    src = x - shift if shift else x
    in_grid = spans is not None and affine and not inside
    if affine:
        grid = affine_grid(matrix.to(x.dtype), tuple(x.shape[-2:]), out_size)
        if in_grid:
            # Far left of the image (grid units are [-1, 1]): every tap reads the zero padding.
            fill_outside(grid[..., 0], spans, -8.0)
        out = F.grid_sample(src, grid, mode=mode, padding_mode=padding, align_corners=False)
    else:
        m = constant(_TO_INDEX, matrix.device, matrix.dtype) @ matrix @ constant(_FROM_INDEX, matrix.device, matrix.dtype)
        out = warp_perspective(src, m, out_size, mode=mode, padding_mode=padding, align_corners=True)
    out = out + shift if shift else out
    if spans is not None and not in_grid:
        out = fill_outside(out, spans, fill)
    return out


def transform_points(points: torch.Tensor, matrix: torch.Tensor) -> torch.Tensor:
    """Apply per-sample matrices to points.

    Shape:
        points: (B, N, 2) continuous pixels; matrix: (B, 3, 3); returns (B, N, 2).
    """
    homog = torch.cat([points, torch.ones_like(points[..., :1])], dim=-1) @ matrix.transpose(1, 2)
    return homog[..., :2] / homog[..., 2:]


def only_flips(ops: Sequence[GeometricOp]) -> bool:
    """True when every geometric op is a flip: they are then applied by indexing."""
    return all(isinstance(op, _RandomFlip) for op in ops)


def apply_flips(x: torch.Tensor, ops: Sequence[GeometricOp], params: Sequence[dict[str, torch.Tensor]]) -> torch.Tensor:
    """Flip the flagged samples of a (B, ...) tensor exactly, without resampling."""
    for op, p in zip(ops, params, strict=True):
        flag = p["flip"].view(-1, *([1] * (x.ndim - 1)))
        x = torch.where(flag, x.flip(-1 if op.axis == 0 else -2), x)
    return x
