"""The hand-over of the infra run's micro DAG to the `micro_dag` fixture (tests/shared_dag.py):
when a consumer waits, adopts the copy or trains the DAG itself."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
import time

from . import shared_dag


def _published(root, returncode=0):
    ws = root / "producer" / "ws"
    (ws / ".snakemake" / "locks").mkdir(parents=True)
    (ws / ".snakemake" / "metadata").mkdir()
    (ws / "results").mkdir()
    (ws / "results" / "out.txt").write_text("trained")
    shared_dag.publish(root, ws, {"args": ["snakemake"], "returncode": returncode, "stdout": "", "stderr": "",
                                  "via": "slurm"})


def test_without_xdist_or_a_producer_the_consumer_trains_at_once(tmp_path, monkeypatch):
    monkeypatch.setenv("PYTEST_XDIST_WORKER", "gw0")
    assert shared_dag.wait_for_published(tmp_path, producer_selected=False) is None
    monkeypatch.delenv("PYTEST_XDIST_WORKER")
    # serial: the infra tests cannot run beside the consumer, so waiting could only time out
    assert shared_dag.wait_for_published(tmp_path, producer_selected=True) is None


def test_a_published_run_is_adopted_without_snakemakes_locks(tmp_path):
    _published(tmp_path)
    record, ws = shared_dag.wait_for_published(tmp_path, producer_selected=False)  # published already: no wait
    assert record["returncode"] == 0 and record["via"] == "slurm"
    assert (ws / "results" / "out.txt").read_text() == "trained"
    assert (ws / ".snakemake" / "metadata").is_dir() and not (ws / ".snakemake" / "locks").exists()


def test_a_failed_or_withdrawn_run_leaves_the_consumer_to_train(tmp_path):
    _published(tmp_path, returncode=1)
    assert shared_dag.wait_for_published(tmp_path, producer_selected=True) is None
    assert not (tmp_path / shared_dag.COPY / "ws").exists()
    shared_dag.withdraw(tmp_path, "the MLflow server did not start")
    assert shared_dag.wait_for_published(tmp_path, producer_selected=True) is None


def test_only_the_first_claim_wins_and_a_consumer_waits_for_its_run(tmp_path, monkeypatch):
    monkeypatch.setenv("PYTEST_XDIST_WORKER", "gw1")
    monkeypatch.setattr(shared_dag, "POLL_S", 0.05)
    assert shared_dag.claim(tmp_path, tmp_path / "producer" / "ws")
    assert not shared_dag.claim(tmp_path, tmp_path / "other" / "ws")
    assert json.loads((tmp_path / shared_dag.CLAIM).read_text())["pid"] == os.getpid()
    later = threading.Timer(0.3, _published, args=(tmp_path,))
    later.start()
    t0 = time.monotonic()
    record, _ = shared_dag.wait_for_published(tmp_path, producer_selected=True)
    assert record["returncode"] == 0 and time.monotonic() - t0 >= 0.25


def test_a_claimant_that_died_is_not_waited_for(tmp_path, monkeypatch):
    monkeypatch.setenv("PYTEST_XDIST_WORKER", "gw1")
    monkeypatch.setattr(shared_dag, "POLL_S", 0.05)
    dead = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True)
    (tmp_path / shared_dag.CLAIM).write_text(json.dumps({"pid": int(dead.stdout), "ws": "ws"}))
    t0 = time.monotonic()
    assert shared_dag.wait_for_published(tmp_path, producer_selected=True) is None
    assert time.monotonic() - t0 < 5
