# The two quickstart commands: `make bench` (the main job) and `make test`.
# Both build .venv from scratch when it is missing, with only python3 on the machine.
PYTHON ?= python3
VENV   ?= .venv
EXTRAS ?= dali-cpu,test
BIN     = $(VENV)/bin

.PHONY: install bench test lint clean

$(BIN)/gpufeed: pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --upgrade pip
	$(BIN)/python -m pip install -e ".[$(EXTRAS)]"
	touch $@

install: $(BIN)/gpufeed

bench: install
	$(BIN)/gpufeed bench

lint: install
	$(BIN)/ruff check gpufeed tests examples

test: install lint
	$(BIN)/python -m pytest

clean:
	rm -rf $(VENV) .pytest_cache
