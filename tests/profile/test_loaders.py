"""The loaders `gpufeed stall` builds (torch backend and the PIL baseline, no workers)."""

import pytest
import torch

from gpufeed.profile.loaders import build_loader, comparable_loaders

CPU = torch.device("cpu")


@pytest.mark.parametrize("name", ["torch", "pil"])
def test_loaders_yield_normalised_batches(image_folder, name):
    built = build_loader(name, image_folder, batch_size=8, size=32, device=CPU, workers=0)
    images, labels = next(iter(built.loader))
    assert built.name == name and built.classes == 3 and name in built.description
    assert images.shape == (8, 3, 32, 32) and images.dtype == torch.float32 and labels.shape == (8,)


def test_comparable_loaders_and_a_bad_name(image_folder):
    assert {"torch", "pil"} <= set(comparable_loaders())
    with pytest.raises(ValueError, match="torch, dali, auto, pil"):
        build_loader("tf", image_folder, batch_size=8, size=32, device=CPU, workers=0)
