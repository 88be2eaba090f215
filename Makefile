# Flawforge developer targets. `make install` then `make test` on a fresh clone.
PY ?= python3
VENV := .venv
BIN := $(VENV)/bin
SHARED ?= ../shared/data

.PHONY: install install-inference test test-fast bench proto run clean

$(BIN)/python:
	$(PY) -m venv $(VENV)
	$(BIN)/pip install -q --upgrade pip setuptools wheel

install: $(BIN)/python
	$(BIN)/pip install -q -e '.[test]'

install-inference: install
	$(BIN)/pip install -q -e '.[inference,test]'

test: install
	$(BIN)/python -m pytest -q

test-fast: install
	$(BIN)/python -m pytest -q -m "not slow and not model and not browser"

bench: install
	@for f in bench/bench_*.py; do echo "== $$f"; $(BIN)/python $$f || exit 1; done

proto: install
	$(BIN)/python -m flawforge.proto.export proto/schemas

clean:
	rm -rf var out .pytest_cache
