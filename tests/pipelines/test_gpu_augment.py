"""The augmentation stage behind both loader backends (the ``gpu_augment`` hook)."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from gpufeed import pipelines
from gpufeed.backends import dali_installed
from gpufeed.gpu_transforms.augment import (
    IMAGENET_MEAN,
    IMAGENET_STD,
    ColorJitter,
    CutMix,
    GpuAugment,
    MixUp,
    Normalize,
    RandomAffine,
    RandomHorizontalFlip,
    RandomResizedCrop,
)

BACKENDS = [
    "torch",
    pytest.param("dali", marks=pytest.mark.skipif(not dali_installed(), reason="NVIDIA DALI is not installed")),
]


@pytest.fixture(scope="module")
def folder(tmp_path_factory: pytest.TempPathFactory) -> Path:
    from gpufeed.datasets.images import generate_image_folder

    return generate_image_folder(tmp_path_factory.mktemp("aug") / "train", num_images=16, num_classes=2,
                                 min_side=96, max_side=128)


def load(folder: Path, backend: str, stage: GpuAugment, device: str = "cpu"):
    return pipelines.classification_loader(folder, train=True, batch_size=8, size=64, backend=backend,
                                           device=device, dtype=torch.uint8, gpu_augment=stage)


@pytest.mark.parametrize("backend", BACKENDS)
def test_stage_runs_after_loading_on_every_backend(folder, backend):
    stage = GpuAugment([RandomResizedCrop(48, scale=(0.5, 1.0)), RandomHorizontalFlip(), RandomAffine(10),
                        ColorJitter(0.3, 0.3, 0.3, 0.05), Normalize(IMAGENET_MEAN, IMAGENET_STD)], seed=0)
    seen, calls = 0, []
    for images, labels in load(folder, backend, stage):
        calls.append(stage.last_params)
        assert images.shape[1:] == (3, 48, 48) and images.dtype == torch.float32
        assert images.device.type == "cpu" and torch.isfinite(images).all()
        assert labels.dtype == torch.int64 and set(labels.tolist()) <= {0, 1}
        assert stage.last_params.batch_size == images.shape[0]
        seen += images.shape[0]
    assert seen == 16 and len(calls) == 2 and calls[0] is not calls[1]


@pytest.mark.parametrize("backend", BACKENDS)
def test_mixing_stage_yields_soft_labels(folder, backend):
    stage = GpuAugment([RandomHorizontalFlip(), MixUp(num_classes=2, alpha=0.4), CutMix(num_classes=2)], seed=0)
    for images, labels in load(folder, backend, stage):
        assert images.dtype == torch.uint8 and images.shape[1:] == (3, 64, 64)
        assert labels.shape == (images.shape[0], 2) and labels.dtype == torch.float32
        torch.testing.assert_close(labels.sum(1), torch.ones(images.shape[0]))


@pytest.mark.gpu
@pytest.mark.parametrize("backend", BACKENDS)
def test_stage_runs_on_the_gpu_behind_every_backend(folder, backend):
    stage = GpuAugment([RandomResizedCrop(48), RandomHorizontalFlip(), ColorJitter(0.3, 0.3, 0.3, 0.05),
                        Normalize(IMAGENET_MEAN, IMAGENET_STD)], seed=0)
    seen = 0
    for images, labels in load(folder, backend, stage, device="cuda"):
        assert images.device.type == "cuda" and images.shape[1:] == (3, 48, 48)
        assert stage.last_params.device.type == "cuda"  # parameters drawn where the batch lives
        seen += len(labels)
    assert seen == 16


def test_the_docs_example_runs_as_written(monkeypatch):
    """docs/augment.md's first example is copied into users' scripts: it must run."""
    import re

    doc = (Path(__file__).resolve().parents[2] / "docs" / "augment.md").read_text()
    code = re.search(r"```python\n(.*?)```", doc, re.S).group(1)
    monkeypatch.setattr(pipelines, "classification_loader",
                        _with_defaults(pipelines.classification_loader, num_workers=0, device="cpu"))
    namespace: dict = {}
    exec(compile(code, "docs/augment.md", "exec"), namespace)
    loader = namespace["loader"]
    assert loader.options.shuffles and not loader.options.train  # the stage crops, the loader shuffles
    assert namespace["images"].shape[1:] == (3, 224, 224)


def _with_defaults(fn, **defaults):
    def call(*args, **kwargs):
        return fn(*args, **{**defaults, **kwargs})
    return call
