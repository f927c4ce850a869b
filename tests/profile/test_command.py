"""`gpufeed stall` end to end on a small generated folder (tiny model, CPU, no workers)."""

import json
import shutil
import subprocess
import sys

import pytest

import gpufeed
from gpufeed.cli import main


def test_stall_runs_end_to_end(image_folder, tmp_path):
    out = subprocess.run(
        [sys.executable, "-m", "gpufeed", "stall", "--data", str(image_folder), "--model", "tiny",
         "--loader", "torch", "--steps", "3", "--warmup", "1", "--batch-size", "8", "--size", "32",
         "--workers", "0", "--device", "cpu", "--compare", "torch", "pil", "--out", str(tmp_path)],
        capture_output=True, text=True, timeout=600,
    )
    assert out.returncode == 0, out.stdout[-2000:] + out.stderr[-2000:]
    assert "stall report: 3 steps" in out.stdout and "verdict: " in out.stdout
    assert "loaders alone on this machine" in out.stdout and "pil " in out.stdout
    (result,) = tmp_path.glob("stall-tiny-torch-*.json")
    doc = json.loads(result.read_text())
    assert doc["setup"]["model"] == "tiny" and doc["metadata"]["packages"]["torch"]
    assert doc["report"]["steps"] == 3 and 0 <= doc["report"]["stall_pct"] <= 100
    assert doc["what_if"]["bound"] in ("input", "compute") and set(doc["what_if"]["loaders_alone"]) == {"torch", "pil"}
    assert result.with_suffix(".png").read_bytes()[:4] == b"\x89PNG"
    assert doc["figures"] == [result.with_suffix(".png").name]  # listed, as every suite's figures
    assert f"![{result.with_suffix('.png').name}]" in result.with_suffix(".md").read_text()
    assert f"results: {result}, {result.with_suffix('.md').name}, {result.with_suffix('.png').name}" in out.stdout


def test_stall_refuses_bad_arguments_in_one_line(tmp_path, capsys):
    with pytest.raises(SystemExit) as exc:  # a usage error, before anything runs
        main(["stall", "--steps", "0", "--out", str(tmp_path)])
    err = capsys.readouterr().err
    assert exc.value.code == 2 and "argument --steps: must be >= 1, got 0" in err and "Traceback" not in err
    package = gpufeed.__file__.rsplit("/", 1)[0]
    with pytest.raises(SystemExit) as exc:
        main(["stall", "--out", f"{package}/results"])
    assert exc.value.code == 2 and "inside the gpufeed package" in capsys.readouterr().err
    assert main(["stall", "--device", "gpu", "--out", str(tmp_path)]) == 2
    assert "--device: device must be" in capsys.readouterr().err
    assert main(["stall", "--data", str(tmp_path / "nowhere"), "--out", str(tmp_path)]) == 2
    assert "--data" in capsys.readouterr().err


def test_stall_with_the_pil_loader_names_an_unreadable_file_in_one_line(image_folder, tmp_path):
    data = tmp_path / "data"
    shutil.copytree(image_folder, data)
    first_class = sorted(p for p in data.iterdir() if p.is_dir())[0]
    (first_class / "empty.jpg").write_bytes(b"")  # ImageFolder lists it; PIL cannot open it
    out = subprocess.run(
        [sys.executable, "-m", "gpufeed", "stall", "--data", str(data), "--model", "tiny", "--loader", "pil",
         "--steps", "40", "--warmup", "0", "--batch-size", "8", "--size", "32", "--workers", "1",
         "--device", "cpu", "--compare", "none", "--out", str(tmp_path / "out")],
        capture_output=True, text=True, timeout=600,
    )
    assert out.returncode == 2, out.stdout[-2000:] + out.stderr[-2000:]
    assert "Traceback" not in out.stderr and "empty.jpg" in out.stderr
    assert "--loader torch or dali skip unreadable images" in out.stderr
