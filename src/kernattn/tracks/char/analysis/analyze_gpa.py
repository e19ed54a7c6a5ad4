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
import dataclasses
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
@dataclasses.dataclass
class BankReading:
    """The banks at init and trained, their bumps, the trained kernels and each head's strength."""
    shapes: dict[str, np.ndarray]   # "init" | "trained" -> [layers, heads, lags]
    bumps: dict[str, list]          # "init" | "trained" -> per layer, per head: the bump or None
    kernels: pd.DataFrame
    strength: np.ndarray            # [layers, heads]
    mean_g: np.ndarray              # [layers, heads]: G averaged over the lags the model uses


@dataclasses.dataclass
class SampledText:
    """The sampled streams and the histogram of their newline separations."""
    per_stream: int
    streams: np.ndarray
    prompt_starts: np.ndarray
    per_stream_hist: np.ndarray
    overflow: int
    counts: np.ndarray
    peak: int | None
    peak_ci: tuple | None


@dataclasses.dataclass
class HeadRemoval:
    """Each head's cost when zeroed and when replaced by its mean, and the weakest-head readings."""
    base: float
    costs: np.ndarray
    mean_costs: np.ndarray
    claim: dict
    mean_claim: dict
    ranks: np.ndarray


def analyze(params, spec: RunSpec, params_file: str = "params.yaml") -> dict:
    """Run every analysis of one GPA run and write its folder; returns summary.json's content."""
    from ....engine import resolve_device
    from ..data import load_data

    t_start = time.perf_counter()
    timings: dict[str, float] = {}
    mp, tp = params.model, params.train
    if tp.threads is not None:
        torch.set_num_threads(tp.threads)
    device = resolve_device(tp.device)
    data = load_data(params.data.out_dir, mp.context)
    nl = newline_id(params.data.out_dir)
    chars = load_vocab(params.data.out_dir)
    init, model, final = load_models(params, spec, data, device, params_file)
    timings["load_s"] = time.perf_counter() - t_start
    t0 = time.perf_counter()
    read = read_banks(init, model, params)
    timings["banks_s"] = time.perf_counter() - t0
    t0 = time.perf_counter()
    text = sample_text(model, data, params, device, nl)
    timings["sample_s"] = time.perf_counter() - t0
    t0 = time.perf_counter()
    removal = remove_heads(model, data, params, device, read.strength)
    timings["heads_s"] = time.perf_counter() - t0
    head_rows = _head_rows(read, removal, params.analysis.strength_threshold)
    summary = _summary(params, spec, final, read, text, removal, head_rows, nl)
    with atomic_dir(analysis_dir(params, spec.run_id)) as tmp:
        t0 = time.perf_counter()
        _write_tables(tmp, read, text, head_rows, params, chars)
        _figures(tmp, spec, params, read.shapes, read.bumps, text.counts, text.peak)
        timings["write_s"] = time.perf_counter() - t0
        timings["total_s"] = time.perf_counter() - t_start  # imports and process start-up excluded
        summary["timings"] = timings
        (tmp / SUMMARY).write_text(json.dumps(summary, indent=2) + "\n")
    return summary


def read_banks(init, model, params) -> BankReading:
    """1. The banks' shapes at init and trained, their bumps, the kernels' parameters, strengths."""
    a, mp = params.analysis, params.model
    n_lags = mp.context + 1
    shapes = {"init": banks.bank_shapes(init, n_lags), "trained": banks.bank_shapes(model, n_lags)}
    bumps = {stage: [[_bump(g, a.bump_min_lag) for g in layer] for layer in s] for stage, s in shapes.items()}
    kernels = pd.DataFrame(banks.kernel_parameters(model))
    bias = banks.bank_biases(model, mp.context)  # the lags the model uses
    return BankReading(shapes, bumps, kernels, banks.strength(bias), shapes["trained"][..., : mp.context].mean(-1))


def sample_text(model, data, params, device, nl: int) -> SampledText:
    """2. Sampled text and its newline histogram (per stream, so that the peak can be bootstrapped)."""
    a, mp = params.analysis, params.model
    per_stream = math.ceil(a.sample_chars / a.streams)
    prompts, prompt_starts = _prompts(data.val, a.streams, mp.context, a.sample_seed)
    gen = torch.Generator(device=device).manual_seed(a.sample_seed)
    streams = sample_streams(model, prompts.to(device), per_stream, temperature=a.temperature,
                             generator=gen).cpu().numpy()
    per_stream_hist, overflow = newlines.stream_histograms(streams, nl, a.max_separation)
    counts = per_stream_hist.sum(0)
    return SampledText(per_stream, streams, prompt_starts, per_stream_hist, overflow, counts,
                       newlines.main_peak(counts), newlines.bootstrap_peak(per_stream_hist, a.bootstrap, a.sample_seed))


def remove_heads(model, data, params, device, strength: np.ndarray) -> HeadRemoval:
    """3. Head removal: each head zeroed, and replaced by its mean; the weakest head's readings."""
    threshold = params.analysis.strength_threshold
    base, costs, mean_costs = removal_costs(model, data, params, device)
    return HeadRemoval(base, costs, mean_costs, heads.weakest_head_summary(strength, costs, threshold),
                       heads.weakest_head_summary(strength, mean_costs, threshold), heads.cost_ranks(costs))


def _head_rows(read: BankReading, removal: HeadRemoval, threshold: float) -> list[dict]:
    """heads.csv: one row per head, its strength, mean G and removal costs."""
    strength, mean_g, base = read.strength, read.mean_g, removal.base
    costs, mean_costs, ranks = removal.costs, removal.mean_costs, removal.ranks
    n_layer, n_head = strength.shape
    return [{"layer": l + 1, "head": h + 1, "strength": float(strength[l, h]), "mean_G": float(mean_g[l, h]),
             "weak": bool(strength[l, h] < threshold), "loss_removed": float(base + costs[l, h]),
             "cost": float(costs[l, h]), "cost_rank": int(ranks[l, h]),
             "loss_mean_ablated": float(base + mean_costs[l, h]), "cost_mean": float(mean_costs[l, h])}
            for l in range(n_layer) for h in range(n_head)]


def _summary(params, spec: RunSpec, final: dict, read: BankReading, text: SampledText, removal: HeadRemoval,
             head_rows: list[dict], nl: int) -> dict:
    """summary.json but its timings: every number the report shows."""
    a, mp = params.analysis, params.model
    n_layer, n_head = read.strength.shape
    streams, counts, peak = text.streams, text.counts, text.peak
    return {
        "run_id": spec.run_id, "row": spec.row, "seed": spec.seed, "variant": spec.variant,
        "options": spec.options, "label": spec.label, "scale": params.scale, "params_digest": params.digest(),
        "fingerprint": final.get("fingerprint"), "context": mp.context, "n_layer": n_layer, "n_head": n_head,
        "combine": spec.options.get("combine", "add"),
        "bump_min_lag": a.bump_min_lag,
        "bumps": read.bumps,
        "first_layer_bumps": [b["lag"] if b else None for b in read.bumps["trained"][0]],
        "generated": {
            "streams": a.streams, "chars_per_stream": text.per_stream, "chars": int(streams.size),
            "temperature": a.temperature, "sample_seed": a.sample_seed, "prompt_chars": mp.context,
            "newlines": int((streams == nl).sum()), "separations": int(text.per_stream_hist.sum()) + text.overflow,
            "peak": peak, "peak_count": int(counts[peak]) if peak is not None else 0,
            "peak_ci": list(text.peak_ci) if text.peak_ci else None, "bootstrap": a.bootstrap,
            "lag1_count": int(counts[1]), "overflow": text.overflow,
        },
        "heads": {"base_loss": removal.base, "final_val_loss": final.get("val_loss"), "per_head": head_rows,
                  **removal.claim,
                  "mean_ablation": {k: removal.mean_claim[k] for k in ("spearman_rho", "spearman_p", "weakest",
                                                                       "weakest_is_cheapest", "flagged_among_cheapest")}},
    }


def _write_tables(folder: Path, read: BankReading, text: SampledText, head_rows: list[dict], params, chars) -> None:
    """The folder's CSV files and samples.jsonl."""
    n_lags = params.model.context + 1
    n_layer, n_head = read.strength.shape
    names = [f"L{l + 1}H{h + 1}" for l in range(n_layer) for h in range(n_head)]
    for stage, s in read.shapes.items():
        df = pd.DataFrame(s.reshape(-1, n_lags).T, columns=names)
        df.insert(0, "lag", np.arange(n_lags))
        df.to_csv(folder / f"banks_{stage}.csv", index=False, float_format="%.8g")
    read.kernels.to_csv(folder / "kernels.csv", index=False, float_format="%.8g")
    pd.DataFrame([{"stage": stage, "layer": l + 1, "head": h + 1, **(b or {"lag": None})}
                  for stage, grid in read.bumps.items() for l, row in enumerate(grid) for h, b in enumerate(row)]
                 ).to_csv(folder / "bumps.csv", index=False)
    pd.DataFrame(head_rows).to_csv(folder / "heads.csv", index=False)
    pd.DataFrame({"separation": np.arange(params.analysis.max_separation + 1), "count": text.counts}).to_csv(
        folder / "newlines_generated.csv", index=False)
    with open(folder / "samples.jsonl", "w", encoding="utf-8") as fh:
        for k, (start, ids) in enumerate(zip(text.prompt_starts, text.streams)):
            fh.write(json.dumps({"stream": k, "prompt_start": int(start), "text": decode(ids, chars)}) + "\n")


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
