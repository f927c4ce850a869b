"""The loader contract, checked on every backend the same way."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from PIL import Image
from torchvision.transforms.v2 import functional as F

from gpufeed.backends import dali_installed
from gpufeed.datasets.images import generate_image_folder
from gpufeed.pipelines import classification_loader
from gpufeed.pipelines.options import IMAGENET_MEAN, IMAGENET_STD, default_val_resize
from tests.helpers import indexed_file_list

BACKENDS = [
    "torch",
    pytest.param("dali", marks=pytest.mark.skipif(not dali_installed(), reason="DALI not installed")),
]


def load(root, backend, **kw):
    kw.setdefault("num_workers", 0 if backend == "torch" else 2)
    kw.setdefault("device", "cpu")
    return classification_loader(root, backend=backend, **kw)


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize(
    ("dtype", "layout"), [(torch.float32, "NCHW"), (torch.float16, "NHWC"), (torch.uint8, "NCHW")]
)
def test_batches_have_the_contract_shape_dtype_layout_and_labels(image_folder, backend, dtype, layout):
    loader = load(image_folder, backend, train=True, batch_size=16, size=48, dtype=dtype, layout=layout)
    assert loader.backend == backend
    batches = list(loader)
    assert len(batches) == len(loader) == 3  # 40 samples, batch 16, partial
    expected = (3, 48, 48) if layout == "NCHW" else (48, 48, 3)
    labels = torch.cat([y for _, y in batches])
    for x, y in batches:
        assert x.dtype == dtype and x.device.type == "cpu" and tuple(x.shape[1:]) == expected
        assert y.dtype == torch.int64 and y.shape == (x.shape[0],)
    assert len(labels) == 40 and set(labels.tolist()) == {0, 1, 2}
    x = torch.cat([b[0] for b in batches]).float()
    if dtype == torch.uint8:
        assert x.max() > 100  # raw 0..255 pixels, not normalised
    else:
        lo = min((0 - m) / s for m, s in zip(IMAGENET_MEAN, IMAGENET_STD, strict=True))
        hi = max((1 - m) / s for m, s in zip(IMAGENET_MEAN, IMAGENET_STD, strict=True))
        assert lo - 0.01 <= x.min() and x.max() <= hi + 0.01 and x.min() < -0.5


@pytest.mark.parametrize("backend", BACKENDS)
def test_loader_is_reiterable_and_epochs_differ_when_shuffling(image_folder, backend):
    loader = load(image_folder, backend, train=True, batch_size=8, size=32)
    first = [y for _, y in loader]
    second = [y for _, y in loader]
    assert loader.epoch == 1
    assert sum(len(y) for y in first) == sum(len(y) for y in second) == 40
    assert not all(torch.equal(a, b) for a, b in zip(first, second, strict=True))


@pytest.mark.parametrize("backend", BACKENDS)
def test_a_seeded_run_repeats(image_folder, backend):
    def run(seed):
        loader = load(image_folder, backend, train=True, batch_size=8, size=32, seed=seed)
        return [(x.clone(), y.clone()) for _ in range(2) for x, y in loader]

    a, b, c = run(5), run(5), run(6)
    assert all(torch.equal(xa, xb) and torch.equal(ya, yb) for (xa, ya), (xb, yb) in zip(a, b, strict=True))
    assert not all(torch.equal(xa, xc) for (xa, _), (xc, _) in zip(a, c, strict=True))


def reference_val(path, size, resize):
    """torchvision's validation transform on a PIL image: the numbers users expect."""
    img = F.pil_to_tensor(Image.open(path).convert("RGB"))
    img = F.center_crop(F.resize(img, resize, antialias=True), size)
    return F.normalize(img.float() / 255, IMAGENET_MEAN, IMAGENET_STD)


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize(("size", "resize"), [(64, 73), (48, 54)])  # 48 / 0.875 = 54.86: timm's floor
def test_validation_output_matches_the_torchvision_reference(image_folder, backend, size, resize):
    loader = load(image_folder, backend, train=False, batch_size=40, size=size)
    (x, _), = list(loader)
    ref = torch.stack([reference_val(p, size, resize) for p in loader.samples.paths])
    diff = (x - ref).abs()
    # Same geometry as torchvision; DALI's resampling filter differs by at most a level or two.
    assert diff.mean() < 0.01, diff.mean()
    assert diff.max() < 0.05, diff.max()


def test_the_default_val_resize_is_timms_floor_of_size_over_0_875():
    """round() gave 183 for 160 and 439 for 384, a pixel more than timm's eval transform
    (``math.floor(size / crop_pct)``) and most reference scripts."""
    assert [default_val_resize(s) for s in (160, 224, 256, 320, 384)] == [182, 256, 292, 365, 438]


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("shards", [2, 3])
def test_partial_epoch_yields_every_sample_exactly_once_across_shards(tmp_path, backend, shards):
    files = indexed_file_list(tmp_path, 23)
    seen = []
    for shard in range(shards):
        loader = load(None, backend, file_list=files, train=True, batch_size=4, size=32,
                      shard_id=shard, num_shards=shards)
        seen += [v for _, y in loader for v in y.tolist()]
    assert sorted(seen) == list(range(23))


@pytest.mark.parametrize("backend", BACKENDS)
def test_drop_and_fill_follow_the_documented_counts(tmp_path, backend):
    files = indexed_file_list(tmp_path, 10)
    drop = load(None, backend, file_list=files, train=False, batch_size=4, size=32, last_batch="drop")
    fill = load(None, backend, file_list=files, train=False, batch_size=4, size=32, last_batch="fill")
    assert [y.tolist() for _, y in drop] == [[0, 1, 2, 3], [4, 5, 6, 7]]
    assert [y.tolist() for _, y in fill] == [[0, 1, 2, 3], [4, 5, 6, 7], [8, 9, 0, 1]]
    assert len(drop) == 2 and len(fill) == 3


@pytest.mark.parametrize("backend", BACKENDS)
def test_shard_defaults_come_from_torchrun_environment(tmp_path, monkeypatch, backend):
    files = indexed_file_list(tmp_path, 10)
    monkeypatch.setenv("RANK", "1")
    monkeypatch.setenv("WORLD_SIZE", "2")
    loader = load(None, backend, file_list=files, train=False, batch_size=8, size=32)
    assert (loader.options.shard_id, loader.options.num_shards) == (1, 2)
    assert [y.tolist() for _, y in loader] == [[5, 6, 7, 8, 9]]


@pytest.mark.parametrize(("dtype", "layout"), [(torch.float32, "NCHW"), (torch.float16, "NHWC")])
def test_torch_backend_with_worker_processes_matches_in_process(image_folder, dtype, layout):
    # Workers hand uint8 batches over and this process normalises them into reused
    # buffers: every batch kept (here: all of them) must stay as it was yielded.
    kw = dict(train=True, batch_size=8, size=32, dtype=dtype, layout=layout)
    one = list(load(image_folder, "torch", num_workers=0, **kw))
    two = list(load(image_folder, "torch", num_workers=2, **kw))
    assert len(one) == len(two) == 5
    for (xa, ya), (xb, yb) in zip(one, two, strict=True):
        assert xb.dtype == dtype and torch.equal(xa, xb) and torch.equal(ya, yb)
    assert len({x.data_ptr() for x, _ in two}) == 5


@pytest.mark.skipif(not dali_installed(), reason="DALI not installed")
def test_dali_backend_gives_a_real_dali_classification_iterator(image_folder):
    from nvidia.dali.plugin.pytorch import DALIClassificationIterator

    loader = load(image_folder, "dali", train=True, batch_size=16, size=32)
    it = loader.dali_iterator()
    assert isinstance(it, DALIClassificationIterator)
    assert len(it) == 3 and it.size == 40  # 40 samples, batch 16, partial (scripts use size)
    for _ in range(2):  # auto_reset: a second epoch too
        out = [d[0] for d in it]
        assert sum(d["data"].shape[0] for d in out) == 40
        assert out[0]["data"].shape[1:] == (3, 32, 32)
        # (N, 1) as from DALI's readers: label.squeeze(-1) keeps a 1-sample batch 1-D
        assert all(d["label"].shape == (d["data"].shape[0], 1) for d in out)
        assert set(torch.cat([d["label"].view(-1) for d in out]).tolist()) == {0, 1, 2}


@pytest.mark.parametrize("backend", BACKENDS)
def test_dataloader_attributes_training_frameworks_read(image_folder, backend):
    loader = load(image_folder, backend, train=True, batch_size=16, size=32)
    assert loader.batch_size == 16 and len(loader.dataset) == 40


@pytest.mark.skipif(not dali_installed(), reason="DALI not installed")
def test_dali_s_own_last_batch_policy_is_taken(image_folder):
    from nvidia.dali.plugin.base_iterator import LastBatchPolicy

    loader = load(image_folder, "torch", train=False, batch_size=16, size=32, last_batch=LastBatchPolicy.DROP)
    assert loader.options.last_batch.value == "drop" and len(loader) == 2  # 40 samples


@pytest.mark.skipif(not dali_installed(), reason="DALI not installed")
def test_dali_iterator_refuses_a_gpu_augment_stage_it_would_not_apply(image_folder):
    from gpufeed.gpu_transforms.augment import GpuAugment, RandomHorizontalFlip

    loader = load(image_folder, "dali", train=True, batch_size=16, size=32, dtype=torch.uint8,
                  gpu_augment=GpuAugment([RandomHorizontalFlip()]))
    with pytest.raises(ValueError, match="gpu_augment does not reach.*iterate the loader itself"):
        loader.dali_iterator()


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        ({"batch_size": 0}, "batch_size"),
        ({"layout": "CHW"}, "layout"),
        ({"dtype": torch.int32}, "dtype"),
        ({"shard_id": 2, "num_shards": 2}, "shard_id"),
        ({"last_batch": "pad"}, "pad"),
        ({"backend": "tf"}, "backend"),
        ({"on_error": "ignore"}, "ignore"),
        ({"num_workers": -1}, "num_workers"),
        ({"scale": (0.5, 0.1)}, "scale"),
        ({"ratio": (0, 1)}, "ratio"),
        ({"gpu_augment": lambda x, y: (x, y)}, "dtype=torch.uint8"),
        ({"seed": None}, "seed"),
        ({"seed": -1}, "seed"),
        ({"seed": 1.5}, "seed"),
        ({"shuffle": "no"}, "shuffle"),
        ({"batch_size": True}, "batch_size"),
        ({"mean": (123.7, 116.3, 103.5), "std": (58.4, 57.1, 57.4)}, "0..1 units"),
        # each failed at the first batch (in a worker), with a bare comparison TypeError or an
        # IndexError, or passed (True as 1 worker)
        ({"num_workers": 1.5}, "num_workers must be None or an int"),
        ({"num_workers": "2"}, "num_workers must be None or an int"),
        ({"num_workers": True}, "num_workers must be None or an int"),
        ({"num_workers": 10**9}, "num_workers must be None or an int from 0 to 1024"),
        ({"val_resize": 256.5}, "val_resize must be None or an int"),
        ({"val_resize": "256"}, "val_resize must be None or an int"),
        ({"val_resize": True}, "val_resize must be None or an int"),
        ({"val_resize": 100}, r"val_resize must be None or an int >= size \(224\)"),
        ({"scale": (0.08,)}, r"scale must be \(lo, hi\)"),
        ({"ratio": (0.75,)}, r"ratio must be \(lo, hi\)"),
        ({"scale": 0.5}, r"scale must be \(lo, hi\)"),
        ({"ratio": ("3/4", "4/3")}, r"ratio must be \(lo, hi\)"),
    ],
)
def test_bad_arguments_raise_errors_naming_them(image_folder, kwargs, match):
    args = {"train": True, "batch_size": 4, "device": "cpu", "backend": "torch", **kwargs}
    with pytest.raises(ValueError, match=match):
        classification_loader(image_folder, **args)


def test_one_name_for_workers_and_threads_and_dali_iterator_only_on_dali(image_folder):
    with pytest.raises(TypeError, match="num_threads"):
        classification_loader(image_folder, train=True, batch_size=4, device="cpu", backend="torch", num_threads=2)
    loader = classification_loader(image_folder, train=True, batch_size=4, device="cpu", backend="torch")
    assert not hasattr(loader, "dali_iterator")
    with pytest.raises(AttributeError, match="dali_iterator\\(\\) needs backend='dali'.*torch"):
        loader.dali_iterator()
    with pytest.raises(AttributeError, match="no attribute 'nope'"):
        loader.nope  # noqa: B018


def test_every_loader_option_is_an_argument_of_classification_loader():
    import dataclasses
    import inspect

    from gpufeed.pipelines import LoaderOptions

    arguments = inspect.signature(classification_loader).parameters
    assert {f.name for f in dataclasses.fields(LoaderOptions)} <= set(arguments)


def test_half_explicit_shards_next_to_a_launcher_are_refused(image_folder, monkeypatch):
    monkeypatch.setenv("RANK", "1")
    monkeypatch.setenv("WORLD_SIZE", "2")
    with pytest.raises(ValueError, match="num_shards=4 was given but not its partner"):
        classification_loader(image_folder, train=True, batch_size=4, device="cpu", backend="torch", num_shards=4)
    loader = classification_loader(image_folder, train=True, batch_size=4, device="cpu", backend="torch")
    assert (loader.plan.shard_id, loader.plan.num_shards) == (1, 2)


@pytest.mark.parametrize("backend", BACKENDS)
def test_num_shards_without_shard_id_and_no_launcher_is_refused(image_folder, backend, monkeypatch):
    """Pass both or neither: shard_id would be 0 in every process, each reading slice 0 only."""
    for name in ("RANK", "WORLD_SIZE"):
        monkeypatch.delenv(name, raising=False)
    with pytest.raises(ValueError, match=r"^num_shards=2 was given without shard_id, .*every process would read "
                                         r"slice 0 only: pass both shard_id and num_shards .*or neither$"):
        load(image_folder, backend, train=True, batch_size=8, num_shards=2)
    loader = load(image_folder, "torch", train=True, batch_size=8, num_shards=1)  # no split: as if neither
    assert (loader.plan.shard_id, loader.plan.num_shards) == (0, 1)


def test_numpy_integers_and_torch_devices_are_accepted(tmp_path):
    files = indexed_file_list(tmp_path, 6)
    loader = classification_loader(file_list=files, train=True, batch_size=np.int64(4), seed=np.int64(3),
                                   size=np.int32(32), device=torch.device("cpu"), backend="torch",
                                   num_workers=np.int64(0), val_resize=np.int16(40))
    assert all(type(getattr(loader.options, k)) is int for k in ("batch_size", "seed", "num_workers", "val_resize"))
    assert loader.device == torch.device("cpu") and [len(y) for _, y in loader] == [4, 2]


def test_cuda_on_a_machine_without_it_is_a_clear_error(image_folder):
    if torch.cuda.is_available():
        pytest.skip("this machine has CUDA")
    with pytest.raises(RuntimeError, match="no CUDA GPU"):
        classification_loader(image_folder, train=True, batch_size=4, device="cuda")


@pytest.mark.gpu
@pytest.mark.parametrize("backend", BACKENDS)
def test_gpu_batches_live_on_the_gpu_and_match_the_cpu_contract(image_folder, backend):
    loader = load(image_folder, backend, train=False, batch_size=40, size=64, device="cuda")
    (x, y), = list(loader)
    assert x.is_cuda and y.is_cuda and x.dtype == torch.float32 and x.shape == (40, 3, 64, 64)
    cpu = load(image_folder, backend, train=False, batch_size=40, size=64, device="cpu")
    (xc, yc), = list(cpu)
    assert torch.equal(y.cpu(), yc)
    # GPU decoders (nvJPEG) differ slightly from libjpeg-turbo
    assert (x.cpu() - xc).abs().mean() < 0.05
    assert np.isfinite(x.cpu().numpy()).all()


@pytest.mark.parametrize("backend", BACKENDS)
def test_gpu_augment_runs_on_every_batch_after_loading(image_folder, backend):
    seen = []

    def augment(images, labels):
        seen.append((images.dtype, images.shape[0]))
        return images.float() / 255, labels + 100

    loader = load(image_folder, backend, train=True, batch_size=16, size=32, dtype=torch.uint8,
                  gpu_augment=augment)
    out = list(loader)
    assert seen == [(torch.uint8, 16), (torch.uint8, 16), (torch.uint8, 8)]
    assert all(x.dtype == torch.float32 and x.max() <= 1 and y.min() >= 100 for x, y in out)
    assert loader.samples_yielded == 40


def test_reused_output_buffers_never_overwrite_a_batch_someone_holds():
    from gpufeed.pipelines.base import ReusedBuffers

    pool = ReusedBuffers(keep=2)
    kept = pool.empty((4, 3), torch.float32).fill_(1)
    view = pool.empty((4, 3), torch.float32).fill_(2)[1:]
    third = pool.empty((4, 3), torch.float32).fill_(3)  # pool full and busy: a new tensor
    assert kept.eq(1).all() and view.eq(2).all() and third.eq(3).all()
    ptr = kept.data_ptr()
    del kept
    again = pool.empty((4, 3), torch.float32)
    assert again.data_ptr() == ptr  # freed memory is reused
    assert view.eq(2).all()


@pytest.mark.parametrize("backend", BACKENDS)
def test_crop_scale_and_ratio_reach_the_random_crop(tmp_path, backend):
    files = indexed_file_list(tmp_path, 4)

    def first_batch(**kw):
        loader = load(None, backend, file_list=files, train=True, batch_size=4, size=32, seed=1,
                      dtype=torch.uint8, **kw)
        assert loader.options.scale == kw.get("scale", (0.08, 1.0))
        return next(iter(loader))[0]

    default = first_batch()
    assert torch.equal(first_batch(), default)
    assert not torch.equal(first_batch(scale=(0.9, 1.0), ratio=(1.0, 1.0)), default)


@pytest.mark.parametrize("backend", BACKENDS)
def test_set_epoch_resumes_the_same_order_as_an_uninterrupted_run(tmp_path, backend):
    files = indexed_file_list(tmp_path, 12)
    run = load(None, backend, file_list=files, train=True, batch_size=4, size=32, seed=3)
    orders = [[v for _, y in run for v in y.tolist()] for _ in range(3)]
    resumed = load(None, backend, file_list=files, train=True, batch_size=4, size=32, seed=3)
    resumed.set_epoch(2)
    assert [v for _, y in resumed for v in y.tolist()] == orders[2]
    assert orders[0] != orders[1]


@pytest.mark.parametrize("backend", BACKENDS)
def test_set_epoch_resumes_the_same_pixels_as_an_uninterrupted_run(tmp_path, backend):
    files = indexed_file_list(tmp_path, 12)
    run = load(None, backend, file_list=files, train=True, batch_size=4, size=32, seed=3, dtype=torch.uint8)
    epochs = [[(x.clone(), y.clone()) for x, y in run] for _ in range(2)]
    resumed = load(None, backend, file_list=files, train=True, batch_size=4, size=32, seed=3, dtype=torch.uint8)
    resumed.set_epoch(1)
    again = [(x.clone(), y.clone()) for x, y in resumed]
    assert [y.tolist() for _, y in again] == [y.tolist() for _, y in epochs[1]]
    assert all(torch.equal(a, b) for (a, _), (b, _) in zip(again, epochs[1], strict=True))


@pytest.mark.parametrize("backend", BACKENDS)
def test_set_epoch_repeats_an_unseeded_gpu_augment_stage(tmp_path, backend):
    from gpufeed.gpu_transforms.augment import (
        ColorJitter,
        GpuAugment,
        RandomHorizontalFlip,
        RandomResizedCrop,
    )

    files = indexed_file_list(tmp_path, 8)

    def loader():
        stage = GpuAugment([RandomResizedCrop(24), RandomHorizontalFlip(), ColorJitter(0.4, 0.4)])  # no seed
        return load(None, backend, file_list=files, train=False, shuffle=True, batch_size=4, size=32, seed=3,
                    dtype=torch.uint8, gpu_augment=stage)

    run = loader()
    epochs = [[x.clone() for x, _ in run] for _ in range(2)]
    resumed = loader()
    resumed.set_epoch(1)
    assert all(torch.equal(a, b) for (a, _), b in zip(resumed, epochs[1], strict=True))
    assert not all(torch.equal(a, b) for a, b in zip(epochs[0], epochs[1], strict=True))
    # a stage with its own seed keeps its own stream (not reseeded per epoch)
    seeded = GpuAugment([RandomHorizontalFlip()], seed=7)
    list(load(None, backend, file_list=files, train=False, batch_size=4, size=32, dtype=torch.uint8,
              gpu_augment=seeded))
    assert seeded.seed == 7 and seeded.has_own_seed


@pytest.mark.skipif(not dali_installed(), reason="DALI not installed")
def test_dali_iterator_with_no_batch_in_the_plan_says_why(tmp_path):
    files = indexed_file_list(tmp_path, 3)
    loader = load(None, "dali", file_list=files, train=False, batch_size=4, size=32, last_batch="drop")
    assert len(loader) == 0
    with pytest.raises(ValueError, match=r"3 samples, fewer than batch_size=4.*drop.*DALI cannot run a pipeline "
                                         r"with no batch.*loader itself yields 0 batches"):
        loader.dali_iterator()


@pytest.mark.skipif(not dali_installed(), reason="DALI not installed")
@pytest.mark.parametrize("last_batch", ["partial", "drop"])
def test_dali_iterator_on_a_rank_slice_with_no_sample_gives_the_true_cause(tmp_path, last_batch):
    """A small validation set under DDP (3 samples, 4 ranks): with 'partial' the error blamed
    last_batch='drop' and batch_size=1, and advised 'partial', what was passed."""
    files = indexed_file_list(tmp_path, 3)
    loader = load(None, "dali", file_list=files, train=False, batch_size=1, size=16, last_batch=last_batch,
                  shard_id=0, num_shards=4)
    assert list(loader) == []  # the loader itself: no batch on this rank
    with pytest.raises(ValueError) as raised:
        loader.dali_iterator()
    message = str(raised.value)
    assert "rank slice 0 of 4 has no sample: 3 sample(s) split over 4 ranks" in message
    assert f"last_batch={last_batch!r}" in message and "DALI cannot run a pipeline with no batch" in message
    assert "loader itself yields 0 batches" in message and "at most 3 rank(s)" in message
    assert "fewer than batch_size" not in message and "drops that incomplete batch" not in message


@pytest.mark.skipif(not dali_installed(), reason="DALI not installed")
def test_dali_iterator_reports_skipped_files_per_epoch(tmp_path):
    files = indexed_file_list(tmp_path, 6)
    bad = str(tmp_path / "bad.jpg")
    (tmp_path / "bad.jpg").write_bytes(b"")
    files.append((bad, 6))
    # drop: each epoch reads 4 of the 7 shuffled files, so the bad one is in some epochs only
    loader = load(None, "dali", file_list=files, train=True, batch_size=4, size=32, last_batch="drop")
    it = loader.dali_iterator()
    in_epoch = []
    for epoch in range(6):
        planned = {loader.samples.paths[i] for b in loader.plan.batches(epoch) for i in b}
        labels = [v for d in it for v in d[0]["label"].view(-1).tolist()]
        in_epoch.append(bad in planned)
        assert len(labels) == 4  # drop: a stand-in takes the bad file's place (the batch stays full)
        assert 6 not in labels
        assert [s.path for s in it.gpufeed_skipped.skipped] == ([bad] if bad in planned else [])
    assert any(in_epoch) and not all(in_epoch)


@pytest.mark.skipif(not dali_installed(), reason="DALI not installed")
def test_dali_iterator_names_a_file_only_the_decoder_rejects(tmp_path):
    # A PNG whose image data is scrambled under intact CRCs passes the byte checks; DALI's
    # decoder names only its error code.
    from tests.helpers import with_png_crcs

    files = indexed_file_list(tmp_path, 3)
    pixels = np.random.default_rng(0).integers(0, 256, (48, 64, 3), dtype=np.uint8)
    Image.fromarray(pixels).save(tmp_path / "cut.png")
    data = bytearray((tmp_path / "cut.png").read_bytes())
    data[len(data) // 2: len(data) // 2 + 64] = bytes(range(64))
    (tmp_path / "cut.png").write_bytes(with_png_crcs(data))
    files.insert(1, (str(tmp_path / "cut.png"), 3))
    loader = load(None, "dali", file_list=files, train=False, batch_size=4, size=32, shuffle=False)
    with pytest.raises(RuntimeError, match=r"dali_iterator\(\): DALI's decoder failed in epoch 0, batch 0, on .*cut.png"):
        list(loader.dali_iterator())


def test_pipeline_seeds_of_different_streams_differ():
    from gpufeed.pipelines.seeds import dali_seed

    seeds = {dali_seed(0, 0, *stream) for stream in [(), (0,), (0, 0), (1,), (1, 0), (0, 1)]}
    assert len(seeds) == 6  # zero-padding must not make (e,) and (e, 0) the same stream


@pytest.mark.skipif(not dali_installed(), reason="DALI not installed")
def test_both_backends_crop_and_flip_a_sample_alike(image_folder):
    # The DALI feed draws each sample's window and flip as the torch backend does, from
    # (seed, epoch, sample): the same crops, up to the decoders' rounding.
    def epoch(backend, seed):
        loader = load(image_folder, backend, train=True, shuffle=False, batch_size=8, size=48,
                      seed=seed, dtype=torch.uint8)
        return torch.cat([x for x, _ in loader]).float()

    dali, torch_ = epoch("dali", 5), epoch("torch", 5)
    same = (dali - torch_).abs().mean(dim=(1, 2, 3))
    other = (dali - epoch("torch", 6)).abs().mean(dim=(1, 2, 3))
    assert same.max() < 3.0, same  # pixel levels of 0..255: decoder rounding only
    assert other.mean() > 4 * same.mean() + 5  # another seed's crops are far off


@pytest.mark.skipif(not dali_installed(), reason="DALI not installed")
def test_dali_builds_its_pipeline_once_for_consecutive_epochs(image_folder, monkeypatch):
    from gpufeed.pipelines import dali_loader

    builds = []
    real = dali_loader.build_pipeline
    monkeypatch.setattr(dali_loader, "build_pipeline", lambda *a, **k: builds.append(1) or real(*a, **k))
    loader = load(image_folder, "dali", train=True, batch_size=8, size=32, seed=1, dtype=torch.uint8)
    epochs = [[x.clone() for x, _ in loader] for _ in range(3)]
    assert len(builds) == 1  # a rebuild costs ~2 s on a GPU
    for _ in loader:  # an epoch left half-way...
        break
    loader.set_epoch(1)  # ...and a jump: a fresh pipeline, and epoch 1's pixels again
    assert all(torch.equal(a, b) for a, b in zip([x for x, _ in loader], epochs[1], strict=True))
    assert len(builds) == 2


@pytest.mark.parametrize("backend", BACKENDS)
def test_an_iterator_superseded_by_a_newer_one_is_refused_not_mixed(image_folder, backend):
    """zip(loader, loader) gave 7 pairs of 13, with duplicates, each iterator seeing about
    half the samples: the newer iter() resets the workers or pipeline the older reads."""
    loader = load(image_folder, backend, train=False, batch_size=8, size=32, num_workers=2)
    with pytest.raises(RuntimeError, match=r"superseded: a newer iter\(loader\) started epoch 1 while it was in "
                                           r"epoch 0.*build two loaders"):
        list(zip(loader, loader, strict=False))
    assert sum(len(y) for _, y in loader) == 40  # a single loop afterwards: a whole epoch
    peek = next(iter(loader))  # an abandoned iterator is never resumed: nothing to refuse
    assert len(peek[1]) == 8 and sum(len(y) for _, y in loader) == 40


@pytest.mark.parametrize("backend", BACKENDS)
def test_a_set_smaller_than_the_rank_count_leaves_ranks_without_batches(tmp_path, backend):
    root = generate_image_folder(tmp_path / "train", num_images=1, num_classes=1, seed=1, min_side=40, max_side=48)
    got = [[len(y) for _, y in load(root, backend, train=False, batch_size=2, size=16, shard_id=rank,
                                    num_shards=2, last_batch="partial")] for rank in range(2)]
    assert got == [[], [1]]  # the one sample once; the other rank has no batch (DDP's join())
    with pytest.warns(UserWarning, match="has 1 sample.*fewer than batch_size=2.*yields no batch"):
        loader = load(root, backend, train=False, batch_size=2, size=16, last_batch="drop")
    assert list(loader) == []
