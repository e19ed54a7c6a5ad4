"""Fixtures shared by several test files (a session fixture defined in one test module and
imported by another would run once per module)."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest


@pytest.fixture(scope="session")
def micro_dag(tmp_path_factory) -> tuple[Path, subprocess.CompletedProcess]:
    """A micro workspace after one `snakemake --cores 2` (the main DAG, `all`) and that run.
    Its users share the xdist group `micro_dag` (one worker, file order): the main DAG's test
    in tests/test_pipeline.py, then the studies target on top of it
    (tests/test_studies_stages.py), which reads the runs it compares with instead of training
    them again."""
    from .test_pipeline import BIN, make_workspace, run

    ws = make_workspace(tmp_path_factory.mktemp("micro_dag") / "ws")
    return ws, run([str(BIN / "snakemake"), "--cores", "2"], ws)
