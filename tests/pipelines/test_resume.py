"""Mid-epoch resume: a loader state saved after any batch, loaded into a new loader in a
new process, yields the rest of the epoch exactly as an uninterrupted run does.

Every loader that produces or consumes a state runs in a process of its own
(:mod:`tests.pipelines.resume_child`): the reference run and the cut in one, the resumes
in another, so nothing but the saved state links a resume to its cut. The dataset has
one image per class, so a batch's labels say exactly which samples came out of the loader.
"""

from __future__ import annotations

import os
import pickle
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from gpufeed.datasets.images import generate_image_folder
from gpufeed.pipelines import classification_loader
from tests.helpers import impossible_huffman
from tests.pipelines.test_loader_contract import BACKENDS

REPO = Path(__file__).resolve().parents[2]
SOURCE_KINDS = ["folder", "webdataset", "raw"]
#: 11 samples, batch 3: 4 batches, the last one short.
N, BATCH, CUT = 11, 3, 2
KW = {"train": True, "batch_size": BATCH, "size": 32, "seed": 5}
#: In the child processes: torch worker processes (DALI threads) that prefetch ahead, so a
#: state must count the batches delivered, not those fetched.
WORKERS = {"num_workers": 2}


def run_jobs(tmp_path: Path, jobs: list[dict]) -> list[dict]:
    """Run ``jobs`` in a new Python process (see resume_child) and return their results."""
    jobs_file, out = tmp_path / f"jobs-{os.urandom(4).hex()}.pt", tmp_path / f"out-{os.urandom(4).hex()}.pt"
    torch.save(jobs, jobs_file)
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    done = subprocess.run([sys.executable, "-m", "tests.pipelines.resume_child", str(jobs_file), str(out)],
                          cwd=REPO, env=env, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    return torch.load(out, weights_only=False)


def one_per_class(root: Path, n: int = N) -> Path:
    """``n`` JPEGs, each in its own class: label == sample."""
    return generate_image_folder(root, num_images=n, num_classes=n, seed=2, min_side=40, max_side=64)


def make_source(kind: str, tmp_path: Path) -> str:
    """The dataset as an image folder, or converted to WebDataset shards or a raw cache
    (written by ``gpufeed.datasets.shards.convert``)."""
    folder = one_per_class(tmp_path / "train")
    if kind == "folder":
        return str(folder)
    from gpufeed.datasets.shards.convert import convert
    if kind == "raw":
        convert(folder, tmp_path / "raw", format="raw", raw_size=48, progress=False)
        return str(tmp_path / "raw")
    # ~8 kB shards: a few samples each, so the plan reads several shard files per rank
    convert(folder, tmp_path / "shards", format="webdataset", shard_size=8000, seed=0, progress=False)
    return str(tmp_path / "shards")


def assert_same_batches(got: list, want: list) -> None:
    """Batch by batch: the same samples (labels), pixels and augmentation parameters,
    bit for bit (each backend is deterministic: crops come from (seed, epoch, sample))."""
    assert [y.tolist() for _, y, _ in got] == [y.tolist() for _, y, _ in want]
    for (x, _, p), (xw, _, pw) in zip(got, want, strict=True):
        assert torch.equal(x, xw)
        if pw is not None:
            assert len(p) == len(pw)
            for ours, theirs in zip(p, pw, strict=True):
                assert ours.keys() == theirs.keys()
                assert all(torch.equal(ours[k], theirs[k]) for k in ours)


@pytest.mark.slow
@pytest.mark.parametrize("kind", SOURCE_KINDS)
@pytest.mark.parametrize("backend", BACKENDS)
def test_a_state_saved_mid_epoch_resumes_the_rest_of_the_epoch_in_a_new_process(tmp_path, backend, kind):
    source = make_source(kind, tmp_path)
    base = {"source": source, "backend": backend, "kw": {**KW, **WORKERS}}
    full, cut, cut1, at_end, full_aug, cut_aug = run_jobs(tmp_path, [
        {**base, "epochs": 2},  # the uninterrupted run: epochs 0 and 1
        {**base, "take": CUT},  # a cut in epoch 0
        {**base, "set_epoch": 1, "take": 1},  # a cut in epoch 1 of a run resumed there
        {**base, "take": 4},  # after epoch 0's last batch
        {**base, "augment": True},
        {**base, "augment": True, "take": CUT},
    ])
    assert len(full["epochs"][0]) == 4 and full["shard_size"] == N
    assert (cut["state"]["epoch"], cut["state"]["batch"]) == (0, CUT)
    assert (cut1["state"]["epoch"], cut1["state"]["batch"]) == (1, 1)
    assert (at_end["state"]["epoch"], at_end["state"]["batch"]) == (0, 4)  # epoch 0's end

    resumed, resumed1, next_epoch, resumed_aug = run_jobs(tmp_path, [
        {**base, "load": cut["state"]},
        {**base, "load": cut1["state"]},
        {**base, "load": at_end["state"], "epochs": 2},
        {**base, "augment": True, "load": cut_aug["state"]},
    ])
    epoch0, epoch1 = full["epochs"]
    assert_same_batches(cut["epochs"][0] + resumed["epochs"][0], epoch0)
    assert_same_batches(cut1["epochs"][0] + resumed1["epochs"][0], epoch1)
    assert next_epoch["epochs"][0] == []  # the rest of epoch 0: nothing, then epoch 1
    assert_same_batches(next_epoch["epochs"][1], epoch1)
    assert_same_batches(cut_aug["epochs"][0] + resumed_aug["epochs"][0], full_aug["epochs"][0])
    # the resumed epoch counts from the cut, and once it ran to its end the state points
    # at the next epoch
    assert resumed["samples_yielded"] == N
    assert (resumed["state"]["epoch"], resumed["state"]["batch"]) == (1, 0)
    # the stage really drew per batch: two batches of one epoch got different parameters
    first, second = (p for _, _, p in full_aug["epochs"][0][:2])
    assert not all(torch.equal(first[0][k], second[0][k]) for k in first[0] if first[0][k].shape == second[0][k].shape)


@pytest.mark.slow
@pytest.mark.parametrize("backend", BACKENDS)
def test_files_skipped_before_the_cut_still_count_after_the_resume(tmp_path, backend):
    root = one_per_class(tmp_path / "train")
    good = next((root / "class_000").iterdir()).read_bytes()
    # Without shuffling "aaa_bad" (label 0) is in the first batch, before the cut, and
    # "zzz_bad" (label 12) in the last, after it. The cut-short JPEG fails the byte checks;
    # the impossible Huffman table passes them and fails in the decoder (DALI then rebuilds
    # its pipeline inside the resumed epoch).
    (root / "aaa_bad").mkdir()
    (root / "aaa_bad" / "cut_short.jpg").write_bytes(good[: len(good) // 2])
    (root / "zzz_bad").mkdir()
    (root / "zzz_bad" / "broken_header.jpg").write_bytes(impossible_huffman(good))
    base = {"source": str(root), "backend": backend, "kw": {**KW, "shuffle": False, **WORKERS}}
    full, cut = run_jobs(tmp_path, [{**base}, {**base, "take": CUT}])
    (resumed,) = run_jobs(tmp_path, [{**base, "load": cut["state"]}])

    size, bad = N + 2, [str(root / "aaa_bad" / "cut_short.jpg"), str(root / "zzz_bad" / "broken_header.jpg")]
    assert [p for p, _ in cut["skipped"]] == bad[:1]
    assert cut["state"]["skipped"] == [list(s) for s in cut["skipped"]]
    assert_same_batches(cut["epochs"][0] + resumed["epochs"][0], full["epochs"][0])
    before = sum(len(y) for _, y, _ in cut["epochs"][0])
    after = sum(len(y) for _, y, _ in resumed["epochs"][0])
    assert before + after + len(bad) == size
    # the resumed loader reports the whole epoch, as the uninterrupted one does
    assert [p for p, _ in resumed["skipped"]] == [p for p, _ in full["skipped"]] == bad
    assert resumed["samples_yielded"] == full["samples_yielded"] == before + after == size - 2


# Refusals need no second process: they are checked before anything is read.

def torch_loader(root, **kw):
    return classification_loader(root, backend="torch", device="cpu", num_workers=0, **{**KW, **kw})


@pytest.fixture(scope="module")
def folder(tmp_path_factory) -> Path:
    return one_per_class(tmp_path_factory.mktemp("resume") / "train")


@pytest.fixture(scope="module")
def mid_epoch_state(folder) -> dict:
    loader = torch_loader(folder)
    next(iter(loader))
    return loader.state_dict()


def test_a_state_is_plain_data_that_torch_load_weights_only_and_pickle_keep(folder, mid_epoch_state, tmp_path):
    torch.save(mid_epoch_state, tmp_path / "state.pt")
    assert torch.load(tmp_path / "state.pt", weights_only=True) == mid_epoch_state
    assert pickle.loads(pickle.dumps(mid_epoch_state)) == mid_epoch_state
    assert (mid_epoch_state["epoch"], mid_epoch_state["batch"]) == (0, 1)


def test_a_state_taken_right_after_a_resume_is_the_state_loaded(folder, mid_epoch_state):
    loader = torch_loader(folder)
    assert (loader.state_dict()["epoch"], loader.state_dict()["batch"]) == (0, 0)  # never iterated
    loader.load_state_dict(mid_epoch_state)
    assert loader.state_dict() == mid_epoch_state  # a checkpoint before the first step
    # a loop that calls set_epoch every epoch keeps the resumed cut of that epoch
    loader.set_epoch(mid_epoch_state["epoch"])
    assert loader.state_dict() == {**mid_epoch_state, "set_epoch": mid_epoch_state["epoch"]}  # set now
    loader.set_epoch(3)
    assert (loader.state_dict()["epoch"], loader.state_dict()["batch"]) == (3, 0)


def test_set_epoch_of_the_resumed_epoch_yields_the_rest_of_it(folder, mid_epoch_state):
    whole = [y.tolist() for _, y in torch_loader(folder)]
    loader = torch_loader(folder)
    loader.load_state_dict(mid_epoch_state)
    loader.set_epoch(mid_epoch_state["epoch"])
    assert [y.tolist() for _, y in loader] == whole[mid_epoch_state["batch"]:]


def test_a_checkpoint_after_an_epochs_last_batch_resumes_with_either_epoch_counter(folder):
    """A step-based checkpoint that lands on an epoch's last batch is taken inside the loop,
    where the training loop's counter is still that epoch: `for epoch in range(ckpt_epoch,
    E): set_epoch(epoch)` replayed the whole epoch when the state said "epoch + 1, batch 0"."""
    whole = torch_loader(folder)
    epochs = []
    for epoch in range(3):
        whole.set_epoch(epoch)
        epochs.append([y.tolist() for _, y in whole])
    first = torch_loader(folder)
    first.set_epoch(0)
    for k, _ in enumerate(first):
        if k == len(first) - 1:  # the checkpoint, in the loop body after the last batch
            state = first.state_dict()
    assert (state["epoch"], state["batch"]) == (0, len(first))
    closed = first.state_dict()  # after the loop ran to its end: the next epoch's start
    assert (closed["epoch"], closed["batch"]) == (1, 0)
    for counter in (0, 1):  # the loop's own epoch, saved before or after it was advanced
        loader = torch_loader(folder)
        loader.load_state_dict(state)
        got = []
        for epoch in range(counter, 3):
            loader.set_epoch(epoch)
            got.append([y.tolist() for _, y in loader])
        assert [b for e in got for b in e] == [b for e in epochs[1:] for b in e]
    plain = torch_loader(folder)  # a loop that never calls set_epoch, its counter at epoch 0
    plain.load_state_dict(state)
    assert [[y.tolist() for _, y in plain] for _ in range(3)] == [[], epochs[1], epochs[2]]


def test_a_dataset_copied_elsewhere_accepts_the_state(folder, mid_epoch_state, tmp_path):
    import shutil

    copy = shutil.copytree(folder, tmp_path / "elsewhere" / "train")
    whole = [y.tolist() for _, y in torch_loader(folder)]
    loader = torch_loader(copy)
    loader.load_state_dict(mid_epoch_state)  # another mount point, same files: the rest of the epoch
    assert [y.tolist() for _, y in loader] == whole[mid_epoch_state["batch"]:]


@pytest.mark.parametrize(("change", "named"), [
    ({"batch_size": 4}, "batch_size: saved 3, this loader 4"),
    ({"num_shards": 2, "shard_id": 0}, "num_shards: saved 1, this loader 2"),
    ({"seed": 6}, "seed: saved 5, this loader 6"),
    ({"last_batch": "drop"}, "last_batch: saved 'partial', this loader 'drop'"),
])
def test_a_state_from_another_plan_is_refused_naming_what_differs(folder, mid_epoch_state, change, named):
    with pytest.raises(ValueError, match="another dataset or plan") as err:
        torch_loader(folder, **change).load_state_dict(mid_epoch_state)
    assert named in str(err.value)


def test_a_state_from_other_files_is_refused_naming_the_dataset(mid_epoch_state, tmp_path):
    other = one_per_class(tmp_path / "other", n=12)
    with pytest.raises(ValueError, match=r"dataset samples: saved 11, this loader 12"):
        torch_loader(other).load_state_dict(mid_epoch_state)
    renamed = one_per_class(tmp_path / "renamed")
    os.rename(next((renamed / "class_003").iterdir()), renamed / "class_003" / "another_name.jpg")
    with pytest.raises(ValueError, match=r"dataset digest"):
        torch_loader(renamed).load_state_dict(mid_epoch_state)


def test_a_state_from_a_raw_cache_of_other_images_with_the_same_labels_is_refused(tmp_path):
    from gpufeed.datasets.shards.convert import convert

    caches = []
    for name, seed in (("one", 2), ("other", 3)):  # the same names and labels, other pixels
        folder = generate_image_folder(tmp_path / name / "train", num_images=N, num_classes=N, seed=seed,
                                       min_side=40, max_side=64)
        convert(folder, tmp_path / name / "raw", format="raw", raw_size=32, progress=False)
        caches.append(tmp_path / name / "raw")
    first = torch_loader(caches[0])
    next(iter(first))
    state = first.state_dict()
    torch_loader(caches[0]).load_state_dict(state)  # the same cache: accepted
    with pytest.raises(ValueError, match=r"dataset digest"):
        torch_loader(caches[1]).load_state_dict(state)


@pytest.mark.parametrize("fmt", ["webdataset", "tfrecord"])
def test_a_state_from_the_same_images_sharded_in_another_order_is_refused(tmp_path, fmt):
    """Same shard names, counts and bytes, another order (convert's --seed): resuming there
    would repeat some samples and lose others."""
    from gpufeed.datasets.shards.convert import convert

    folder = generate_image_folder(tmp_path / "train", num_images=N, num_classes=N, seed=2, min_side=40, max_side=64)
    for seed in (0, 1):
        convert(folder, tmp_path / f"seed{seed}", format=fmt, seed=seed, progress=False)
    first = torch_loader(tmp_path / "seed0")
    next(iter(first))
    state = first.state_dict()
    torch_loader(tmp_path / "seed0").load_state_dict(state)  # the same shards: accepted
    with pytest.raises(ValueError, match=r"dataset layout"):
        torch_loader(tmp_path / "seed1").load_state_dict(state)


def test_a_folder_is_fingerprinted_once_per_source(folder):
    from gpufeed.pipelines.sources import scan_image_folder

    source = scan_image_folder(folder)
    first = source.fingerprint()
    object.__setattr__(source, "paths", ())  # a second computation would fail on no paths
    assert source.fingerprint() == first


@pytest.mark.parametrize("garbage", [None, 3, "state", {}, {"format": "something else"},
                                     {"format": "gpufeed.loader/1"}, [("epoch", 0)]])
def test_garbage_is_refused_as_not_a_loader_state(folder, garbage):
    with pytest.raises(ValueError, match="not a gpufeed loader state"):
        torch_loader(folder).load_state_dict(garbage)


def test_a_position_outside_the_plan_is_refused(folder, mid_epoch_state):
    with pytest.raises(ValueError, match="outside this plan"):
        torch_loader(folder).load_state_dict({**mid_epoch_state, "batch": 9})
    for key, value in [("epoch", "zero"), ("batch", "1"), ("batch", 1.7), ("batch", True), ("samples_yielded", None)]:
        with pytest.raises(ValueError, match=rf"not a gpufeed loader state: {{'{key}': .*whole number"):
            torch_loader(folder).load_state_dict({**mid_epoch_state, key: value})
    import numpy as np  # a state kept in numpy ints (a checkpoint library's) is fine

    torch_loader(folder).load_state_dict({**mid_epoch_state, "batch": np.int64(1)})


def test_a_shard_state_saved_before_the_layout_digest_still_resumes(tmp_path):
    from gpufeed.datasets.shards.convert import convert

    folder = generate_image_folder(tmp_path / "train", num_images=N, num_classes=N, seed=2, min_side=40, max_side=64)
    convert(folder, tmp_path / "wds", format="webdataset", progress=False)
    first = torch_loader(tmp_path / "wds")
    next(iter(first))
    state = first.state_dict()
    del state["dataset"]["layout"]  # as states were written before it was recorded
    torch_loader(tmp_path / "wds").load_state_dict(state)


def test_a_state_edited_in_place_leaves_the_loaders_fingerprint_alone(tmp_path):
    from gpufeed.datasets.shards.convert import convert
    from gpufeed.pipelines.states import differences

    folder = generate_image_folder(tmp_path / "train", num_images=N, num_classes=N, seed=2, min_side=40, max_side=64)
    convert(folder, tmp_path / "wds", format="webdataset", progress=False)
    loader = torch_loader(tmp_path / "wds")
    state = loader.state_dict()
    untouched = loader.state_dict()
    state["dataset"]["counts"][0] += 100  # the caller's copy, not the loader's cache
    loader.load_state_dict(untouched)
    # A key recorded later is let off in the dataset group only: the settings' own
    # `layout` (NCHW/NHWC) is always compared.
    assert differences("settings", {}, {"layout": "NCHW"}) and not differences("dataset", {}, {"layout": "ab"})
