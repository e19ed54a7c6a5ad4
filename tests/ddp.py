"""Start a kernattn command as N ranks on this machine (gloo on CPU), as torchrun would, but
forked from a fork server that imported torch and kernattn once: a rank starts in milliseconds
(no second import of torch), and each rank is a process of its own that a test can signal or
kill. Not forked from the test process itself: once a process has run a backward pass (any
earlier test in the same pytest worker), autograd's threads make a forked child's backward
fail ("Unable to handle autograd's threading in combination with fork-based multiprocessing").
The server never runs autograd, so its children start clean; they get the test's environment
and working directory as they are at launch, not the server's.

    ranks = launch(["train", "--params", p, "--run", "rope-s0"], n=2, logs=tmp_path / "a")
    codes = wait(ranks)          # exit codes in rank order (-9: killed)

Each rank gets torchrun's variables (RANK, WORLD_SIZE, LOCAL_RANK, MASTER_ADDR, MASTER_PORT),
one torch thread, and writes its stdout and stderr to <logs>.<rank>.log. n=1 sets none of them:
the one-process run the others are compared with.
"""

from __future__ import annotations

import multiprocessing
import os
import signal
import sys
import time
import traceback
from pathlib import Path


def _rank_main(argv: list[str], env: dict[str, str], cwd: str, log: str) -> None:
    os.chdir(cwd)
    fd = os.open(log, os.O_WRONLY | os.O_CREAT | os.O_TRUNC)
    os.dup2(fd, 1)
    os.dup2(fd, 2)
    # the rank's streams until os._exit (no close: the descriptors are the process's own)
    sys.stdout = open(1, "w", buffering=1, closefd=False)  # noqa: SIM115
    sys.stderr = open(2, "w", buffering=1, closefd=False)  # noqa: SIM115
    signal.signal(signal.SIGTERM, signal.SIG_DFL)
    os.environ.clear()
    os.environ.update(env)
    code = 1
    try:
        import torch

        torch.set_num_threads(1)  # a forked child never reuses the server's OpenMP pool
        from kernattn import cli

        code = cli.main(argv)
    except SystemExit as exc:
        code = exc.code if isinstance(exc.code, int) else 1
    except BaseException:  # noqa: BLE001 (a rank's traceback goes to its log, the exit code says it failed)
        traceback.print_exc()
    finally:
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(code)


# What the fork server imports once, before its first child: what every rank would import
# itself (torch._dynamo, which AdamW loads, takes seconds; each track's modules; timm's parts
# the ViT's training uses).
PRELOAD = ("torch", "torch._dynamo", "torch.distributed", "torch.nn.parallel", "kernattn.cli", "mlflow",
           "kernattn.tracks.char.track", "kernattn.tracks.lm.track", "kernattn.tracks.vision.track",
           "timm.data", "timm.loss", "timm.optim", "timm.scheduler", "timm.utils", __name__)


def _context() -> multiprocessing.context.BaseContext:
    ctx = multiprocessing.get_context("forkserver")
    ctx.set_forkserver_preload(list(PRELOAD))  # read when this process's server starts (its first launch)
    return ctx


def launch(argv: list[str], n: int, logs: Path, **env: str) -> list[multiprocessing.Process]:
    ctx = _context()
    from kernattn.tracking.server import free_port  # below the ephemeral range: no race with clients

    port = str(free_port())
    procs = []
    for rank in range(n):
        world = ({"RANK": str(rank), "WORLD_SIZE": str(n), "LOCAL_RANK": str(rank), "MASTER_ADDR": "127.0.0.1",
                  "MASTER_PORT": port} if n > 1 else {})
        proc = ctx.Process(target=_rank_main, args=(argv, {**os.environ, **world, **env}, os.getcwd(),
                                                    f"{logs}.{rank}.log"), daemon=True)
        proc.start()
        procs.append(proc)
    return procs


def wait(procs, timeout: float = 120.0) -> list[int | None]:
    """Exit codes in rank order; a rank still running after `timeout` s is killed (None)."""
    end = time.monotonic() + timeout
    codes = []
    for proc in procs:
        proc.join(max(0.0, end - time.monotonic()))
        if proc.exitcode is None:
            proc.kill()
            proc.join()
            codes.append(None)
        else:
            codes.append(proc.exitcode)
    return codes


def log_of(logs: Path, rank: int) -> str:
    path = Path(f"{logs}.{rank}.log")
    return path.read_text(errors="replace") if path.is_file() else ""


def wait_for_text(logs: Path, text: str, procs, timeout: float = 120.0) -> None:
    """Until every rank's log holds `text`; the ranks are killed on failure."""
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        if all(text in log_of(logs, r) for r in range(len(procs))):
            return
        if any(p.exitcode is not None for p in procs):
            break
        time.sleep(0.05)
    for p in procs:
        p.kill()
    raise AssertionError(f"not every rank wrote '{text}': " + " | ".join(log_of(logs, r)[-1500:]
                                                                       for r in range(len(procs))))
