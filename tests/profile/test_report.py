"""The report's figures, text and JSON, from known per-step times."""

import json

import pytest

from gpufeed.profile import StallReport
from gpufeed.profile.report import REPORT_KEYS, distribution
from tests.profile.fakes import known


def test_figures_leave_the_warmup_out():
    r = known()
    assert r.wait_s == pytest.approx(0.12) and r.step_s == pytest.approx(0.04)
    assert r.stall_pct == pytest.approx(75.0)
    assert r.samples_per_s == pytest.approx(32 / 0.16)
    assert r.gpu_busy_pct is None


def test_json_has_the_documented_keys():
    doc = json.loads(known().to_json())
    assert tuple(doc) == REPORT_KEYS
    assert set(doc["per_step_ms"]) == {"wait", "step", "iteration"}
    assert set(doc["per_step_ms"]["step"]) == {"median", "p10", "p90", "max"}
    assert doc["per_step_ms"]["iteration"]["median"] == pytest.approx(40.0)
    assert len(doc["timeline"]["wait_s"]) == 6  # the timeline keeps the warm-up
    assert doc["steps"] == 4 and doc["warmup_steps"] == 2 and doc["samples"] == 32


def test_text_names_the_stall_and_the_throughput():
    text = known().to_text()
    assert "75.0 %" in text and "200.0 images/s" in text and "2 warm-up steps left out" in text


def test_distribution_is_in_milliseconds():
    d = distribution([0.001 * i for i in range(1, 11)])
    assert d["median"] == pytest.approx(5.5) and d["max"] == pytest.approx(10.0)
    assert d["p10"] < d["median"] < d["p90"]


def test_gpu_busy_is_the_event_time_over_the_step_time():
    r = StallReport(wait=(0.0, 0.0), step=(0.02, 0.02), samples=(1, 1), warmup=0, clock="wall, CUDA-synchronised",
                    device="cuda:0", gpu=(0.01, 0.01))
    assert r.gpu_busy_pct == pytest.approx(50.0)
    assert "GPU busy 50 %" in r.to_text() and "gpu_s" in r.as_dict()["timeline"]
