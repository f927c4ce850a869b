"""The DALI feed's worker processes: the same batches, skips and resumes as the feed's own
thread, and used only where they pay (encoded images on a GPU, or in DALI's CPU-only mode
from 8 workers up).

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
from tests.helpers import still_running


def _in_child(script: str, *args: str) -> object:
    """Run ``script`` in a fresh interpreter (no DALI imported by this one before a fork)
    and return the JSON of its last output line."""
    out = subprocess.run([sys.executable, "-c", script, *args], capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr[-3000:]
    return json.loads(out.stdout.strip().splitlines()[-1])

_FEEDS = r"""
import json, sys
from pathlib import Path
import numpy as np
from gpufeed.pipelines import classification_loader
from gpufeed.pipelines.feed_workers import FeedWorkers
from gpufeed.pipelines.feeds import FileFeed
from gpufeed.pipelines.skips import SkipLog

root, train = Path(sys.argv[1]), sys.argv[2] == "train"
bad = root / "class_000" / "fixed-later.jpg"
good = next(p for p in sorted((root / "class_000").glob("*.jpg"))
            if p.name not in ("cut.jpg", "empty.jpg", "fixed-later.jpg"))

import time, zlib
from gpufeed.pipelines import feed_workers

def flat(batch):
    return [[zlib.crc32(np.asarray(x).tobytes()) for x in col]
            if isinstance(col, list) else np.asarray(col).tolist() for col in batch]

def run(processes, slot_bytes=32 << 20):
    feed_workers.SLOT_BYTES = slot_bytes  # small: most images come back through the pipe
    bad.write_bytes(b"not a jpeg")
    loader = classification_loader(str(root), backend="torch", device="cpu", train=train, batch_size=8,
                                   size=32, num_workers=2, on_error="skip", last_batch="fill")
    log = SkipLog("skip")
    workers = FeedWorkers(loader.samples, loader.options, processes) if processes else None
    feed = FileFeed(loader.samples, loader.plan, log, loader.options, workers)
    alive = 0 if workers is None else len(workers._pool._processes)
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
    feed._drop_ahead()
    time.sleep(0.5)  # cancelled batches give their slots back from the pool's thread
    back = workers is None or len(workers._free) == processes + feed_workers.SPARE_SLOTS
    feed.close()
    return {"alive": alive, "epochs": epochs, "resumed": resumed, "slots_back": back}

print(json.dumps({"serial": run(0), "workers": run(3), "small_slots": run(3, 6000)}))
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
    got = _in_child(_FEEDS, str(bad_folder), mode)
    serial, workers, small = got["serial"], got["workers"], got["small_slots"]
    assert serial["alive"] == 0 and workers["alive"] == 3  # forked when the feed was made
    assert workers["epochs"] == serial["epochs"] == small["epochs"]  # every byte, through shared memory or not
    assert workers["resumed"] == serial["resumed"] == small["resumed"] and workers["resumed"]
    assert workers["slots_back"] and small["slots_back"]
    skipped = [dict(e["skipped"]) for e in serial["epochs"]]
    cut, empty, fixed = (str(bad_folder / "class_000" / n) for n in ("cut.jpg", "empty.jpg", "fixed-later.jpg"))
    assert {cut, empty, fixed} <= set(skipped[0]) and set(skipped[1]) == set(skipped[0])
    assert fixed not in skipped[2] and {cut, empty} <= set(skipped[2])  # the repaired file is read again
    assert "truncated" in skipped[0][cut] and "empty" in skipped[0][empty]


def test_worker_processes_for_encoded_images_on_a_gpu(image_folder: Path, tmp_path: Path) -> None:
    loader = classification_loader(str(image_folder), backend="torch", device="cpu", train=True, batch_size=4,
                                   num_workers=4)
    assert feed_processes(loader.samples, loader.options, on_gpu=True) == 4
    assert feed_processes(loader.samples, loader.options, on_gpu=False) == 0  # CPU-only mode, few workers: the thread
    many = classification_loader(str(image_folder), backend="torch", device="cpu", train=True, batch_size=4,
                                 num_workers=8)
    assert feed_processes(many.samples, many.options, on_gpu=False) == 8  # 1.48x the thread on 16 cores
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
from gpufeed.pipelines.feed_workers import FeedWorkers
from gpufeed.pipelines.feeds import FileFeed
from gpufeed.pipelines.skips import SkipLog

def run(processes):
    loader = classification_loader(sys.argv[1], backend="torch", device="cpu", train=True, batch_size=8, size=32,
                                   num_workers=2)
    workers = FeedWorkers(loader.samples, loader.options, processes) if processes else None
    feed = FileFeed(loader.samples, loader.plan, SkipLog("raise"), loader.options, workers)
    got = [[np.asarray(x).tobytes().hex()[:64] if isinstance(col, list) else None for col in b for x in
            (col if isinstance(col, list) else [])] + [np.asarray(b[1]).tolist()] for _ in range(2) for b in iter(feed)]
    feed.close()
    return got

print(json.dumps(run(0) == run(2)))
"""


def test_worker_processes_read_shards_as_the_feeds_thread_does(image_folder: Path, tmp_path: Path) -> None:
    from gpufeed.datasets.shards.convert import convert

    shards = convert(image_folder, tmp_path / "wds", format="webdataset", shard_size="200KB", progress=False).dst
    assert _in_child(_SHARD_FEEDS, str(shards)) is True


_KILLED = r"""
import json, os, signal, sys, time, warnings
import numpy as np
from gpufeed.pipelines import classification_loader
from gpufeed.pipelines.feed_workers import FeedWorkers
from gpufeed.pipelines.feeds import FileFeed
from gpufeed.pipelines.skips import SkipLog

loader = classification_loader(sys.argv[1], backend="torch", device="cpu", train=True, batch_size=4, size=32,
                               num_workers=2)

def flat(b):
    return [np.asarray(x).tobytes().hex()[:64] for col in b if isinstance(col, list) for x in col]

serial = [flat(b) for b in iter(FileFeed(loader.samples, loader.plan, SkipLog("raise"), loader.options))]
workers = FeedWorkers(loader.samples, loader.options, 2)
ignored = workers._pool.submit(signal.getsignal, signal.SIGINT).result() == signal.SIG_IGN
feed = FileFeed(loader.samples, loader.plan, SkipLog("raise"), loader.options, workers)
got = []
with warnings.catch_warnings(record=True) as caught:
    warnings.simplefilter("always")
    for k, b in enumerate(iter(feed)):
        got.append(flat(b))
        if k == 1:
            pid, process = next(iter(workers._pool._processes.items()))
            os.kill(pid, signal.SIGKILL)
            process.join(30)
            for _ in range(300):  # the pool notices on its own thread: wait, so the test does not race it
                if workers._pool._broken:
                    break
                time.sleep(0.05)
print(json.dumps({"same": got == serial, "ignored": ignored, "in_thread": feed.workers is None,
                  "warned": [str(w.message) for w in caught if "worker processes stopped" in str(w.message)]}))
"""


def test_a_killed_worker_leaves_the_feed_to_its_own_thread(image_folder: Path) -> None:
    got = _in_child(_KILLED, str(image_folder))
    assert got["same"] and got["in_thread"] and len(got["warned"]) == 1  # every batch, in order, one warning
    assert got["ignored"]  # Ctrl-C reaches the whole process group: the workers leave it to the loop


_ORPHAN = r"""
import sys, time
from gpufeed.pipelines import classification_loader
from gpufeed.pipelines.feed_workers import FeedWorkers

loader = classification_loader(sys.argv[1], backend="torch", device="cpu", train=True, batch_size=4, num_workers=2)
workers = FeedWorkers(loader.samples, loader.options, 2)
print(" ".join(str(p) for p in workers._pool._processes), flush=True)
time.sleep(120)
"""


def test_workers_die_with_the_training_process(image_folder: Path) -> None:
    import signal

    child = subprocess.Popen([sys.executable, "-c", _ORPHAN, str(image_folder)], stdout=subprocess.PIPE, text=True)
    try:
        pids = [int(p) for p in child.stdout.readline().split()]
        assert len(pids) == 2
    finally:
        child.send_signal(signal.SIGKILL)  # the parent alone, as the OOM killer does
        child.wait(timeout=30)
    assert not still_running(pids, timeout=20)


_CLOSE = r"""
import json, sys
import gpufeed.pipelines.dali_loader as dl
from gpufeed.pipelines import classification_loader

dl.feed_processes = lambda samples, options, on_gpu: 2  # as on a GPU (DALI's CPU-only mode here)
loader = classification_loader(sys.argv[1], backend="dali", device="cpu", train=True, batch_size=8, size=32,
                               num_workers=2)
before = loader._workers  # forked when the loader is made, before any pipeline
n = sum(len(y) for _, y in loader)
first = loader._workers
iterator = loader.dali_iterator()
shared = iterator.gpufeed_feed.workers is first
pids = list(first._pool._processes)
with loader:
    m = sum(len(y) for _, y in loader)
closed = first.closed and loader._workers is None
again = sum(len(y) for _, y in loader)  # a fresh pool after close
# The same images as the feed's own thread gives, byte for byte (DALI copies each batch
# out of the shared memory before its slot is written again).
import torch
pooled = [x.clone() for x, _ in loader]
dl.feed_processes = lambda samples, options, on_gpu: 0
alone = classification_loader(sys.argv[1], backend="dali", device="cpu", train=True, batch_size=8, size=32,
                              num_workers=2)
alone.set_epoch(loader.epoch)
same = all(torch.equal(a, b) for a, (b, _) in zip(pooled, alone, strict=True))
print(json.dumps({"same": same, "before": before is first and before is not None, "n": n, "m": m, "again": again, "shared": shared, "closed": closed,
                  "fresh": loader._workers is not None and loader._workers is not first, "pids": len(pids)}))
"""


def test_the_loader_forks_its_workers_once_shares_them_and_closes_them(image_folder: Path) -> None:
    pytest.importorskip("nvidia.dali")
    got = _in_child(_CLOSE, str(image_folder))
    assert got["before"] and got["shared"] and got["closed"] and got["fresh"] and got["pids"] == 2 and got["same"]
    assert got["n"] == got["m"] == got["again"] == 40


def test_the_torch_loader_closes_its_workers_too(image_folder: Path) -> None:
    with classification_loader(str(image_folder), backend="torch", device="cpu", train=True, batch_size=8, size=32,
                               num_workers=2) as loader:
        assert sum(len(y) for _, y in loader) == 40
        workers = list(loader._loader._iterator._workers)
        assert all(w.is_alive() for w in workers)
    assert loader._loader._iterator is None and not any(w.is_alive() for w in workers)
    assert sum(len(y) for _, y in loader) == 40  # iterating again starts them afresh
    loader.close()


_SLOTS = r"""
import gc, json, sys, threading, time
from gpufeed.pipelines import classification_loader
from gpufeed.pipelines.feed_workers import SPARE_SLOTS, FeedWorkers
from gpufeed.pipelines.feeds import FileFeed
from gpufeed.pipelines.skips import SkipLog

loader = classification_loader(sys.argv[1], backend="torch", device="cpu", train=True, batch_size=4, size=32,
                               num_workers=2)
made = {}
maker = threading.Thread(target=lambda: made.setdefault("w", FeedWorkers(loader.samples, loader.options, 2)))
maker.start(); maker.join()
workers = made["w"]  # forked from a thread that has ended since: the workers must live on
total = 2 + SPARE_SLOTS

def taken_then_dropped():
    feed = FileFeed(loader.samples, loader.plan, SkipLog("skip"), loader.options, workers)
    it = iter(feed)
    next(it); next(it); next(it)  # then left, as an iterator abandoned with `break`
    return len(workers._free)

held = taken_then_dropped()
gc.collect(); time.sleep(0.5)  # cancelled batches give their slots back from the pool's thread
back = len(workers._free)
workers.release(0); workers.release(0)  # a slot not lent (or given back twice) is ignored
print(json.dumps({"held": held, "back": back, "total": total, "after_bogus": len(workers._free)}))
"""


def test_slots_come_back_from_a_dropped_feed_and_workers_outlive_their_forking_thread(image_folder: Path) -> None:
    got = _in_child(_SLOTS, str(image_folder))
    assert got["held"] < got["total"] and got["back"] == got["total"] and got["after_bogus"] == got["total"]


_ON_GPU = r"""
import json, sys, torch
import gpufeed.pipelines.dali_loader as dl
from gpufeed.pipelines import classification_loader

out = {}
for mode in ("train", "val"):
    pooled = classification_loader(sys.argv[1], backend="dali", device="cuda", train=mode == "train", batch_size=8,
                                   size=32, num_workers=2)
    forked = pooled._workers is not None  # on a GPU the feed's workers are the default
    a = [x.cpu() for x, _ in pooled]
    epoch = pooled.epoch
    pooled.close()
    dl.feed_processes = lambda samples, options, on_gpu: 0
    alone = classification_loader(sys.argv[1], backend="dali", device="cuda", train=mode == "train", batch_size=8,
                                  size=32, num_workers=2)
    alone.set_epoch(epoch)
    b = [x.cpu() for x, _ in alone]
    out[mode] = {"forked": forked, "same": len(a) == len(b) and all(torch.equal(x, y) for x, y in zip(a, b))}
    dl.feed_processes = __import__("gpufeed.pipelines.feed_workers", fromlist=["x"]).feed_processes
print(json.dumps(out))
"""


@pytest.mark.gpu
def test_on_a_gpu_the_feed_workers_give_the_images_the_feeds_thread_gives(image_folder: Path) -> None:
    pytest.importorskip("nvidia.dali")
    got = _in_child(_ON_GPU, str(image_folder))
    assert got == {"train": {"forked": True, "same": True}, "val": {"forked": True, "same": True}}
