"""Targets moved with the image: masks (nearest), xyxy boxes and keypoints.

All three use the very matrix that warped the image, so a box drawn into a mask covers
the same pixels after augmentation. Only geometric ops change targets; colour ops,
erasing and normalisation leave them as they are.
"""

from __future__ import annotations

import torch

from gpufeed.gpu_transforms.augment.geometric import Window, transform_points, warp


def warp_masks(masks: torch.Tensor, matrix: torch.Tensor, out_size: tuple[int, int], *,
               fill: float, inside: bool, affine: bool = False) -> torch.Tensor:
    """Warp (B, H, W) or (B, K, H, W) masks with nearest sampling; dtype is kept.

    Integer class ids survive the float round trip exactly (up to 2**24); pixels that look
    outside the image get ``fill`` (e.g. 255 for an ignore index).
    """
    squeeze = masks.ndim == 3
    m = masks.unsqueeze(1) if squeeze else masks
    out = warp(m.to(torch.float32), matrix.to(torch.float32), out_size, mode="nearest", fill=fill, inside=inside,
               affine=affine)
    out = out.squeeze(1) if squeeze else out
    if masks.dtype == torch.bool:
        return out > 0.5
    return out.round().to(masks.dtype) if not masks.is_floating_point() else out.to(masks.dtype)


def warp_boxes(boxes: list[torch.Tensor], labels: list[torch.Tensor] | None, matrix: torch.Tensor,
               out_size: tuple[int, int], min_size: float,
               segments: list[tuple[torch.Tensor, tuple[int, int]]] | None = None,
               ) -> tuple[list[torch.Tensor], list[torch.Tensor] | None, list[torch.Tensor]]:
    """Move per-image xyxy boxes; clip them to the output and drop the ones left too small.

    A box becomes the envelope of its four transformed corners (exact for flips, crops and
    scaling; a tight superset under rotation or perspective). Boxes narrower or shorter
    than ``min_size`` pixels after clipping are dropped together with their labels.
    ``segments`` (:func:`~.geometric.window_segments`) moves them piece by piece instead,
    clipping to each piece's end: to a crop before a rotation, as torchvision does.

    Returns:
        The boxes (list of (M_i, 4)), labels (list of (M_i,)) and the kept boxes' indices
        in the input (list of (M_i,) int64) per image.
    """
    counts = [b.shape[0] for b in boxes]
    if sum(counts) == 0:
        return ([b.clone() for b in boxes], None if labels is None else [lb.clone() for lb in labels],
                [torch.zeros(0, dtype=torch.int64, device=b.device) for b in boxes])
    flat = torch.cat(boxes).to(matrix.dtype)
    # Which image each box is of, made on the host from the counts it has: on a GPU a
    # repeat_interleave over device counts waits for the device to learn its length.
    owner_host = torch.repeat_interleave(torch.arange(len(boxes)), torch.tensor(counts))
    owner = owner_host.to(flat.device, non_blocking=True)
    keep = None
    for m, (oh, ow) in segments or [(matrix, out_size)]:
        x1, y1, x2, y2 = flat.unbind(1)
        corners = torch.stack([x1, y1, x2, y1, x2, y2, x1, y2], 1).view(-1, 4, 2)
        moved = transform_points(corners, m[owner])
        lo = moved.amin(dim=1)
        hi = moved.amax(dim=1)
        flat = torch.stack([lo[:, 0].clamp(0, ow), lo[:, 1].clamp(0, oh), hi[:, 0].clamp(0, ow),
                            hi[:, 1].clamp(0, oh)], 1)
        # A box a crop leaves empty stays dropped, even if a later rotation widens its sliver.
        fits = ((flat[:, 2] - flat[:, 0]) >= min_size) & ((flat[:, 3] - flat[:, 1]) >= min_size)
        keep = fits if keep is None else keep & fits
    xyxy = flat.to(boxes[0].dtype)
    # One wait for the device: which boxes are kept. Each image's share then follows from
    # the host's owners (a boolean mask per image waited once per image and per target).
    kept = keep.cpu().nonzero().squeeze(1)
    per_image = torch.bincount(owner_host[kept], minlength=len(boxes)).tolist()
    kept_dev = kept.to(xyxy.device, non_blocking=True)
    out_boxes = list(xyxy.index_select(0, kept_dev).split(per_image))
    # Each kept box's index within its own image: its flat index less its image's offset.
    offsets = torch.cumsum(torch.tensor([0, *counts[:-1]]), 0)
    indices = list((kept - offsets[owner_host[kept]]).to(xyxy.device, non_blocking=True).split(per_image))
    if labels is None:
        return out_boxes, None, indices
    flat_labels = torch.cat(labels)
    return (out_boxes, list(flat_labels.index_select(0, kept.to(flat_labels.device, non_blocking=True)).split(per_image)),
            indices)


def warp_keypoints(keypoints: torch.Tensor, matrix: torch.Tensor, out_size: tuple[int, int],
                   windows: list[Window] | None = None,
                   ) -> tuple[torch.Tensor, torch.Tensor]:
    """Move (B, K, 2) keypoints; none are dropped, so indices stay aligned.

    Returns:
        The moved keypoints (B, K, 2) and a (B, K) bool that is True where a point lies
        inside the output image (and inside every crop a later rotation looked beyond:
        ``windows`` from :func:`~.geometric.crop_windows`).
    """
    moved = transform_points(keypoints.to(matrix.dtype), matrix)
    oh, ow = out_size
    visible = (moved[..., 0] >= 0) & (moved[..., 0] < ow) & (moved[..., 1] >= 0) & (moved[..., 1] < oh)
    for inv, (h, w), needed, _ in windows or []:
        q = transform_points(moved, inv)
        inside = (q[..., 0] >= 0) & (q[..., 0] < w) & (q[..., 1] >= 0) & (q[..., 1] < h)
        visible &= inside | ~needed[:, None]
    return moved.to(keypoints.dtype), visible
