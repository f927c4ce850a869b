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
