"""Daemons for the infrastructure tests: Debian packages, a one-node SLURM cluster, processes.

Everything here is started by pid (as a direct child, in its own session so that the whole
process group can be signalled) and stopped by pid: `Proc.stop()` sends SIGTERM to the
group, waits, then SIGKILL. Nothing is looked up or killed by name.

The cluster (`SlurmCluster`) is private to one scratch folder: its own munge key and socket,
its own slurm.conf (clients find it through SLURM_CONF), its own ports chosen free at start,
state, spool, logs and pid files. Nothing under /etc or /run is written, so it cannot clash
with a system SLURM or with a second test session on the same machine.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import socket
import stat
import subprocess
import tempfile
import time
from pathlib import Path

APT_LOCK = Path("/tmp/kernattn-infra-apt.lock")
SLURM_PACKAGES = ("slurm-wlm", "munge")
SLURM_BINARIES = ("slurmctld", "slurmd", "munged", "sbatch", "squeue", "sinfo", "srun", "scancel")
CHROMIUM_PACKAGES = ("chromium",)
CHROMIUM = "/usr/bin/chromium"
SBIN = ("/usr/sbin", "/sbin", "/usr/bin", "/bin")

# The test cluster: one node declared the size of an 8-GPU node (128 CPUs, 1 TiB, eight
# "testgpu" GPUs as a counted GRES) so the shipped profile's requests (train: 1 GPU, 8 CPUs,
# 32 GB; train_vision: 15 CPUs, 64 GB) are scheduled as written, and every job of the micro DAG
# that is ready runs at once, as on such a node (with two GPUs its fourteen GPU jobs queued two
# at a time, and each round waited for the executor's next status check).
# SlurmdParameters=config_overrides lets the declaration exceed the machine; nothing is
# enforced (no cgroups).
PARTITION = "kernattn-test"
GPU_MODEL = "testgpu"
NODE_CPUS = 128
NODE_MEM_MB = 1048576
NODE_GPUS = 8


def which(name: str) -> str | None:
    """shutil.which, also looking in the sbin folders (root's PATH may lack them)."""
    found = shutil.which(name)
    if found:
        return found
    for folder in SBIN:
        candidate = Path(folder) / name
        if candidate.is_file() and os.access(candidate, os.X_OK):
            return str(candidate)
    return None


def free_port() -> int:
    """A TCP port on 127.0.0.1 that is free now, below the kernel's ephemeral range (an outgoing
    connection cannot take it before its daemon binds it: kernattn.tracking.server.free_port)."""
    from kernattn.tracking.server import free_port as below_ephemeral  # no torch: the controller's import

    return below_ephemeral()


# ============================================================================ packages
def can_install() -> str | None:
    """None if this process may install Debian packages, else why not."""
    if os.geteuid() != 0:
        return "not root (the harness installs Debian packages and runs daemons as root)"
    if which("apt-get") is None:
        return "no apt-get (not a Debian-like machine)"
    return None


def ensure_packages(packages: tuple[str, ...], binaries: tuple[str, ...], timeout: float = 600) -> tuple[str | None, float]:
    """Install the Debian `packages` unless every one of `binaries` exists already.

    Returns (None, seconds spent) on success, or (reason, seconds) when they cannot be had.
    apt runs under a file lock (two pytest workers never run dpkg at once), non-interactive,
    `apt-get update` first only when the package is unknown to apt's lists."""
    start = time.monotonic()
    if all(which(b) for b in binaries):
        return None, 0.0
    reason = can_install()
    if reason:
        return f"{' '.join(packages)} not installed and cannot be: {reason}", 0.0
    env = {**os.environ, "DEBIAN_FRONTEND": "noninteractive", "NEEDRESTART_MODE": "a"}
    from kernattn.tracking.client import file_lock  # stdlib only: the controller's import

    with file_lock(APT_LOCK):
        if all(which(b) for b in binaries):  # installed by another worker meanwhile
            return None, time.monotonic() - start
        log = []
        for attempt in ("install", "update+install"):
            if attempt == "update+install":
                up = subprocess.run(["apt-get", "update", "-q"], env=env, capture_output=True, text=True,
                                    timeout=timeout)
                log.append(up.stdout[-1500:] + up.stderr[-1500:])
            proc = subprocess.run(["apt-get", "install", "-y", "-q", *packages], env=env, capture_output=True,
                                  text=True, timeout=timeout)
            log.append(proc.stdout[-1500:] + proc.stderr[-1500:])
            if proc.returncode == 0 and all(which(b) for b in binaries):
                return None, time.monotonic() - start
        tail = " | ".join(" ".join(x.split()) for x in log)[-600:]
        return f"apt-get install {' '.join(packages)} failed: {tail}", time.monotonic() - start


# ============================================================================ processes
def stop_popen(popen: subprocess.Popen, grace: float = 10.0) -> None:
    """SIGTERM to the process group of `popen` (started with start_new_session=True), wait
    `grace` s, then SIGKILL to the group; reaps the child."""
    if popen.poll() is None:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(popen.pid, signal.SIGTERM)
        with contextlib.suppress(subprocess.TimeoutExpired):
            popen.wait(timeout=grace)
    # the group may hold children that outlived the leader
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(popen.pid, signal.SIGKILL)
    with contextlib.suppress(subprocess.TimeoutExpired):
        popen.wait(timeout=5)


class Proc:
    """A daemon run in the foreground as our child, in its own session (pgid == pid)."""

    def __init__(self, name: str, cmd: list[str], log: Path, env: dict | None = None, cwd: Path | None = None):
        self.name, self.cmd, self.log = name, cmd, log
        self._fh = open(log, "ab")
        self.popen = subprocess.Popen(cmd, stdout=self._fh, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                      env=env, cwd=cwd, start_new_session=True)
        self.pid = self.popen.pid

    def alive(self) -> bool:
        return self.popen.poll() is None

    def tail(self, n: int = 2000) -> str:
        try:
            return self.log.read_text(errors="replace")[-n:]
        except OSError:
            return ""

    def stop(self, grace: float = 10.0) -> None:
        """SIGTERM to the process group, wait `grace` s, then SIGKILL; reaps the child."""
        try:
            stop_popen(self.popen, grace)
        finally:
            self._fh.close()


def wait_for(predicate, timeout: float, interval: float = 0.2, what: str = "condition"):
    """Poll `predicate()` until truthy (returned) or `timeout` s pass (TimeoutError)."""
    deadline = time.monotonic() + timeout
    while True:
        value = predicate()
        if value:
            return value
        if time.monotonic() > deadline:
            raise TimeoutError(f"timed out after {timeout:.0f} s waiting for {what}")
        time.sleep(interval)


# ============================================================================ SLURM
class SlurmCluster:
    """munged + slurmctld + slurmd on 127.0.0.1, everything under `root`.

        cluster = SlurmCluster(root); cluster.start()
        subprocess.run(["sbatch", ...], env=cluster.env())
        cluster.stop()          # always: stops every daemon it started, by pid
    """

    def __init__(self, root: Path):
        self.root = Path(root)
        self.procs: list[Proc] = []
        self.node = socket.gethostname().split(".")[0]
        self.conf = self.root / "etc" / "slurm.conf"
        self.timings: dict[str, float] = {}

    def env(self, base: dict | None = None) -> dict:
        """`base` (default os.environ) for SLURM clients: SLURM_CONF set, the srun shim first on PATH."""
        env = dict(os.environ if base is None else base)
        env["SLURM_CONF"] = str(self.conf)
        env["PATH"] = f"{self.root / 'bin'}{os.pathsep}{env.get('PATH', '')}"
        for key in [k for k in env if k.startswith(("SLURM_", "SBATCH_", "SRUN_", "SALLOC_")) and k != "SLURM_CONF"]:
            env.pop(key)  # a test run inside a SLURM job must not leak its job's settings
        return env

    def _write_config(self) -> None:
        r = self.root
        for sub in ("etc", "state", "spool", "log", "run", "munge"):
            (r / sub).mkdir(parents=True, exist_ok=True)
        key = r / "munge" / "munge.key"
        key.write_bytes(os.urandom(1024))
        key.chmod(0o400)
        # munged wants every folder above its socket searchable by all (pytest's tmp is 0700):
        # the socket gets a folder of its own under /tmp, removed by stop().
        self.socket_dir = Path(tempfile.mkdtemp(prefix="kernattn-munge-", dir="/tmp"))
        self.socket_dir.chmod(0o755)
        (self.socket_dir / ".root").write_text(str(self.root))  # whose it is (stop_in)
        self.munge_socket = self.socket_dir / "munge.socket"
        ctld_port, slurmd_port = free_port(), free_port()
        while slurmd_port == ctld_port:
            slurmd_port = free_port()
        lines = [
            "ClusterName=kernattn-test",
            f"SlurmctldHost={self.node}(127.0.0.1)",
            f"SlurmctldPort={ctld_port}",
            f"SlurmdPort={slurmd_port}",
            "AuthType=auth/munge",
            "CredType=cred/munge",
            f"AuthInfo=socket={self.munge_socket}",
            "SlurmUser=root",
            "SlurmdUser=root",
            f"StateSaveLocation={r / 'state'}",
            f"SlurmdSpoolDir={r / 'spool'}",
            f"SlurmctldPidFile={r / 'run' / 'slurmctld.pid'}",
            f"SlurmdPidFile={r / 'run' / 'slurmd.pid'}",
            f"SlurmctldLogFile={r / 'log' / 'slurmctld.log'}",
            f"SlurmdLogFile={r / 'log' / 'slurmd.log'}",
            "SlurmctldDebug=info",
            "SlurmdDebug=info",
            "ProctrackType=proctrack/linuxproc",
            "TaskPlugin=task/none",
            "SelectType=select/cons_tres",
            "SelectTypeParameters=CR_Core_Memory",
            "MpiDefault=none",
            "ReturnToService=2",
            "AccountingStorageType=accounting_storage/none",
            "JobAcctGatherType=jobacct_gather/none",
            "JobCompType=jobcomp/none",
            "SlurmdParameters=config_overrides",
            "SchedulerParameters=sched_interval=1",
            "MinJobAge=3600",  # squeue (the test profile's status command) sees finished jobs for an hour
            "KillWait=5",
            "GresTypes=gpu",
            f"NodeName={self.node} NodeAddr=127.0.0.1 CPUs={NODE_CPUS} RealMemory={NODE_MEM_MB} "
            f"Gres=gpu:{GPU_MODEL}:{NODE_GPUS} State=UNKNOWN",
            f"PartitionName={PARTITION} Nodes={self.node} Default=YES MaxTime=INFINITE State=UP",
        ]
        self.conf.write_text("\n".join(lines) + "\n")
        # Fake GPUs: slurmd drops file-less GPUs, and wants character devices, so each is a
        # node with /dev/null's numbers (a regular file if mknod is refused: slurmd then logs an
        # error but still counts it). Nothing opens them; the jobs here train on the CPU.
        (r / "dev").mkdir(exist_ok=True)
        for i in range(NODE_GPUS):
            dev = r / "dev" / f"{GPU_MODEL}{i}"
            try:
                os.mknod(dev, 0o666 | stat.S_IFCHR, os.makedev(1, 3))
            except OSError:
                dev.touch()
        # snakemake-executor-plugin-slurm-jobstep (0.6) starts the rule with a nested `srun`
        # whose environment keeps only the job-identity SLURM_* variables: SLURM_CONF is
        # dropped, and srun then looks for /etc/slurm/slurm.conf. A real cluster has that file
        # (or a configless slurmd); this scratch cluster is found only through SLURM_CONF, so
        # the jobs get an `srun` that sets it back. Nothing else is changed.
        (r / "bin").mkdir(exist_ok=True)
        shim = r / "bin" / "srun"
        shim.write_text(f"#!/bin/sh\nSLURM_CONF={self.conf}\nexport SLURM_CONF\nexec {which('srun')} \"$@\"\n")
        shim.chmod(0o755)
        (r / "etc" / "gres.conf").write_text(
            f"NodeName={self.node} Name=gpu Type={GPU_MODEL} File={r / 'dev' / GPU_MODEL}[0-{NODE_GPUS - 1}]\n")

    def _start(self, name: str, cmd: list[str]) -> Proc:
        proc = Proc(name, cmd, self.root / "log" / f"{name}.out", env=self.env())
        self.procs.append(proc)
        (self.root / "run" / f"{name}.pgid").write_text(str(proc.pid))  # its process group (stop_in)
        return proc

    def _check_alive(self) -> None:
        for p in self.procs:
            if not p.alive():
                raise RuntimeError(f"{p.name} exited with {p.popen.returncode}: {p.tail()}"
                                   f"{self._log_tail(p.name)}")

    def _log_tail(self, name: str) -> str:
        path = self.root / "log" / f"{name}.log"
        return f"\n{path}:\n{path.read_text(errors='replace')[-2000:]}" if path.is_file() else ""

    def start(self, timeout: float = 60) -> None:
        t0 = time.monotonic()
        self._write_config()
        self._start("munged", [which("munged"), "--foreground", f"--key-file={self.root / 'munge' / 'munge.key'}",
                               f"--socket={self.munge_socket}", f"--pid-file={self.root / 'run' / 'munged.pid'}",
                               f"--seed-file={self.root / 'munge' / 'seed'}", "--num-threads=2"])
        wait_for(lambda: self._check_alive() or self.munge_socket.exists(), 20, what="munged's socket")
        self._start("slurmctld", [which("slurmctld"), "-D", "-i", "-f", str(self.conf)])
        wait_for(lambda: self._check_alive() or self._ping(), timeout, 0.3, "slurmctld to answer")
        self._start("slurmd", [which("slurmd"), "-D", "-f", str(self.conf), "-N", self.node])
        wait_for(lambda: self._check_alive() or self.node_state() in ("idle", "mixed", "allocated"),
                 timeout, 0.3, "the node to be idle")
        self.timings["cluster_start_s"] = time.monotonic() - t0

    def _ping(self) -> bool:
        proc = subprocess.run([which("scontrol"), "ping"], env=self.env(), capture_output=True, text=True, timeout=20)
        return proc.returncode == 0 and "UP" in proc.stdout

    def node_state(self) -> str:
        proc = subprocess.run([which("sinfo"), "-h", "-N", "-o", "%T"], env=self.env(), capture_output=True,
                              text=True, timeout=20)
        return proc.stdout.strip().rstrip("*~#$@+") if proc.returncode == 0 else ""

    def jobs(self) -> list[str]:
        """Ids of the jobs slurmctld still lists (any state)."""
        proc = subprocess.run([which("squeue"), "-h", "-t", "all", "-o", "%i"], env=self.env(),
                              capture_output=True, text=True, timeout=20)
        return proc.stdout.split()

    def running_jobs(self) -> list[str]:
        proc = subprocess.run([which("squeue"), "-h", "-t", "PD,R,CG,S", "-o", "%i"], env=self.env(),
                              capture_output=True, text=True, timeout=20)
        return proc.stdout.split() if proc.returncode == 0 else []

    def stop(self) -> None:
        """Cancel every job (and wait for them to end), then stop slurmd, slurmctld, munged
        (reverse order), each by pid."""
        errors = []
        if self.procs and all(p.alive() for p in self.procs):
            self._cancel_jobs()
        for proc in reversed(self.procs):
            try:
                proc.stop()
            except Exception as exc:  # noqa: BLE001 (stop the others anyway)
                errors.append(f"{proc.name}: {exc}")
        self.procs.clear()
        if getattr(self, "socket_dir", None) is not None:
            shutil.rmtree(self.socket_dir, ignore_errors=True)
        if errors:
            raise RuntimeError("; ".join(errors))

    def _cancel_jobs(self) -> None:
        """Cancel every job and wait for them to end (best effort: the daemons stop next)."""
        with contextlib.suppress(Exception):
            if self.running_jobs():
                subprocess.run([which("scancel"), "--full", "-u", "root"], env=self.env(), capture_output=True,
                               timeout=20)
                wait_for(lambda: not self.running_jobs(), 30, 0.5, "cancelled jobs to end")

    def describe(self) -> str:
        return json.dumps({**self.record(), "pids": {p.name: p.pid for p in self.procs}})

    def record(self) -> dict:
        """What another process needs to use this cluster (`attach`); everything else follows
        from its root (the config, the daemons' process groups: `stop_in`)."""
        return {"root": str(self.root), "start_s": round(self.timings.get("cluster_start_s", 0.0), 2)}

    @classmethod
    def attach(cls, record: dict) -> "SlurmCluster":
        """The cluster another process started (its `record()`): clients only, no daemons to stop."""
        cluster = cls(Path(record["root"]))
        cluster.timings["cluster_start_s"] = record["start_s"]
        return cluster

    @staticmethod
    def stop_in(info: dict) -> None:
        """Stop the cluster under info["root"] from any process, as `stop()` does: cancel every
        job and wait for them to end, then slurmd, slurmctld, munged, each by its process group
        (their pid files: the cluster may have been left half-started)."""
        from kernattn.tracking.server import group_members, read_pid, stop_group

        root = Path(info["root"])
        cluster = SlurmCluster(root)
        pids = {name: read_pid(root / "run" / f"{name}.pgid") for name in ("munged", "slurmctld", "slurmd")}
        pids = {name: pid for name, pid in pids.items() if pid}
        if pids and all(group_members(pid) for pid in pids.values()):
            cluster._cancel_jobs()
        for pid in reversed(list(pids.values())):  # started as munged, slurmctld, slurmd
            stop_group(pid, grace=10)
        for socket_dir in Path("/tmp").glob("kernattn-munge-*"):  # this cluster's (.root names it)
            if (socket_dir / ".root").is_file() and (socket_dir / ".root").read_text() == str(root):
                shutil.rmtree(socket_dir, ignore_errors=True)
