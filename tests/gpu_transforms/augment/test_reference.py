"""Each op of the augmentation stage against torchvision.transforms.v2.functional, given the
parameters the stage recorded."""

from __future__ import annotations

import pytest
import torch
import torchvision.transforms.v2.functional as TF

from gpufeed.gpu_transforms.augment import (
    ColorJitter,
    GaussianBlur,
    GpuAugment,
    Normalize,
    RandomAffine,
    RandomErasing,
    RandomGrayscale,
    RandomHorizontalFlip,
    RandomPerspective,
    RandomPosterize,
    RandomResizedCrop,
    RandomRotation,
    RandomSolarize,
    RandomVerticalFlip,
)
from gpufeed.gpu_transforms.augment.geometric import (
    compose,
    crop_windows,
    outside_mask,
    warp,
    window_spans,
)

BILINEAR = TF.InterpolationMode.BILINEAR
B, H, W = 4, 36, 44


@pytest.fixture
def images() -> torch.Tensor:
    return torch.rand(B, 3, H, W, generator=torch.Generator().manual_seed(0))


def run(op, x: torch.Tensor, seed: int = 0) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
    stage = GpuAugment([op], seed=seed)
    out = stage(x)
    return out, stage.last_params.per_op[0]


def test_resized_crop_matches_torchvision_inside_the_crop(images):
    out, p = run(RandomResizedCrop((32, 40), scale=(0.2, 0.6)), images)
    assert out.shape == (B, 3, 32, 40)
    for i in range(B):
        left, top, w, h = (int(v) for v in p["box"][i])
        ref = TF.resized_crop(images[i], top, left, h, w, [32, 40], antialias=False)
        # The one warp samples the real neighbours across the crop's edge where torchvision
        # replicates the crop's last pixel: compare away from that half-pixel rim.
        torch.testing.assert_close(out[i, :, 1:-1, 1:-1], ref[:, 1:-1, 1:-1], atol=5e-5, rtol=0)


def test_resized_crop_of_the_whole_image_is_resize(images):
    out, _ = run(RandomResizedCrop((72, 88), scale=(1, 1), ratio=(W / H, W / H)), images)
    torch.testing.assert_close(out, TF.resize(images, [72, 88], antialias=False), atol=5e-5, rtol=0)


@pytest.mark.parametrize("op, ref", [
    (RandomHorizontalFlip(p=1.0), TF.horizontal_flip),
    (RandomVerticalFlip(p=1.0), TF.vertical_flip),
])
def test_flips_are_exact(images, op, ref):
    out, _ = run(op, images)
    assert torch.equal(out, ref(images))


def test_flip_inside_a_warp_matches(images):
    stage = GpuAugment([RandomHorizontalFlip(p=1.0), RandomRotation(0.0)], seed=0)
    torch.testing.assert_close(stage(images), TF.horizontal_flip(images), atol=5e-5, rtol=0)


def test_rotation_matches(images):
    out, p = run(RandomRotation(40), images)
    for i in range(B):
        ref = TF.rotate(images[i], float(p["angle"][i]), interpolation=BILINEAR)
        torch.testing.assert_close(out[i], ref, atol=1e-4, rtol=0)


def test_affine_matches(images):
    op = RandomAffine(25, translate=(0.1, 0.2), scale=(0.7, 1.3), shear=(-10, 10, -5, 5))
    out, p = run(op, images, seed=3)
    for i in range(B):
        ref = TF.affine(images[i], angle=float(p["angle"][i]), translate=p["translate"][i].tolist(),
                        scale=float(p["scale"][i]), shear=p["shear"][i].tolist(), interpolation=BILINEAR)
        torch.testing.assert_close(out[i], ref, atol=1e-4, rtol=0)


def test_perspective_matches(images):
    out, p = run(RandomPerspective(0.6, p=1.0), images, seed=4)
    start = [[0, 0], [W - 1, 0], [W - 1, H - 1], [0, H - 1]]
    for i in range(B):
        ref = TF.perspective(images[i], start, p["end"][i].tolist(), interpolation=BILINEAR)
        torch.testing.assert_close(out[i], ref, atol=1e-4, rtol=0)


def test_colour_jitter_matches_in_its_fixed_order(images):
    out, p = run(ColorJitter(0.5, 0.5, 0.5, 0.2), images)
    for i in range(B):
        ref = TF.adjust_brightness(images[i], float(p["brightness"][i]))
        ref = TF.adjust_contrast(ref, float(p["contrast"][i]))
        ref = TF.adjust_saturation(ref, float(p["saturation"][i]))
        ref = TF.adjust_hue(ref, float(p["hue"][i]))
        torch.testing.assert_close(out[i], ref, atol=5e-5, rtol=0)


@pytest.mark.parametrize("shift", [-0.5, -0.3, 0.0, 0.1, 0.45])
def test_hue_matches_on_saturated_and_gray_pixels(shift):
    # Pure primaries, ties between channels and gray pixels are where HSV code breaks.
    x = torch.tensor([[1, 0, 0], [0, 1, 0], [0, 0, 1], [1, 1, 0], [0.5, 0.5, 0.5], [0.2, 0.7, 0.7]]).T
    x = x.reshape(1, 3, 2, 3).float()
    stage = GpuAugment([ColorJitter(hue=(shift, shift))], seed=0)
    torch.testing.assert_close(stage(x)[0], TF.adjust_hue(x[0], shift), atol=1e-6, rtol=0)


def test_grayscale_matches(images):
    out, p = run(RandomGrayscale(p=0.5), images, seed=1)
    assert 0 < int(p["on"].sum()) < B
    for i in range(B):
        ref = TF.rgb_to_grayscale(images[i], 3) if p["on"][i] else images[i]
        torch.testing.assert_close(out[i], ref, atol=1e-6, rtol=0)


def test_gaussian_blur_matches(images):
    out, p = run(GaussianBlur(5, sigma=(0.5, 2.0), p=0.5), images, seed=2)
    for i in range(B):
        sigma = float(p["sigma"][i])
        ref = TF.gaussian_blur(images[i], [5, 5], [sigma, sigma]) if sigma > 1e-3 else images[i]
        torch.testing.assert_close(out[i], ref, atol=5e-5, rtol=0)


def test_solarize_and_posterize_match_on_uint8():
    x = torch.randint(0, 256, (B, 3, 8, 8), dtype=torch.uint8, generator=torch.Generator().manual_seed(1))
    sol = GpuAugment([RandomSolarize(128 / 255, p=1.0)], seed=0)(x)
    assert torch.equal(sol, TF.solarize(x, 128))
    post = GpuAugment([RandomPosterize(3, p=1.0)], seed=0)(x)
    assert torch.equal(post, TF.posterize(x, 3))


def test_erasing_matches(images):
    out, p = run(RandomErasing(p=1.0, value=0.0), images, seed=5)
    for i in range(B):
        left, top, w, h = (int(v) for v in p["box"][i])
        assert w > 0 and h > 0
        ref = TF.erase(images[i], top, left, h, w, torch.tensor(0.0))
        assert torch.equal(out[i], ref)


def test_normalize_matches(images):
    mean, std = (0.485, 0.456, 0.406), (0.229, 0.224, 0.225)
    out, _ = run(Normalize(mean, std), images)
    torch.testing.assert_close(out, TF.normalize(images, list(mean), list(std)), atol=1e-6, rtol=0)


def test_full_recipe_matches_the_chain_of_references():
    x = torch.randint(0, 256, (B, 3, H, W), dtype=torch.uint8, generator=torch.Generator().manual_seed(2))
    mean, std = (0.5, 0.4, 0.3), (0.2, 0.25, 0.3)
    stage = GpuAugment([RandomResizedCrop(32, scale=(0.3, 0.9)), RandomHorizontalFlip(),
                        ColorJitter(0.4, 0.4, 0.4, 0.1), Normalize(mean, std)], seed=7)
    out = stage(x)
    crop, flip, jit = stage.last_params.per_op[:3]
    for i in range(B):
        left, top, w, h = (int(v) for v in crop["box"][i])
        ref = TF.resized_crop(TF.to_dtype(x[i], torch.float32, scale=True), top, left, h, w, [32, 32], antialias=False)
        ref = TF.horizontal_flip(ref) if flip["flip"][i] else ref
        ref = TF.adjust_hue(TF.adjust_saturation(TF.adjust_contrast(TF.adjust_brightness(
            ref, float(jit["brightness"][i])), float(jit["contrast"][i])), float(jit["saturation"][i])),
            float(jit["hue"][i]))
        ref = TF.normalize(ref, list(mean), list(std))
        # The crop rim (see above) enters the contrast mean, which nudges every pixel a hair.
        torch.testing.assert_close(out[i, :, 1:-1, 1:-1], ref[:, 1:-1, 1:-1], atol=3e-3, rtol=0)


@pytest.mark.parametrize("inside, fill", [(True, 0.0), (False, 0.0), (False, 0.7)])
def test_direct_affine_grid_matches_kornias_projective_warp(images, inside, fill):
    ops = [RandomResizedCrop((30, 50)), RandomAffine(30, (0.2, 0.2), (0.7, 1.3), (-10, 10, -5, 5))]
    params = GpuAugment(ops, seed=1).sample_params(images)
    matrix, size = compose(ops, params.per_op, (H, W))
    fast = warp(images, matrix, size, fill=fill, inside=inside, affine=True)
    slow = warp(images, matrix, size, fill=fill, inside=inside, affine=False)
    torch.testing.assert_close(fast, slow, atol=1e-4, rtol=0)


@pytest.mark.parametrize("second", [RandomRotation((30, 30)), RandomAffine((15, 15), scale=(0.7, 0.7)),
                                    RandomPerspective(0.6, p=1.0)])
def test_a_warp_after_a_crop_fills_what_lies_outside_the_crop(second):
    """The fused warp showed the image outside the crop where torchvision (crop first, then
    rotate) shows fill; now only the one-pixel edge band, where torchvision blends with the
    fill, differs."""
    yy, xx = torch.meshgrid(torch.arange(120.0), torch.arange(150.0), indexing="ij")
    x = (0.5 + 0.4 * torch.sin(xx / 9 + torch.arange(12.0).view(B, 3, 1, 1)) * torch.cos(yy / 7)).contiguous()
    stage = GpuAugment([RandomResizedCrop((60, 80), scale=(0.3, 0.3)), second], seed=1)
    out = stage(x)
    crop, p = stage.last_params.per_op
    refs = []
    for i in range(B):
        left, top, w, h = (int(v) for v in crop["box"][i])
        ref = TF.resized_crop(x[i], top, left, h, w, [60, 80], antialias=False)
        if isinstance(second, RandomRotation):
            ref = TF.rotate(ref, float(p["angle"][i]), BILINEAR)
        elif isinstance(second, RandomAffine):
            ref = TF.affine(ref, angle=float(p["angle"][i]), translate=[0, 0], scale=float(p["scale"][i]),
                            shear=[0.0, 0.0], interpolation=BILINEAR)
        else:
            start = [[0, 0], [79, 0], [79, 59], [0, 59]]
            ref = TF.perspective(ref, start, p["end"][i].long().tolist(), interpolation=BILINEAR)
        refs.append(ref)
    ref = torch.stack(refs)
    fill = (ref == 0).all(dim=1)
    assert fill.float().mean() > 0.05  # the corners torchvision fills
    assert (out.permute(0, 2, 3, 1)[fill] == 0).float().mean() > 0.95  # were image content (0.46 on average)
    assert ((out - ref).abs() > 0.05).float().mean() < 0.03  # the edge band



def _waves(b: int = B) -> torch.Tensor:
    yy, xx = torch.meshgrid(torch.arange(120.0), torch.arange(150.0), indexing="ij")
    return (0.5 + 0.4 * torch.sin(xx / 9 + torch.arange(b * 3.0).view(b, 3, 1, 1)) * torch.cos(yy / 7)).contiguous()


@pytest.mark.parametrize("flips", [[RandomHorizontalFlip(p=1.0)], [RandomVerticalFlip(p=1.0), RandomHorizontalFlip(p=1.0)]])
def test_flips_before_a_rotation_build_no_crop_window(flips):
    """A flip keeps the frame, so a rotation after it looks outside the image where it looks
    outside its input: the crop-window pass ran anyway (a pass over the output) and put a
    hard cut where torchvision's rotate blends the edge with the fill (0.47 % of pixels off)."""
    x = _waves()
    stage = GpuAugment([*flips, RandomRotation((30, 30))], seed=0)
    out = stage(x)
    ref = x
    for op in flips:
        ref = TF.horizontal_flip(ref) if isinstance(op, RandomHorizontalFlip) else TF.vertical_flip(ref)
    ref = TF.rotate(ref, 30.0, BILINEAR)
    assert ((out - ref).abs() > 0.05).float().mean() == 0
    torch.testing.assert_close(out, ref, atol=1e-4, rtol=0)
    assert crop_windows(stage.ops, stage.last_params.per_op, tuple(x.shape[-2:])) == []


def test_a_crop_of_the_whole_image_needs_no_window_for_that_sample():
    """A resized crop that takes the whole image maps the source onto its frame: the
    rotation after it blends the image's edge as torchvision's rotate does, no hard cut."""
    x = _waves()
    whole = RandomResizedCrop((120, 150), scale=(1.0, 1.0), ratio=(150 / 120, 150 / 120))
    stage = GpuAugment([whole, RandomRotation((30, 30))], seed=0)
    out = stage(x)
    (window,) = crop_windows(stage.ops, stage.last_params.per_op, (120, 150))
    assert not window.needed.any()
    torch.testing.assert_close(out, TF.rotate(x, 30.0, BILINEAR), atol=1e-4, rtol=0)


@pytest.mark.parametrize("second", [RandomRotation(40), RandomAffine(20, (0.1, 0.1), (0.7, 1.3), (-10, 10, -5, 5)),
                                    RandomPerspective(0.6, p=1.0)])
def test_row_spans_give_the_direct_projective_window_test(second):
    """The mask is built from per-row intervals (two comparisons a pixel) instead of a
    projective divide per pixel: it must pick the same pixels as that direct test."""
    x = torch.rand(16, 3, 50, 70)
    ops = [RandomResizedCrop((40, 60)), RandomHorizontalFlip(), second]
    params = GpuAugment(ops, seed=3).sample_params(x)
    windows = crop_windows(ops, params.per_op, (50, 70))
    assert len(windows) == 1 and windows[0].needed.all()
    fast = outside_mask(window_spans(windows, (40, 60)), 60)
    inv, (h, w) = windows[0].inv.view(-1, 3, 3, 1, 1), windows[0].size
    xs, ys = (torch.arange(60.0) + 0.5).view(1, 1, 60), (torch.arange(40.0) + 0.5).view(1, 40, 1)
    den = inv[:, 2, 0] * xs + inv[:, 2, 1] * ys + inv[:, 2, 2]
    qx = (inv[:, 0, 0] * xs + inv[:, 0, 1] * ys + inv[:, 0, 2]) / den
    qy = (inv[:, 1, 0] * xs + inv[:, 1, 1] * ys + inv[:, 1, 2]) / den
    direct = ((qx < 0) | (qx > w) | (qy < 0) | (qy > h)).unsqueeze(1)
    assert direct.float().mean() > 0.02
    assert (fast != direct).float().mean() < 1e-3  # pixel centres within rounding of the edge
