"""Counting, moving and drawing batches of any shape."""

import pytest
import torch

from gpufeed.profile.batches import samples_in, take, to_device
from tests.profile.fakes import SleepyLoader


def test_samples_in_reads_the_first_tensor_depth_first():
    assert samples_in(torch.zeros(3, 2)) == 3
    assert samples_in(([torch.zeros(5)], torch.zeros(2))) == 5
    assert samples_in({"data": torch.zeros(7, 1)}) == 7
    # entries without a tensor (file names, empty targets) are passed over, not the end
    assert samples_in({"path": ["a"] * 4, "image": torch.zeros(4, 3)}) == 4
    assert samples_in(([], {"ids": ["x"]}, [torch.zeros(6)])) == 6
    with pytest.raises(ValueError, match="batch_size_of"):
        samples_in(("a", "b"))
    with pytest.raises(ValueError, match="scalar"):
        samples_in(torch.tensor(1.0))


def test_to_device_keeps_the_structure_and_copies_when_asked():
    x = torch.zeros(2, 3)
    moved = to_device({"x": x, "y": [x, 1]}, torch.device("cpu"))
    assert moved["x"] is x and moved["y"][1] == 1 and isinstance(moved["y"], list)
    copied = to_device((x,), torch.device("cpu"), copy=True)
    assert copied[0] is not x and torch.equal(copied[0], x)


def test_take_starts_new_epochs_as_needed():
    assert len(list(take(SleepyLoader(batches=3), 7))) == 7
    with pytest.raises(ValueError, match="no batch"):
        list(take([], 2))
