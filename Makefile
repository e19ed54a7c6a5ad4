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
# The test tools (pytest, Playwright, MkDocs) and lm-eval (the `lm` extra) only where the suite
# needs them: `make pipeline` on a fresh machine installs the package alone (issue 47: the
# harness and its dependencies doubled the README's first set-up step).
TEST_STAMP := $(VENV)/.kernattn-test-installed
# The suite's two jobs (tests/conftest.py). The fast one is CPU-bound: one worker per core. The
# end-to-end one waits on subprocesses, daemons and SLURM's polls, which two more workers fill;
# its order is tests/schedule.py's (docs/development.md).
FAST_JOBS ?= 2
E2E_JOBS ?= 4
# pytest with bytecode caching on, whatever the shell says (containers, CI's included, often set
# PYTHONDONTWRITEBYTECODE=1): the commands the tests run then write src/'s __pycache__ as they do
# on a researcher's machine, which is what DVC's and Snakemake's folder dependencies must
# survive (.dvcignore; tests/test_dvc.py), and pytest keeps its assertion-rewritten test modules.
PYTEST := PYTHONDONTWRITEBYTECODE= $(PY) -m pytest

.PHONY: env env-pipeline test test-fast test-e2e test-data pipeline controls bench clean-env

# The venv with the package and its test extras (what the suite and the docs need).
env: $(TEST_STAMP)

# The venv with the package alone (what the DAG needs).
env-pipeline: $(STAMP)

$(STAMP): pyproject.toml
	test -x $(PY) || $(PYTHON) -m venv $(VENV_FLAGS) $(VENV)
	$(PY) -m pip install -q --upgrade pip
	$(PY) -c "import torch, torchvision" 2>/dev/null || $(PY) -m pip install -q $(TORCH_SPEC)
	$(PY) -m pip install -q -e .
	touch $(STAMP)

$(TEST_STAMP): $(STAMP)
	$(PY) -m pip install -q -e ".[test]"
	touch $(TEST_STAMP)

# `make test` is README's test command: the fast job, then the end-to-end job, and it fails if
# either does. pytest exits 5 when it collects no tests: make treats that as the failure it is.
# The fast job's JUnit record is what the report's unit-tested claims (gpa-short and kr-blog)
# read: holds (test ...). The tests read the micro scale's data sets from the mirror folder
# KERNATTN_DATA_MIRROR names (.ci/run sets it), else from the data cache, which
# `kernattn data pull` fills first (40 MB).
test: $(TEST_STAMP)
	@fast=0; $(MAKE) --no-print-directory test-fast || fast=$$?; \
	 $(MAKE) --no-print-directory test-e2e || exit $$?; exit $$fast

# Unit and component tests, for the edit loop (under 3 minutes on two cores).
test-fast: test-data
	$(PYTEST) -q -m "not e2e" -n $(FAST_JOBS) --dist loadgroup --junitxml=results/unit-tests.xml

# The pipeline's commands as processes: the micro DAG (trained once, locally and on a SLURM
# test cluster), DVC, the MLflow server, the report in Chromium, ranks, kills and resumes.
# loadgroup: tests/test_dvc.py's module workspace keeps its tests on one worker (and
# tests/test_dvc_exp.py's its one test on another). --no-loadscope-reorder: the workers take the
# tests in tests/schedule.py's order, not xdist's (largest group first).
test-e2e: test-data
	$(PYTEST) -q -m e2e -n $(E2E_JOBS) --dist loadgroup --no-loadscope-reorder --junitxml=results/e2e-tests.xml

test-data: $(TEST_STAMP)
	@if [ -z "$$KERNATTN_DATA_MIRROR" ]; then $(VENV)/bin/kernattn data pull --scale micro; fi

# The main job: the whole DAG (data -> every run of the matrix -> report) at params.yaml's scale.
pipeline: $(STAMP)
	PATH="$(CURDIR)/$(VENV)/bin:$$PATH" $(VENV)/bin/snakemake --cores all

# The controls the documents lack (issue 50): the `controls` scale's whole DAG, its claims judged
# beside the documents' (about 70 minutes on 2 cores: results/claims/controls-power-2026-12-02.md).
controls: $(STAMP)
	PATH="$(CURDIR)/$(VENV)/bin:$$PATH" KERNATTN_SCALE=controls $(VENV)/bin/snakemake --cores all all

bench: $(STAMP)
	$(VENV)/bin/kernattn bench-attention --out results/bench/attention.csv

clean-env:
	rm -rf $(VENV)
