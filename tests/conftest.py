"""Shared fixtures; the ``gpu`` marker turns into a clean skip on machines without CUDA."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    if torch.cuda.is_available():
        return
    skip = pytest.mark.skip(reason="needs a CUDA GPU (none here)")
    for item in items:
        if "gpu" in item.keywords:
            item.add_marker(skip)


@pytest.fixture(scope="session")
def image_folder(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A small ImageNet-like JPEG folder: 3 classes, 40 images, shared by the session."""
    from gpufeed.datasets.images import generate_image_folder

    return generate_image_folder(
        tmp_path_factory.mktemp("imgs") / "train", num_images=40, num_classes=3, seed=1,
        min_side=96, max_side=160,
    )
