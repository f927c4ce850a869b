"""A review of how gpufeed installs and reports: `bench compare` on a folder of several runs,
a `bench all` run cut short, formats whose library is an optional extra, `--device cuda`
refused before the data is generated."""

from __future__ import annotations

import json
import multiprocessing as mp
import os
import shutil
import signal
import subprocess
import sys
import threading
import time
import types
from pathlib import Path

import pytest

from gpufeed.bench import report
from gpufeed.bench.results import read_results
from gpufeed.cli import main


def _meta(when: str) -> dict:
    return {"timestamp": when, "gpu": None, "cpu_count": 2, "cpu_model": "test CPU"}


def _images(dali: float, when: str) -> dict:
    return {"suite": "images-train", "metadata": _meta(when), "rows": [
        {"name": "torch-pil", "rate": 500.0, "ratio": 1.0}, {"name": "dali-cpu", "rate": 500.0 * dali, "ratio": dali}]}


def _formats(read: float, when: str) -> dict:
    return {"suite": "formats", "metadata": _meta(when),
            "ratios": [{"format": "parquet", "read_x": read, "write_x": 16.0}]}


def _write(folder: Path, name: str, doc: dict) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    (folder / name).write_text(json.dumps(doc))
    return folder / name


def _fake_suites(monkeypatch: pytest.MonkeyPatch, behaviour: dict) -> None:
    """`bench all` steps images-train and formats as fake suites: ``behaviour[step]`` is
    ``"ok"`` (writes a result, exit 0), ``"crash"`` (raises) or ``"interrupt"`` (Ctrl-C)."""
    docs = {"images-train": lambda when: _images(2.5, when), "formats": lambda when: _formats(5.0, when)}
    for step in docs:
        module = types.ModuleType(f"fake_{step}")

        def add_arguments(parser, step=step):
            parser.add_argument("--out")
            parser.add_argument("--device")

        def run(args, step=step):
            what = behaviour[step]
            if what == "crash":
                raise ValueError(f"{step}: no usable images")
            if what == "interrupt":
                raise KeyboardInterrupt
            when = time.strftime("%Y-%m-%dT%H:%M:%S+00:00", time.gmtime())
            stamp = time.strftime("%Y%m%dT%H%M%SZ", time.gmtime())
            _write(Path(args.out), f"{step}-cpu2-{stamp}.json", docs[step](when))
            return 0

        module.add_arguments, module.run = add_arguments, run
        monkeypatch.setitem(sys.modules, module.__name__, module)
        monkeypatch.setitem(report.STEPS, step, (module.__name__, [], []))


def test_compare_reads_a_bench_all_folder_as_its_run_and_a_suite_that_crashed_is_missing(tmp_path, monkeypatch,
                                                                                         capsys):
    """A crashed suite wrote no file, so the folder's newest file of it was an older run's,
    judged as new: exit 0, and no word of which files were compared."""
    old = tmp_path / "old"
    _write(old, "images-train-cpu2-20260101T000000Z.json", _images(2.5, "2026-01-01T00:00:00+00:00"))
    _write(old, "formats-cpu2-20260101T000000Z.json", _formats(5.0, "2026-01-01T00:00:00+00:00"))
    acc = tmp_path / "acc"  # the default --out, where runs pile up: an earlier run's files first
    earlier = _write(acc, "images-train-cpu2-20260102T000000Z.json", _images(2.5, "2026-01-02T00:00:00+00:00"))
    _fake_suites(monkeypatch, {"images-train": "crash", "formats": "ok"})
    assert report.run_all(acc, suites=["images-train", "formats"]) == 1
    capsys.readouterr()
    assert main(["bench", "compare", str(old), str(acc)]) == 1
    out = capsys.readouterr().out
    assert "New run: " in out and "the `bench all` run started" in out
    assert f"- images-train: {old / 'images-train-cpu2-20260101T000000Z.json'} → none: did not run in that run " \
           "(ValueError: images-train: no usable images)" in out
    assert str(earlier) not in out
    assert "1 suite(s) of the old run have no result in the new one (failed or not run): images-train" in out
    (formats,) = acc.glob("formats-*.json")
    assert f"- formats: {old / 'formats-cpu2-20260101T000000Z.json'} → {formats}" in out


def test_a_folder_of_loose_results_gives_the_newest_file_per_suite_and_says_which(tmp_path, capsys):
    old = _write(tmp_path / "old", "images-train-cpu2-20260101T000000Z.json", _images(2.5, "2026-01-01T00:00:00+00:00"))
    new = tmp_path / "new"
    _write(new, "images-train-cpu2-20260102T000000Z.json", _images(2.0, "2026-01-02T00:00:00+00:00"))
    newest = _write(new, "images-train-cpu2-20260103T000000Z.json", _images(2.6, "2026-01-03T00:00:00+00:00"))
    assert main(["bench", "compare", str(old), str(new)]) == 0
    out = capsys.readouterr().out
    assert f"New run: {new}: the newest file of each suite" in out
    assert f"- images-train: {old} → {newest}" in out


def test_results_written_after_a_bench_all_run_make_the_folder_loose_again(tmp_path, monkeypatch):
    """`make bench` (images only) into a folder that holds an older `bench all` run: its new
    images result is the one to judge, not the run's."""
    folder = tmp_path / "acc"
    _fake_suites(monkeypatch, {"images-train": "ok", "formats": "ok"})
    assert report.run_all(folder, suites=["images-train", "formats"]) == 0
    later = _write(folder, "images-train-cpu2-29990101T000000Z.json", _images(3.0, "2999-01-01T00:00:00+00:00"))
    run = read_results([folder])
    assert run.docs["images-train"]["_path"] == str(later) and "formats" in run.docs
    assert "the newest file of each suite (its newest `bench all` run" in run.how[0]


def test_an_unreadable_newest_file_is_never_replaced_by_an_older_one(tmp_path, capsys):
    """compare warned and went back to the suite's previous file, exit 0."""
    old = _write(tmp_path / "old", "images-train-a.json", _images(2.5, "2026-01-01T00:00:00+00:00"))
    new = tmp_path / "new"
    _write(new, "images-train-cpu2-20260102T000000Z.json", _images(2.5, "2026-01-02T00:00:00+00:00"))
    (new / "images-train-cpu2-20260103T000000Z.json").write_text('{"suite": "images-train", "rows": [')
    assert main(["bench", "compare", str(old), str(new)]) == 1
    out = capsys.readouterr().out
    assert "images-train-cpu2-20260103T000000Z.json is not readable JSON" in out
    assert "the older images-train-cpu2-20260102T000000Z.json is not used in its place" in out
    # A name without a time (copied, renamed) may be the newest: not replaced either.
    (new / "images-train-cpu2-20260103T000000Z.json").unlink()
    (new / "images-train-c.json").write_text('{"suite": "images-train", "rows": [')
    assert main(["bench", "compare", str(old), str(new)]) == 1
    assert "images-train-c.json is not readable JSON" in capsys.readouterr().out
    # An unreadable file older than the suite's newest is no stand-in question: left aside.
    (new / "images-train-c.json").unlink()
    (new / "images-train-cpu2-20250101T000000Z.json").write_text("{")
    assert main(["bench", "compare", str(old), str(new)]) == 0


def test_an_interrupted_bench_all_keeps_a_summary_and_exits_130_with_one_line(tmp_path, monkeypatch, capsys):
    """Ctrl-C: a KeyboardInterrupt traceback, and no summary of the suites that finished."""
    _fake_suites(monkeypatch, {"images-train": "ok", "formats": "interrupt"})
    out = tmp_path / "r"
    assert main(["bench", "all", "--suites", "images-train,formats", "--out", str(out)]) == 130
    err = capsys.readouterr().err
    assert err.strip().splitlines()[-1] == "gpufeed: interrupted" and "Traceback" not in err
    summary = (out / "summary.md").read_text()
    (images,) = out.glob("images-train-*.json")
    assert f"[json]({images.name})" in summary and "**Interrupted**: 1 of 2 suite(s) ran to their end" in summary
    assert "| formats | did not run | — | interrupted while it ran | — |" in summary
    (manifest,) = out.glob("bench-all-*.json")
    run = json.loads(manifest.read_text())
    assert run["state"] == "interrupted" and run["suites"]["formats"]["status"] == "interrupted"


def _sleep(seconds: float) -> dict:
    time.sleep(seconds)
    return {}


def test_ctrl_c_while_a_contender_runs_ends_its_process(monkeypatch):
    """The parent stopped at Ctrl-C and left the contender's process timing on."""
    from gpufeed.bench.harness import run_isolated

    timer = threading.Timer(4.0, os.kill, (os.getpid(), signal.SIGINT))
    timer.start()
    try:
        with pytest.raises(KeyboardInterrupt):
            run_isolated(_sleep, 120.0)
        assert not mp.active_children()
    finally:
        timer.cancel()
        for child in mp.active_children():
            child.kill()


def _format_in_this_process(target, source, fmt, *args):
    """The formats worker run here, with HDF5 failing as it does without PyTables."""
    if fmt == "hdf5":
        return {"error": "ImportError: Missing optional dependency 'pytables'.  Use pip or conda to install"}
    return target(source, fmt, *args)


def test_formats_without_the_hdf5_extra_say_so_and_pass(tmp_path, monkeypatch, capsys):
    """`pip install ".[dali-cpu]"` (no hdf5 extra): hdf5 ran, its row was a cut-off
    ImportError, and `bench formats` and `bench all` exited 1."""
    import gpufeed.machine as machine

    installed = machine.installed
    monkeypatch.setattr(machine, "installed", lambda module: module != "tables" and installed(module))
    monkeypatch.setattr("gpufeed.bench.formats.run_isolated", _format_in_this_process)
    common = ["--rows", "300", "--repeats", "1", "--warmup", "0", "--data-dir", str(tmp_path / "data")]
    assert main(["bench", "formats", *common, "--out", str(tmp_path / "r")]) == 0
    (result,) = (tmp_path / "r").glob("formats-*.json")
    doc = json.loads(result.read_text())
    hint = "PyTables is not installed: pip install -e '.[hdf5]' in gpufeed's clone"
    assert doc["skipped"] == {"hdf5": hint}
    assert "hdf5" not in {r["format"] for r in doc["ratios"]}
    assert f"Not run on this machine: `hdf5` ({hint})" in result.with_suffix(".md").read_text()
    capsys.readouterr()
    # Named, it is refused before anything runs, as cuDF is without a GPU.
    assert main(["bench", "formats", "--formats", "csv,hdf5", *common, "--out", str(tmp_path / "r2")]) == 2
    err = capsys.readouterr().err
    assert err.strip() == f"gpufeed: error: --formats hdf5: cannot run on this machine ({hint})"
    assert not (tmp_path / "r2").exists()


@pytest.mark.parametrize("suite", ["images", "storage"])
def test_cuda_without_a_gpu_is_refused_before_the_dataset_is_generated(suite, tmp_path, monkeypatch, capsys):
    """Both generated the 1,024-image default set (71 s) and only then refused."""
    monkeypatch.setattr("gpufeed.backends.cuda_available", lambda: False)
    monkeypatch.setattr("gpufeed.machine.cuda_available", lambda: False)

    def generated(*args, **kwargs):
        pytest.fail("the default dataset was generated before --device cuda was refused")

    monkeypatch.setattr("gpufeed.datasets.images.default_image_dataset", generated)
    assert main(["bench", suite, "--device", "cuda", "--out", str(tmp_path / "r")]) == 2
    err = capsys.readouterr().err
    assert "torch sees no CUDA GPU here" in err and len(err.strip().splitlines()) == 1


ROOT = Path(__file__).resolve().parents[2]


def _gpu_check(out: Path, python: str, *parts: str) -> subprocess.CompletedProcess:
    env = {**os.environ, "OUT": str(out), "PYTHON": python}
    return subprocess.run(["bash", str(ROOT / "bench" / "gpu_check.sh"), *parts], capture_output=True, text=True,
                          env=env, stdin=subprocess.DEVNULL, timeout=300)


@pytest.mark.skipif(shutil.which("bash") is None or shutil.which("tar") is None, reason="needs bash and tar")
def test_gpu_check_starts_each_run_afresh_and_never_bundles_the_last_bundle_or_the_smoke_data(tmp_path):
    """smoke.log was appended to (a rerun kept the last run's FAILED lines) and the bundle
    packed the previous bundle and 75 MB of converted smoke data, doubling every rerun."""
    fake = tmp_path / "python"  # a Python that says yes to everything: the script's own bookkeeping alone
    fake.write_text("#!/bin/sh\ncat > /dev/null\necho \"fake python $*\"\nexit 0\n")
    fake.chmod(0o755)
    out = tmp_path / "gpu-check-out"
    (out / "results").mkdir(parents=True)
    (out / "results" / "images-train-gpu8-old.json").write_text("{}")
    (out / "smoke.log").write_text("smoke: DALI GPU folder:train graph FAILED (exit 1)\n")
    (out / "smoke-data").mkdir()
    (out / "notes.txt").write_text("mine")
    for _ in range(2):
        run = _gpu_check(out, str(fake), "smoke", "formats")
        assert run.returncode == 0, run.stdout[-2000:] + run.stderr[-2000:]
    assert "FAILED" not in (out / "smoke.log").read_text()
    assert not (out / "results" / "images-train-gpu8-old.json").exists() and not (out / "smoke-data").exists()
    assert (out / "notes.txt").read_text() == "mine"  # not the script's: left alone
    listed = subprocess.run(["tar", "-tzf", str(out / "bundle.tar.gz")], capture_output=True, text=True).stdout
    assert "./smoke.log" in listed.splitlines() and "bundle.tar.gz" not in listed and "smoke-data" not in listed


@pytest.mark.skipif(shutil.which("bash") is None, reason="needs bash")
def test_gpu_check_without_a_gpu_stops_at_once_with_one_line(tmp_path):
    """It printed `nvidia-smi: command not found`, then failed every part on its own for minutes."""
    from gpufeed.machine import cuda_available

    if cuda_available():
        pytest.skip("there is a GPU here")
    out = tmp_path / "gpu-check-out"
    out.mkdir()
    (out / "smoke.log").write_text("the last run's log\n")
    run = _gpu_check(out, sys.executable)
    assert run.returncode == 2 and run.stdout == ""
    assert run.stderr.startswith("gpu_check: this check needs a CUDA GPU, and there is none to use here: torch ")
    assert len(run.stderr.strip().splitlines()) == 1
    assert (out / "smoke.log").read_text() == "the last run's log\n"  # nothing of the last run lost either
    nothing = tmp_path / "no-python"
    run = _gpu_check(out, str(nothing))
    assert run.returncode == 2 and "gpu_check: no Python at" in run.stderr


@pytest.mark.skipif(shutil.which("bash") is None or shutil.which("tar") is None, reason="needs bash and tar")
def test_gpu_lease_installs_then_packs_each_check_and_names_what_the_time_cannot_hold(tmp_path):
    """The lease's working call: a check that runs past the time left would take the other
    checks' results with it, so each is packed as it ends and the rest are named, not run."""
    stage = tmp_path / "stage" / "p07"
    stage.mkdir(parents=True)
    (stage / "part").write_text("wheels")
    (stage / "install.sh").write_text("echo installed from $HOME/stage/p07\n")
    no_torch = tmp_path / "python"  # gpu_check stops at once: a Python without torch (exit 3)
    no_torch.write_text("#!/bin/sh\ncat > /dev/null\necho no torch here\nexit 3\n")
    no_torch.chmod(0o755)
    out = tmp_path / "out"
    env = {**os.environ, "OUT": str(out), "HOME": str(tmp_path / "home"), "WORK": str(tmp_path / "work"),
           "PYTHON": str(no_torch)}
    (tmp_path / "work").mkdir()
    run = subprocess.run(["bash", str(ROOT / "bench" / "gpu_lease.sh"), f"{stage}/", "50", "marked", "stall"],
                         capture_output=True, text=True, env=env, cwd=ROOT, stdin=subprocess.DEVNULL, timeout=120)
    assert run.returncode == 0, run.stdout[-2000:] + run.stderr[-2000:]
    assert (tmp_path / "home" / "stage" / "p07").read_text() == "wheels"
    assert "installed from" in (out / "install.log").read_text()
    assert (out / "g1-marked.tgz").exists() and "== marked rc=" in run.stdout
    assert (out / "g2-stall.tgz").exists()  # marked stopped at once: time was left
    assert "no torch here" in (tmp_path / "work" / "g1" / "run.log").read_text()
    # 40 s in all: 25 left after the 15 kept back, under the 30 a check needs
    short = subprocess.run(["bash", str(ROOT / "bench" / "gpu_lease.sh"), str(stage), "40", "marked"],
                           capture_output=True, text=True, env={**env, "OUT": str(tmp_path / "short")}, cwd=ROOT,
                           stdin=subprocess.DEVNULL, timeout=120)
    assert "== marked: not run" in short.stdout and not (tmp_path / "short" / "g1-marked.tgz").exists()
