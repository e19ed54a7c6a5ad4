"""DVC experiments: `dvc exp run -S key=value` reruns exactly the stages that read that key."""

from __future__ import annotations

import subprocess

from kernattn.cli import main

from .test_pipeline import BIN, check_outputs, run, workspace  # noqa: F401  (fixture)


def git(ws, *args):
    proc = subprocess.run(["git", *args], cwd=ws, capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr
    return proc.stdout


def test_dvc_exp_run_with_one_changed_param_reruns_only_its_dependents(workspace):
    ws = workspace
    assert main(["dvc-yaml", "--params", str(ws / "params.yaml"), "--out", str(ws / "dvc.yaml")]) == 0
    git(ws, "init", "-q")
    git(ws, "config", "user.email", "ci@kernattn.invalid")
    git(ws, "config", "user.name", "kernattn ci")
    assert run([str(BIN / "dvc"), "init", "-q"], ws).returncode == 0
    (ws / ".gitignore").write_text("results/\nreport/\n.snakemake/\n")
    first = run([str(BIN / "dvc"), "repro"], ws)
    assert first.returncode == 0, first.stdout[-3000:] + first.stderr[-3000:]
    check_outputs(ws)
    git(ws, "add", "-A")
    git(ws, "commit", "-q", "-m", "baseline")

    # The micro scale does not override train.lr, so this changes every micro training run
    # and the report, and nothing that prepares the data.
    exp = run([str(BIN / "dvc"), "exp", "run", "-S", "train.lr=0.003"], ws)
    out = exp.stdout + exp.stderr
    assert exp.returncode == 0, out[-3000:]
    assert "Stage 'prepare' didn't change, skipping" in out, out[-3000:]
    for stage in ("train@rope-s0", "train@gpa_dp_m8-s0", "report"):
        assert f"Running stage '{stage}'" in out, out[-3000:]

    # A data-only key reruns prepare (and with it everything downstream).
    exp = run([str(BIN / "dvc"), "exp", "run", "-S", "scales.micro.data.max_chars=150000"], ws)
    out = exp.stdout + exp.stderr
    assert exp.returncode == 0, out[-3000:]
    assert "Running stage 'prepare'" in out
