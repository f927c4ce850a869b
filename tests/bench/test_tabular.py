"""The benchmark's baselines compute what the kit computes (no timing here)."""

from __future__ import annotations

import argparse
import json
import re

import numpy as np
import pandas as pd
import pytest

from gpufeed.bench import tabular
from gpufeed.bench.formats import recommend
from gpufeed.bench.results import headline, suite_ratios
from gpufeed.bench.tabular import bench_rule, rule_columns, rule_pandas, rule_row
from gpufeed.bench.tabular_ops import bench_recipe, hand_recipe
from gpufeed.datasets.sensor import generate_sensor_table
from gpufeed.datasets.transactions import iter_transaction_chunks
from gpufeed.gpu_transforms.tabular import apply_rules, apply_rules_rowwise, to_backend


def _table(name: str, rows: int, seed: int):
    if name == "sensor":
        return generate_sensor_table(rows, seed=seed)
    return next(iter_transaction_chunks(rows, seed=seed))


@pytest.mark.parametrize("name", ["sensor", "transactions"])
def test_hand_written_baseline_recipe_equals_the_kit_recipe_on_pandas_and_polars(name):
    table = _table(name, 3000, 9)
    baseline = hand_recipe(table, name)
    for backend in ("pandas", "polars"):
        kit = bench_recipe(name).fit_transform(to_backend(table, backend))
        kit = kit.to_pandas() if backend == "polars" else kit
        for c in table.columns:
            if c == "timestamp" or not pd.api.types.is_numeric_dtype(baseline[c].dtype):
                continue
            np.testing.assert_allclose(kit[c].to_numpy(float, na_value=np.nan),
                                       baseline[c].to_numpy(float, na_value=np.nan), rtol=1e-9,
                                       atol=1e-9, err_msg=f"{name} {backend} {c}")


@pytest.mark.parametrize("name", ["sensor", "transactions"])
def test_every_rule_variant_gives_the_same_weights(name):
    table = _table(name, 5000, 2)
    loop = [rule_row(name, *v) for v in zip(*(table[c] for c in rule_columns(name)), strict=True)]
    assert loop == apply_rules_rowwise(table, [bench_rule(name)])["weight"]
    assert loop == rule_pandas(table, name).tolist()
    assert loop == apply_rules(table, [bench_rule(name)])["weight"].tolist()
    assert loop == apply_rules(to_backend(table, "polars"), [bench_rule(name)])["weight"].to_list()
    assert len(set(loop)) == 4


def test_recipe_part_reports_per_op_both_tables_and_skips_what_does_not_fit(tmp_path):
    args = argparse.Namespace(
        parts="recipe", tables="sensor,transactions", rows="2000,100000000", rule_rows=2000, loop_rows=200,
        downcast_rows=2000, backends="polars", repeats=1, warmup=0, min_seconds=0.0, data_dir=str(tmp_path / "data"),
        max_ram_gb=4.0, out=str(tmp_path / "out"), rounds=2,
    )
    assert tabular.run(args) == 0
    doc = json.loads(next((tmp_path / "out").glob("tabular-*.json")).read_text())
    for name in ("sensor", "transactions"):
        small = doc["recipe"][name]["2000"]
        assert set(small) == {"pandas-baseline", "polars"}
        for result in small.values():
            assert [s["op"] for s in result["per_op"]] == [
                "FillMissing", "Clip", "Log", "Standardize", "MinMax", "Categorify"]
            assert result["timing"]["median_s"] == pytest.approx(sum(s["median_s"] for s in result["per_op"]))
            assert result["peak_rss_gb"] > 0
            # Two rounds, each a process of its own: every op's repeats of both pooled, each
            # round's median kept for the per-round ratios.
            assert result["rounds"] == 2
            assert all(len(s["seconds"]) == 2 and len(s["round_medians"]) == 2 for s in result["per_op"])
            assert len(result["timing"]["round_medians"]) == 2
        assert all("skipped" in r for r in doc["recipe"][name]["100000000"].values())
    ratios = suite_ratios(doc)
    assert {"recipe sensor 2,000: polars", "recipe transactions 2,000: polars"} <= set(ratios)
    assert headline(doc)["ratio"] is not None
    md = next((tmp_path / "out").glob("tabular-*.md")).read_text()
    assert "transactions, 2,000 rows" in md and "Categorify (4 cols)" in md and "same as baseline" in md
    assert "2 rounds, each variant in a fresh process per round" in md
    # A ratio and its rounds' range, to 3 significant digits (a cold first call at 2,000 rows
    # gave 0.12 (0.0726–0.33) in CI)
    assert re.search(r"\| Categorify \(4 cols\) \| [^|]+ \| [^|]+ \| \d+\.\d+ \(\d+\.\d+(–\d+\.\d+)?\) \|", md)
    assert "DIFFERS" not in md
    # The check is in the JSON too (compare reads it there), and each op's ratio is judged.
    assert doc["recipe"]["sensor"]["2000"]["polars"]["check"] == "same as baseline"
    assert "op sensor 2,000 Standardize: polars" in ratios


def test_a_kit_output_other_than_the_baselines_fails_the_run(tmp_path, monkeypatch):
    monkeypatch.setattr(tabular, "output_check", lambda result, base: "DIFFERS in `amount`")
    args = argparse.Namespace(
        parts="recipe", tables="transactions", rows="2000", rule_rows=2000, loop_rows=200, downcast_rows=2000,
        backends="polars", repeats=1, warmup=0, min_seconds=0.0, data_dir=str(tmp_path / "data"), max_ram_gb=4.0,
        out=str(tmp_path / "out"), rounds=1,
    )
    assert tabular.run(args) == 1  # recorded, but no success: it had exited 0
    doc = json.loads(next((tmp_path / "out").glob("tabular-*.json")).read_text())
    assert doc["recipe"]["transactions"]["2000"]["polars"]["check"] == "DIFFERS in `amount`"


def test_tables_takes_folders_and_paths_with_commas_and_refuses_unknown_backends(tmp_path):
    parser = argparse.ArgumentParser()
    tabular.add_arguments(parser)
    folder = tmp_path / "by, region"
    folder.mkdir()
    pd.DataFrame({"r": ["a", "b"], "x": [1.0, 2.0]}).to_parquet(folder / "part.parquet")
    args = parser.parse_args(["--tables", str(folder)])  # a dataset folder, a comma in its name
    assert [t.name for t in tabular._tables(args)] == ["by, region"]
    with pytest.raises(SystemExit):
        parser.parse_args(["--backends", "pandas,polar"])


def test_the_output_check_catches_a_scaled_or_reordered_column_and_names_it():
    from gpufeed.bench.tabular_ops import column_checksums, differing

    base = pd.DataFrame({"z": np.linspace(-1, 1, 101), "code": np.arange(101) % 7, "same": 1.0})
    right = column_checksums(base)
    assert differing(column_checksums(base.copy()), right) == []
    assert differing(column_checksums(base.assign(z=base["z"] * 2)), right) == ["z"]  # its sum stays 0
    assert differing(column_checksums(base.assign(code=base["code"].to_numpy()[::-1])), right) == ["code"]
    assert column_checksums(pd.DataFrame({"t": ["a", "b"]})) == {}  # a text-only table has none


def test_recommendation_prefers_portable_formats_and_flags_losers():
    rows = [
        {"format": "csv", "read_x": 1.0, "write_x": 1.0, "size_x": 1.0, "round_trip_equal": True, "dtypes_kept": True},
        {"format": "parquet", "read_x": 5.0, "write_x": 10.0, "size_x": 0.6, "round_trip_equal": True,
         "dtypes_kept": True},
        {"format": "pickle", "read_x": 30.0, "write_x": 100.0, "size_x": 1.1, "round_trip_equal": True,
         "dtypes_kept": True},
        {"format": "json", "read_x": 0.2, "write_x": 1.2, "size_x": 2.5, "round_trip_equal": True,
         "dtypes_kept": False},
    ]
    text = recommend(rows)
    assert "All-round: parquet" in text and "Fastest read: pickle" in text and "larger than CSV: json" in text
    assert "reads 5.0× faster than CSV and writes 10.0× faster than CSV" in text
    # A pick slower than CSV (polars' CSV reader is fast) is not called faster.
    rows[1] |= {"read_x": 0.5, "write_x": 0.8, "size_x": 0.3}
    assert "reads 2.0× slower than CSV and writes 1.2× slower than CSV" in recommend(rows)


def test_the_all_round_pick_says_when_no_format_kept_the_dtypes():
    # `--formats csv,json`: CSV changed dtypes, yet the pick said "dtypes kept"; and
    # csv-pandas (the CSV file itself, read by pandas) was picked as a format.
    rows = [
        {"format": "csv", "read_x": 1.0, "write_x": 1.0, "size_x": 1.0, "round_trip_equal": True, "dtypes_kept": False},
        {"format": "csv-pandas", "read_x": 1.2, "write_x": 1.3, "size_x": 1.0, "round_trip_equal": True,
         "dtypes_kept": True},
        {"format": "json", "read_x": 0.2, "write_x": 0.5, "size_x": 2.5, "round_trip_equal": True, "dtypes_kept": False},
    ]
    text = recommend(rows)
    assert "All-round: csv**" in text and "dtypes changed: no format measured kept them" in text
    assert "dtypes kept" not in text


def test_a_workers_peak_memory_is_its_own_not_its_parents():
    # A spawned benchmark worker kept its parent's peak in ru_maxrss: after the parent had
    # generated a large table, every worker reported the parent's 3.3 GB as its own.
    import subprocess
    import sys

    import numpy as np

    held = np.ones(400 * 2**20 // 8)  # 400 MiB, touched: the parent's peak
    child = subprocess.run([sys.executable, "-c", "from gpufeed.machine import peak_rss_bytes; print(peak_rss_bytes())"],
                           capture_output=True, text=True, check=True)
    assert held.sum() > 0
    assert int(child.stdout) < 300 * 2**20


def _own_table_file(tmp_path, rows: int = 600):
    rng = np.random.default_rng(4)
    frame = pd.DataFrame({
        "origin": rng.choice(["EWR", "JFK", "LGA"], rows),
        "tailnum": [f"N{i}" if i % 40 else None for i in rng.integers(0, 300, rows)],
        "single": "same",  # one value: no group key
        "delay": np.where(rng.random(rows) < 0.05, np.nan, rng.normal(10, 30, rows)),
        "distance": rng.integers(50, 5000, rows),
        "arr_delay": rng.integers(-60, 300, rows),
        "when": pd.date_range("2013-01-01", periods=rows, freq="h"),
        "cancelled": rng.random(rows) < 0.1,
        "never": np.nan,  # no value to fit on
        "spiky": np.where(np.arange(rows) == 3, np.inf, 1.0),  # the ops refuse inf
    })
    path = tmp_path / "flights.csv"
    frame.to_csv(path, index=False)
    return path, frame


def test_a_users_table_gets_a_recipe_from_its_column_types(tmp_path):
    from gpufeed.bench.own_table import own_table, plan_recipe, sized_file

    path, frame = _own_table_file(tmp_path)
    table = own_table(str(path))
    assert table.name == "flights.csv" and table.rows == len(frame)
    assert {kind: (cols, dict(kw)) for kind, cols, kw in table.ops} == {
        "FillMissing": (("delay",), {}),
        "Clip": (("delay",), {"quantiles": (0.001, 0.999)}),
        "Log": (("distance",), {}),  # non-negative integers
        "Standardize": (("delay",), {"by": "origin"}),  # the text column with the fewest values (>= 2)
        "MinMax": (("arr_delay",), {}),  # integers with negatives
        "Categorify": (("origin", "tailnum", "single"), {}),
    }
    assert dict(table.untouched) == {"when": "dates/times: no op of the recipe takes it",
                                     "cancelled": "booleans: no op of the recipe takes it",
                                     "never": "no value", "spiky": "holds inf, which the ops refuse"}
    # pandas categories arrive as Arrow dictionaries (Arrow cannot count those directly);
    # a key with a value per row or two (R's row names) is no group.
    coded = frame.assign(origin=frame["origin"].astype("category"), rowname=[f"r{i}" for i in range(len(frame))])
    coded.to_parquet(tmp_path / "coded.parquet")
    planned = {kind: (cols, dict(kw)) for kind, cols, kw in own_table(str(tmp_path / "coded.parquet")).ops}
    assert planned["Standardize"] == (("delay",), {"by": "origin"}) and "rowname" in planned["Categorify"][0]
    # Sized files keep the file's values: its rows repeated, or its first rows.
    import pyarrow.parquet as pq

    big = pq.read_table(sized_file(table, 1500, str(tmp_path / "data"))).to_pandas()
    assert len(big) == 1500 and big["distance"].tolist() == (frame["distance"].tolist() * 3)[:1500]
    small = pq.read_table(sized_file(table, 7, str(tmp_path / "data"))).to_pandas()
    assert small["origin"].tolist() == frame["origin"][:7].tolist()
    import pyarrow as pa

    with pytest.raises(ValueError, match="no number or text column"):
        plan_recipe("t", "t.csv", pa.table({"flag": [True, False]}))
    with pytest.raises(ValueError, match="no rows"):
        plan_recipe("t", "t.csv", pa.table({"x": pa.array([], pa.float64())}))


def test_recipe_part_runs_on_a_users_table_file(tmp_path):
    path, _ = _own_table_file(tmp_path)
    parser = argparse.ArgumentParser()
    tabular.add_arguments(parser)
    with pytest.raises(SystemExit):
        parser.parse_args(["--tables", f"sensor,{tmp_path / 'missing.csv'}"])
    args = parser.parse_args(["--tables", str(path), "--rows", "400,1000", "--downcast-rows", "300",
                              "--backends", "pandas,polars", "--repeats", "1", "--warmup", "0",
                              "--min-seconds", "0", "--data-dir", str(tmp_path / "data"), "--rounds", "1",
                              "--out", str(tmp_path / "out")])
    assert tabular.run(args) == 0
    doc = json.loads(next((tmp_path / "out").glob("tabular-*.json")).read_text())
    assert doc["own_tables"]["flights.csv"]["ops"][0] == ["FillMissing", ["delay"], {}]
    assert doc["rule"] == {}
    for rows in ("400", "1000"):
        per = doc["recipe"]["flights.csv"][rows]
        assert set(per) == {"pandas-baseline", "pandas", "polars"}
        assert all(r["rows_out"] == int(rows) for r in per.values())
    md = next((tmp_path / "out").glob("tabular-*.md")).read_text()
    assert "flights.csv, 1,000 rows (the file's 600 rows repeated to 1,000)" in md
    assert "flights.csv, 400 rows (the file's first 400 of 600 rows)" in md
    assert "`Standardize` by `origin`: `delay`" in md and "untouched: `never` (no value)" in md
    assert md.count("same as baseline") == 4 and "DIFFERS" not in md
    assert "recipe flights.csv 1,000: polars" in suite_ratios(doc)
    # Downcast runs on the user's table, not the sensor table.
    assert set(doc["downcast"]) == {"flights.csv"}
    shrunk = doc["downcast"]["flights.csv"]["pandas"]
    assert shrunk["bytes_after"] < shrunk["bytes_before"] and shrunk["checksum_equal"]


@pytest.mark.parametrize("backend", ["pandas", "polars"])
def test_hand_written_categorify_numbers_category_columns_as_the_kit_does(backend):
    # A table read from HDF5 kept its categories in order of appearance: factorize went by
    # that order, the kit by sorted values, and the output check read DIFFERS.
    from gpufeed.bench.tabular_ops import HAND
    from gpufeed.gpu_transforms.tabular import Categorify, Recipe

    frame = pd.DataFrame({"u": pd.Categorical(["b", "a", None, "a", "c"], categories=["c", "b", "a"])})
    kit = Recipe([Categorify(["u"])]).fit_transform(to_backend(frame, backend))
    kit = kit.to_pandas() if backend == "polars" else kit
    assert HAND["Categorify"](frame, Categorify(["u"]))["u"].tolist() == kit["u"].tolist() == [3, 2, 1, 2, 4]


def test_the_plan_of_a_wide_table_names_a_few_columns_per_op_and_counts_the_rest(tmp_path):
    from gpufeed.bench.own_table import SHOWN, own_table

    rng = np.random.default_rng(0)
    frame = pd.DataFrame(rng.normal(size=(40, 300)), columns=[f"f{i:03d}" for i in range(300)])
    frame["site"] = ["a", "b"] * 20
    for i in range(20):
        frame[f"flag{i}"] = [True, False] * 20
    path = tmp_path / "wide.parquet"
    frame.to_parquet(path)
    text = own_table(str(path)).describe()
    # A report line listed all 300 columns, and one line per untouched column.
    assert "`f000`, `f001`" in text and f"and {300 - SHOWN} more" in text and "`f299`" not in text
    untouched = [line for line in text.splitlines() if line.startswith("- untouched")]
    assert untouched == [f"- untouched: {', '.join(f'`flag{i}`' for i in range(SHOWN))} and {20 - SHOWN} more "
                         "(booleans: no op of the recipe takes it)"]


def test_the_downcast_check_says_not_checked_where_no_check_ran():
    # A cuDF result once came without the check, and the report read "values differ".
    assert tabular._downcast_check({"checksum_equal": True}) == "values equal"
    assert tabular._downcast_check({"checksum_equal": False}) == "VALUES DIFFER"
    assert tabular._downcast_check({}) == "not checked"
    assert tabular._downcast_check({"error": "Traceback ...\nMemoryError: out of memory\n"}) == "MemoryError: out of memory"


@pytest.mark.gpu
def test_column_checksums_of_a_cudf_frame_with_nulls_equal_pandas_ones():
    cudf = pytest.importorskip("cudf", reason="cuDF is not installed")
    from gpufeed.bench.tabular_ops import column_checksums

    pdf = pd.DataFrame({"n": pd.array([1, None, 3], dtype="Int16"), "x": [0.5, np.nan, 2.0], "s": ["a", "b", None]})
    assert column_checksums(cudf.from_pandas(pdf)) == column_checksums(pdf)


def test_rounds_count_once_each_and_the_ratio_lies_within_its_rounds():
    # A fast round timed more repeats (--min-seconds) than a slow one: pooled repeats had
    # leaned to it, and a ratio of 0.33 was shown beside its rounds' 1.00.
    from gpufeed.bench.tabular_ops import _ratio, pool_recipe_rounds

    def result(*rounds_seconds: list[float]) -> dict:
        rounds = []
        for seconds in rounds_seconds:
            step = {"op": "Log", "columns": 1, "seconds": seconds, "median_s": float(np.median(seconds)), "work": 10.0}
            rounds.append({"per_op": [step], "timing": {"median_s": step["median_s"], "work": 10.0},
                           "peak_rss_gb": 0.1 * len(seconds), "checksum": {}, "rows_out": 10})
        return pool_recipe_rounds(rounds)

    base, kit = result([1.0, 1.0, 1.0], [3.0]), result([1.0], [3.0, 3.0, 3.0])
    step = base["per_op"][0]
    assert step["median_s"] == 2.0 and step["round_medians"] == [1.0, 3.0] and len(step["seconds"]) == 4
    assert (min(step["seconds"]), max(step["seconds"])) == (1.0, 3.0)
    assert _ratio(step, kit["per_op"][0]) == "1.00 (1.00)"
    assert base["peak_rss_gb"] == pytest.approx(0.3) and base["rounds"] == 2
    assert pool_recipe_rounds([{"per_op": []}, {"error": "boom"}]) == {"error": "boom"}  # a failed round fails it
