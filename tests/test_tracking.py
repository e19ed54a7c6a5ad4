"""kernattn.tracking against a real SQLite MLflow store: the experiment kernattn opens is tagged
as model training (so MLflow 3 files it under Model training, not GenAI), and the UI link to
an experiment's runs."""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace

import pytest

from kernattn.tracking import client as tracking


@pytest.fixture(autouse=True)
def _no_system_metrics(monkeypatch):
    monkeypatch.setenv("MLFLOW_ENABLE_SYSTEM_METRICS_LOGGING", "false")


def _params(tmp_path, experiment="kernattn-test"):
    return SimpleNamespace(uri=f"sqlite:///{tmp_path / 'mlflow.db'}", enabled=True, experiment=experiment,
                           artifact_root=str(tmp_path / "artifacts"))


def _client(params):
    from mlflow import MlflowClient

    return MlflowClient(tracking_uri=params.uri)


def _run_once(params) -> tracking.Tracker:
    tracker = tracking.Tracker(params, warn=pytest.fail)
    assert tracker.start(name="rope-s0", tags={}, params={"a": 1}) is not None
    tracker.end("FINISHED")
    return tracker


def test_a_new_experiment_is_tagged_as_model_training(tmp_path):
    params = _params(tmp_path)
    tracker = _run_once(params)
    exp = _client(params).get_experiment(tracker.experiment_id)
    assert exp.name == "kernattn-test"
    assert exp.tags[tracking.EXPERIMENT_KIND_TAG] == tracking.EXPERIMENT_KIND
    assert (tracking.EXPERIMENT_KIND_TAG, tracking.EXPERIMENT_KIND) == ("mlflow.experimentKind",
                                                                        "custom_model_development")
    assert exp.artifact_location.endswith("artifacts")


def test_an_existing_untagged_experiment_gets_the_tag_and_a_chosen_kind_is_kept(tmp_path):
    params = _params(tmp_path)
    client = _client(params)
    old = client.create_experiment("kernattn-test", artifact_location=str(tmp_path / "old"))  # made before the tag
    chosen = client.create_experiment("by-hand", tags={tracking.EXPERIMENT_KIND_TAG: "genai_development"})
    assert tracking.EXPERIMENT_KIND_TAG not in client.get_experiment(old).tags

    assert _run_once(params).experiment_id == old
    assert client.get_experiment(old).tags[tracking.EXPERIMENT_KIND_TAG] == tracking.EXPERIMENT_KIND

    assert _run_once(_params(tmp_path, "by-hand")).experiment_id == chosen
    assert client.get_experiment(chosen).tags[tracking.EXPERIMENT_KIND_TAG] == "genai_development"


def test_sync_opens_the_same_tagged_experiment(tmp_path):
    from kernattn.tracking.sync import Syncer

    params = _params(tmp_path, "synced")
    syncer = Syncer(params)
    assert _client(params).get_experiment(syncer.experiment_id).tags[tracking.EXPERIMENT_KIND_TAG] == \
        tracking.EXPERIMENT_KIND


def test_experiment_runs_url():
    want = "http://127.0.0.1:5000/#/experiments/7/runs?workflowType=machine_learning"
    assert tracking.experiment_runs_url("http://127.0.0.1:5000", "7") == want
    assert tracking.experiment_runs_url("http://127.0.0.1:5000/", "7") == want
    assert tracking.experiment_runs_url("https://host/mlflow/", "0") == \
        "https://host/mlflow/#/experiments/0/runs?workflowType=machine_learning"


def test_free_port_is_below_the_ephemeral_range_and_bindable():
    """A port an outgoing connection cannot take before the listener binds it (a 2-rank test's
    rendezvous store failed with EADDRINUSE on a kernel-chosen port)."""
    import socket

    from kernattn.tracking.server import EPHEMERAL_RANGE, free_port

    low = int(Path(EPHEMERAL_RANGE).read_text().split()[0]) if Path(EPHEMERAL_RANGE).is_file() else 32768
    ports = {free_port() for _ in range(20)}
    assert all(1024 <= p < low for p in ports) and len(ports) > 1
    with socket.socket() as s:
        s.bind(("127.0.0.1", ports.pop()))
