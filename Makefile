# Two commands on a fresh machine:  `make run` (set up, then the main job)  and  `make test`.
PYTHON ?= python3
VENV   ?= .venv
BIN    := $(VENV)/bin
# torch and torchvision are pinned as a pair that imports together: torchvision 0.28.0 (the only build of it for
# torch 2.13) is a CUDA build whose ops fail to load beside the CPU-only torch 2.13.0 file of this machine's disk
# ("operator torchvision::nms does not exist"), while torch 2.14.1 + torchvision 0.29.1 both lie on this disk and
# run on the CPU (and on a GPU). TorchCodec (the trainer's image decoding) is built for one torch release too
# (github.com/meta-pytorch/torchcodec, "Installing TorchCodec"): 0.17 loads beside torch 2.14.1 here. Elsewhere set
# all three, e.g. TORCH="torch==2.9.1" TORCHVISION="torchvision==0.24.1" TORCHCODEC="torchcodec==0.9.*".
TORCH       ?= torch==2.14.1
TORCHVISION ?= torchvision==0.29.1
TORCHCODEC  ?= torchcodec==0.17.0
# the index torch and torchvision come from (empty: the configured ones, PyPI's CUDA build on Linux); a machine
# without a GPU saves 4.4 GiB with PyTorch's CPU wheels: TORCH_INDEX=https://download.pytorch.org/whl/cpu
TORCH_INDEX ?=
STORES ?= stores
# pyproject's extras: [all] (serve, train, sts) for the main job, the service and the trainer, [dev] for the tests.
# `pip install -e .` alone is the engine (docs/guide.md, "Install").
EXTRAS ?= all,dev
STAMP  := $(VENV)/.installed

.PHONY: setup packages run test lint docs bench bench-tools serve clean-stores browser compose-small

setup: $(STAMP)

# The installer: uv (from PyPI) where it installs, else pip. Both resolve the same releases (compared on this kind
# of machine: the same 169 packages and versions); uv fetches and unpacks them in parallel: the fresh venv in 76 s
# against pip's 3 min 52 s on 2 cores. It compiles the bytecode as pip does (--compile-bytecode): without it, where
# PYTHONDONTWRITEBYTECODE is set (as on the development machines), every process compiled each module it imported
# (torch's import 28 s against 12, the test suite 37 min). uv reads no pip.conf: where the packages come only
# through pip's configured index, uv fails and pip installs them. INSTALLER=pip skips uv.
INSTALLER ?= uv
PIP_INSTALL := $(BIN)/python -m pip install -q
UV_INSTALL  := $(BIN)/uv pip install -q --compile-bytecode --python $(BIN)/python

$(STAMP): pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(PIP_INSTALL) --upgrade pip
	@if [ "$(INSTALLER)" = uv ] && $(PIP_INSTALL) uv && $(MAKE) --no-print-directory packages INSTALL="$(UV_INSTALL)"; \
	then :; else echo "make setup: installing with pip"; $(MAKE) --no-print-directory packages INSTALL="$(PIP_INSTALL)"; fi
	touch $(STAMP)

# torch and torchvision first (from TORCH_INDEX when set), then TorchCodec (its wheel names no torch, so no
# resolver can check the pair), then labeldist with EXTRAS; INSTALL is uv's or pip's command (setup chooses)
packages:
	$(INSTALL) $(if $(TORCH_INDEX),--index-url $(TORCH_INDEX)) "$(TORCH)" "$(TORCHVISION)"
	$(INSTALL) "$(TORCHCODEC)"
	$(INSTALL) -e ".[$(EXTRAS)]"

# The main job (tools/main_job.sh, shared with docker-compose): every store of the shipped data, into $(STORES)/.
# Reruns reuse finished stores and resume unfinished ones.
run: $(STAMP)
	LABELDIST=$(BIN)/labeldist PYTHON=$(BIN)/python STORES=$(STORES) sh tools/main_job.sh

# Two pytest-xdist workers, one test file each at a time (module fixtures built once): much of the suite waits on
# subprocesses it starts (servers, Dask clusters, CLIs), so two files at once take 17 min on 2 cores against 26
# one after the other. TEST_WORKERS=0 runs them in this process.
TEST_WORKERS ?= 2
test: $(STAMP) browser
	$(BIN)/python -m pytest -n $(TEST_WORKERS) --dist loadfile

# Debian's headless Chromium for the neighbour-browser page tests (they skip, saying so, without it).
browser:
	@command -v chromium >/dev/null 2>&1 || { command -v apt-get >/dev/null 2>&1 && [ "$$(id -u)" = 0 ] && \
		apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium >/dev/null; } || \
		echo "chromium could not be installed: the browser tests will be skipped"

lint: $(STAMP)
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .

# The API reference site (mkdocs.yml): docs/*.md and the docstrings, built offline into site/. --strict fails on
# a broken link between pages or anchors of docs/ and on a docstring griffe cannot parse as NumPy style.
docs: $(STAMP)
	$(BIN)/mkdocs build --strict --site-dir site

# wrk, the C load generator of benchmarks/bench_api.py (Debian's package; without it the benchmark falls back to
# Python httpx clients, which take half of a 2-core machine from the server they measure).
bench-tools:
	@command -v wrk >/dev/null 2>&1 || { command -v apt-get >/dev/null 2>&1 && [ "$$(id -u)" = 0 ] && \
		apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq wrk >/dev/null; } || \
		echo "wrk could not be installed: benchmarks/bench_api.py will use httpx clients"

# Every benchmark of BENCHMARKS.md, one after the other (the machine should be otherwise idle). The service and
# sentence benchmarks read the main job's stores and model: run `make run` first. bench_trainer.py needs a running
# service and features (RESULTS.md has its command).
bench: $(STAMP) bench-tools
	$(BIN)/python benchmarks/floors.py
	$(BIN)/python benchmarks/bench_engine.py
	$(BIN)/python benchmarks/bench_layout.py
	$(BIN)/python benchmarks/bench_registry.py
	$(BIN)/python benchmarks/bench_wmd_kernel.py
	$(BIN)/python benchmarks/bench_caption_knn.py --sizes 1000 2000 5000 --dense 5000
	$(BIN)/python benchmarks/bench_scaling.py --sizes 1000 2000 5000 --workers 1 2
	$(BIN)/python benchmarks/bench_api.py --stores $(STORES) --store mpii-pose --workers 2 --duration 3
	$(BIN)/python benchmarks/bench_sts.py dev --bi models/sts-bi-cosine --best models/sts-bi-cosine

# The service over the main job's stores, on 127.0.0.1:8000 (page at /ui).
serve: $(STAMP)
	$(BIN)/labeldist serve --stores $(STORES)

# docker-compose.yml for real on a small subset, with podman where Docker has no engine (docs/system.md):
# ../shared/tools/podman-setup prepares podman on a Debian machine.
compose-small: $(STAMP)
	@command -v podman >/dev/null || { echo "podman is not installed: run ../shared/tools/podman-setup first"; exit 1; }
	COMPOSE=$(BIN)/podman-compose sh tools/compose_small.sh

clean-stores:
	rm -rf $(STORES)
