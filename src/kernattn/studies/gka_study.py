"""GKA's bandwidth at initialisation: the ablation's readings (issue 17, part 2; seed 003).

    kernattn gka-init-study --params params.yaml [--scale S]

For every run of the study (studies.gka_init.rows x inits x seeds, trained by kernattn
train-gka-init), from its folder <studies.out_dir>/gka_init/runs/<run>/:
- the final validation loss (final.json);
- sigma per head over training: at step 0 the bandwidths the run started with, then the
  `sigma_L<l>H<h>` fields of its val lines (steps > 0). Step 0 is rebuilt, not read: the
  median rule sets sigma on the first training batch, after the step-0 evaluation;
- at the start and at the end, per layer and head, the mean weight a token gives itself
  (kernattn.analysis.gka_init.mean_diagonal_weight) on the first batch of the fixed validation
  windows, and at the start the gradient norms reaching log sigma and W_O on the first
  training batch (gka_init.gradient_norms). The start is the model the run began with: the
  same seed and constructor, the median rule applied on the same first training batch.
Writes <studies.out_dir>/gka_init/summary.json (atomically). The report makes the intervals
and the verdict (kernattn.report.stats).
"""

from __future__ import annotations

import argparse
import json
import re
from pathlib import Path

from ..config import load_params
from ..io import atomic_write_json, read_lines
from . import SUMMARY, gka_run_dir, gka_runs, root, scale_options
from .train import GKAInitTrack, study_params, trained_model

HELP = "GKA init study: final loss per init, sigma per head over training, mean diagonal weight start/end"
SIGMA_KEY = re.compile(r"^sigma_L(\d+)H(\d+)$")


def sigma_curve(metrics_file: Path) -> list[dict]:
    """[{step, sigma: [layers][heads]}] from the val lines of metrics.jsonl that carry sigma."""
    out = []
    for line in read_lines(metrics_file):
        rec = json.loads(line)
        keys = sorted((tuple(map(int, m.groups())), v) for k, v in rec.items() if (m := SIGMA_KEY.match(k)))
        if rec.get("split") != "val" or not keys:
            continue
        n_layer, n_head = max(k[0] for k, _ in keys), max(k[1] for k, _ in keys)
        grid = [[None] * n_head for _ in range(n_layer)]
        for (layer, head), value in keys:
            grid[layer - 1][head - 1] = value
        out.append({"step": rec["step"], "sigma": grid})
    return out


def start_readings(track: GKAInitTrack, device) -> dict:
    """The run's model at step 0 (module docstring): sigma, diagonal weight, gradient norms."""
    import torch

    from ..analysis import gka_init
    from ..engine import seed_everything
    from ..train import windows

    seed_everything(track.seed)  # as the engine does before build: the same initial weights
    track.build(device)
    model = track.model
    x, y = track.batch(0, 0)
    model.train()
    with torch.no_grad():
        model(x)  # the first training forward: the median rule sets sigma here (others: no-op)
    grads = gka_init.gradient_norms(model, lambda: model.loss(x, y))
    return {"sigma": [b.attn.sigma.detach().tolist() for b in model.blocks],
            "diag": _diag(model, windows(track.val_data, track.val_starts[0], track.params.model.context)[0]),
            "grad_log_sigma": [g["log_sigma_norm"] for g in grads], "grad_w_o": [g["w_o_norm"] for g in grads]}


def _diag(model, x) -> list[list[float]]:
    from ..analysis import gka_init

    model.eval()
    return gka_init.mean_diagonal_weight(model, lambda: model(x)).tolist()


def read_run(params, run_id: str, spec, label: str, device, params_file: str) -> dict:
    from ..train import windows

    p = study_params(params, None, str(gka_run_dir(params)))
    track = GKAInitTrack(p, spec)
    start = start_readings(track, device)
    model, final, _ = trained_model(p, spec, device, params_file)
    x = windows(track.val_data, track.val_starts[0], params.model.context)[0]
    curve = [{"step": 0, "sigma": start["sigma"]}]
    curve += [c for c in sigma_curve(gka_run_dir(params) / run_id / "metrics.jsonl") if c["step"] > 0]
    return {"run_id": run_id, "row": spec.row, "init": label, "init_sigma": spec.options["init_sigma"],
            "seed": spec.seed, "val_loss": final["val_loss"], "steps": final["steps"],
            "mlflow_run_id": final.get("mlflow_run_id"), "d_head": params.model.d_model // params.model.n_head,
            "sigma_curve": curve, "sigma_end": [b.attn.sigma.detach().tolist() for b in model.blocks],
            "diag_start": start["diag"], "diag_end": _diag(model, x),
            "grad_log_sigma_start": start["grad_log_sigma"], "grad_w_o_start": start["grad_w_o"]}


def read_study(params, params_file: str = "params.yaml") -> dict:
    from ..train import resolve_device

    device = resolve_device("cpu")
    runs = [read_run(params, run_id, spec, label, device, params_file)
            for run_id, (label, spec) in gka_runs(params).items()]
    from ..config.studies import init_label

    return {"study": "gka_init", "scale": params.scale, "params_digest": params.digest(),
            "inits": [init_label(v) for v in params.studies.gka_init.inits],
            "rows": [f"{r.track}:{r.row}" for r in params.studies.gka_init.rows], "runs": runs}


def run(args: argparse.Namespace) -> int:
    params = load_params(args.params, args.scale)  # a ParamsError is one line (cli.main)
    summary = read_study(params, args.params)
    out = root(params) / "gka_init" / SUMMARY
    atomic_write_json(out, summary)
    by_init = {}
    for r in summary["runs"]:
        by_init.setdefault(r["init"], []).append(r["val_loss"])
    print("kernattn gka-init-study: final val loss " + "; ".join(
        f"{k}: {sum(v) / len(v):.4f} ({len(v)} seeds)" for k, v in by_init.items()) + f"; wrote {out}")
    return 0


def add_arguments(parser: argparse.ArgumentParser) -> None:
    scale_options(parser)
