"""Read one trained GPA run's kernel banks the way gpa-long does (sections 3.1-3.2 and 4).

    kernattn analyze-gpa --params params.yaml [--scale S] --run <run_id>

Reads the run folder (train.out_dir/<run_id>: final.json, ckpt.pt) and the prepared corpus,
and writes <analysis.out_dir>/<run_id>/ as one atomic folder:

  banks_init.csv, banks_trained.csv   G(lag) at lags 0..context (the model uses 0..context-1),
                                      one column per bank, L<layer>H<head> (from 1)
  kernels.csv        trained per-kernel parameters: layer, head, kernel, sigma, length,
                     alpha, tau, period = pi tau (kernattn.tracks.char.analysis.banks)
  bumps.csv          per bank, at init and trained: the bump (lag, height, prominence)
  heads.csv          per head: strength (logit span of the bank), mean G, weak (< threshold),
                     validation loss with the head removed (zeroed), its cost and cost rank,
                     and the loss and cost with the head replaced by its mean (mean-ablation)
  newlines_generated.csv   separation, count: the sampled text's histogram
  samples.jsonl      the sampled streams: {"stream", "prompt_start", "text"} per line
  banks_init.png (Figure 3), banks_trained.png (Figure 4), banks_layer1.png (Figure 5a),
  newlines_generated.png
  summary.json       every number above that the report shows, and the stage's timings

Sampling (kernattn.tracks.char.analysis.sampling): analysis.streams streams of
ceil(analysis.sample_chars / streams) characters, each prompted with a random window of
`context` characters of the validation split (positions drawn by numpy's generator seeded
with analysis.sample_seed), sampled at analysis.temperature with a torch generator seeded
with analysis.sample_seed: the same prompts and draws for every run. Head removal costs
(kernattn.tracks.char.analysis.heads) are measured on the validation windows training evaluates on.
The base loss of that evaluation equals final.json's val_loss (same windows, same weights:
exactly on CPU; on CUDA up to the rounding of bf16 and of torch.compile, which training
used and this stage does not); both are reported side by side.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import math
import time
from pathlib import Path

import numpy as np
import pandas as pd
import torch

from ....config import RunSpec, find_run, params_from_args
from ..data import decode, load_vocab
from ....io import atomic_dir
from ..stages import SUMMARY, analysis_dir, run_dir
from . import banks, heads, newlines, plots
from .corpus import newline_id
from .sampling import sample_streams



def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--run", required=True, metavar="RUN_ID", help="a GPA run of the matrix, '<row>-s<seed>'")


def run(args: argparse.Namespace) -> int:
    from ....errors import UsageError

    params = params_from_args(args)  # a ParamsError is one line (cli.main)
    spec = find_run(params, args.run)
    if spec.variant != "gpa":
        raise UsageError(f"run {spec.run_id} has attention {spec.variant!r}, not gpa: it has no kernel banks")
    summary = analyze(params, spec, params_file=args.params)
    first = ", ".join("—" if b is None else str(b["lag"]) for b in summary["bumps"]["trained"][0])
    print(f"kernattn analyze-gpa: {spec.run_id}: first-layer bumps at lags {first}; generated-text peak "
          f"{summary['generated']['peak']}; strength-cost rho {_fmt(summary['heads']['spearman_rho'])}; "
          f"{summary['timings']['total_s']:.1f} s; wrote {analysis_dir(params, spec.run_id) / SUMMARY}")
    return 0


def _fmt(x) -> str:
    return "—" if x is None else f"{x:.2f}"


# ----------------------------------------------------------------------------- inputs
def load_models(params, spec: RunSpec, data, device, params_file: str = "params.yaml"):
    """(model at initialisation, trained model, final.json) of a finished run."""
    from ....engine.rundir import load_finished
    from ..model import GPT
    from ....engine import seed_everything

    folder = run_dir(params, spec.run_id)
    final, ckpt = load_finished(folder, f"kernattn train --params {params_file} --scale {params.scale} "
                                        f"--run {spec.run_id}")
    # The init is the training stage's own: same seed, same constructor (banks: gpa-long's init).
    seed_everything(spec.seed)
    init = GPT(data.vocab_size, params.model, spec.variant, spec.options).to(device).eval()
    trained = GPT(data.vocab_size, params.model, spec.variant, spec.options)
    trained.load_state_dict(ckpt["model"])
    return init, trained.to(device).eval(), final


def _prompts(val: torch.Tensor, n: int, context: int, seed: int) -> tuple[torch.Tensor, np.ndarray]:
    starts = np.random.default_rng(seed).integers(0, val.numel() - context, size=n)
    offsets = torch.arange(context)
    return val[torch.from_numpy(starts)[:, None] + offsets].long(), starts


# ----------------------------------------------------------------------------- the analysis
def analyze(params, spec: RunSpec, params_file: str = "params.yaml") -> dict:
    """Run every analysis of one GPA run and write its folder; returns summary.json's content."""
    from ....engine import resolve_device
    from ..data import load_data

    t_start = time.perf_counter()
    timings: dict[str, float] = {}
    a, mp, tp = params.analysis, params.model, params.train
    if tp.threads is not None:
        torch.set_num_threads(tp.threads)
    device = resolve_device(tp.device)
    data = load_data(params.data.out_dir, mp.context)
    nl = newline_id(params.data.out_dir)
    chars = load_vocab(params.data.out_dir)
    init, model, final = load_models(params, spec, data, device, params_file)
    timings["load_s"] = time.perf_counter() - t_start

    # ---- 1. shapes, parameters, bumps
    t0 = time.perf_counter()
    n_lags = mp.context + 1
    shapes = {"init": banks.bank_shapes(init, n_lags), "trained": banks.bank_shapes(model, n_lags)}
    bumps = {stage: [[_bump(g, a.bump_min_lag) for g in layer] for layer in s] for stage, s in shapes.items()}
    kernels = pd.DataFrame(banks.kernel_parameters(model))
    bias = banks.bank_biases(model, mp.context)  # the lags the model uses
    strength = banks.strength(bias)
    mean_g = shapes["trained"][..., : mp.context].mean(-1)
    timings["banks_s"] = time.perf_counter() - t0

    # ---- 2. sampled text and its newline histogram
    t0 = time.perf_counter()
    per_stream = math.ceil(a.sample_chars / a.streams)
    prompts, prompt_starts = _prompts(data.val, a.streams, mp.context, a.sample_seed)
    gen = torch.Generator(device=device).manual_seed(a.sample_seed)
    streams = sample_streams(model, prompts.to(device), per_stream, temperature=a.temperature,
                             generator=gen).cpu().numpy()
    per_stream_hist, overflow = newlines.stream_histograms(streams, nl, a.max_separation)
    gen_counts = per_stream_hist.sum(0)
    gen_peak = newlines.main_peak(gen_counts)
    gen_ci = newlines.bootstrap_peak(per_stream_hist, a.bootstrap, a.sample_seed)
    timings["sample_s"] = time.perf_counter() - t0

    # ---- 3. head removal: zeroed, and replaced by its mean
    t0 = time.perf_counter()
    base, costs, mean_costs = removal_costs(model, data, params, device)
    claim = heads.weakest_head_summary(strength, costs, a.strength_threshold)
    mean_claim = heads.weakest_head_summary(strength, mean_costs, a.strength_threshold)
    ranks = heads.cost_ranks(costs)
    timings["heads_s"] = time.perf_counter() - t0

    # ---- outputs
    n_layer, n_head = strength.shape
    names = [f"L{l + 1}H{h + 1}" for l in range(n_layer) for h in range(n_head)]
    head_rows = [{"layer": l + 1, "head": h + 1, "strength": float(strength[l, h]), "mean_G": float(mean_g[l, h]),
                  "weak": bool(strength[l, h] < a.strength_threshold), "loss_removed": float(base + costs[l, h]),
                  "cost": float(costs[l, h]), "cost_rank": int(ranks[l, h]),
                  "loss_mean_ablated": float(base + mean_costs[l, h]), "cost_mean": float(mean_costs[l, h])}
                 for l in range(n_layer) for h in range(n_head)]
    summary = {
        "run_id": spec.run_id, "row": spec.row, "seed": spec.seed, "variant": spec.variant,
        "options": spec.options, "label": spec.label, "scale": params.scale, "params_digest": params.digest(),
        "fingerprint": final.get("fingerprint"), "context": mp.context, "n_layer": n_layer, "n_head": n_head,
        "combine": spec.options.get("combine", "add"),
        "bump_min_lag": a.bump_min_lag,
        "bumps": bumps,
        "first_layer_bumps": [b["lag"] if b else None for b in bumps["trained"][0]],
        "generated": {
            "streams": a.streams, "chars_per_stream": per_stream, "chars": int(streams.size),
            "temperature": a.temperature, "sample_seed": a.sample_seed, "prompt_chars": mp.context,
            "newlines": int((streams == nl).sum()), "separations": int(per_stream_hist.sum()) + overflow,
            "peak": gen_peak, "peak_count": int(gen_counts[gen_peak]) if gen_peak is not None else 0,
            "peak_ci": list(gen_ci) if gen_ci else None, "bootstrap": a.bootstrap,
            "lag1_count": int(gen_counts[1]), "overflow": overflow,
        },
        "heads": {"base_loss": base, "final_val_loss": final.get("val_loss"), "per_head": head_rows, **claim,
                  "mean_ablation": {k: mean_claim[k] for k in ("spearman_rho", "spearman_p", "weakest",
                                                               "weakest_is_cheapest", "flagged_among_cheapest")}},
    }
    with atomic_dir(analysis_dir(params, spec.run_id)) as tmp:
        t0 = time.perf_counter()
        for stage, s in shapes.items():
            df = pd.DataFrame(s.reshape(-1, n_lags).T, columns=names)
            df.insert(0, "lag", np.arange(n_lags))
            df.to_csv(tmp / f"banks_{stage}.csv", index=False, float_format="%.8g")
        kernels.to_csv(tmp / "kernels.csv", index=False, float_format="%.8g")
        pd.DataFrame([{"stage": stage, "layer": l + 1, "head": h + 1, **(b or {"lag": None})}
                      for stage, grid in bumps.items() for l, row in enumerate(grid) for h, b in enumerate(row)]
                     ).to_csv(tmp / "bumps.csv", index=False)
        pd.DataFrame(head_rows).to_csv(tmp / "heads.csv", index=False)
        pd.DataFrame({"separation": np.arange(a.max_separation + 1), "count": gen_counts}).to_csv(
            tmp / "newlines_generated.csv", index=False)
        with open(tmp / "samples.jsonl", "w", encoding="utf-8") as fh:
            for k, (start, ids) in enumerate(zip(prompt_starts, streams)):
                fh.write(json.dumps({"stream": k, "prompt_start": int(start), "text": decode(ids, chars)}) + "\n")
        _figures(tmp, spec, params, shapes, bumps, gen_counts, gen_peak)
        timings["write_s"] = time.perf_counter() - t0
        timings["total_s"] = time.perf_counter() - t_start  # imports and process start-up excluded
        summary["timings"] = timings
        (tmp / SUMMARY).write_text(json.dumps(summary, indent=2) + "\n")
    return summary


def removal_costs(model, data, params, device) -> tuple[float, np.ndarray, np.ndarray]:
    """(base loss, [layers, heads] costs of zeroing each head, of replacing it by its mean over
    the same validation windows)."""
    from ..data import evaluate, validation_starts

    mp, tp = params.model, params.train
    val = data.val.to(device)
    starts = validation_starts(data.val.numel(), mp.context, tp.eval_batches, tp.batch_size)
    use_bf16 = device.type == "cuda" and tp.dtype == "bfloat16"

    def autocast():
        return torch.autocast("cuda", dtype=torch.bfloat16) if use_bf16 else contextlib.nullcontext()

    def run():
        return evaluate(model, model, val, starts, mp.context, autocast)

    base, costs = heads.ablation_costs(model, run)
    _, mean_costs = heads.ablation_costs(model, run, means=heads.head_means(model, run))
    return base, costs, mean_costs


def _bump(g, min_lag: int) -> dict | None:
    b = banks.find_bump(g, min_lag)
    return b.as_dict() if b else None


def _figures(folder: Path, spec, params, shapes, bumps, gen_counts, gen_peak) -> None:
    what = f"{spec.run_id}, {spec.label} [scale {params.scale}]"
    plots.bank_init(shapes["init"], f"Kernel banks at initialisation (gpa-long Figure 3): {what}").savefig(
        folder / "banks_init.png", dpi=100)
    plots.bank_grid(shapes["trained"], f"Trained kernel banks, layers x heads (gpa-long Figure 4): {what}",
                    bumps["trained"]).savefig(folder / "banks_trained.png", dpi=100)
    fig = plots.new_figure(6, 3.8)
    ax = fig.subplots()
    plots.draw_banks(ax, shapes["trained"][0], bumps=bumps["trained"][0])
    ax.legend(fontsize=7)
    ax.set_title(plots.wrap(f"First-layer banks with their bumps (gpa-long Figure 5a): {what}"), fontsize=8)
    fig.savefig(folder / "banks_layer1.png", dpi=100)
    fig = plots.new_figure(6, 3.8)
    ax = fig.subplots()
    plots.draw_newline_histograms(ax, [("sampled text", gen_counts, gen_peak, "tab:orange")],
                                  min(len(gen_counts) - 1, 200))
    ax.set_title(plots.wrap(f"Newline separations in the sampled text: {what}"), fontsize=8)
    fig.savefig(folder / "newlines_generated.png", dpi=100)
