"""Which backend each part of gpufeed uses, decided once at the edge without importing them.

Every "auto" choice in gpufeed goes through this module, so `gpufeed doctor` can show
exactly what a loader or a table recipe will pick and why. Detection goes
through :mod:`gpufeed.machine` (``find_spec`` and ``torch.cuda``); it never imports DALI, cuDF or cupy, so a
CPU-only workflow never loads a CUDA-only library.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from gpufeed.machine import (
    cuda_available,
    install_hint,
    installed,
    library_version,
    nvidia_gpu_listed,
)

if TYPE_CHECKING:  # torch is imported where a device is resolved: table code never needs it
    import torch


@dataclass(frozen=True)
class BackendChoice:
    """A backend decision and the reason for it, as printed by ``gpufeed doctor``."""

    name: str
    reason: str


def dali_installed() -> bool:
    """True when NVIDIA DALI can be imported (any CUDA flavour)."""
    return installed("nvidia.dali")


def resolve_device(device: str | torch.device) -> torch.device:
    """Turn ``"auto" | "cuda" | "cpu"`` (or ``"cuda:N"``, or a ``torch.device``) into a torch device.

    ``"cuda"`` and ``"auto"`` on a GPU give the current GPU with its index (``cuda:N``).

    Raises:
        ValueError: unknown device string.
        RuntimeError: CUDA asked for on a machine without it.
    """
    import torch

    if isinstance(device, torch.device):
        device = str(device)  # torch.device("cuda", 1) -> "cuda:1", checked like the string
    if not isinstance(device, str):
        raise ValueError(f"device must be 'auto', 'cpu', 'cuda', 'cuda:N' or a torch.device, got {device!r}")
    if device == "auto" and not cuda_available() or device == "cpu":
        return torch.device("cpu")
    if device in ("auto", "cuda") or device.startswith("cuda:"):
        if not cuda_available():
            raise RuntimeError(f"device={device!r} was asked for, but torch sees no CUDA GPU here")
        if device.startswith("cuda:"):
            return torch.device(device)
        # The current GPU, by number (what torch.cuda.set_device(local_rank) chose under
        # torchrun): DALI and cupy take a device number, and a bare "cuda" read as GPU 0
        # put every rank's decoding on the first GPU.
        return torch.device("cuda", torch.cuda.current_device())
    raise ValueError(f"device must be 'auto', 'cpu', 'cuda' or 'cuda:N', got {device!r}")


def choose_image_backend(backend: str, device: torch.device) -> BackendChoice:
    """Pick the image-loader backend for ``backend`` ("auto" | "dali" | "torch") on ``device``."""
    if backend not in ("auto", "dali", "torch"):
        raise ValueError(f"backend must be 'auto', 'dali' or 'torch', got {backend!r}")
    has_dali = dali_installed()
    if backend == "dali":
        if not has_dali:
            raise RuntimeError(
                f"backend='dali' needs NVIDIA DALI: {install_hint('dali-cpu')} (CPU only), or the "
                "'cuda13' or 'cuda12' extra for the GPU (see README's Install)"
            )
        where = "GPU (mixed hardware JPEG decode)" if device.type == "cuda" else "CPU-only mode"
        return BackendChoice("dali", f"asked for; DALI {library_version('DALI')} in {where}")
    if backend == "torch":
        return BackendChoice("torch", "asked for")
    if has_dali:
        where = "on the GPU with the hardware JPEG decoder" if device.type == "cuda" else "in CPU-only mode"
        return BackendChoice("dali", f"DALI is installed; it decodes and augments {where}, faster than the DataLoader")
    if device.type == "cuda":  # the GPU's own decoder is what is missing, not the CPU-only mode
        return BackendChoice("torch", f"DALI is not installed ({install_hint('cuda13')}, or the 'cuda12' extra "
                                      "with a CUDA 12 torch, for DALI's hardware JPEG decode on the GPU)")
    return BackendChoice("torch", f"DALI is not installed ({install_hint('dali-cpu')} for the faster CPU path)")


def choose_dataframe_backend(backend: str = "auto") -> BackendChoice:
    """Pick the table backend: cuDF on a GPU, else polars, else pandas."""
    if backend not in ("auto", "cudf", "polars", "pandas"):
        raise ValueError(f"backend must be 'auto', 'cudf', 'polars' or 'pandas', got {backend!r}")
    if backend != "auto":
        if backend == "cudf" and not (installed("cudf") and cuda_available()):
            raise RuntimeError(f"backend='cudf' needs cuDF and a CUDA GPU ({install_hint('cuda13')})")
        if backend == "polars" and not installed("polars"):
            raise RuntimeError("backend='polars' needs polars: pip install polars")
        return BackendChoice(backend, "asked for")
    if installed("cudf") and cuda_available():
        return BackendChoice("cudf", "cuDF is installed and a CUDA GPU is present")
    # Why not cuDF: on a GPU machine it is the install that is missing, not the GPU (asked of
    # the driver: the table path does not import torch).
    no_cudf = (f"cuDF is not installed ({install_hint('cuda13')})" if not installed("cudf") and nvidia_gpu_listed()
               else "no usable cuDF (needs a GPU)")
    if installed("polars"):
        return BackendChoice("polars", f"{no_cudf}; polars is the fastest CPU backend")
    return BackendChoice("pandas", f"{no_cudf}, and polars is not installed")


def choose_array_module(device: torch.device) -> BackendChoice:
    """Pick the array namespace: cupy for CUDA data, numpy otherwise."""
    if device.type == "cuda":
        if not installed("cupy"):
            raise RuntimeError(f"CUDA arrays need cupy: {install_hint('cuda13')}")
        return BackendChoice("cupy", "data lives on a CUDA device")
    return BackendChoice("numpy", "data lives on the CPU")
