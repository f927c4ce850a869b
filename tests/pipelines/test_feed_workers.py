"""The DALI feed's worker processes: the same batches, skips and resumes as the feed's own
thread, and used only where they pay (a folder's files on a GPU).

The feeds run in a child process that imports no DALI: the workers are forked, and a
process that ran DALI pipelines must not fork (that crashed on this machine).
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from gpufeed.pipelines import classification_loader
from gpufeed.pipelines.feed_workers import feed_processes

_FEEDS = r"""
import json, sys
from pathlib import Path
import numpy as np
from gpufeed.pipelines import classification_loader
from gpufeed.pipelines.feeds import FileFeed
from gpufeed.pipelines.skips import SkipLog

root, train = Path(sys.argv[1]), sys.argv[2] == "train"
bad = root / "class_000" / "fixed-later.jpg"
good = next(p for p in sorted((root / "class_000").glob("*.jpg"))
            if p.name not in ("cut.jpg", "empty.jpg", "fixed-later.jpg"))

def flat(batch):
    return [[np.asarray(x).tobytes().hex()[:64] + str(np.asarray(x).size) for x in col]
            if isinstance(col, list) else np.asarray(col).tolist() for col in batch]

def run(processes):
    bad.write_bytes(b"not a jpeg")
    loader = classification_loader(str(root), backend="torch", device="cpu", train=train, batch_size=8,
                                   size=32, num_workers=2, on_error="skip", last_batch="fill")
    log = SkipLog("skip")
    feed = FileFeed(loader.samples, loader.plan, log, loader.options, processes=processes)
    alive = 0 if feed._workers is None else len(feed._workers._pool._processes)
    epochs = []
    for epoch in range(3):
        if epoch == 2:  # the bad file repaired: read again and fed, in both
            bad.write_bytes(good.read_bytes())
        log.start_epoch()
        batches = [flat(b) for b in iter(feed)]
        epochs.append({"batches": batches, "skipped": sorted((s.path, s.reason) for s in log.skipped)})
    log.start_epoch()
    feed.resume(1, 2)  # a resumed epoch: from batch 2 on
    resumed = [flat(b) for b in iter(feed)]
    feed.close()
    return {"alive": alive, "epochs": epochs, "resumed": resumed}

print(json.dumps({"serial": run(0), "workers": run(3)}))
"""


@pytest.fixture()
def bad_folder(image_folder: Path, tmp_path: Path) -> Path:
    """The session's images with a cut-short JPEG and an empty file among them."""
    root = tmp_path / "imgs"
    shutil.copytree(image_folder, root)
    data = sorted((root / "class_000").glob("*.jpg"))[1].read_bytes()
    (root / "class_000" / "cut.jpg").write_bytes(data[: len(data) // 2])
    (root / "class_000" / "empty.jpg").write_bytes(b"")
    return root


@pytest.mark.parametrize("mode", ["train", "val"])
def test_worker_processes_feed_what_the_feeds_thread_feeds(bad_folder: Path, mode: str) -> None:
    out = subprocess.run([sys.executable, "-c", _FEEDS, str(bad_folder), mode], capture_output=True, text=True,
                         timeout=300)
    assert out.returncode == 0, out.stderr[-3000:]
    got = json.loads(out.stdout.strip().splitlines()[-1])
    serial, workers = got["serial"], got["workers"]
    assert serial["alive"] == 0 and workers["alive"] == 3  # forked when the feed was made
    assert workers["epochs"] == serial["epochs"]
    assert workers["resumed"] == serial["resumed"] and workers["resumed"]
    skipped = [dict(e["skipped"]) for e in serial["epochs"]]
    cut, empty, fixed = (str(bad_folder / "class_000" / n) for n in ("cut.jpg", "empty.jpg", "fixed-later.jpg"))
    assert {cut, empty, fixed} <= set(skipped[0]) and set(skipped[1]) == set(skipped[0])
    assert fixed not in skipped[2] and {cut, empty} <= set(skipped[2])  # the repaired file is read again
    assert "truncated" in skipped[0][cut] and "empty" in skipped[0][empty]


def test_worker_processes_for_encoded_images_on_a_gpu(image_folder: Path, tmp_path: Path) -> None:
    loader = classification_loader(str(image_folder), backend="torch", device="cpu", train=True, batch_size=4,
                                   num_workers=4)
    assert feed_processes(loader.samples, loader.options, on_gpu=True) == 4
    assert feed_processes(loader.samples, loader.options, on_gpu=False) == 0  # DALI's CPU threads need the cores
    one = classification_loader(str(image_folder), backend="torch", device="cpu", train=True, batch_size=4, num_workers=1)
    assert feed_processes(one.samples, one.options, on_gpu=True) == 0
    from gpufeed.datasets.shards.convert import convert

    shards = convert(image_folder, tmp_path / "wds", format="webdataset", shard_size="1MB", progress=False).dst
    sharded = classification_loader(str(shards), backend="torch", device="cpu", train=True, batch_size=4,
                                   num_workers=4)
    assert feed_processes(sharded.samples, sharded.options, on_gpu=True) == 4
    from tests.datasets.test_raw_cache import write_raw

    raw = classification_loader(str(write_raw(image_folder, tmp_path / "raw", 64, "pad")), backend="torch",
                                device="cpu", train=True, batch_size=4, num_workers=4)
    assert feed_processes(raw.samples, raw.options, on_gpu=True) == 0  # decoded pixels: nothing to check


_SHARD_FEEDS = r"""
import json, sys
import numpy as np
from gpufeed.pipelines import classification_loader
from gpufeed.pipelines.feeds import FileFeed
from gpufeed.pipelines.skips import SkipLog

def run(processes):
    loader = classification_loader(sys.argv[1], backend="torch", device="cpu", train=True, batch_size=8, size=32,
                                   num_workers=2)
    feed = FileFeed(loader.samples, loader.plan, SkipLog("raise"), loader.options, processes=processes)
    got = [[np.asarray(x).tobytes().hex()[:64] if isinstance(col, list) else None for col in b for x in
            (col if isinstance(col, list) else [])] + [np.asarray(b[1]).tolist()] for _ in range(2) for b in iter(feed)]
    feed.close()
    return got

print(json.dumps(run(0) == run(2)))
"""


def test_worker_processes_read_shards_as_the_feeds_thread_does(image_folder: Path, tmp_path: Path) -> None:
    from gpufeed.datasets.shards.convert import convert

    shards = convert(image_folder, tmp_path / "wds", format="webdataset", shard_size="200KB", progress=False).dst
    out = subprocess.run([sys.executable, "-c", _SHARD_FEEDS, str(shards)], capture_output=True, text=True,
                         timeout=300)
    assert out.returncode == 0, out.stderr[-3000:]
    assert out.stdout.strip().splitlines()[-1] == "true"
