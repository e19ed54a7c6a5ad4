"""Session fixtures that start real daemons: `slurm_cluster`, `mlflow_server`, `chromium`,
and `micro_pipeline` (the micro DAG run once through `snakemake --profile slurm all`).

Each daemon is started by pid in a scratch folder under pytest's tmp and stopped in the
fixture's teardown (also when a test fails). Skips happen only where the machine cannot
run them (not root, no apt-get, a package that cannot be installed), with the reason in
pytest's summary (-ra). Measured durations go to <infra-out>/timings.json.
"""

from __future__ import annotations

import gzip
import json
import os
import shutil
import subprocess
import sys
import threading
import time
import urllib.request
import warnings
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path

import numpy as np
import pytest
import yaml

from .. import shared_dag
from . import harness
from .. import paths

REPO = Path(__file__).resolve().parents[2]
BIN = Path(sys.executable).parent
MIRROR = paths.DICKENS
MICRO_RUNS = ("rope-s0", "gpa_dp_m8-s0")
LM_RUNS = ("base-s0", "gka_tokens-s0", "gka_flops-s0")  # the micro scale's LM track
CHROMIUM_ARGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
                 "--disable-component-update", "--no-first-run", "--disable-dev-shm-usage"]


def pytest_configure(config):
    config.addinivalue_line("markers", "infra: starts real daemons (SLURM, MLflow server, Chromium); "
                                       "select with -m infra")


# ============================================================================ helpers
def base_env(**extra) -> dict:
    """The environment of every command a test runs: the venv first on PATH (SLURM jobs
    inherit it: sbatch exports the environment), no system-metrics thread (seconds-long runs)."""
    env = dict(os.environ)
    env["PATH"] = f"{BIN}{os.pathsep}{env.get('PATH', '')}"
    env.pop("KERNATTN_SCALE", None)
    env["MLFLOW_ENABLE_SYSTEM_METRICS_LOGGING"] = "false"
    env.update({k: str(v) for k, v in extra.items()})
    return env


def make_workspace(root: Path, *, tracking: dict | None = None, mlflow_ui: str | None = None,
                   mirror: Path | None = None) -> Path:
    """A copy of the pipeline's top level (Snakefile, src link, params.yaml at micro scale); its
    data sets come from the catalogue, through the data mirror the environment names
    (`mirror`: the char corpus from that local file instead)."""
    assert MIRROR.is_file(), f"{MIRROR} is missing: set KERNATTN_DATA_MIRROR (tests/paths.py)"
    ws = root / "ws"
    ws.mkdir(parents=True)
    shutil.copy(REPO / "Snakefile", ws / "Snakefile")
    (ws / "src").symlink_to(REPO / "src")
    doc = yaml.safe_load((REPO / "params.yaml").read_text())
    doc["scale"] = "micro"
    if mirror is not None:
        doc["scales"]["micro"].setdefault("data", {})["mirror"] = str(mirror)
    doc["tracking"].update(tracking or {"enabled": False})
    doc["report"]["mlflow_ui"] = mlflow_ui
    (ws / "params.yaml").write_text(yaml.safe_dump(doc, sort_keys=False))
    return ws


def http_json(url: str, body: dict | None = None, timeout: float = 30) -> dict:
    data = None if body is None else json.dumps(body).encode()
    req = urllib.request.Request(url, data=data, headers={"Content-Type": "application/json"},
                                 method="GET" if body is None else "POST")
    with urllib.request.urlopen(req, timeout=timeout) as resp:
        return json.loads(resp.read().decode() or "{}")


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


@dataclass
class PipelineRun:
    ws: Path
    via: str                     # "slurm" or "local" (no cluster here: `why`)
    why: str
    cmd: list
    returncode: int
    output: str
    seconds: float
    env: dict = field(repr=False)
    failing: dict | None = None  # the failing-rule run started beside it (slurm only)


# ============================================================================ fixtures
@pytest.fixture(scope="session")
def infra_out(tmp_path_factory) -> Path:
    """Where screenshots and timings.json go (pytest's tmp; printed by the tests)."""
    return tmp_path_factory.mktemp("infra-out")


@pytest.fixture(scope="session")
def timings(infra_out):
    data: dict[str, float] = {}
    yield data
    (infra_out / "timings.json").write_text(json.dumps(data, indent=2) + "\n")


@pytest.fixture(scope="session")
def slurm_cluster(tmp_path_factory, timings):
    """munged + slurmctld + slurmd on 127.0.0.1 (harness.SlurmCluster), one partition
    `kernattn-test`; Debian's slurm-wlm and munge installed first if missing."""
    reason, seconds = harness.ensure_packages(harness.SLURM_PACKAGES, harness.SLURM_BINARIES)
    timings["apt_install_slurm_s"] = round(seconds, 1)
    if reason:
        pytest.skip(f"SLURM test cluster unavailable: {reason}")
    cluster = harness.SlurmCluster(tmp_path_factory.mktemp("slurm"))
    try:
        cluster.start()
        timings["slurm_cluster_start_s"] = round(cluster.timings["cluster_start_s"], 2)
        yield cluster
    finally:
        cluster.stop()


@pytest.fixture(scope="session")
def mlflow_server(tmp_path_factory, timings):
    """`kernattn mlflow-server --detach` on a free port of 127.0.0.1 with a scratch SQLite
    store; stopped with `kernattn mlflow-server --stop`, then by pid if anything is left."""
    _warn_if_another_worker_runs_daemons(tmp_path_factory)
    root = tmp_path_factory.mktemp("mlflow")
    port = harness.free_port()
    db, artifacts, pid_file = root / "mlflow.db", root / "artifacts", root / "server.pid"
    common = ["--backend-store-uri", f"sqlite:///{db}", "--pid-file", str(pid_file)]
    t0 = time.monotonic()
    pid = None
    try:
        proc = subprocess.run([str(BIN / "kernattn"), "mlflow-server", *common, "--artifact-root", str(artifacts),
                               "--port", str(port), "--log-file", str(root / "server.log"), "--detach",
                               "--timeout", "240"], cwd=root, env=base_env(), capture_output=True, text=True,
                              timeout=300)
        pid = harness_read_pid(pid_file)
        assert proc.returncode == 0, f"kernattn mlflow-server failed:\n{proc.stdout}\n{proc.stderr}"
        start_s = time.monotonic() - t0
        timings["mlflow_server_start_s"] = round(start_s, 1)
        yield MlflowServer(url=f"http://127.0.0.1:{port}", port=port, root=root, db=db, artifacts=artifacts,
                           pid_file=pid_file, pid=pid, start_s=start_s, log=root / "server.log")
    finally:
        pid = harness_read_pid(pid_file) or pid
        subprocess.run([str(BIN / "kernattn"), "mlflow-server", *common, "--stop"], cwd=root, env=base_env(),
                       capture_output=True, text=True, timeout=120)
        if pid:
            from kernattn.tracking_server import group_members, stop_group

            if group_members(pid):
                stop_group(pid, grace=5)


def _warn_if_another_worker_runs_daemons(tmp_path_factory) -> None:
    """Under xdist the infra tests belong on one worker (`--dist loadgroup`, as make test
    runs them). Spread over several they still pass -- every daemon is private to its
    worker -- but each worker starts its own set: say so."""
    worker = os.environ.get("PYTEST_XDIST_WORKER")
    if not worker:
        return
    shared = tmp_path_factory.getbasetemp().parent
    (shared / f"infra-daemons-{worker}").touch()
    others = sorted(p.name for p in shared.glob("infra-daemons-*") if p.name != f"infra-daemons-{worker}")
    if others:
        warnings.warn(f"infra daemons are being started on several xdist workers ({worker} and {others}): "
                      f"run pytest with --dist loadgroup (make test does) so that they start once", stacklevel=2)


def harness_read_pid(pid_file: Path) -> int | None:
    from kernattn.tracking_server import read_pid

    return read_pid(pid_file)


@pytest.fixture(scope="session")
def chromium(timings):
    """Headless Debian chromium driven by playwright (no `playwright install`)."""
    reason, seconds = harness.ensure_packages(harness.CHROMIUM_PACKAGES, ("chromium",))
    timings["apt_install_chromium_s"] = round(seconds, 1)
    if reason:
        pytest.skip(f"Chromium unavailable: {reason}")
    try:
        from playwright.sync_api import sync_playwright
    except ImportError:
        pytest.skip("the playwright package is not installed (pip install -e '.[test]')")
    import psutil

    me = psutil.Process()
    before = {p.pid for p in me.children(recursive=True)}
    t0 = time.monotonic()
    pw = sync_playwright().start()
    try:
        browser = pw.chromium.launch(executable_path=harness.which("chromium") or harness.CHROMIUM,
                                     args=CHROMIUM_ARGS, timeout=120_000)
        timings["chromium_launch_s"] = round(time.monotonic() - t0, 1)
        try:
            yield browser
        finally:
            browser.close()
    finally:
        pw.stop()
        # Whatever the browser or the driver left behind (they are our descendants): by pid.
        leftovers = [p for p in me.children(recursive=True) if p.pid not in before]
        for p in leftovers:
            try:
                p.terminate()
            except psutil.Error:
                pass
        _, alive = psutil.wait_procs(leftovers, timeout=5)
        for p in alive:
            try:
                p.kill()
            except psutil.Error:
                pass


def _install_test_profile(env: dict, *extra: str) -> subprocess.CompletedProcess:
    return subprocess.run([str(BIN / "kernattn"), "install-profile", "--source", str(REPO / "profiles" / "slurm-test"),
                           "--partition", harness.PARTITION, "--gpu-model", harness.GPU_MODEL, *extra],
                          env=env, capture_output=True, text=True, timeout=120)


class _Background:
    """A command run in the background (own process group), its output in a file, its end
    time noted by a thread; `wait()` returns (returncode, output, seconds)."""

    def __init__(self, cmd: list, cwd: Path, env: dict, log: Path, timeout: float, on_exit=None):
        self.cmd, self.log, self.timeout, self.on_exit = cmd, log, timeout, on_exit
        self._fh = open(log, "w")
        self.t0 = time.monotonic()
        self.popen = subprocess.Popen(cmd, cwd=cwd, env=env, stdout=self._fh, stderr=subprocess.STDOUT,
                                      stdin=subprocess.DEVNULL, start_new_session=True)
        self.seconds: float | None = None
        self._thread = threading.Thread(target=self._watch, daemon=True)
        self._thread.start()

    def _watch(self) -> None:
        self.popen.wait()
        self.seconds = time.monotonic() - self.t0
        if self.on_exit is not None:  # at once, before any test touches what the command left
            self._fh.flush()
            self.on_exit(self.popen.returncode, self.log.read_text(errors="replace"))

    def wait(self) -> tuple[int | None, str, float | None]:
        try:
            self.popen.wait(timeout=max(1.0, self.timeout - (time.monotonic() - self.t0)))
        except subprocess.TimeoutExpired:
            harness.stop_popen(self.popen)
        self._thread.join(timeout=60)  # on_exit copies a workspace of ~10 MB
        self._fh.flush()
        return self.popen.returncode, self.log.read_text(errors="replace"), self.seconds

    def stop(self) -> None:
        harness.stop_popen(self.popen)
        self._fh.close()


@pytest.fixture(scope="session")
def pipeline_launch(request, tmp_path_factory, timings):
    """Starts, in the background, the micro DAG training through the MLflow server:
    `snakemake --profile slurm all` on the test cluster (the test profile installed with
    `kernattn install-profile` into a scratch XDG_CONFIG_HOME, so the command is literally
    the README's), or `snakemake --cores 2 all` where no cluster can run (then only the SLURM
    tests skip). Beside it, on the same cluster, a workspace whose corpus rule fails.
    The MLflow tests request this fixture too, so they run while the DAG runs; whatever is
    still running at the end of the session is stopped by pid. The run is claimed first thing
    (the `micro_dag` fixture reuses it: tests/shared_dag.py) and the claim withdrawn if the
    MLflow server, the cluster or the launch fails."""
    root = tmp_path_factory.mktemp("pipeline")
    ws, shared = root / "ws", shared_dag.shared_root(tmp_path_factory)
    publishes = shared_dag.claim(shared, ws)
    try:
        mlflow_server = request.getfixturevalue("mlflow_server")
        try:
            cluster = request.getfixturevalue("slurm_cluster")
            why = ""
        except pytest.skip.Exception as exc:
            cluster, why = None, str(exc)
        tracking = {"enabled": True, "uri": mlflow_server.url, "experiment": "infra-pipeline-{scale}"}
        make_workspace(root, tracking=tracking, mlflow_ui=mlflow_server.url)
        publish = partial(_publish, shared, ws, "slurm" if cluster else "local") if publishes else None
        env, cmd, jobs = _launch(cluster, ws, base_env(XDG_CONFIG_HOME=root / "xdg"), tmp_path_factory, publish)
    except BaseException:
        if publishes:
            shared_dag.withdraw(shared, "the infra run did not start")
        raise
    try:
        yield {"jobs": jobs, "cluster": cluster, "why": why, "env": env, "cmd": cmd}
    finally:
        for job, _ in jobs.values():
            job.stop()


def _launch(cluster, ws: Path, env: dict, tmp_path_factory, publish) -> tuple[dict, list, dict]:
    """The main run in `ws` (and on a cluster the failing-rule run beside it), started."""
    jobs = {}
    if cluster is not None:
        env = cluster.env(env)
        installed = _install_test_profile(env)
        assert installed.returncode == 0, installed.stderr
        cmd = [str(BIN / "snakemake"), "--profile", "slurm", "all"]
        # the failing-rule run: a corpus mirror that does not exist, so `prepare` fails, submitted
        # together with an independent job (prepare_lm) that must not be left running. Only these
        # two targets: with `all`, the LM and vision branches, which do not read the corpus, went on
        # for about ten more SLURM jobs (~100 s of CPU) that the test does not look at.
        bad = make_workspace(tmp_path_factory.mktemp("failing"), mirror=ws.parent / "no-such-corpus.txt.gz")
        failing = [*cmd[:-1], "prepare", "prepare_lm", "--retries", "0"]
        jobs["failing"] = (_Background(failing, bad, env, bad.parent / "snakemake.out", 600), bad)
    else:
        cmd = [str(BIN / "snakemake"), "--cores", "2", "all"]
    on_exit = None if publish is None else partial(publish, cmd)
    jobs["main"] = (_Background(cmd, ws, env, ws.parent / "snakemake.out", 900, on_exit=on_exit), ws)
    return env, cmd, jobs


def _publish(shared: Path, ws: Path, via: str, cmd: list, returncode: int | None, output: str) -> None:
    shared_dag.publish(shared, ws, {"args": cmd, "returncode": returncode, "stdout": output, "stderr": output,
                                    "via": via})


@pytest.fixture(scope="session")
def micro_pipeline(pipeline_launch, timings) -> PipelineRun:
    """The micro DAG of `pipeline_launch`, waited for (at most 15 minutes)."""
    jobs, cluster = pipeline_launch["jobs"], pipeline_launch["cluster"]
    main, ws = jobs["main"]
    code, output, seconds = main.wait()
    timings["snakemake_profile_slurm_all_s" if cluster else "snakemake_local_all_s"] = round(seconds or -1, 1)
    failing = None
    if "failing" in jobs:
        job, bad = jobs["failing"]
        f_code, f_output, f_seconds = job.wait()
        timings["snakemake_failing_rule_s"] = round(f_seconds or -1, 1)
        failing = {"cmd": job.cmd, "returncode": f_code, "ws": bad, "output": f_output, "seconds": f_seconds}
    return PipelineRun(ws=ws, via="slurm" if cluster else "local", why=pipeline_launch["why"],
                       cmd=pipeline_launch["cmd"], returncode=code, output=output, seconds=seconds or -1,
                       env=pipeline_launch["env"], failing=failing)


@pytest.fixture(scope="session")
def corpus(tmp_path_factory) -> Path:
    """train.npy / val.npy / vocab.json / meta.json from the first 200k characters of the mirror."""
    out = tmp_path_factory.mktemp("corpus")
    with gzip.open(MIRROR, "rt", encoding="utf-8", errors="replace") as fh:
        text = fh.read(200_000)
    chars = sorted(set(text))
    lookup = {c: i for i, c in enumerate(chars)}
    ids = np.array([lookup[c] for c in text], dtype=np.uint8)
    cut = int(0.9 * len(ids))
    np.save(out / "train.npy", ids[:cut])
    np.save(out / "val.npy", ids[cut:])
    (out / "vocab.json").write_text(json.dumps({"chars": chars, "size": len(chars)}))
    (out / "meta.json").write_text(json.dumps({"chars": len(ids)}))
    return out
