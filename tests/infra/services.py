"""The session's shared services (tests/session.py): the SLURM test cluster, the MLflow server,
and the micro DAG trained once through both, exactly as the README tells a researcher to run it
on a cluster (`snakemake --profile slurm all`, tracked to an MLflow server). Where no cluster
can run here, the DAG trains with `snakemake --cores 2 all` and only the SLURM tests skip.

Each is built by the first test that needs it, in whichever worker that test runs, and used by
every worker until the session ends; the controller then stops the daemons (`STOPPERS`)."""

from __future__ import annotations

import json
import shutil
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path

import pytest
import yaml

from kernattn.io import atomic_write_json

from .. import session
from ..workspace import BIN, REPO, command_env, make_workspace
from . import harness

DAG_TIMEOUT_S = 900


def install_test_profile(env: dict, *extra: str) -> subprocess.CompletedProcess:
    """`kernattn install-profile` of the test cluster's profile into env's XDG_CONFIG_HOME."""
    return subprocess.run([str(BIN / "kernattn"), "install-profile", "--source", str(REPO / "profiles" / "slurm-test"),
                           "--partition", harness.PARTITION, "--gpu-model", harness.GPU_MODEL, *extra],
                          env=env, capture_output=True, text=True, timeout=120)


# ============================================================================ SLURM
def slurm(config) -> harness.SlurmCluster:
    """The session's SLURM test cluster (skips where this machine cannot run one)."""
    record = session.need(session.once(config, "slurm", lambda own: _start_slurm(config, own)),
                          "the SLURM test cluster")
    return harness.SlurmCluster.attach(record)


def _start_slurm(config, own: Path) -> dict:
    reason, _ = harness.ensure_packages(harness.SLURM_PACKAGES, harness.SLURM_BINARIES)
    if reason:
        pytest.skip(f"SLURM test cluster unavailable: {reason}")
    cluster = harness.SlurmCluster(own)
    # registered before its daemons start: a worker killed half-way leaves their pid files
    session.on_session_end(config, "slurm", {"root": str(own)})
    try:
        cluster.start()
    except BaseException:
        cluster.stop()
        raise
    return cluster.record()


# ============================================================================ MLflow
@dataclass
class MlflowServer:
    url: str
    port: int
    root: Path
    db: Path
    artifacts: Path
    pid_file: Path
    pid: int
    start_s: float
    log: Path

    def client(self):
        from mlflow import MlflowClient

        return MlflowClient(tracking_uri=self.url)


def mlflow(config) -> MlflowServer:
    """The session's `kernattn mlflow-server --detach` on a free port of 127.0.0.1, with a
    scratch SQLite store."""
    record = session.need(session.once(config, "mlflow", lambda own: _start_mlflow(config, own)),
                          "the MLflow server")
    return MlflowServer(**{k: Path(v) if k in ("root", "db", "artifacts", "pid_file", "log") else v
                           for k, v in record.items()})


def _mlflow_command(db: Path, pid_file: Path) -> list[str]:
    return [str(BIN / "kernattn"), "mlflow-server", "--backend-store-uri", f"sqlite:///{db}", "--pid-file",
            str(pid_file)]


def _start_mlflow(config, root: Path) -> dict:
    from kernattn.tracking.server import read_pid

    port = harness.free_port()
    db, artifacts, pid_file = root / "mlflow.db", root / "artifacts", root / "server.pid"
    session.on_session_end(config, "mlflow", {"db": str(db), "pid_file": str(pid_file), "root": str(root)})
    t0 = time.monotonic()
    proc = subprocess.run([*_mlflow_command(db, pid_file), "--artifact-root", str(artifacts), "--port", str(port),
                           "--log-file", str(root / "server.log"), "--detach", "--timeout", "240"],
                          cwd=root, env=command_env(), capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, f"kernattn mlflow-server failed:\n{proc.stdout}\n{proc.stderr}"
    return {"url": f"http://127.0.0.1:{port}", "port": port, "root": str(root), "db": str(db),
            "artifacts": str(artifacts), "pid_file": str(pid_file), "pid": read_pid(pid_file),
            "start_s": round(time.monotonic() - t0, 1), "log": str(root / "server.log")}


def _stop_mlflow(info: dict) -> None:
    """`kernattn mlflow-server --stop`, then by pid whatever is left of its process group."""
    from kernattn.tracking.server import group_members, read_pid, stop_group

    pid_file = Path(info["pid_file"])
    pid = read_pid(pid_file)
    subprocess.run([*_mlflow_command(Path(info["db"]), pid_file), "--stop"], cwd=info["root"], env=command_env(),
                   capture_output=True, text=True, timeout=120)
    if pid and group_members(pid):
        stop_group(pid, grace=5)


STOPPERS = {"slurm": harness.SlurmCluster.stop_in, "mlflow": _stop_mlflow}


# ============================================================================ the micro DAG
@dataclass
class DagRun:
    """The micro DAG's one training run of the session. `ws` is shared by every worker: read
    it, never write to it (`copy()` gives a workspace of one's own)."""
    ws: Path
    via: str            # "slurm", or "local" where no cluster can run here (`why`)
    why: str
    cmd: list
    returncode: int
    output: str
    seconds: float
    mlflow_url: str
    xdg: Path           # the XDG_CONFIG_HOME the test profile is installed in

    def env(self, cluster: harness.SlurmCluster | None = None) -> dict:
        env = command_env(XDG_CONFIG_HOME=self.xdg)
        return cluster.env(env) if cluster is not None else env

    def copy(self, dest: Path, *, tracking: str = "off") -> Path:
        """A copy of the workspace as the run left it (no Snakemake locks). What a test trains in
        it is tracked as `tracking` says (no stage reads the section, so Snakemake and DVC see
        nothing to rerun):

        - "off": not at all. Tracking is what the DAG itself, tests/infra and the tests that ask
          check; in a training process of the micro scale it is half the CPU time (MLflow's import
          and its SQLite store: 3.5 of 7 s), and the end-to-end job is CPU-bound;
        - "store": to the store params.yaml names (SQLite in the copy), never the session's server;
        - "server": as the DAG was, to the session's server."""
        if tracking not in ("off", "store", "server"):
            raise ValueError(f"copy(tracking={tracking!r}): one of 'off', 'store', 'server'")
        ws = dest / "ws"
        shutil.copytree(self.ws, ws, symlinks=True, ignore=_transient)
        if tracking != "server":
            doc = yaml.safe_load((ws / "params.yaml").read_text())
            doc["tracking"] = yaml.safe_load((REPO / "params.yaml").read_text())["tracking"]
            doc["tracking"]["enabled"] = tracking == "store"
            (ws / "params.yaml").write_text(yaml.safe_dump(doc, sort_keys=False))
        return ws


LISTING = "ws-listing.json"  # the shared workspace as the DAG left it: every test must leave it so


def listing(ws: Path) -> dict[str, list[int]]:
    """Every file of the workspace but Snakemake's own folder: path -> [size, mtime_ns]."""
    return {str(p.relative_to(ws)): [p.stat().st_size, p.stat().st_mtime_ns] for p in sorted(ws.rglob("*"))
            if p.is_file() and not p.is_symlink() and ".snakemake" not in p.relative_to(ws).parts}


def changed_shared_workspace(folder: Path) -> list[str]:
    """The files of the micro DAG's shared workspace that a test added, changed or removed
    (it is read-only: tests run commands in micro_dag.copy()). [] when it was never built."""
    before_path, ws = folder / "micro_dag" / LISTING, folder / "micro_dag" / "ws"
    if not before_path.is_file():
        return []
    before, now = json.loads(before_path.read_text()), listing(ws)
    return sorted(p for p in before.keys() | now.keys() if before.get(p) != now.get(p))


def _transient(folder: str, names: list[str]) -> set[str]:
    return {n for n in names if Path(folder).name == ".snakemake" and n in ("locks", "incomplete")}


def micro_dag(config) -> DagRun:
    record = session.need(session.once(config, "micro_dag", lambda own: _train_micro_dag(config, own)),
                          "the micro DAG")
    return DagRun(**{k: Path(v) if k in ("ws", "xdg") else v for k, v in record.items()})


def _train_micro_dag(config, root: Path) -> dict:
    """`snakemake --profile slurm all` (the test profile installed with `kernattn
    install-profile`, so the command is literally the README's) tracked to the MLflow server."""
    server = mlflow(config)
    try:
        cluster, why = slurm(config), ""
    except pytest.skip.Exception as exc:
        cluster, why = None, str(exc)
    ws = make_workspace(root / "ws", tracking={"enabled": True, "uri": server.url, "experiment": "infra-pipeline-{scale}"},
                        mlflow_ui=server.url)
    xdg = root / "xdg"
    env = command_env(XDG_CONFIG_HOME=xdg)
    if cluster is not None:
        env = cluster.env(env)
        installed = install_test_profile(env)
        assert installed.returncode == 0, installed.stderr
        cmd = [str(BIN / "snakemake"), "--profile", "slurm", "all"]
    else:
        cmd = [str(BIN / "snakemake"), "--cores", "2", "all"]
    t0 = time.monotonic()
    proc = subprocess.run(cmd, cwd=ws, env=env, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                          stderr=subprocess.STDOUT, text=True, timeout=DAG_TIMEOUT_S)
    atomic_write_json(root / LISTING, listing(ws))
    return {"ws": str(ws), "via": "slurm" if cluster is not None else "local", "why": why, "cmd": cmd,
            "returncode": proc.returncode, "output": proc.stdout, "seconds": round(time.monotonic() - t0, 1),
            "mlflow_url": server.url, "xdg": str(xdg)}
