"""What a user bringing their own batches relies on: odd sizes, labels of any shape,
mixing that always mixes, kept-box indices, and errors that name the op."""

from __future__ import annotations

import pytest
import torch

from gpufeed.gpu_transforms.augment import (
    IMAGENET_MEAN,
    IMAGENET_STD,
    ColorJitter,
    CutMix,
    GaussianBlur,
    GpuAugment,
    MixUp,
    Normalize,
    RandomAffine,
    RandomErasing,
    RandomHorizontalFlip,
    RandomPerspective,
    RandomResizedCrop,
    RandomRotation,
)
from gpufeed.gpu_transforms.augment.params import permutation


def u8(b: int = 4, c: int = 3, h: int = 20, w: int = 30, seed: int = 0) -> torch.Tensor:
    return torch.randint(0, 256, (b, c, h, w), dtype=torch.uint8, generator=torch.Generator().manual_seed(seed))


@pytest.mark.parametrize("make", [MixUp, CutMix])
def test_a_mixing_partner_is_never_the_sample_itself(make):
    # A random permutation paired a sample with itself 1 time in B: a batch of 2 went
    # unmixed about half the time even with p=1.
    x, y = u8(2), torch.tensor([0, 1])
    stage = GpuAugment([make(num_classes=2)], seed=0)
    for _ in range(30):
        _, soft = stage(x, y)
        assert (stage.last_params.mix["perm"] == torch.tensor([1, 0])).all()
        assert (soft[:, 0] < 1).all() and (soft[:, 1] > 0).all()
    u = torch.rand(500, 9, generator=torch.Generator().manual_seed(1))
    for row in u:
        perm = permutation(row, same_on_batch=False)
        assert sorted(perm.tolist()) == list(range(9)) and (perm != torch.arange(9)).all()


def test_labels_that_are_only_passed_through_may_have_any_per_sample_shape():
    stage = GpuAugment([RandomHorizontalFlip()], seed=0)
    x = u8(4)
    for labels in (torch.rand(4), torch.zeros(4, 2, dtype=torch.long), torch.zeros(4, 5, dtype=torch.bool)):
        assert stage(x, labels)[1] is labels
    with pytest.raises(ValueError, match="one row per image"):
        stage(x, torch.zeros(3))


def test_labels_mixing_cannot_use_are_refused_with_a_way_out():
    stage = GpuAugment([MixUp(num_classes=5)], seed=0)
    x = u8(4)
    with pytest.raises(ValueError, match=r"MixUp needs .*multi-hot labels\? pass them as .float\(\)"):
        stage(x, torch.zeros(4, 5, dtype=torch.long))
    with pytest.raises(ValueError, match=r"float class ids\? pass them as .long\(\)"):
        stage(x, torch.zeros(4))
    assert stage(x, torch.zeros(4, 5))[1].shape == (4, 5)


def test_normalize_with_one_mean_and_std_applies_to_every_channel_as_torchvision():
    x = u8(2)
    out = GpuAugment([Normalize((0.5,), (0.5,))])(x)
    torch.testing.assert_close(out, x.float() / 255 * 2 - 1)
    assert GpuAugment([Normalize((0.5,), (0.5,))])(u8(2, c=4)).shape == (2, 4, 20, 30)
    with pytest.raises(ValueError, match=r"Normalize needs 3 \(3 mean/std values"):
        GpuAugment([Normalize(IMAGENET_MEAN, IMAGENET_STD)])(u8(2, c=1))


@pytest.mark.parametrize("shape", [(1, 1), (1, 40), (40, 1)])
def test_perspective_of_a_one_pixel_wide_image_is_refused_not_blanked(shape):
    # The four corners coincide: the homography was NaN and every pixel came out as fill.
    with pytest.raises(ValueError, match="RandomPerspective needs images of at least 2x2"):
        GpuAugment([RandomPerspective(p=1.0)], seed=0)(u8(2, h=shape[0], w=shape[1]))


def test_odd_sizes_one_sample_and_wide_panoramas_run():
    stage = GpuAugment([RandomResizedCrop((333, 500)), RandomHorizontalFlip(), RandomRotation(15),
                        ColorJitter(0.4, 0.4, 0.4, 0.1), Normalize(IMAGENET_MEAN, IMAGENET_STD)], seed=0)
    out = stage(u8(1, h=300, w=451))
    assert out.shape == (1, 3, 333, 500) and out.dtype == torch.float32
    assert torch.equal(stage(u8(1, h=300, w=451), params=stage.last_params), out)
    pano = GpuAugment([RandomResizedCrop(16), RandomAffine(5, (0.1, 0.1))], seed=0)(u8(2, h=8, w=1000))
    assert pano.shape == (2, 3, 16, 16)


@pytest.mark.parametrize("make, match", [
    (lambda: RandomRotation(10, p=2), "RandomRotation: p must be"),
    (lambda: RandomResizedCrop(0), "RandomResizedCrop: size must be"),
    (lambda: ColorJitter(hue=0.7), "ColorJitter: hue must"),
    (lambda: GaussianBlur(4), "GaussianBlur: kernel_size must"),
    (lambda: MixUp(0), "MixUp: num_classes must"),
    (lambda: CutMix(3, alpha=-1), "CutMix: alpha must"),
    (lambda: RandomErasing(scale=(0.5, 0.1)), "RandomErasing: scale must"),
])
def test_constructor_errors_name_the_op_and_the_argument(make, match):
    with pytest.raises((ValueError, TypeError), match=match):
        make()


def test_runtime_errors_name_the_op_and_a_way_out():
    with pytest.raises(ValueError, match=r"GaussianBlur\(kernel_size=31\) needs images larger than 15"):
        GpuAugment([GaussianBlur(31)])(u8(2, h=10))
    with pytest.raises(ValueError, match="ColorJitter needs 1 or 3.*RGBA or CMYK"):
        GpuAugment([ColorJitter(0.2, 0.2)])(u8(2, c=4))
    with pytest.raises(TypeError, match=r"16-bit image.*images.float\(\) / 65535"):
        GpuAugment([RandomHorizontalFlip()])(torch.zeros(2, 3, 8, 8, dtype=torch.int32))


def test_kept_boxes_report_their_indices_in_the_input():
    x = u8(2, h=20, w=30)
    boxes = [torch.tensor([[0.0, 0.0, 10.0, 10.0], [5.0, 5.0, 5.0, 9.0], [2.0, 3.0, 30.0, 20.0]]),
             torch.tensor([[1.0, 1.0, 1.5, 9.0], [4.0, 4.0, 8.0, 8.0]])]
    res = GpuAugment([RandomHorizontalFlip(p=1.0), RandomRotation((0, 0))], seed=0).apply(
        x, boxes=boxes, box_labels=[torch.tensor([7, 8, 9]), torch.tensor([5, 6])])
    assert [i.tolist() for i in res.box_indices] == [[0, 2], [1]]
    assert [lb.tolist() for lb in res.box_labels] == [[7, 9], [6]]
    empty = GpuAugment([RandomRotation(10)], seed=0).apply(x, boxes=[torch.zeros(0, 4), torch.zeros(0, 4)])
    assert [i.tolist() for i in empty.box_indices] == [[], []]


def test_integer_mask_ids_a_warp_would_round_are_refused():
    x = u8(2)
    masks = torch.zeros(2, 20, 30, dtype=torch.int64)
    masks[:, :10] = 2**24 + 1  # float32 rounds it to 2**24: two instances merged silently
    with pytest.raises(ValueError, match=r"masks has ids in \[0, 16777217\]"):
        GpuAugment([RandomRotation(10)], seed=0).apply(x, masks=masks)
    flipped = GpuAugment([RandomHorizontalFlip(p=1.0)], seed=0).apply(x, masks=masks).masks
    assert torch.equal(flipped, masks.flip(-1))  # flips index, exact for any id
    # The warp samples id - mask_fill: 2**24 itself is exact, but not 2**24 - (-1).
    big = masks.clamp(max=2**24)
    with pytest.raises(ValueError, match=r"mask_fill=-1"):
        GpuAugment([RandomRotation(10)], seed=0, mask_fill=-1).apply(x, masks=big)
    out = GpuAugment([RandomRotation(10)], seed=0, mask_fill=-1).apply(x, masks=big - 1).masks
    assert out.dtype == torch.int64 and set(out.unique().tolist()) == {-1, 2**24 - 1}
