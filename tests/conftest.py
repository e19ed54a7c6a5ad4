"""Fixtures shared by several test files (a session fixture defined in one test module and
imported by another would run once per module)."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from collections.abc import Callable
from pathlib import Path

import pytest
import yaml
from filelock import FileLock

from . import shared_dag

# One intra-op thread per process, here and in every process a test starts (they inherit the
# environment): the suite runs three pytest workers on two cores (Makefile JOBS), each starting
# training, analysis and DAG subprocesses, so torch's default of one thread per core would put
# several OpenMP pools on the same two cores. Set before any test module imports torch; a
# test that needs more threads sets them itself (torch.set_num_threads). An OMP_NUM_THREADS
# already in the environment is kept.
os.environ.setdefault("OMP_NUM_THREADS", "1")


@pytest.hookimpl(optionalhook=True)  # pytest -p no:xdist has no such hook
def pytest_xdist_make_scheduler(config, log):
    """Under `--dist loadgroup`: the micro DAG's consumers wait for the infra run's copy of it
    without holding a worker (tests/shared_dag.py)."""
    return shared_dag.make_scheduler(config, log)


def pytest_collection_modifyitems(config, items):
    """The scheduler holds back the consumers of `micro_dag` by their xdist group: a test that
    reads the fixture outside those groups would sit on a worker waiting for the DAG."""
    stray = [item.nodeid for item in items
             if {"micro_dag", "micro_dag_snapshot"} & set(getattr(item, "fixturenames", ()))
             and not any(m.args and m.args[0] in shared_dag.CONSUMER_GROUPS for m in item.iter_markers("xdist_group"))]
    if stray:
        groups = shared_dag.CONSUMER_GROUPS
        raise pytest.UsageError(f"{', '.join(stray)}: reads the micro DAG, so mark it @pytest.mark.xdist_group "
                                f"with one of {groups} (tests/shared_dag.py)")


def built_once(tmp_path_factory, name: str, build: Callable[[Path], None]) -> Path:
    """`build(folder)` run once per pytest session, also under xdist: a session fixture runs
    once per worker, so the first worker to get here builds under a file lock in the folder
    the workers share and the others wait for it and read the same folder. Returns the folder."""
    root = shared_dag.shared_root(tmp_path_factory)
    folder, done = root / name, root / f"{name}.done"
    with FileLock(str(root / f"{name}.lock")):
        if not done.exists():
            shutil.rmtree(folder, ignore_errors=True)  # a build that raised half-way starts again
            folder.mkdir()
            build(folder)
            done.touch()
    return folder


def _run_micro_dag(folder: Path, session) -> None:
    """The micro workspace after `snakemake ... all` (the main DAG), the run's record (run.json),
    and a copy of the workspace as the run left it (snapshot/) for tests that change outputs:
    the `micro_dag` group's tests add to the workspace while other workers read it. The run is
    the infra tests' `snakemake --profile slurm all` where they run beside this session
    (tests/shared_dag.py), else `snakemake --cores 2` here."""
    from .test_pipeline import BIN, make_workspace, run

    ws = folder / "ws"
    producer = any("micro_pipeline" in getattr(item, "fixturenames", ()) for item in session.items)
    published = shared_dag.wait_for_published(folder.parent, producer)  # built_once's folder is in the shared root
    if published is not None:
        record, copy = published
        shutil.copytree(copy, ws, symlinks=True)
        _track_as_params_yaml_does(ws)
    else:
        make_workspace(ws)
        proc = run([str(BIN / "snakemake"), "--cores", "2"], ws)
        record = {"args": proc.args, "returncode": proc.returncode, "stdout": proc.stdout, "stderr": proc.stderr}
    (folder / "run.json").write_text(json.dumps({k: record[k] for k in ("args", "returncode", "stdout", "stderr")}))
    if record["returncode"] == 0:
        shutil.copytree(ws, folder / "snapshot", symlinks=True, ignore=shutil.ignore_patterns(".snakemake"))


def _micro_dag_folder(request, tmp_path_factory) -> Path:
    """The shared folder of `micro_dag` and `micro_dag_snapshot`, built on the first request."""
    return built_once(tmp_path_factory, "micro_dag", lambda folder: _run_micro_dag(folder, request.session))


def _track_as_params_yaml_does(ws: Path) -> None:
    """The infra run tracked through its MLflow server; what this session trains in the copy
    goes to the store params.yaml names, as in a workspace of its own. No stage reads
    `tracking` (tests/test_pipeline.py), so Snakemake and DVC see nothing to rerun."""
    from .test_pipeline import REPO

    doc = yaml.safe_load((ws / "params.yaml").read_text())
    doc["tracking"] = yaml.safe_load((REPO / "params.yaml").read_text())["tracking"]
    (ws / "params.yaml").write_text(yaml.safe_dump(doc, sort_keys=False))


@pytest.fixture(scope="session")
def micro_dag(request, tmp_path_factory) -> tuple[Path, subprocess.CompletedProcess]:
    """A micro workspace after one run of the main DAG (`all`) and that run, once per session
    (every xdist worker shares it). Its users share the xdist group `micro_dag`
    (one worker, file order): the main DAG's test in tests/test_pipeline.py, then the studies
    target on top of it (tests/test_studies_stages.py), which reads the runs it compares with
    instead of training them again."""
    folder = _micro_dag_folder(request, tmp_path_factory)
    return folder / "ws", subprocess.CompletedProcess(**json.loads((folder / "run.json").read_text()))


@pytest.fixture(scope="session")
def micro_dag_snapshot(request, tmp_path_factory) -> Path:
    """The workspace of `micro_dag` as Snakemake left it, before any test added to it (read
    only: copy it to change it). tests/test_dvc.py adopts it under DVC instead of training the
    micro DAG a second time."""
    folder = _micro_dag_folder(request, tmp_path_factory)
    run = json.loads((folder / "run.json").read_text())
    assert run["returncode"] == 0, "the micro DAG failed under Snakemake:\n" + run["stderr"][-3000:]
    return folder / "snapshot"
