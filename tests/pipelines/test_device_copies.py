"""Host-to-device copies of the loaders' GPU paths: every batch (images and labels) leaves
pinned memory. A ``non_blocking`` copy from pageable memory is not asynchronous: CUDA first
waits for the stream's queue to drain (its documented rule for pageable host-to-device
copies), so each batch would wait for the previous training step.

Without a GPU the CUDA branches run with the device faked (``resolve_device``) and pinning
recorded instead of done; with one, the gpu-marked test watches the real copies.
"""

from __future__ import annotations

import pytest
import torch

from gpufeed.backends import dali_installed
from gpufeed.pipelines import loader as loader_module
from gpufeed.pipelines.loader import classification_loader
from tests.datasets.test_raw_cache import write_raw


@pytest.fixture(scope="module")
def raw_folder(image_folder, tmp_path_factory):
    return write_raw(image_folder, tmp_path_factory.mktemp("copies") / "raw", 48, "pad")


def _fake_cuda(monkeypatch: pytest.MonkeyPatch) -> list[torch.Tensor]:
    """Loaders built now think they are on ``cuda:0``; ``pin_memory()`` marks a copy instead
    of pinning (returned: the tensors it was called on)."""
    monkeypatch.setattr(loader_module, "resolve_device", lambda device: torch.device("cuda", 0))
    pinned: list[torch.Tensor] = []

    def pin_memory(self, *args, **kwargs):
        pinned.append(self)
        out = self.clone()
        out.gpufeed_pinned = True
        return out

    monkeypatch.setattr(torch.Tensor, "pin_memory", pin_memory)
    return pinned


def test_pixel_batches_for_a_gpu_are_made_in_pinned_memory(raw_folder, monkeypatch):
    # A raw cache is cropped on this process's threads (no DataLoader, so no pin_memory
    # thread): its batches had come from pooled pageable buffers.
    from gpufeed.pipelines import torch_loader

    made: list[torch.Tensor] = []

    def pinned_empty(shape, dtype):
        made.append(torch.empty(shape, dtype=dtype))
        return made[-1]

    monkeypatch.setattr(torch_loader, "pinned_empty", pinned_empty)
    cpu = classification_loader(raw_folder, train=True, batch_size=8, size=32, backend="torch", device="cpu",
                                num_workers=2)
    keys = [(0, 0, int(i)) for i in cpu.plan.batches(0)[0]]
    cpu._pixel_batch(keys)
    assert made == []
    pinned = _fake_cuda(monkeypatch)
    gpu = classification_loader(raw_folder, train=True, batch_size=8, size=32, backend="torch", device="cuda",
                                num_workers=2)
    assert gpu.device.type == "cuda" and gpu._loader is None  # the threads path
    number, images, labels, bad = gpu._pixel_batch(keys)
    assert images is made[0] and images.shape == (8, 3, 32, 32)
    assert getattr(labels, "gpufeed_pinned", False) and len(pinned) == 1 and bad == []


@pytest.mark.skipif(not dali_installed(), reason="DALI not installed")
def test_dali_gpu_labels_are_pinned_before_their_copy(image_folder, monkeypatch):
    # The GPU branch of the DALI loader, run on DALI's CPU mode: the same graph (decode,
    # resize, normalise in DALI), its output handed over as _from_gpu would.
    import numpy as np

    from gpufeed.pipelines.dali_loader import DaliLoader
    from gpufeed.pipelines.dali_pipeline import build_pipeline

    pinned = _fake_cuda(monkeypatch)
    loader = classification_loader(image_folder, train=True, batch_size=16, size=32, backend="dali",
                                   device="cuda", num_workers=2)
    assert isinstance(loader, DaliLoader) and loader.device_id == 0 and not loader._on_cpu
    monkeypatch.setattr(loader, "_new_pipeline", lambda stream: build_pipeline(
        loader._feed, loader.options, None, stream=stream))
    monkeypatch.setattr(loader, "_from_gpu", lambda images: torch.from_numpy(np.array(images.as_tensor())))
    batches = list(loader)
    assert len(batches) == len(loader) == 3
    for images, labels in batches:
        assert images.shape == (labels.shape[0], 3, 32, 32) and labels.dtype == torch.int64
        assert getattr(labels, "gpufeed_pinned", False)
    assert len(pinned) == 3


BACKENDS = ["torch", pytest.param("dali", marks=pytest.mark.skipif(not dali_installed(), reason="no DALI"))]


@pytest.mark.gpu
@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("source", ["folder", "raw"])
def test_every_host_to_device_copy_of_a_gpu_loader_is_from_pinned_memory(image_folder, raw_folder, monkeypatch,
                                                                          backend, source):
    real_to = torch.Tensor.to
    sources: list[bool] = []

    def to(self, *args, **kwargs):
        out = real_to(self, *args, **kwargs)
        if self.device.type == "cpu" and out.device.type == "cuda":
            sources.append(self.is_pinned())
        return out

    root = image_folder if source == "folder" else raw_folder
    loader = classification_loader(root, train=True, batch_size=8, size=32, backend=backend, device="cuda",
                                   num_workers=2)
    monkeypatch.setattr(torch.Tensor, "to", to)
    batches = [(x.is_cuda, y.is_cuda) for x, y in loader]
    assert batches and all(x and y for x, y in batches)
    assert sources and all(sources), sources
