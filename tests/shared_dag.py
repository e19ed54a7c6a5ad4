"""One micro DAG per test session, shared between the infra tests and the local ones.

The infra tests run the micro DAG through `snakemake --profile slurm all` (or `--cores 2` where
no cluster can run: tests/infra/conftest.py, `pipeline_launch`); the `micro_dag` fixture
(tests/conftest.py) needs the same DAG's outputs. Training it twice costs about 170 s of CPU
on a two-core machine, a sixth of the suite, so the infra run hands its workspace over:

- `claim()` when it starts (a file naming its process), `withdraw()` if it cannot launch;
- `publish()` when the DAG's process ends: a copy of the workspace as the DAG left it (before
  any infra test runs Snakemake in it again) and the run's record;
- `wait_for_published()` in the consumer: the record and the copy once the DAG has ended, or
  None when no infra run will publish one (none selected, it withdrew or died, or pytest runs
  without xdist and so the infra tests cannot run beside the consumer). The consumer then
  trains the DAG itself, as it always did.

Files live in the folder every xdist worker shares (pytest's base temp of the session)."""

from __future__ import annotations

import json
import os
import shutil
import time
from pathlib import Path

from kernattn.io import atomic_write_json

CLAIM, PUBLISHED, COPY = "micro_dag-claim.json", "micro_dag-published.json", "micro_dag-published"
# How long a consumer waits for the infra run to start (it starts with the infra worker's first
# test, after the MLflow server and the test cluster) and then to end (its own limit is 900 s).
CLAIM_WAIT_S, RUN_WAIT_S, POLL_S = 300.0, 1200.0, 2.0


def shared_root(tmp_path_factory) -> Path:
    """The folder all xdist workers of the session share (the session's base temp otherwise)."""
    base = tmp_path_factory.getbasetemp()
    return base.parent if os.environ.get("PYTEST_XDIST_WORKER") else base


def claim(root: Path, ws: Path) -> bool:
    """Announce that this process will run the micro DAG in `ws` and publish it. False when
    another process of the session already claimed it (infra tests on two workers)."""
    tmp = root / f"{CLAIM}.{os.getpid()}"
    tmp.write_text(json.dumps({"pid": os.getpid(), "ws": str(ws)}))
    try:
        os.link(tmp, root / CLAIM)  # whole or not at all, and only the first claim wins
    except FileExistsError:
        return False
    finally:
        tmp.unlink()
    return True


def withdraw(root: Path, why: str) -> None:
    """The claimed run will not happen: consumers stop waiting and train the DAG themselves."""
    atomic_write_json(root / PUBLISHED, {"returncode": None, "withdrawn": why})


def publish(root: Path, ws: Path, record: dict) -> None:
    """Copy `ws` as the DAG left it (no Snakemake locks: its process has ended) and then write
    the record, {args, returncode, stdout, stderr, via}: the record's presence means the copy
    is complete."""
    dest = root / COPY
    try:
        shutil.rmtree(dest, ignore_errors=True)
        if record.get("returncode") == 0:
            shutil.copytree(ws, dest / "ws", symlinks=True, ignore=_transient)
    except OSError as exc:  # runs in a watcher thread: a consumer must hear of it, not wait
        withdraw(root, f"copying {ws} failed: {exc}")
        return
    atomic_write_json(root / PUBLISHED, record)


def _transient(folder: str, names: list[str]) -> set[str]:
    return {n for n in names if Path(folder).name == ".snakemake" and n in ("locks", "incomplete")}


def wait_for_published(root: Path, producer_selected: bool) -> tuple[dict, Path] | None:
    """The published record and workspace copy of a successful infra run, or None (see module)."""
    published, claimed = root / PUBLISHED, root / CLAIM
    if not published.exists():
        if not (producer_selected and os.environ.get("PYTEST_XDIST_WORKER")):
            return None
        if not _poll(lambda: claimed.exists() or published.exists(), CLAIM_WAIT_S):
            return None
        pid = json.loads(claimed.read_text())["pid"] if claimed.exists() else None
        _poll(lambda: published.exists() or (pid is not None and not _alive(pid)), RUN_WAIT_S)
        if not published.exists():  # timed out, or the claimant died without publishing
            return None
    record = json.loads(published.read_text())
    if record.get("returncode") != 0:
        return None
    return record, root / COPY / "ws"


def _poll(done, limit_s: float) -> bool:
    deadline = time.monotonic() + limit_s
    while not done():
        if time.monotonic() > deadline:
            return False
        time.sleep(POLL_S)
    return True


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


# ============================================================ scheduling under xdist
# The xdist groups whose tests read the `micro_dag` fixture (tests/conftest.py checks that every
# such test is in one): handed to a worker only once the infra run has published, so that no
# worker sits waiting for it while other tests are left to run.
CONSUMER_GROUPS = ("micro_dag", "dvc")


def make_scheduler(config, log):
    """`--dist loadgroup` with the consumer groups held back until the infra run has published
    (or nothing else is left to hand out); other modes keep xdist's own scheduler."""
    if config.getoption("dist", None) != "loadgroup":
        return None
    from xdist.scheduler import LoadGroupScheduling

    class HoldConsumers(LoadGroupScheduling):
        def _assign_work_unit(self, node) -> None:
            held = _infra_will_publish(self.collection) and not (shared_root_of(config) / PUBLISHED).exists()
            if held:
                ready = [scope for scope in self.workqueue if scope not in CONSUMER_GROUPS]
                if ready:
                    self.workqueue.move_to_end(ready[0], last=False)
            super()._assign_work_unit(node)

    return HoldConsumers(config, log)


def _infra_will_publish(collection) -> bool:
    return any(nodeid.endswith("@infra") for nodeid in collection or ())


def shared_root_of(config) -> Path:
    """The controller's base temp: the folder its workers share (xdist gives each a folder in it)."""
    return config._tmp_path_factory.getbasetemp()
