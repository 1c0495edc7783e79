# bertkit — fresh machine: `make quickstart` (set up + a short real fine-tune) or `make test` (set up + tests).
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
# Real data: $BERTKIT_DATA_DIR, defaulting to ../shared/data when it exists.
BERTKIT_DATA_DIR ?= $(if $(wildcard ../shared/data),$(abspath ../shared/data),)
export BERTKIT_DATA_DIR
OFFLINE := HF_HUB_OFFLINE=1 HF_DATASETS_OFFLINE=1
# Quickstart: packaged MiniLM, real SST-2 (all 67,349 training sentences), one epoch, dev accuracy at the end.

.PHONY: setup test test-min quickstart bench lint clean

setup: $(VENV)/.installed

# torch is pinned to the CPU build through constraints.txt, so no dependency can pull a CUDA build.
$(VENV)/.installed: pyproject.toml constraints.txt
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install -q -c constraints.txt torch==2.13.0
	$(BIN)/pip install -q -c constraints.txt -e ".[dev]"
	touch $@

test: setup
	$(OFFLINE) $(BIN)/python -m pytest -q -p no:cacheprovider
	$(BIN)/ruff check bertkit tests examples benchmarks

# The suite again on the declared floors (constraints-min.txt pins each; pyproject.toml's `>=` are the same versions),
# in a second environment, .venv-min.
$(VENV)-min/.installed: pyproject.toml constraints.txt constraints-min.txt
	$(PYTHON) -m venv $(VENV)-min
	$(VENV)-min/bin/pip install -q -c constraints.txt torch==2.13.0
	$(VENV)-min/bin/pip install -q -c constraints.txt -c constraints-min.txt -e ".[dev]"
	touch $@

test-min: $(VENV)-min/.installed
	$(OFFLINE) $(VENV)-min/bin/python -m pytest -q -p no:cacheprovider

quickstart: setup
	@if [ -z "$(BERTKIT_DATA_DIR)" ] || [ ! -d "$(BERTKIT_DATA_DIR)/sst2" ]; then \
	  echo "No SST-2 data found. Set BERTKIT_DATA_DIR to a folder holding sst2/train.tsv and sst2/dev.tsv" \
	       "(GLUE format), e.g.  make quickstart BERTKIT_DATA_DIR=/path/to/data"; exit 2; fi
	$(OFFLINE) $(BIN)/bertkit finetune sst2 --model minilm-l6 --epochs 1 --output-dir runs/quickstart-$$(date +%Y%m%d-%H%M%S)

# Speed benchmarks (issue 7): real SST-2 + packaged MiniLM, one configuration at a time; about 75 min on 2 cores.
bench: setup
	@if [ -z "$(BERTKIT_DATA_DIR)" ] || [ ! -d "$(BERTKIT_DATA_DIR)/sst2" ]; then \
	  echo "No SST-2 data found. Set BERTKIT_DATA_DIR to a folder holding sst2/train.tsv and sst2/dev.tsv"; exit 2; fi
	$(OFFLINE) $(BIN)/python benchmarks/train_throughput.py --steps 300
	$(OFFLINE) $(BIN)/python benchmarks/time_to_accuracy.py --eval-every 250
	$(OFFLINE) $(BIN)/python benchmarks/time_to_accuracy.py --eval-every 250 -- --epochs 0.75
	$(OFFLINE) $(BIN)/python benchmarks/mfu.py --steps 300
	$(OFFLINE) $(BIN)/python benchmarks/mfu.py --steps 300 --batch-size 64 --repeats 3
	$(OFFLINE) $(BIN)/python benchmarks/mfu.py --steps 300 --task mnli
	$(OFFLINE) $(BIN)/python benchmarks/step_costs.py --steps 300
	$(OFFLINE) $(BIN)/python benchmarks/extract_throughput.py --sentences 4000
	$(OFFLINE) $(BIN)/python benchmarks/feature_cache.py
	$(OFFLINE) $(BIN)/python benchmarks/batch_fetch.py
	$(OFFLINE) $(BIN)/python benchmarks/ab_speed.py --variant freeze-word-embeddings --batch-size 64 --blocks 12
	$(OFFLINE) $(BIN)/python benchmarks/ab_speed.py --variant unfused-qkv --batch-size 64 --blocks 12
	$(OFFLINE) $(BIN)/python benchmarks/ab_speed.py --variant mmap-malloc --batch-size 64 --blocks 12
	$(OFFLINE) $(BIN)/python benchmarks/heap_ab.py --rounds 4 --steps 130
	$(OFFLINE) $(BIN)/python benchmarks/ab_speed.py --variant no-dropout --batch-size 64 --blocks 12
	$(OFFLINE) $(BIN)/python benchmarks/attention_paths.py

lint: setup
	$(BIN)/ruff check bertkit tests examples benchmarks

clean:
	rm -rf $(VENV) $(VENV)-min runs .pytest_cache
