"""Run existing pandas scripts unchanged on the GPU with cudf.pandas, and say what fell back.

``cudf.pandas`` replaces ``import pandas`` with proxies that run each call on cuDF when it
can and on pandas otherwise. The speed-up depends on how much stays on the GPU, so
:func:`run_script` runs a script under cuDF's profiler in a fresh interpreter (cudf.pandas
must be installed before pandas is first imported) and returns a :class:`FallbackReport`
listing every pandas function that ran on the CPU.

Only this module's functions touch cuDF, and only when called on a GPU machine.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from gpufeed.machine import cuda_available, install_hint, installed

# Runs in the child interpreter, from a file (cuDF's profiler reads the source line of each
# line it traces in the file that enters it: from `python -c` there is none and it raised
# "TypeError: can only join an iterable" on the H200): install the accelerator first, then
# the user's script under the profiler, then dump per-function GPU/CPU timings as JSON.
_BOOTSTRAP = """
import json, os, runpy, sys, traceback
import cudf.pandas
cudf.pandas.install()
from cudf.pandas import Profiler
out, script, *args = sys.argv[1:]
sys.argv = [script, *args]
# As `python script.py`: the script's folder first on the path (not this file's temporary
# folder), so the script imports the modules beside it.
sys.path[0] = os.path.dirname(os.path.abspath(script))
status = 0
profiler = Profiler()
try:
    with profiler:
        runpy.run_path(script, run_name="__main__")
except SystemExit as exc:
    status = exc.code if isinstance(exc.code, int) else (0 if exc.code is None else 1)
except BaseException:  # as Python does: the traceback on stderr, exit status 1, and the profile still written
    traceback.print_exc()
    status = 1
stats = {k: {"gpu": list(v["gpu"]), "cpu": list(v["cpu"])} for k, v in profiler.per_function_stats.items()}
with open(out, "w") as fh:
    json.dump(stats, fh)
sys.exit(status)
"""


@dataclass
class FunctionUse:
    """How often one pandas function ran on the GPU and on the CPU, and for how long."""

    name: str
    gpu_calls: int
    gpu_seconds: float
    cpu_calls: int
    cpu_seconds: float


@dataclass
class FallbackReport:
    """Per-function GPU/CPU use of a cudf.pandas run; ``fallbacks`` are the CPU ones."""

    functions: list[FunctionUse] = field(default_factory=list)
    returncode: int = 0

    @classmethod
    def from_stats(cls, stats: Mapping[str, Mapping[str, Sequence[float]]], returncode: int = 0) -> FallbackReport:
        """Build a report from cudf.pandas ``Profiler.per_function_stats`` (``{name: {"gpu": [s], "cpu": [s]}}``)."""
        return cls([FunctionUse(name, len(v.get("gpu", ())), float(sum(v.get("gpu", ()))),
                                len(v.get("cpu", ())), float(sum(v.get("cpu", ()))))
                    for name, v in stats.items()], returncode)

    @property
    def fallbacks(self) -> list[FunctionUse]:
        """Functions that ran at least once on the CPU, slowest first."""
        return sorted((f for f in self.functions if f.cpu_calls), key=lambda f: -f.cpu_seconds)

    @property
    def gpu_time_share(self) -> float:
        """Share of profiled time spent in GPU calls (1.0: nothing fell back)."""
        gpu = sum(f.gpu_seconds for f in self.functions)
        total = gpu + sum(f.cpu_seconds for f in self.functions)
        return gpu / total if total else 1.0

    def to_markdown(self) -> str:
        """The report as a Markdown paragraph and a table of the functions that fell back."""
        rows = [f"| {f.name} | {f.cpu_calls} | {f.cpu_seconds:.3f} | {f.gpu_calls} |" for f in self.fallbacks]
        head = (f"{len(self.fallbacks)} of {len(self.functions)} pandas functions fell back to the CPU; "
                f"{self.gpu_time_share:.0%} of the profiled time ran on the GPU.")
        if not rows:
            return head
        return "\n".join([head, "", "| function | CPU calls | CPU s | GPU calls |", "|---|---|---|---|", *rows])


def cudf_pandas_available() -> bool:
    """True when cudf.pandas can run here (cuDF installed and a CUDA GPU visible)."""
    return installed("cudf") and cuda_available()


def run_script(script: str | os.PathLike[str], args: Sequence[str] = (), *, python: str = sys.executable,
               timeout: float | None = None) -> FallbackReport:
    """Run a pandas script unchanged with cudf.pandas and report what fell back to the CPU.

    Equivalent to ``python -m cudf.pandas --profile script.py ARGS``, but the profile comes
    back as data. The script's own output goes to this process's stdout/stderr.

    Args:
        script: path of the Python script (it does ``import pandas as pd`` as usual).
        args: its command-line arguments.
        python: interpreter to use (the one with cuDF installed).
        timeout: seconds before the run is stopped.

    Returns:
        A :class:`FallbackReport`; ``returncode`` is the script's exit status.

    Raises:
        RuntimeError: no cuDF or no GPU here, or the run wrote no profile (cudf.pandas failed
            to start, or the script ended the interpreter with ``os._exit``).
        FileNotFoundError: no such script.

    The script's exceptions do not raise here: as under ``python script.py`` the traceback
    goes to stderr and ``returncode`` is 1, and the report still lists what ran until then.

    Example:
        >>> report = run_script("prepare.py", ["--rows", "1000000"])  # doctest: +SKIP
        >>> print(report.to_markdown())  # doctest: +SKIP
    """
    path = Path(script)
    if not path.is_file():
        raise FileNotFoundError(f"{path}: no such script")
    if not cudf_pandas_available():
        raise RuntimeError(
            f"cudf.pandas needs cuDF and a CUDA GPU: {install_hint('cuda13')} (PyPI's default torch is "
            "CUDA 13), or the 'cuda12' extra with a CUDA 12 torch. On CPU, run the script as it is."
        )
    with tempfile.TemporaryDirectory() as tmp:
        out, bootstrap = Path(tmp) / "stats.json", Path(tmp) / "gpufeed_cudf_pandas_run.py"
        bootstrap.write_text(_BOOTSTRAP)
        proc = subprocess.run([python, str(bootstrap), str(out), str(path), *args], timeout=timeout, check=False)
        if not out.exists():  # an empty report would read "nothing fell back, 100% on the GPU"
            raise RuntimeError(f"cudf.pandas wrote no profile for {path} (exit status {proc.returncode}): it failed "
                               "before or outside the script, see its error output above")
        stats: dict[str, Any] = json.loads(out.read_text())
    return FallbackReport.from_stats(stats, proc.returncode)


def main(argv: Sequence[str] | None = None) -> int:
    """``python -m gpufeed.gpu_transforms.tabular.cudf_pandas SCRIPT [ARGS...]``: run and report.

    Returns:
        The script's exit status (2 when cudf.pandas cannot run here).
    """
    args = list(sys.argv[1:] if argv is None else argv)
    if not args or args[0] in ("-h", "--help"):
        print("usage: python -m gpufeed.gpu_transforms.tabular.cudf_pandas SCRIPT [ARGS...]\n"
              "Runs a pandas script unchanged on the GPU with cudf.pandas and lists what fell back to the CPU.")
        return 0 if args else 2
    try:
        report = run_script(args[0], args[1:])
    except (RuntimeError, FileNotFoundError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    print("\n" + report.to_markdown())
    return report.returncode


if __name__ == "__main__":
    raise SystemExit(main())
