"""`kernattn install-profile`: make `snakemake --profile slurm all` work as written.

Snakemake looks for a profile named `slurm` in the current directory, then in
~/.config/snakemake/ and /etc/xdg/snakemake/. This copies the shipped profiles/slurm with the
site-specific values (partition, account, GPU model) filled in to ~/.config/snakemake/slurm
(or --dest).
"""

from __future__ import annotations

import argparse
import os
from pathlib import Path

from .io import atomic_write_text

PLACEHOLDERS = {
    "SITE_PARTITION": "partition",
    "SITE_GPU_PARTITION": "gpu_partition",
    "SITE_ACCOUNT": "account",
    "SITE_GPU_MODEL": "gpu_model",
}


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--partition", required=True, help="partition for CPU rules (and GPU rules unless --gpu-partition)")
    parser.add_argument("--gpu-partition", default=None, help="partition for training (default: --partition)")
    parser.add_argument("--account", default="", help="SLURM account (default: none)")
    parser.add_argument("--gpu-model", default="", help="GPU model constraint, e.g. h100 (default: any)")
    parser.add_argument("--status-command", choices=("sacct", "squeue"), default=None,
                        help="how snakemake polls job states (default: the profile's, sacct; "
                             "squeue where there is no accounting database)")
    parser.add_argument("--source", default="profiles/slurm", help="profile to install (default profiles/slurm)")
    parser.add_argument("--dest", default=None, help="target folder (default ~/.config/snakemake/slurm)")
    # the training and evaluation stages' time limits from `kernattn plan`
    from .dag import limits

    limits.add_arguments(parser)


def render(text: str, values: dict[str, str]) -> str:
    """Fill the SITE_* placeholders; drop the lines whose value is empty (account, gpu model)."""
    lines = []
    for line in text.splitlines(keepends=True):
        for token, key in PLACEHOLDERS.items():
            if token in line:
                if not values[key]:
                    line = ""
                    break
                line = line.replace(token, values[key])
        lines.append(line)
    return "".join(lines)


def set_status_command(text: str, command: str | None) -> str:
    """Replace the value of the profile's `slurm-status-command:` line (None: keep it)."""
    if command is None:
        return text
    lines = text.splitlines(keepends=True)
    for i, line in enumerate(lines):
        if line.startswith("slurm-status-command:"):
            lines[i] = f"slurm-status-command: {command}\n"
            return "".join(lines)
    return text + f"slurm-status-command: {command}\n"


def run(args: argparse.Namespace) -> int:
    from .errors import UsageError

    source = Path(args.source)
    config = source / "config.yaml"
    if not config.is_file():
        raise UsageError(f"{config}: no profile to install (run from the repository root or pass --source)")
    config_home = Path(os.environ.get("XDG_CONFIG_HOME", Path.home() / ".config"))
    dest = Path(args.dest) if args.dest else config_home / "snakemake" / "slurm"
    values = {
        "partition": args.partition,
        "gpu_partition": args.gpu_partition or args.partition,
        "account": args.account,
        "gpu_model": args.gpu_model,
    }
    dest.mkdir(parents=True, exist_ok=True)
    text = set_status_command(render(config.read_text(), values), getattr(args, "status_command", None))
    if getattr(args, "plan_scale", None):
        from .dag import limits

        text = limits.set_runtimes(text, limits.plan_minutes(args, text))
    atomic_write_text(dest / "config.yaml", text)
    print(f"installed {dest / 'config.yaml'}: now `snakemake --profile slurm all` submits to {args.partition}")
    return 0
