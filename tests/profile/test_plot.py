"""The timeline figure is a PNG."""

import pytest

from tests.profile.fakes import known


def test_plot_writes_a_png(tmp_path):
    path = known().plot(tmp_path / "sub" / "stall.png")
    assert path.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_plot_refuses_another_format(tmp_path):
    with pytest.raises(ValueError, match=r"\.png"):
        known().plot(tmp_path / "stall.svg")
