"""Benchmark suites (`gpufeed bench images|augment|tabular|formats`) and their shared harness.

The method is the one in BENCHMARKING.md: side by side in one run, warm-up, several timed
repeats, median and spread, ratio to a fairly tuned baseline, correctness checked after
timing, and machine metadata written beside every result.
"""
