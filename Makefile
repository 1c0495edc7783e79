# bertkit — fresh machine: `make quickstart` (set up + a short real fine-tune) or `make test` (set up + tests).
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
# Real data: $BERTKIT_DATA_DIR, defaulting to ../shared/data when it exists.
BERTKIT_DATA_DIR ?= $(if $(wildcard ../shared/data),$(abspath ../shared/data),)
export BERTKIT_DATA_DIR
OFFLINE := HF_HUB_OFFLINE=1 HF_DATASETS_OFFLINE=1
# Quickstart: packaged MiniLM, one epoch of SST-2 (local files offline, else the hub's GLUE copy), dev accuracy.

.PHONY: setup test test-slow test-all test-min test-py313 which-py313 quickstart bench bench-deploy lint clean

setup: $(VENV)/.installed

# torch is pinned to the CPU build through constraints.txt, so no dependency can pull a CUDA build.
$(VENV)/.installed: pyproject.toml constraints.txt
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install -q -c constraints.txt torch==2.13.0
	$(BIN)/pip install -q -c constraints.txt -e ".[dev]"
	touch $@

# The suite in TEST_WORKERS processes (pytest-xdist): on a 2-core machine 2 take a quarter off its time (docs/speed.md).
TEST_WORKERS ?= 2
PYTEST := -m pytest -q -p no:cacheprovider -n $(TEST_WORKERS)

# `make test` leaves out the tests marked slow (several processes, kill-and-resume, torch.compile, whole GLUE and
# search runs: about a third of the suite's time); `make test-slow` runs them, `make test-all` both; CI runs both.
test: setup
	$(OFFLINE) $(BIN)/python $(PYTEST) -m "not slow"
	$(BIN)/ruff check bertkit tests examples benchmarks

test-slow: setup
	$(OFFLINE) $(BIN)/python $(PYTEST) -m slow

test-all: setup
	$(OFFLINE) $(BIN)/python $(PYTEST)
	$(BIN)/ruff check bertkit tests examples benchmarks

# The suite again on the declared floors (constraints-min.txt pins each; pyproject.toml's `>=` are the same versions),
# in a second environment, .venv-min. Its torch is the floor's PyPI build, a CUDA build that runs on the CPU: about
# two minutes to install, 7.7 GB on disk (the CPU builds of older torch are not on PyPI).
$(VENV)-min/.installed: pyproject.toml constraints-min.txt
	$(PYTHON) -m venv $(VENV)-min
	$(VENV)-min/bin/pip install -q -c constraints-min.txt torch
	$(VENV)-min/bin/pip install -q -c constraints-min.txt -e ".[dev]"
	touch $@

test-min: $(VENV)-min/.installed
	$(OFFLINE) $(VENV)-min/bin/python $(PYTEST)

# `make test`'s selection again on Python 3.13, the newest Python the suite runs on (pyproject's floor, 3.11, is
# .venv's), in .venv-py313: torch 2.13.0 from PyPI (its CUDA build, run on the CPU: the CPU build on this disk is
# Python 3.11's), the rest as pip resolves it. PY313: the interpreter (default: a python3.13 that runs, else pyenv's).
PY313 ?= $(shell for p in python3.13 $(HOME)/.pyenv/versions/3.13*/bin/python3.13; do \
	$$p -c 'import sys; assert sys.version_info[:2] == (3, 13)' 2>/dev/null && { echo $$p; break; }; done)

which-py313:
	@echo $(PY313)

$(VENV)-py313/.installed: pyproject.toml
	@test -n "$(PY313)" || { echo "no Python 3.13 found: make test-py313 PY313=/path/to/python3.13"; exit 2; }
	$(PY313) -m venv $(VENV)-py313
	$(VENV)-py313/bin/pip install -q torch==2.13.0
	$(VENV)-py313/bin/pip install -q -e ".[dev]" torch==2.13.0
	touch $@

test-py313: $(VENV)-py313/.installed
	$(OFFLINE) $(VENV)-py313/bin/python $(PYTEST) -m "not slow"

quickstart: setup
	$(BIN)/python -m bertkit.quickstart --output-dir runs/quickstart-$$(date +%Y%m%d-%H%M%S)

# The benchmark suite (docs/speed.md): real SST-2 + packaged MiniLM, one configuration at a time; about 90 min on
# 2 cores. serve and ONNX benchmarks need a fine-tuned run: make bench-deploy RUN=runs/quickstart-...
bench: setup
	$(OFFLINE) $(BIN)/python benchmarks/train_throughput.py --steps 300 --repeats 2
	$(OFFLINE) $(BIN)/python benchmarks/time_to_accuracy.py --eval-every 250
	$(OFFLINE) $(BIN)/python benchmarks/mfu.py --steps 300 --batch-size 64 --repeats 3
	$(OFFLINE) $(BIN)/python benchmarks/extract_throughput.py --sentences 4000
	for p in fp32 bf16; do $(OFFLINE) $(BIN)/python benchmarks/ab_speed.py --speedup fast_dropout --precision $$p || exit 1; done
	$(OFFLINE) $(BIN)/python benchmarks/ab_speed.py --speedup keep_heap --precision bf16 --rounds 4

bench-deploy: setup
	$(OFFLINE) $(BIN)/python benchmarks/int8_accuracy.py --model $(RUN) --exports $(RUN)-exports
	$(OFFLINE) $(BIN)/python benchmarks/onnx_speed.py --model $(RUN) --exports $(RUN)-exports --repeats 3
	$(OFFLINE) $(BIN)/python benchmarks/serve_throughput.py --model $(RUN)

lint: setup
	$(BIN)/ruff check bertkit tests examples benchmarks

clean:
	rm -rf $(VENV) $(VENV)-min $(VENV)-py313 runs .pytest_cache
