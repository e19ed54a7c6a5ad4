"""Crashes of a real `kernattn train` process (issue 9): SIGKILL at two different steps and
SIGTERM, each followed by the same command, must end with the weights, optimiser state and
metrics.jsonl of an uninterrupted run, bit for bit on CPU; the same through
`snakemake --rerun-incomplete`; a loss that turns non-finite stops the run with one line,
keeps the last good checkpoint and marks the run FAILED in metrics.jsonl and MLflow.

The kill lands at a known step thanks to KERNATTN_DEBUG_HOLD_AT_STEP (train.HOLD_ENV): the
real process stops after that step (its metrics lines written, its checkpoint only if the
step is a checkpoint step) and waits to be killed. The rerun is the same command without it.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch
import yaml

from kernattn import train
from tests.test_train import (_keep_torch_threads, corpus, kernattn_train, make_params,  # noqa: F401 (fixtures)
                              read_metrics, untimed)

REPO = Path(__file__).resolve().parents[1]
BIN = Path(sys.executable).parent
MIRROR = REPO.parent / "shared" / "data" / "dickens" / "silesia_dickens.txt.gz"
RUN = "gpa_dp_m8-s0"  # a lag-bias variant; dropout on: the global RNG matters on resume
# 10 steps, a checkpoint every 3 (3, 6, 9, 10), a train line every step, evals at 0, 5, 10.
OVER = {"model": {"dropout": 0.1}, "train": {"max_steps": 10, "eval_every": 5, "checkpoint_every": 3}}


def env(**extra: str) -> dict:
    e = dict(os.environ)
    e["PATH"] = f"{BIN}{os.pathsep}{e.get('PATH', '')}"
    e["PYTHONPATH"] = f"{REPO / 'src'}{os.pathsep}{e.get('PYTHONPATH', '')}"
    e.pop(train.HOLD_ENV, None)
    e.pop("KERNATTN_SCALE", None)
    e["MLFLOW_ENABLE_SYSTEM_METRICS_LOGGING"] = "false"
    return e | extra


def train_cmd(params: Path, run_id: str = RUN) -> list[str]:
    return [sys.executable, "-m", "kernattn.cli", "train", "--params", str(params), "--run", run_id, "--no-progress"]


def wait_for(path: Path, text: str, proc: subprocess.Popen, timeout: float = 120.0) -> None:
    """Until `text` appears in the file `path` (the process's stderr or log); on failure the
    process (its whole group when it leads one) is killed, never left holding."""
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        if path.is_file() and text in path.read_text(errors="replace"):
            return
        if proc.poll() is not None:
            raise AssertionError(f"exited {proc.returncode} before '{text}': {path.read_text()[-2000:]}")
        time.sleep(0.05)
    if os.getpgid(proc.pid) == proc.pid:
        os.killpg(proc.pid, signal.SIGKILL)
    else:
        proc.kill()
    proc.wait()
    raise AssertionError(f"no '{text}' in {path} after {timeout} s")


def start_held(cmd: list[str], log: Path, step: int, **kw) -> subprocess.Popen:
    fh = open(log, "w")
    proc = subprocess.Popen(cmd, env=env(**{train.HOLD_ENV: str(step)}), stdout=fh, stderr=subprocess.STDOUT, **kw)
    fh.close()
    return proc


def assert_same_run(a: Path, b: Path) -> None:
    """Run folders a and b: equal weights, optimiser state, RNG, metrics (timings aside), results."""
    ca = torch.load(a / "ckpt.pt", weights_only=True)
    cb = torch.load(b / "ckpt.pt", weights_only=True)
    assert ca["step"] == cb["step"]
    assert ca["model"].keys() == cb["model"].keys()
    for key in ca["model"]:
        assert torch.equal(ca["model"][key], cb["model"][key]), key
    for sa, sb in zip(ca["optimizer"]["state"].values(), cb["optimizer"]["state"].values(), strict=True):
        assert all(torch.equal(sa[k], sb[k]) for k in sa)
    assert torch.equal(ca["rng"]["batch"], cb["rng"]["batch"]) and torch.equal(ca["rng"]["torch"], cb["rng"]["torch"])
    assert untimed(read_metrics(a)) == untimed(read_metrics(b))
    fa, fb = (json.loads((d / "final.json").read_text()) for d in (a, b))
    for key in ("val_loss", "train_loss", "steps", "tokens_seen", "fingerprint"):
        assert fa[key] == fb[key], key


@pytest.fixture(scope="module")
def whole(tmp_path_factory, corpus) -> Path:  # noqa: F811 (the imported fixture)
    """The uninterrupted run every interrupted one is compared with."""
    folder = tmp_path_factory.mktemp("whole")
    threads = torch.get_num_threads()  # the stage sets train.threads: give it back
    assert kernattn_train(make_params(folder, corpus, **OVER), RUN) == 0
    torch.set_num_threads(threads)
    run_dir = folder / "runs" / RUN
    assert len(read_metrics(run_dir)) == 13  # val 0, train 1..10, val 5, val 10
    return run_dir


@pytest.mark.parametrize("step, ckpt_step", [(4, 3), (8, 6)])
def test_sigkill_then_the_same_command_resumes_bit_exact(tmp_path, corpus, whole, step, ckpt_step):  # noqa: F811
    params = make_params(tmp_path, corpus, **OVER)
    run_dir = tmp_path / "runs" / RUN
    log = tmp_path / "first.log"
    proc = start_held(train_cmd(params), log, step)
    wait_for(log, f"holding after step {step}", proc)
    os.kill(proc.pid, signal.SIGKILL)
    assert proc.wait(timeout=60) == -signal.SIGKILL
    assert not (run_dir / "final.json").exists()
    assert torch.load(run_dir / "ckpt.pt", weights_only=True)["step"] == ckpt_step
    # The killed process had written lines past its checkpoint; the rerun cuts them.
    assert read_metrics(run_dir)[-1]["step"] == step
    assert not list(run_dir.glob(".*tmp-*"))  # no temporary file left beside the outputs

    again = subprocess.run(train_cmd(params), env=env(), capture_output=True, text=True, timeout=300)
    assert again.returncode == 0, again.stderr[-2000:]
    assert f"resuming at step {ckpt_step}" in again.stdout
    assert_same_run(whole, run_dir)


def test_sigterm_checkpoints_exits_143_and_the_rerun_resumes(tmp_path, corpus, whole):  # noqa: F811
    params = make_params(tmp_path, corpus, **OVER)
    run_dir = tmp_path / "runs" / RUN
    log = tmp_path / "first.log"
    proc = start_held(train_cmd(params), log, 5)
    wait_for(log, "holding after step 5", proc)
    proc.send_signal(signal.SIGTERM)
    assert proc.wait(timeout=60) == 143
    assert "stopped at step 5 (SIGTERM)" in log.read_text()
    assert torch.load(run_dir / "ckpt.pt", weights_only=True)["step"] == 5  # saved on SIGTERM, off-schedule
    again = subprocess.run(train_cmd(params), env=env(), capture_output=True, text=True, timeout=300)
    assert again.returncode == 0, again.stderr[-2000:]
    assert "resuming at step 5" in again.stdout
    assert_same_run(whole, run_dir)


def test_snakemake_rerun_incomplete_after_a_sigkill(tmp_path, corpus, whole):  # noqa: F811
    """The real Snakefile on micro: kill snakemake and its training job (one process group) at
    step 4, then `snakemake --unlock` and `snakemake --rerun-incomplete` resume the run from its
    checkpoint. The prepared corpus is copied in (prepare has its own tests), so the result
    must equal the `whole` run's."""
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
    doc["scales"]["micro"]["data"]["mirror"] = str(MIRROR)
    doc["scales"]["micro"]["tracking"] = {"enabled": False}
    for section, values in OVER.items():
        doc["scales"]["micro"][section].update(values)
    (ws / "params.yaml").write_text(yaml.safe_dump(doc, sort_keys=False))
    cmd = [str(BIN / "snakemake"), "--cores", "1", f"results/micro/runs/{RUN}/final.json"]
    proc = start_held(cmd, tmp_path / "snakemake.log", 4, cwd=ws, start_new_session=True)
    wait_for(ws / f"results/logs/train-{RUN}.log", "holding after step 4", proc)
    os.killpg(proc.pid, signal.SIGKILL)  # snakemake and the training job, as a lost node would
    proc.wait(timeout=60)
    run_dir = ws / "results/micro/runs" / RUN
    assert torch.load(run_dir / "ckpt.pt", weights_only=True)["step"] == 3 and not (run_dir / "final.json").exists()

    # A SIGKILLed snakemake leaves its lock: what a user does then is --unlock, then rerun.
    unlock = subprocess.run([*cmd, "--unlock"], cwd=ws, env=env(), capture_output=True, text=True, timeout=300)
    assert unlock.returncode == 0, unlock.stderr[-3000:]
    again = subprocess.run([*cmd, "--rerun-incomplete"], cwd=ws, env=env(), capture_output=True, text=True,
                           timeout=300)
    assert again.returncode == 0, again.stderr[-3000:]
    assert "rule prepare" not in again.stdout + again.stderr  # the copied corpus was used
    assert "resuming at step 3" in (ws / f"results/logs/train-{RUN}.log").read_text()
    assert_same_run(whole, run_dir)


def test_non_finite_loss_stops_with_one_line_and_keeps_the_last_good_checkpoint(tmp_path, corpus):  # noqa: F811
    """A real divergence: lr 1e6 (no clipping) blows the weights up; here the loss is finite at
    steps 1-2 and nan from step 3 on. Checkpoints every step: the last finite one stays."""
    params = make_params(tmp_path, corpus, tracking={"enabled": True},
                         train={"lr": 1.0e6, "grad_clip": 0.0, "checkpoint_every": 1, "max_steps": 6})
    run_dir = tmp_path / "runs" / "rope-s0"
    proc = subprocess.run(train_cmd(params, "rope-s0"), env=env(), capture_output=True, text=True, timeout=300)
    assert proc.returncode == train.EXIT_DIVERGED
    failed = read_metrics(run_dir)[-1]
    step, value = failed["step"], failed["error"].rsplit(" ", 1)[-1]  # nan here; inf is as good
    assert 1 < step < 6 and value in ("nan", "inf", "-inf")
    assert failed == {"step": step, "status": "FAILED", "error": f"step {step}: training loss is {value}",
                      "checkpoint_step": step - 1}
    errors = [line for line in proc.stderr.splitlines() if "kernattn" in line]
    assert errors == [
        f"kernattn train: error: rope-s0: step {step}: training loss is {value}; training stopped, the last good "
        f"checkpoint (step {step - 1}) is kept at {run_dir / 'ckpt.pt'}; lower train.lr (now 1e+06) or set "
        f"train.grad_clip, then rerun with --fresh"], proc.stderr
    assert "Traceback" not in proc.stderr
    ckpt = torch.load(run_dir / "ckpt.pt", weights_only=True)
    assert ckpt["step"] == step - 1 and all(torch.isfinite(t).all() for t in ckpt["model"].values())
    assert not (run_dir / "final.json").exists()
    from mlflow import MlflowClient

    config = json.loads((run_dir / "config.json").read_text())
    client = MlflowClient(config["tracking"]["uri"])
    run = client.get_run(config["tracking"]["mlflow_run_id"])
    assert run.info.status == "FAILED" and f"step {step}: training loss is {value}" in run.data.tags["failure"]
