# The two quickstart commands: `make bench` (the main job) and `make test`.
# Both build .venv from scratch when it is missing, with only python3 on the machine.
PYTHON ?= python3
VENV   ?= .venv
EXTRAS ?= dali-cpu,test
# Where `make bench` writes its results: gpufeed-results/ (gitignored). The recorded runs live
# in bench/results/; record one there with `make bench OUT=bench/results`.
OUT    ?= gpufeed-results
BIN     = $(VENV)/bin
# The venv's record of the extras it was last installed with: `make install EXTRAS=cuda13` on a
# venv built with other extras runs pip again (the target had depended on pyproject.toml alone,
# so "Nothing to be done" left the venv without the GPU libraries, or ruff and hadolint).
comma  := ,
STAMP   = $(VENV)/.installed-$(subst $(comma),+,$(EXTRAS))

# pandas' lower bound (pyproject.toml), laid over the venv's newer pandas for the table tests
# (`make test` runs them again on it: ~1.5 minutes, where `.ci/floor-check`'s floor venv is
# another ~8 GB and the whole suite). pandas 2.2 hashes text and infers datetime units otherwise
# than pandas 3: a Dask Categorify that lost values there passed every test on pandas 3.
PANDAS_FLOOR ?= 2.2.3
FLOOR_DIR     = $(VENV)/pandas-$(PANDAS_FLOOR)
TABLE_TESTS   = tests/gpu_transforms/tabular tests/pipelines/test_tables.py tests/pipelines/test_tables_handoff.py

.PHONY: install bench test test-pandas-floor lint gpu-check clean

$(BIN)/python:
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --upgrade pip

$(STAMP): pyproject.toml | $(BIN)/python
	$(BIN)/python -m pip install -e ".[$(EXTRAS)]"
	rm -f $(VENV)/.installed-*
	touch $@

install: $(STAMP)

bench: install
	$(BIN)/gpufeed bench --out $(OUT)

lint: install
	$(BIN)/ruff check gpufeed tests examples
	$(BIN)/hadolint --failure-threshold warning Dockerfile

test: install lint
	$(BIN)/python -m pytest
	$(MAKE) test-pandas-floor

test-pandas-floor: install
	$(BIN)/python -m pip install --quiet --no-deps --target $(FLOOR_DIR) "pandas==$(PANDAS_FLOOR)" pytz tzdata
	PYTHONPATH=$(FLOOR_DIR) $(BIN)/python -c "import pandas; assert pandas.__version__ == '$(PANDAS_FLOOR)', pandas.__version__"
	PYTHONPATH=$(FLOOR_DIR) $(BIN)/python -m pytest -q -p no:cacheprovider $(TABLE_TESTS)

# On a machine with a CUDA GPU: gpu-marked tests, doctor, every suite with --device cuda,
# one bundle in gpu-check-out/ (bench/gpu_check.sh says what runs).
gpu-check: install
	PYTHON=$(BIN)/python bash bench/gpu_check.sh

clean:
	rm -rf $(VENV) .pytest_cache
