"""The example training script runs a few steps with each loader (in its own process,
as a user runs it)."""

import subprocess
import sys
from pathlib import Path

import pytest

from tests.pipelines.test_loader_contract import BACKENDS

SCRIPT = Path(__file__).resolve().parents[1] / "examples" / "train_resnet18.py"


def run_example(*args: str) -> str:
    out = subprocess.run([sys.executable, str(SCRIPT), "--steps", "3", "--batch-size", "8", "--size", "32", *args],
                         capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr[-2000:]
    return out.stdout


@pytest.mark.parametrize("backend", BACKENDS)
def test_example_trains_a_few_steps(image_folder, backend):
    out = run_example("--backend", backend, "--data", str(image_folder), "--workers", "2")
    assert f"loader: {backend}" in out
    assert "step   2  loss" in out and "trained 3 steps, 24 images" in out
    # It ends with the stall meter's report of the same loop.
    assert "stall report: " in out and "waiting for data" in out and "<- the stall" in out


@pytest.mark.parametrize("backend", [b for b in BACKENDS if "dali" in str(b)])
def test_example_runs_on_dalis_own_classification_iterator(image_folder, backend):
    out = run_example("--backend", "dali", "--dali-iterator", "--data", str(image_folder))
    assert "trained 3 steps" in out


@pytest.mark.parametrize("backend", [b for b in BACKENDS if "dali" in str(b)])
def test_example_reports_files_skipped_by_dalis_iterator(image_folder, tmp_path, backend):
    import shutil

    data = tmp_path / "train"
    shutil.copytree(image_folder, data)
    (data / "class_000" / "empty.jpg").write_bytes(b"")
    out = run_example("--backend", "dali", "--dali-iterator", "--data", str(data))
    assert "skipped 1 files" in out and "empty.jpg (empty file" in out


DDP_SCRIPT = SCRIPT.parent / "train_ddp.py"


@pytest.mark.slow
def test_ddp_example_runs_on_one_process_without_torchrun(image_folder, tmp_path):
    # torchrun's launches (2 processes, resume) are in tests/pipelines/test_distributed.py
    out = subprocess.run([sys.executable, str(DDP_SCRIPT), "--data", str(image_folder), "--backend", "torch",
                          "--model", "tiny", "--epochs", "1", "--batch-size", "8", "--size", "32",
                          "--workers", "0", "--checkpoint", str(tmp_path / "ckpt")],
                         capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr[-2000:]
    assert "rank 0/1: torch loader, 5 batches per epoch" in out.stdout and "trained 5 steps" in out.stdout
    assert (tmp_path / "ckpt" / "rank0.pt").is_file()


@pytest.mark.parametrize("backend", [b for b in BACKENDS if "dali" in str(b)])
def test_example_on_dalis_own_shard_readers_ends_cleanly(image_folder, tmp_path, backend):
    # It trained, printed the stall report, then failed on the reader iterator's missing
    # skipped-file list (DALI's own readers check no bytes).
    from gpufeed.datasets.shards.convert import convert

    convert(str(image_folder), str(tmp_path / "wds"), format="webdataset")
    out = run_example("--backend", "dali", "--dali-iterator", "--data", str(tmp_path / "wds"))
    assert "trained 3 steps" in out and "stall report: " in out


TABULAR_SCRIPT = SCRIPT.parent / "train_tabular.py"


def test_tabular_example_trains_on_polars_and_pandas_alike(tmp_path):
    # The table story end to end on the generated transactions table: read, downcast, split by
    # time, fit, save, reload, transform, one epoch; the same numbers on either CPU backend.
    from gpufeed.gpu_transforms.tabular import Categorify, Recipe

    metrics = {}
    for backend in ("polars", "pandas"):
        recipe = tmp_path / f"recipe-{backend}.json"
        out = subprocess.run([sys.executable, str(TABULAR_SCRIPT), "--rows", "400", "--epochs", "1", "--batch-size",
                              "64", "--device", "cpu", "--backend", backend, "--recipe-out", str(recipe)],
                             capture_output=True, text=True, timeout=300)
        assert out.returncode == 0, out.stderr[-2000:]
        assert f"400 rows x 20 columns on {backend}" in out.stdout
        assert "by-time (timestamp) split of 400 rows: train 320 (80.0%), val 80 (20.0%)" in out.stdout
        line = out.stdout.strip().splitlines()[-1]
        assert line.startswith("metrics: train_loss="), out.stdout
        metrics[backend] = dict(kv.split("=") for kv in line.removeprefix("metrics: ").split())
        assert set(metrics[backend]) == {"train_loss", "train_acc", "val_loss", "val_acc", "data_rows_per_s",
                                         "step_rows_per_s"}
        assert 0 <= float(metrics[backend]["val_acc"]) <= 1
        loaded = Recipe.load(recipe)  # the saved recipe is what serving loads
        assert loaded.fitted
        assert any(isinstance(op, Categorify) and "channel" in op.columns for op in loaded.ops)
    for key in ("train_loss", "train_acc", "val_loss", "val_acc"):
        assert float(metrics["polars"][key]) == pytest.approx(float(metrics["pandas"][key]), abs=1e-3), key


def test_tabular_example_regression_on_a_csv_without_time(tmp_path):
    # Random split, a regression target standardised by the recipe, RMSE in the target's units.
    from gpufeed.datasets.tables import write_table
    from gpufeed.datasets.transactions import iter_transaction_chunks

    table = next(iter_transaction_chunks(300, 65_536)).head(300).drop(columns=["timestamp"])
    write_table(table, tmp_path / "t.csv")
    out = subprocess.run([sys.executable, str(TABULAR_SCRIPT), "--data", str(tmp_path / "t.csv"), "--target",
                          "amount", "--task", "regression", "--drop", "label", "--epochs", "1", "--device", "cpu",
                          "--backend", "pandas"],
                         capture_output=True, text=True, timeout=300, cwd=tmp_path)
    assert out.returncode == 0, out.stderr[-2000:]
    assert "random split of" in out.stdout and "val_rmse=" in out.stdout.strip().splitlines()[-1]
    # By default the recipe goes into the results folder git ignores, named in full (it
    # had landed in the working directory, a checkout's root).
    saved = tmp_path / "gpufeed-results" / "tabular_recipe.json"
    assert saved.is_file() and f"saved to {saved.resolve()};" in out.stdout
    # the label reaches the model as a float32 target (no longer as the last feature), and the
    # RMSE is in dollars through recipe.inverse (amounts spread by tens of dollars, not ~1 as z-scores)
    assert "training on cpu: " in out.stdout and ", 1 outputs" in out.stdout
    metrics = dict(kv.split("=") for kv in out.stdout.strip().splitlines()[-1].removeprefix("metrics: ").split())
    assert float(metrics["val_rmse"]) > 5


def test_tabular_example_label_encodes_a_text_target(tmp_path):
    # A text target through Categorify got classes 2, 3, ... (0, 1 reserved): two outputs never
    # trained. LabelEncode gives 0..K-1, and the model has K outputs.
    from gpufeed.gpu_transforms.tabular import LabelEncode, Recipe

    recipe = tmp_path / "r.json"
    out = subprocess.run([sys.executable, str(TABULAR_SCRIPT), "--rows", "400", "--epochs", "1", "--device", "cpu",
                          "--backend", "polars", "--target", "payment_method", "--recipe-out", str(recipe)],
                         capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr[-2000:]
    loaded = Recipe.load(recipe)
    assert isinstance(loaded.ops[-1], LabelEncode) and loaded.ops[-1].columns == ["payment_method"]
    assert f", {loaded.num_classes('payment_method')} outputs" in out.stdout
    assert "val_acc=" in out.stdout.strip().splitlines()[-1]


def test_tabular_example_refuses_an_integer_amount_as_classes(tmp_path):
    # R's Salaries: --target salary (integers up to 231,545) without --task regression had
    # trained a 231,546-output classifier on 318 rows, to an accuracy of 0.
    data = tmp_path / "salaries.csv"
    data.write_text("rank,years,salary\n" + "".join(f"{'AB'[i % 2]},{i % 40},{50000 + 997 * i}\n" for i in range(60)))
    out = subprocess.run([sys.executable, str(TABULAR_SCRIPT), "--data", str(data), "--target", "salary", "--device",
                          "cpu", "--backend", "pandas", "--recipe-out", str(tmp_path / "r.json")],
                         capture_output=True, text=True, timeout=300)
    assert out.returncode == 2 and "Traceback" not in out.stderr, out.stderr[-2000:]
    last = out.stderr.strip().splitlines()[-1]
    assert "--target 'salary' holds integers up to 10" in last
    assert last.endswith("classes for 48 training rows, not classes: pass --task regression, or --above X")


@pytest.mark.parametrize("script, args, message", [
    (SCRIPT, ["--batch-size", "0"], "--batch-size must be >= 1, got 0"),
    (SCRIPT, ["--data", "{missing}"], "image root {missing} does not exist"),
    (DDP_SCRIPT, ["--epochs", "0"], "--epochs must be >= 1, got 0"),
    (TABULAR_SCRIPT, ["--epochs", "0"], "--epochs must be >= 1, got 0"),
    (TABULAR_SCRIPT, ["--data", "{missing}.csv"], "{missing}.csv: no such file"),
    (TABULAR_SCRIPT, ["--rows", "100", "--target", "amount"],
     "--target 'amount' holds Float64, not classes: pass --task regression, or --above X"),
    (DDP_SCRIPT, ["--stop-after", "0", "--checkpoint", "{missing}"], "--stop-after must be >= 1, got 0"),
])
def test_examples_refuse_bad_values_in_one_line(tmp_path, script, args, message):
    # A zero batch size or a missing folder ended in a 14-76 line traceback.
    missing = str(tmp_path / "nowhere")
    out = subprocess.run([sys.executable, str(script), *[a.format(missing=missing) for a in args]],
                         capture_output=True, text=True, timeout=300)
    assert out.returncode == 2 and "Traceback" not in out.stderr, out.stderr[-2000:]
    assert out.stderr.strip().splitlines()[-1].endswith(message.format(missing=missing))


def test_tabular_example_names_an_empty_split_and_keeps_distinct_unsorted_integers(tmp_path):
    # One date in the time column: the split by time gave train no row (only a warning), and the
    # script then failed far away ("no feature columns", or a TypeError). And any integer
    # column of distinct values was left out as "a row id": prices in cents too.
    import numpy as np
    import pandas as pd

    from gpufeed.datasets.tables import write_table

    rng = np.random.default_rng(0)
    table = pd.DataFrame({"day": pd.Timestamp("2024-01-01"), "x": rng.random(200),
                          "price_cents": rng.permutation(200) * 7 + 100, "label": rng.integers(0, 2, 200)})
    write_table(table, tmp_path / "oneday.csv")
    base = [sys.executable, str(TABULAR_SCRIPT), "--data", str(tmp_path / "oneday.csv"), "--epochs", "1",
            "--device", "cpu", "--recipe-out", str(tmp_path / "r.json")]
    out = subprocess.run(base, capture_output=True, text=True, timeout=300)
    assert out.returncode == 2 and "the train split has no row (200 rows" in out.stderr, out.stderr[-2000:]
    assert "pass --split random" in out.stderr
    out = subprocess.run([*base, "--split", "random"], capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr[-2000:]
    assert "price_cents" not in next((line for line in out.stdout.splitlines() if line.startswith("left out")), "")
    assert "2 numeric" in out.stdout


def test_a_diverging_run_ends_in_one_line_saying_what_to_lower(image_folder):
    out = subprocess.run([sys.executable, str(SCRIPT), "--steps", "3", "--batch-size", "8", "--size", "32",
                          "--backend", "torch", "--data", str(image_folder), "--lr", "1e12"],
                         capture_output=True, text=True, timeout=300)
    assert out.returncode == 1 and "Traceback" not in out.stderr, out.stderr[-2000:]
    assert "training diverged; lower --lr (now 1e+12)" in out.stderr.strip().splitlines()[-1]
