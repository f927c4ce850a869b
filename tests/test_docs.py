"""Every Python example in README.md and docs/ runs as written, so a moved import or a
renamed argument cannot silently break the documentation.

The blocks of one file run in order in one namespace (later examples continue earlier
ones), in a scratch folder holding what the examples name: ``data/train`` (a small
ImageFolder tree) and ``readings.parquet`` (a small sensor table).
A block preceded by ``<!-- not run: reason -->`` is skipped, and the reason is shown.
"""

from __future__ import annotations

import os
import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
DOCS = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
_BLOCK = re.compile(r"(?:<!-- not run: (?P<why>.*?) -->\n)?```python\n(?P<code>.*?)```", re.S)


def python_blocks(path: Path) -> list[tuple[int, str, str | None]]:
    """``(line, code, reason not run)`` for each python block of a Markdown file."""
    text = path.read_text()
    return [(text.count("\n", 0, m.start("code")) + 1, m["code"], m["why"]) for m in _BLOCK.finditer(text)]


@pytest.fixture(scope="module")
def scratch(tmp_path_factory: pytest.TempPathFactory) -> Path:
    from gpufeed.datasets.images import generate_image_folder
    from gpufeed.datasets.sensor import write_sensor_table

    where = tmp_path_factory.mktemp("docs")
    generate_image_folder(where / "data" / "train", num_images=24, num_classes=3, min_side=96, max_side=128)
    write_sensor_table(where / "readings.parquet", 5_000)
    return where


def test_the_docs_have_examples_to_run():
    assert all(python_blocks(p) for p in DOCS[:1])  # README at least; a regex typo would find none


@pytest.mark.slow
@pytest.mark.parametrize("doc", DOCS, ids=lambda p: p.name)
def test_every_python_example_runs_as_written(doc: Path, scratch: Path, monkeypatch: pytest.MonkeyPatch):
    blocks = python_blocks(doc)
    if not blocks:
        pytest.skip(f"{doc.name} has no python examples")
    monkeypatch.chdir(scratch)
    monkeypatch.setenv("GPUFEED_CACHE", os.fspath(scratch / "cache"))
    namespace: dict = {"__name__": "__main__"}
    skipped = []
    for line, code, why in blocks:
        if why:
            skipped.append(f"{doc.name}:{line} ({why})")
            continue
        try:
            exec(compile(code, f"{doc.name}:{line}", "exec"), namespace)  # noqa: S102 - the docs' own code
        except Exception as exc:
            raise AssertionError(f"the example at {doc.name}:{line} fails: {type(exc).__name__}: {exc}") from exc
    if skipped:
        print("not run:", "; ".join(skipped))


_SHELL = re.compile(r"```bash\n(?P<code>.*?)```", re.S)


def shell_commands(path: Path) -> list[tuple[int, list[str]]]:
    """``(line, words)`` of each command in a Markdown file's bash blocks: continuation
    lines joined, comments dropped. A synopsis (``gpufeed bench images [--data DIR]
    [--mode train|val]``) reads as one example of it: brackets dropped, the first of
    ``a|b`` kept."""
    import shlex

    text = path.read_text()
    commands = []
    for m in _SHELL.finditer(text):
        first = text.count("\n", 0, m.start("code")) + 1
        start, command = 0, ""
        for k, line in enumerate(m["code"].splitlines()):
            start = start if command else k
            command += line
            if command.endswith("\\"):
                command = command[:-1]
                continue
            words = shlex.split(command, comments=True)
            command = ""
            words = [re.sub(r"\|.*", "", w.strip("[]")) for w in words]
            if words:
                commands.append((first + start, [w for w in words if w]))
    return commands


def _commands(program: str) -> list[tuple[str, list[str]]]:
    return [(f"{doc.name}:{line}", words) for doc in DOCS for line, words in shell_commands(doc)
            if words[0] == program]


def test_the_docs_have_commands_to_check():
    assert len(_commands("gpufeed")) > 20 and _commands("python") and _commands("torchrun")


@pytest.mark.parametrize("where, words", _commands("gpufeed"), ids=[w for w, _ in _commands("gpufeed")])
def test_every_gpufeed_command_in_the_docs_parses(where: str, words: list[str], tmp_path: Path,
                                                  monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture):
    """Each ``gpufeed ...`` line of a bash block names a command, suite and options the CLI
    has, with values it takes (parsed only, nothing runs), so a renamed option cannot
    linger in the docs. Input files the docs' reader would have (``FILE``,
    ``flights.parquet``) are not made: refusing them as missing is the parse passing."""
    from gpufeed.cli import parse_args

    monkeypatch.chdir(tmp_path)
    try:
        parse_args(words[1:])
    except SystemExit as exc:
        error = capsys.readouterr().err.strip().splitlines()[-1]
        if not re.search(r": (no such file|does not exist)|nor a table file or folder$", error):
            raise AssertionError(f"{where}: `{' '.join(words)}` is refused by the command line: {error}") from exc


@pytest.mark.slow
def test_every_example_command_in_the_docs_takes_its_options():
    """``python examples/X.py --opt ...`` and ``torchrun ... examples/X.py --opt ...``:
    every option is one the script's ``--help`` lists."""
    import subprocess
    import sys

    helps: dict[str, str] = {}
    for where, words in _commands("python") + _commands("torchrun"):
        script = next((w for w in words if w.startswith("examples/")), None)
        if script is None:
            continue
        if script not in helps:
            out = subprocess.run([sys.executable, str(ROOT / script), "--help"], capture_output=True, text=True,
                                 timeout=300)
            assert out.returncode == 0, out.stderr[-2000:]
            helps[script] = out.stdout
        options = [w.split("=")[0] for w in words[words.index(script) + 1:] if w.startswith("--")]
        unknown = [o for o in options if not re.search(rf"(?<![\w-]){re.escape(o)}(?![\w-])", helps[script])]
        assert not unknown, f"{where}: {script} has no option {', '.join(unknown)}"
