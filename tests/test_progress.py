"""Progress in a log is a line per stage, never a carriage-return bar."""

from __future__ import annotations

import io

from gpufeed.datasets.images import generate_image_folder
from gpufeed.progress import is_interactive, progress, stage


class _Terminal(io.StringIO):
    def isatty(self) -> bool:
        return True


def test_a_log_gets_lines_not_a_bar():
    log = io.StringIO()
    assert not is_interactive(log)
    assert list(progress(range(500), desc="decoding", unit="img", stream=log)) == list(range(500))
    stage("[images] running torch-pil ...", stream=log)
    text = log.getvalue()
    assert "\r" not in text
    lines = text.splitlines()
    assert lines[0] == "decoding: 500 img ..." and lines[1].startswith("decoding: done, 500 img in ")
    assert lines[2] == "[images] running torch-pil ..." and len(lines) == 3


def test_a_terminal_gets_a_bar():
    tty = _Terminal()
    assert is_interactive(tty)
    assert list(progress(range(3), desc="x", stream=tty)) == [0, 1, 2]
    assert "\r" in tty.getvalue()


def test_generating_images_in_a_log_prints_lines(tmp_path, capsys):
    generate_image_folder(tmp_path / "d", num_images=3, num_classes=1, min_side=16, max_side=20, progress=True)
    err = capsys.readouterr().err
    assert "\r" not in err
    assert err.splitlines()[0] == f"generating {tmp_path / 'd'}: 3 img ..."
    assert "done, 3 img" in err.splitlines()[-1]
