"""The models and the training step of `gpufeed stall`."""

import pytest
import torch

from gpufeed.profile.models import TrainStep, build_model

CPU = torch.device("cpu")


@pytest.mark.parametrize("name", ["tiny", "resnet18"])
def test_models_classify_into_the_datas_classes(name):
    model = build_model(name, 5, CPU)
    assert model.training and model(torch.randn(2, 3, 32, 32)).shape == (2, 5)


def test_a_step_trains():
    model = build_model("tiny", 2, CPU)
    before = [p.detach().clone() for p in model.parameters()]
    loss = TrainStep(model, CPU)((torch.randn(4, 3, 16, 16), torch.tensor([0, 1, 0, 1])))
    assert torch.isfinite(loss)
    assert any(not torch.equal(a, b) for a, b in zip(before, model.parameters(), strict=True))


@pytest.mark.parametrize(("call", "message"), [
    (lambda: build_model("vgg", 2, CPU), "resnet18, resnet50, tiny"),
    (lambda: build_model("tiny", 0, CPU), "num_classes"),
    (lambda: TrainStep(build_model("tiny", 2, CPU), CPU, lr=0), "lr"),
    (lambda: TrainStep(build_model("tiny", 2, CPU), CPU, amp=True), "CUDA"),
])
def test_bad_arguments_raise_value_errors(call, message):
    with pytest.raises(ValueError, match=message):
        call()
