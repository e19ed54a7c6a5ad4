"""The command-line options every trainer shares (kernattn train, train-lm, train-vision)."""

from __future__ import annotations

import argparse

from ..errors import UsageError
from .loop import train_run
from .track import Track


def add_world_options(parser: argparse.ArgumentParser, verb: str) -> None:
    """--nproc and --nodes, read by cli.main before the parser (engine/launch.py): here for
    --help and for N = M = 1. `verb`: what the ranks do (train, score)."""
    parser.add_argument("--nproc", type=int, default=1, metavar="N",
                        help=f"{verb} on N processes (GPUs) of each node, started by torchrun (one node: "
                             "--standalone); default 1, this process")
    parser.add_argument("--nodes", type=int, default=1, metavar="M",
                        help=f"nodes of a SLURM allocation to {verb} on (srun starts one torchrun per node, "
                             "c10d rendezvous on the first); default 1")


def add_run_options(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--fresh", action="store_true",
                        help="delete the run folder first (discard a checkpoint or a finished run)")
    parser.add_argument("--stale", choices=("error", "archive"), default="error",
                        help="a run folder from another configuration (params changed): 'error' (default) "
                             "stops with a message; 'archive' moves it to <out_dir>/.stale/ and starts "
                             "fresh (what the Snakefile and dvc.yaml use)")
    add_world_options(parser, "train")
    # Tests: stop after this many steps with a checkpoint and no final.json.
    parser.add_argument("--stop-after", type=int, default=None, help=argparse.SUPPRESS)
    parser.add_argument("--no-progress", action="store_true", help="no progress bar")


def run_track(track: Track, args: argparse.Namespace) -> int:
    """Train `track` as the parsed options say; returns the exit status."""
    if args.stop_after is not None and args.stop_after < 0:
        raise UsageError(f"--stop-after must be >= 0, got {args.stop_after}")
    return train_run(track, fresh=args.fresh, stop_after=args.stop_after, stale=args.stale,
                     progress=not args.no_progress)
