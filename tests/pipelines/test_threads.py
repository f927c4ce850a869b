"""The background thread that runs in-process loaders ahead of the training step."""

from __future__ import annotations

import threading
import time

import pytest

from gpufeed.pipelines.threads import prefetched


def test_results_come_in_order_and_all_of_them():
    assert list(prefetched(range(50), lambda i: i * i, depth=3)) == [i * i for i in range(50)]


def test_it_runs_ahead_of_the_consumer_by_at_most_depth():
    made = []
    it = prefetched(range(20), lambda i: made.append(i) or i, depth=2)
    assert next(it) == 0
    deadline = time.monotonic() + 5
    while len(made) < 4 and time.monotonic() < deadline:
        time.sleep(0.01)
    time.sleep(0.1)
    # one taken, two queued, one made and waiting for room: never the whole range
    assert 3 <= len(made) <= 4
    it.close()


def test_an_error_is_raised_in_the_consumer_after_the_results_before_it():
    def make(i):
        if i == 3:
            raise ValueError("bad item 3")
        return i

    it = prefetched(range(10), make, depth=2)
    assert [next(it) for _ in range(3)] == [0, 1, 2]
    with pytest.raises(ValueError, match="bad item 3"):
        next(it)


def test_closing_early_stops_the_thread():
    before = threading.active_count()
    it = prefetched(iter(range(10**9)), lambda i: i, depth=2)
    assert next(it) == 0
    it.close()
    assert threading.active_count() == before
    with pytest.raises(ValueError, match="depth"):
        next(prefetched([1], lambda i: i, depth=0))


def test_the_forkserver_preloads_torch_and_keeps_the_users_modules(monkeypatch):
    # Next to DALI the torch backend's workers come from the forkserver; preloaded there,
    # torch is imported once instead of once per worker of every loader.
    import multiprocessing.forkserver as forkserver

    from gpufeed.pipelines.torch_loader import _preload_forkserver

    monkeypatch.setattr(forkserver._forkserver, "_preload_modules", ["__main__", "my_app.models"])
    _preload_forkserver()
    preload = forkserver._forkserver._preload_modules
    assert preload[:2] == ["__main__", "my_app.models"] and {"torch", "gpufeed.pipelines.torch_loader"} <= set(preload)
    _preload_forkserver()  # a second loader adds nothing twice
    assert forkserver._forkserver._preload_modules == preload


def test_workers_fork_unless_dali_is_loaded(monkeypatch):
    # Workers forked beside DALI's threads have crashed; the torch loader and convert
    # both ask here how to start theirs.
    import sys

    from gpufeed.machine import worker_start_method

    monkeypatch.delitem(sys.modules, "nvidia.dali", raising=False)
    assert worker_start_method() == "fork"
    monkeypatch.setitem(sys.modules, "nvidia.dali", object())
    assert worker_start_method() == "forkserver"
