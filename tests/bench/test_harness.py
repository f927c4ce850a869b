"""Rounds: contenders pooled over fresh processes, compared round by round."""

from __future__ import annotations

import shutil
import subprocess
import sys

import pytest

from gpufeed.bench import harness
from gpufeed.bench.harness import measure, measure_for, pool_rounds, round_ratios, spread


def _round(*seconds: float, **extra: object) -> dict:
    rates = sorted(10 / s for s in seconds)
    return {"name": "x", "seconds": list(seconds), "work": 10.0, "rate": rates[len(rates) // 2], **extra}


def test_pooled_rounds_take_the_median_of_every_epoch_and_keep_each_rounds_rate():
    row = pool_rounds([_round(1.0, 1.0, 1.0, check={"round": 1}), _round(2.0, 2.0, 3.0, check={"round": 2})])
    assert row["seconds"] == [1.0, 1.0, 1.0, 2.0, 2.0, 3.0]
    assert row["median_s"] == pytest.approx(1.5) and row["rate"] == pytest.approx(10 / 1.5)
    assert row["rate_min"] == pytest.approx(10 / 3) and row["rate_max"] == pytest.approx(10.0)
    assert row["rounds"] == 2 and row["round_rates"] == [10.0, 5.0]
    assert row["check"] == {"round": 2}  # the last round's checks


def test_a_failed_round_fails_the_contender():
    row = pool_rounds([_round(1.0), {"name": "x", "error": "worker died"}, _round(1.0)])
    assert row == {"name": "x", "error": "worker died"}


def test_ratios_pair_the_rounds_measured_together():
    kit = pool_rounds([_round(1.0), _round(2.0)])      # rates 10, 5: the machine slowed in round 2
    base = pool_rounds([_round(4.0), _round(8.0)])     # rates 2.5, 1.25: slowed alike
    assert round_ratios(kit, base) == [4.0, 4.0]
    assert spread(round_ratios(kit, base)) == "4.00"
    assert spread([0.81, 1.02]) == "0.81–1.02"
    # A row from before rounds (no round_rates) still compares by its rate.
    assert round_ratios({"rate": 6.0}, {"rate": 2.0}) == [3.0]


class _Clock:
    """A fake perf_counter: each call of the timed work advances it by ``step`` seconds."""

    def __init__(self, step: float) -> None:
        self.now, self.step, self.calls = 0.0, step, 0

    def perf_counter(self) -> float:
        return self.now

    def work(self) -> float:
        self.calls += 1
        self.now += self.step
        return 7.0


def test_short_work_is_timed_until_min_seconds_and_long_work_the_given_repeats(monkeypatch):
    fast = _Clock(0.01)
    monkeypatch.setattr(harness.time, "perf_counter", fast.perf_counter)
    timing = measure(fast.work, warmup=1, repeats=3, min_seconds=0.25)
    # 1 warm-up, then 3 repeats would be 0.03 s: timing goes on to 0.25 s (float sums: 25 or 26)
    assert len(timing.seconds) in (25, 26) and fast.calls == 1 + len(timing.seconds)
    assert timing.work == 7.0
    slow = _Clock(1.0)
    monkeypatch.setattr(harness.time, "perf_counter", slow.perf_counter)
    assert len(measure(slow.work, warmup=0, repeats=3, min_seconds=0.25).seconds) == 3
    assert len(measure(fast.work, warmup=0, repeats=2, min_seconds=10.0, max_repeats=4).seconds) == 4
    assert len(measure_for(slow.work, 2.5, warmup=0).seconds) == 3  # a budget: the last call runs past it
    with pytest.raises(ValueError, match="min_seconds"):
        measure(fast.work, min_seconds=-1.0)


def test_timing_work_that_never_imported_torch_does_not_import_it():
    # A table benchmark with --warmup 0: its first timed call used to import torch (seconds).
    code = ("import sys\nfrom gpufeed.bench.harness import measure\n"
            "measure(lambda: 1.0, warmup=0, repeats=2)\nprint('torch' in sys.modules)\n")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0 and out.stdout.strip() == "False", out.stdout + out.stderr


def test_results_name_the_commit_a_container_build_recorded_where_there_is_no_git(monkeypatch):
    from gpufeed.bench import provenance

    def no_git(*args, **kwargs):
        raise FileNotFoundError("git")

    monkeypatch.setattr(provenance.subprocess, "run", no_git)
    monkeypatch.setenv("GPUFEED_GIT_COMMIT", "0123abc")
    meta = harness.machine_metadata()
    assert meta["git_commit"] == "0123abc" and "GPUFEED_GIT_COMMIT" in meta["git_commit_note"]
    monkeypatch.delenv("GPUFEED_GIT_COMMIT")
    meta = harness.machine_metadata()
    assert meta["git_commit"] is None and "GPUFEED_GIT_COMMIT is not set" in meta["git_commit_note"]
    assert meta["gpufeed"]


def _git(cwd, *args):
    subprocess.run(["git", "-c", "user.name=t", "-c", "user.email=t@example.com", *args], cwd=cwd, check=True,
                   capture_output=True, timeout=60)


def _repo(root, pyproject_name):
    """A git work tree holding a pyproject.toml naming ``pyproject_name``, with one commit."""
    root.mkdir(parents=True)
    _git(root, "init", "-q")
    (root / "pyproject.toml").write_text(f'[build-system]\nrequires = ["x"]\n\n[project]\nname = "{pyproject_name}"\n')
    _git(root, "add", "pyproject.toml")
    _git(root, "commit", "-q", "-m", "one")
    head = subprocess.run(["git", "rev-parse", "HEAD"], cwd=root, capture_output=True, text=True).stdout.strip()
    return head


@pytest.mark.skipif(shutil.which("git") is None, reason="needs git")
def test_a_wheel_installed_inside_the_users_repo_never_records_the_users_commit(tmp_path, monkeypatch):
    """A non-editable install in myproject/.venv recorded myproject's commit (and +dirty for
    its changes) in every result, over the GPUFEED_GIT_COMMIT the build recorded."""
    from gpufeed.bench.provenance import source_commit

    users = _repo(tmp_path / "myproject", "myproject")
    installed = tmp_path / "myproject" / ".venv" / "lib" / "python3" / "site-packages" / "gpufeed"
    installed.mkdir(parents=True)
    (tmp_path / "myproject" / "notes.txt").write_text("changed")  # the user's work in progress
    _git(tmp_path / "myproject", "add", "notes.txt")
    monkeypatch.setenv("GPUFEED_GIT_COMMIT", "0123abc")
    assert source_commit(installed).commit == "0123abc"
    monkeypatch.delenv("GPUFEED_GIT_COMMIT")
    found = source_commit(installed)
    assert found.commit is None and users not in found.text() and "not gpufeed's git checkout" in found.note
    # A gpufeed/ folder at the top of a tree that is another project is not gpufeed's source either.
    (tmp_path / "myproject" / "gpufeed").mkdir()
    assert source_commit(tmp_path / "myproject" / "gpufeed").commit is None


@pytest.mark.skipif(shutil.which("git") is None, reason="needs git")
def test_gpufeeds_own_checkout_gives_its_commit_and_dirty_state(tmp_path, monkeypatch):
    from gpufeed.bench.provenance import source_commit

    head = _repo(tmp_path / "clone", "gpufeed")
    (tmp_path / "clone" / "gpufeed").mkdir()
    monkeypatch.setenv("GPUFEED_GIT_COMMIT", "0123abc")  # a checkout knows better than a recorded value
    assert source_commit(tmp_path / "clone" / "gpufeed").commit == head
    (tmp_path / "clone" / "pyproject.toml").write_text('[project]\nname = "gpufeed"\nversion = "0.2"\n')
    found = source_commit(tmp_path / "clone" / "gpufeed")
    assert found.commit == f"{head}+dirty" and found.note == "gpufeed's git checkout"


def _sleep_and_say_pid(path: str) -> dict:
    import os
    import time

    with open(path, "w") as fh:
        fh.write(str(os.getpid()))
    time.sleep(60)
    return {}


def test_a_contender_dies_with_the_suite_that_started_it(tmp_path):
    """A suite killed mid-run (kill, a CI timeout, the OOM killer) left its contender
    process timing on for minutes, loading the machine under the next run."""
    import os
    import signal
    import subprocess
    import sys
    import time

    if not sys.platform.startswith("linux"):
        pytest.skip("PR_SET_PDEATHSIG is Linux's")
    said = tmp_path / "pid"
    script = ("from gpufeed.bench.harness import run_isolated\n"
              "from tests.bench.test_harness import _sleep_and_say_pid\n"
              f"run_isolated(_sleep_and_say_pid, {str(said)!r})\n")
    suite = subprocess.Popen([sys.executable, "-c", script], cwd=os.getcwd())
    try:
        for _ in range(600):
            if said.exists() and said.read_text():
                break
            time.sleep(0.1)
        child = int(said.read_text())
        suite.send_signal(signal.SIGKILL)
        suite.wait(10)
        for _ in range(100):
            try:
                os.kill(child, 0)
            except ProcessLookupError:
                break
            time.sleep(0.1)
        else:
            os.kill(child, signal.SIGKILL)
            pytest.fail("the contender outlived its suite")
    finally:
        suite.kill()
