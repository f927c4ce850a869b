"""The backend choices' reasons, which `gpufeed doctor` prints: the fix they name fits the machine."""

from __future__ import annotations

import torch

import gpufeed.backends as backends


def test_a_gpu_without_dali_is_told_the_gpu_extra(monkeypatch):
    # On an H200 without DALI, doctor advised "gpufeed[dali-cpu] for the faster CPU path".
    monkeypatch.setattr(backends, "dali_installed", lambda: False)
    on_gpu = backends.choose_image_backend("auto", torch.device("cuda", 0))
    assert on_gpu.name == "torch" and ".[cuda13]" in on_gpu.reason and "dali-cpu" not in on_gpu.reason
    on_cpu = backends.choose_image_backend("auto", torch.device("cpu"))
    assert on_cpu.name == "torch" and ".[dali-cpu]" in on_cpu.reason


def test_a_gpu_without_cudf_is_told_to_install_it(monkeypatch):
    # "no usable cuDF (needs a GPU)" was printed on a machine with a GPU and no cuDF.
    monkeypatch.setattr(backends, "installed", lambda name: name == "polars")
    monkeypatch.setattr(backends, "nvidia_gpu_listed", lambda: True)
    choice = backends.choose_dataframe_backend("auto")
    assert choice.name == "polars" and "cuDF is not installed" in choice.reason and "needs a GPU" not in choice.reason
    monkeypatch.setattr(backends, "nvidia_gpu_listed", lambda: False)
    assert "needs a GPU" in backends.choose_dataframe_backend("auto").reason
    monkeypatch.setattr(backends, "installed", lambda name: False)
    assert backends.choose_dataframe_backend("auto").name == "pandas"
