"""The suite's two jobs and the fixtures the end-to-end job shares.

- The fast job (`make test-fast`, `-m "not e2e"`): unit and component tests, in-process.
- The end-to-end job (`make test-e2e`, `-m e2e`): every test that runs the pipeline's commands
  as processes -- the micro DAG (local and on a SLURM test cluster), DVC, the MLflow server,
  the report in Chromium, torchrun ranks, kills and resumes, a user's machine without a mirror.
  A test is marked `@pytest.mark.e2e` (or its module's `pytestmark`); one that asks for a
  daemon or the micro DAG without the mark stops collection with a message saying so.

The daemons and the micro DAG are built once per session, whatever the number of xdist
workers (tests/session.py, tests/infra/services.py)."""

from __future__ import annotations

import os
import sys

import pytest

from . import schedule
from . import session as shared
from .infra import services

# One intra-op thread per process, here and in every process a test starts (they inherit the
# environment): the suite runs more pytest workers than the two cores (Makefile), each starting
# training, analysis and DAG subprocesses, so torch's default of one thread per core would put
# several OpenMP pools on the same two cores. Set before any test module imports torch; a
# test that needs more threads sets them itself (torch.set_num_threads). An OMP_NUM_THREADS
# already in the environment is kept.
os.environ.setdefault("OMP_NUM_THREADS", "1")

# Fixtures that start daemons or train the micro DAG: only end-to-end tests may ask for them.
E2E_FIXTURES = {"micro_dag", "slurm_cluster", "mlflow_server", "chromium"}


def pytest_configure(config):
    shared.configure(config)
    config.pluginmanager.register(schedule.Ordering(), "kernattn-e2e-schedule")


@pytest.hookimpl(optionalhook=True)  # xdist's hook: absent under -p no:xdist
def pytest_configure_node(node):
    shared.configure_node(node)


@pytest.hookimpl(trylast=True)  # after xdist has ended its workers
def pytest_sessionfinish(session, exitstatus):
    """The controller, once every worker has ended: the micro DAG's shared workspace must be as
    the DAG left it (a test that wrote into it fails the session, named), then every daemon
    any worker started is stopped."""
    if not shared.is_controller(session.config):
        return
    changed = services.changed_shared_workspace(shared.folder(session.config))
    if changed:
        print(f"\nthe micro DAG's shared workspace was changed by a test (run commands in micro_dag.copy()): "
              f"{', '.join(changed[:10])}", file=sys.stderr)
        session.exitstatus = pytest.ExitCode.TESTS_FAILED
    errors = shared.finish(session.config, services.STOPPERS, keep=session.exitstatus != 0)
    if errors:
        print(f"\nstopping the session's daemons failed: {'; '.join(errors)}", file=sys.stderr)


def pytest_unconfigure(config):
    shared.unconfigure(config)


E2E_MARK = b"e2e"  # what a module that holds an e2e test spells, whichever way it marks it


def pytest_ignore_collect(collection_path, config):
    """The end-to-end job (`-m e2e`) imports only the test modules whose text names the mark:
    the others hold no e2e test, and importing them (torch, MLflow, timm, Playwright, pytest's
    assertion rewriting) is seconds of CPU in each of its workers. The fast job, which collects
    every module, checks that each e2e test's module does name it (below)."""
    if config.getoption("markexpr", "").strip() != "e2e" or not _is_test_module(collection_path):
        return None
    return True if E2E_MARK not in collection_path.read_bytes() else None


def _is_test_module(path) -> bool:
    return path.suffix == ".py" and path.name.startswith("test_") and path.is_file()


@pytest.hookimpl(tryfirst=True)  # before `-m` deselects by marker
def pytest_collection_modifyitems(config, items):
    stray = [item.nodeid for item in items
             if E2E_FIXTURES & set(getattr(item, "fixturenames", ())) and item.get_closest_marker("e2e") is None]
    if stray:
        raise pytest.UsageError(f"{', '.join(stray)}: asks for {' or '.join(sorted(E2E_FIXTURES))}, so mark it "
                                f"@pytest.mark.e2e (tests/conftest.py: the fast job starts no daemon)")
    e2e_modules = {item.path for item in items if item.get_closest_marker("e2e") is not None}
    unnamed = sorted(str(path) for path in e2e_modules if E2E_MARK not in path.read_bytes())
    if unnamed:
        raise pytest.UsageError(f"{', '.join(unnamed)}: an e2e test whose module never spells 'e2e' (a mark "
                                f"applied from elsewhere): the end-to-end job would not collect it "
                                f"(tests/conftest.py, pytest_ignore_collect)")


@pytest.fixture(scope="session")
def slurm_cluster(request):
    """munged + slurmctld + slurmd on 127.0.0.1 (harness.SlurmCluster), one partition
    `kernattn-test`, shared by every worker; Debian's slurm-wlm and munge installed first if
    missing. Skips (saying why) where this machine cannot run it."""
    return services.slurm(request.config)


@pytest.fixture(scope="session")
def mlflow_server(request) -> services.MlflowServer:
    """`kernattn mlflow-server --detach` with a scratch SQLite store, shared by every worker."""
    return services.mlflow(request.config)


@pytest.fixture(scope="session")
def micro_dag(request) -> services.DagRun:
    """The micro DAG trained once this session through `snakemake --profile slurm all` (or
    `--cores 2 all` where no cluster can run), tracked to `mlflow_server`. Read its workspace;
    a test that runs anything in it works on `micro_dag.copy(tmp_path)`."""
    return services.micro_dag(request.config)
