"""The char track's train stage at micro scale: files and schema, learning, and MLflow tracking
(off, unreachable, a session without a checkpoint, two processes into one SQLite store).
What every track shares (resume, SIGTERM, divergence, stale folders, sync) is test_engine.py's."""

from __future__ import annotations

import gzip
import json
import math
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import torch

from kernattn import cli
from kernattn.engine import mlflow_params
from kernattn.tracks.char import track as train
from kernattn.yaml_text import safe_dump, safe_load
from tests import paths

REPO = Path(__file__).resolve().parents[1]
DICKENS = paths.DICKENS
LISTED_FINAL_KEYS = {
    "run_id", "row", "seed", "variant", "options", "label", "source", "val_loss", "val_bpc",
    "train_loss", "n_params", "extra_params", "tokens_seen", "steps", "wall_s", "tokens_per_s",
    "device", "mlflow_run_id", "tracking_uri", "git_commit", "params_digest", "scale",
}


@pytest.fixture(autouse=True)
def _keep_torch_threads():
    """The stage sets torch's thread count (train.threads): give it back to the test process."""
    n = torch.get_num_threads()
    yield
    torch.set_num_threads(n)


@pytest.fixture(scope="module")
def corpus(tmp_path_factory) -> Path:
    """train.npy / val.npy / vocab.json / meta.json as the prepare stage writes them."""
    out = tmp_path_factory.mktemp("data")
    if DICKENS.is_file():
        with gzip.open(DICKENS, "rt", encoding="utf-8", errors="replace") as fh:
            text = fh.read(200_000)
    else:  # synthetic stand-in with some structure
        rng = np.random.default_rng(0)
        words = ["the ", "of ", "and ", "Mr. ", "Pickwick ", "said ", "to ", "a ", "\n"]
        text = "".join(rng.choice(words, size=50_000, p=[.2, .12, .12, .08, .08, .1, .1, .1, .1]))
    chars = sorted(set(text))
    lookup = {c: i for i, c in enumerate(chars)}
    ids = np.array([lookup[c] for c in text], dtype=np.uint8)
    cut = int(0.9 * len(ids))
    np.save(out / "train.npy", ids[:cut])
    np.save(out / "val.npy", ids[cut:])
    (out / "vocab.json").write_text(json.dumps({"chars": chars, "size": len(chars)}))
    (out / "meta.json").write_text(json.dumps({"chars": len(ids)}))
    return out


def make_params(folder: Path, corpus: Path, tracking: dict | None = None, **sections) -> Path:
    """params.yaml at micro scale with every path under `folder`; `sections` override micro."""
    doc = safe_load((REPO / "params.yaml").read_text())
    doc["scale"] = "micro"
    micro = doc["scales"]["micro"]
    micro.setdefault("data", {})["out_dir"] = str(corpus)
    micro.setdefault("train", {})["out_dir"] = str(folder / "runs")
    micro["tracking"] = {"enabled": False, "uri": f"sqlite:///{folder}/mlflow/mlflow.db",
                         "artifact_root": str(folder / "mlflow" / "artifacts"), **(tracking or {})}
    for section, values in sections.items():
        micro.setdefault(section, {}).update(values)
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / "params.yaml"
    path.write_text(safe_dump(doc))
    return path


def kernattn_train(params: Path, run_id: str, *extra: str) -> int:
    return cli.main(["train", "--params", str(params), "--run", run_id, "--no-progress", *extra])


def read_metrics(run_dir: Path) -> list[dict]:
    return [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]


def test_train_writes_every_file(tmp_path, corpus, capsys):
    params = make_params(tmp_path, corpus)
    assert kernattn_train(params, "rope-s0") == 0
    run_dir = tmp_path / "runs" / "rope-s0"
    # keep-3.pt: the checkpoint where micro's budget of 4 steps branches off (train.budgets);
    # lr.npy: the rate of every step the engine set (engine/schedule.py)
    assert sorted(p.name for p in run_dir.iterdir()) == ["ckpt.pt", "config.json", "final.json", "keep-3.pt",
                                                         "lr.npy", "metrics.jsonl"]

    final = json.loads((run_dir / "final.json").read_text())
    assert LISTED_FINAL_KEYS <= set(final) and set(final) == set(train.FINAL_KEYS)
    assert (final["run_id"], final["row"], final["seed"], final["variant"]) == ("rope-s0", "rope", 0, "softmax")
    assert final["options"] == {"position": "rope"} and final["scale"] == "micro"
    assert final["steps"] == 6 and final["tokens_seen"] == 6 * 4 * 32
    assert final["mlflow_run_id"] is None and final["tracking_uri"] is None  # tracking disabled
    assert final["val_bpc"] == pytest.approx(final["val_loss"] / np.log(2))
    assert final["device"] == "cpu" and final["extra_params"] == 0 and final["n_params"] > 0

    config = json.loads((run_dir / "config.json").read_text())
    for key in ("scale", "run", "model", "train", "data", "params_digest", "fingerprint", "git_commit",
                "torch_version", "device", "n_params", "n_params_non_embedding", "extra_params", "tracking"):
        assert key in config, key
    assert config["model"]["d_model"] == 32 and config["run"]["run_id"] == "rope-s0"
    assert config["params_digest"] == final["params_digest"]

    lines = read_metrics(run_dir)
    assert all(list(rec) == list(train.METRIC_KEYS) for rec in lines)
    val = [r for r in lines if r["split"] == "val"]
    tr = [r for r in lines if r["split"] == "train"]
    assert [r["step"] for r in val] == [0, 3, 6]        # step 0, every eval_every, the end
    assert [r["step"] for r in tr] == [1, 2, 3, 4, 5, 6]  # log every max(1, eval_every // 10)
    assert val[-1]["loss"] == final["val_loss_sample"] and tr[-1]["loss"] == final["train_loss"]
    # the verdicts' loss: every non-overlapping window of the validation split, with its sampling error
    n_val = int(np.load(corpus / "val.npy").size)
    assert final["val_windows"] == len(range(0, n_val - 32, 32)) and final["val_chars"] == 32 * final["val_windows"]
    assert final["val_loss"] != final["val_loss_sample"] and 0 < final["val_loss_se"] < 0.1
    assert all(r["tokens"] == r["step"] * 4 * 32 for r in lines)
    assert all(np.isfinite(r["loss"]) and r["lr"] > 0 and r["elapsed_s"] >= 0 for r in lines)

    ckpt = torch.load(run_dir / "ckpt.pt", weights_only=True)
    assert ckpt["step"] == 6 and ckpt["metrics_lines"] == len(lines) and ckpt["loop"]["acc_n"] == 0
    assert ckpt["fingerprint"] == final["fingerprint"]

    # Rerunning a finished run does nothing.
    before = (run_dir / "final.json").read_bytes()
    capsys.readouterr()
    assert kernattn_train(params, "rope-s0") == 0
    assert "already finished" in capsys.readouterr().out
    assert (run_dir / "final.json").read_bytes() == before


def test_loss_decreases_on_dickens(tmp_path, corpus):
    params = make_params(tmp_path, corpus, train={"max_steps": 30, "batch_size": 16, "lr": 3e-3,
                                                  "warmup_steps": 5, "eval_every": 10, "eval_batches": 4,
                                                  "checkpoint_every": 30, "schedule": "cosine", "budgets": []})
    assert kernattn_train(params, "gpa_dp_m8-s0") == 0
    lines = read_metrics(tmp_path / "runs" / "gpa_dp_m8-s0")
    val = [r["loss"] for r in lines if r["split"] == "val"]
    tr = [r["loss"] for r in lines if r["split"] == "train"]
    assert len(val) == 4 and val[0] > 4.0                # about ln(vocab) at init
    assert val == sorted(val, reverse=True)             # every eval better than the last
    assert val[-1] < val[0] - 1.0 and tr[-1] < tr[0] - 1.0


def test_variant_lr_scale_moves_only_the_variants_own_parameters_faster(tmp_path, corpus):
    """train.variant_lr_scale multiplies the lr of the GPA bank (and nothing else): Adam's
    first step moves each parameter by about its lr, so after one step the bank has moved 10x
    as far at scale 10, and every other weight is where it is at scale 1."""
    def one_step(scale):
        params = make_params(tmp_path / str(scale), corpus, train={"max_steps": 1, "warmup_steps": 1, "eval_every": 1,
                                                                   "checkpoint_every": 1, "variant_lr_scale": scale,
                                                                   "budgets": []})
        assert kernattn_train(params, "gpa_dp_m8-s0") == 0
        return torch.load(tmp_path / str(scale) / "runs" / "gpa_dp_m8-s0" / "ckpt.pt", weights_only=True)["model"]

    base, fast = one_step(1.0), one_step(10.0)
    init = math.log(150.0)  # gpa-long's l = 150 for every kernel
    for name in (k for k in base if k.endswith("bank.log_length")):
        moved1, moved10 = base[name].double() - init, fast[name].double() - init
        assert moved1.abs().min() > 0
        torch.testing.assert_close(moved10, 10 * moved1, rtol=1e-3, atol=1e-7)
    others = [k for k in base if ".bank." not in k]
    assert others and all(torch.equal(base[k], fast[k]) for k in others)


def test_session_without_checkpoint_reuses_its_mlflow_run(tmp_path, corpus):
    params = make_params(tmp_path, corpus, tracking={"enabled": True})
    assert kernattn_train(params, "rope-s0", "--stop-after", "4") == 0
    run_dir = tmp_path / "runs" / "rope-s0"
    first = json.loads((run_dir / "config.json").read_text())["tracking"]["mlflow_run_id"]
    (run_dir / "ckpt.pt").unlink()  # as if it died before its first checkpoint
    assert kernattn_train(params, "rope-s0") == 0
    final = json.loads((run_dir / "final.json").read_text())
    assert final["mlflow_run_id"] == first
    from mlflow import MlflowClient

    client = MlflowClient(final["tracking_uri"])
    assert [m.step for m in client.get_metric_history(first, "train_loss")] == [1, 2, 3, 4, 5, 6]
    assert client.get_run(first).info.status == "FINISHED"


def test_unknown_run_is_a_usage_error(tmp_path, corpus, capsys):
    params = make_params(tmp_path, corpus)
    assert kernattn_train(params, "nope-s0") == 2
    assert "no run 'nope-s0'" in capsys.readouterr().err


def test_unreachable_tracking_server_warns_once(tmp_path, corpus, capsys):
    params = make_params(tmp_path, corpus, tracking={"enabled": True, "uri": "http://127.0.0.1:9"})
    assert kernattn_train(params, "rope-s0") == 0
    err = capsys.readouterr().err
    assert sum("warning" in line and "MLflow" in line for line in err.splitlines()) == 1
    final = json.loads((tmp_path / "runs" / "rope-s0" / "final.json").read_text())
    assert final["mlflow_run_id"] is None and final["steps"] == 6


@pytest.mark.e2e
def test_two_concurrent_runs_into_one_sqlite_store(tmp_path, corpus):
    params = make_params(tmp_path, corpus, tracking={"enabled": True})
    env = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONPATH": str(REPO / "src")}
    procs = [
        subprocess.Popen([sys.executable, "-m", "kernattn.tracks.char.track", "--params", str(params), "--run", run_id,
                          "--no-progress"], env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        for run_id in ("rope-s0", "gpa_dp_m8-s0")
    ]
    outputs = [p.communicate(timeout=240)[0] for p in procs]
    for p, out in zip(procs, outputs):
        assert p.returncode == 0, out
        assert "warning" not in out.lower(), out

    from mlflow import MlflowClient

    client = MlflowClient(f"sqlite:///{tmp_path}/mlflow/mlflow.db")
    for run_id in ("rope-s0", "gpa_dp_m8-s0"):
        run_dir = tmp_path / "runs" / run_id
        final = json.loads((run_dir / "final.json").read_text())
        config = json.loads((run_dir / "config.json").read_text())
        run = client.get_run(final["mlflow_run_id"])
        assert run.info.status == "FINISHED" and run.info.run_name == run_id
        assert final["mlflow_experiment_id"] == run.info.experiment_id  # the report links its runs page
        assert run.data.tags["run_id"] == run_id and run.data.tags["params_digest"] == final["params_digest"]
        assert run.data.params == mlflow_params(config)
        lines = read_metrics(run_dir)
        for split in ("train", "val"):
            steps = [r["step"] for r in lines if r["split"] == split]
            for key in (f"{split}_loss", f"{split}_bpc"):
                assert [m.step for m in client.get_metric_history(run.info.run_id, key)] == steps, key
        assert {a.path for a in client.list_artifacts(run.info.run_id)} == {"config.json", "final.json", "metrics.jsonl"}


def test_tracker_retries_locks_and_warns_once(monkeypatch):
    from types import SimpleNamespace

    from kernattn.tracking import client as tracking

    monkeypatch.setattr(tracking.time, "sleep", lambda s: None)
    warnings = []
    tracker = tracking.Tracker(SimpleNamespace(uri="sqlite:///x.db", enabled=True, experiment="e",
                                               artifact_root="a"), warn=warnings.append)
    calls = []

    def flaky():
        calls.append(1)
        if len(calls) < 3:
            raise RuntimeError("(sqlite3.OperationalError) database is locked")
        return "ok"

    assert tracker._call("x", flaky) == "ok" and len(calls) == 3 and not warnings

    def broken():
        raise ConnectionError("store gone")

    assert tracker._call("logging metrics", broken) is None
    assert tracker._call("logging metrics", broken) is None  # tracking is off now: not called again
    assert not tracker.enabled and len(warnings) == 1 and "store gone" in warnings[0]
    tracker.log_metrics({"a": 1.0}, step=1)
    tracker.flush()
    tracker.end("FINISHED")  # all no-ops
    assert tracking.flatten({"a": {"b": 1, "c": (1, 2)}, "d": None}) == {"a.b": "1", "a.c": "[1, 2]", "d": "None"}
