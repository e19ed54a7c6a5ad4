"""`kernattn preflight`: before the first GPU-hour, on a login node or a laptop CPU, one line per item.

    kernattn preflight --scale paper                       # data, every row's step, memory, SLURM
    kernattn preflight --scale paper --tracks lm --gpu h200 --json preflight.json

- data: every data set the scale reads is here or pullable (data_check.py)
- step: every training row of every track builds at the scale's shapes and trains one optimizer
  step on a batch of one on the CPU, checkpoints and resumes it (steps.py, rowcheck.py), each
  row's process under a memory ceiling (--max-memory, watch.py) with its peak reported; a row
  too deep for the ceiling steps slices of its repeating layers, extrapolated (slices.py)
- memory: each job's GPU memory at its configured micro-batch, beside the card's (memory.py)
- slurm: the profile's partitions, GPUs, nodes and time limits against sinfo (slurm_check.py)

Exit 1 when an item fails (warnings do not fail it). Nothing is written under the scale's
results: the stand-in data and the steps' run folders live in a temporary work folder.
"""

from __future__ import annotations

import argparse
import os
import tempfile
import time
from pathlib import Path

from ..errors import UsageError
from ..tracks import TRACKS
from .watch import DEFAULT_MAX_GIB, Ceiling

CHECKS = ("data", "step", "slurm")
SHIPPED_PROFILE = "profiles/slurm/config.yaml"


def installed_profile() -> str:
    """The profile `snakemake --profile slurm` would read: the installed one, else the shipped copy."""
    home = Path(os.environ.get("XDG_CONFIG_HOME", Path.home() / ".config")) / "snakemake" / "slurm" / "config.yaml"
    return str(home) if home.is_file() else SHIPPED_PROFILE


def _names(text: str | None, allowed: tuple[str, ...] | None, option: str) -> tuple[str, ...]:
    names = tuple(n.strip() for n in (text or "").split(",") if n.strip())
    bad = [n for n in names if allowed is not None and n not in allowed]
    if bad:
        raise UsageError(f"{option} {','.join(bad)}: unknown; choose from {', '.join(allowed)}")
    return names


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--tracks", default=None, metavar="T,...", help=f"only these tracks ({', '.join(TRACKS)})")
    parser.add_argument("--rows", default=None, metavar="R,...",
                        help="only these rows (a row name, or track/row), e.g. lm/base,rope")
    parser.add_argument("--skip", default=None, metavar="CHECK,...", help=f"skip checks ({', '.join(CHECKS)})")
    parser.add_argument("--gpu", default="h100", metavar="KIND",
                        help="the GPU kind the jobs will run on, for the memory check (src/kernattn/bench/gpus.yaml; "
                             "default h100)")
    parser.add_argument("--profile", default=None, metavar="FILE",
                        help="the snakemake profile's config.yaml: GPUs per run and the SLURM check (default: the "
                             f"installed ~/.config/snakemake/slurm, else {SHIPPED_PROFILE})")
    parser.add_argument("--work-dir", default=None, metavar="DIR",
                        help="the stand-in data and the steps' run folders (default: a temporary folder, removed)")
    parser.add_argument("--max-memory", type=float, default=DEFAULT_MAX_GIB, metavar="GIB",
                        help=f"the most resident memory one row's check may reach, GiB (default {DEFAULT_MAX_GIB:g}, "
                             f"and at most 90%% of what this machine has available): a process beyond it is "
                             f"stopped, and a row whose whole step would pass it steps slices of its layers")
    parser.add_argument("--json", default=None, metavar="FILE", help="also write every item and its numbers as JSON")


def run(args: argparse.Namespace) -> int:
    from ..bench.peaks import get_kind
    from ..config import params_from_args
    from ..dag.plan import profile_gpus
    from ..io import atomic_write_json
    from .data_check import data_items
    from .slurm_check import slurm_items
    from .steps import step_and_memory_items

    tracks = _names(args.tracks, TRACKS, "--tracks") or TRACKS
    skip = _names(args.skip, CHECKS, "--skip")
    kind = get_kind(args.gpu)
    if not kind.memory_gib:
        raise UsageError(f"--gpu {args.gpu}: its memory is not in src/kernattn/bench/gpus.yaml (memory_gib)")
    profile = args.profile or installed_profile()
    if args.max_memory <= 0:
        raise UsageError(f"--max-memory {args.max_memory:g}: give the GiB a row's check may hold, e.g. 12")
    ceiling = Ceiling.here(args.max_memory)
    params = params_from_args(args)
    print(f"kernattn preflight: scale {params.scale!r}, tracks {', '.join(tracks)}, GPU {kind.name} "
          f"({kind.memory_gib:g} GiB), profile {profile}", flush=True)
    t0, items = time.perf_counter(), []
    if "data" not in skip:
        items += _said(data_items(params))
    if "step" not in skip:
        with tempfile.TemporaryDirectory(prefix="kernattn-preflight-") as tmp:
            work = Path(args.work_dir) if args.work_dir else Path(tmp)
            items += step_and_memory_items(str(args.params), params, tracks, _names(args.rows, None, "--rows"),
                                           work, profile_gpus(profile), kind, ceiling)
    if "slurm" not in skip:
        items += _said(slurm_items(profile))
    failed = [i for i in items if i.status == "FAIL"]
    warned = [i for i in items if i.status == "warn"]
    wall = time.perf_counter() - t0
    print(f"kernattn preflight: {len(items) - len(failed) - len(warned)} ok, {len(warned)} warnings, "
          f"{len(failed)} failed, in {wall:.0f} s" + ("" if failed else " - ready to launch"), flush=True)
    if args.json:
        atomic_write_json(args.json, {"scale": params.scale, "gpu": kind.name, "profile": profile, "wall_s": wall,
                                      "peak_rss_bytes": max((i.values.get("peak_rss", 0) for i in items), default=0),
                                      "memory": {"ceiling_bytes": ceiling.limit, "max_memory_bytes": ceiling.asked,
                                                 "available_bytes": ceiling.available},
                                      **machine(), "items": [vars(i) for i in items]})
    return 1 if failed else 0


def machine() -> dict:
    """When, at which commit and on what the preflight ran (the --json file's head)."""
    import platform

    import torch

    from ..bench.timing import device_name, utc_timestamp
    from ..engine.runtime import git_info

    commit, dirty = git_info()
    total = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    return {"timestamp": utc_timestamp(), "git_commit": commit, "git_dirty": dirty,
            "machine": {"cpu": device_name(torch.device("cpu")), "cores": os.cpu_count(), "memory_bytes": total,
                        "cpu_capability": torch.backends.cpu.get_cpu_capability(),
                        "python": platform.python_version(), "torch": torch.__version__}}


def _said(items: list) -> list:
    for item in items:
        print(item.line(), flush=True)
    return items
