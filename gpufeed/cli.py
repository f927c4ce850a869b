"""The ``gpufeed`` command line (also ``python -m gpufeed``).

``gpufeed bench [SUITE]`` runs a benchmark suite (``images`` when none is named),
``gpufeed bench all`` runs every suite into one report, ``gpufeed bench compare OLD NEW``
compares two runs, ``gpufeed doctor`` reports the machine and the backend each loader
will pick, ``gpufeed data images|sensor|transactions`` generates synthetic datasets,
``gpufeed tune`` sweeps DataLoader settings on this machine, ``gpufeed convert SRC DST``
writes an image folder as WebDataset or TFRecord shards or a raw cache.
"""

from __future__ import annotations

import argparse
import importlib
import os
import sys
import warnings
from collections.abc import Callable, Sequence
from typing import NoReturn

from gpufeed.arguments import (
    MAX_WORKERS,
    add_training_loop_arguments,
    at_least,
    byte_size,
    output_folder,
    results_folder,
    table_output_file,
)
from gpufeed.bench.provenance import gpufeed_version
from gpufeed.progress import counted

#: Benchmark suites: name -> (module with ``add_arguments(parser)`` and ``run(args) -> int``,
#: its one-line help: the module docstring's first line). Only the suite named on the
#: command line is imported, so `gpufeed doctor` or one suite never loads another's heavy
#: imports (DALI, pandas, matplotlib ...).
BENCH_SUITES = {
    "images": ("gpufeed.bench.images", "Image loaders: the kit's DALI (CPU, GPU) and torch backends against "
                                       "DataLoader + PIL + transforms.v2."),
    "augment": ("gpufeed.bench.augment", "Batch augmentation: the kit's stage against kornia eager and "
                                         "torchvision.transforms.v2."),
    "tabular": ("gpufeed.bench.tabular", "Tabular preprocessing: row rules, the recipe op by op, and downcast "
                                         "memory, per backend."),
    "formats": ("gpufeed.bench.formats", "Storage formats: write time, read time, size on disk and memory in "
                                         "RAM, as ratios to CSV."),
    "tune": ("gpufeed.bench.tune", "DataLoader tuning sweep: the settings that feed this machine fastest, "
                                   "beside the kit's loaders."),
    "storage": ("gpufeed.bench.storage", "Storage formats under warm, cold and simulated-remote storage: "
                                         "folder, WebDataset and TFRecord shards, raw cache, RAM cache."),
    "stalls": ("gpufeed.bench.stalls", "Input stall per loader: the same training loop fed by DataLoader + PIL "
                                       "and by each of the kit's loaders, under the stall meter."),
    "all": ("gpufeed.bench.report", "Every suite into one results folder, with a summary and figures."),
    "compare": ("gpufeed.bench.compare", "Compare two benchmark runs: how each pipeline's ratio to its "
                                         "baseline changed."),
}

#: The most images `gpufeed data images` makes (ImageNet-21k holds 14M): a typo beyond it
#: overflowed deep in the generator with a traceback.
MAX_IMAGES = 100_000_000


class _DefaultsHelp(argparse.HelpFormatter):
    """Help that shows each option's default, ``(default: X)``, where its own text does not
    already say it (the suites' modules write some of them out, not all)."""

    def _get_help_string(self, action: argparse.Action) -> str | None:
        text = action.help or ""
        default = action.default
        says = any(words in text.lower() for words in ("default:", "(default", "%(default)"))
        if (says or default is None or default is argparse.SUPPRESS
                or isinstance(default, bool) or not (action.option_strings or action.nargs in ("?", "*"))):
            return action.help
        return f"{text} (default: %(default)s)"


class _Parser(argparse.ArgumentParser):
    """An argument parser whose usage errors end in one ``gpufeed: error: ...`` line, as the
    errors found while running do, whichever command or suite (sub-parsers inherit it)."""

    def error(self, message: str) -> NoReturn:
        self.print_usage(sys.stderr)
        self.exit(2, f"gpufeed: error: {message}\n")


def _add_suite(parser: argparse.ArgumentParser, module: str) -> None:
    """Give ``parser`` the options and the run of the suite in ``module`` (imported here)."""
    mod = importlib.import_module(module)
    mod.add_arguments(parser)
    parser.set_defaults(_run=mod.run)


#: ``--seed`` of the table generators.
_TABLE_SEED_HELP = "seed of the values (default: 0); the same seed writes the same table"


def _build_parser(chosen: Sequence[str] = ()) -> argparse.ArgumentParser:
    """The command line's parser; ``chosen``: the command and suite named (``["bench",
    "tabular"]``, ``["tune"]``), the only suite whose module is imported for its options."""
    parser = _Parser(prog="gpufeed", description=__doc__.splitlines()[0].replace("``", ""))
    parser.add_argument("--version", action="version", version=f"%(prog)s {gpufeed_version()}")
    sub = parser.add_subparsers(dest="command", required=True)

    bench = sub.add_parser(
        "bench", help="run a benchmark suite (default: images)",
        description="Run a benchmark suite. With no suite named, `gpufeed bench [OPTIONS]` runs the images "
                    "suite (`gpufeed bench images [OPTIONS]`: the kit's image loaders against DataLoader + "
                    "PIL on a generated, cached dataset); `gpufeed bench SUITE --help` lists a suite's options.",
    )
    suites = bench.add_subparsers(dest="suite")
    for name, (module, text) in BENCH_SUITES.items():
        p = suites.add_parser(name, help=text, description=text, formatter_class=_DefaultsHelp)
        if list(chosen[:2]) == ["bench", name]:
            _add_suite(p, module)

    doctor = sub.add_parser(
        "doctor", help="GPU, driver, library versions and backend choices",
        description="What this machine gives the kit: GPU and driver, CUDA as torch sees it, the versions of "
                    "torch, DALI, cuDF, polars and pandas, and which image and table backend 'auto' picks, "
                    "with why. Paste it into a bug report.")
    doctor.add_argument("--json", action="store_true", help="print the report as JSON")

    stall = sub.add_parser(
        "stall", help="is training waiting for data? stall %%, what-if and the loader that would keep up",
        description="Train a few dozen steps under the stall meter, then measure the model alone and "
                    "the loader alone: prints the stall report and the what-if, writes JSON, Markdown "
                    "and a timeline PNG (docs/profile.md).",
    )
    stall.add_argument("--data", help="ImageFolder tree, or shards / a raw cache (gpufeed convert) "
                                       "(default: the generated, cached ImageNet-like set)")
    stall.add_argument("--model", choices=("resnet18", "resnet50", "tiny"), default="resnet18",
                       help="default: resnet18 (tiny: a small conv net, for quick CPU runs)")
    stall.add_argument("--loader", choices=("torch", "dali", "auto", "pil"), default="auto",
                       help="the kit's torch or DALI backend, auto, or pil: DataLoader + PIL + "
                            "transforms.v2 (default: auto)")
    add_training_loop_arguments(stall)
    stall.add_argument("--compare", nargs="*", choices=("torch", "dali", "pil", "none"), default=None,
                       metavar="LOADER", help="loaders to measure alone for the what-if: torch, dali, pil "
                                              "or none (default: those available here)")
    stall.add_argument("--out", default="gpufeed-stall", type=results_folder,
                       help="results folder (default: ./gpufeed-stall)")

    data = sub.add_parser("data", help="generate synthetic datasets")
    kinds = data.add_subparsers(dest="kind", required=True)
    images = kinds.add_parser(
        "images", help="ImageNet-like JPEG folder (one sub-folder per class)",
        description="Write an ImageNet-like JPEG folder OUT/class_XXX/img_XXXXXX.jpg. Into a folder "
                    "that already holds files it warns: same-named images are replaced, others stay.",
    )
    images.add_argument("out", metavar="OUT", type=output_folder, help="output folder (created when missing)")
    images.add_argument("--images", type=at_least(1, MAX_IMAGES), default=1024,
                        help="number of images (default 1024, the size of the benchmarks' default set)")
    images.add_argument("--classes", type=at_least(1), default=10, help="number of classes (default 10)")
    images.add_argument("--seed", type=at_least(0), default=0, help=(
        "seed of the pixels, sizes and labels (default: 0); "
        "the same seed writes the same files"))
    transactions = kinds.add_parser(
        "transactions", help="transactions-like table (ids, 6 text columns of 3..5,000 values, gaps, time)")
    transactions.add_argument("out", metavar="OUT", type=table_output_file, help="output file ending in .parquet or .csv")
    transactions.add_argument("--rows", type=at_least(1), default=100_000, help="number of rows (default 100000)")
    transactions.add_argument("--seed", type=at_least(0), default=0, help=_TABLE_SEED_HELP)
    sensor = kinds.add_parser("sensor", help="sensor-like table (station, region, timestamp, ~95 features)")
    sensor.add_argument("out", metavar="OUT", type=table_output_file, help="output file ending in .parquet or .csv")
    sensor.add_argument("--rows", type=at_least(1), default=100_000, help="number of rows (default 100000)")
    sensor.add_argument("--seed", type=at_least(0), default=0, help=_TABLE_SEED_HELP)

    convert = sub.add_parser(
        "convert", help="write an image folder or file list as WebDataset/TFRecord shards or a raw cache",
        description="Check every image with the strict decoder (bad ones are skipped and listed), shuffle "
                    "the samples across shards with --seed, and write DST/shard-NNNNNN.tar|.tfrecord with "
                    "DALI index files, or a raw cache, plus DST/gpufeed.json. Re-running an interrupted "
                    "conversion with the same arguments resumes it.",
    )
    convert.add_argument("src", metavar="SRC", help="ImageFolder tree (SRC/<class>/<image>) or a 'path label' file list")
    convert.add_argument("dst", metavar="DST", type=output_folder,
                         help="output folder (new or empty, or an interrupted conversion to resume)")
    convert.add_argument("--format", required=True, choices=("webdataset", "tfrecord", "raw"),
                         help="tar shards (KEY.jpg + KEY.cls), tf.train.Example records, or decoded pixels")
    convert.add_argument("--shard-size", default="256MiB", type=byte_size, help="target shard size, e.g. 256MB, 1GiB (default: 256MiB)")
    convert.add_argument("--seed", type=at_least(0), default=0, help="seed of the pre-shuffle (default: 0)")
    convert.add_argument("--no-shuffle", action="store_true", help="keep the source order")
    convert.add_argument("--raw-size", type=at_least(1), default=256, help="raw cache image side (default: 256)")
    convert.add_argument("--raw-mode", choices=("crop", "pad"), default="crop",
                         help="raw cache: crop (shorter side to --raw-size, centre square) or pad (longer side "
                              "to --raw-size, nothing cut; each image's true size kept) (default: crop)")
    convert.add_argument("--workers", type=at_least(0, MAX_WORKERS), default=None,
                         help="decoding processes (default: all cores)")

    tune = sub.add_parser("tune", help="sweep DataLoader settings (workers, pinning, prefetch, batch) here",
                          description=BENCH_SUITES["tune"][1], formatter_class=_DefaultsHelp)  # also a command
    if list(chosen[:1]) == ["tune"]:
        _add_suite(tune, BENCH_SUITES["tune"][0])
    return parser


def parse_args(argv: Sequence[str]) -> argparse.Namespace:
    """The command line ``argv`` (without the program name) parsed as ``gpufeed`` parses it,
    running nothing: ``gpufeed bench`` with no suite named is ``gpufeed bench images``.
    A usage error exits with status 2, as argparse does."""
    argv = list(argv)
    if argv[:1] == ["bench"] and (len(argv) == 1 or argv[1].startswith("-") and argv[1] not in ("-h", "--help")):
        argv.insert(1, "images")  # `gpufeed bench` alone is the main job
    return _build_parser(argv[:2]).parse_args(argv)


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of the ``gpufeed`` command; returns the process exit status."""
    args = parse_args(sys.argv[1:] if argv is None else argv)
    missing = _missing_input(args)
    if missing:
        print(f"gpufeed: error: {missing}", file=sys.stderr)
        return 2
    formatted = warnings.formatwarning
    warnings.formatwarning = _plain_warning(formatted)
    try:
        return _run(args)
    except BrokenPipeError as exc:
        if not _stdout_reader_gone():  # another pipe (a worker's): an error like any other
            print(f"gpufeed: error: {exc}", file=sys.stderr)
            return 2
        # The reader went away (`gpufeed doctor | head`): nothing to report. stdout goes to
        # devnull, or Python's own flush at exit would fail on the closed pipe again.
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 1
    except (OSError, ValueError, RuntimeError) as exc:
        # What a user can fix (a missing folder, a bad argument, no GPU): one line, no traceback.
        print(f"gpufeed: error: {exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        # Ctrl-C: one line, not a traceback through multiprocessing; 130 as a shell reports
        # SIGINT. What finished is kept (`bench all` has written its summary already).
        print("gpufeed: interrupted", file=sys.stderr)
        return 130
    finally:
        warnings.formatwarning = formatted


def _stdout_reader_gone() -> bool:
    """Whether stdout is a pipe whose reading end is closed (poll reports an error on it)."""
    import select

    try:
        poller = select.poll()
        poller.register(sys.stdout.fileno(), select.POLLOUT)
        return any(events & (select.POLLERR | select.POLLHUP) for _, events in poller.poll(0))
    except (AttributeError, OSError, ValueError):  # no poll (Windows), no real stdout
        return False


#: Commands whose input must be an existing folder: the argument naming it, by (command, suite).
_FOLDER_INPUTS = {("bench", "images"): "--data", ("bench", "storage"): "--data", ("bench", "all"): "--data"}
#: Inputs that may also be shards, named by a pattern ("train-{000000..000127}.tar", a
#: glob) that is no path.
_FOLDER_OR_SHARD_INPUTS = {("stall", None): "--data", ("tune", None): "DATA", ("bench", "tune"): "DATA"}


def _missing_input(args: argparse.Namespace) -> str | None:
    """What is wrong with the input path a command was given, in one form naming the
    argument (``argument --data: X: does not exist``) whichever command it is, or ``None``.
    Checked before anything runs; the pipelines' own checks (``image root X does not
    exist``) stay for library callers."""
    import glob
    import os

    key = (args.command, getattr(args, "suite", None) if args.command == "bench" else None)
    value = args.src if args.command == "convert" else getattr(args, "data", None)
    if not value:
        return None
    if key in _FOLDER_INPUTS:
        if os.path.isdir(value):
            return None
        why = "not a folder (expected an ImageFolder tree ROOT/<class>/<image>)" if os.path.exists(value) else \
            "does not exist"
        return f"argument {_FOLDER_INPUTS[key]}: {value}: {why}"
    if key in _FOLDER_OR_SHARD_INPUTS and not (os.path.exists(value) or glob.has_magic(value) or "{" in value):
        return (f"argument {_FOLDER_OR_SHARD_INPUTS[key]}: {value}: does not exist (neither a folder nor a shard "
                "file or pattern)")
    if key == ("convert", None) and not os.path.exists(value):
        return f"argument SRC: {value}: does not exist"
    return None


def _plain_warning(default: Callable[..., str]) -> Callable[..., str]:
    """A ``warnings.formatwarning`` for the command line: the kit's own warnings
    ("gpufeed: ...": files left out, bad files skipped) print as that line alone, not with
    Python's file, line and source; other warnings as ``default`` formats them."""

    def format_warning(message: Warning | str, category: type[Warning], filename: str, lineno: int,
                       line: str | None = None) -> str:
        text = str(message)
        return f"{text}\n" if text.startswith("gpufeed:") else default(message, category, filename, lineno, line)

    return format_warning


def _run(args: argparse.Namespace) -> int:
    if args.command in ("bench", "tune"):
        return int(args._run(args) or 0)
    if args.command == "stall":
        from gpufeed.profile.command import run as run_stall

        return run_stall(args)
    if args.command == "doctor":
        from gpufeed.doctor import run as run_doctor

        return run_doctor(as_json=args.json)
    if args.command == "convert":
        from gpufeed.datasets.shards.convert import convert

        report = convert(args.src, args.dst, format=args.format, shard_size=args.shard_size, seed=args.seed,
                         shuffle=not args.no_shuffle, raw_size=args.raw_size, raw_mode=args.raw_mode, workers=args.workers)
        print(report.summary())
        return 0
    if args.kind == "images":
        from pathlib import Path

        from gpufeed.datasets.images import generate_image_folder

        out = Path(args.out)
        before = sum(1 for p in out.rglob("*") if p.is_file()) if out.is_dir() else 0
        if before:
            # Files of an earlier run (other sizes, other class counts) would stay mixed in
            # with the new ones and change what a loader reads; say so rather than refuse,
            # as regenerating into the same folder with the same settings is harmless.
            print(f"gpufeed: warning: {out} already holds {before} files; same-named images are "
                  "replaced, any others stay mixed in (use an empty folder for a clean dataset)",
                  file=sys.stderr)
        root = generate_image_folder(
            args.out, num_images=args.images, num_classes=args.classes, seed=args.seed, progress=True
        )
        # Images go round-robin over the classes: fewer images than classes fill only some.
        classes = min(args.images, args.classes)
        print(f"wrote {args.images} images in {classes} classes under {root}")
        return 0
    if args.kind == "transactions":
        from gpufeed.datasets.transactions import write_transaction_table as write_table
    else:
        from gpufeed.datasets.sensor import write_sensor_table as write_table
    path = write_table(args.out, args.rows, seed=args.seed)
    print(f"wrote {counted(args.rows, 'row')} to {path}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
