"""What the stage reads back from the batch's device: on a GPU each read is a sync that
stalls the host until the queue drains, so only the documented value checks may read, and
``check_inputs=False`` turns them off."""

from __future__ import annotations

import pytest
import torch

from gpufeed.gpu_transforms.augment import (
    ColorJitter,
    CutMix,
    GpuAugment,
    MixUp,
    Normalize,
    RandomHorizontalFlip,
    RandomResizedCrop,
)

#: Tensor methods that copy device values to the host (each a device sync on a GPU).
_READS = ("__bool__", "item", "tolist", "cpu", "numpy", "__int__", "__float__")


def _stage(check_inputs: bool) -> GpuAugment:
    return GpuAugment([RandomResizedCrop(24), RandomHorizontalFlip(), ColorJitter(0.2, 0.2, 0.2, 0.05),
                       Normalize((0.5,) * 3, (0.25,) * 3), MixUp(num_classes=3), CutMix(num_classes=3)],
                      seed=0, check_inputs=check_inputs)


def _batch(device: str = "cpu") -> tuple[torch.Tensor, torch.Tensor]:
    g = torch.Generator().manual_seed(0)
    x = torch.randint(0, 256, (6, 3, 32, 40), dtype=torch.uint8, generator=g)
    return x.to(device), torch.tensor([0, 1, 2, 0, 1, 2]).to(device)


def _record_reads(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    reads: list[str] = []
    for name in _READS:
        real = getattr(torch.Tensor, name)

        def read(self, *a, _name=name, _real=real, **k):
            reads.append(_name)
            return _real(self, *a, **k)

        monkeypatch.setattr(torch.Tensor, name, read)
    return reads


@pytest.mark.parametrize("check_inputs", [True, False])
def test_a_mixing_stage_reads_back_only_its_documented_checks(monkeypatch, check_inputs):
    # MixUp/CutMix had checked the class ids with labels.min() < 0 or labels.max() >= n:
    # two device syncs per batch, and even with check_inputs=False.
    stage = _stage(check_inputs)
    x, labels = _batch()
    stage(x, labels)  # constants made, generator seeded
    reads = _record_reads(monkeypatch)
    out, soft = stage(x, labels)
    assert out.shape == (6, 3, 24, 24) and soft.shape == (6, 3)
    assert reads == (["tolist"] if check_inputs else [])


def test_class_ids_out_of_range_are_still_refused_by_the_checks():
    x, labels = _batch()
    with pytest.raises(ValueError, match=r"num_classes=3\), got values in \[0, 5\]"):
        _stage(True)(x, labels.clone().index_fill_(0, torch.tensor([1]), 5))


@pytest.mark.gpu
@pytest.mark.parametrize("check_inputs", [True, False])
def test_a_mixing_stage_on_cuda_syncs_only_for_its_checks(check_inputs):
    stage = _stage(check_inputs)
    x, labels = _batch("cuda")
    stage(x, labels)  # constants copied to the device once (a sync), generator made
    torch.cuda.set_sync_debug_mode("error")
    try:
        if check_inputs:
            with pytest.raises(RuntimeError, match="synchroniz"):
                stage(x, labels)
        else:
            out, soft = stage(x, labels)
    finally:
        torch.cuda.set_sync_debug_mode("default")
    if not check_inputs:
        assert out.is_cuda and soft.is_cuda and stage.last_params.device == x.device
