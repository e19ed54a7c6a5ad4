"""Removing a weak head from one trained GPA run, then fine-tuning (issue 17, part 3; gpa-long).

    kernattn prune --params params.yaml [--scale S] --run <gpa row>-s<seed> [--nproc N [--nodes M]]

Reads the main DAG's run train.out_dir/<run>/ (final.json, ckpt.pt) and the corpus, and:
1. picks the heads: those whose bank strength (logit span over the lags the model uses,
   kernattn.tracks.char.analysis.banks.strength) is below analysis.strength_threshold, or when none is,
   the studies.prune.k weakest (kernattn.studies.prune.heads.heads_to_remove);
2. measures every head's zero- and mean-ablation cost on the fixed validation windows
   (kernattn.tracks.char.analysis.analyze_gpa.removal_costs, as analyze-gpa does);
3. fine-tunes copies of the trained model through the engine (data-parallel on --nproc ranks, as
   the trainings: engine/launch.py; every rank measures step 2, rank 0 alone writes step 5) for
   studies.prune.steps steps at the constant rate studies.prune.lr (null: train.lr x
   train.min_lr_ratio), the same batches for both (a generator seeded from the run's seed and
   "prune", not the training order): `pruned` with the heads removed (their output zeroed before
   W_O for the whole run, kernattn.studies.prune.heads.removed) and `control` without
   removal. Their folders are <studies.out_dir>/prune/<run>/{pruned,control}/ (resumable, MLflow
   runs <run>-pruned and <run>-control). The engine's step-0 evaluation of `control` is the loss
   before removal, of `pruned` the loss right after it; their final ones are after fine-tuning;
   A third copy, `random`, has as many other heads removed, drawn at random (seeded from the
   run's seed): the control that shows whether bank strength predicts removability;
4. records gpa-long's premise (`premise_met`, `premise_why`: is any bank below the threshold,
   and the weakest strength);
5. writes <studies.out_dir>/prune/<run>/summary.json (kernattn.studies.prune.heads.removal_record,
   the ablation costs, params and FLOPs saved), atomically, last.
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import json

from ...config import Params, find_run, params_from_args
from ...engine import ONE_PROCESS, derive_seed, train_run
from ...engine.options import add_world_options
from ...io import atomic_write_json, read_lines
from ...tracks.char.track import CharTrack
from ..common import SUMMARY, study_params, study_run, trained_model
from .stages import ARMS, prune_dir, prune_runs



def fine_tune_lr(params: Params) -> float:
    p = params.studies.prune
    return p.lr if p.lr is not None else params.train.lr * params.train.min_lr_ratio


class PruneTrack(CharTrack):
    """The char track continuing a trained model: its weights loaded, `remove` heads removed
    (the pruned and random arms; none in the control), a constant learning rate,
    studies.prune.steps steps."""

    def __init__(self, params: Params, spec, arm: str, remove: list[tuple[int, int]], base_state: dict,
                 base_fingerprint: str | None):
        run_spec = dataclasses.replace(spec, run_id=f"{spec.run_id}-{arm}", label=f"{spec.label}, {arm}")
        super().__init__(params, run_spec)
        self.arm, self.remove, self.base_state, self.base_fingerprint = arm, list(remove), base_state, base_fingerprint
        self.run_dir = prune_dir(params, spec.run_id) / arm
        steps = params.studies.prune.steps
        self.max_steps, self.eval_every = steps, steps  # evaluations: at step 0 and at the end
        self.checkpoint_every = min(params.train.checkpoint_every, steps)
        self.log_every = max(1, steps // 10)
        self.lr = fine_tune_lr(params)
        self._hooks = contextlib.ExitStack()

    def fingerprint_config(self) -> dict:
        return {**super().fingerprint_config(), "prune": {
            "arm": self.arm, "remove": [list(h) for h in self.remove], "steps": self.max_steps, "lr": self.lr,
            "base_fingerprint": self.base_fingerprint}}

    def identity(self) -> dict:
        return {**super().identity(), "arm": self.arm, "removed": [list(h) for h in self.remove]}

    def build(self, device, layout=ONE_PROCESS) -> None:
        from .heads import removed

        super().build(device, layout)
        self.model.load_state_dict(self.base_state)
        self.batch_gen.manual_seed(derive_seed(self.seed, "prune"))
        if self.remove:  # pruned and random arms; hooks, not weights: the checkpoint keeps the model's shapes
            self._hooks.enter_context(removed(self.model, self.remove))

    def rate(self, step: int) -> float:
        return self.lr  # constant: CharTrack.set_lr applies it with the groups' scales


def val_losses(run_dir) -> tuple[float, float]:
    """(step-0 validation loss, final validation loss) of an engine run folder."""
    lines = [json.loads(x) for x in read_lines(run_dir / "metrics.jsonl")]
    final = json.loads((run_dir / "final.json").read_text())
    start = next(x["loss"] for x in lines if x.get("split") == "val" and x["step"] == 0)
    return float(start), float(final["val_loss"])


def random_heads(shape: tuple[int, int], exclude: list[tuple[int, int]], seed: int) -> list[tuple[int, int]]:
    """The random-head control: as many heads as `exclude` holds, drawn uniformly without
    replacement among the others (a generator seeded from the run's seed and "prune-random"),
    in (layer, head) order; [] when no other head exists."""
    import torch

    others = [(l, h) for l in range(shape[0]) for h in range(shape[1]) if (l, h) not in set(exclude)]
    gen = torch.Generator().manual_seed(derive_seed(seed, "prune-random"))
    pick = torch.randperm(len(others), generator=gen)[:len(exclude)].tolist()
    return sorted(others[i] for i in pick)


def premise(strength, threshold: float) -> tuple[bool, str]:
    """(met, why) of gpa-long's premise: a bank "effectively zero", i.e. below the threshold."""
    import numpy as np

    s = np.asarray(strength, dtype=np.float64)
    weakest = np.unravel_index(int(np.argmin(s)), s.shape)
    where = f"L{weakest[0] + 1}H{weakest[1] + 1}"
    below = int((s < threshold).sum())
    if below:
        return True, f"{below} bank(s) below threshold {threshold:g}; weakest {s.min():.3g} ({where})"
    return False, f"no bank below threshold {threshold:g}; weakest {s.min():.3g} ({where})"


def _fine_tune(params: Params, spec, final: dict, state: dict, arms: dict, progress: bool, world, device) -> int:
    """Each arm through the engine; on several ranks (kernattn prune --nproc N) one process group
    serves the three, each rank training its share of every arm's batches. A SIGTERM that
    arrives as an arm ends (after its last step) stops the command before the next arm: 143,
    and the rerun finds the arms done so far finished."""
    from ...engine import EXIT_SIGTERM, dist
    from ...engine.signals import StopSignal

    tracked = study_params(params, None, str(prune_dir(params, spec.run_id)))  # the studies' MLflow experiment
    with dist.process_group(world, device, params.train.dist_timeout_s), StopSignal() as stop:
        for arm, heads in arms.items():
            if dist.any_rank(stop.requested, world, device):
                if world.main:
                    print(f"kernattn prune: {spec.run_id}: stopped before arm {arm} (SIGTERM); rerun the command "
                          f"to go on", flush=True)
                return EXIT_SIGTERM
            code = train_run(PruneTrack(tracked, spec, arm, heads, state, final.get("fingerprint")),
                             stale="archive", progress=progress)
            if code:
                return code
    return 0


def prune_one(params: Params, run_id: str, params_file: str = "params.yaml", progress: bool = False) -> int:
    """The stage for one run (module docstring); returns the exit status."""
    from ...engine import dist, resolve_device
    from ...tracks.char.analysis import banks, heads
    from . import heads as prune
    from ...tracks.char.analysis.analyze_gpa import removal_costs

    spec = find_run(params, run_id)
    world = dist.world_from_env()  # torchrun's ranks (kernattn prune --nproc N), else one process
    device = dist.device_of(world, resolve_device(params.train.device))
    model, final, data = trained_model(params, spec, device, params_file)
    strength = banks.strength(banks.bank_biases(model, params.model.context))
    threshold = params.analysis.strength_threshold
    remove = prune.heads_to_remove(strength, threshold, params.studies.prune.k)
    control_heads = random_heads(tuple(strength.shape), remove, spec.seed)
    # Every rank measures the ablations (the same numbers; rank 0's are written): no rank waits
    # idle for another's evaluation at a collective, and the costs are measured before any
    # training changes the process's matmul precision (Loop sets TF32 on CUDA).
    base, zero_costs, mean_costs = removal_costs(model, data, params, device)
    state = {k: v.detach().cpu().clone() for k, v in model.state_dict().items()}
    arms = {"control": [], "pruned": remove, "random": control_heads}
    code = _fine_tune(params, spec, final, state, arms, progress, world, device)
    if code or not world.main:  # rank 0 alone writes the summary
        return code
    (after_removal, after_ft), (before, control), (random_removal, random_ft) = (
        val_losses(prune_dir(params, run_id) / a) for a in ARMS)
    record = prune.removal_record(model, remove, {
        "loss_before": before, "loss_after_removal": after_removal, "loss_after_fine_tune": after_ft,
        "loss_control_fine_tune": control}, params.studies.prune.steps)
    met, why = premise(strength, threshold)
    summary = {"run_id": run_id, "row": spec.row, "seed": spec.seed, "label": spec.label, "scale": params.scale,
               "params_digest": params.digest(), "fingerprint": final.get("fingerprint"),
               "final_val_loss": final.get("val_loss"), "ablation_base_loss": base, "lr": fine_tune_lr(params),
               "threshold": threshold, "k": params.studies.prune.k,
               "flagged_weak": bool((strength < threshold).any()), "premise_met": met, "premise_why": why,
               "weakest_strength": float(strength.min()),
               **record,
               "zero_ablation": [float(zero_costs[l, h]) for l, h in remove],
               "mean_ablation": [float(mean_costs[l, h]) for l, h in remove],
               "strength": [float(strength[l, h]) for l, h in remove],
               "random_removed": [{"layer": l + 1, "head": h + 1} for l, h in control_heads],
               "random_strength": [float(strength[l, h]) for l, h in control_heads],
               "loss_random_after_removal": random_removal, "loss_random_after_fine_tune": random_ft,
               "cost_random_after_removal": random_removal - before, "cost_random_after_fine_tune": random_ft - control,
               "heads": {"strength": strength.tolist(), "zero_cost": zero_costs.tolist(),
                         "mean_cost": mean_costs.tolist(),
                         "zero_mean_rho": heads.rank_correlation(zero_costs, mean_costs)[0]}}
    atomic_write_json(prune_dir(params, run_id) / SUMMARY, summary)
    print(f"kernattn prune: {run_id}: {why}; removed {record['removed']}; loss {before:.4f} -> {after_removal:.4f} "
          f"(removed) -> {after_ft:.4f} (fine-tuned), control {control:.4f}; random heads {control_heads}: "
          f"{random_removal:.4f} -> {random_ft:.4f}; params saved {record['params_saved']:,} "
          f"({record['params_saved_fraction']:.1%})")
    return 0


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--run", required=True, metavar="RUN_ID", help="a GPA run of the prune study")
    parser.add_argument("--no-progress", action="store_true", help="no progress bar")
    add_world_options(parser, "fine-tune")


def run(args: argparse.Namespace) -> int:
    params = params_from_args(args)  # a ParamsError is one line (cli.main)
    run_id = study_run(params, {r: r for r in prune_runs(params)}, "prune", args.run)
    return prune_one(params, run_id, args.params, progress=not args.no_progress)
