"""Models and a training step for ``gpufeed stall``: torchvision's ResNets, or a tiny conv
net that keeps CPU runs short."""

from __future__ import annotations

from typing import Any

import torch
from torch import nn

MODELS = ("resnet18", "resnet50", "tiny")


def tiny_net(num_classes: int) -> nn.Module:
    """Two strided convolutions, global pooling and a linear layer: a step costs little, so a
    CPU run shows the loader's side."""
    return nn.Sequential(
        nn.Conv2d(3, 16, 3, stride=2, padding=1), nn.BatchNorm2d(16), nn.ReLU(inplace=True),
        nn.Conv2d(16, 32, 3, stride=2, padding=1), nn.BatchNorm2d(32), nn.ReLU(inplace=True),
        nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(32, num_classes),
    )


def build_model(name: str, num_classes: int, device: torch.device) -> nn.Module:
    """A freshly initialised classifier on ``device``, in training mode.

    Args:
        name: ``"resnet18"``, ``"resnet50"`` (torchvision, channels-last on CUDA) or ``"tiny"``.
        num_classes: outputs of the last layer.
        device: where the weights go.

    Returns:
        The model.

    Example:
        >>> model = build_model("tiny", 10, torch.device("cpu"))
    """
    if name not in MODELS:
        raise ValueError(f"model must be one of {', '.join(MODELS)}, got {name!r}")
    if not isinstance(num_classes, int) or num_classes < 1:
        raise ValueError(f"num_classes must be an int >= 1, got {num_classes!r}")
    if name == "tiny":
        return tiny_net(num_classes).to(device).train()
    import torchvision

    model = getattr(torchvision.models, name)(num_classes=num_classes).to(device).train()
    if device.type == "cuda":
        model = model.to(memory_format=torch.channels_last)
    return model


class TrainStep:
    """One SGD step on an ``(images, labels)`` batch: forward, cross-entropy, backward, update;
    mixed precision (float16 autocast + gradient scaling) on CUDA.

    Args:
        model: the classifier, already on ``device``.
        device: where the step runs; batches are moved there (a no-op for a batch already
            on it).
        lr: SGD learning rate (momentum 0.9, weight decay 5e-5).
        amp: mixed precision; default: on for CUDA.

    Example:
        >>> step = TrainStep(build_model("tiny", 2, torch.device("cpu")), torch.device("cpu"))
        >>> loss = step((torch.randn(4, 3, 32, 32), torch.tensor([0, 1, 0, 1])))
    """

    def __init__(self, model: nn.Module, device: torch.device, *, lr: float = 0.01,
                 amp: bool | None = None) -> None:
        if not lr > 0:
            raise ValueError(f"lr must be > 0, got {lr!r}")
        if amp and device.type != "cuda":
            raise ValueError(f"amp (float16 mixed precision) is for CUDA; the step runs on {device}")
        self.model, self.device = model, device
        self.amp = device.type == "cuda" if amp is None else amp
        self.optimizer = torch.optim.SGD(model.parameters(), lr=lr, momentum=0.9, weight_decay=5e-5)
        self.scaler = torch.amp.GradScaler("cuda", enabled=self.amp)

    def __call__(self, batch: Any) -> torch.Tensor:
        """Train on ``batch`` (``(images, labels)``); returns the loss, detached (not synchronised)."""
        images, labels = batch[0], batch[1]
        images = images.to(self.device, non_blocking=True)
        labels = labels.to(self.device, non_blocking=True).view(-1).long()
        with torch.autocast(self.device.type, dtype=torch.float16, enabled=self.amp):
            loss = nn.functional.cross_entropy(self.model(images), labels)
        self.optimizer.zero_grad(set_to_none=True)
        self.scaler.scale(loss).backward()
        self.scaler.step(self.optimizer)
        self.scaler.update()
        return loss.detach()
