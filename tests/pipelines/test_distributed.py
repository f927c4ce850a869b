"""examples/train_ddp.py under torchrun: 2 CPU processes (gloo), each reading its shard.

Which samples a rank trained on is read from what came out of its loader: the dataset
has one image per class, so the labels the example records per step (``--record``) are
the sample identities. Each launch is a fresh torchrun, so no test process holds DALI
when DataLoader workers fork.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections import Counter
from pathlib import Path

import pytest

from gpufeed.datasets.images import generate_image_folder
from tests.pipelines.test_loader_contract import BACKENDS

REPO = Path(__file__).resolve().parents[2]
SCRIPT = REPO / "examples" / "train_ddp.py"
#: 11 samples over 2 ranks: shards of 5 and 6.
N = 11

pytestmark = pytest.mark.slow


def make_dataset(kind: str, tmp: Path) -> str:
    """11 JPEGs, one per class (label == sample), as a folder, or converted by
    ``gpufeed.datasets.shards.convert`` into WebDataset or TFRecord shards or a raw cache."""
    folder = generate_image_folder(tmp / "train", num_images=N, num_classes=N, seed=2, min_side=40, max_side=64)
    if kind == "folder":
        return str(folder)
    from gpufeed.datasets.shards.convert import convert
    # ~8 kB shards: a few samples each, so each rank reads several shard files
    convert(folder, tmp / kind, format=kind, shard_size=8000, seed=0, progress=False)
    return str(tmp / kind)


@pytest.fixture(scope="module", params=["folder", "webdataset"])
def dataset(request, tmp_path_factory) -> str:
    """The folder and WebDataset shards, for every test of this module."""
    return make_dataset(request.param, tmp_path_factory.mktemp(request.param))


def torchrun(tmp_path: Path, data: str, *args: str, backend: str = "torch") -> dict[int, list[dict]]:
    """Run the example on 2 processes; each rank's recorded steps (epoch, labels)."""
    record = tmp_path / "record"
    env = {**os.environ, "PYTHONPATH": str(REPO), "OMP_NUM_THREADS": "1"}
    cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node=2", str(SCRIPT),
           "--data", data, "--backend", backend, "--model", "tiny", "--size", "32", "--workers", "1",
           "--record", str(record), *args]
    done = subprocess.run(cmd, cwd=tmp_path, env=env, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, (done.stdout + done.stderr)[-3000:]
    return {rank: [json.loads(line) for line in Path(f"{record}.rank{rank}.jsonl").read_text().splitlines()]
            for rank in (0, 1)}


def by_epoch(steps: list[dict]) -> dict[int, list[int]]:
    """A rank's samples per epoch, in the order it trained on them."""
    out: dict[int, list[int]] = {}
    for s in steps:
        out.setdefault(s["epoch"], []).extend(s["labels"])
    return out


@pytest.mark.parametrize("backend", BACKENDS)
def test_partial_gives_every_sample_to_exactly_one_rank(tmp_path, dataset, backend):
    ranks = torchrun(tmp_path, dataset, "--last-batch", "partial", "--batch-size", "3", "--epochs", "2",
                     backend=backend)
    seen = [by_epoch(ranks[0]), by_epoch(ranks[1])]
    for epoch in (0, 1):
        both = seen[0][epoch] + seen[1][epoch]
        assert sorted(both) == list(range(N)), both  # the union is the dataset, nothing twice
        assert sorted(len(s[epoch]) for s in seen) == [5, 6]
    assert seen[0][0] != seen[0][1]  # reshuffled each epoch


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("kind", ["tfrecord", "raw"])
def test_partial_is_exactly_once_for_tfrecord_and_raw_caches_too(tmp_path, kind, backend):
    data = make_dataset(kind, tmp_path / "data")
    ranks = torchrun(tmp_path, data, "--last-batch", "partial", "--batch-size", "3", "--epochs", "1", backend=backend)
    seen = [by_epoch(ranks[0])[0], by_epoch(ranks[1])[0]]
    assert sorted(seen[0] + seen[1]) == list(range(N)), seen  # the union is the dataset, nothing twice
    assert sorted(len(s) for s in seen) == [5, 6]


@pytest.mark.parametrize(("policy", "batch", "steps"), [
    ("drop", 3, 1),  # shards of 5 and 6: 1 and 2 full batches alone; both keep 1
    ("fill", 5, 2),  # 1 and 2 batches alone; both pad to 2
])
def test_drop_and_fill_step_every_rank_the_same_number_of_times(tmp_path, dataset, policy, batch, steps):
    ranks = torchrun(tmp_path, dataset, "--last-batch", policy, "--batch-size", str(batch), "--epochs", "2")
    assert len(ranks[0]) == len(ranks[1]) == 2 * steps
    assert all(len(s["labels"]) == batch for r in ranks.values() for s in r)  # full batches only
    for epoch in (0, 1):
        labels = by_epoch(ranks[0])[epoch] + by_epoch(ranks[1])[epoch]
        if policy == "drop":
            assert len(set(labels)) == len(labels)  # nothing repeated
        else:
            assert set(labels) == set(range(N))  # every sample, the padding repeats a few
            assert max(Counter(labels).values()) == 2


def test_a_preempted_job_resumes_where_it_stopped_on_every_rank(tmp_path, dataset):
    args = ["--last-batch", "fill", "--batch-size", "3", "--epochs", "2", "--checkpoint", str(tmp_path / "ckpt")]
    (tmp_path / "once").mkdir()
    (tmp_path / "twice").mkdir()
    whole = torchrun(tmp_path / "once", dataset, *args)
    torchrun(tmp_path / "twice", dataset, *args, "--stop-after", "3")  # mid epoch 1
    resumed = torchrun(tmp_path / "twice", dataset, *args, "--resume")  # appends to the record
    for rank in (0, 1):
        assert [s["step"] for s in resumed[rank]] == [1, 2, 3, 4]
        assert [(s["epoch"], s["labels"]) for s in resumed[rank]] == [(s["epoch"], s["labels"]) for s in whole[rank]]


def test_default_workers_share_the_machine_among_its_ranks(monkeypatch, image_folder):
    # Each rank took every core: 8 ranks on 64 cores started 512 workers.
    import os

    from gpufeed import machine
    from gpufeed.pipelines import classification_loader

    monkeypatch.setattr(os, "cpu_count", lambda: 64)
    monkeypatch.setattr(machine, "usable_cpus", lambda: 64)
    monkeypatch.setenv("LOCAL_WORLD_SIZE", "8")
    loader = classification_loader(str(image_folder), backend="torch", device="cpu", train=True, batch_size=4)
    assert loader.options.workers == 8
    monkeypatch.setattr(machine, "usable_cpus", lambda: 6)  # bound to its own cores: its share already
    assert loader.options.workers == 6
    monkeypatch.setattr(machine, "usable_cpus", lambda: 32)  # a job-wide cpuset every rank inherits: divided
    assert loader.options.workers == 4
    monkeypatch.setenv("LOCAL_WORLD_SIZE", "1")
    monkeypatch.setattr(machine, "usable_cpus", lambda: 64)
    assert loader.options.workers == 64
    monkeypatch.setenv("LOCAL_WORLD_SIZE", "128")  # more ranks than cores: still one each
    assert loader.options.workers == 1
    explicit = classification_loader(str(image_folder), backend="torch", device="cpu", train=True, batch_size=4,
                                     num_workers=3)
    assert explicit.options.workers == 3  # as asked
