"""`gpufeed tune`: the sweep plan, the code it prints, and a tiny sweep end to end (no timing asserted)."""

from __future__ import annotations

import json
import re

import pytest

from gpufeed.bench.tune import LoaderConfig, dataloader_code, sweep_plan, worker_counts
from gpufeed.cli import main

PNG = b"\x89PNG\r\n\x1a\n"


def _run_code(code: str) -> dict:
    calls = []
    namespace = {"DataLoader": lambda *a, **kw: calls.append((a, kw)) or "loader", "dataset": "the dataset"}
    imports, code = code.split("\n", 1)  # the real import would replace the recording stand-in
    assert imports == "from torch.utils.data import DataLoader"
    exec(compile(code, "<tune output>", "exec"), namespace)  # noqa: S102 - the code the sweep prints
    assert namespace["loader"] == "loader" and calls[0][0] == ("the dataset",)
    return calls[0][1]


def test_worker_counts_go_one_step_past_the_cores():
    assert worker_counts(1) == [0, 1, 2]
    assert worker_counts(2) == [0, 1, 2, 4]
    assert worker_counts(16) == [0, 1, 2, 4, 8, 16, 32]
    with pytest.raises(ValueError, match="cores"):
        worker_counts(0)


def test_the_plan_moves_one_knob_at_a_time_around_the_start():
    start = LoaderConfig(num_workers=2, batch_size=64)
    plan = sweep_plan(start, {"num_workers": [0, 2], "batch_size": [32, 128]})
    assert [(k, v) for k, v, _ in plan] == [("start", None), ("num_workers", 0), ("num_workers", 2),
                                            ("batch_size", 32), ("batch_size", 128)]
    configs = [c for _, _, c in plan]
    assert configs[2] == configs[0]  # the start's value runs once
    assert configs[1] == LoaderConfig(0, 64, prefetch_factor=None)  # no workers: nothing to prefetch
    assert configs[4] == LoaderConfig(2, 128)
    with pytest.raises(ValueError, match="knob"):
        sweep_plan(start, {"workers": [1]})
    with pytest.raises(ValueError, match="batch_size"):
        LoaderConfig(2, 0)


def test_the_printed_dataloader_code_is_valid_python():
    kwargs = _run_code(dataloader_code(LoaderConfig(4, 128, True, True, 4), train=True))
    assert kwargs == {"batch_size": 128, "shuffle": True, "num_workers": 4, "pin_memory": True,
                      "persistent_workers": True, "prefetch_factor": 4}
    assert "prefetch_factor" not in _run_code(dataloader_code(LoaderConfig(0, 32, persistent_workers=True),
                                                              train=False))


def test_the_printed_dataloader_code_runs_as_pasted_into_a_fresh_script():
    """Its import was a comment: pasted alone, the code failed with NameError."""
    scope: dict = {"dataset": list(range(10))}
    exec(dataloader_code(LoaderConfig(0, 4), train=False), scope)  # no DataLoader given: the code imports it
    assert [len(b) for b in scope["loader"]] == [4, 4, 2]


def test_a_tiny_sweep_runs_end_to_end(image_folder, tmp_path, capsys):
    status = main(["tune", str(image_folder), "--knobs", "num_workers", "--workers", "0,1",
                   "--batch-sizes", "8", "--size", "32", "--time-per-config", "0.2", "--kit", "torch",
                   "--out", str(tmp_path)])
    out, err = capsys.readouterr()
    assert status == 0, out[-3000:] + err[-3000:]
    code = re.search(r"```python\n(.*?)```", out, re.S)[1]
    kwargs = _run_code(code)
    # num_workers=0 loads while the step waits: never recommended where workers ran
    assert kwargs["batch_size"] == 8 and kwargs["shuffle"] is True and kwargs["num_workers"] == 1
    assert "[tune] 1. workers=1" in err and "\r" not in err
    (result,) = tmp_path.glob("tune-train-*.json")
    doc = json.loads(result.read_text())
    # the start (1 worker), 0 workers, the start again: three processes, then the kit's torch backend
    assert [r["shown"] for r in doc["sweep"]] == ["start", "num_workers=0", "num_workers=1", "start again"]
    assert doc["noise"] is not None
    assert all(r["check"] == "ok" and r["images"] == 40 and r["epochs"] >= 3 for r in doc["sweep"])
    assert doc["kit"][0]["loader"] == "kit-torch" and doc["kit"][0]["check"] == "ok"
    assert set(doc["gains"]) == {"num_workers"} and doc["gains"]["num_workers"]["best"] == 1
    assert doc["ratio_to_baseline"]["kit-torch vs best DataLoader"] > 0
    assert result.with_suffix(".md").exists()
    assert result.with_suffix(".png").read_bytes()[:8] == PNG


def test_bad_options_are_one_line_errors(image_folder, tmp_path, capsys):
    assert main(["tune", str(image_folder), "--batch-sizes", "8,x", "--out", str(tmp_path)]) == 2
    assert "--batch-sizes" in capsys.readouterr().err
    assert main(["tune", str(image_folder), "--knobs", "threads", "--out", str(tmp_path)]) == 2
    assert "--knobs" in capsys.readouterr().err


def test_shards_sweep_the_kit_torch_loader_and_print_its_code(image_folder, tmp_path, capsys):
    shards = tmp_path / "wds"
    assert main(["convert", str(image_folder), str(shards), "--format", "webdataset"]) == 0
    status = main(["tune", str(shards), "--workers", "0,1", "--batch-sizes", "8", "--size", "32",
                   "--time-per-config", "0.2", "--kit", "", "--start-repeats", "1", "--out", str(tmp_path / "out")])
    out, err = capsys.readouterr()
    assert status == 0, out[-3000:] + err[-3000:]
    # No ImageFolder to build a DataLoader on: the kit's loader is swept, over its own knobs.
    assert "sweeping the kit's torch loader, whose knobs are num_workers and batch_size" in out
    (result,) = (tmp_path / "out").glob("tune-train-*.json")
    doc = json.loads(result.read_text())
    assert [r["shown"] for r in doc["sweep"]] == ["start", "num_workers=0", "num_workers=1", "batch_size=8"]
    assert all(r["check"] == "ok" and r["images"] == 40 and r["epochs"] >= 3 for r in doc["sweep"])
    assert "best kit torch loader vs start" in doc["ratio_to_baseline"]
    code = re.search(r"```python\n(.*?)```", out, re.S)[1]
    scope: dict = {}
    exec(code, scope)  # the recommended loader, built as pasted, reads the shards
    loader = scope["loader"]
    assert loader.backend == "torch" and len(loader.samples) == 40 and sum(len(y) for _, y in loader) == 40
    assert "size=32," in code and next(iter(loader))[0].shape[-2:] == (32, 32)  # what was measured


def test_nothing_is_recommended_when_no_configuration_ran(tmp_path, capsys):
    args = ["--knobs", "num_workers", "--workers", "0", "--batch-sizes", "8", "--size", "32", "--time-per-config",
            "0.2", "--kit", "", "--start-repeats", "1", "--out", str(tmp_path / "out")]
    (tmp_path / "empty").mkdir()  # refused before the sweep, in one line
    assert main(["tune", str(tmp_path / "empty"), *args]) == 2
    out, err = capsys.readouterr()
    assert err.startswith("gpufeed: error: image root") and "has no class folders" in err and not out
    # Every configuration fails (the only image is not one): no code is recommended.
    (tmp_path / "broken" / "cat").mkdir(parents=True)
    (tmp_path / "broken" / "cat" / "a.jpg").write_bytes(b"not a jpeg")
    status = main(["tune", str(tmp_path / "broken"), *args])
    out, err = capsys.readouterr()
    assert status == 2 and "no configuration ran" in err
    assert "Recommended configuration" not in out and not (tmp_path / "out").exists()


def test_a_loader_without_workers_is_not_recommended_for_training():
    from gpufeed.bench.tune import _in_background

    # Alone, 0 workers ran fastest (no hand-over between processes): in training it loads
    # each batch while the step waits.
    assert _in_background("num_workers", {0: 3056.0, 2: 1111.0, 4: 1000.0}) == [2, 4]
    assert _in_background("num_workers", {0: 3056.0, 2: 0.0}) == [0, 2]  # no configuration with workers ran
    assert _in_background("batch_size", {32: 1.0, 64: 2.0}) == [32, 64]
