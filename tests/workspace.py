"""What the tests that run the pipeline's commands as processes share: the environment those
commands run in, and a scratch workspace of the pipeline (the Snakefile, a link to src/,
params.yaml at the micro scale)."""

from __future__ import annotations

import os
import shutil
import sys
from pathlib import Path

import yaml

from . import paths

REPO = paths.REPO
BIN = Path(sys.executable).parent
# kernattn.engine.HOLD_ENV, not imported: the engine package loads torch, which the infra
# controller need not (tests/test_engine.py checks the two are one name)
HOLD_ENV = "KERNATTN_DEBUG_HOLD_AT_STEP"


def command_env(**extra) -> dict:
    """The environment of every command a test runs: the venv first on PATH (SLURM jobs inherit
    it: sbatch exports the environment) and the checkout's src/ on PYTHONPATH; no scale or debug
    hold inherited from the caller's shell; no MLflow system-metrics thread (seconds-long runs);
    no DVC analytics (a workspace's `dvc init` turns them on: each dvc command would start a
    daemon reporting to the network, offline here). `extra` last, so a test may set any of them."""
    env = dict(os.environ)
    env["PATH"] = f"{BIN}{os.pathsep}{env.get('PATH', '')}"
    env["PYTHONPATH"] = f"{REPO / 'src'}{os.pathsep}{env.get('PYTHONPATH', '')}"
    for key in ("KERNATTN_SCALE", HOLD_ENV):
        env.pop(key, None)
    env["MLFLOW_ENABLE_SYSTEM_METRICS_LOGGING"] = "false"
    env["DVC_NO_ANALYTICS"] = "1"
    env.update({k: str(v) for k, v in extra.items()})
    return env


def make_workspace(ws: Path, *, tracking: dict | None = None, mlflow_ui: str | None = None,
                   mirror: Path | None = None) -> Path:
    """`ws`: a copy of the pipeline's top level (Snakefile, .dvcignore, src link, params.yaml at the micro
    scale). Its data sets come from the catalogue, through the data mirror the environment names
    (`mirror`: the char corpus from that local file instead); `tracking`: keys over params.yaml's
    tracking section (None: params.yaml's own, the workspace's file store)."""
    assert paths.DICKENS.is_file(), f"{paths.DICKENS} is missing: set KERNATTN_DATA_MIRROR (tests/paths.py)"
    ws.mkdir(parents=True)
    shutil.copy(REPO / "Snakefile", ws / "Snakefile")
    shutil.copy(REPO / ".dvcignore", ws / ".dvcignore")  # kept by `dvc init`: src/'s bytecode is no dependency
    (ws / "src").symlink_to(REPO / "src")  # the code DVC stages depend on
    doc = yaml.safe_load((REPO / "params.yaml").read_text())
    doc["scale"] = "micro"
    if mirror is not None:
        doc["scales"]["micro"].setdefault("data", {})["mirror"] = str(mirror)
    doc["tracking"].update(tracking or {})
    doc["report"]["mlflow_ui"] = mlflow_ui
    (ws / "params.yaml").write_text(yaml.safe_dump(doc, sort_keys=False))
    return ws
