"""Storage: reads of shard byte ranges from many threads, with handles evicted and
closed under them, always return the right bytes."""

from __future__ import annotations

import pickle
from concurrent.futures import ThreadPoolExecutor

import numpy as np

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
