"""`gpufeed bench compare`: ratio changes flagged beyond the threshold, exit status for CI."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from gpufeed.bench.compare import compare_results
from gpufeed.bench.results import headline, load_results, suite_ratios
from gpufeed.cli import main

RECORDED = Path(__file__).resolve().parents[2] / "bench" / "results"


def _images_doc(dali: float, torch_cpu: float, when: str) -> dict:
    return {"suite": "images-train", "metadata": {"timestamp": when}, "rows": [
        {"name": "torch-pil", "rate": 500.0, "ratio": 1.0},
        {"name": "dali-cpu", "rate": 500.0 * dali, "ratio": dali},
        {"name": "torch-cpu", "rate": 500.0 * torch_cpu, "ratio": torch_cpu},
    ]}


def _write(folder: Path, name: str, doc: dict) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    (folder / name).write_text(json.dumps(doc))
    return folder


def test_a_drop_beyond_the_threshold_is_flagged_and_fails(tmp_path, capsys):
    old = _write(tmp_path / "old", "images-train-a.json", _images_doc(2.6, 1.8, "2026-01-01T00:00:00+00:00"))
    new = _write(tmp_path / "new", "images-train-b.json", _images_doc(2.0, 1.85, "2026-01-02T00:00:00+00:00"))
    assert main(["bench", "compare", str(old), str(new)]) == 1
    out = capsys.readouterr().out
    assert "| images-train | dali-cpu | 2.60 | 2.00 | -23.1 % | **▼ slower** |" in out
    assert "| images-train | torch-cpu | 1.80 | 1.85 | +2.8 % |  |" in out
    assert "1 ratio(s) dropped" in out
    # A wider threshold lets the same drop pass.
    assert main(["bench", "compare", str(old), str(new), "--threshold", "30"]) == 0


def test_changes_within_the_threshold_pass_and_gains_are_flagged(tmp_path, capsys):
    old = _write(tmp_path, "old.json", _images_doc(2.6, 1.8, "2026-01-01T00:00:00+00:00")) / "old.json"
    new = _write(tmp_path, "new.json", _images_doc(2.5, 2.2, "2026-01-02T00:00:00+00:00")) / "new.json"
    assert main(["bench", "compare", str(old), str(new)]) == 0
    rows = {r["pipeline"]: r for r in compare_results(load_results([old]), load_results([new]))}
    assert rows["dali-cpu"]["flag"] == "" and rows["torch-cpu"]["flag"] == "faster"
    assert "torch-pil" not in rows  # the baseline is 1x by definition


def test_a_folder_gives_its_latest_file_per_suite_and_new_pipelines_are_listed(tmp_path):
    folder = tmp_path / "runs"
    _write(folder, "images-train-1.json", _images_doc(1.0, 1.0, "2026-01-01T00:00:00+00:00"))
    _write(folder, "images-train-2.json", _images_doc(3.0, 1.0, "2026-01-03T00:00:00+00:00"))
    _write(folder, "notes.json", {"not": "a result"})
    (folder / "other.json").write_text('{"suite": ')  # unreadable, and its name gives no suite: left out
    with pytest.warns(UserWarning, match=r"other.json: not a readable JSON file, left out"):
        docs = load_results([folder])
    assert list(docs) == ["images-train"] and suite_ratios(docs["images-train"])["dali-cpu"] == 3.0
    newer = _images_doc(3.0, 1.0, "2026-01-04T00:00:00+00:00")
    newer["rows"].append({"name": "dali-gpu", "rate": 4000.0, "ratio": 8.0})
    rows = compare_results(docs, {"images-train": newer})
    assert {r["pipeline"]: r["flag"] for r in rows}["dali-gpu"] == "new"


def test_bad_inputs_are_named(tmp_path, capsys):
    with pytest.raises(ValueError, match="threshold"):
        compare_results({}, {}, threshold=0)
    assert main(["bench", "compare", str(tmp_path), str(tmp_path / "missing")]) == 2
    assert "missing" in capsys.readouterr().err
    assert main(["bench", "compare", str(tmp_path / "gone1"), str(tmp_path / "gone2")]) == 2
    err = capsys.readouterr().err  # both named: the old run's path went unsaid
    assert "gone1: no such file or folder" in err and "gone2: no such file or folder" in err
    with pytest.raises(ValueError, match="no gpufeed result JSON"):
        load_results([tmp_path])


def test_every_recorded_suite_has_ratios_and_a_headline():
    docs = load_results([RECORDED])
    assert {"images-train", "images-val", "augment", "tabular", "formats"} <= set(docs)
    for suite, doc in docs.items():
        assert suite_ratios(doc), suite
        head = headline(doc)
        assert head["ratio"] and head["ratio"] > 0 and head["what"], suite
    gpu_run = json.loads((RECORDED / "images-train-gpu16-20261123T071338Z.json").read_text())
    assert "dali-gpu" in headline(gpu_run)["what"]  # the best kit pipeline of the H100 run


def test_a_folder_of_cpu_and_gpu_runs_is_compared_like_with_like(tmp_path, capsys):
    cpu = _images_doc(2.6, 1.8, "2026-01-01T00:00:00+00:00") | {"metadata": {
        "timestamp": "2026-01-01T00:00:00+00:00", "gpu": None, "cpu_count": 2}}
    gpu = _images_doc(3.5, 2.1, "2026-01-02T00:00:00+00:00") | {"metadata": {
        "timestamp": "2026-01-02T00:00:00+00:00", "gpu": {"name": "H100"}, "cpu_count": 16}}
    old = _write(_write(tmp_path / "old", "cpu.json", cpu), "gpu.json", gpu)
    new = _write(tmp_path / "new", "cpu.json", cpu | {"metadata": {**cpu["metadata"], "timestamp": "2026-02-01"}})
    assert load_results([old])["images-train"]["metadata"]["cpu_count"] == 16  # the latest alone
    assert main(["bench", "compare", str(old), str(new)]) == 0  # the CPU run against the CPU run
    assert "across different machines" not in capsys.readouterr().out


def test_runs_with_other_settings_are_compared_with_a_note(tmp_path, capsys):
    old_doc = {**_images_doc(2.6, 1.8, "2026-01-01T00:00:00+00:00"),
               "setup": {"data": "/a", "files": 1024, "rounds": 2, "batch_size": 64, "workers": [2]}}
    new_doc = {**_images_doc(2.6, 1.8, "2026-01-02T00:00:00+00:00"),
               "setup": {"data": "/b", "files": 128, "rounds": 1, "batch_size": 64, "workers": [4]}}
    old = _write(tmp_path / "old", "images-train-a.json", old_doc)
    new = _write(tmp_path / "new", "images-train-b.json", new_doc)
    assert main(["bench", "compare", str(old), str(new)]) == 0
    out = capsys.readouterr().out
    # The data's place and non-plain fields are not settings of the measurement.
    assert "different settings (ratios may differ for that reason): images-train: files 1024 → 128, rounds 2 → 1" in out
    assert "/a" not in out and "batch_size" not in out
    same = _write(tmp_path / "same", "images-train-c.json", {**old_doc, "metadata": {"timestamp": "2026-01-03T00:00:00+00:00"}})
    assert main(["bench", "compare", str(old), str(same)]) == 0
    assert "different settings" not in capsys.readouterr().out


def test_a_pipeline_that_failed_or_nothing_in_common_fails_the_comparison(tmp_path, capsys):
    old = _write(tmp_path / "old", "images-train-a.json", _images_doc(2.6, 1.8, "2026-01-01T00:00:00+00:00"))
    crashed = _images_doc(2.6, 1.8, "2026-01-02T00:00:00+00:00")
    crashed["rows"][1] = {"name": "dali-cpu", "error": "died"}  # a contender that crashed: no ratio
    new = _write(tmp_path / "new", "images-train-b.json", crashed)
    assert main(["bench", "compare", str(old), str(new)]) == 1
    assert "1 pipeline(s) of the old run have no ratio in the new one (failed or not run): images-train dali-cpu" \
        in capsys.readouterr().out
    other = _write(tmp_path / "other", "formats-a.json", {
        "suite": "formats", "metadata": {"timestamp": "2026-01-03T00:00:00+00:00"},
        "ratios": [{"format": "parquet", "read_x": 5.0, "write_x": 16.0}]})
    assert main(["bench", "compare", str(old), str(other)]) == 1
    assert "Nothing to compare" in capsys.readouterr().out


def test_a_suite_missing_from_the_new_run_fails_the_comparison_but_a_retired_one_does_not(tmp_path, capsys):
    """A suite that crashed under `bench all` writes no file at all: it passed CI before."""
    formats = {"suite": "formats", "metadata": {"timestamp": "2026-01-01T00:00:00+00:00"},
               "ratios": [{"format": "parquet", "read_x": 5.0, "write_x": 16.0}]}
    old = _write(tmp_path / "old", "images-train-a.json", _images_doc(2.6, 1.8, "2026-01-01T00:00:00+00:00"))
    _write(old, "formats-a.json", formats)
    new = _write(tmp_path / "new", "images-train-b.json", _images_doc(2.6, 1.8, "2026-01-02T00:00:00+00:00"))
    assert main(["bench", "compare", str(old), str(new)]) == 1
    assert "1 suite(s) of the old run have no result in the new one (failed or not run): formats" \
        in capsys.readouterr().out
    _write(new, "formats-b.json", formats)
    (old / "formats-a.json").rename(old / "tabular-ops-a.json")
    (old / "tabular-ops-a.json").write_text(json.dumps({**formats, "suite": "tabular-ops"}))
    assert main(["bench", "compare", str(old), str(new)]) == 0
    assert "Retired suites in the old run (not compared): tabular-ops" in capsys.readouterr().out


def test_settings_kept_in_config_or_at_the_top_are_named_and_references_not_gated(tmp_path, capsys):
    def formats(rows: int, when: str, read: float) -> dict:
        return {"suite": "formats", "metadata": {"timestamp": when}, "config": {"rows": rows, "out": when},
                "ratios": [{"format": "parquet", "read_x": read, "write_x": 16.0}]}

    old = _write(tmp_path / "old", "formats-a.json", formats(250_000, "2026-01-01T00:00:00+00:00", 5.0))
    new = _write(tmp_path / "new", "formats-b.json", formats(50_000, "2026-01-02T00:00:00+00:00", 5.1))
    assert main(["bench", "compare", str(old), str(new)]) == 0
    assert "formats: rows 250000 → 50000" in capsys.readouterr().out
    # the decode-only ceiling is context, not a pipeline: its drop does not fail a run
    ceiling_old = _images_doc(2.6, 1.8, "2026-01-01T00:00:00+00:00")
    ceiling_old["rows"].append({"name": "decode-only", "rate": 5000.0, "ratio": 10.0})
    ceiling_new = _images_doc(2.6, 1.8, "2026-01-02T00:00:00+00:00")
    ceiling_new["rows"].append({"name": "decode-only", "rate": 2500.0, "ratio": 5.0})
    rows = compare_results({"images-train": ceiling_old}, {"images-train": ceiling_new})
    assert "decode-only" not in {r["pipeline"] for r in rows}


def test_a_failed_output_check_fails_the_comparison_whatever_the_ratio(tmp_path, capsys):
    # A contender that yielded half the samples got "faster"; its speed means nothing.
    old = _write(tmp_path / "old", "a.json", _images_doc(2.0, 1.8, "2026-01-01T00:00:00+00:00"))
    bad = _images_doc(3.6, 1.8, "2026-01-02T00:00:00+00:00")
    bad["rows"][1]["verdict"] = "yielded 512 of 1024 samples"
    new = _write(tmp_path / "new", "b.json", bad)
    assert main(["bench", "compare", str(old), str(new)]) == 1
    assert "1 output check(s) of the new run failed" in capsys.readouterr().out


def _tabular_doc(categorify_s: float) -> dict:
    def run(ops: dict[str, float]) -> dict:
        return {"timing": {"median_s": sum(ops.values()), "rate": 1e6 / sum(ops.values())},
                "per_op": [{"op": op, "columns": 1, "median_s": s} for op, s in ops.items()]}

    hand = {"Standardize": 6.0, "Categorify": 1.0}
    return {"suite": "tabular", "config": {}, "recipe": {"sensor": {"10000000": {
        "pandas-baseline": run(hand), "pandas": {**run({"Standardize": 5.0, "Categorify": categorify_s}),
                                                 "check": "same as baseline"}}}}}


def test_a_slower_op_is_judged_on_its_own_not_hidden_in_the_recipe(tmp_path, capsys):
    # Categorify twice as slow moves the whole recipe by ~8 %: within the threshold alone.
    old = _write(tmp_path / "old", "tabular-a.json", _tabular_doc(0.5))
    new = _write(tmp_path / "new", "tabular-b.json", _tabular_doc(1.0))
    assert main(["bench", "compare", str(old), str(new)]) == 1
    out = capsys.readouterr().out
    assert "op sensor 10,000,000 Categorify: pandas | 2.00 | 1.00 | -50.0 % | **▼ slower**" in out
    assert "recipe sensor 10,000,000: pandas" in out


def test_augment_is_judged_against_the_tuned_loop_and_references_are_not(tmp_path):
    def doc(threads_rate: float, kornia_rate: float) -> dict:
        return {"suite": "augment", "device": "cpu", "summary_rows": [
            {"name": "gpufeed", "rate": 400.0, "vs_per_sample": 2.2, "check": "ok"},
            {"name": "torchvision-per-sample", "rate": 400.0 / 2.2, "check": "ok"},
            {"name": "torchvision-per-sample-threads", "rate": threads_rate, "check": "ok"},
            {"name": "kornia-eager", "rate": kornia_rate, "check": "ok"}]}

    assert suite_ratios(doc(200.0, 100.0)) == {"gpufeed": 2.0}
    assert headline(doc(200.0, 100.0))["what"] == "stage vs torchvision per-sample loop on a thread per core"
    old = _write(tmp_path / "old", "augment-a.json", doc(200.0, 100.0))
    new = _write(tmp_path / "new", "augment-b.json", doc(200.0, 60.0))  # only a reference moved
    assert main(["bench", "compare", str(old), str(new)]) == 0


def test_runs_from_cpus_of_one_name_but_another_generation_are_compared_with_a_note(tmp_path, capsys):
    def doc(when: str, details: dict | None) -> dict:
        meta = {"timestamp": when, "gpu": None, "cpu_count": 2, "cpu_model": "AMD EPYC"}
        return _images_doc(2.6, 1.8, when) | {"metadata": meta | ({"cpu_details": details} if details else {})}

    zen4 = {"family": 25, "model_number": 17, "simd": "AVX-512"}
    zen3 = {"family": 25, "model_number": 1, "simd": "AVX2"}
    old = _write(tmp_path / "old", "images-train-a.json", doc("2026-01-01T00:00:00+00:00", zen4))
    new = _write(tmp_path / "new", "images-train-b.json", doc("2026-01-02T00:00:00+00:00", zen3))
    assert main(["bench", "compare", str(old), str(new)]) == 0
    out = capsys.readouterr().out
    assert ("across different machines (ratios may differ for that reason): images-train (cpu2, AMD EPYC "
            "(family 25 model 17, AVX-512) → cpu2, AMD EPYC (family 25 model 1, AVX2))") in out
    same = _write(tmp_path / "same", "images-train-c.json", doc("2026-01-03T00:00:00+00:00", zen4))
    assert main(["bench", "compare", str(old), str(same)]) == 0
    out = capsys.readouterr().out
    assert "different machines" not in out and "Not known" not in out
    # A run written before the details were recorded: it cannot be told, and the comparison says so.
    older = _write(tmp_path / "older", "images-train-d.json", doc("2025-12-01T00:00:00+00:00", None))
    assert main(["bench", "compare", str(older), str(new)]) == 0
    assert "Not known to be the same machine" in capsys.readouterr().out
