"""Every suite into one results folder, with a summary and figures.

``gpufeed bench all`` runs images (train and val), augment, tabular, formats, the
DataLoader tuning sweep, the storage formats (warm and simulated remote) and the input stall
of a training loop fed by each loader, each writing its JSON, Markdown and PNG figure into
the same folder, and ``summary.md``: one row per suite with its headline ratio and links
to its files, and the figures. Beside it, the run's manifest ``bench-all-<UTC time>.json``
lists each suite, how it ended and the files it wrote, so ``gpufeed bench compare`` reads the
folder as this run (:func:`gpufeed.bench.results.read_results`). Both are rewritten after
every suite, so a run cut short (Ctrl-C: exit 130) keeps what finished. ``--quick`` shrinks
every suite (fewer repeats, smaller tables, a shorter sweep) for a first look; its time on
two cores has not been recorded.
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
from gpufeed.bench.provenance import commit_text
from gpufeed.bench.results import RUN_KEY
from gpufeed.machine import cpu_text
from gpufeed.progress import stage

#: The steps of the report: name -> (suite module, arguments always given, arguments with --quick).
STEPS: dict[str, tuple[str, list[str], list[str]]] = {
    "images-train": ("gpufeed.bench.images", ["--mode", "train"], ["--repeats", "2", "--rounds", "1"]),
    "images-val": ("gpufeed.bench.images", ["--mode", "val"], ["--repeats", "2", "--rounds", "1"]),
    "augment": ("gpufeed.bench.augment", [], ["--batches", "1", "--repeats", "2"]),
    "tabular": ("gpufeed.bench.tabular", [], ["--rows", "100000", "--rule-rows", "100000", "--loop-rows", "5000",
                                              "--downcast-rows", "100000", "--repeats", "2", "--min-seconds", "0.1",
                                              "--rounds", "1"]),
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
    run = RunManifest(folder, steps, settings={"quick": quick, "data": data, "device": device})
    outcomes: list[dict[str, Any]] = [run.outcome(step) for step in steps]
    run.save(outcomes)
    for i, step in enumerate(steps, 1):
        module_name = STEPS[step][0]
        stage(f"[all] {i}/{len(steps)} {step} ...")
        module = importlib.import_module(module_name)
        parser = argparse.ArgumentParser(prog=f"gpufeed bench all: {step}")
        module.add_arguments(parser)
        argv = _step_argv(step, quick=quick, data=data, device=device, out=folder, extra=extra.get(step, ()))
        before = set(folder.glob("*.json"))
        error: str | None = None
        try:
            args = parser.parse_args(argv)
            outcomes[i - 1]["suite"] = _suite_of(step, args)
            status = int(module.run(args) or 0)
        except KeyboardInterrupt:
            # Ctrl-C: the suites that finished keep their row and files, this one and the
            # rest say that they did not run, and the CLI ends with one line (exit 130).
            outcomes[i - 1].update(status=None, error="interrupted while it ran", state="interrupted",
                                   files=_new_results(folder, before))
            for rest in outcomes[i:]:
                rest.update(error="not run: the run was interrupted before it", state="not run")
            run.save(outcomes, state="interrupted")
            stage(f"[all] interrupted during {step}: {run.finished(outcomes)} of {len(steps)} suite(s) finished; "
                  f"report: {folder / 'summary.md'}")
            raise
        except (Exception, SystemExit) as exc:  # one suite's failure must not lose the others
            status, error = 1, f"{type(exc).__name__}: {exc}"
            stage(f"[all] {step} failed: {error}")
        outcomes[i - 1].update(status=status, error=error, files=_new_results(folder, before),
                               state="ok" if status == 0 else "failed" if error is None else "crashed")
        run.save(outcomes, state="finished" if i == len(steps) else "running")  # a summary after every suite
    print(f"report: {folder / 'summary.md'}")
    return 0 if all(o["status"] == 0 for o in outcomes) else 1


def _suite_of(step: str, args: argparse.Namespace) -> str:
    """The suite name a step's results carry (the step ``tune`` writes ``tune-train``)."""
    return f"tune-{args.mode}" if step == "tune" else step


def _new_results(folder: Path, before: set[Path]) -> list[str]:
    """The names of the result JSON files written into ``folder`` since ``before``."""
    return [f.name for f in sorted(set(folder.glob("*.json")) - before) if not f.name.startswith(MANIFEST_PREFIX)]


#: The name a run's manifest starts with: ``bench-all-<UTC time>.json``.
MANIFEST_PREFIX = "bench-all-"


class RunManifest:
    """The manifest of one ``bench all`` run (``bench-all-<UTC time>.json`` in its folder) and
    its ``summary.md``, both rewritten after every suite: a run cut short (Ctrl-C, a killed
    job) leaves the summary of what finished, and ``gpufeed bench compare`` reads the folder
    as this run (:func:`gpufeed.bench.results.read_results`), a suite that did not run
    counting as missing instead of an older run's file standing in for it.

    Args:
        folder: the results folder.
        steps: the steps asked for, in order.
        settings: the run's options, recorded as they were given.
    """

    def __init__(self, folder: Path, steps: Sequence[str], settings: dict[str, Any]) -> None:
        now = _dt.datetime.now(_dt.timezone.utc)
        self.folder, self.steps, self.settings = folder, list(steps), settings
        self.started = now.isoformat(timespec="seconds")
        self.path = folder / f"{MANIFEST_PREFIX}{now.strftime('%Y%m%dT%H%M%SZ')}.json"

    @staticmethod
    def outcome(step: str) -> dict[str, Any]:
        """A step's outcome before it runs (what the summary shows of it meanwhile)."""
        return {"step": step, "suite": step, "status": None, "state": "not run yet",
                "error": "not run yet (the run is going on, or was killed)", "files": []}

    @staticmethod
    def finished(outcomes: Sequence[dict[str, Any]]) -> int:
        """How many steps ran to their end (passed or not)."""
        return sum(o["state"] in ("ok", "failed", "crashed") for o in outcomes)

    def save(self, outcomes: Sequence[dict[str, Any]], state: str = "running") -> None:
        """Write the manifest (written aside, then renamed: a run killed while writing
        leaves the previous one) and ``summary.md``."""
        doc = {RUN_KEY: "bench all", "started": self.started,
               "updated": _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds"), "state": state,
               "settings": {**self.settings, "suites": self.steps},
               "suites": {o["step"]: {"suite": o["suite"], "status": o["state"], "exit": o["status"],
                                      "error": o["error"], "files": o["files"]} for o in outcomes}}
        partial = self.path.with_name(self.path.name + ".partial")
        partial.write_text(json.dumps(doc, indent=2) + "\n")
        partial.replace(self.path)
        write_summary(self.folder, outcomes, manifest=self.path, state=state)


def write_summary(folder: Path, outcomes: Sequence[dict[str, Any]], *, manifest: Path | None = None,
                  state: str = "finished") -> Path:
    """Write ``folder/summary.md``: each suite's headline ratio, its files, and the figures.

    Args:
        folder: the results folder.
        outcomes: per step ``{"step", "status", "error", "files"}`` (JSON file names in
            ``folder``; ``status`` ``None``: the step did not run to its end).
        manifest: the run's manifest (:class:`RunManifest`), named beside the compare command.
        state: ``"finished"``, ``"running"`` (written after each suite: the rest not run yet)
            or ``"interrupted"``.

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
            check = ("" if o["status"] == 0 else " — interrupted" if o["status"] is None
                     else " — **check failed, see its file**")
            rows.append({"suite": doc["suite"], "what": head["what"], "ratio": head.get("ratio"),
                         "detail": (head.get("detail") or "") + check, "files": " ".join(links)})
    for row in rows:
        if row.get("ratio"):
            row["ratio"] = f"**{row['ratio']:.2f}×**"
    when = _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds")
    machine = (f"{cpu_text(meta)}, GPU: {(meta.get('gpu') or {}).get('name', 'none')}, "
               f"gpufeed {meta.get('gpufeed', '?')}, commit {commit_text(meta)}" if meta
               else "no suite wrote a result")
    done = RunManifest.finished([{"state": o.get("state", "ok")} for o in outcomes])
    progress = {"running": f"\n\n**Not finished** (still running, or killed): {done} of {len(outcomes)} suite(s) "
                           "ran so far.",
                "interrupted": f"\n\n**Interrupted**: {done} of {len(outcomes)} suite(s) ran to their end."
                }.get(state, "")
    table = markdown_table(rows, [("suite", "suite"), ("what", "headline"), ("ratio", "ratio"),
                                  ("detail", "detail"), ("files", "files")])
    body = "\n\n".join(f"### {suite}\n\n![{suite}]({fig})" for suite, fig in figures)
    reads = (f" (it reads this folder as this run, `{manifest.name}`: a suite that did not run here counts as "
             "missing)" if manifest is not None else "")
    text = (f"# gpufeed benchmark report\n\n{when}; {machine}.{progress}\n\nEach ratio is measured side by side "
            f"in one run against the suite's baseline (see each suite's Markdown for the setup and every row).\n\n"
            f"{table}\n\nCompare with another run: `gpufeed bench compare OLD_FOLDER {folder}`{reads}.\n\n"
            f"## Figures\n\n{body or 'none'}\n")
    path = folder / "summary.md"
    path.write_text(text)
    return path


def run(args: argparse.Namespace) -> int:
    """``gpufeed bench all``: every suite, then the summary."""
    suites = [s.strip() for s in args.suites.split(",") if s.strip()]
    return run_all(args.out, quick=args.quick, data=args.data, suites=suites, device=args.device)
