"""Rounds: contenders pooled over fresh processes, compared round by round."""

from __future__ import annotations

import pytest

from gpufeed.bench.harness import pool_rounds, round_ratios, spread


def _round(*seconds: float, **extra: object) -> dict:
    rates = sorted(10 / s for s in seconds)
    return {"name": "x", "seconds": list(seconds), "work": 10.0, "rate": rates[len(rates) // 2], **extra}


def test_pooled_rounds_take_the_median_of_every_epoch_and_keep_each_rounds_rate():
    row = pool_rounds([_round(1.0, 1.0, 1.0, check={"round": 1}), _round(2.0, 2.0, 3.0, check={"round": 2})])
    assert row["seconds"] == [1.0, 1.0, 1.0, 2.0, 2.0, 3.0]
    assert row["median_s"] == pytest.approx(1.5) and row["rate"] == pytest.approx(10 / 1.5)
    assert row["rate_min"] == pytest.approx(10 / 3) and row["rate_max"] == pytest.approx(10.0)
    assert row["rounds"] == 2 and row["round_rates"] == [10.0, 5.0]
    assert row["check"] == {"round": 2}  # the last round's checks


def test_a_failed_round_fails_the_contender():
    row = pool_rounds([_round(1.0), {"name": "x", "error": "worker died"}, _round(1.0)])
    assert row == {"name": "x", "error": "worker died"}


def test_ratios_pair_the_rounds_measured_together():
    kit = pool_rounds([_round(1.0), _round(2.0)])      # rates 10, 5: the machine slowed in round 2
    base = pool_rounds([_round(4.0), _round(8.0)])     # rates 2.5, 1.25: slowed alike
    assert round_ratios(kit, base) == [4.0, 4.0]
    assert spread(round_ratios(kit, base)) == "4.00"
    assert spread([0.81, 1.02]) == "0.81–1.02"
    # A row from before rounds (no round_rates) still compares by its rate.
    assert round_ratios({"rate": 6.0}, {"rate": 2.0}) == [3.0]
