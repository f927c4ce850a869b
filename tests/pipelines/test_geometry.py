"""CPU geometry shared by the torch backend and DALI's CPU mode, against torchvision."""

import math
import random

import torch
from torchvision.transforms.v2 import functional as TF

from gpufeed.pipelines import geometry
from gpufeed.pipelines.seeds import sample_rng


def test_crop_boxes_follow_random_resized_crop_rules():
    rng = random.Random(0)
    for _ in range(500):
        h, w = rng.randint(50, 400), rng.randint(50, 400)
        top, left, ch, cw = geometry.random_crop_box(rng, h, w, (0.08, 1.0), (3 / 4, 4 / 3))
        assert top >= 0 and top + ch <= h and left >= 0 and left + cw <= w and ch > 0 and cw > 0
        if (ch, cw) != (h, w):
            assert 0.08 * h * w * 0.9 <= ch * cw <= h * w
            assert 3 / 4 * 0.9 <= cw / ch <= 4 / 3 * 1.1


def test_extreme_aspect_falls_back_to_a_centre_crop_within_ratio():
    top, left, h, w = geometry.random_crop_box(random.Random(1), 10, 1000, (0.9, 1.0), (3 / 4, 4 / 3))
    assert h == 10 and math.isclose(w / h, 4 / 3, rel_tol=0.1) and left == (1000 - w) // 2


def test_train_crop_equals_torchvision_resized_crop_on_the_same_box():
    pixels = torch.randint(0, 256, (120, 160, 3), dtype=torch.uint8)
    image = geometry.hwc_view(pixels)
    seeds = range(20)
    flips = 0
    for s in seeds:
        out = geometry.train_crop(image, sample_rng(s, 0, 0), 48, (0.08, 1), (3 / 4, 4 / 3))
        rng = sample_rng(s, 0, 0)
        top, left, h, w = geometry.random_crop_box(rng, 120, 160, (0.08, 1), (3 / 4, 4 / 3))
        ref = TF.resized_crop(pixels.permute(2, 0, 1).contiguous(), top, left, h, w, [48, 48], antialias=True)
        if rng.random() < 0.5:
            ref, flips = ref.flip(-1), flips + 1
        assert (out[0].int() - ref.int()).abs().max() <= 1
    assert 0 < flips < len(seeds)


def test_sample_rng_is_the_same_in_any_process_and_differs_per_sample():
    a = [sample_rng(3, 1, i).random() for i in range(5)]
    assert a == [sample_rng(3, 1, i).random() for i in range(5)]
    assert len(set(a)) == 5 and sample_rng(3, 2, 0).random() != a[0]
