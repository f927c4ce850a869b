"""A new user's review of the benchmark commands: pipelines this machine cannot run, why a
comparison found nothing, tune results compared on what the kit delivers, progress on
stderr, the augment suite's memory column, and plurals."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from gpufeed.bench.harness import Timing
from gpufeed.cli import main


def _write(folder: Path, name: str, doc: dict) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    (folder / name).write_text(json.dumps(doc))
    return folder


def _no_gpu(monkeypatch: pytest.MonkeyPatch, dali: bool = True) -> None:
    monkeypatch.setattr("gpufeed.machine.cuda_available", lambda: False)
    monkeypatch.setattr("gpufeed.backends.dali_installed", lambda: dali)


def test_only_a_pipeline_this_machine_cannot_run_is_refused_in_one_line(image_folder, tmp_path, monkeypatch, capsys):
    """`--only dali-gpu` without a GPU ran the baseline alone, wrote it and exited 0."""
    _no_gpu(monkeypatch)
    out = tmp_path / "out"
    assert main(["bench", "images", "--data", str(image_folder), "--only", "dali-gpu", "--out", str(out)]) == 2
    err = capsys.readouterr().err
    assert "--only dali-gpu: cannot run on this machine (no CUDA GPU)" in err
    assert len(err.strip().splitlines()) == 1 and "Traceback" not in err
    assert not out.exists() or not list(out.iterdir())  # no baseline-only result to be compared later
    _no_gpu(monkeypatch, dali=False)
    assert main(["bench", "images", "--data", str(image_folder), "--only", "dali-cpu", "torch-gpu",
                 "--out", str(out)]) == 2
    err = capsys.readouterr().err
    assert "--only dali-cpu: cannot run on this machine (DALI is not installed" in err
    assert "--only torch-gpu: cannot run on this machine (no CUDA GPU)" in err


def test_pipelines_not_run_here_are_recorded_and_named_by_compare(image_folder, tmp_path, monkeypatch, capsys):
    _no_gpu(monkeypatch)
    ran = []

    def fake_contender(target, name, *args, **kwargs):  # no timing: what the report says about the rest
        ran.append(name)
        return {"name": name, **Timing([0.1], 40.0).as_dict(), "check": {"samples": 40}}

    monkeypatch.setattr("gpufeed.bench.images.run_isolated", fake_contender)
    new = tmp_path / "new"
    main(["bench", "images", "--data", str(image_folder), "--rounds", "1", "--out", str(new)])
    assert "dali-gpu" not in ran and "torch-gpu" not in ran
    (result,) = new.glob("images-train-*.json")
    assert json.loads(result.read_text())["skipped"] == {"dali-gpu": "no CUDA GPU", "torch-gpu": "no CUDA GPU"}
    assert "Not run on this machine: `dali-gpu` (no CUDA GPU); `torch-gpu` (no CUDA GPU)" \
        in result.with_suffix(".md").read_text()
    capsys.readouterr()
    old_doc = json.loads(result.read_text())
    old_doc["rows"].append({"name": "dali-gpu", "rate": 4000.0, "ratio": 10.0})
    old_doc["metadata"]["timestamp"] = "2000-01-01T00:00:00+00:00"
    old = _write(tmp_path / "old", "images-train-old.json", old_doc)
    assert main(["bench", "compare", str(old), str(new)]) == 1
    assert "images-train dali-gpu (not run on that machine: no CUDA GPU)" in capsys.readouterr().out


def _images(rows: dict[str, float], when: str, **extra: object) -> dict:
    return {"suite": "images-train", "metadata": {"timestamp": when}, **extra, "rows": [
        {"name": "torch-pil", "rate": 500.0, "ratio": 1.0},
        *({"name": n, "rate": 500.0 * r, "ratio": r} for n, r in rows.items())]}


def test_nothing_to_compare_says_why(tmp_path, capsys):
    """A baseline-only run, or a 10k-row run against 1M rows, printed "Nothing to compare" alone."""
    old = _write(tmp_path / "old", "images-train-a.json", _images({"dali-cpu": 2.5, "torch-cpu": 1.8}, "2026-01-01"))
    new = _write(tmp_path / "new", "images-train-b.json",
                 _images({}, "2026-01-02", skipped={"dali-gpu": "no CUDA GPU"}))
    assert main(["bench", "compare", str(old), str(new)]) == 1
    out = capsys.readouterr().out
    assert "Nothing to compare" in out
    assert ("- images-train: the new run has no pipeline with a ratio (only in the old run: dali-cpu, torch-cpu); "
            "the new run did not run dali-gpu (no CUDA GPU)") in out

    def tabular(rows: int, when: str) -> dict:
        return {"suite": "tabular", "metadata": {"timestamp": when}, "config": {"rows": str(rows)},
                "recipe": {"sensor": {str(rows): {"pandas-baseline": {"rate": 1.0}, "kit-polars": {"rate": 3.0}}}}}

    old = _write(tmp_path / "old-t", "tabular-a.json", tabular(1_000_000, "2026-01-01"))
    new = _write(tmp_path / "new-t", "tabular-b.json", tabular(10_000, "2026-01-02"))
    assert main(["bench", "compare", str(old), str(new)]) == 1
    out = capsys.readouterr().out
    assert ("- tabular: no pipeline or row in common (only in the old run: recipe sensor 1,000,000: kit-polars; "
            "only in the new run: recipe sensor 10,000: kit-polars); the runs' settings differ: "
            "rows 1000000 → 10000") in out


def _tune(gain: float, kit: dict[str, float], when: str, *, start_batch: int = 64,
          values: dict | None = None) -> dict:
    ratios = {"best DataLoader vs start": gain, **{f"kit-{k} vs best DataLoader": v for k, v in kit.items()}}
    return {"suite": "tune-train", "metadata": {"timestamp": when}, "best_rate": 900.0, "start_rate": 900.0 / gain,
            "setup": {"data": "/d", "mode": "train", "size": 224, "device": "cpu", "cores": 2,
                      "start": {"num_workers": 2, "batch_size": start_batch, "pin_memory": False},
                      "values": values or {"num_workers": [0, 1, 2, 4], "batch_size": [32, 64, 128]}},
            "ratio_to_baseline": ratios}


def test_a_smaller_tuning_gain_is_shown_not_judged_and_other_sweeps_are_named(tmp_path, capsys):
    """`best DataLoader vs start 1.19 → 1.00` was flagged slower and failed the comparison."""
    old = _write(tmp_path / "old", "tune-train-a.json", _tune(1.19, {"torch": 1.8, "dali": 2.4}, "2026-01-01"))
    new = _write(tmp_path / "new", "tune-train-b.json", _tune(1.00, {"torch": 1.8, "dali": 2.4}, "2026-01-02"))
    assert main(["bench", "compare", str(old), str(new)]) == 0
    out = capsys.readouterr().out
    assert "| tune-train | best DataLoader vs start | 1.19 | 1.00 | -16.0 % | info (not judged) |" in out
    assert "| tune-train | best DataLoader images/s | 900.00 | 900.00 | +0.0 % | info (not judged) |" in out
    assert "slower" not in out and "different settings" not in out
    # What the kit delivers against the best configuration is judged.
    worse = _write(tmp_path / "worse", "tune-train-c.json", _tune(1.19, {"torch": 1.8, "dali": 1.9}, "2026-01-03"))
    assert main(["bench", "compare", str(old), str(worse)]) == 1
    assert "| tune-train | kit-dali vs best DataLoader | 2.40 | 1.90 | -20.8 % | **▼ slower** |" \
        in capsys.readouterr().out
    # Another starting point and other knobs: said below the table.
    other = _write(tmp_path / "other", "tune-train-d.json", _tune(
        1.19, {"torch": 1.8, "dali": 2.4}, "2026-01-04", start_batch=32, values={"pin_memory": [False, True]}))
    assert main(["bench", "compare", str(old), str(other)]) == 0
    assert ("different settings (ratios may differ for that reason): tune-train: start.batch_size 64 → 32, "
            "values: num_workers, batch_size → pin_memory") in capsys.readouterr().out


def test_bench_stalls_reports_progress_on_stderr_with_its_suite(image_folder, tmp_path, monkeypatch, capsys):
    """`  training tiny fed by the pil loader ...` went to stdout: `> report.md` kept it."""

    def fake_train(target, name, root, **measure):
        return {"name": name, "description": name, "stall_pct": 10.0, "samples_per_s": 100.0, "wait_s": 0.1,
                "step_s": 0.9, "steps": 1, "clock": "wall"} if name == "pil" else {"error": "RuntimeError: boom\n"}

    monkeypatch.setattr("gpufeed.bench.stalls.run_isolated", fake_train)
    assert main(["bench", "stalls", "--data", str(image_folder), "--loaders", "pil,torch", "--steps", "1",
                 "--out", str(tmp_path)]) == 1
    captured = capsys.readouterr()
    assert "[stalls] training tiny fed by the pil loader ..." in captured.err
    assert "[stalls] torch failed: RuntimeError: boom" in captured.err
    assert "training tiny fed by" not in captured.out and "failed: RuntimeError" not in captured.out
    assert "1 step after" in captured.out and "1 steps" not in captured.out


def test_augment_reports_a_real_peak_and_says_what_it_is(tmp_path):
    """"peak MiB" read 0.0234: the growth of the peak RSS during timing, not a peak."""
    assert main(["bench", "augment", "--device", "cpu", "--only", "floor", "gpufeed", "--batch-size", "2", "--size", "16",
                 "--batches", "1", "--repeats", "1", "--threads", "1", "--out", str(tmp_path)]) == 0
    (result,) = tmp_path.glob("augment-*.json")
    doc = json.loads(result.read_text())
    floor = doc["results"]["floor"]
    assert floor["peak_mem_mb"] >= floor["rss_at_start_mb"] > 20  # a process holding torch: tens of MiB at least
    md = result.with_suffix(".md").read_text()
    assert "peak RSS MiB (whole process)" in md and "peak resident memory (RSS) of the contender's process" in md
    assert "× 1 batch per pass, 1 timed pass after a warm-up" in md and "1 torch thread each" in md
    # no baseline ran: the target line says so, not "measured 0.00×"
    assert "not measured in this run" in md and "0.00×" not in md
