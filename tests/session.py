"""What one test session builds once and shares with every pytest-xdist worker: the daemons of
the end-to-end tests (a SLURM test cluster, an MLflow server) and the micro DAG trained on them.

Only public APIs of pytest and xdist are used:

- the controller (the process without `config.workerinput`) makes one folder in
  `pytest_configure` and hands its path to each worker through xdist's `pytest_configure_node`
  hook (`node.workerinput`); without xdist the one process is controller and worker;
- `once()` builds a thing under a file lock in that folder (xdist's documented recipe for a
  session fixture that runs once): the first worker to ask builds it, the others wait on the
  lock and read its record. A build that skips (a daemon this machine cannot run) or fails
  leaves that outcome as the record, so no other worker tries again;
- a build that starts a daemon registers how to stop it (`on_session_end`), and the controller
  stops every registered daemon in `pytest_sessionfinish`, after the last worker has ended:
  a daemon outlives the worker that started it, so every worker can use it until the end.
"""

from __future__ import annotations

import contextlib
import json
import shutil
import signal
import tempfile
import threading
import time
import traceback
from collections.abc import Callable
from pathlib import Path

import pytest
from filelock import FileLock

from kernattn.io import atomic_write_json

KEY = "kernattn_session"
PREFIX = "kernattn-session-"
_FOLDER = pytest.StashKey[Path]()
STOPS = "stops.jsonl"


def is_controller(config) -> bool:
    return not hasattr(config, "workerinput")


def configure(config) -> None:
    """The controller makes the folder (and turns SIGTERM into an interrupt, so that a CI
    timeout still ends in pytest_sessionfinish, which stops the daemons); a worker reads its
    path from the controller."""
    if is_controller(config):
        _remove_stale()
        config.stash[_FOLDER] = Path(tempfile.mkdtemp(prefix=PREFIX))
        if threading.current_thread() is threading.main_thread():
            signal.signal(signal.SIGTERM, _interrupt)
    else:
        config.stash[_FOLDER] = Path(config.workerinput[KEY])


def _interrupt(signum, frame):
    raise KeyboardInterrupt(f"signal {signum}")


def _remove_stale(max_age_s: float = 24 * 3600) -> None:
    """Folders that failed sessions kept (to be read), once a day old."""
    for old in Path(tempfile.gettempdir()).glob(f"{PREFIX}*"):
        with contextlib.suppress(OSError):
            if time.time() - old.stat().st_mtime > max_age_s:
                shutil.rmtree(old, ignore_errors=True)


def unconfigure(config) -> None:
    """A session that built nothing (`pytest --help`, the fast job) leaves no folder behind."""
    root = config.stash.get(_FOLDER, None)
    if is_controller(config) and root is not None and root.is_dir() and not any(root.iterdir()):
        root.rmdir()


def configure_node(node) -> None:
    node.workerinput[KEY] = str(node.config.stash[_FOLDER])


def folder(config) -> Path:
    return config.stash[_FOLDER]


def once(config, name: str, build: Callable[[Path], dict]) -> dict:
    """`build(folder_of_its_own)`'s record (a JSON-able mapping), built by the first caller of
    the session. A build that calls pytest.skip records {"skip": reason}; one that raises
    records {"error": its traceback}. Callers get the record and act on those keys (`need`)."""
    root = folder(config)
    record_path, own = root / f"{name}.json", root / name
    with FileLock(str(root / f"{name}.lock")):
        if not record_path.exists():
            shutil.rmtree(own, ignore_errors=True)
            own.mkdir()
            try:
                record = build(own)
            except pytest.skip.Exception as exc:
                record = {"skip": str(exc)}
            except (Exception, pytest.fail.Exception):  # noqa: BLE001 (every later caller fails with this)
                record = {"error": traceback.format_exc()}
            atomic_write_json(record_path, record)
        return json.loads(record_path.read_text())


def need(record: dict, what: str) -> dict:
    """The record of a build that succeeded; a skipped build skips the caller, a failed one fails it."""
    if "skip" in record:
        pytest.skip(record["skip"])
    if "error" in record:
        pytest.fail(f"{what} failed to start in this session (once, in another test):\n{record['error'][-4000:]}")
    return record


def on_session_end(config, kind: str, info: dict) -> None:
    """Register a daemon for the controller to stop when the session ends (`STOPPERS[kind](info)`)."""
    root = folder(config)
    with FileLock(str(root / f"{STOPS}.lock")), open(root / STOPS, "a") as fh:
        fh.write(json.dumps({"kind": kind, "info": info}) + "\n")


def finish(config, stoppers: dict[str, Callable[[dict], None]], keep: bool) -> list[str]:
    """The controller, at the end of the session: stop every registered daemon, the last
    started first, and remove the folder unless `keep` (a failed session keeps it to read).
    Returns the errors of stops that failed (each daemon is stopped regardless)."""
    root = folder(config)
    lines = (root / STOPS).read_text().splitlines() if (root / STOPS).exists() else []
    errors = []
    for line in reversed(lines):
        entry = json.loads(line)
        try:
            stoppers[entry["kind"]](entry["info"])
        except Exception as exc:  # noqa: BLE001 (stop the others anyway)
            errors.append(f"{entry['kind']}: {exc}")
    if not keep and not errors:
        shutil.rmtree(root, ignore_errors=True)
    return errors
