# Set-up lives here so that README's first two commands work on a fresh machine.
# The venv is created on first use; torch is pinned to the local CPU build (2.13.0) first,
# because pip would otherwise resolve the range in pyproject.toml to a multi-GB CUDA build.
# On a GPU machine with its own torch (>= 2.11), use that torch: `make VENV_FLAGS=--system-site-packages`.
PYTHON ?= python3
VENV ?= .venv
VENV_FLAGS ?=
TORCH_SPEC ?= torch==2.13.0
PY := $(VENV)/bin/python
STAMP := $(VENV)/.kernattn-installed
JOBS ?= 2

.PHONY: env test pipeline bench clean-env

env: $(STAMP)

$(STAMP): pyproject.toml
	test -x $(PY) || $(PYTHON) -m venv $(VENV_FLAGS) $(VENV)
	$(PY) -m pip install -q --upgrade pip
	$(PY) -c "import torch" 2>/dev/null || $(PY) -m pip install -q "$(TORCH_SPEC)"
	$(PY) -m pip install -q -e ".[test]"
	touch $(STAMP)

# pytest exits 5 when it collects no tests: make treats that as the failure it is.
test: $(STAMP)
	$(PY) -m pytest -q -n $(JOBS) --dist loadgroup

# The main job: the whole DAG (data -> every run of the matrix -> report) at params.yaml's scale.
pipeline: $(STAMP)
	PATH="$(CURDIR)/$(VENV)/bin:$$PATH" $(VENV)/bin/snakemake --cores all

bench: $(STAMP)
	$(VENV)/bin/kernattn bench-attention --out results/bench/attention.csv

clean-env:
	rm -rf $(VENV)
