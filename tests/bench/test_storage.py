"""`gpufeed bench storage`: what the simulated remote charges, the page-cache check, the
targets' bookkeeping, and a tiny run end to end (no timing asserted)."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
import torch

from gpufeed.backends import dali_installed
from gpufeed.bench.storage import (
    BASELINE,
    FORMATS,
    CountingRemote,
    contender_names,
    evaluate_targets,
    page_cache_check,
)
from gpufeed.cli import main
from gpufeed.datasets.storage import SimulatedRemote, drop_page_cache
from gpufeed.pipelines.sources import scan_image_folder


def test_a_folder_read_costs_one_open_per_file(image_folder):
    remote = SimulatedRemote(open_latency_ms=0.0)
    source = scan_image_folder(image_folder, storage=remote)
    for i in range(len(source)):
        source.read(i)
    assert remote.opens == len(source) == len(source.files)
    assert remote.bytes == sum(os.path.getsize(p) for p in source.files)
    # Dropped pages change where the bytes come from, not what an open costs.
    assert drop_page_cache(source.files) == remote.bytes
    for i in range(len(source)):
        source.read(i)
    assert remote.opens == 2 * len(source)


def test_a_shard_read_costs_one_open_per_shard(image_folder, tmp_path):
    from gpufeed.datasets.shards import open_converted
    from gpufeed.datasets.shards.convert import convert

    dst = tmp_path / "wds"
    convert(image_folder, dst, format="webdataset", shard_size="64KB", progress=False)
    remote = SimulatedRemote(open_latency_ms=0.0)
    source = open_converted(dst, storage=remote)
    for i in range(len(source)):  # in index order: each shard is opened once and kept open
        source.read(i)
    assert len(source) == len(scan_image_folder(image_folder))
    assert remote.opens == len(source.files) > 1
    assert drop_page_cache(source.files) == sum(os.path.getsize(p) for p in source.files)


class _Reads(torch.utils.data.Dataset):
    def __init__(self, paths: list[str], storage: CountingRemote) -> None:
        self.paths, self.storage = paths, storage

    def __len__(self) -> int:
        return len(self.paths)

    def __getitem__(self, i: int) -> int:
        return len(self.storage.read_file(self.paths[i]))


def test_counts_add_up_over_dataloader_workers(image_folder):
    paths = scan_image_folder(image_folder).files
    remote = CountingRemote(open_latency_ms=0.0)
    sizes = list(torch.utils.data.DataLoader(_Reads(paths, remote), batch_size=None, num_workers=2,
                                             multiprocessing_context="fork"))
    assert remote.opens == 0  # every read happened in a worker ...
    assert remote.totals() == (len(paths), sum(sizes))  # ... and was counted here


def test_each_epoch_reopens_what_the_last_one_kept_open(image_folder):
    path = scan_image_folder(image_folder).files[0]
    remote = CountingRemote(open_latency_ms=0.0)
    remote.read_at(path, 0, 8)
    remote.read_at(path, 8, 8)  # a shard's handle stays open within an epoch ...
    assert remote.totals() == (1, 16)
    remote.new_epoch()
    remote.read_at(path, 0, 8)  # ... and is opened again, and charged, in the next
    assert remote.totals() == (2, 24)


def test_page_cache_check_reports_how_it_judged(image_folder):
    check = page_cache_check(scan_image_folder(image_folder).files, sample=10)
    assert check["files"] == 10 and check["method"] in ("mincore", "read time")
    assert isinstance(check["works"], bool) and check["warm_read_s"] > 0
    if check["method"] == "mincore" and check["works"]:
        assert check["resident_dropped"] < 0.1


def _row(condition: str, name: str, rate: float | None) -> dict:
    return {"condition": condition, "name": name, "verdict": "ok", **({"rate": rate} if rate else {})}


def test_targets_are_met_missed_or_not_measured():
    rows = [_row("remote", "torch-cpu/folder", 10.0), _row("remote", "torch-cpu/webdataset", 120.0),
            _row("remote", "torch-cpu/tfrecord", 50.0), _row("warm", "torch-cpu/folder", 100.0),
            _row("warm", "torch-cpu/webdataset", 96.0), _row("warm", BASELINE, 40.0),
            _row("warm", "torch-cpu/raw", 150.0)]
    rows.append({"condition": "warm", "name": "torch-cpu/tfrecord", "skipped": "conversion failed: x"})
    got = {(t["condition"], t["contender"]): t for t in evaluate_targets(rows, ["torch-cpu"], 20.0)}
    assert got[("remote", "torch-cpu/webdataset")]["status"] == "met"
    assert got[("remote", "torch-cpu/webdataset")]["ratio"] == pytest.approx(12.0)
    assert got[("remote", "torch-cpu/tfrecord")]["status"] == "missed"
    assert got[("warm", "torch-cpu/webdataset")]["status"] == "met"  # 0.96: within the noise allowance
    assert got[("warm", "torch-cpu/tfrecord")]["status"] == "not measured"
    assert "conversion failed" in got[("warm", "torch-cpu/tfrecord")]["detail"]
    assert got[("warm", "torch-cpu/raw")]["status"] == "missed"  # 3.75x < 5x
    assert "150 vs 40 images/s" in got[("warm", "torch-cpu/raw")]["detail"]
    # A shard format the run left out (--formats) is no target of it, not "not measured".
    only_wds = [r for r in rows if not r["name"].endswith("/tfrecord")]
    contenders = {t["contender"] for t in evaluate_targets(only_wds, ["torch-cpu"], 20.0)}
    assert "torch-cpu/webdataset" in contenders and "torch-cpu/tfrecord" not in contenders


@pytest.mark.slow
def test_tiny_run_writes_every_contender_and_the_targets(image_folder, tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("GPUFEED_CACHE", str(tmp_path / "cache"))  # conversions go here, not in ~/.cache
    out = tmp_path / "out"
    status = main(["bench", "storage", "--data", str(image_folder), "--storage", "warm", "remote",
                   "--backends", "torch-cpu", "--repeats", "1", "--batch-size", "8", "--size", "32",
                   "--raw-size", "48", "--shard-size", "100KB", "--workers", "1", "--open-latency-ms", "1",
                   "--out", str(out)])
    err = capsys.readouterr().err
    assert status == 0, err[-3000:]
    (json_path,) = out.glob("storage-*.json")
    doc = json.loads(json_path.read_text())
    rows = {(r["condition"], r["name"]): r for r in doc["rows"]}
    expected = contender_names(list(FORMATS), ["torch-cpu"])
    assert set(rows) == {(c, n) for c in ("warm", "remote") for n in expected}
    for (condition, name), row in rows.items():
        fmt = name.split("/")[1]
        assert row["verdict"] == "ok", row
        assert row["check"]["samples"] == 40 and row["rate"] > 0
        if condition == "remote" and not fmt.endswith("+ram"):
            assert row["mb_per_epoch"] > 0
            # The raw cache maps its one file once per process; the others open every epoch.
            assert row["opens_per_epoch"] >= (0 if fmt == "raw" else 1), row
    assert rows[("remote", BASELINE)]["opens_per_epoch"] == 40  # one per file, counted over the workers
    assert rows[("remote", "torch-cpu/folder")]["opens_per_epoch"] == 40
    assert {t["status"] for t in doc["targets"]} <= {"met", "missed", "not measured"} and doc["targets"]
    assert doc["setup"]["page_cache"]["method"] in ("mincore", "read time")
    md = Path(json_path.with_suffix(".md")).read_text()
    assert "### Targets" in md and "### warm" in md and "### remote" in md and "opens/epoch" in md
    for name in expected:
        assert f"| {name} |" in md


def test_dalis_own_readers_run_with_dali_only_and_never_behind_the_simulated_store():
    names = contender_names(["webdataset", "webdataset+reader", "tfrecord+reader"], ["torch-cpu", "dali-cpu"])
    assert names == [BASELINE, "torch-cpu/webdataset", "dali-cpu/webdataset", "dali-cpu/webdataset+reader",
                     "dali-cpu/tfrecord+reader"]


@pytest.mark.slow
@pytest.mark.skipif(not dali_installed(), reason="no DALI")
def test_dalis_own_shard_readers_are_timed_warm_and_left_out_under_remote(image_folder, tmp_path, monkeypatch,
                                                                         capsys):
    monkeypatch.setenv("GPUFEED_CACHE", str(tmp_path / "cache"))
    out = tmp_path / "out"
    status = main(["bench", "storage", "--data", str(image_folder), "--storage", "warm", "remote",
                   "--formats", "webdataset+reader", "tfrecord+reader", "--backends", "dali-cpu", "--repeats", "1",
                   "--batch-size", "8", "--size", "32", "--shard-size", "100KB", "--workers", "1",
                   "--open-latency-ms", "1", "--out", str(out)])
    err = capsys.readouterr().err
    assert status == 0, err[-3000:]
    (json_path,) = out.glob("storage-*.json")
    rows = {(r["condition"], r["name"]): r for r in json.loads(json_path.read_text())["rows"]}
    for fmt in ("webdataset+reader", "tfrecord+reader"):
        warm = rows[("warm", f"dali-cpu/{fmt}")]
        assert warm["verdict"] == "ok" and warm["check"]["samples"] == 40 and warm["rate"] > 0, warm
        assert "DALI's reader opens the files itself" in rows[("remote", f"dali-cpu/{fmt}")]["skipped"]


def test_dalis_own_readers_without_a_dali_backend_are_refused_by_name(image_folder, tmp_path, capsys):
    assert main(["bench", "storage", "--data", str(image_folder), "--formats", "webdataset+reader",
                 "--backends", "torch-cpu", "--out", str(tmp_path)]) == 2
    assert "--formats webdataset+reader: DALI's own readers run on the DALI backends only" in capsys.readouterr().err


def test_the_report_describes_only_the_conditions_it_measured_and_counts_opens_whole():
    # A warm-only run described cold and remote too, and opens/epoch read "64.00".
    from gpufeed.bench.storage import _markdown

    setup = {"remote": {"bandwidth_mb_s": 0, "open_latency_ms": 20}, "files": 8, "mean_file_kib": 10.0,
             "classes": 2, "batch_size": 4, "size": 32, "workers": 1, "device": "cpu", "repeats": 1,
             "conditions": ["warm"], "formats": []}
    row = {"name": "torch-pil/folder", "condition": "warm", "rate": 10.0, "ratio": 1.0, "shown": "ok"}
    text = _markdown([row], [], {}, setup, "")
    assert "- warm: files in the page cache." in text and "- cold:" not in text and "- remote:" not in text
