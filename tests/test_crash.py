"""A crash of the whole pipeline (issue 9): SIGKILL of snakemake and its training job at
once, then `snakemake --unlock` and `snakemake --rerun-incomplete` resume the run from its
checkpoint and end with the weights, metrics and final record of an uninterrupted run.

Killed trainers of every track (SIGKILL, SIGTERM, divergence) are tested in test_engine.py;
this file adds the Snakefile around the char track. The kill lands at a known step thanks to
KERNATTN_DEBUG_HOLD_AT_STEP (kernattn.engine.HOLD_ENV).
"""

from __future__ import annotations

import os
import signal
import subprocess

import pytest
import yaml

from tests.workspace import command_env
from tests.test_engine import (BIN, CASES, REPO, SHARED, _keep_torch_threads, assert_same_run, ckpt_of,  # noqa: F401
                               corpus, prepared, start_held, wait_for, whole)

CASE = CASES["char"]


@pytest.mark.e2e
def test_snakemake_rerun_incomplete_after_a_sigkill(tmp_path, corpus, whole):  # noqa: F811
    """The real Snakefile on micro: kill snakemake and its training job (one process group) at
    step 4, then `snakemake --unlock` and `snakemake --rerun-incomplete` resume the run from its
    checkpoint. The prepared corpus is copied in (prepare has its own tests), so the result
    must equal the uninterrupted run's."""
    ws = tmp_path / "ws"
    ws.mkdir()
    (ws / "Snakefile").write_text((REPO / "Snakefile").read_text())
    if (REPO / "rules").is_dir():
        (ws / "rules").symlink_to(REPO / "rules")
    data = ws / "results/micro/data/dickens"
    data.mkdir(parents=True)
    for f in corpus.iterdir():
        (data / f.name).write_bytes(f.read_bytes())
    doc = yaml.safe_load((REPO / "params.yaml").read_text())
    doc["scale"] = "micro"
    doc["scales"]["micro"]["data"]["mirror"] = str(SHARED / "dickens" / "silesia_dickens.txt.gz")
    doc["scales"]["micro"]["tracking"] = {"enabled": False}
    for section, values in CASE.over.items():
        doc["scales"]["micro"].setdefault(section, {}).update(values)
    (ws / "params.yaml").write_text(yaml.safe_dump(doc, sort_keys=False))
    cmd = [str(BIN / "snakemake"), "--cores", "1", f"results/micro/runs/{CASE.run}/final.json"]
    proc = start_held(cmd, tmp_path / "snakemake.log", 4, cwd=ws, start_new_session=True)
    wait_for(ws / f"results/logs/train-{CASE.run}.log", "holding after step 4", proc)
    os.killpg(proc.pid, signal.SIGKILL)  # snakemake and the training job, as a lost node would
    proc.wait(timeout=60)
    run_dir = ws / "results/micro/runs" / CASE.run
    assert ckpt_of(run_dir)["step"] == 3 and not (run_dir / "final.json").exists()

    # A SIGKILLed snakemake leaves its lock: what a user does then is --unlock, then rerun.
    unlock = subprocess.run([*cmd, "--unlock"], cwd=ws, env=command_env(), capture_output=True, text=True, timeout=300)
    assert unlock.returncode == 0, unlock.stderr[-3000:]
    again = subprocess.run([*cmd, "--rerun-incomplete"], cwd=ws, env=command_env(), capture_output=True, text=True,
                           timeout=300)
    assert again.returncode == 0, again.stderr[-3000:]
    assert "rule prepare" not in again.stdout + again.stderr  # the copied corpus was used
    assert "resuming at step 3" in (ws / f"results/logs/train-{CASE.run}.log").read_text()
    assert_same_run(CASE, whole("char"), run_dir)
