"""A run's cooldown branched at a shorter budget: the budget sweep of issue 37.

    kernattn cooldown --params params.yaml [--scale S] --run <row>-s<seed>-b<budget> [--fresh] [--stale archive]

With train.schedule wsd the learning rate is held until a run's cooldown, so a run of
max_steps is, step for step and bit for bit, the run of any shorter budget B up to B's
cooldown start (cooldown_start(B)). The long run keeps its checkpoint there (keep-<step>.pt,
Track.keep_at); this stage starts a run folder of its own from that copy and trains the
cooldown to B through the engine, so the branch has every promise of a run (resume, SIGTERM,
final.json last, MLflow) and its fingerprint is that of a run of B steps trained from
scratch. Its metrics.jsonl starts with the long run's lines up to the branch point.
"""

from __future__ import annotations

import argparse

from ...config import params_from_args
from ...config.char import cooldown_start
from ...engine.checkpoint import keep_name
from ...engine.options import add_run_options, run_track
from ...engine.rundir import CKPT, METRICS, read_checkpoint
from ...errors import UsageError
from ...io import atomic_torch_save, atomic_write_text
from .stages import budget_runs, run_dir, split_budget_run_id
from .track import CharTrack


class CooldownTrack(CharTrack):
    """CharTrack at one of train.budgets, seeded from its long run's kept checkpoint."""

    command = "cooldown"

    def seed_run_dir(self, fingerprint: str, fp_config: dict) -> bool:
        trunk = run_dir(self.params, self.run.run_id)
        step = cooldown_start(self.budget, self.section.cooldown_fraction)
        src = trunk / keep_name(step)
        if not src.is_file():
            raise UsageError(f"{src}: no checkpoint kept at step {step}, where {self.run_id} branches off; train "
                             f"the run first (kernattn train --run {self.run.run_id}, with train.budgets listing "
                             f"{self.budget})")
        ckpt = read_checkpoint(src, f"retrain the run: kernattn train --run {self.run.run_id} --fresh")
        try:
            lines = (trunk / METRICS).read_text(encoding="utf-8").splitlines(keepends=True)
        except OSError as exc:
            raise UsageError(f"{trunk / METRICS}: unreadable ({exc}); retrain the run: kernattn train --run "
                             f"{self.run.run_id} --fresh") from None
        if len(lines) < ckpt["metrics_lines"]:
            raise UsageError(f"{trunk / METRICS}: {len(lines)} lines, its kept checkpoint counts "
                             f"{ckpt['metrics_lines']}; retrain the run with --fresh")
        # the branch's own identity: what a run of `budget` steps from scratch would carry; a
        # new MLflow run (not the long run's)
        ckpt.update(fingerprint=fingerprint, fingerprint_config=fp_config, mlflow_run_id=None)
        atomic_write_text(self.run_dir / METRICS, "".join(lines[:ckpt["metrics_lines"]]))
        atomic_torch_save(self.run_dir / CKPT, ckpt)
        return True


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--run", required=True, metavar="BRANCH_ID",
                        help="a run and one of train.budgets, '<row>-s<seed>-b<budget>' (e.g. rope-s0-b400)")
    add_run_options(parser)


def run(args: argparse.Namespace) -> int:
    from ...config import find_run

    params = params_from_args(args)
    if args.run not in budget_runs(params):
        known = ", ".join(budget_runs(params)[:6]) or "none: train.budgets is empty"
        raise UsageError(f"{params.path}: no budget branch {args.run!r} at scale {params.scale!r}; branches: {known}"
                         f"{' ...' if len(budget_runs(params)) > 6 else ''}")
    run_id, budget = split_budget_run_id(args.run)
    return run_track(CooldownTrack(params, find_run(params, run_id), budget), args)
