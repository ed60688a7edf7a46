# Two commands on a fresh machine:  `make run` (set up, then the main job)  and  `make test`.
PYTHON ?= python3
VENV   ?= .venv
BIN    := $(VENV)/bin
# The CPU build of torch 2.13.0 lies on this machine's disk; on a GPU machine set TORCH="torch" (or a CUDA pin).
TORCH  ?= torch==2.13.0
STORES ?= stores
STAMP  := $(VENV)/.installed

.PHONY: setup run test lint bench clean-stores

setup: $(STAMP)

$(STAMP): pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install -q --upgrade pip
	$(BIN)/python -m pip install -q "$(TORCH)"
	$(BIN)/python -m pip install -q -e ".[dev]"
	touch $(STAMP)

# The main job: every store of the shipped data, into $(STORES)/. Reruns reuse finished stores.
run: $(STAMP)
	$(BIN)/labeldist precompute pose data/mpii/mpii_valid_2958.csv --k 100 --out $(STORES)/mpii-pose
	$(BIN)/labeldist precompute layout --generate 2000 --layout-type 5 --size 128 --seed 0 --k 100 \
		--out $(STORES)/lsun5-layout_miou
	@for s in $(STORES)/*; do $(BIN)/python tools/check_store.py $$s || exit 1; done

test: $(STAMP)
	$(BIN)/python -m pytest

lint: $(STAMP)
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .

bench: $(STAMP)
	$(BIN)/python benchmarks/bench_engine.py
	$(BIN)/python benchmarks/bench_layout.py

clean-stores:
	rm -rf $(STORES)
