# Set-up lives here so that README's first two commands work on a fresh machine.
# The venv is created on first use; torch and torchvision are pinned first (2.14.1 + 0.29.1, files on
# this machine's disk): timm needs torchvision, and PyPI's torchvision does not load beside the local
# 2.13.0 CPU build of torch. Unpinned, pip would resolve pyproject.toml's range to other downloads.
# On a GPU machine with its own torch (>= 2.11), use that torch: `make VENV_FLAGS=--system-site-packages`.
PYTHON ?= python3
VENV ?= .venv
VENV_FLAGS ?=
TORCH_SPEC ?= torch==2.14.1 torchvision==0.29.1
PY := $(VENV)/bin/python
STAMP := $(VENV)/.kernattn-installed
# Three pytest workers on two cores: the DAG, SLURM and MLflow-server tests spend much of their time
# waiting on subprocesses and daemons, which a third worker fills (docs/development.md).
JOBS ?= 3

.PHONY: env test pipeline bench clean-env

env: $(STAMP)

$(STAMP): pyproject.toml
	test -x $(PY) || $(PYTHON) -m venv $(VENV_FLAGS) $(VENV)
	$(PY) -m pip install -q --upgrade pip
	$(PY) -c "import torch, torchvision" 2>/dev/null || $(PY) -m pip install -q $(TORCH_SPEC)
	$(PY) -m pip install -q -e ".[test]"
	touch $(STAMP)

# pytest exits 5 when it collects no tests: make treats that as the failure it is. The JUnit
# record is what the report's unit-tested claims (gpa-short and kr-blog) read: holds (test ...).
# The tests read the micro scale's data sets from the mirror folder KERNATTN_DATA_MIRROR names
# (.ci/run sets it), else from the data cache, which `kernattn data pull` fills first (40 MB).
test: $(STAMP)
	@if [ -z "$$KERNATTN_DATA_MIRROR" ]; then $(VENV)/bin/kernattn data pull --scale micro; fi
	$(PY) -m pytest -q -n $(JOBS) --dist loadgroup --junitxml=results/unit-tests.xml

# The main job: the whole DAG (data -> every run of the matrix -> report) at params.yaml's scale.
pipeline: $(STAMP)
	PATH="$(CURDIR)/$(VENV)/bin:$$PATH" $(VENV)/bin/snakemake --cores all

bench: $(STAMP)
	$(VENV)/bin/kernattn bench-attention --out results/bench/attention.csv

clean-env:
	rm -rf $(VENV)
