"""`kernattn install-profile`: make `snakemake --profile slurm all` work as written.

Snakemake looks for a profile named `slurm` in the current directory, then in
~/.config/snakemake/ and /etc/xdg/snakemake/. This copies the shipped profiles/slurm with the
site-specific values (partition, account, GPU model) filled in to ~/.config/snakemake/slurm
(or --dest).

--gpus STAGE=N and --nodes STAGE=M give one run of a training stage (or eval_lm, prune) N GPUs on each of M nodes:
the stage's set-resources get `ranks: N` and `nodes: M`, which the rule's command turns into
torchrun's world (kernattn.dag.snakemake.shell_of, engine/launch.py), and the SLURM request
for them: `gpu: N` on one node; over several nodes `gres: gpu[:MODEL]:N` (per node) and
`tasks: M` (srun starts one torchrun per node).
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
    parser.add_argument("--gpus", action="append", default=[], metavar="STAGE=N",
                        help="GPUs of each node one run of a training stage trains on (e.g. train_lm=8); repeatable")
    parser.add_argument("--nodes", action="append", default=[], metavar="STAGE=M",
                        help="nodes one run of a training stage trains on (e.g. train_lm=2); repeatable")
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


def _counts(pairs: list[str], option: str) -> dict[str, int]:
    from .errors import UsageError

    out = {}
    for pair in pairs:
        stage, _, value = pair.partition("=")
        if not value.isdigit() or int(value) < 1:
            raise UsageError(f"{option} {pair}: expected STAGE=N with N >= 1 (e.g. {option} train_lm=8)")
        out[stage] = int(value)
    return out


WORLD_KEYS = ("gpu", "gpu_model", "gres", "ranks", "nodes", "tasks", "tasks_per_gpu", "mpi")


def _value(block: list[str], key: str, default: int) -> int:
    """The integer `key: N` of an entry's lines (default when absent)."""
    for line in block:
        name, _, rest = line.strip().partition(":")
        if name == key:
            return int(rest.split("#")[0].strip().strip('"') or default)
    return default


def _cpus_for(block: list[str], old_ranks: int, ranks: int) -> list[str]:
    """The entry's cpus_per_task for `ranks` processes per node: its CPUs per rank (the
    shipped entries are for one) x ranks. Each rank has its own DataLoader workers (the ViT's
    vision.workers), so 8 ranks of a 15-CPU entry need 120 CPUs on their node, not 15."""
    per_rank = max(1, _value(block, "cpus_per_task", 1) // max(1, old_ranks))
    return [f"    cpus_per_task: {per_rank * ranks}  # {per_rank} per rank x {ranks} ranks\n"
            if line.strip().startswith("cpus_per_task:") else line for line in block]


def set_world(text: str, stage: str, gpus: int, nodes: int, gpu_model: str, source: Path) -> str:
    """The set-resources entry of `stage` asking for `gpus` GPUs on each of `nodes` nodes."""
    from .errors import UsageError

    lines = text.splitlines(keepends=True)
    head = f"  {stage}:\n"
    if head not in lines or "set-resources:\n" not in lines[: lines.index(head)]:
        raise UsageError(f"{source}: set-resources has no entry {stage}; --gpus/--nodes name a training stage "
                         f"of the profile (train, train_lm, train_vision, train_wrap, train_gka_init), eval_lm or prune")
    start = lines.index(head) + 1
    end = next((i for i in range(start, len(lines)) if not lines[i].startswith("    ")), len(lines))
    block = [line for line in lines[start:end] if line.strip().split(":")[0] not in WORLD_KEYS]
    block = _cpus_for(block, _value(lines[start:end], "ranks", 1), gpus)
    model = f"{gpu_model}:" if gpu_model else ""
    if nodes == 1:
        world = [f"    gpu: {gpus}\n"] + ([f'    gpu_model: "{gpu_model}"\n'] if gpu_model else [])
    else:  # --gpus would count the job's GPUs, not each node's
        # mpi: Snakemake's SLURM job step then runs the command as it is, where an ordinary job
        # wraps it in `srun -n1` (one task on one node), inside which the command's own srun
        # (one torchrun per node, engine/launch.py) could not reach the other nodes
        # tasks_per_gpu 0: the SLURM executor plugin (2.8) otherwise turns `tasks` of a GPU job into
        # --ntasks-per-gpu, which SLURM refuses beside a per-node gres (or starts a task per GPU); so
        # the job asks --nodes=M --ntasks=M --gres=gpu:N: one task per node, holding the node's GPUs
        world = [f'    gres: "gpu:{model}{gpus}"\n', f"    tasks: {nodes}\n", "    tasks_per_gpu: 0\n",
                 '    mpi: "srun"\n']
    world += [f"    ranks: {gpus}\n", f"    nodes: {nodes}\n"]
    return "".join(lines[:start] + world + block + lines[end:])


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
    gpus, nodes = _counts(getattr(args, "gpus", []), "--gpus"), _counts(getattr(args, "nodes", []), "--nodes")
    for stage in sorted({*gpus, *nodes}):
        text = set_world(text, stage, gpus.get(stage, 1), nodes.get(stage, 1), args.gpu_model, config)
    if getattr(args, "plan_scale", None):
        from .dag import limits

        text = limits.set_runtimes(text, limits.plan_minutes(args, text))
    atomic_write_text(dest / "config.yaml", text)
    print(f"installed {dest / 'config.yaml'}: now `snakemake --profile slurm all` submits to {args.partition}")
    return 0
