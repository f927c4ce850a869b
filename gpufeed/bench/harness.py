"""Timing, isolation, metadata and result files shared by every benchmark suite."""

from __future__ import annotations

import argparse
import contextlib
import datetime as _dt
import json
import multiprocessing as mp
import os
import platform
import signal
import statistics
import sys
import threading
import time
import traceback
import warnings
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from gpufeed.arguments import MAX_WORKERS, at_least, device_name, results_folder
from gpufeed.bench.provenance import commit_text, gpufeed_version, source_commit
from gpufeed.bench.results import machine_kind
from gpufeed.machine import (
    PACKAGES,
    cpu_details,
    cpu_model,
    cpu_text,
    cuda_available,
    die_with_parent,
    gpu_metadata,
    usable_cpus,
    version_of,
)
from gpufeed.progress import counted

#: Where results go unless ``--out`` says otherwise: a folder in the current working
#: directory, never inside the installed package (``make bench`` passes ``bench/results``).
DEFAULT_OUT = "gpufeed-results"


def add_out_argument(parser: argparse.ArgumentParser) -> None:
    """The ``--out`` option every suite shares (default: ``./gpufeed-results``)."""
    parser.add_argument("--out", default=DEFAULT_OUT, type=results_folder,
                        help=f"results folder (default: ./{DEFAULT_OUT} in the current directory)")


@dataclass
class Timing:
    """Seconds of each timed repeat, with the statistics reports use."""

    seconds: list[float]
    work: float = 1.0  # items processed per repeat (images, rows, ...)
    extra: dict[str, Any] = field(default_factory=dict)

    @property
    def median(self) -> float:
        """The median seconds of the timed calls."""
        return statistics.median(self.seconds)

    @property
    def rate(self) -> float:
        """Items per second at the median repeat."""
        return self.work / self.median

    @property
    def rate_min(self) -> float:
        """Items per second of the slowest call."""
        return self.work / max(self.seconds)

    @property
    def rate_max(self) -> float:
        """Items per second of the fastest call."""
        return self.work / min(self.seconds)

    def as_dict(self) -> dict[str, Any]:
        """The timing as a JSON-ready dict (seconds, median, rates, extras)."""
        return {
            "seconds": self.seconds, "median_s": self.median, "work": self.work,
            "rate": self.rate, "rate_min": self.rate_min, "rate_max": self.rate_max, **self.extra,
        }


def add_loader_arguments(parser: argparse.ArgumentParser, contender: str) -> None:
    """The options of the suites that time image loaders side by side: batch, output size,
    workers, timed epochs, ``--rounds``, device and ``--out``; ``contender``: what each one
    timed is called in the help (a pipeline, a storage)."""
    parser.add_argument("--batch-size", type=at_least(1), default=64, help="default: 64")
    parser.add_argument("--size", type=at_least(1), default=224, help="output size (default: 224)")
    parser.add_argument("--workers", type=at_least(1, MAX_WORKERS), default=None,
                        help="workers/threads each (default: all cores)")
    parser.add_argument("--repeats", type=at_least(1), default=3,
                        help=f"timed epochs per {contender} and round (default: 3)")
    add_rounds_argument(parser)
    parser.add_argument("--device", default="auto", type=device_name, help="auto | cpu | cuda (default: auto)")
    add_out_argument(parser)


def add_rounds_argument(parser: argparse.ArgumentParser, default: int = 2) -> None:
    """The ``--rounds`` option of the suites that compare contenders in separate processes."""
    parser.add_argument("--rounds", type=at_least(1), default=default,
                        help=f"times every contender runs, each time in a fresh process, taking turns with the "
                             f"others so that a slow spell of the machine hits them alike (default: {default})")


def pool_rounds(rounds: Sequence[dict[str, Any]]) -> dict[str, Any]:
    """One contender's row from its rounds: every timed repeat pooled (median and min/max
    over all of them), each round's own rate kept as ``round_rates`` for
    :func:`round_ratios`; the last round's other fields (output checks ...) kept.

    A round that failed makes the row that failure: a contender that crashes once is not
    reported as fast from its other rounds.
    """
    failed = next((r for r in rounds if "rate" not in r), None)
    if failed is not None:
        return dict(failed)
    timing = Timing([s for r in rounds for s in r["seconds"]], rounds[-1]["work"])
    return {**rounds[-1], **timing.as_dict(), "rounds": len(rounds), "round_rates": [r["rate"] for r in rounds]}


def round_ratios(row: dict[str, Any], over: dict[str, Any]) -> list[float]:
    """``row``'s rate over ``over``'s, round by round: the pairs measured minutes apart
    rather than a run's length apart, so their spread is the comparison's own noise."""
    mine, theirs = row.get("round_rates", [row["rate"]]), over.get("round_rates", [over["rate"]])
    return [a / b for a, b in zip(mine, theirs, strict=False)]


def rounds_text(rounds: int, repeats: int) -> str:
    """How a suite run in rounds timed each contender, for its report."""
    each = f"median of {counted(repeats, 'timed epoch')} after one untimed epoch"
    if rounds == 1:
        return each
    return (f"{rounds} rounds, each contender in a fresh process per round, taking turns; per round {each}; "
            f"medians over the {rounds * repeats} epochs pooled, × per round: each round's own ratio")


def spread(values: Sequence[float]) -> str:
    """``"lo–hi"`` of per-round ratios for a report (one value: just that value)."""
    lo, hi = min(values), max(values)
    return f"{lo:.2f}" if len(values) == 1 or lo == hi else f"{lo:.2f}–{hi:.2f}"


def synchronize() -> None:
    """Wait for queued GPU work, so a timed region never ends at an asynchronous launch.

    Work that never imported torch queued none through it: asking CUDA would import torch
    (seconds) inside the first timed call of a table benchmark run with ``--warmup 0``. cuDF
    queues through cupy's runtime without torch (a table benchmark's cuDF process never
    imports it), so a process holding cupy waits for the device there too.
    """
    if "torch" in sys.modules and cuda_available():
        import torch

        torch.cuda.synchronize()
    if "cudf" in sys.modules:  # imported only where a GPU is (the kit never imports it on a CPU path)
        import cupy

        cupy.cuda.runtime.deviceSynchronize()


def measure(run: Callable[[], float], *, warmup: int = 1, repeats: int = 5, min_seconds: float = 0.0,
            max_repeats: int = 1000) -> Timing:
    """Time ``run`` at least ``repeats`` times after ``warmup`` untimed calls, and on until
    ``min_seconds`` of timed calls have passed (at most ``max_repeats``).

    ``min_seconds`` is for work of a few milliseconds, whose median of 3 moves by 20 % on a
    shared machine; work longer than ``min_seconds / repeats`` is timed ``repeats`` times.

    Args:
        run: does one unit of work (an epoch, a pass over a table) and returns how many
            items it processed; the GPU is synchronised before the clock stops.
        warmup: untimed calls first (JIT, caches, worker start-up).
        repeats: timed calls, at least.
        min_seconds: keep timing until the timed calls add up to this (0: exactly ``repeats``).
        max_repeats: at most this many timed calls.

    Returns:
        A :class:`Timing` whose ``work`` is the item count of the last timed call.
    """
    if repeats < 1:
        raise ValueError(f"repeats must be >= 1, got {repeats}")
    if min_seconds < 0:
        raise ValueError(f"min_seconds must be >= 0, got {min_seconds}")
    for _ in range(warmup):
        run()
        synchronize()
    seconds: list[float] = []
    work = 1.0
    while len(seconds) < repeats or (sum(seconds) < min_seconds and len(seconds) < max_repeats):
        start = time.perf_counter()
        work = run()
        synchronize()
        seconds.append(time.perf_counter() - start)
    return Timing(seconds, float(work))


def measure_for(run: Callable[[], float], seconds: float, *, warmup: int = 1, max_repeats: int = 1000,
                min_repeats: int = 1) -> Timing:
    """Call ``run`` after ``warmup`` untimed calls until ``seconds`` of timed calls have passed.

    For a time budget rather than a count: every timed call completes (an epoch is never
    cut, so per-epoch costs such as starting workers weigh as they do in training), and
    there are at least ``min_repeats``.

    Args:
        run: as for :func:`measure`: one unit of work, returning the items it processed.
        seconds: the timed budget, > 0; the last call may run past it.
        warmup: untimed calls first.
        max_repeats: at most this many timed calls.
        min_repeats: at least this many timed calls.

    Returns:
        A :class:`Timing` with one entry per timed call.

    Example:
        >>> measure_for(lambda: 10, 0.01).work
        10.0
    """
    if seconds <= 0:
        raise ValueError(f"seconds must be > 0, got {seconds}")
    return measure(run, warmup=warmup, repeats=min_repeats, min_seconds=seconds, max_repeats=max_repeats)


def epoch_runner(batches: Callable[[], Iterable], device: str) -> Callable[[], float]:
    """One epoch for :func:`measure`: pull every ``(images, labels)`` batch onto ``device``.

    Args:
        batches: returns a fresh iterable of batches (a loader).
        device: where each batch is moved (``non_blocking``; the harness synchronises).

    Returns:
        A callable that runs one epoch and returns the number of samples.
    """
    import torch

    target = torch.device(device)

    def run() -> float:
        n = 0
        for images, _ in batches():
            images = images.to(target, non_blocking=True)
            n += images.shape[0]
        return n

    return run


def _child(conn: Any, target: Callable[..., dict], args: tuple, kwargs: dict) -> None:
    # A spawned child inherits "spawn" as its default start method, so DataLoader workers
    # would start by re-importing torch (~5 s each here) where a user's script forks them:
    # back to the platform's default, as in the user's process.
    mp.set_start_method(None, force=True)
    die_with_parent()
    try:
        conn.send(("ok", target(*args, **kwargs)))
    except BaseException as exc:  # noqa: BLE001 - the parent reports whatever broke
        conn.send(("error", f"{type(exc).__name__}: {exc}\n{traceback.format_exc()}"))
    finally:
        conn.close()


@contextlib.contextmanager
def _sigint_ignored() -> Iterator[None]:
    """Ignore SIGINT while a child process starts, so that it starts ignoring it too (the
    disposition survives exec, and Python keeps an inherited SIG_IGN). A terminal's Ctrl-C
    goes to every process of the group: each child printed its own KeyboardInterrupt
    traceback; now the parent alone stops, and ends its children. A Ctrl-C within these
    milliseconds is lost. Only the main thread can set handlers: elsewhere this does nothing."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    previous = signal.signal(signal.SIGINT, signal.SIG_IGN)
    try:
        yield
    finally:  # None: a handler set outside Python; Python's own is the one to put back
        signal.signal(signal.SIGINT, signal.default_int_handler if previous is None else previous)


def run_isolated(target: Callable[..., dict], *args: Any, timeout: float = 3600, **kwargs: Any) -> dict:
    """Run ``target(*args, **kwargs)`` in a fresh (spawned) process and return its dict.

    Each pipeline of a benchmark runs alone: DataLoader workers forked from a process that
    holds DALI pipelines have crashed, and one pipeline's threads must not steal the next
    one's cores. A failure comes back as ``{"error": "..."}`` instead of killing the suite.
    """
    ctx = mp.get_context("spawn")
    parent, child = ctx.Pipe(duplex=False)
    proc = ctx.Process(target=_child, args=(child, target, args, kwargs))
    with _sigint_ignored():  # inherited: Ctrl-C stops this process, which ends the child below
        proc.start()
    child.close()
    try:
        if parent.poll(timeout):
            status, payload = parent.recv()
        else:
            status, payload = "error", f"timed out after {timeout:.0f} s"
    except EOFError:
        status, payload = "error", "the benchmark process died without a result"
    except BaseException:
        # Ctrl-C while the contender runs: end it too, or it would go on timing for minutes
        # after the command returned.
        proc.kill()
        proc.join(10)
        raise
    proc.join(10)
    if proc.is_alive():
        proc.kill()
    if status == "error":
        return {"error": payload}
    return payload


def machine_metadata() -> dict[str, Any]:
    """Everything a reader needs to judge a result: gpufeed's version and commit (where it
    can be known: :func:`gpufeed.bench.provenance.source_commit`), versions, CPU, GPU, time."""
    commit = source_commit()
    return {
        "timestamp": _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds"),
        "gpufeed": gpufeed_version(),
        "git_commit": commit.commit,
        "git_commit_note": commit.note,
        "python": platform.python_version(),
        "platform": platform.platform(),
        "cpu_model": cpu_model(),
        "cpu_details": cpu_details(),
        "cpu_count": os.cpu_count(),
        "cpu_affinity": usable_cpus(),
        "gpu": gpu_metadata(),
        "packages": {p: v for p in PACKAGES if (v := version_of(p))},
    }


def some_of(names: Sequence[str], most: int) -> str:
    """``names`` joined by commas, the first ``most`` of them and "and N more" past that: a
    report line for a table of 2,000 columns listed every one."""
    shown = ", ".join(names[:most])
    return shown + (f" and {len(names) - most} more" if len(names) > most else "")


def number_text(value: float) -> str:
    """A figure as report tables write it: two decimals (thousands separated), three
    significant digits below 0.1."""
    return f"{value:,.2f}" if abs(value) >= 0.1 else f"{value:.3g}"


def markdown_table(rows: Sequence[dict[str, Any]], columns: Sequence[tuple[str, str]]) -> str:
    """Render ``rows`` as a Markdown table; ``columns`` are ``(key, header)`` pairs."""

    def cell(v: Any) -> str:
        if v is None:
            return "—"
        if isinstance(v, float):
            return number_text(v)
        return str(v)

    head = "| " + " | ".join(h for _, h in columns) + " |"
    sep = "|" + "|".join("---" for _ in columns) + "|"
    body = ["| " + " | ".join(cell(r.get(k)) for k, _ in columns) + " |" for r in rows]
    return "\n".join([head, sep, *body])


def write_results(
    suite: str, payload: dict[str, Any], summary_md: str, out_dir: str | os.PathLike[str], *,
    command: str = "gpufeed bench",
) -> tuple[Path, Path]:
    """Write ``<suite>-<host-kind>-<UTC time>.json``, ``.md`` and PNG figures under ``out_dir``.

    The JSON holds ``payload`` plus machine metadata; the Markdown holds ``summary_md``
    followed by the key metadata, so a reader of either file knows where it came from.
    The figures (:func:`gpufeed.bench.plots.draw_figures`) are drawn from the JSON
    document and linked from the Markdown; a failure to draw warns and writes no figure.

    ``command`` heads the Markdown (``gpufeed stall`` for the stall report).

    Returns:
        The JSON and Markdown paths.
    """
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    meta = machine_metadata()
    stamp = _dt.datetime.now(_dt.timezone.utc).strftime("%Y%m%dT%H%M%SZ")
    base = out / f"{suite}-{machine_kind({'metadata': meta})}-{stamp}"
    doc = json.loads(json.dumps({"suite": suite, "metadata": meta, **payload}, default=str))
    doc["figures"] = [p.name for p in _draw_figures(doc, base)]
    json_path = base.with_suffix(".json")
    json_path.write_text(json.dumps(doc, indent=2) + "\n")
    gpu = meta["gpu"]
    gpu_line = f"{gpu['name']} (driver {gpu.get('driver')}, CUDA {gpu['cuda_runtime']})" if gpu else "none"
    md = (
        f"# {command} {suite}\n\n{summary_md}\n\n"
        f"- gpufeed {meta['gpufeed']}, commit: {commit_text(meta)}\n- when: {meta['timestamp']}\n"
        f"- CPU: {cpu_text(meta)}\n- GPU: {gpu_line}\n"
        f"- packages: {', '.join(f'{k} {v}' for k, v in meta['packages'].items())}\n"
        f"- raw numbers: `{json_path.name}`\n"
        + "".join(f"\n![{name}]({name})\n" for name in doc["figures"])
    )
    md_path = base.with_suffix(".md")
    md_path.write_text(md)
    return json_path, md_path


def results_line(json_path: str | os.PathLike[str]) -> str:
    """The ``results:`` line a suite prints after :func:`write_results`: every file it
    wrote, the JSON's path then the names beside it (the Markdown, each figure listed in the
    JSON's ``figures``), e.g. ``results: out/images-train-cpu2-….json, ….md, ….png``."""
    path = Path(json_path)
    try:
        figures = json.loads(path.read_text()).get("figures", [])
    except (OSError, ValueError):
        figures = []
    names = [path.with_suffix(".md").name, *figures]
    return "results: " + ", ".join([os.fspath(path), *names])



def _draw_figures(doc: dict[str, Any], base: Path) -> list[Path]:
    try:
        from gpufeed.bench.plots import draw_figures

        return draw_figures(doc, base)
    except Exception as exc:  # noqa: BLE001 - a figure is never worth losing the results
        warnings.warn(f"gpufeed: no figure for {doc['suite']}: {type(exc).__name__}: {exc}", stacklevel=3)
        return []
