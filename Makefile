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

.PHONY: install bench test lint gpu-check clean

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

# On a machine with a CUDA GPU: gpu-marked tests, doctor, every suite with --device cuda,
# one bundle in gpu-check-out/ (bench/gpu_check.sh says what runs).
gpu-check: install
	PYTHON=$(BIN)/python bash bench/gpu_check.sh

clean:
	rm -rf $(VENV) .pytest_cache
