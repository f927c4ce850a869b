"""Every suite into one results folder, with a summary and figures.

``gpufeed bench all`` runs images (train and val), augment, tabular, formats, the
DataLoader tuning sweep, the storage formats (warm and simulated remote) and the input stall
of a training loop fed by each loader, each writing its JSON, Markdown and PNG figure into
the same folder, then writes ``summary.md``: one row per suite with its headline ratio and links
to its files, and the figures. ``--quick`` shrinks every suite (fewer repeats, smaller tables, a shorter
sweep) for a first look; its time on two cores has not been recorded.
"""

from __future__ import annotations

import argparse
import datetime as _dt
import importlib
import json
import os
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from gpufeed.arguments import device_name
from gpufeed.bench.harness import add_out_argument, markdown_table
from gpufeed.progress import stage

#: The steps of the report: name -> (suite module, arguments always given, arguments with --quick).
STEPS: dict[str, tuple[str, list[str], list[str]]] = {
    "images-train": ("gpufeed.bench.images", ["--mode", "train"], ["--repeats", "2", "--rounds", "1"]),
    "images-val": ("gpufeed.bench.images", ["--mode", "val"], ["--repeats", "2", "--rounds", "1"]),
    "augment": ("gpufeed.bench.augment", [], ["--batches", "1", "--repeats", "2"]),
    "tabular": ("gpufeed.bench.tabular", [], ["--rows", "100000", "--rule-rows", "100000", "--loop-rows", "5000",
                                              "--downcast-rows", "100000", "--repeats", "2", "--min-seconds", "0.1"]),
    "formats": ("gpufeed.bench.formats", [], ["--rows", "50000", "--repeats", "2"]),
    "tune": ("gpufeed.bench.tune", [], ["--time-per-config", "1.5", "--max-images", "256", "--batch-sizes", "32,64",
                                        "--prefetch-factors", "2,4"]),
    # Warm and remote only: cold rereads the disk every epoch and adds little a report needs.
    "storage": ("gpufeed.bench.storage", ["--storage", "warm", "remote"], ["--images", "256", "--repeats", "2", "--rounds", "1"]),
    "stalls": ("gpufeed.bench.stalls", [], ["--steps", "10"]),
}
#: Steps that read the image folder (``--data``) and take ``--device``.
_IMAGE_STEPS = ("images-train", "images-val", "tune", "storage", "stalls")
_DEVICE_STEPS = ("images-train", "images-val", "augment", "tune", "storage", "stalls")


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Options of ``gpufeed bench all``."""
    add_out_argument(parser)
    parser.add_argument("--quick", action="store_true", help="smaller runs of every suite (fewer repeats, smaller tables, a shorter sweep)")
    parser.add_argument("--data", default=None, help="ImageFolder tree for the images, tune, storage and stalls suites (default: generated)")
    parser.add_argument("--suites", default=",".join(STEPS), type=_suite_list,
                        help=f"comma list (default: {','.join(STEPS)})")
    parser.add_argument("--device", default="auto", type=device_name, help="auto | cpu | cuda (default: auto)")


def _suite_list(text: str) -> str:
    """An argparse type for ``--suites``: known step names (kept as text), so a typo is a
    usage error naming the option and the choices."""
    names = [s.strip() for s in text.split(",") if s.strip()]
    unknown = [s for s in names if s not in STEPS]
    if unknown or not names:
        raise argparse.ArgumentTypeError(f"unknown {', '.join(map(repr, unknown)) if unknown else 'none given'}; "
                                         f"choose from {', '.join(STEPS)}")
    return text


def _step_argv(step: str, *, quick: bool, data: str | None, device: str, out: Path, extra: Sequence[str]) -> list[str]:
    _, always, shrunk = STEPS[step]
    argv = [*always, *(shrunk if quick else [])]
    if data and step in _IMAGE_STEPS:
        argv = [data, *argv] if step == "tune" else [*argv, "--data", data]
    if step in _DEVICE_STEPS:
        argv += ["--device", device]
    return [*argv, *extra, "--out", os.fspath(out)]


def run_all(
    out: str | os.PathLike[str],
    *,
    quick: bool = False,
    data: str | os.PathLike[str] | None = None,
    suites: Sequence[str] | None = None,
    device: str = "auto",
    extra: dict[str, Sequence[str]] | None = None,
) -> int:
    """Run the suites into ``out`` and write ``out/summary.md``.

    Args:
        out: the results folder (created).
        quick: the shrunken settings of ``--quick``.
        data: an ImageFolder tree for the images suites and the sweep (default: generated).
        suites: step names from :data:`STEPS` (default: all, in order).
        device: ``"auto"``, ``"cpu"`` or ``"cuda"`` for the suites that take one.
        extra: more command-line arguments per step, given last (they win), e.g.
            ``{"tune": ["--knobs", "num_workers"]}``.

    Returns:
        0 when every suite ran and passed its checks, else 1.

    Example:
        >>> run_all("report", quick=True, suites=["images-train", "tune"])  # doctest: +SKIP
        0
    """
    steps = list(suites) if suites is not None else list(STEPS)
    unknown = [s for s in steps if s not in STEPS]
    if unknown or not steps:
        raise ValueError(f"suites: unknown {unknown or 'none given'}; choose from {', '.join(STEPS)}")
    if device != "auto":
        from gpufeed.backends import resolve_device

        resolve_device(device)  # CUDA asked for where there is none: refused before any suite runs
    extra = dict(extra or {})
    if set(extra) - set(steps):
        raise ValueError(f"extra: steps {sorted(set(extra) - set(steps))} are not run")
    folder = Path(out)
    folder.mkdir(parents=True, exist_ok=True)
    data = os.fspath(data) if data is not None else None
    outcomes: list[dict[str, Any]] = []
    for i, step in enumerate(steps, 1):
        module_name = STEPS[step][0]
        stage(f"[all] {i}/{len(steps)} {step} ...")
        module = importlib.import_module(module_name)
        parser = argparse.ArgumentParser(prog=f"gpufeed bench all: {step}")
        module.add_arguments(parser)
        argv = _step_argv(step, quick=quick, data=data, device=device, out=folder, extra=extra.get(step, ()))
        before = set(folder.glob("*.json"))
        try:
            status = int(module.run(parser.parse_args(argv)) or 0)
            error = None
        except (Exception, SystemExit) as exc:  # one suite's failure must not lose the others
            status, error = 1, f"{type(exc).__name__}: {exc}"
            stage(f"[all] {step} failed: {error}")
        files = sorted(set(folder.glob("*.json")) - before)
        outcomes.append({"step": step, "status": status, "error": error, "files": [f.name for f in files]})
    summary = write_summary(folder, outcomes)
    print(f"report: {summary}")
    return 0 if all(o["status"] == 0 for o in outcomes) else 1


def write_summary(folder: Path, outcomes: Sequence[dict[str, Any]]) -> Path:
    """Write ``folder/summary.md``: each suite's headline ratio, its files, and the figures.

    Args:
        folder: the results folder.
        outcomes: per step ``{"step", "status", "error", "files"}`` (JSON file names in
            ``folder``).

    Returns:
        The summary's path.
    """
    from gpufeed.bench.results import headline

    rows, figures, meta = [], [], None
    for o in outcomes:
        if not o["files"]:
            rows.append({"suite": o["step"], "what": "did not run", "detail": o["error"] or "no result file"})
        for name in o["files"]:
            doc = json.loads((folder / name).read_text())
            meta = meta or doc.get("metadata")
            head = headline(doc)
            links = [f"[json]({name})", f"[md]({Path(name).with_suffix('.md').name})",
                     *(f"[png]({fig})" for fig in doc.get("figures", []))]
            figures += [(doc["suite"], fig) for fig in doc.get("figures", [])]
            check = "" if o["status"] == 0 else " — **check failed, see its file**"
            rows.append({"suite": doc["suite"], "what": head["what"], "ratio": head.get("ratio"),
                         "detail": (head.get("detail") or "") + check, "files": " ".join(links)})
    for row in rows:
        if row.get("ratio"):
            row["ratio"] = f"**{row['ratio']:.2f}×**"
    when = _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds")
    machine = (f"{meta['cpu_model']} × {meta['cpu_count']}, GPU: {(meta.get('gpu') or {}).get('name', 'none')}, "
               f"commit `{meta.get('git_commit')}`" if meta else "no suite wrote a result")
    table = markdown_table(rows, [("suite", "suite"), ("what", "headline"), ("ratio", "ratio"),
                                  ("detail", "detail"), ("files", "files")])
    body = "\n\n".join(f"### {suite}\n\n![{suite}]({fig})" for suite, fig in figures)
    text = (f"# gpufeed benchmark report\n\n{when}; {machine}.\n\nEach ratio is measured side by side in one "
            f"run against the suite's baseline (see each suite's Markdown for the setup and every row).\n\n"
            f"{table}\n\nCompare with another run: `gpufeed bench compare OLD_FOLDER {folder}`.\n\n"
            f"## Figures\n\n{body or 'none'}\n")
    path = folder / "summary.md"
    path.write_text(text)
    return path


def run(args: argparse.Namespace) -> int:
    """``gpufeed bench all``: every suite, then the summary."""
    suites = [s.strip() for s in args.suites.split(",") if s.strip()]
    return run_all(args.out, quick=args.quick, data=args.data, suites=suites, device=args.device)
