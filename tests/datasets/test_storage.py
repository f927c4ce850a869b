"""Storage: reads of shard byte ranges from many threads, with handles evicted and
closed under them, always return the right bytes."""

from __future__ import annotations

import pickle
from concurrent.futures import ThreadPoolExecutor

import numpy as np
import pytest

from gpufeed.datasets.storage import SimulatedRemote, Storage


def test_concurrent_reads_survive_eviction_and_close(tmp_path):
    rng = np.random.default_rng(0)
    files = []
    for k in range(6):
        path = tmp_path / f"shard-{k}.bin"
        path.write_bytes(rng.integers(0, 256, 50_000, dtype=np.uint8).tobytes())
        files.append(str(path))
    contents = {p: np.fromfile(p, dtype=np.uint8) for p in files}
    storage = Storage(max_open=2)  # fewer handles than files: eviction all the time

    def read(k: int) -> bool:
        path = files[k % len(files)]
        offset = (k * 997) % 40_000
        if k % 50 == 0:
            storage.close()  # another thread closes every handle mid-flight
        got = storage.read_at(path, offset, 5_000)
        return np.array_equal(got, contents[path][offset: offset + 5_000])

    with ThreadPoolExecutor(8) as pool:
        assert all(pool.map(read, range(2_000)))
    storage.close()


def test_a_pickled_storage_carries_no_handles_and_counts_opens(tmp_path):
    path = tmp_path / "a.bin"
    path.write_bytes(bytes(range(256)) * 4)
    remote = SimulatedRemote(open_latency_ms=0.0)
    remote.read_at(str(path), 0, 10)
    remote.read_at(str(path), 10, 10)
    assert remote.opens == 1 and remote.bytes == 20  # one open per file, kept
    copy = pickle.loads(pickle.dumps(remote))
    assert copy.read_at(str(path), 256, 4).tolist() == [0, 1, 2, 3]
    remote.read_file(str(path))
    assert remote.opens == 2  # a whole-file read opens each time


def test_the_simulated_store_charges_every_open_and_every_byte(tmp_path, monkeypatch):
    import gpufeed.datasets.storage as storage_module

    waits: list[float] = []
    monkeypatch.setattr(storage_module.time, "sleep", waits.append)  # the waits, recorded instead of slept
    paths = []
    for k in range(3):
        paths.append(tmp_path / f"{k}.jpg")
        paths[-1].write_bytes(bytes(1000 * (k + 1)))
    remote = SimulatedRemote(open_latency_ms=20, bandwidth_mb_s=2)
    for path in paths:
        assert len(remote.read_file(str(path))) == path.stat().st_size
    opens = [w for w in waits if w == 0.02]
    transfers = [w for w in waits if w != 0.02]
    assert len(opens) == 3 == remote.opens  # 20 ms per file open
    assert sum(transfers) == pytest.approx(sum(p.stat().st_size for p in paths) / 2e6)  # 6000 bytes at 2 MB/s
