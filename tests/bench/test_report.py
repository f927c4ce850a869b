"""`gpufeed bench all`: one folder, one summary, figures; drawn from recorded results too."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from gpufeed.bench.plots import draw_figures
from gpufeed.bench.report import run_all, write_summary
from gpufeed.bench.results import load_results

PNG = b"\x89PNG\r\n\x1a\n"
RECORDED = Path(__file__).resolve().parents[2] / "bench" / "results"


def test_bench_all_quick_writes_one_report(image_folder, tmp_path, capsys):
    out = tmp_path / "report"
    status = run_all(out, quick=True, data=image_folder, suites=["images-train", "tune", "stalls"], device="cpu",
                     extra={
                         "images-train": ["--only", "torch-cpu", "--size", "32", "--batch-size", "8",
                                          "--workers", "1", "--repeats", "1"],
                         "tune": ["--knobs", "num_workers", "--workers", "0", "--batch-sizes", "8", "--size", "32",
                                  "--time-per-config", "0.2", "--kit", "", "--start-repeats", "1"],
                         "stalls": ["--loaders", "pil,torch", "--steps", "2", "--warmup", "0", "--batch-size", "4",
                                    "--size", "32", "--workers", "0"]})
    err = capsys.readouterr().err
    assert status == 0, err[-3000:]
    assert "[all] 1/3 images-train ..." in err and "\r" not in err
    summary = (out / "summary.md").read_text()
    jsons = sorted(p.name for p in out.glob("*.json") if not p.name.startswith("bench-all-"))
    assert [j.split("-cpu")[0] for j in jsons] == ["images-train", "stalls", "tune-train"]
    (manifest,) = out.glob("bench-all-*.json")  # the run's own list of its files, read by compare
    run = json.loads(manifest.read_text())
    assert run["state"] == "finished" and sorted(f for s in run["suites"].values() for f in s["files"]) == jsons
    assert run["suites"]["tune"]["suite"] == "tune-train"
    assert f"(it reads this folder as this run, `{manifest.name}`" in summary
    for name in jsons:
        assert f"[json]({name})" in summary
    assert "torch-cpu vs DataLoader + PIL + transforms.v2" in summary
    # The stall bars: one per loader, each loader trained for real in its own process.
    stalls = json.loads(next(out.glob("stalls-*.json")).read_text())
    assert [r["name"] for r in stalls["rows"]] == ["pil", "torch"]
    assert all(0 <= r["stall_pct"] <= 100 and r["samples_per_s"] > 0 and r["steps"] == 2 for r in stalls["rows"])
    assert set(stalls["ratio_to_baseline"]) == {"torch"}
    assert "training tiny fed by torch vs DataLoader + PIL" in summary
    assert f"![stalls]({stalls['figures'][0]})" in summary
    pngs = sorted(out.glob("*.png"))
    assert len(pngs) == 3 and all(p.read_bytes()[:8] == PNG for p in pngs)


def test_bench_stalls_refuses_unknown_loaders(tmp_path):
    from gpufeed.cli import main

    assert main(["bench", "stalls", "--loaders", "pil,torchh", "--out", str(tmp_path)]) == 2


def test_unknown_suites_are_refused(tmp_path):
    with pytest.raises(ValueError, match="suites"):
        run_all(tmp_path, suites=["imagez"])


def test_figures_and_summary_from_recorded_results(tmp_path):
    docs = load_results([RECORDED])
    outcomes = []
    for suite, doc in docs.items():
        (fig,) = draw_figures(doc, tmp_path / suite)
        assert fig.read_bytes()[:8] == PNG
        name = Path(doc["_path"]).name
        (tmp_path / name).write_text(Path(doc["_path"]).read_text())
        outcomes.append({"step": suite, "status": 0, "error": None, "files": [name]})
    outcomes.append({"step": "tune", "status": 1, "error": "RuntimeError: boom", "files": []})
    text = write_summary(tmp_path, outcomes).read_text()
    assert "| tune | did not run |" in text and "RuntimeError: boom" in text
    assert "polars" in text and "parquet read vs CSV" in text
