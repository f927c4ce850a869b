"""The command line: doctor, data generation and a small images benchmark end to end."""

import json
import re
import subprocess
import sys
import time
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


def test_doctor_names_gpufeeds_own_version_and_commit(capsys):
    """"Paste it into a bug report": it named torch, DALI, cuDF ... but not gpufeed."""
    from importlib.metadata import version

    from gpufeed.bench.provenance import source_commit

    assert main(["doctor", "--json"]) == 0
    own = json.loads(capsys.readouterr().out)["gpufeed"]
    commit = source_commit()  # the same answer as every result's metadata
    assert own == {"version": version("gpufeed"), "commit": commit.commit, "commit_note": commit.note}
    assert main(["doctor"]) == 0
    assert f"  gpufeed  {version('gpufeed')}, commit {commit.text(markdown=False)}" in capsys.readouterr().out


def test_doctor_and_results_tell_cpus_of_one_name_apart(tmp_path, monkeypatch, capsys):
    """Two 2-core boxes both named "AMD EPYC", one with AVX-512 and one without, gave
    numpy's log 6x apart: the family, model and widest vector extension are recorded."""
    from gpufeed import machine

    cpuinfo = tmp_path / "cpuinfo"
    cpuinfo.write_text("processor\t: 0\nvendor_id\t: AuthenticAMD\ncpu family\t: 25\nmodel\t\t: 17\n"
                       "model name\t: AMD EPYC\nflags\t\t: fpu sse4_2 avx avx2 avx512f avx512bw\n\n"
                       "processor\t: 1\nmodel name\t: other\nflags\t\t: fpu\n")
    real = machine.Path
    monkeypatch.setattr(machine, "Path", lambda p: real(cpuinfo) if p == "/proc/cpuinfo" else real(p))
    assert machine.cpu_model() == "AMD EPYC"  # the first processor's, not the last's
    assert machine.cpu_details() == {"family": 25, "model_number": 17, "simd": "AVX-512"}
    assert main(["doctor"]) == 0
    assert "  CPU      AMD EPYC (family 25 model 17, AVX-512), " in capsys.readouterr().out
    cpuinfo.write_text("model name\t: AMD EPYC\ncpu family\t: 25\nmodel\t\t: 1\nflags\t\t: sse4_2 avx avx2\n")
    assert machine.cpu_text({"cpu_model": machine.cpu_model(), "cpu_details": machine.cpu_details(),
                             "cpu_count": 2}) == "AMD EPYC (family 25 model 1, AVX2) × 2"
    assert machine.cpu_text({"cpu_model": "AMD EPYC", "cpu_count": 2}) == "AMD EPYC × 2"  # an older result


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
    # The result in one line above the table, and what each ratio column divides by.
    assert re.search(r"\*\*Fastest: `(dali-cpu|torch-cpu)` at \d+\.\d\d× `torch-pil`\*\* \(\d+ against \d+ images/s",
                     out.stdout), out.stdout[-3000:]
    assert "Ratios are images/s over another pipeline's (above 1: faster)" in out.stdout
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
    # The line after the run names every file written: the PNG figure too, not only JSON and .md.
    (line,) = [ln for ln in out.stdout.splitlines() if ln.startswith("results: ")]
    assert doc["figures"] and sorted(p.name for p in tmp_path.iterdir()) == sorted(
        [result.name, result.with_suffix(".md").name, *doc["figures"]])
    assert all(p.name in line for p in tmp_path.iterdir()), line


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



@pytest.fixture
def nothing_runs(monkeypatch):
    """A command that gets past its arguments fails the test at once, instead of running a
    benchmark for minutes before it meets the bad path."""
    import gpufeed.cli as cli

    def ran(args):
        pytest.fail(f"ran {args.command} with arguments that should have been refused")

    monkeypatch.setattr(cli, "_run", ran)


def _usage_error(argv, capsys) -> str:
    """The one ``gpufeed: error:`` line of a usage error (exit 2) raised while parsing."""
    with pytest.raises(SystemExit) as exc:
        main(argv)
    err = capsys.readouterr().err
    assert exc.value.code == 2, err
    assert "Traceback" not in err and "Errno" not in err, err
    return err.strip().splitlines()[-1]


_PROC = Path("/proc/self").exists()


@pytest.mark.parametrize("command", [["bench"], ["bench", "images"], ["bench", "tabular"], ["bench", "all"],
                                     ["tune"], ["stall"]])
@pytest.mark.parametrize("bad", ["file", "under a file", "proc"])
def test_an_unusable_out_is_refused_before_anything_runs(command, bad, tmp_path, capsys, nothing_runs):
    """`--out /proc/x` ran a 112 s benchmark before [Errno 2]; `--out afile.txt` [Errno 17]."""
    if bad == "proc" and not _PROC:
        pytest.skip("no /proc here")
    (tmp_path / "afile.txt").write_text("notes")
    out = {"file": tmp_path / "afile.txt", "under a file": tmp_path / "afile.txt" / "sub",
           "proc": Path("/proc/gpufeed-results")}[bad]
    started = time.monotonic()
    line = _usage_error([*command, "--out", str(out)], capsys)
    assert time.monotonic() - started < 5
    why = {"file": "exists and is not a folder", "under a file": "is a file, not a folder",
           "proc": "cannot create the folder"}[bad]
    assert line.startswith(f"gpufeed: error: argument --out: {out}: ") and why in line, line


def test_a_new_out_is_accepted_and_left_for_the_command_to_create(tmp_path):
    from gpufeed.arguments import results_folder

    out = tmp_path / "new" / "results"
    assert results_folder(str(out)) == str(out)
    assert not (tmp_path / "new").exists()  # a run refused later for another reason leaves nothing


@pytest.mark.parametrize("argv, message", [
    (["data", "images", "{file}"], "argument OUT: {file}: exists and is not a folder"),
    (["convert", "{src}", "{file}", "--format", "raw"], "argument DST: {file}: exists and is not a folder"),
    (["data", "sensor", "{file}/t.parquet"], "argument OUT: {file}/t.parquet: {file} is a file, not a folder"),
    (["data", "transactions", "{src}"], "argument OUT: {src}: must end in .parquet or .csv"),
    pytest.param(["data", "sensor", "/proc/out.parquet"], "argument OUT: /proc/out.parquet: cannot write into /proc",
                 marks=pytest.mark.skipif(not _PROC, reason="no /proc here")),
])
def test_unusable_output_paths_of_data_and_convert_are_usage_errors(argv, message, tmp_path, capsys,
                                                                    nothing_runs):
    """`data images afile.txt` printed "generating…" then [Errno 20]; `convert SRC afile.txt`
    [Errno 17]; `data sensor /proc/out.parquet` an Arrow error on `.partial`."""
    names = {"file": str(tmp_path / "afile.txt"), "src": str(tmp_path)}
    (tmp_path / "afile.txt").write_text("notes")
    line = _usage_error([a.format(**names) for a in argv], capsys)
    assert line.startswith("gpufeed: error: " + message.format(**names)), line


@pytest.mark.parametrize("argv, message", [
    (["bench", "tabular", "--parts", "recip"], "argument --parts: unknown 'recip'; choose from rule, recipe, downcast"),
    (["bench", "tabular", "--tables", "sensor,logs"], "argument --tables: unknown 'logs'"),
    (["bench", "tabular", "--rows", "1000,0"], "argument --rows: must be >= 1, got 0"),
    (["bench", "formats", "no_such.csv"], "argument FILE: no_such.csv: no such file"),
    (["bench", "formats", "--formats", "csv,xls"], "argument --formats: unknown format(s) ['xls']"),
    # a typo'd backend had failed in every format's process, and the run exited 0
    (["bench", "formats", "--backend", "polar"], "argument --backend: invalid choice: 'polar'"),
    # a typo'd device had been found by each suite in turn, after the others ran for minutes
    (["bench", "all", "--device", "gpu"], "argument --device: 'gpu': choose from auto, cpu, cuda, cuda:N"),
    (["stall", "--device", "cuda0"], "argument --device: 'cuda0': choose from auto, cpu, cuda, cuda:N"),
    # a bad shard size had been found by each conversion, after a whole benchmark ran
    (["bench", "storage", "--shard-size", "0"], "argument --shard-size: must be at least 1 byte, got '0'"),
    (["convert", "a", "b", "--format", "webdataset", "--shard-size", "1XB"], "argument --shard-size: not a size: '1XB'"),
    (["bench", "all", "--suites", "images"], "argument --suites: unknown 'images'; choose from images-train"),
    (["bench", "tabular", "--tables", "{file}"], "argument --tables: {file}: cannot tell the format from the suffix"),
    (["bench", "formats", "--work-dir", "{file}"], "argument --work-dir: {file}: exists and is not a folder"),
])
def test_bad_suite_arguments_are_usage_errors_not_exit_1(argv, message, tmp_path, monkeypatch, capsys,
                                                         nothing_runs):
    """`--parts recip` and a missing formats file exited 1 without the `gpufeed: error:` prefix."""
    monkeypatch.chdir(tmp_path)
    (tmp_path / "notes.txt").write_text("not a table")
    argv = [a.format(file="notes.txt") for a in argv]
    assert _usage_error(argv, capsys).startswith(f"gpufeed: error: {message.format(file='notes.txt')}")


@pytest.mark.parametrize("argv, argument", [
    (["bench", "images", "--data", "{missing}"], "--data"),
    (["bench", "storage", "--data", "{missing}"], "--data"),
    (["bench", "all", "--data", "{missing}"], "--data"),
    (["tune", "{missing}"], "DATA"),
    (["bench", "tune", "{missing}"], "DATA"),
    (["stall", "--data", "{missing}"], "--data"),
    (["convert", "{missing}", "{out}", "--format", "raw"], "SRC"),
])
def test_a_missing_input_is_named_in_one_form_by_every_command(argv, argument, tmp_path, capsys, nothing_runs):
    """It read `image root X does not exist`, `X: no such folder` and `--data X: no such
    folder, and no shard file or pattern`, depending on the command."""
    names = {"missing": str(tmp_path / "nowhere"), "out": str(tmp_path / "out")}
    assert main([a.format(**names) for a in argv]) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"gpufeed: error: argument {argument}: {names['missing']}: does not exist"), err
    assert len(err.strip().splitlines()) == 1


def test_a_file_given_as_an_image_folder_is_named(tmp_path, capsys, nothing_runs):
    (tmp_path / "afile.txt").write_text("notes")
    assert main(["bench", "images", "--data", str(tmp_path / "afile.txt")]) == 2
    assert capsys.readouterr().err.startswith(
        f"gpufeed: error: argument --data: {tmp_path / 'afile.txt'}: not a folder")


@pytest.mark.parametrize("argv", [["stall", "--data"], ["tune"], ["bench", "tune"]])
def test_stall_and_tune_take_a_shard_pattern_that_is_no_path(argv, tmp_path, capsys, monkeypatch):
    import gpufeed.cli as cli

    seen = []
    monkeypatch.setattr(cli, "_run", lambda args: seen.append(args.data) or 0)
    pattern = str(tmp_path / "train-{000000..000003}.tar")
    assert main([*argv, pattern, "--out", str(tmp_path / "out")]) == 0 and seen == [pattern]


def test_version_and_help_say_the_defaults(capsys):
    from importlib.metadata import version

    with pytest.raises(SystemExit) as exc:
        main(["--version"])
    assert exc.value.code == 0 and capsys.readouterr().out.strip() == f"gpufeed {version('gpufeed')}"

    def help_of(argv):
        with pytest.raises(SystemExit):
            main([*argv, "--help"])
        return " ".join(capsys.readouterr().out.split())  # unwrapped

    assert "`gpufeed bench [OPTIONS]` runs the images suite" in help_of(["bench"])
    assert "--images IMAGES size of the generated default set (default: 1024)" in help_of(["bench", "images"])
    augment = help_of(["bench", "augment"])
    for option, default in [("--size SIZE", "224"), ("--batches BATCHES", "2"), ("--repeats REPEATS", "5")]:
        assert re.search(rf"{option} [^-]*\(default: {default}\)", augment), option
    tabular = help_of(["bench", "tabular"])
    for option, default in [("--parts PARTS", "rule,recipe,downcast"), ("--tables TABLES", "sensor,transactions"),
                            ("--rows ROWS", "1000000,10000000")]:
        assert re.search(rf"{option} [^-]*\(default: {re.escape(default)}\)", tabular), option
    assert "--images IMAGES number of images (default 1024" in help_of(["data", "images"])


def test_data_images_makes_as_many_images_as_the_benchmarks_by_default():
    from gpufeed.cli import _build_parser

    assert _build_parser(["data", "images"]).parse_args(["data", "images", "x"]).images == 1024


def test_make_bench_writes_an_untracked_folder_unless_told_to_record():
    """`make bench` wrote into the tracked bench/results/, mixing a user's first run with
    the recorded ones (and `bench compare bench/results/ gpufeed-results/` compared it with
    itself)."""
    import shutil

    root = Path(__file__).resolve().parent.parent
    makefile = (root / "Makefile").read_text()
    assert "OUT    ?= gpufeed-results" in makefile and "gpufeed bench --out $(OUT)" in makefile
    assert "gpufeed-results/" in (root / ".gitignore").read_text().splitlines()
    if shutil.which("make"):
        for extra, out in [([], "gpufeed-results"), (["OUT=bench/results"], "bench/results")]:
            dry = subprocess.run(["make", "-n", "--no-print-directory", "-C", str(root), "bench", "VENV=/nonexistent-venv", *extra],
                                 capture_output=True, text=True, timeout=60)
            assert dry.returncode == 0, dry.stderr
            assert dry.stdout.strip().splitlines()[-1] == f"/nonexistent-venv/bin/gpufeed bench --out {out}"


def test_make_install_runs_pip_again_when_the_extras_change(tmp_path):
    """`make install EXTRAS=cuda13` on a venv built with other extras said "Nothing to be
    done": the target depended on pyproject.toml alone."""
    import os
    import shutil

    if not shutil.which("make"):
        pytest.skip("no make here")
    root = Path(__file__).resolve().parent.parent
    venv = tmp_path / "venv"
    (venv / "bin").mkdir(parents=True)
    later = (root / "pyproject.toml").stat().st_mtime + 60
    for made in (venv / "bin" / "python", venv / "bin" / "gpufeed", venv / ".installed-dali-cpu+test"):
        made.write_text("")  # a venv installed with the default extras, after the last pyproject.toml change
        os.utime(made, (later, later))

    def dry(*extra: str) -> str:
        out = subprocess.run(["make", "-n", "--no-print-directory", "-C", str(root), "install", f"VENV={venv}", *extra],
                             capture_output=True, text=True, timeout=60)
        assert out.returncode == 0, out.stderr
        return out.stdout

    assert "pip install" not in dry()  # the same extras: nothing to do
    again = dry("EXTRAS=cuda13,test")
    assert f'{venv}/bin/python -m pip install -e ".[cuda13,test]"' in again and "-m venv" not in again
    assert f"touch {venv}/.installed-cuda13+test" in again


def test_the_build_floor_takes_the_license_as_pyproject_writes_it():
    """`license = "Apache-2.0"` (PEP 639) needs setuptools 77; 68-76 failed the build."""
    tomllib = pytest.importorskip("tomllib")
    root = Path(__file__).resolve().parent.parent
    config = tomllib.loads((root / "pyproject.toml").read_text())
    if isinstance(config["project"].get("license"), str):
        (floor,) = [r for r in config["build-system"]["requires"] if r.startswith("setuptools")]
        assert re.fullmatch(r"setuptools>=(\d+)(\.\d+)*", floor) and int(re.findall(r"\d+", floor)[0]) >= 77, floor


def test_stall_prints_its_header_first_and_a_results_path_as_given(image_folder, tmp_path):
    """In a log its stage lines came before its header, and `results:` named an absolute path
    where the suites name the folder as --out gave it."""
    out = subprocess.run(
        [sys.executable, "-m", "gpufeed", "stall", "--data", str(image_folder), "--model", "tiny", "--loader", "torch",
         "--compare", "pil", "--device", "cpu", "--steps", "2", "--warmup", "0", "--batch-size", "4", "--size", "32",
         "--workers", "1", "--out", "stall-out"],
        cwd=tmp_path, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, timeout=600)  # one log, as `> log 2>&1`
    assert out.returncode == 0, out.stdout[-3000:]
    lines = out.stdout.splitlines()
    header = next(i for i, line in enumerate(lines) if line.startswith("gpufeed stall: tiny"))
    stage = next(i for i, line in enumerate(lines) if line.startswith("[stall] measuring the pil loader alone"))
    assert header < stage, "\n".join(lines[:10])
    (results,) = [line for line in lines if line.startswith("results: ")]
    assert results.startswith("results: stall-out/stall-tiny-torch-"), results


def test_output_piped_into_a_reader_that_stops_early_is_not_an_error():
    # `gpufeed doctor | head -1`: the reader closes the pipe before the report is written.
    proc = subprocess.Popen([sys.executable, "-m", "gpufeed", "doctor"], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE)
    proc.stdout.close()
    err = proc.stderr.read().decode()
    proc.wait(timeout=120)
    assert "Broken pipe" not in err and "Traceback" not in err, err


def test_a_broken_pipe_that_is_not_stdouts_is_reported(monkeypatch, capsys):
    import gpufeed.cli as cli

    def worker_pipe_broke(args):
        raise BrokenPipeError(32, "Broken pipe")

    monkeypatch.setattr(cli, "_run", worker_pipe_broke)
    assert main(["doctor"]) == 2
    assert "gpufeed: error:" in capsys.readouterr().err


@pytest.mark.parametrize("argv, message", [
    (["bench", "formats", "--backend", "cudf"], "--backend cudf: backend='cudf' needs cuDF and a CUDA GPU"),
    (["bench", "formats", "--backend", "polars", "--formats", "csv-pandas"],
     "--formats csv-pandas reads the CSV with pandas.read_csv: it runs with --backend pandas only, not polars"),
])
def test_formats_options_this_run_cannot_honour_are_refused_before_it_starts(argv, message, tmp_path, monkeypatch,
                                                                            capsys):
    if "cudf" in argv:
        from gpufeed.backends import cuda_available, installed

        if installed("cudf") and cuda_available():
            pytest.skip("cuDF runs here")
    monkeypatch.chdir(tmp_path)
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert err.strip() == f"gpufeed: error: {message}" or err.strip().startswith(f"gpufeed: error: {message}"), err
    assert not (tmp_path / "gpufeed-results").exists()  # refused before anything ran or was written


def test_bench_all_with_cuda_where_there_is_none_is_refused_before_any_suite(tmp_path, monkeypatch, capsys):
    from gpufeed.backends import cuda_available

    if cuda_available():
        pytest.skip("CUDA is here")
    monkeypatch.chdir(tmp_path)
    assert main(["bench", "all", "--device", "cuda", "--out", str(tmp_path / "r")]) == 2
    assert "torch sees no CUDA GPU here" in capsys.readouterr().err
    assert not list((tmp_path / "r").glob("*.json")) if (tmp_path / "r").exists() else True


@pytest.mark.parametrize("argv, message", [
    (["tune", "{empty}"], "image root {empty} has no class folders"),
    (["tune", "{empty}", "--batch-sizes", "0,32"], "--batch-sizes: every value must be >= 1, got 0"),
    (["tune", "{empty}", "--knobs", "pin_memory", "--device", "cpu"], "--knobs pin_memory: pinning only speeds up"),
    (["convert", "{listfile}", "{out}", "--format", "webdataset"], "file list {listfile} has no samples"),
])
def test_tune_and_convert_refuse_what_cannot_run_before_running(argv, message, tmp_path, monkeypatch, capsys):
    # An empty folder had failed all 11 configurations (9 s) before "no configuration ran".
    names = {"empty": str(tmp_path / "empty"), "listfile": str(tmp_path / "list.txt"), "out": str(tmp_path / "o")}
    (tmp_path / "empty").mkdir()
    (tmp_path / "list.txt").write_text("")
    monkeypatch.chdir(tmp_path)
    assert main([a.format(**names) for a in argv]) == 2
    assert capsys.readouterr().err.startswith(f"gpufeed: error: {message.format(**names)}")


def test_absurd_counts_are_usage_errors_not_tracebacks_or_hangs(tmp_path, capsys):
    # --images 1e20 overflowed inside the generator; --workers 1e11 hung starting them.
    with pytest.raises(SystemExit) as images:
        main(["data", "images", str(tmp_path / "x"), "--images", "99999999999999999999"])
    with pytest.raises(SystemExit) as workers:
        main(["stall", "--workers", "99999999999"])
    assert images.value.code == workers.value.code == 2
    err = capsys.readouterr().err
    assert "argument --images: must be <= 100,000,000" in err and "argument --workers: must be <= 1,024" in err


def test_bench_formats_names_the_backend_auto_picked(tmp_path):
    # The report read "backend auto", naming no backend.
    from gpufeed.backends import choose_dataframe_backend

    assert main(["bench", "formats", "--rows", "200", "--formats", "csv,parquet", "--backend", "auto",
                 "--repeats", "1", "--warmup", "0", "--data-dir", str(tmp_path / "data"), "--out", str(tmp_path)]) == 0
    md = next(tmp_path.glob("formats-*.md")).read_text()
    assert f"backend {choose_dataframe_backend('auto').name} (auto);" in md
