"""The DALI backend's GPU paths.

Without a GPU, CI still checks every GPU graph the kit builds: DALI checks operator names
and arguments while it traces a pipeline, before its backend refuses with "CUDA is not
available", so a typo in a GPU-only argument fails here. The traces run in a child
process: a process that tried a GPU pipeline must not later fork DataLoader workers
(that crashed on this machine). With a GPU, the gpu-marked tests run the same graphs.
"""

from __future__ import annotations

import json
import subprocess
import sys

import pytest
import torch

from gpufeed.backends import dali_installed
from tests.datasets.test_raw_cache import write_raw
from tests.pipelines.test_loader_contract import load

pytestmark = pytest.mark.skipif(not dali_installed(), reason="DALI not installed")

_TRACE = r"""
import json, sys, torch
import nvidia.dali.fn as fn
from gpufeed.pipelines.dali_pipeline import build_pipeline
from gpufeed.pipelines.feeds import FileFeed
from gpufeed.pipelines.loader import classification_loader

typo = sys.argv[1] == "typo"
if typo:  # a misspelt argument of a GPU decoder: must be caught by the trace
    real = fn.decoders.image_slice
    fn.decoders.image_slice = lambda *a, **k: real(*a, **{**k, "axis_nams": "HW"})
if sys.argv[1] == "slice-typo":  # the same in the centre crop of pre-decoded pixels (a raw cache, val)
    real_slice = fn.slice
    fn.slice = lambda *a, **k: real_slice(*a, **{**k, "axis_nams": "HW"})
results = {}
for train in (True, False):
    for dtype, layout in ((torch.float32, "NCHW"), (torch.float16, "NHWC"), (torch.uint8, "NCHW")):
        loader = classification_loader(sys.argv[2], backend="dali", device="cpu", train=train,
                                       batch_size=4, size=32, dtype=dtype, layout=layout, num_workers=1)
        for fed in ("feed", "by name"):
            source = FileFeed(loader.samples, loader.plan, loader.log, loader.options) if fed == "feed" else None
            key = f"train={train} {dtype} {layout} {fed}"
            try:
                build_pipeline(source, loader.options, 0, pixels=loader.samples.kind == "pixels")
                results[key] = "built"
            except Exception as exc:
                results[key] = f"{type(exc).__name__}: {str(exc).splitlines()[0]}"
print(json.dumps(results))
"""


@pytest.fixture(scope="module")
def raw_folder(image_folder, tmp_path_factory):
    """A pre-decoded raw cache of the session's images (the pixel path: no decoder)."""
    return write_raw(image_folder, tmp_path_factory.mktemp("gpu") / "raw", 64, "pad")


def _trace(image_folder, mode: str) -> dict[str, str]:
    out = subprocess.run([sys.executable, "-c", _TRACE, mode, str(image_folder)],
                         capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr[-2000:]
    return json.loads(out.stdout.strip().splitlines()[-1])


def test_every_gpu_graph_traces_before_the_backend_refuses(image_folder):
    results = _trace(image_folder, "plain")
    assert len(results) == 12
    for key, outcome in results.items():
        if torch.cuda.is_available():
            assert outcome == "built", key
        else:  # the graph traced; only the missing GPU stopped it
            assert "CUDA is not available" in outcome, (key, outcome)


def test_a_misspelt_gpu_argument_fails_the_trace(image_folder):
    results = _trace(image_folder, "typo")
    train = [v for k, v in results.items() if k.startswith("train=True")]
    assert train and all('"axis_nams" is not defined' in v for v in train), train
    assert all(v != "built" and "axis_nams" not in v for k, v in results.items() if k.startswith("train=False"))


def test_every_gpu_graph_of_a_raw_cache_traces_before_the_backend_refuses(raw_folder):
    results = _trace(raw_folder, "plain")
    assert len(results) == 12
    for key, outcome in results.items():
        if torch.cuda.is_available():
            assert outcome == "built", key
        else:
            assert "CUDA is not available" in outcome, (key, outcome)


def test_a_misspelt_argument_of_the_pixel_crop_fails_the_trace(raw_folder):
    results = _trace(raw_folder, "slice-typo")
    # Val slices the centre after the resize; train gets its window already cut by the feed.
    val = [v for k, v in results.items() if k.startswith("train=False")]
    assert val and all('"axis_nams" is not defined' in v for v in val), results
    assert all("axis_nams" not in v for k, v in results.items() if k.startswith("train=True")), results


@pytest.mark.gpu
@pytest.mark.parametrize("train", [True, False])
def test_a_raw_cache_on_the_gpu_matches_the_cpu_mode(raw_folder, train):
    # The same windows of the same pixels; the GPU resizes with DALI's filter, the CPU mode
    # with torch's: a level or two apart.
    kw = dict(train=train, shuffle=False, batch_size=8, size=48, seed=2, dtype=torch.uint8)
    gpu_loader = load(raw_folder, "dali", device="cuda", **kw)
    gpu = [(x.clone(), y.clone()) for x, y in gpu_loader]
    cpu = list(load(raw_folder, "dali", device="cpu", **kw))
    assert gpu_loader.skipped == [] and len(gpu) == len(cpu) == 5
    for (xg, yg), (xc, yc) in zip(gpu, cpu, strict=True):
        assert xg.is_cuda and xg.shape == xc.shape and torch.equal(yg.cpu(), yc)
        assert (xg.cpu().float() - xc.float()).abs().mean() < 3.0


@pytest.mark.gpu
def test_dali_iterator_on_a_raw_cache_on_the_gpu(raw_folder):
    it = load(raw_folder, "dali", device="cuda", train=True, batch_size=16, size=32).dali_iterator()
    batches = list(it)
    assert len(batches) == len(it) == 3
    data = batches[0][0]["data"]
    assert data.is_cuda and data.shape == (16, 3, 32, 32)
    assert sum(b[0]["label"].shape[0] for b in batches) == 40


@pytest.mark.gpu
@pytest.mark.parametrize("train", [True, False])
def test_gpu_decode_matches_the_cpu_mode(image_folder, train):
    # Same crop windows on both (drawn by the feed); nvJPEG's rounding differs from libjpeg's.
    kw = dict(train=train, shuffle=False, batch_size=8, size=48, seed=2, dtype=torch.uint8)
    gpu = torch.cat([x for x, _ in load(image_folder, "dali", device="cuda", **kw)])
    cpu = torch.cat([x for x, _ in load(image_folder, "dali", device="cpu", **kw)])
    assert gpu.is_cuda and gpu.shape == cpu.shape
    assert (gpu.cpu().float() - cpu.float()).abs().mean() < 3.0


@pytest.mark.gpu
def test_gpu_epochs_repeat_after_set_epoch_without_a_rebuild_per_epoch(image_folder):
    loader = load(image_folder, "dali", device="cuda", train=True, batch_size=8, size=32, seed=1)
    epochs = [[x.clone() for x, _ in loader] for _ in range(2)]
    pipe = loader._pipe
    loader.set_epoch(1)
    again = [x for x, _ in loader]
    assert all(torch.equal(a, b) for a, b in zip(again, epochs[1], strict=True))
    rebuilt = loader._pipe
    assert rebuilt is not pipe  # a jump rebuilt...
    [_ for _ in loader]
    assert loader._pipe is rebuilt  # ...and the next epoch went on with it


@pytest.mark.gpu
def test_dali_iterator_on_the_gpu(image_folder):
    it = load(image_folder, "dali", device="cuda", train=True, batch_size=16, size=32).dali_iterator()
    batches = list(it)
    assert len(batches) == len(it) == 3
    data, label = batches[0][0]["data"], batches[0][0]["label"]
    assert data.is_cuda and data.shape == (16, 3, 32, 32) and label.dtype == torch.int32
