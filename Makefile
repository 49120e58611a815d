# Every target that needs Python builds the virtual environment first, so on a fresh clone
# `make test` or `make reproduce-adacomm` alone installs and runs.
PY      := .venv/bin/python
VENV    := .venv/.installed
SCALE   ?= small
SPEC    ?= sweeps/topk_cr_pareto.yaml
PORT    ?= 8080
export WANDB_SILENT := true

.PHONY: install test test-fast lint bench reproduce-adacomm reproduce-topk reproduce-adasum \
        reproduce-all report report-check sweep dashboard slurm-up slurm-down pg-up pg-down clean

install: $(VENV)

$(VENV): pyproject.toml
	python3 -m venv .venv
	.venv/bin/pip install -q --upgrade pip
	.venv/bin/pip install -q torch==2.14.1 torchvision==0.29.1
	.venv/bin/pip install -q -e '.[dev]'
	touch $(VENV)

test: $(VENV)
	$(PY) -m pytest -q tests

test-fast: $(VENV)
	$(PY) -m pytest -q tests/unit

lint: $(VENV)
	.venv/bin/ruff check repro tests
	.venv/bin/ruff format --check repro tests

bench: $(VENV)
	$(PY) -m repro.bench

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

sweep: $(VENV)
	.venv/bin/repro sweep $(SPEC)

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

clean:
	rm -rf runs reports/adacomm reports/topk reports/adasum .pytest_cache
