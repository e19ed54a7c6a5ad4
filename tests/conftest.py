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
from filelock import FileLock

# One intra-op thread per process, here and in every process a test starts (they inherit the
# environment): the suite runs three pytest workers on two cores (Makefile JOBS), each starting
# training, analysis and DAG subprocesses, so torch's default of one thread per core would put
# several OpenMP pools on the same two cores. Set before any test module imports torch; a
# test that needs more threads sets them itself (torch.set_num_threads). An OMP_NUM_THREADS
# already in the environment is kept.
os.environ.setdefault("OMP_NUM_THREADS", "1")


def built_once(tmp_path_factory, name: str, build: Callable[[Path], None]) -> Path:
    """`build(folder)` run once per pytest session, also under xdist: a session fixture runs
    once per worker, so the first worker to get here builds under a file lock in the folder
    the workers share and the others wait for it and read the same folder. Returns the folder."""
    base = tmp_path_factory.getbasetemp()
    root = base.parent if os.environ.get("PYTEST_XDIST_WORKER") else base
    folder, done = root / name, root / f"{name}.done"
    with FileLock(str(root / f"{name}.lock")):
        if not done.exists():
            shutil.rmtree(folder, ignore_errors=True)  # a build that raised half-way starts again
            folder.mkdir()
            build(folder)
            done.touch()
    return folder


def _run_micro_dag(folder: Path) -> None:
    """The micro workspace after `snakemake --cores 2` (the main DAG, `all`), the run's record
    (run.json), and a copy of the workspace as the run left it (snapshot/) for tests that change
    outputs: the `micro_dag` group's tests add to the workspace while other workers read it."""
    from .test_pipeline import BIN, make_workspace, run

    ws = make_workspace(folder / "ws")
    proc = run([str(BIN / "snakemake"), "--cores", "2"], ws)
    record = {"args": proc.args, "returncode": proc.returncode, "stdout": proc.stdout, "stderr": proc.stderr}
    (folder / "run.json").write_text(json.dumps(record))
    if proc.returncode == 0:
        shutil.copytree(ws, folder / "snapshot", symlinks=True, ignore=shutil.ignore_patterns(".snakemake"))


@pytest.fixture(scope="session")
def micro_dag(tmp_path_factory) -> tuple[Path, subprocess.CompletedProcess]:
    """A micro workspace after one `snakemake --cores 2` (the main DAG, `all`) and that run, once
    per session (every xdist worker shares it). Its users share the xdist group `micro_dag`
    (one worker, file order): the main DAG's test in tests/test_pipeline.py, then the studies
    target on top of it (tests/test_studies_stages.py), which reads the runs it compares with
    instead of training them again."""
    folder = built_once(tmp_path_factory, "micro_dag", _run_micro_dag)
    return folder / "ws", subprocess.CompletedProcess(**json.loads((folder / "run.json").read_text()))


@pytest.fixture(scope="session")
def micro_dag_snapshot(tmp_path_factory) -> Path:
    """The workspace of `micro_dag` as Snakemake left it, before any test added to it (read
    only: copy it to change it). tests/test_dvc.py adopts it under DVC instead of training the
    micro DAG a second time."""
    folder = built_once(tmp_path_factory, "micro_dag", _run_micro_dag)
    run = json.loads((folder / "run.json").read_text())
    assert run["returncode"] == 0, "the micro DAG failed under Snakemake:\n" + run["stderr"][-3000:]
    return folder / "snapshot"
