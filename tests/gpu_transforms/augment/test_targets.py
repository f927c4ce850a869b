"""Masks, boxes and keypoints follow the image through the stage."""

from __future__ import annotations

import warnings

import pytest
import torch

from gpufeed.gpu_transforms.augment import (
    ColorJitter,
    GpuAugment,
    MixUp,
    RandomAffine,
    RandomHorizontalFlip,
    RandomPerspective,
    RandomResizedCrop,
    RandomRotation,
    RandomVerticalFlip,
)

B, H, W = 6, 48, 56


def boxes_and_mask(seed: int = 0, n: int = 3) -> tuple[list[torch.Tensor], list[torch.Tensor], torch.Tensor]:
    """Non-overlapping integer boxes per image and a mask where box k is painted k + 1."""
    g = torch.Generator().manual_seed(seed)
    boxes, labels = [], []
    mask = torch.zeros(B, H, W, dtype=torch.int64)
    for i in range(B):
        rows = []
        for k in range(n):  # one vertical band of the image per box, so boxes never overlap
            x1 = k * (W // n) + int(torch.randint(0, 4, (), generator=g))
            x2 = x1 + int(torch.randint(6, W // n - 4, (), generator=g))
            y1 = int(torch.randint(0, H // 2, (), generator=g))
            y2 = y1 + int(torch.randint(6, H // 2, (), generator=g))
            rows.append([x1, y1, x2, y2])
            mask[i, y1:y2, x1:x2] = k + 1
        boxes.append(torch.tensor(rows, dtype=torch.float32))
        labels.append(torch.arange(1, n + 1))
    return boxes, labels, mask


def mask_bbox(m: torch.Tensor) -> torch.Tensor | None:
    ys, xs = torch.nonzero(m, as_tuple=True)
    if len(xs) == 0:
        return None
    return torch.tensor([xs.min(), ys.min(), xs.max() + 1, ys.max() + 1], dtype=torch.float32)


AXIS_ALIGNED = [RandomResizedCrop((40, 40), scale=(0.3, 1.0)), RandomHorizontalFlip(), RandomVerticalFlip(),
                RandomAffine(0, translate=(0.1, 0.1), scale=(0.8, 1.2))]


@pytest.mark.parametrize("seed", [0, 1])
def test_a_box_drawn_into_a_mask_covers_the_same_pixels(seed):
    boxes, labels, mask = boxes_and_mask(seed)
    images = torch.rand(B, 3, H, W)
    stage = GpuAugment([*AXIS_ALIGNED, ColorJitter(0.2)], seed=seed)
    res = stage.apply(images, boxes=boxes, box_labels=labels, masks=mask)
    assert res.masks.shape == (B, 40, 40) and res.masks.dtype == torch.int64
    checked = 0
    for i in range(B):
        assert len(res.boxes[i]) == len(res.box_labels[i])
        for box, lab in zip(res.boxes[i], res.box_labels[i], strict=True):
            bb = mask_bbox(res.masks[i] == lab)
            assert bb is not None, "a kept box has no pixels of its own in the mask"
            torch.testing.assert_close(box, bb, atol=1.0, rtol=0)
            checked += 1
        kept = set(res.box_labels[i].tolist())
        for lab in set(range(1, 4)) - kept:  # a dropped box left at most a sliver
            bb = mask_bbox(res.masks[i] == lab)
            assert bb is None or min(bb[2] - bb[0], bb[3] - bb[1]) <= 1.5
    assert checked >= B


def test_rotated_and_warped_boxes_enclose_their_pixels():
    boxes, labels, mask = boxes_and_mask(2)
    stage = GpuAugment([RandomRotation(30), RandomPerspective(0.3, p=1.0)], seed=0)
    res = stage.apply(torch.rand(B, 3, H, W), boxes=boxes, box_labels=labels, masks=mask)
    for i in range(B):
        for box, lab in zip(res.boxes[i], res.box_labels[i], strict=True):
            ys, xs = torch.nonzero(res.masks[i] == lab, as_tuple=True)
            assert (xs + 0.5 >= box[0] - 1).all() and (xs + 0.5 <= box[2] + 1).all()
            assert (ys + 0.5 >= box[1] - 1).all() and (ys + 0.5 <= box[3] + 1).all()


def test_boxes_leaving_the_image_are_dropped_with_their_labels():
    images = torch.rand(2, 3, 40, 40)
    boxes = [torch.tensor([[0.0, 0.0, 10.0, 10.0], [30.0, 30.0, 40.0, 40.0]]), torch.zeros(0, 4)]
    labels = [torch.tensor([7, 9]), torch.zeros(0, dtype=torch.long)]
    # Translate right/down by exactly 20 px: the second box leaves, the first moves.
    stage = GpuAugment([RandomAffine(0, translate=(0.5, 0.5), p=1.0)], seed=0)
    params = stage.sample_params(images)
    params.per_op[0]["translate"][:] = 20.0
    res = stage.apply(images, boxes=boxes, box_labels=labels, params=params)
    torch.testing.assert_close(res.boxes[0], torch.tensor([[20.0, 20.0, 30.0, 30.0]]))
    assert res.box_labels[0].tolist() == [7]
    assert res.boxes[1].shape == (0, 4) and res.box_labels[1].shape == (0,)


def test_flips_only_move_targets_exactly():
    boxes, labels, mask = boxes_and_mask(3)
    kp = torch.tensor([[[0.5, 0.5], [10.0, 20.0]]]).repeat(B, 1, 1)
    stage = GpuAugment([RandomHorizontalFlip(p=1.0)], seed=0)
    res = stage.apply(torch.rand(B, 3, H, W), boxes=boxes, box_labels=labels, masks=mask, keypoints=kp)
    assert torch.equal(res.masks, mask.flip(-1))
    for i in range(B):
        expect = boxes[i].clone()
        expect[:, [0, 2]] = W - boxes[i][:, [2, 0]]
        torch.testing.assert_close(res.boxes[i], expect)
    torch.testing.assert_close(res.keypoints[0], torch.tensor([[W - 0.5, 0.5], [W - 10.0, 20.0]]))


def test_keypoints_follow_their_pixel_and_report_visibility():
    images = torch.rand(B, 3, H, W)
    pts = torch.tensor([[12.5, 9.5], [40.5, 30.5], [3.5, 44.5]]).repeat(B, 1, 1)
    mask = torch.zeros(B, 3, H, W)
    for k, (x, y) in enumerate(pts[0].tolist()):
        mask[:, k, int(y), int(x)] = 1.0
    stage = GpuAugment([RandomAffine(20, translate=(0.2, 0.2), scale=(1.5, 2.0)), RandomHorizontalFlip()], seed=4)
    res = stage.apply(images, masks=mask, keypoints=pts)
    assert res.keypoints.shape == (B, 3, 2) and res.keypoints_visible.shape == (B, 3)
    assert not res.keypoints_visible.all(), "the zoom should push some points out"
    for i in range(B):
        for k in range(3):
            ys, xs = torch.nonzero(res.masks[i, k] > 0.5, as_tuple=True)
            if res.keypoints_visible[i, k] and len(xs):
                centre = torch.stack([xs.float().mean() + 0.5, ys.float().mean() + 0.5])
                torch.testing.assert_close(res.keypoints[i, k], centre, atol=1.5, rtol=0)


def test_masks_keep_dtype_and_values_and_take_the_fill():
    mask = torch.randint(1, 5, (B, H, W), dtype=torch.uint8)
    stage = GpuAugment([RandomRotation((45, 45))], seed=0, mask_fill=255)
    res = stage.apply(torch.rand(B, 3, H, W), masks=mask)
    assert res.masks.dtype == torch.uint8
    assert set(torch.unique(res.masks).tolist()) <= {1, 2, 3, 4, 255}
    assert (res.masks == 255).any()
    as_bool = stage.apply(torch.rand(B, 3, H, W), masks=mask > 2).masks
    assert as_bool.dtype == torch.bool


def _bad(images, **targets):
    return GpuAugment([RandomRotation(5)], seed=0).apply(images, **targets)


@pytest.mark.parametrize("targets, match", [
    (dict(boxes=[torch.tensor([[5.0, 5.0, 2.0, 9.0]])] * 2), "x2 < x1"),
    (dict(boxes=[torch.tensor([[5.0, 5.0, 90.0, 9.0]])] * 2), "outside"),
    (dict(boxes=[torch.tensor([[float("nan"), 5.0, 6.0, 9.0]])] * 2), "NaN"),
    (dict(boxes=[torch.zeros(0, 4)]), "list of B=2"),
    (dict(boxes=[torch.zeros(1, 3)] * 2), "shape \\(N, 4\\)"),
    (dict(boxes=[torch.zeros(1, 4)] * 2, box_labels=[torch.zeros(2)] * 2), "box_labels\\[0\\]"),
    (dict(boxes=[torch.zeros(1, 4, device="meta")] * 2), "boxes\\[0\\] is on meta"),
    (dict(masks=torch.zeros(2, 10, 10)), "masks must have shape"),
    (dict(masks=torch.zeros(2, 20, 20, device="meta")), "masks is on meta"),
    (dict(keypoints=torch.zeros(2, 3)), "keypoints must have shape"),
    (dict(box_labels=[torch.zeros(1)] * 2), "without boxes"),
])
def test_bad_targets_are_refused_naming_the_argument(targets, match):
    with pytest.raises((ValueError, TypeError), match=match):
        _bad(torch.rand(2, 3, 20, 20), **targets)


def test_mixing_refuses_dense_targets():
    stage = GpuAugment([MixUp(num_classes=2)], seed=0)
    with pytest.raises(ValueError, match="cannot carry"):
        stage.apply(torch.rand(2, 3, 8, 8), torch.tensor([0, 1]), masks=torch.zeros(2, 8, 8))


def test_a_mask_fill_the_mask_dtype_cannot_hold_is_refused():
    images = torch.rand(2, 3, 8, 8)
    stage = GpuAugment([RandomRotation((45, 45))], seed=0, mask_fill=300)
    with pytest.raises(ValueError, match=r"mask_fill=300 .*uint8"):
        stage.apply(images, masks=torch.zeros(2, 8, 8, dtype=torch.uint8))
    out = stage.apply(images, masks=torch.zeros(2, 8, 8, dtype=torch.int64))  # fits int64: fine
    assert out.masks.max() == 300
    with pytest.raises(ValueError, match="mask_fill=0.5"):
        GpuAugment([RandomRotation((45, 45))], mask_fill=0.5).apply(images, masks=torch.zeros(2, 8, 8, dtype=torch.int32))


def test_normalised_boxes_are_warned_about_not_silently_dropped():
    stage = GpuAugment([RandomHorizontalFlip()], seed=0)
    images = torch.rand(2, 3, H, W)
    boxes = [torch.tensor([[0.1, 0.1, 0.5, 0.6]]), torch.tensor([[0.2, 0.3, 0.9, 0.8]])]
    with pytest.warns(UserWarning, match="every box lies within 0..1"):
        stage.apply(images, boxes=boxes)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        stage.apply(images, boxes=[b * 40 for b in boxes])  # pixel boxes: no warning


def test_targets_after_a_crop_and_a_rotation_keep_to_the_crop():
    """As torchvision (crop first, then rotate): masks take the fill outside the crop, a
    box outside it is dropped (it was rotated into view), and a keypoint there is not visible."""
    x = torch.rand(2, 3, 40, 40)
    masks = torch.ones(2, 40, 40, dtype=torch.int64)
    stage = GpuAugment([RandomResizedCrop(20, scale=(0.25, 0.25), ratio=(1, 1)), RandomRotation((45, 45))], seed=0,
                       mask_fill=255)
    params = stage.sample_params(x)
    boxes, points = [], []
    for left, top, w, h in params.per_op[0]["box"].long().tolist():
        # A thin box and a point just beside the crop, which the rotation brings into view.
        outside = left + w + 1 if left + w + 3 <= 40 else left - 3
        boxes.append(torch.tensor([[outside, top, outside + 2.0, top + h]]))
        points.append([[outside + 1.0, top + h / 2], [left + w / 2, top + h / 2]])
    res = stage.apply(x, boxes=boxes, masks=masks, keypoints=torch.tensor(points), params=params)
    corners = (res.images == 0).all(dim=1)  # fill, where torchvision's rotation uncovers the corners
    assert corners.any() and (res.masks[corners] == 255).all() and (res.masks[~corners] == 1).float().mean() > 0.97
    assert all(len(b) == 0 for b in res.boxes)
    assert res.keypoints_visible.tolist() == [[False, True], [False, True]]


def test_boxes_overshooting_the_border_by_under_a_pixel_are_kept_and_clipped():
    # COCO-style annotations overshoot the border by a fraction of a pixel; refused at
    # 1e-3 px, one such box stopped training mid-epoch (torchvision clamps it).
    images = torch.rand(2, 3, 40, 60)
    boxes = [torch.tensor([[-0.4, 2.0, 60.5, 39.7]]), torch.tensor([[10.0, 10.0, 20.0, 40.9]])]
    out = GpuAugment([RandomHorizontalFlip(p=1.0)], seed=0).apply(images, boxes=boxes)
    assert [len(b) for b in out.boxes] == [1, 1]
    for b in out.boxes:
        assert b[:, 0].min() >= 0 and b[:, 2].max() <= 60 and b[:, 1].min() >= 0 and b[:, 3].max() <= 40
    with pytest.raises(ValueError, match="outside"):  # a wrong format is out by more
        GpuAugment([RandomHorizontalFlip(p=1.0)], seed=0).apply(images, boxes=[torch.tensor([[5.0, 5.0, 62.0, 9.0]])] * 2)
