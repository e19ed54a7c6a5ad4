"""GKA's bandwidth at initialisation: the ablation's readings (issue 17, part 2; gka-paper).

    kernattn gka-init-study --params params.yaml [--scale S]

For every run of the study (studies.gka_init.rows x inits x seeds, of the char, LM and vision
tracks, trained by kernattn train-gka-init), from its folder <studies.out_dir>/gka_init/runs/<run>/:
- the final validation loss (final.json), and the ViT's top-1 (raw and EMA weights);
- sigma per head over training: at step 0 the bandwidths the run started with, then the
  `sigma_L<l>H<h>` fields of its val lines (steps > 0). Step 0 is rebuilt, not read: the
  median rule sets sigma on the first training batch, after the step-0 evaluation;
- at the start and at the end, per layer and head, the mean weight a token gives itself
  (kernattn.attention.gka_readings.mean_diagonal_weight) on the first batch of the track's fixed
  validation set, and at the start the gradient norms reaching log sigma and W_O on the first
  training batch (gka_init.gradient_norms). The start is the model the run began with: the
  same seed and constructor, the median rule applied on the same first training batch.
Writes <studies.out_dir>/gka_init/summary.json (atomically). The report makes the intervals
and the verdict (kernattn.report.verdicts).

The claim 003-gka-init-sigma is held to every initialisation its statement names by the
report (kernattn.studies.gka_init.report.named_init_readings).
"""

from __future__ import annotations

import argparse
import json
import re
from pathlib import Path

from ...config import params_from_args
from ...io import atomic_write_json, read_lines
from ..common import SUMMARY, root
from .stages import gka_run_dir, gka_runs
from .train import gka_init_track

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


def start_readings(track, device) -> dict:
    """The run's model at step 0 (module docstring): sigma, diagonal weight, gradient norms,
    and the probe input the diagonal weight was measured on (`probe`)."""
    import torch

    from ...attention import gka_readings as gka_init
    from ...engine import seed_everything

    seed_everything(track.seed)  # as the engine does before build: the same initial weights
    track.build(device)
    model = track.model
    first = track.batch(0, 0)
    model.train()
    with torch.no_grad():
        model(first[0])  # the first training forward: the median rule sets sigma here (others: no-op)
    grads = gka_init.gradient_norms(model, lambda: track.loss(model, first))
    x = track.probe_input()  # the fixed validation batch, as the report's identity rule reads it
    return {"sigma": gka_init.sigmas(model), "diag": _diag(model, x), "probe": x,
            "grad_log_sigma": [g["log_sigma_norm"] for g in grads], "grad_w_o": [g["w_o_norm"] for g in grads]}


def _diag(model, x) -> list[list[float]]:
    from ...attention import gka_readings as gka_init

    model.eval()
    return gka_init.mean_diagonal_weight(model, lambda: model(x)).tolist()


def track_metrics(track_name: str, final: dict) -> dict:
    """What the report compares per init: the final validation loss (nats per character or
    token, or the ViT's cross-entropy) and, for the ViT, top-1 of the raw and the EMA weights."""
    out = {"val_loss": final["val_loss"]}
    if track_name == "vision":
        out |= {"top1": final["top1"], "top1_ema": final["top1_ema"]}
    return out


def read_run(params, run_id: str, run, device, params_file: str) -> dict:
    from ...attention.gka_readings import gka_modules, sigmas
    from ...engine.rundir import load_trained

    track = gka_init_track(params, run)
    start = start_readings(track, device)
    # the trained weights into a fresh build (what start_readings left is not read again)
    final = load_trained(track, device, cmd=f"kernattn train-gka-init --params {params_file} --scale {params.scale} "
                                            f"--run {track.run_id}")
    model = track.model
    curve = [{"step": 0, "sigma": start["sigma"]}]
    curve += [c for c in sigma_curve(gka_run_dir(params) / run_id / "metrics.jsonl") if c["step"] > 0]
    spec = run.spec
    return {"run_id": run_id, "track": run.track, "row": spec.row, "init": run.label,
            "init_sigma": spec.options["init_sigma"], "seed": spec.seed, **track_metrics(run.track, final),
            "steps": final["steps"], "mlflow_run_id": final.get("mlflow_run_id"),
            "d_head": gka_modules(model)[0].d_head, "sigma_curve": curve, "sigma_end": sigmas(model),
            "diag_start": start["diag"], "diag_end": _diag(model, start["probe"]),
            "grad_log_sigma_start": start["grad_log_sigma"], "grad_w_o_start": start["grad_w_o"]}


def read_study(params, params_file: str = "params.yaml") -> dict:
    from ...config.studies import init_label, init_rows_not_trained
    from ...engine import resolve_device

    device = resolve_device("cpu")
    runs = [read_run(params, run_id, run, device, params_file) for run_id, run in gka_runs(params).items()]
    return {"study": "gka_init", "scale": params.scale, "params_digest": params.digest(),
            "inits": [init_label(v) for v in params.studies.gka_init.inits],
            "rows": [f"{r.track}:{r.row}" for r in params.studies.gka_init.rows],
            "rows_not_trained": init_rows_not_trained(params), "runs": runs}


def run(args: argparse.Namespace) -> int:
    params = params_from_args(args)  # a ParamsError is one line (cli.main)
    summary = read_study(params, args.params)
    out = root(params) / "gka_init" / SUMMARY
    atomic_write_json(out, summary)
    by_init: dict[tuple[str, str], list[float]] = {}
    for r in summary["runs"]:
        by_init.setdefault((r["track"], r["init"]), []).append(r["val_loss"])
    print("kernattn gka-init-study: final val loss " + "; ".join(
        f"{t} {k}: {sum(v) / len(v):.4f} ({len(v)} seeds)" for (t, k), v in by_init.items()) + f"; wrote {out}")
    return 0
