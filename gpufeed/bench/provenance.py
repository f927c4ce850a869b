"""Which gpufeed produced a result: its version and the commit of its source.

Every result's metadata (:func:`gpufeed.bench.harness.machine_metadata`), the ``bench all``
summary and ``gpufeed doctor`` name them, all from here.

The commit comes from git only where the code that runs *is* gpufeed's own checkout: a
wheel installed into ``myproject/.venv`` sits inside the user's repository, where ``git
rev-parse`` answers with the user's commit (and ``+dirty`` for the user's changes).
Elsewhere (a wheel, a container image) it is the ``GPUFEED_GIT_COMMIT`` the build
recorded, else unknown, and the reports say so.
"""

from __future__ import annotations

import os
import re
import subprocess
from dataclasses import dataclass
from pathlib import Path
from typing import Any

#: The folder of the gpufeed package that runs (``.../gpufeed``).
PACKAGE_DIR = Path(__file__).resolve().parents[1]

#: The variable a build without ``.git`` (the Dockerfile's ``GIT_COMMIT`` build argument)
#: records the commit in.
COMMIT_VARIABLE = "GPUFEED_GIT_COMMIT"

_TABLE = re.compile(r"^\s*\[\s*([^\[\]]+?)\s*\]\s*(?:#.*)?$")
_GPUFEED_NAME = re.compile(r"""^\s*name\s*=\s*["']gpufeed["']\s*(?:#.*)?$""")


@dataclass(frozen=True)
class SourceCommit:
    """The commit of the gpufeed source that runs, and where the answer came from.

    Attributes:
        commit: the commit (``+dirty`` when gpufeed's checkout has uncommitted changes),
            or ``None`` when it cannot be known.
        note: where it came from, or why there is none, in words for a report.
    """

    commit: str | None
    note: str

    def text(self, *, markdown: bool = True) -> str:
        """``abc123… (gpufeed's git checkout)`` or ``unknown (why)``, for a report line (the
        commit in backticks for Markdown)."""
        if not self.commit:
            return f"unknown ({self.note})"
        return f"`{self.commit}` ({self.note})" if markdown else f"{self.commit} ({self.note})"


def gpufeed_version() -> str:
    """The installed distribution's version (the package's own when run from a source tree
    that was never installed, e.g. ``PYTHONPATH=.``)."""
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("gpufeed")
    except PackageNotFoundError:
        import gpufeed

        return gpufeed.__version__


def source_commit(package_dir: str | os.PathLike[str] | None = None) -> SourceCommit:
    """The commit of the gpufeed source in ``package_dir`` (default: the package that runs).

    Git is asked only where ``package_dir`` is the ``gpufeed/`` folder at the top of a work
    tree whose ``pyproject.toml`` names the project ``gpufeed`` (a clone, an editable
    install); anywhere else the work tree git finds is someone else's. Otherwise the
    commit is ``$GPUFEED_GIT_COMMIT`` where the build recorded one, else unknown.

    Example:
        >>> source_commit().text()  # doctest: +SKIP
        "`e4fcabe...+dirty` (gpufeed's git checkout)"
    """
    package = Path(package_dir if package_dir is not None else PACKAGE_DIR).resolve()
    checkout = _own_checkout(package)
    if checkout is not None:
        head = _git(checkout, "rev-parse", "HEAD")
        if head:
            dirty = _git(checkout, "status", "--porcelain", "--untracked-files=no")
            return SourceCommit(head + ("+dirty" if dirty else ""), "gpufeed's git checkout")
    recorded = os.environ.get(COMMIT_VARIABLE, "").strip()
    if recorded:
        return SourceCommit(recorded, f"{COMMIT_VARIABLE}, recorded by the build")
    where = "gpufeed's git checkout without a commit" if checkout is not None else "not gpufeed's git checkout"
    return SourceCommit(None, f"the installed gpufeed is {where}, and {COMMIT_VARIABLE} is not set")


def commit_text(metadata: dict[str, Any]) -> str:
    """The commit of a result's ``metadata`` for a Markdown line: ``\\`abc\\` (how known)``
    or ``unknown (why)``; results written before ``git_commit_note`` existed show the commit alone."""
    commit, note = metadata.get("git_commit"), metadata.get("git_commit_note")
    if note:
        return SourceCommit(commit, note).text()
    return f"`{commit}`" if commit else "unknown"


def _own_checkout(package: Path) -> Path | None:
    """The top of gpufeed's own work tree when ``package`` is its ``gpufeed/`` folder, else None."""
    top = _git(package, "rev-parse", "--show-toplevel")
    if not top:
        return None
    root = Path(top).resolve()
    if package != root / "gpufeed" or not _names_gpufeed(root / "pyproject.toml"):
        return None
    return root


def _names_gpufeed(pyproject: Path) -> bool:
    """Whether ``pyproject``'s ``[project]`` table names the project ``gpufeed`` (read line by
    line: Python 3.10 has no TOML parser, and this needs only the one key)."""
    try:
        lines = pyproject.read_text(encoding="utf-8").splitlines()
    except (OSError, UnicodeDecodeError):
        return False
    table = None
    for line in lines:
        header = _TABLE.match(line)
        if header:
            table = header.group(1)
        elif table == "project" and _GPUFEED_NAME.match(line):
            return True
    return False


def _git(cwd: Path, *args: str) -> str | None:
    """``git args`` run in ``cwd``: its output stripped, or None where git is missing or fails."""
    try:
        out = subprocess.run(["git", *args], capture_output=True, text=True, timeout=5, cwd=cwd)
    except (OSError, subprocess.SubprocessError):
        return None
    return out.stdout.strip() if out.returncode == 0 else None
