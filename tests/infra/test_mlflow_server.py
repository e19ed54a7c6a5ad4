"""The MLflow server of `kernattn mlflow-server`, training through it, and `kernattn sync-mlflow`.
(Two processes into one shared SQLite store: tests/test_train.py.)

Every check counts what arrived in the store against the run folder's own record:
params == engine.mlflow_params(config.json); for every metric, the (step, value) pairs of
metrics.jsonl, in order, no more and no less; artifacts config.json, metrics.jsonl, final.json.
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
import yaml

from kernattn.tracking import client as tracking
from kernattn.engine import metric_dict, mlflow_params
from kernattn.tracking.server import group_members, health

from . import harness
from ..workspace import BIN, REPO, command_env

pytestmark = [pytest.mark.infra, pytest.mark.e2e]
RUNS = ("rope-s0", "gpa_dp_m8-s0")


def make_params(folder: Path, corpus: Path, tracking: dict) -> Path:
    """params.yaml at micro scale, every path under `folder`, tracking as given."""
    doc = yaml.safe_load((REPO / "params.yaml").read_text())
    doc["scale"] = "micro"
    micro = doc["scales"]["micro"]
    micro.setdefault("data", {})["out_dir"] = str(corpus)
    micro.setdefault("train", {})["out_dir"] = str(folder / "runs")
    micro["tracking"] = {"artifact_root": str(folder / "artifacts"), **tracking}
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / "params.yaml"
    path.write_text(yaml.safe_dump(doc))
    return path


def train_concurrently(params: Path, run_ids=RUNS, timeout: float = 300) -> list[str]:
    """`kernattn train` for each run at once, as separate processes; returns their output."""
    env = command_env(OMP_NUM_THREADS=1)
    procs = [subprocess.Popen([str(BIN / "kernattn"), "train", "--params", str(params), "--run", run_id,
                               "--no-progress"], env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                              text=True, start_new_session=True)
             for run_id in run_ids]
    outputs = []
    try:
        for p in procs:
            outputs.append(p.communicate(timeout=timeout)[0])
    finally:
        for p in procs:
            harness.stop_popen(p, grace=5)
    for p, out in zip(procs, outputs):
        assert p.returncode == 0, out
    return outputs


def assert_complete(client, run_dir: Path) -> str:
    """The MLflow run of final.json holds exactly what the run folder says; returns its id."""
    final = json.loads((run_dir / "final.json").read_text())
    config = json.loads((run_dir / "config.json").read_text())
    run = client.get_run(final["mlflow_run_id"])
    assert run.info.status == "FINISHED" and run.info.run_name == final["run_id"]
    assert run.data.tags["run_id"] == final["run_id"] and run.data.tags["fingerprint"] == final["fingerprint"]
    assert run.data.params == mlflow_params(config)
    lines = [json.loads(x) for x in (run_dir / "metrics.jsonl").read_text().splitlines()]
    expected: dict[str, list[tuple[int, float]]] = {}
    for rec in lines:
        for key, value in metric_dict(rec).items():
            expected.setdefault(key, []).append((rec["step"], value))
    model_metrics = {k for k in run.data.metrics if not k.startswith("system/")}
    assert model_metrics == set(expected), (model_metrics, set(expected))
    for key, points in expected.items():
        history = sorted((m.step, m.value) for m in client.get_metric_history(run.info.run_id, key))
        assert history == sorted(points), key
    assert {a.path for a in client.list_artifacts(run.info.run_id)} == {"config.json", "final.json", "metrics.jsonl"}
    return run.info.run_id


def test_server_answers_on_loopback_with_a_pid_file(mlflow_server):
    assert health("127.0.0.1", mlflow_server.port)
    assert int(mlflow_server.pid_file.read_text()) == mlflow_server.pid
    members = group_members(mlflow_server.pid)
    assert mlflow_server.pid in members and len(members) >= 2  # mlflow server + uvicorn
    listening = Path("/proc/net/tcp").read_text().splitlines()[1:]
    local = {line.split()[1] for line in listening if line.split()[3] == "0A"}  # LISTEN
    assert f"0100007F:{mlflow_server.port:04X}" in local  # 127.0.0.1 only
    assert f"00000000:{mlflow_server.port:04X}" not in local
    # a second server on the same port is refused in one line (exit status 2)
    again = subprocess.run([str(BIN / "kernattn"), "mlflow-server", "--backend-store-uri",
                            f"sqlite:///{mlflow_server.root}/other.db", "--port", str(mlflow_server.port),
                            "--pid-file", str(mlflow_server.root / "other.pid")],
                           env=command_env(), capture_output=True, text=True, timeout=60)
    assert again.returncode == 2 and "in use" in again.stderr and len(again.stderr.strip().splitlines()) == 1


def test_two_training_jobs_at_once_through_the_server_lose_nothing(mlflow_server, corpus, tmp_path):
    params = make_params(tmp_path, corpus, {"enabled": True, "uri": mlflow_server.url,
                                            "experiment": "infra-concurrent-{scale}"})
    for out in train_concurrently(params):
        assert "warning" not in out.lower(), out
    client = mlflow_server.client()
    ids = {assert_complete(client, tmp_path / "runs" / run_id) for run_id in RUNS}
    assert len(ids) == 2
    experiment = client.get_experiment_by_name("infra-concurrent-micro")
    assert {r.info.run_id for r in client.search_runs([experiment.experiment_id])} == ids
    assert experiment.tags[tracking.EXPERIMENT_KIND_TAG] == tracking.EXPERIMENT_KIND  # model training


def test_unreachable_server_training_goes_on_and_sync_uploads_later(mlflow_server, corpus, tmp_path):
    dead = f"http://127.0.0.1:{harness.free_port()}"
    params = make_params(tmp_path, corpus, {"enabled": True, "uri": dead, "experiment": "infra-sync-{scale}"})
    for out in train_concurrently(params):
        warnings = [line for line in out.splitlines() if "warning" in line.lower()]
        assert len(warnings) == 1 and "MLflow" in warnings[0] and dead in warnings[0], out
    for run_id in RUNS:
        final = json.loads((tmp_path / "runs" / run_id / "final.json").read_text())
        assert final["mlflow_run_id"] is None and final["steps"] == 6
        assert (tmp_path / "runs" / run_id / "metrics.jsonl").stat().st_size > 0

    # the server is up now (the params still name the dead one: --tracking-uri)
    sync = [str(BIN / "kernattn"), "sync-mlflow", "--params", str(params), "--tracking-uri", mlflow_server.url]
    first = subprocess.run(sync, env=command_env(), capture_output=True, text=True, timeout=300)
    assert first.returncode == 0, first.stdout + first.stderr
    assert first.stdout.count(": uploaded ") == len(RUNS), first.stdout
    client = mlflow_server.client()
    finals = {}
    for run_id in RUNS:
        run_dir = tmp_path / "runs" / run_id
        assert_complete(client, run_dir)
        finals[run_id] = (run_dir / "final.json").read_bytes(), (run_dir / "final.json").stat().st_mtime_ns
        final = json.loads(finals[run_id][0])
        assert final["tracking_uri"] == mlflow_server.url
        assert final["mlflow_experiment_id"] == client.get_run(final["mlflow_run_id"]).info.experiment_id
        (tmp_path / "downloads" / run_id).mkdir(parents=True)
        local = client.download_artifacts(final["mlflow_run_id"], "final.json", str(tmp_path / "downloads" / run_id))
        assert json.loads(Path(local).read_text()) == final  # the artifact is the updated final.json
    # idempotent: nothing uploaded, nothing rewritten
    second = subprocess.run(sync, env=command_env(), capture_output=True, text=True, timeout=300)
    assert second.returncode == 0, second.stdout + second.stderr
    assert second.stdout.count("complete in the store") == len(RUNS), second.stdout
    for run_id in RUNS:
        path = tmp_path / "runs" / run_id / "final.json"
        assert (path.read_bytes(), path.stat().st_mtime_ns) == finals[run_id]
    experiment = client.get_experiment_by_name("infra-sync-micro")
    assert len(client.search_runs([experiment.experiment_id])) == len(RUNS)
    assert experiment.tags[tracking.EXPERIMENT_KIND_TAG] == tracking.EXPERIMENT_KIND  # made by sync-mlflow
    # a sync killed after creating a run but before writing final.json: found again, not duplicated
    path = tmp_path / "runs" / RUNS[0] / "final.json"
    uploaded_id = json.loads(path.read_text())["mlflow_run_id"]
    path.write_text(json.dumps({**json.loads(path.read_text()), "mlflow_run_id": None}, indent=2))
    third = subprocess.run(sync, env=command_env(), capture_output=True, text=True, timeout=300)
    assert third.returncode == 0 and "resumed an interrupted sync" in third.stdout, third.stdout + third.stderr
    assert json.loads(path.read_text())["mlflow_run_id"] == uploaded_id
    assert len(client.search_runs([experiment.experiment_id])) == len(RUNS)


def test_sync_completes_a_run_the_server_lost_half_of(mlflow_server, corpus, tmp_path):
    """A run whose server went away mid-training: its MLflow run exists, RUNNING, with part
    of the metrics and no artifacts. sync-mlflow fills in the rest, without duplicates."""
    params = make_params(tmp_path, corpus, {"enabled": False, "uri": mlflow_server.url,
                                            "experiment": "infra-partial-{scale}"})
    train_concurrently(params, run_ids=("rope-s0",))
    run_dir = tmp_path / "runs" / "rope-s0"
    final = json.loads((run_dir / "final.json").read_text())
    config = json.loads((run_dir / "config.json").read_text())
    client = mlflow_server.client()
    experiment_id = client.create_experiment("infra-partial-micro")
    partial = client.create_run(experiment_id, run_name="rope-s0",
                                tags={"run_id": "rope-s0", "fingerprint": final["fingerprint"]})
    from mlflow.entities import Metric, Param

    client.log_batch(partial.info.run_id, params=[Param(k, v) for k, v in list(mlflow_params(config).items())[:10]])
    first = json.loads((run_dir / "metrics.jsonl").read_text().splitlines()[0])
    client.log_batch(partial.info.run_id, metrics=[Metric(k, v, 0, first["step"]) for k, v in metric_dict(first).items()])
    (run_dir / "final.json").write_text(json.dumps({**final, "mlflow_run_id": partial.info.run_id,
                                                    "mlflow_experiment_id": experiment_id,
                                                    "tracking_uri": mlflow_server.url}, indent=2))
    mtime = (run_dir / "final.json").stat().st_mtime_ns

    proc = subprocess.run([str(BIN / "kernattn"), "sync-mlflow", "--params", str(params), "--tracking-uri",
                           mlflow_server.url], env=command_env(), capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert f"completed {partial.info.run_id}" in proc.stdout, proc.stdout
    assert assert_complete(client, run_dir) == partial.info.run_id
    assert (run_dir / "final.json").stat().st_mtime_ns == mtime  # same id: final.json untouched
    assert len(client.search_runs([experiment_id])) == 1


def test_runs_url_opens_the_runs_table_in_the_ui(mlflow_server, chromium, tmp_path, monkeypatch):
    """tracking.experiment_runs_url in a fresh browser (nothing remembered): the experiment's
    runs in the UI's Model training view, not its GenAI overview ("No data")."""
    from types import SimpleNamespace

    monkeypatch.setenv("MLFLOW_ENABLE_SYSTEM_METRICS_LOGGING", "false")
    tracker = tracking.Tracker(SimpleNamespace(uri=mlflow_server.url, enabled=True, experiment="infra-ui",
                                               artifact_root=str(tmp_path)))
    assert tracker.start(name="ui-probe-s0", tags={}, params={}) is not None
    tracker.end("FINISHED")
    context = chromium.new_context()
    try:
        page = context.new_page()
        page.goto(tracking.experiment_runs_url(mlflow_server.url, tracker.experiment_id), wait_until="load",
                  timeout=60_000)
        page.get_by_text("ui-probe-s0").first.wait_for(timeout=60_000)  # the run's row in the table
        assert "/runs" in page.url and "workflowType=machine_learning" in page.url
        assert page.get_by_text("Model registry").count() > 0  # the Model training menu
    finally:
        context.close()


def test_sync_without_a_server_is_one_line_error(corpus, tmp_path):
    params = make_params(tmp_path, corpus, {"enabled": True, "uri": f"http://127.0.0.1:{harness.free_port()}"})
    (tmp_path / "runs" / "rope-s0").mkdir(parents=True)
    (tmp_path / "runs" / "rope-s0" / "final.json").write_text("{}")
    proc = subprocess.run([str(BIN / "kernattn"), "sync-mlflow", "--params", str(params)], env=command_env(),
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 2 and "cannot connect" in proc.stderr, proc.stderr
    assert len(proc.stderr.strip().splitlines()) == 1


def test_foreground_server_stops_its_whole_process_group_on_sigterm(tmp_path, timings):
    port = harness.free_port()
    pid_file, log = tmp_path / "server.pid", tmp_path / "out.log"
    with open(log, "w") as out:
        proc = subprocess.Popen([sys.executable, "-m", "kernattn.cli", "mlflow-server", "--backend-store-uri",
                                 f"sqlite:///{tmp_path}/mlflow.db", "--artifact-root", str(tmp_path / "artifacts"),
                                 "--port", str(port), "--pid-file", str(pid_file), "--timeout", "240"],
                                env=command_env(), stdout=out, stderr=subprocess.STDOUT, start_new_session=True)
    server_pid = None
    try:
        t0 = time.monotonic()
        # ready when the command says so (it has seen /health answer)
        harness.wait_for(lambda: proc.poll() is not None or "MLflow server at" in log.read_text(), 240, 0.5,
                         "the server to answer")
        assert proc.poll() is None, log.read_text()
        timings["mlflow_server_foreground_start_s"] = round(time.monotonic() - t0, 1)
        assert health("127.0.0.1", port)
        server_pid = int(pid_file.read_text())
        assert len(group_members(server_pid)) >= 2
        os.kill(proc.pid, signal.SIGTERM)
        assert proc.wait(timeout=60) == 0, log.read_text()
        assert not group_members(server_pid) and not pid_file.exists()
        assert not health("127.0.0.1", port)
    finally:
        harness.stop_popen(proc, grace=20)
        if server_pid and group_members(server_pid):
            from kernattn.tracking.server import stop_group

            stop_group(server_pid, grace=5)
