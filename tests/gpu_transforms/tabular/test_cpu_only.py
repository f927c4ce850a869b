"""The CPU path never imports cuDF or cupy; the cudf.pandas helpers fail clearly without a GPU."""

from __future__ import annotations

import subprocess
import sys
import textwrap

import pytest

from gpufeed.gpu_transforms.tabular.cudf_pandas import (
    FallbackReport,
    cudf_pandas_available,
    run_script,
)


def test_cpu_workflow_never_imports_gpu_libraries(tmp_path):
    script = textwrap.dedent(f"""
        import sys
        from gpufeed.datasets.sensor import generate_sensor_table
        from gpufeed.backends import choose_dataframe_backend
        from gpufeed.datasets.tables import read_table, write_table
        from gpufeed.gpu_transforms.tabular import (Categorify, FillMissing, Recipe, Rule, apply_rules, col,
            downcast, split_random)
        from gpufeed.gpu_transforms.tabular.dask import to_dask
        from gpufeed.pipelines.tables import to_tensors
        backend = choose_dataframe_backend("auto").name
        assert backend == "polars", backend
        table = read_table(write_table(generate_sensor_table(300, n_features=6), r"{tmp_path}/t.parquet"),
                           backend=backend)
        small, report = downcast(table)
        split = split_random(small)
        recipe = Recipe([FillMissing(["temp_03"]), Categorify(["region"])]).fit(split.train)
        out = apply_rules(recipe.transform(split.val), [Rule("w", [(col("region") == 2, 1.0)], default=0.0)])
        x, y = to_tensors(out, ["temp_03", "w"], "label", device="auto")
        Recipe([FillMissing(["temp_03"])]).fit(to_dask(generate_sensor_table(300, n_features=6), 2))
        bad = sorted(m for m in sys.modules if m.split(".")[0] in ("cudf", "cupy", "dask_cudf", "rmm"))
        print("GPU modules:", bad)
        sys.exit(1 if bad else 0)
    """)
    proc = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=120,
                          env={"CUDA_VISIBLE_DEVICES": "", **__import__("os").environ})
    assert proc.returncode == 0, proc.stdout + proc.stderr


def test_table_preprocessing_never_imports_torch(tmp_path):
    # Reading, recipes, rules, splits and downcasts need no torch: importing it cost ~2 s
    # of the ~3 s it took to import the table API (through the backend chooser).
    script = textwrap.dedent(f"""
        import sys
        from gpufeed.datasets.sensor import generate_sensor_table
        from gpufeed.datasets.tables import read_table, write_table
        from gpufeed.gpu_transforms.tabular import (Categorify, FillMissing, Recipe, Rule, apply_rules, col,
            downcast, split_random)
        path = write_table(generate_sensor_table(300, n_features=6), r"{tmp_path}/t.parquet")
        for backend in ("auto", "pandas", "polars"):
            table, _ = downcast(read_table(path, backend=backend))
            split = split_random(table)
            recipe = Recipe([FillMissing(["temp_03"]), Categorify(["region"])]).fit(split.train)
            apply_rules(recipe.transform(split.val), [Rule("w", [(col("region") == 2, 1.0)], default=0.0)])
        sys.exit(1 if "torch" in sys.modules else 0)
    """)
    proc = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stdout + proc.stderr


def test_fallback_report_lists_cpu_functions_slowest_first():
    report = FallbackReport.from_stats({
        "DataFrame.groupby": {"gpu": [0.2, 0.1], "cpu": []},
        "DataFrame.apply": {"gpu": [], "cpu": [1.5]},
        "Series.map": {"gpu": [0.1], "cpu": [0.3, 0.2]},
    })
    assert [f.name for f in report.fallbacks] == ["DataFrame.apply", "Series.map"]
    assert report.gpu_time_share == pytest.approx(0.4 / 2.4)
    assert "2 of 3 pandas functions fell back" in report.to_markdown()


@pytest.mark.skipif(cudf_pandas_available(), reason="cuDF and a GPU are present")
def test_run_script_without_a_gpu_explains_what_is_needed(tmp_path):
    script = tmp_path / "prep.py"
    script.write_text("import pandas as pd\n")
    with pytest.raises(RuntimeError, match="cudf.pandas needs cuDF and a CUDA GPU.*cuda13"):
        run_script(script)
    with pytest.raises(FileNotFoundError, match="missing.py"):
        run_script(tmp_path / "missing.py")
    proc = subprocess.run([sys.executable, "-m", "gpufeed.gpu_transforms.tabular.cudf_pandas", str(script)],
                          capture_output=True, text=True, timeout=60)
    assert proc.returncode == 2 and "cudf.pandas needs cuDF" in proc.stderr


@pytest.mark.gpu
def test_run_script_reports_fallbacks_on_the_gpu(tmp_path):
    pytest.importorskip("cudf", reason="cuDF is not installed")
    script = tmp_path / "prep.py"
    script.write_text("import pandas as pd\ndf = pd.DataFrame({'a': range(1000)})\n"
                      "df.groupby(df.a % 7).sum()\ndf.apply(list, axis=1)\n")
    report = run_script(script)
    assert report.returncode == 0 and report.functions
