# The two commands a new machine needs: `make run` and `make test`. Both set everything up first.
PY ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed
# torch is pinned and installed first: an unpinned torch pulls a multi-GB CUDA build.
TORCH := torch==2.13.0

.PHONY: setup chromium run test lint typecheck pytest bench clean

$(STAMP): pyproject.toml
	test -d $(VENV) || $(PY) -m venv $(VENV)
	$(BIN)/pip install -q --upgrade pip
	$(BIN)/pip install -q $(TORCH)
	$(BIN)/pip install -q -e '.[train,dev]'
	touch $(STAMP)

setup: $(STAMP) chromium

# The dashboard's browser test drives Debian's Chromium (never a downloaded build). Installed once,
# only as root where apt-get exists; elsewhere that test skips and says why.
chromium:
	@if [ ! -x /usr/bin/chromium ] && command -v apt-get >/dev/null 2>&1 && [ "$$(id -u)" = 0 ]; then \
		echo "installing chromium, chromium-driver and an emoji font for the browser test"; \
		( apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq \
			chromium chromium-driver fonts-noto-color-emoji ) >/dev/null 2>&1 \
			|| echo "could not install chromium: the browser test will be skipped"; \
	fi

run: $(STAMP)
	$(BIN)/reviewloop demo

lint: $(STAMP)
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .

typecheck: $(STAMP)
	$(BIN)/mypy

pytest: $(STAMP) chromium
	$(BIN)/pytest -q -p no:cacheprovider

test: lint typecheck pytest

bench: $(STAMP)
	$(BIN)/python -m bench.run

clean:
	rm -rf $(VENV) .mypy_cache .ruff_cache
