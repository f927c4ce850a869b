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
    with pytest.raises(SystemExit) as exc:  # a usage error now, as the arguments are read
        main(["stall", "--device", "gpu", "--out", str(tmp_path)])
    assert exc.value.code == 2 and "argument --device: 'gpu': choose from auto" in capsys.readouterr().err
    assert main(["stall", "--data", str(tmp_path / "nowhere"), "--out", str(tmp_path)]) == 2
    assert "--data" in capsys.readouterr().err
    assert main(["stall", "--compare", "pil", "none", "--out", str(tmp_path)]) == 2  # was taken as "pil"
    assert "'none' measures no other loader" in capsys.readouterr().err


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


def _fake_alone(calls: list[str]):
    def run_isolated(target, name, root, **measure):
        calls.append(name)
        return {"name": name, "samples_per_s": 1000.0}

    return run_isolated


def test_stall_reports_progress_on_stderr_and_counts_in_the_singular(image_folder, tmp_path, monkeypatch, capsys):
    """`  measuring the dali loader alone ...` went to stdout, without the command's prefix."""
    calls: list[str] = []
    monkeypatch.setattr("gpufeed.bench.harness.run_isolated", _fake_alone(calls))
    assert main(["stall", "--data", str(image_folder), "--model", "tiny", "--loader", "torch", "--steps", "1",
                 "--warmup", "1", "--batch-size", "4", "--size", "32", "--workers", "0", "--device", "cpu",
                 "--compare", "torch", "pil", "--out", str(tmp_path)]) == 0
    captured = capsys.readouterr()
    assert calls == ["pil"]
    assert "[stall] measuring the pil loader alone ..." in captured.err and "measuring" not in captured.out
    assert "stall report: 1 step (1 warm-up step left out)" in captured.out
    assert "what-if (1 step each after 1 warm-up step)" in captured.out and "1 steps" not in captured.out


@pytest.fixture(scope="module")
def shards(image_folder, tmp_path_factory):
    """The image folder as WebDataset shards, written by gpufeed convert (with its manifest)
    and copied into a plain folder of shards (as another tool writes them)."""
    from gpufeed.datasets.shards.convert import convert

    converted = tmp_path_factory.mktemp("wds") / "train-wds"
    convert(image_folder, converted, format="webdataset", shard_size=200_000, progress=False)
    plain = tmp_path_factory.mktemp("plain") / "train-wds"
    plain.mkdir()
    for tar in converted.glob("*.tar"):
        shutil.copy(tar, plain / tar.name)
    return converted, plain


def test_stall_on_shards_leaves_the_pil_baseline_out_and_refuses_it_by_name(shards, tmp_path, monkeypatch, capsys):
    """On shards the pil loader failed with torchvision's "Couldn't find any class folder"."""
    for data in shards:
        for option in (["--loader", "pil"], ["--loader", "torch", "--compare", "pil"]):
            assert main(["stall", "--data", str(data), *option, "--out", str(tmp_path)]) == 2
            err = capsys.readouterr().err
            assert f"{option[-2]} pil: the pil loader (torchvision ImageFolder + DataLoader) needs an ImageFolder " \
                   f"tree (root/<class>/<image>); --data {data} is " in err
            assert len(err.strip().splitlines()) == 1 and "class folder" not in err
    calls: list[str] = []
    monkeypatch.setattr("gpufeed.bench.harness.run_isolated", _fake_alone(calls))
    monkeypatch.setattr("gpufeed.profile.loaders.dali_installed", lambda: False)  # compare: torch and pil
    converted, _ = shards
    assert main(["stall", "--data", str(converted), "--model", "tiny", "--loader", "torch", "--steps", "2",
                 "--warmup", "1", "--batch-size", "4", "--size", "32", "--workers", "0", "--device", "cpu",
                 "--out", str(tmp_path)]) == 0
    captured = capsys.readouterr()
    assert calls == [] and "pil failed" not in captured.err + captured.out
    assert "  pil: an ImageFolder baseline, not run on shards" in captured.out
    (result,) = tmp_path.glob("stall-tiny-torch-*.json")
    doc = json.loads(result.read_text())
    assert doc["setup"]["compared"] == ["torch"] and "pil" in doc["setup"]["not_compared"]
    assert "pil: an ImageFolder baseline, not run on shards" in result.with_suffix(".md").read_text()
