"""Run a local MLflow tracking server on params.yaml's store (SQLite + local artifacts).

    kernattn mlflow-server [--params P] [--port 5000] [--host 127.0.0.1]   # foreground (Ctrl-C stops it)
    kernattn mlflow-server --detach                                        # returns once it answers
    kernattn mlflow-server --stop                                          # stops a detached one

Starts `mlflow server --backend-store-uri sqlite:///<db> --default-artifact-root <dir>
--host 127.0.0.1 --port <port> --workers 1` with the store of params.yaml's `tracking`
section (tracking.uri when it is a sqlite:/// URI, else results/mlflow/mlflow.db;
tracking.artifact_root), waits until GET /health answers, and writes the server's pid to a
pid file (default: mlflow-server.pid beside the database; its log: mlflow-server.log). The
server runs in a session of its own, so its pid is also its process group, which holds its
children (uvicorn); stopping it (Ctrl-C / SIGTERM in the foreground, `--stop` when detached)
signals the whole group: SIGTERM, then SIGKILL to whatever is left after --grace seconds.

The port defaults to the one of tracking.uri when that is an http://127.0.0.1:PORT URI,
else report.mlflow_ui's (the report links there), else 5000; --port 0 picks a free one.
Training logs through the server when params.yaml says `tracking.uri: http://127.0.0.1:PORT`.
To only browse the store without a server process of ours:
`mlflow ui --backend-store-uri sqlite:///results/mlflow/mlflow.db --port 5000`.
The server's job runner (MLflow's GenAI jobs, 8 more processes) is off unless
MLFLOW_SERVER_ENABLE_JOB_EXECUTION is set.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import random
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path
from urllib.parse import urlparse

from ..io import atomic_write_text


DEFAULT_PORT = 5000
DEFAULT_DB = "results/mlflow/mlflow.db"
LOCAL_HOSTS = ("127.0.0.1", "localhost", "::1")


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--host", default="127.0.0.1", help="interface to bind (default %(default)s: this machine only)")
    parser.add_argument("--allowed-hosts", default=None, metavar="HOSTS",
                        help="passed to mlflow server: Host headers it answers (against DNS rebinding) when "
                             "it is reached under a name, e.g. behind a reverse proxy")
    parser.add_argument("--cors-allowed-origins", default=None, metavar="ORIGINS",
                        help="passed to mlflow server: web origins allowed to call it")
    parser.add_argument("--port", type=int, default=None,
                        help="port (default: tracking.uri's, else report.mlflow_ui's, else 5000; 0: any free port)")
    parser.add_argument("--backend-store-uri", default=None,
                        help="sqlite:///PATH store (default: tracking.uri if sqlite, else sqlite:///" + DEFAULT_DB + ")")
    parser.add_argument("--artifact-root", default=None, help="artifact folder (default: tracking.artifact_root)")
    parser.add_argument("--pid-file", default=None, help="pid file (default: mlflow-server.pid beside the database)")
    parser.add_argument("--log-file", default=None, help="server log when detached (default: mlflow-server.log beside the database)")
    parser.add_argument("--detach", action="store_true", help="return once the server answers; stop it with --stop")
    parser.add_argument("--stop", action="store_true", help="stop the server of the pid file (its whole process group)")
    parser.add_argument("--timeout", type=float, default=180.0, help="seconds to wait for /health (default %(default)s)")
    parser.add_argument("--grace", type=float, default=15.0, help="seconds between SIGTERM and SIGKILL (default %(default)s)")


# ----------------------------------------------------------------------------- settings
def _sqlite_file(uri: str) -> Path | None:
    return Path(uri[len("sqlite:///"):]) if uri.startswith("sqlite:///") else None


def _local_port(url: str | None) -> int | None:
    if not url:
        return None
    parsed = urlparse(url)
    if parsed.scheme in ("http", "https") and parsed.hostname in LOCAL_HOSTS:
        return parsed.port or (443 if parsed.scheme == "https" else 80)
    return None


EPHEMERAL_RANGE = "/proc/sys/net/ipv4/ip_local_port_range"


def free_port(host: str = "127.0.0.1") -> int:
    """A port nothing listens on, for a listener another process opens next (an MLflow server,
    rank 0's rendezvous store). Drawn below the kernel's ephemeral range: a port the kernel hands
    out (bind to port 0) can be taken by any outgoing connection between this check and that
    bind, which failed a 2-rank test in CI with EADDRINUSE; one below the range only by another
    listener drawing the same of some 16,000 ports."""
    host = host if host not in ("0.0.0.0", "") else "127.0.0.1"
    try:
        low = int(Path(EPHEMERAL_RANGE).read_text().split()[0])
    except (OSError, ValueError, IndexError):
        low = 32768  # Linux's default
    draw = random.SystemRandom()
    for _ in range(200):
        port = draw.randrange(max(1024, low - 16384), low)
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
            try:
                s.bind((host, port))
            except OSError:
                continue
            return port
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:  # every draw taken: the kernel's choice
        s.bind((host, 0))
        return s.getsockname()[1]


def probe_host(host: str) -> str:
    return "127.0.0.1" if host in ("0.0.0.0", "", "::") else host


def port_open(host: str, port: int, timeout: float = 1.0) -> bool:
    try:
        with socket.create_connection((probe_host(host), port), timeout=timeout):
            return True
    except OSError:
        return False


def settings(args: argparse.Namespace) -> dict:
    """db (absolute Path), artifact_root, host, port, pid_file, log_file from args + params."""
    from ..errors import UsageError
    from ..config import TrackingParams, params_from_args

    params = None
    if args.params and (Path(args.params).is_file() or args.params != "params.yaml"):
        params = params_from_args(args)  # a ParamsError is one line (cli.main)
    tracking = params.tracking if params else TrackingParams()
    uri = args.backend_store_uri or (tracking.uri if tracking.uri.startswith("sqlite:///") else f"sqlite:///{DEFAULT_DB}")
    db = _sqlite_file(uri)
    if db is None:
        raise UsageError(f"--backend-store-uri must be sqlite:///PATH, got {uri!r}")
    db = db.resolve()
    artifact_root = Path(args.artifact_root or tracking.artifact_root).resolve()
    port = args.port
    if port is None:
        port = (_local_port(tracking.uri) or _local_port(params.report.mlflow_ui if params else None)
                or DEFAULT_PORT)
    if port == 0:
        port = free_port(args.host)
    if not 0 < port < 65536:
        raise UsageError(f"--port must be between 1 and 65535 (or 0: any free port), got {port}")
    pid_file = Path(args.pid_file) if args.pid_file else db.with_name("mlflow-server.pid")
    log_file = Path(args.log_file) if args.log_file else db.with_name("mlflow-server.log")
    return {"db": db, "artifact_root": artifact_root, "host": args.host, "port": port,
            "allowed_hosts": getattr(args, "allowed_hosts", None),
            "cors_allowed_origins": getattr(args, "cors_allowed_origins", None),
            "pid_file": pid_file.resolve(), "log_file": log_file.resolve()}


# ----------------------------------------------------------------------------- processes
def _proc_stat(pid: int) -> tuple[str, int] | None:
    """(state, pgrp) of a live process from /proc, None if it is gone (or a zombie)."""
    try:
        text = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    fields = text[text.rindex(")") + 2:].split()
    state, pgrp = fields[0], int(fields[2])
    return None if state in ("Z", "X") else (state, pgrp)


def group_members(pgid: int) -> list[int]:
    """Live (non-zombie) processes whose process group is `pgid`."""
    members = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            st = _proc_stat(int(entry.name))
            if st is not None and st[1] == pgid:
                members.append(int(entry.name))
    return members


def _is_mlflow_server(pid: int) -> bool:
    try:
        cmd = Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
    except OSError:
        return False
    return "mlflow" in cmd and "server" in cmd


def read_pid(pid_file: Path) -> int | None:
    try:
        return int(pid_file.read_text().split()[0])
    except (OSError, ValueError, IndexError):
        return None


def stop_group(pgid: int, grace: float = 15.0, popen: subprocess.Popen | None = None) -> None:
    """SIGTERM to the process group, wait until every member is gone (at most `grace` s),
    then SIGKILL to what is left."""
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pgid, signal.SIGTERM)
    deadline = time.monotonic() + grace
    while time.monotonic() < deadline:
        if popen is not None:
            popen.poll()  # reap our child, else it lingers as a zombie
        if not group_members(pgid):
            break
        time.sleep(0.2)
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pgid, signal.SIGKILL)
    if popen is not None:
        with contextlib.suppress(subprocess.TimeoutExpired):
            popen.wait(timeout=5)


def health(host: str, port: int, timeout: float = 2.0) -> bool:
    try:
        with urllib.request.urlopen(f"http://{probe_host(host)}:{port}/health", timeout=timeout) as resp:
            return resp.status == 200
    except (urllib.error.URLError, OSError, ValueError):
        return False


def _prepare_store(db: Path) -> None:
    """Create a fresh store's schema under kernattn.tracking's file lock, so that training
    processes writing the same SQLite file directly never race the server on it."""
    from .client import file_lock

    db.parent.mkdir(parents=True, exist_ok=True)
    if db.is_file() and db.stat().st_size > 0:
        return
    with file_lock(db.with_name(db.name + ".lock")):
        if db.is_file() and db.stat().st_size > 0:
            return
        from mlflow.tracking import MlflowClient

        MlflowClient(tracking_uri=f"sqlite:///{db}").search_experiments(max_results=1)


def server_command(cfg: dict) -> list[str]:
    return [sys.executable, "-m", "mlflow", "server",
            "--backend-store-uri", f"sqlite:///{cfg['db']}",
            "--default-artifact-root", str(cfg["artifact_root"]),
            "--host", cfg["host"], "--port", str(cfg["port"]), "--workers", "1",
            *(["--allowed-hosts", cfg["allowed_hosts"]] if cfg.get("allowed_hosts") else []),
            *(["--cors-allowed-origins", cfg["cors_allowed_origins"]] if cfg.get("cors_allowed_origins") else [])]


def start(cfg: dict, *, detach: bool, timeout: float, grace: float) -> subprocess.Popen:
    """Start the server (own session), write the pid file, wait for /health. Raises
    RuntimeError (after stopping what it started) if it exits or does not answer in time."""
    cfg["artifact_root"].mkdir(parents=True, exist_ok=True)
    cfg["pid_file"].parent.mkdir(parents=True, exist_ok=True)
    _prepare_store(cfg["db"])
    env = dict(os.environ)
    env.setdefault("MLFLOW_SERVER_ENABLE_JOB_EXECUTION", "false")
    if detach:
        cfg["log_file"].parent.mkdir(parents=True, exist_ok=True)
        out = open(cfg["log_file"], "ab")
    else:
        out = None  # the terminal
    try:
        popen = subprocess.Popen(server_command(cfg), stdin=subprocess.DEVNULL, stdout=out,
                                 stderr=subprocess.STDOUT if out else None, env=env, start_new_session=True)
    finally:
        if out is not None:
            out.close()
    try:
        atomic_write_text(cfg["pid_file"], f"{popen.pid}\n")
        deadline = time.monotonic() + timeout
        while not health(cfg["host"], cfg["port"]):
            code = popen.poll()
            if code is not None or time.monotonic() > deadline:
                why = (f"exited with status {code}" if code is not None
                       else f"did not answer /health within {timeout:.0f} s")
                tail = ""
                if detach and cfg["log_file"].is_file():
                    tail = " | ".join(cfg["log_file"].read_text(errors="replace").strip().splitlines()[-5:])[-800:]
                raise RuntimeError(f"the MLflow server {why}" + (f"; {cfg['log_file']}: {tail}" if tail else ""))
            time.sleep(0.5)
    except BaseException:  # RuntimeError above, or Ctrl-C / SIGTERM while waiting: stop what we started
        stop_group(popen.pid, grace, popen)
        if read_pid(cfg["pid_file"]) == popen.pid:
            with contextlib.suppress(OSError):
                cfg["pid_file"].unlink()
        raise
    return popen


def stop_from_pid_file(pid_file: Path, grace: float) -> str:
    pid = read_pid(pid_file)
    if pid is None:
        return f"no MLflow server to stop ({pid_file} missing or empty)"
    if _proc_stat(pid) is None or not _is_mlflow_server(pid):
        with contextlib.suppress(OSError):
            pid_file.unlink()
        return f"no MLflow server running (stale {pid_file}: pid {pid}); removed it"
    stop_group(pid, grace)
    with contextlib.suppress(OSError):
        pid_file.unlink()
    return f"stopped the MLflow server (process group {pid})"


# ----------------------------------------------------------------------------- stage
def _url_to_serve(cfg: dict) -> str:
    """The URL the server will answer at; a UsageError when a server of ours already runs or
    the port is taken, and a warning when the host is reachable from other machines."""
    from ..errors import UsageError

    old = read_pid(cfg["pid_file"])
    if old is not None and _proc_stat(old) is not None and _is_mlflow_server(old):
        raise UsageError(f"an MLflow server is already running (pid {old}, {cfg['pid_file']}); "
                         f"stop it with `kernattn mlflow-server --stop`")
    if port_open(cfg["host"], cfg["port"]):
        raise UsageError(f"port {cfg['port']} on {probe_host(cfg['host'])} is in use; pick another with --port")
    if cfg["host"] not in LOCAL_HOSTS:
        print(f"kernattn mlflow-server: warning: binding {cfg['host']}: anyone who can reach port {cfg['port']} "
              f"can read and change every run (MLflow has no login here); prefer an SSH tunnel "
              f"(docs/reliability.md)", file=sys.stderr)
    return f"http://{probe_host(cfg['host'])}:{cfg['port']}"


def run(args: argparse.Namespace) -> int:
    cfg = settings(args)
    if args.stop:
        print(stop_from_pid_file(cfg["pid_file"], args.grace))
        return 0
    url = _url_to_serve(cfg)

    # Ctrl-C, SIGTERM, SIGHUP -> KeyboardInterrupt from here on, so that the server is stopped
    # whenever we are (while it starts too); a detached server is on its own once it answers.
    def _stop(signum, frame):
        raise KeyboardInterrupt

    previous = {s: signal.getsignal(s) for s in (signal.SIGTERM, signal.SIGHUP, signal.SIGINT)}
    for s in (signal.SIGTERM, signal.SIGHUP):
        signal.signal(s, _stop)
    popen = None
    code = 0
    try:
        t0 = time.monotonic()
        try:
            popen = start(cfg, detach=args.detach, timeout=args.timeout, grace=args.grace)
        except RuntimeError as exc:
            print(f"kernattn mlflow-server: error: {exc}", file=sys.stderr)
            return 1
        print(f"MLflow server at {url} (pid {popen.pid}, up in {time.monotonic() - t0:.1f} s): "
              f"store sqlite:///{cfg['db']}, artifacts {cfg['artifact_root']}, pid file {cfg['pid_file']}",
              flush=True)
        if args.detach:
            print(f"log {cfg['log_file']}; stop it with `kernattn mlflow-server --stop"
                  f"{' --pid-file ' + str(cfg['pid_file']) if args.pid_file else ''}`", flush=True)
            return 0
        try:  # foreground: until the server exits or we are told to stop
            code = popen.wait()
            print(f"kernattn mlflow-server: the server exited with status {code}", file=sys.stderr)
        except KeyboardInterrupt:
            print("kernattn mlflow-server: stopping", file=sys.stderr, flush=True)
        finally:
            for s in previous:  # a second Ctrl-C must not cut the clean-up short
                signal.signal(s, signal.SIG_IGN)
            stop_group(popen.pid, args.grace, popen)
            if read_pid(cfg["pid_file"]) == popen.pid:
                with contextlib.suppress(OSError):
                    cfg["pid_file"].unlink()
    except KeyboardInterrupt:  # while starting: start() has stopped the server already
        print("kernattn mlflow-server: interrupted while starting; stopped", file=sys.stderr)
        return 130
    finally:
        for s, handler in previous.items():
            signal.signal(s, handler)
    return 0 if code in (0, -signal.SIGTERM, -signal.SIGINT) else 1
