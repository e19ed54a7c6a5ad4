"""One stage of the DAG as data: what it is called, what it runs, what it reads and writes.
Each track declares its own (kernattn.tracks.<t>.stages); kernattn.dag assembles the table.

A stage has one name everywhere: the Snakemake rule, the DVC stage (`name`, or `name@<id>`
for one instance of a per-run stage: DVC's own foreach naming), the key in profiles/ and,
with `_` written `-`, the `kernattn` subcommand (`train_lm` <-> `kernattn train-lm`).
Per-run stages have one wildcard, `run`; their paths are functions of the run id, called
with "{run}" for Snakemake's patterns and "${item}" for DVC's foreach.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

CODE_ROOT = "src/kernattn"
WILDCARD = "run"
DVC_ITEM = "${item}"


def command_name(stage_name: str) -> str:
    """The CLI subcommand of a stage: the rule name with `-` for `_` (rules must be identifiers)."""
    return stage_name.replace("_", "-")


def stage_name(command: str) -> str:
    return command.replace("-", "_")


# Commands besides the trainings (train, train-lm, train-vision, the studies' train-*) that run
# as several data-parallel ranks with --nproc / --nodes (engine/launch.py).
RANKED_COMMANDS = ("eval-lm", "prune", "cooldown")  # prune fine-tunes its three arms; cooldown trains a branch


def runs_as_ranks(command: str) -> bool:
    """`kernattn <command> --nproc N` starts N ranks: the trainings and RANKED_COMMANDS."""
    return command.startswith("train") or command in RANKED_COMMANDS


def _none(_run: str) -> list[str]:
    return []


@dataclass(frozen=True)
class Stage:
    name: str                                  # rule / DVC stage / profile key
    params: tuple[str, ...]                    # the params.yaml sections the stage reads
    code: tuple[str, ...]                      # what of src/kernattn it runs ("": all of it)
    outputs: Callable[[str], list[str]]        # the files Snakemake tracks (of one run)
    inputs: Callable[[str], list[str]] = _none  # files earlier stages write
    dvc_outs: Callable[[str], list[str]] | None = None  # what DVC tracks (default: outputs)
    runs: tuple[str, ...] | None = None        # the run ids of a per-run stage (None: one job)
    extra: str = ""                            # arguments after --run (e.g. --stale archive)
    persist: bool = False                      # DVC keeps the output across reruns (checkpoints)
    metric: bool = False                       # its per-run JSON outputs are DVC metrics (a run's final record)
    threads: int | str = 1                     # "all": every local core
    # a Snakemake localrule: runs where Snakemake does (a cluster's login node), never queued as a
    # cluster job: seconds of reading what the jobs wrote, or an upload to the tracking server
    local: bool = False
    narrow: Callable[[str], dict] | None = field(default=None, compare=False)  # per-run view of params

    @property
    def command(self) -> str:
        return command_name(self.name)

    @property
    def per_run(self) -> bool:
        return self.runs is not None

    def code_paths(self) -> list[str]:
        return [f"{CODE_ROOT}/{c}" if c else CODE_ROOT for c in self.code]

    def cmd(self, args: str, run: str | None = None) -> str:
        """The shell command; `args` is `--params P --scale S` (and `--overrides F`)."""
        parts = ["kernattn", self.command, args]
        if self.per_run:
            parts += ["--run", run]
        if self.extra:
            parts.append(self.extra)
        return " ".join(parts)

    def log(self, run: str | None = None) -> str:
        return f"results/logs/{self.name}-{run}.log" if self.per_run else f"results/logs/{self.name}.log"

    def jobs(self) -> list[str]:
        """Every job's id: `name` or `name@<run>` (Snakemake's jobs, DVC's stages)."""
        return [f"{self.name}@{r}" for r in self.runs] if self.per_run else [self.name]


def narrowed_section(p, section: str, runs: list, run_id: str) -> dict:
    """The params `section` (a track's, with `rows` and `seeds`) as one run reads it: its rows
    cut to the run's row and the rows its `compute` refers to, its seeds to the run's seed.
    Snakemake's params trigger then reruns no other run when a row or a seed is added."""
    from .config.rows import chain

    run = next(r for r in runs if r.run_id == run_id)
    names = {r.name for r in chain(getattr(p, section).rows, run.row)}
    raw = p.raw[section]
    return {section: {**raw, "rows": [r for r in raw["rows"] if r["name"] in names], "seeds": [run.seed]}}


@dataclass(frozen=True)
class RunFolders:
    """Where a track's training runs live, the same for every track: the folder its params
    section's out_dir names, one folder per run id in it, final.json written last. The track
    names the section (its own stages.py), so only the track decides where its files go."""

    section: str  # the params section holding out_dir (train, lm, vision)

    def root(self, p) -> Path:
        """The folder of the training runs' folders (kernattn sync-mlflow walks it)."""
        return Path(getattr(p, self.section).out_dir)

    def run_dir(self, p, run_id: str) -> Path:
        """A training run's folder (checkpoint, metrics.jsonl, lr.npy, final.json)."""
        return self.root(p) / run_id

    def final_output(self, p, run_id: str) -> str:
        return str(self.run_dir(p, run_id) / "final.json")
