# Every target that needs Python builds the virtual environment first, so on a fresh clone
# `make test` or `make reproduce-adacomm` alone installs and runs.
PY      := .venv/bin/python
VENV    := .venv/.installed
SCALE   ?= small
SPEC    ?= sweeps/topk_cr_pareto.yaml
# trials of `make sweep` in parallel, one process each: one per core of this 2-core machine
WORKERS ?= 2
PORT    ?= 8080
# Where pip finds torch. Empty: PyPI, whose torch 2.14.1 is built for CUDA 13.0 and needs a
# recent NVIDIA driver. For a GPU node with an older driver, name the PyTorch index of a
# CUDA version the driver supports (nvidia-smi shows it), e.g.
#   make install TORCH_INDEX_URL=https://download.pytorch.org/whl/cu126
# On an existing .venv that replaces torch and torchvision in it, once per index; back to
# PyPI's build: rm -rf .venv && make install.
TORCH_INDEX_URL ?=
TORCH   := torch==2.14.1 torchvision==0.29.1
# one stamp per index, named by its last path part (a trailing slash left off)
TORCH_STAMP := .venv/.torch-$(notdir $(patsubst %/,%,$(TORCH_INDEX_URL)))
export WANDB_SILENT := true

.PHONY: install test test-fast lint bench reproduce-adacomm reproduce-topk reproduce-adasum \
        reproduce-all report report-check sweep dashboard slurm-up slurm-down pg-up pg-down clean \
        clean-runs gpu-check tune

install: $(VENV)
ifneq ($(TORCH_INDEX_URL),)
install: $(TORCH_STAMP)
endif

$(VENV): pyproject.toml
	python3 -m venv .venv
	.venv/bin/pip install -q --upgrade pip
	.venv/bin/pip install -q $(if $(TORCH_INDEX_URL),--index-url $(TORCH_INDEX_URL)) $(TORCH)
	.venv/bin/pip install -q -e '.[dev]'
	rm -f .venv/.torch-*
	$(if $(TORCH_INDEX_URL),touch $(TORCH_STAMP))
	touch $(VENV)

# torch and torchvision replaced by TORCH_INDEX_URL's build in an existing .venv; if that
# install fails the .venv is no longer marked installed, so the next make installs it again
.venv/.torch-%: | $(VENV)
	.venv/bin/pip uninstall -q -y torch torchvision
	.venv/bin/pip install -q --index-url $(TORCH_INDEX_URL) $(TORCH) || { rm -f $(VENV) .venv/.torch-*; exit 1; }
	rm -f .venv/.torch-*
	touch $@

# Three test processes on two cores: about a third of the suite waits (modeled compute slept
# by worker processes, SLURM and PostgreSQL round trips, processes starting), and a third
# process keeps both cores busy through it; idle ones take queued tests from busy ones.
test: $(VENV)
	$(PY) -m pytest -q -n 3 --dist worksteal tests

test-fast: $(VENV)
	$(PY) -m pytest -q tests/unit

lint: $(VENV)
	.venv/bin/ruff check repro tests
	.venv/bin/ruff format --check repro tests

bench: $(VENV)
	$(PY) -m repro.bench

# Every method on CUDA under both engines, checked against each other, with step times and
# peak memory; on a machine without a GPU it says so and exits 0.
gpu-check: $(VENV)
	$(PY) -m repro.bench.gpu_check

reproduce-adacomm: $(VENV)
	.venv/bin/repro reproduce adacomm scale=$(SCALE)

reproduce-topk: $(VENV)
	.venv/bin/repro reproduce topk scale=$(SCALE)

reproduce-adasum: $(VENV)
	.venv/bin/repro reproduce adasum scale=$(SCALE)

reproduce-all: reproduce-adacomm reproduce-topk reproduce-adasum
	.venv/bin/repro report all

report: $(VENV)
	.venv/bin/repro report all

report-check: $(VENV)
	.venv/bin/repro report check reports

# Equal-budget tuning of a run set's arms (sweeps/tune/PAPER_SCALE.yaml) into
# configs/tuned/PAPER_SCALE.yaml, which the repository commits: make tune PAPER=adacomm
# PAPER is checked as the Makefile is read (checked in the recipe, its error came only after
# a fresh clone's whole install)
ifneq ($(filter tune,$(MAKECMDGOALS)),)
ifndef PAPER
$(error set PAPER, e.g. make tune PAPER=adacomm)
endif
endif
tune: $(VENV)
	.venv/bin/repro tune $(PAPER) scale=$(SCALE)

sweep: $(VENV)
	.venv/bin/repro sweep $(SPEC) --workers $(WORKERS)

dashboard: $(VENV)
	.venv/bin/repro sweep dashboard $(SPEC) --port $(PORT)

slurm-up:
	scripts/slurm-local up

slurm-down:
	scripts/slurm-local down

pg-up:
	scripts/pg-local up

pg-down:
	scripts/pg-local down

# Every written report (pages, index, compare) and the tools' caches, never the committed
# claims files; the runs (hours of reproductions, unsynced offline wandb runs) only by name
clean:
	rm -rf $(filter-out reports/claims/,$(wildcard reports/*/)) reports/index.* .pytest_cache \
	       .ruff_cache

clean-runs:
	rm -rf runs
