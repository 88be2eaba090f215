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

# Development and CI install every extra (torch comes from the CPU wheel named in the
# inference extra); service images install only the extras they need (deploy/Dockerfile).
install: $(BIN)/python system-deps
	$(BIN)/pip install -q -e '.[inference,test]'

system-deps:
	@command -v chromium >/dev/null && command -v chromedriver >/dev/null && [ -f /usr/share/wordnet/data.noun ] || \
		{ $(SUDO) apt-get update -qq && $(SUDO) apt-get install -y -qq $(SYSTEM_PACKAGES); }

test: install
	$(BIN)/python -m pytest -q

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
