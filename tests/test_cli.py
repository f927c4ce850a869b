"""The command line: doctor, data generation and a small images benchmark end to end."""

import json
import subprocess
import sys
from pathlib import Path

import pytest

from gpufeed.cli import main


def test_doctor_reports_versions_and_backend_choices(capsys):
    assert main(["doctor", "--json"]) == 0
    report = json.loads(capsys.readouterr().out)
    assert report["versions"]["torch"]
    choice = report["choices"]["image loader (classification_loader backend='auto')"]
    assert choice["backend"] in ("dali", "torch") and choice["why"]
    assert main(["doctor"]) == 0
    assert "backend choices" in capsys.readouterr().out


def test_data_images_writes_an_image_folder(tmp_path, capsys):
    assert main(["data", "images", str(tmp_path / "d"), "--images", "6", "--classes", "2"]) == 0
    assert len(list((tmp_path / "d").rglob("*.jpg"))) == 6
    assert sorted(p.name for p in (tmp_path / "d").iterdir()) == ["class_000", "class_001"]


def test_bench_images_writes_results_with_metadata(image_folder, tmp_path):
    out = subprocess.run(
        [sys.executable, "-m", "gpufeed", "bench", "images", "--data", str(image_folder), "--size", "32",
         "--batch-size", "8", "--repeats", "1", "--rounds", "2", "--workers", "1", "--only", "dali-cpu", "torch-cpu",
         "--out", str(tmp_path)],
        capture_output=True, text=True, timeout=600,
    )
    assert out.returncode == 0, out.stdout[-2000:] + out.stderr[-2000:]
    assert "× torch-pil" in out.stdout
    (result,) = tmp_path.glob("images-train-*.json")
    doc = json.loads(result.read_text())
    assert doc["metadata"]["packages"]["torch"] and doc["metadata"]["cpu_count"]
    rows = {r["name"]: r for r in doc["rows"]}
    assert rows["torch-pil"]["ratio"] == 1.0
    for row in rows.values():
        assert row["verdict"] == "ok" and row["check"]["samples"] == 40
        # Two rounds, one timed epoch each: both epochs pooled, each round's rate kept.
        assert row["rounds"] == 2 and len(row["seconds"]) == 2 and len(row["round_rates"]) == 2
    assert "× per round" in result.with_suffix(".md").read_text()


def test_suite_help_is_each_modules_first_line_and_only_the_named_suite_is_imported():
    import importlib

    from gpufeed.cli import BENCH_SUITES

    for name, (module, text) in BENCH_SUITES.items():
        assert text == importlib.import_module(module).__doc__.strip().splitlines()[0], name
    code = ("import sys\nfrom gpufeed.cli import _build_parser\n"
            "_build_parser(['bench', 'compare']).parse_args(['bench', 'compare', 'a', 'b'])\n"
            "_build_parser(['doctor'])\n"
            "print(sorted(m for m in sys.modules if m.startswith('gpufeed.bench.') or m in ('pandas', 'torch')))\n")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr[-2000:]
    assert "gpufeed.bench.compare" in out.stdout
    for other in ("gpufeed.bench.images", "gpufeed.bench.tabular", "gpufeed.bench.formats", "'pandas'", "'torch'"):
        assert other not in out.stdout, out.stdout


def test_cpu_only_workflow_never_imports_gpu_libraries(tmp_path):
    code = (
        "import sys, torch\n"
        "from gpufeed.pipelines import classification_loader\n"
        "from gpufeed.datasets.images import generate_image_folder\n"
        "import gpufeed.doctor\n"
        f"root = generate_image_folder(r'{tmp_path}', num_images=4, num_classes=2, min_side=40, max_side=50)\n"
        "for x, y in classification_loader(root, train=True, batch_size=2, size=32, backend='torch', device='cpu', num_workers=0): pass\n"
        "gpufeed.doctor.report()\n"
        "bad = [m for m in sys.modules if m.split('.')[0] in ('cudf', 'cupy', 'dask_cudf') or m.startswith('nvidia.dali')]\n"
        "print('GPU modules:', bad)\n"
        "assert not bad\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stdout + out.stderr[-2000:]


def test_data_sensor_writes_a_table(tmp_path, capsys):
    import pandas as pd

    assert main(["data", "sensor", str(tmp_path / "r.parquet"), "--rows", "500"]) == 0
    table = pd.read_parquet(tmp_path / "r.parquet")
    assert len(table) == 500 and {"station_id", "region", "timestamp", "label"} <= set(table.columns)


def test_user_errors_are_one_line_not_a_traceback(tmp_path, capsys):
    assert main(["bench", "images", "--data", str(tmp_path / "missing")]) == 2
    err = capsys.readouterr().err
    assert err.startswith("gpufeed: error:") and "missing" in err and "Traceback" not in err


def test_bench_images_refuses_a_tree_with_bad_files_by_name(tmp_path, capsys):
    from gpufeed.datasets.images import generate_image_folder

    root = generate_image_folder(tmp_path / "d", num_images=4, num_classes=2, seed=1, min_side=40, max_side=48)
    (root / "class_001" / "empty.jpg").write_bytes(b"")
    assert main(["bench", "images", "--data", str(root), "--out", str(tmp_path / "out")]) == 2
    err = capsys.readouterr().err
    assert "1 of 5 image file(s) cannot be decoded" in err and "empty.jpg (empty file (0 bytes))" in err
    assert not (tmp_path / "out").exists()


def test_the_baseline_names_a_file_pil_cannot_decode(tmp_path):
    from gpufeed.bench.images import baseline_dataset
    from gpufeed.datasets.images import generate_image_folder

    root = generate_image_folder(tmp_path / "d", num_images=2, num_classes=1, seed=1, min_side=40, max_side=48)
    (root / "class_000" / "notes.jpg").write_text("not a picture")
    dataset = baseline_dataset(root, train=False, size=32)
    bad = [i for i, (p, _) in enumerate(dataset.samples) if p.endswith("notes.jpg")][0]
    with pytest.raises(OSError, match="notes.jpg: cannot identify image file"):
        dataset[bad]


@pytest.mark.parametrize("argv, option, message", [
    (["bench", "images", "--repeats", "0"], "--repeats", "must be >= 1, got 0"),
    (["bench", "storage", "--rounds", "two"], "--rounds", "expected a whole number, got 'two'"),
    (["bench", "tabular", "--warmup", "-1"], "--warmup", "must be >= 0, got -1"),
    (["data", "sensor", "t.parquet", "--rows", "0"], "--rows", "must be >= 1, got 0"),
    (["bench", "tabular", "--min-seconds", "-0.5"], "--min-seconds", "must be a number >= 0, got -0.5"),
    (["bench", "storage", "--open-latency-ms", "nan"], "--open-latency-ms", "must be a number >= 0, got nan"),
    (["bench", "tune", "--time-per-config", "0"], "--time-per-config", "must be a number > 0, got 0"),
    (["bench", "compare", "a", "b", "--threshold", "ten"], "--threshold", "expected a number, got 'ten'"),
])
def test_counts_out_of_range_are_usage_errors_naming_the_option(argv, option, message, capsys):
    # Before anything runs: a zero --repeats used to fail minutes into a benchmark.
    with pytest.raises(SystemExit) as exc:
        main(argv)
    assert exc.value.code == 2
    assert f"argument {option}: {message}" in capsys.readouterr().err


def test_the_kits_warnings_print_as_one_plain_line_on_the_command_line(tmp_path):
    from gpufeed.datasets.images import generate_image_folder

    root = generate_image_folder(tmp_path / "src", num_images=4, num_classes=2, min_side=40, max_side=50)
    (Path(root) / "class_000" / "notes.txt").write_text("not an image")
    out = subprocess.run([sys.executable, "-m", "gpufeed", "convert", str(root), str(tmp_path / "wds"),
                          "--format", "webdataset"], capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr[-2000:]
    lines = [ln for ln in out.stderr.splitlines() if "notes.txt" in ln]
    assert len(lines) == 1 and lines[0].startswith("gpufeed: ") and "left out 1 file(s)" in lines[0]
    assert "UserWarning" not in out.stderr and "cli.py" not in out.stderr


@pytest.mark.parametrize("argv", [["bench", "formats"], ["bench", "all", "--quick"], ["tune"], ["stall"]])
def test_results_are_never_written_inside_the_package_even_by_default(argv, monkeypatch, capsys):
    """Run from the package's own folder, the default ./gpufeed-results landed inside it."""
    import gpufeed

    monkeypatch.chdir(Path(gpufeed.__file__).parent)
    with pytest.raises(SystemExit) as exc:  # refused before anything runs
        main(argv)
    assert exc.value.code == 2 and "inside the gpufeed package" in capsys.readouterr().err

