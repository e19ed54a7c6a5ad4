"""`kernattn train-* | eval-lm | prune --nproc N [--nodes M]`: start the ranks of one training (or LM
evaluation) with torchrun.

    --nproc N            one machine: torchrun --standalone --nproc_per_node N
    --nproc N --nodes M  inside a SLURM allocation of M nodes: srun starts one torchrun per node
                         (--ntasks-per-node 1), which meet at torchrun's c10d rendezvous on the
                         allocation's first node and start N ranks each (world N x M)

Each rank reruns the same command without these options (its --params, --scale and --overrides
FILE included, where the command had them: the ranks read the params the command would); the
engine reads the world from torchrun's variables (dist.py). N = M = 1, or a process that is already a rank, trains here.
SIGTERM (SLURM's time limit) is passed on to the launcher, which passes it to every rank: the
ranks checkpoint and exit 143, and so does this command.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys

from ..errors import UsageError
from .signals import EXIT_SIGTERM, StopSignal

RDZV_PORT = 29500
ARGV_ENV = "KERNATTN_RANK_ARGV"  # the command each rank runs (kernattn/rank.py), as JSON
OPTIONS = ("--nproc", "--nodes")


def take_options(argv: list[str]) -> tuple[dict[str, int], list[str]]:
    """({'--nproc': N, '--nodes': M} as given, argv without them)."""
    found, rest, i = {}, [], 0
    while i < len(argv):
        arg = argv[i]
        name, eq, value = arg.partition("=")
        if name in OPTIONS:
            if not eq:
                if i + 1 >= len(argv):
                    raise UsageError(f"{name} needs a number")
                value, i = argv[i + 1], i + 1
            try:
                found[name] = int(value)
            except ValueError:
                raise UsageError(f"{name} {value}: not a number of processes") from None
            if found[name] < 1:
                raise UsageError(f"{name} {value}: must be >= 1")
        else:
            rest.append(arg)
        i += 1
    return found, rest


def head_node(nodelist: str) -> str:
    """The first host of a SLURM node list (scontrol expands ranges such as gpu[01-04])."""
    try:
        out = subprocess.run(["scontrol", "show", "hostnames", nodelist], capture_output=True, text=True,
                             check=True, timeout=60).stdout.split()
    except (OSError, subprocess.SubprocessError) as exc:
        raise UsageError(f"cannot expand SLURM_JOB_NODELIST={nodelist!r} with scontrol ({exc}); run "
                         f"--nodes inside a SLURM allocation") from None
    return out[0]


def command(nproc: int, nodes: int, env=None) -> list[str]:
    """The launcher's command line for nproc x nodes ranks of kernattn/rank.py (which reads
    the command from the environment: ARGV_ENV)."""
    env = os.environ if env is None else env
    torchrun = [sys.executable, "-m", "torch.distributed.run", "--nproc_per_node", str(nproc)]
    cli = ["-m", "kernattn.rank"]
    if nodes == 1:
        return [*torchrun, "--standalone", *cli]
    if "SLURM_JOB_NODELIST" not in env:
        raise UsageError(f"--nodes {nodes} starts one torchrun per node with srun, inside a SLURM allocation "
                         f"of {nodes} nodes (no SLURM_JOB_NODELIST here); on one machine use --nproc alone")
    job = env.get("SLURM_JOB_ID", "kernattn")
    endpoint = f"{head_node(env['SLURM_JOB_NODELIST'])}:{RDZV_PORT}"
    return ["srun", f"--nodes={nodes}", f"--ntasks={nodes}", "--ntasks-per-node=1", *torchrun,
            f"--nnodes={nodes}", "--rdzv_backend=c10d", f"--rdzv_endpoint={endpoint}", f"--rdzv_id={job}", *cli]


def launch(argv: list[str]) -> int | None:
    """Start the ranks when argv asks for more than one process (the exit status), else None
    (argv trains in this process; its --nproc 1 / --nodes 1 are left for the parser)."""
    found, rest = take_options(argv)
    nproc, nodes = found.get("--nproc", 1), found.get("--nodes", 1)
    if nproc * nodes == 1 or "RANK" in os.environ:
        return None
    proc = subprocess.Popen(command(nproc, nodes), env={**os.environ, ARGV_ENV: json.dumps(rest)})
    with StopSignal(on_signal=proc.send_signal) as stop:  # SIGTERM passed on to torchrun
        code = proc.wait()
    # torchrun reports its ranks' 143 as a failure of its own: a SIGTERM stop is 143 here too
    return EXIT_SIGTERM if stop.requested and code != 0 else code
